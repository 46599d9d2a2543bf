//! Who paid, in containers that come and go: every connection is named by the container
//! it came from, whenever the container started (before the tracer, while it runs) and
//! however briefly it lived (a `run --rm` that connects and exits), by the name its runtime
//! gave it; and the sum is the namespace's own TcpExtTCPFastOpenActive delta. With real
//! engines where they run here (a private dockerd, cgroupfs and systemd drivers; rootful
//! Podman), and with cgroups this test makes itself (what runtimes do underneath, and what
//! runs on every kernel of the VM matrix). The truth of which connection came from which
//! container is each client's own report of its source ports, never the tracer's.
//!
//! And the shipped DaemonSet (deploy/kubernetes/daemonset.yaml): its pod template, run as a
//! Pod by `podman kube play` with the image `cargo xtask dist` built, exports exactly what
//! the lab's namespaces counted; every manifest there passes Kubernetes' schema.
use crate::common;

use std::{
    collections::{BTreeMap, BTreeSet},
    net::SocketAddr,
    os::unix::fs::MetadataExt as _,
    path::{Path, PathBuf},
};

use common::{
    cgroups::Cgroups,
    docker::{CgroupDriver, Engine},
    kube, netns_inode,
    prometheus::{curl_get_in, web_config_files, Tls},
    Deltas, HookRun, TempDir, Tracer,
};
use serde_json::{json, Value};
use tfo_trace::{
    events::{Event, Outcome, Role},
    lab::{
        traffic::{ClientArgs, ServerArgs},
        Lab, LabConfig, Side,
    },
};

/// The burst test makes and removes 2,000 cgroups: every tracer on the host gets a record
/// of each in its cgroup ring (256 KiB, some 480 records), and one running beside it can
/// lose those of its own test's short-lived cgroups, which are gone before the walk of
/// the hierarchy that would name them (a one-shot cgroup then reads `unknown`). The tests
/// that check containers' names hold this shared; the burst holds it alone.
static CGROUP_BURST: std::sync::RwLock<()> = std::sync::RwLock::new(());

fn beside_the_burst() -> std::sync::RwLockReadGuard<'static, ()> {
    CGROUP_BURST.read().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// One way a container came to connect, and what the tracer made of its connections.
#[derive(Default)]
struct Case {
    /// Connections its clients tried, and those that succeeded.
    tried: u64,
    made: u64,
    right: u64,
    wrong: Vec<String>,
    unknown: u64,
}

/// Client events by the container each should name (from the clients' source ports):
/// per case, connections made, named right, named wrong (what they said) and unknown.
struct Tally {
    /// Source port -> (case, the container name it must carry).
    truth: BTreeMap<u16, (&'static str, String)>,
    cases: BTreeMap<&'static str, Case>,
}

impl Tally {
    fn new() -> Tally {
        Tally { truth: BTreeMap::new(), cases: BTreeMap::new() }
    }

    /// `lab-client`'s output lines (one JSON object per connection), made in `case` from
    /// container `name`: returns how many connections succeeded. The case is in the table
    /// from here on, whether or not any of its clients connected (a case none of whose
    /// connections was made must fail the report, not leave it).
    fn client_said(&mut self, case: &'static str, name: &str, stdout: &str) -> u64 {
        let c = self.cases.entry(case).or_default();
        let mut ok = 0;
        for line in stdout.lines().filter(|l| l.starts_with('{')) {
            let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{line:?}: {e}"));
            c.tried += 1;
            if v["ok"] == true {
                ok += 1;
                let sport = v["sport"].as_u64().expect("sport") as u16;
                self.truth.insert(sport, (case, name.to_string()));
                c.made += 1;
            }
        }
        ok
    }

    /// Judges each client event of the namespace by its source port.
    fn judge(&mut self, events: &[&Event]) {
        for e in events {
            let Some((case, name)) = self.truth.get(&e.sport) else { continue };
            let said = e.container.as_deref().unwrap_or("-");
            let c = self.cases.entry(case).or_default();
            match said {
                s if s == name => c.right += 1,
                "unknown" => c.unknown += 1,
                other => c.wrong.push(other.to_string()),
            }
        }
    }

    /// Prints the table (the figures the issue's closing note asks for) and asserts every
    /// connection was named right.
    fn report(&self, what: &str) {
        eprintln!("{what}: case       tried  made  named_right  named_wrong  unknown");
        for (case, c) in &self.cases {
            eprintln!(
                "{what}: {case:<10} {:>5}  {:>4}  {:>11}  {:>11}  {:>7}",
                c.tried,
                c.made,
                c.right,
                c.wrong.len(),
                c.unknown
            );
        }
        for (case, c) in &self.cases {
            assert!(c.made > 0, "{what}: no connection made in case {case} ({} tried)", c.tried);
            assert!(
                c.wrong.is_empty() && c.unknown == 0 && c.right == c.made,
                "{what} {case}: {} made, {} named right, wrong: {:?}, {} unknown",
                c.made,
                c.right,
                c.wrong,
                c.unknown
            );
        }
    }
}

/// The namespace's TcpExtTCPFastOpenActive, as `nstat` reads it there (through a process
/// in it).
fn tfo_active(pid: u32) -> u64 {
    common::Nstat::read_in(&common::nstat::Netns::OfProcess(pid)).get("TcpExtTCPFastOpenActive")
}

/// Accepted TFO connections among client events.
fn accepted(events: &[&Event]) -> u64 {
    events.iter().filter(|e| e.outcome == Outcome::Accepted).count() as u64
}

/// A pod as Kubernetes makes one, with `engine`: a server container owning the network
/// namespace, and a `before` container in it started before the tracer. Then, with the
/// tracer running: a container started while it runs that connects at once, one-shot
/// `run --rm` containers that connect twice and exit, and a process exec'd into the
/// `before` container.
fn pod_scenario(engine: &Engine) {
    let pfx = format!("tfo{}", std::process::id());
    let image = engine.import_binary(common::exe(), &format!("tfo-test-{}", std::process::id()));
    let pod = format!("{pfx}-pod");
    let net = format!("container:{pod}");
    let dst = "127.0.0.1:8080";
    let client = ["/tfo-trace", "lab-client", "--dst", dst, "--timeout-ms", "3000"];
    engine.run(&[
        "-d",
        "--name",
        &pod,
        "--network",
        "none",
        "--sysctl",
        "net.ipv4.tcp_fastopen=3",
        &image,
        "/tfo-trace",
        "lab-server",
        "--listen",
        dst,
        "--tfo-queue",
        "64",
        "--max-seconds",
        "900",
    ]);
    // A container that only waits (a listener nobody calls), to exec a client into later.
    let before = format!("{pfx}-before");
    engine.run(&[
        "-d",
        "--name",
        &before,
        "--network",
        &net,
        &image,
        "/tfo-trace",
        "lab-server",
        "--listen",
        "127.0.0.1:9",
        "--max-seconds",
        "900",
    ]);
    // The cookie, once the pod's server listens: every later connection is TFO-accepted.
    common::eventually("the pod's server answers", || {
        let mut args = vec!["exec", before.as_str()];
        args.extend(client);
        let out = engine.output(&args);
        if String::from_utf8_lossy(&out.stdout).contains("\"ok\":true") {
            Ok(())
        } else {
            Err(out)
        }
    });
    let pod_pid = engine.pid_of(&pod);
    let netns = std::fs::metadata(format!("/proc/{pod_pid}/ns/net")).unwrap().ino();

    // Only the pod's namespace: the closing summary's `unnamed` must count its containers'
    // events alone, not those of the tests running beside this one (the DaemonSet's pod,
    // cgroups made and removed while tracing).
    let tracer = Tracer::start(&["--netns", &netns.to_string()]);
    let active_before = tfo_active(pod_pid);
    let mut tally = Tally::new();

    // Started while the tracer runs, connecting at once.
    let during = format!("{pfx}-during");
    let mut args = vec!["-d", "--name", &during, "--network", &net, &image];
    args.extend(client);
    args.extend(["--count", "5"]);
    engine.run(&args);
    engine.ok(&["wait", &during]);
    let logs = engine.ok(&["logs", &during]);
    tally.client_said("during", &during, &logs);

    // One-shot: connect twice, exit, removed.
    for i in 0..3 {
        let once = format!("{pfx}-once{i}");
        let mut args = vec!["--rm", "--name", &once, "--network", &net, &image];
        args.extend(client);
        args.extend(["--count", "2"]);
        let out = engine.run(&args);
        tally.client_said("one-shot", &once, &out);
    }

    // Started before the tracer.
    let mut args = vec!["exec", before.as_str()];
    args.extend(client);
    args.extend(["--count", "3"]);
    let out = engine.ok(&args);
    tally.client_said("before", &before, &out);

    let active = tfo_active(pod_pid) - active_before;
    let (events, stderr) = tracer.stop();
    let in_pod: Vec<&Event> = events.iter().filter(|e| u64::from(e.netns) == netns).collect();
    let clients: Vec<&Event> = in_pod.iter().copied().filter(|e| e.role == Role::Client).collect();
    tally.judge(&clients);
    tally.report(engine.runtime());
    let made: u64 = tally.cases.values().map(|c| c.made).sum();
    assert_eq!(accepted(&clients), active, "accepted events against TcpExtTCPFastOpenActive: {stderr:?}");
    assert_eq!(active, made, "every connection was TFO-accepted (the cookie came first)");
    for e in &clients {
        assert_eq!(e.container_runtime.as_deref(), Some(engine.runtime()), "{e:?}");
        assert!(e.container_name.is_some(), "the runtime's name: {e:?}");
    }
    // The pod's listener (opened before the tracer) names its container too.
    let servers: Vec<&&Event> = in_pod.iter().filter(|e| e.role == Role::Server).collect();
    assert!(!servers.is_empty(), "the server's accepted children");
    for e in servers {
        assert_eq!(e.container.as_deref(), Some(pod.as_str()), "{e:?}");
    }
    let closing = common::closing(&stderr).unwrap_or_else(|| panic!("no closing summary: {stderr:?}"));
    assert_eq!(closing["unnamed"], 0, "no event from an unknown container: {closing}");
}

fn docker_containers_are_named_whenever_they_started() {
    require_kernel!();
    let _beside = beside_the_burst();
    pod_scenario(&Engine::docker(CgroupDriver::Cgroupfs));
}

fn docker_systemd_driver_containers_are_named() {
    require_kernel!();
    let _beside = beside_the_burst();
    pod_scenario(&Engine::docker(CgroupDriver::Systemd));
}

fn podman_containers_are_named() {
    require_kernel!();
    let _beside = beside_the_burst();
    pod_scenario(&Engine::podman());
}

/// What the engines do underneath, on any kernel (the VM matrix's too): cgroups made by the
/// test, one before the tracer, others while it runs, each removed as soon as its client
/// exits; a lab client in each. Every connection carries its cgroup's container.
fn cgroups_made_while_tracing_name_their_connections() {
    require_kernel!();
    let _beside = beside_the_burst();
    let mut cg = Cgroups::new();
    let id = |n: u32| format!("{n:02x}{}", "c0ffee".repeat(11))[..64].to_string();
    let lab = Lab::create(LabConfig::default()).unwrap();
    let listen = SocketAddr::new(lab.server_addr(0, false).unwrap(), 8080);
    let _server = lab
        .start_server_with(common::exe(), &ServerArgs { tfo_queue: 64, ..ServerArgs::new(listen) })
        .unwrap();
    // The cookie first: every connection below is TFO-accepted.
    let warm = lab.run_client(common::exe(), &ClientArgs { count: 1, ..ClientArgs::new(listen) }).unwrap();
    assert_eq!(warm.ok_count(), 1);
    let before = cg.make(&format!("docker-{}.scope", id(0)));
    let tracer = Tracer::start(&[]);
    let counters = Deltas::since(&lab);
    let mut tally = Tally::new();
    let run = |tally: &mut Tally, case: &'static str, n: u32, dir: &Path| {
        let args = ClientArgs { count: 2, cgroup: Some(dir.to_path_buf()), ..ClientArgs::new(listen) };
        let r = lab.run_client(common::exe(), &args).unwrap();
        let stdout: Vec<String> = r.results.iter().map(|c| serde_json::to_string(c).unwrap()).collect();
        tally.client_said(case, &id(n)[..12], &stdout.join("\n"));
    };
    run(&mut tally, "before", 0, &before);
    for n in 1..=5 {
        let dir = cg.make(&format!("docker-{}.scope", id(n)));
        run(&mut tally, "one-shot", n, &dir);
        cg.remove(&dir);
    }
    let active = counters.client().get("TcpExtTCPFastOpenActive");
    let (events, stderr) = tracer.stop();
    let cli_ns = common::netns_inode(&lab, Side::Client);
    let clients = common::of_role(&events, cli_ns, Role::Client);
    tally.judge(&clients);
    tally.report("cgroups");
    assert_eq!(accepted(&clients), active, "accepted events against TcpExtTCPFastOpenActive: {stderr:?}");
}

/// The tracer's resident memory (VmRSS), in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

/// A burst of 1,000 cgroups made and removed while tracing (what 1,000 short-lived
/// containers do to the tracer: a mkdir and an rmdir each; docker would take minutes to
/// make that many) leaves the tracer's memory where it was: a second burst adds nothing to
/// what the first one left. Prints the figures; the bound is wide (not a timing).
fn a_burst_of_cgroups_leaves_the_tracers_memory_where_it_was() {
    require_kernel!();
    let _alone = CGROUP_BURST.write().unwrap_or_else(|poisoned| poisoned.into_inner());
    let mut cg = Cgroups::new();
    // -vv: the tracer says when it forgets removed cgroups (kernel/cgroup.rs), which it does
    // 10 s after their removal (KEEP_REMOVED): each burst is measured once those are gone.
    let mut tracer = Tracer::start(&["-vv"]);
    let burst = |cg: &mut Cgroups, round: u32| {
        for i in 0..1000 {
            let dir = cg.make(&format!("burst{round}-{i}"));
            cg.remove(&dir);
        }
    };
    // Each -vv line "cgroups: N removed cgroup(s) forgotten, K known". A burst is gone
    // once its removals are all forgotten, or, where the cgroup ring was full and some of
    // the burst's records were lost (a loaded machine: the closing summary counts them),
    // once the tracer, having known the burst (100 more than before: other tests' few
    // cgroups do not count), knows no more cgroups than before it. Returns that count.
    let forgotten = |tracer: &mut Tracer, what: &str, made: u32, known_before: u32| {
        let (mut n, mut known, mut knew_burst) = (0, u32::MAX, false);
        tracer.wait_stderr_until(what, |line| {
            let Some(said) = line.split("cgroups: ").nth(1).filter(|r| r.contains("forgotten")) else {
                return false;
            };
            let number = |s: Option<&str>| s.and_then(|s| s.split(' ').next()?.parse::<u32>().ok());
            n += number(Some(said)).unwrap_or(0);
            known = number(said.split(", ").nth(1)).unwrap_or(u32::MAX);
            knew_burst |= known != u32::MAX && known > known_before.saturating_add(100);
            n >= made || (knew_burst && known <= known_before)
        });
        known
    };
    // A few first, which the ring holds whatever the load: how many the tracer knows when
    // nothing of the bursts is left.
    for i in 0..10 {
        let dir = cg.make(&format!("warmup-{i}"));
        cg.remove(&dir);
    }
    let known = forgotten(&mut tracer, "the 10 warm-up cgroups forgotten", 10, 0);
    let start = rss_kib(tracer.pid());
    burst(&mut cg, 1);
    let after_first = rss_kib(tracer.pid());
    forgotten(&mut tracer, "burst 1's 1,000 cgroups forgotten", 1000, known);
    let settled_first = rss_kib(tracer.pid());
    burst(&mut cg, 2);
    forgotten(&mut tracer, "burst 2's 1,000 cgroups forgotten", 1000, known);
    let settled_second = rss_kib(tracer.pid());
    let (_, stderr) = tracer.stop();
    eprintln!(
        "tracer VmRSS: {start} KiB at start, {after_first} KiB right after 1,000 cgroups made and removed, \
         {settled_first} KiB once they were forgotten, {settled_second} KiB after a second burst of 1,000"
    );
    assert!(
        settled_second <= settled_first + 4096,
        "a second burst grew the tracer by {} KiB",
        settled_second.saturating_sub(settled_first)
    );
    assert!(
        settled_second <= start + 16 * 1024,
        "two bursts grew the tracer from {start} to {settled_second} KiB"
    );
    let closing = common::closing(&stderr).unwrap_or_else(|| panic!("no closing summary: {stderr:?}"));
    eprintln!("closing summary: {closing}");
}

// ---- the shipped DaemonSet, as a Pod ----------------------------------------------------

/// The version `cargo xtask dist` names what it makes with.
const VERSION: &str = env!("CARGO_PKG_VERSION");
/// Podman's pause program for a pod's infra container (Debian's `catatonit`).
const CATATONIT: &str = "/usr/libexec/podman/catatonit";
/// The seccomp profile Podman applies by default (Debian 12's containers-common).
const PODMAN_DEFAULT_SECCOMP: &str = "/usr/share/containers/seccomp.json";
/// The lab servers' port.
const PORT: u16 = 8080;

/// What `podman kube play` made, removed when dropped (also when the test fails): the pod
/// (`kube down`), then the volume and the Secret named after the manifest's Secret.
struct Played<'e> {
    engine: &'e Engine,
    pod_file: PathBuf,
    secret: String,
}

impl Drop for Played<'_> {
    fn drop(&mut self) {
        let _ = self.engine.output(&["kube", "down", &self.pod_file.to_string_lossy()]);
        let _ = self.engine.output(&["volume", "rm", "-f", &self.secret]);
        let _ = self.engine.output(&["secret", "rm", &self.secret]);
    }
}

/// VALUE of `NAME=VALUE` among a container's args.
fn arg_value<'a>(container: &'a Value, name: &str) -> &'a str {
    let args = container["args"].as_array().into_iter().flatten().filter_map(Value::as_str);
    args.clone()
        .find_map(|a| a.strip_prefix(name)?.strip_prefix('='))
        .unwrap_or_else(|| panic!("no {name}= in the container's args: {:?}", args.collect::<Vec<_>>()))
}

/// The Secret the pod's first container mounts, and where: (secretName, mountPath).
fn secret_mount(pod: &Value) -> (String, PathBuf) {
    let volumes = pod["spec"]["volumes"].as_array().expect("the pod's volumes");
    let volume = volumes.iter().find(|v| v["secret"].is_object()).expect("a volume from a Secret");
    let mounts = pod["spec"]["containers"][0]["volumeMounts"].as_array().expect("volumeMounts");
    let mount = mounts.iter().find(|m| m["name"] == volume["name"]).expect("the Secret's volume mounted");
    let path = mount["mountPath"].as_str().expect("mountPath");
    (volume["secret"]["secretName"].as_str().expect("secretName").to_string(), PathBuf::from(path))
}

/// Sum of tfo_trace_connections_total{role, outcome} (every source).
fn connections(exposition: &str, role: &str, outcome: &str) -> f64 {
    let labels = [format!(r#"role="{role}""#), format!(r#"outcome="{outcome}""#)];
    common::metric_sum(exposition, "tfo_trace_connections_total", &[&labels[0], &labels[1]])
}

/// The running container (host pid `pid`) has what the pod's first container asks for: its
/// user, exactly the capabilities added (all others dropped) in every set, no_new_privs,
/// a seccomp filter, the host's PID namespace or its own, a read-only root, and each
/// volume mounted where and as the manifest says.
fn assert_runs_as_written(pod: &Value, pid: u32) {
    let container = &pod["spec"]["containers"][0];
    let security = &container["securityContext"];
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |name: &str| {
        let line = status.lines().find_map(|l| l.strip_prefix(name));
        line.unwrap_or_else(|| panic!("no {name} in {status}")).trim().to_string()
    };
    let names = |v: &Value| -> BTreeSet<String> {
        v.as_array().into_iter().flatten().filter_map(Value::as_str).map(str::to_string).collect()
    };
    assert_eq!(names(&security["capabilities"]["drop"]), BTreeSet::from(["ALL".to_string()]));
    let added = names(&security["capabilities"]["add"]);
    for set in ["CapEff:", "CapPrm:", "CapBnd:"] {
        assert_eq!(kube::capability_names(&field(set)), added, "{set} of the pod's container");
    }
    assert!(kube::capability_names(&field("CapAmb:")).is_empty(), "no ambient capability");
    let uid = security["runAsUser"].as_u64().expect("runAsUser");
    assert_eq!(field("Uid:").split_whitespace().next(), Some(uid.to_string().as_str()));
    let no_new_privs = security["allowPrivilegeEscalation"] == false;
    assert_eq!(field("NoNewPrivs:"), if no_new_privs { "1" } else { "0" });
    assert_eq!(field("Seccomp:"), "2", "a seccomp filter");
    let pid_ns = |p: &str| std::fs::read_link(format!("/proc/{p}/ns/pid")).unwrap();
    let host_pid = pod["spec"]["hostPID"] == true;
    assert_eq!(pid_ns(&pid.to_string()) == pid_ns("self"), host_pid, "hostPID: {host_pid}");
    let mountinfo = std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).unwrap();
    let read_only = |at: &str| {
        let line = mountinfo.lines().rev().find(|l| l.split_whitespace().nth(4) == Some(at));
        let options = line.unwrap_or_else(|| panic!("nothing mounted at {at}: {mountinfo}"));
        options.split_whitespace().nth(5).unwrap().split(',').any(|o| o == "ro")
    };
    assert_eq!(read_only("/"), security["readOnlyRootFilesystem"] == true, "the root file system");
    for mount in container["volumeMounts"].as_array().expect("volumeMounts") {
        let at = mount["mountPath"].as_str().unwrap();
        assert_eq!(read_only(at), mount["readOnly"] == true, "{at}");
    }
}

/// deploy/kubernetes/daemonset.yaml's pod template, run as its DaemonSet runs it on a node,
/// by `podman kube play` (Debian's Podman 4.3, offline): the image `cargo xtask dist` built,
/// the web config from a Secret played first (a certificate and a bcrypt hash made here),
/// the user, capabilities, mounts and PID namespace the manifest gives (checked on the
/// running container; what Podman 4.3 needs told otherwise: `kube::for_podman_4_3`).
/// Scraped with curl over TLS with the credentials, inside the pod's network namespace, it
/// must export what the lab's namespaces counted: accepted connections, stalls behind the
/// SYN-data-dropping middlebox, and the server's cookie requests, which no tracepoint hook
/// sees and which it reads from the server namespace's own counters (through the host's
/// PID namespace). Its args get `--netns` for the lab's two namespaces: the exporter
/// counts the whole host, and other tests' TFO traffic must stay out of the comparison.
fn daemonset_pod_exports_the_lab_exactly() {
    require_kernel!();
    let tar = common::artefact(&format!("tfo-trace-{VERSION}-{}-linux-image.tar", std::env::consts::ARCH));
    if !Path::new(CATATONIT).exists() {
        common::skip(format!(
            "a pod's infra container needs {CATATONIT} (Debian's catatonit; `cargo xtask setup` installs it)"
        ));
    }
    let daemonset = kube::read(&kube::manifests_dir().join("daemonset.yaml"));
    let name = format!("tfo-trace-exporter-{}", std::process::id());
    let mut pod = kube::pod_of_daemonset(&daemonset, &name);
    // A DaemonSet's pods restart always; here a failed start must end the test at once
    // with the exporter's words (Podman restarts a failing container without a pause, a
    // kubelet backs off), so the one Pod is run once.
    pod["spec"]["restartPolicy"] = json!("Never");
    let host_pid = pod["spec"]["hostPID"] == true;
    let engine =
        Engine::podman_configured("podman-kube", if host_pid { &[r#"pidns = "host""#] } else { &[] });
    let loaded = engine.ok(&["load", "-i", &tar.to_string_lossy()]);
    let image = loaded.lines().find_map(|l| l.strip_prefix("Loaded image: ")).expect("podman load's image");

    let lab = Lab::create(LabConfig { server_addrs: 2, ..LabConfig::default() }).unwrap();
    let [cli_ns, srv_ns] = [Side::Client, Side::Server].map(|side| netns_inode(&lab, side).to_string());
    let files = TempDir::new("kube");
    let container = &mut pod["spec"]["containers"][0];
    container["image"] = json!(image);
    let args = container["args"].as_array_mut().expect("the container's args");
    args.extend(["--netns", &cli_ns, "--netns", &srv_ns].map(|a| json!(a)));
    let seccomp = kube::for_podman_4_3(container, Path::new(PODMAN_DEFAULT_SECCOMP));
    pod["metadata"]["annotations"]["seccomp.security.alpha.kubernetes.io/pod"] = json!(seccomp.annotation);
    if let Some(profile) = &seccomp.profile {
        std::fs::write(files.0.join("runtime-default.json"), profile.to_string()).unwrap();
    }

    // The web config the args name, in the Secret mounted at its folder.
    let container = &pod["spec"]["containers"][0];
    let (secret, mount) = secret_mount(&pod);
    let web_config = PathBuf::from(arg_value(container, "--web.config.file"));
    let key = web_config.strip_prefix(&mount).expect("--web.config.file in the Secret's mount");
    let web = web_config_files("kube-web-config");
    let secret_files: Vec<(String, Vec<u8>)> = [
        (key.to_string_lossy().into_owned(), web.file.clone()),
        ("cert.pem".into(), web.dir.0.join("cert.pem")),
        ("key.pem".into(), web.dir.0.join("key.pem")),
    ]
    .into_iter()
    .map(|(k, file)| (k, std::fs::read(file).unwrap()))
    .collect();
    let (secret_file, pod_file) = (files.0.join("secret.json"), files.0.join("pod.json"));
    std::fs::write(&secret_file, kube::secret(&secret, &secret_files).to_string()).unwrap();
    std::fs::write(&pod_file, pod.to_string()).unwrap();
    let played = Played { engine: &engine, pod_file: pod_file.clone(), secret: secret.clone() };
    engine.ok(&["kube", "play", &secret_file.to_string_lossy()]);
    let profiles = files.0.to_string_lossy();
    let pod_path = pod_file.to_string_lossy();
    let network = ["--network", "none", "--seccomp-profile-root", &profiles, "--start=false"];
    engine.ok(&[&["kube", "play"][..], &network, &[&pod_path]].concat());
    let volume = engine.ok(&["volume", "inspect", "-f", "{{.Mountpoint}}", &secret]);
    kube::secret_volume_as_a_kubelet_mounts_it(Path::new(&volume), &secret_files);
    engine.ok(&["pod", "start", &name]);

    let ctr = format!("{name}-{}", container["name"].as_str().expect("the container's name"));
    let said = common::eventually("the pod's exporter serving", || {
        let out = engine.output(&["logs", &ctr]);
        let logs =
            format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        if logs.contains("serving metrics on https://") {
            return Ok(logs);
        }
        assert_ne!(engine.inspect(&ctr, "{{.State.Status}}"), "exited", "the pod's exporter exited: {logs}");
        Err(logs)
    });
    eprintln!("the pod's exporter said:\n{}", said.trim_end());
    let pid = engine.pid_of(&ctr);
    assert_runs_as_written(&pod, pid);

    let netns = PathBuf::from(format!("/proc/{pid}/ns/net"));
    let port = arg_value(container, "--web.listen-address").rsplit_once(':').expect("host:port").1;
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let scrape = |credentials| curl_get_in(Some(&netns), addr, "/metrics", &web.tls, credentials);
    assert_eq!(scrape(None).0, 401, "a scrape without credentials");
    let stranger = Tls { user: "nobody".into(), ..web.tls.clone() };
    assert_eq!(curl_get_in(Some(&netns), addr, "/metrics", &stranger, Some(true)).0, 401, "an unknown user");
    let metrics = || match scrape(Some(true)) {
        (200, body) => body,
        (status, body) => panic!("a scrape with the credentials: {status} {body}"),
    };

    // The servers listen once the exporter runs: it names the server's namespace by the
    // listener's owner, as it cannot read another user's /proc/PID/ns/net without
    // CAP_SYS_PTRACE (those of root's processes with more capabilities than its own).
    let _servers = [0, 1].map(|i| lab.start_server(common::exe(), i, PORT, 16, false).unwrap());
    let [clean, blocked] = [0, 1].map(|i| SocketAddr::new(lab.server_addr(i, false).unwrap(), PORT));
    let before = metrics();
    let counters = Deltas::since(&lab);
    // A tracer beside the pod's exporter: the hook's events for the same runs, which tell
    // the kernel's skipped hook run (both one short) from a series that lost a count.
    let witness = Tracer::start(&["--netns", &netns_inode(&lab, Side::Client).to_string()]);
    let client =
        |dst, count| ClientArgs { count, payload_bytes: 100, timeout_ms: 5000, ..ClientArgs::new(dst) };
    // A cookie from each address first; then SYN-data accepted at the clean one, and
    // dropped on the way to the other (a stall each).
    let (n_ok, n_stalled) = (4, 2);
    let ok = lab.run_client(common::exe(), &client(clean, n_ok + 1)).unwrap();
    let cookie = lab.run_client(common::exe(), &client(blocked, 1)).unwrap();
    lab.middlebox_drop_syn_data(Some(blocked.ip())).unwrap();
    let stalled = lab.run_client(common::exe(), &client(blocked, n_stalled)).unwrap();
    assert_eq!(ok.ok_count() + cookie.ok_count() + stalled.ok_count(), (n_ok + n_stalled + 2) as usize);
    let (dc, ds) = counters.both();
    let (witnessed, _) = witness.stop();
    let witnessed_stalls = witnessed.iter().filter(|e| e.outcome == Outcome::SynRetransmitted).count() as u64;
    // The kernel agrees with the lab first (else the comparison proves nothing).
    assert_eq!(dc.get("TcpExtTCPFastOpenActive"), u64::from(n_ok), "client counters: {dc:?}");
    assert_eq!(dc.get("TcpExtTCPSynRetrans"), u64::from(n_stalled), "client counters: {dc:?}");
    assert_eq!(ds.get("TcpExtTCPFastOpenCookieReqd"), 2, "server counters: {ds:?}");

    let kernel = [
        ("client", "accepted", "TcpExtTCPFastOpenActive", dc.get("TcpExtTCPFastOpenActive")),
        ("client", "syn_retransmitted", "TcpExtTCPSynRetrans", dc.get("TcpExtTCPSynRetrans")),
        ("client", "cookie_requested", "TcpExtTCPFastOpenCookieReqd", ds.get("TcpExtTCPFastOpenCookieReqd")),
        ("server", "accepted", "TcpExtTCPFastOpenPassive", ds.get("TcpExtTCPFastOpenPassive")),
        ("server", "cookie_requested", "TcpExtTCPFastOpenCookieReqd", ds.get("TcpExtTCPFastOpenCookieReqd")),
    ];
    let deltas = |after: &str| {
        kernel.map(|(role, outcome, ..)| {
            connections(after, role, outcome) - connections(&before, role, outcome)
        })
    };
    // Counted in the kernel (the events' series) or read from the server's namespace at
    // each scrape, once the exporter has named it (the listener's owner, at its next read).
    // Short of them at the end of the wait, what the exporter says it could not count (the
    // kernel's skipped runs of its programs, connects it could not follow, ...) and every
    // series compared go with the failure.
    // What each series must reach: the kernel's count, or for the stalls the hook's events
    // where those are the kernel's skipped run short (checked below), not a wait in vain.
    let target = |(_, outcome, _, count): &(&str, &str, &str, u64)| {
        if *outcome == "syn_retransmitted" && witnessed_stalls + 1 == *count {
            witnessed_stalls
        } else {
            *count
        }
    };
    let reached = common::wait::within(common::HANG_LIMIT, || {
        let after = metrics();
        if deltas(&after).iter().zip(&kernel).all(|(d, k)| *d >= target(k) as f64) {
            Ok(after)
        } else {
            Err(after)
        }
    });
    let after = reached.as_ref().unwrap_or_else(|after| after);
    let compared: Vec<String> = kernel
        .iter()
        .zip(deltas(after))
        .map(|((role, outcome, counter, count), exported)| {
            format!("{role} {outcome}: exported {exported}, nstat {counter} {count}")
        })
        .collect();
    eprintln!("{}", compared.join("\n"));
    let health = exporter_health(after);
    for metric in ["tfo_trace_hook_runs_missed_total", "tfo_trace_connects_unfollowed_total"] {
        assert!(health.contains(metric), "the exporter exports no {metric}: {health}");
    }
    for ((role, outcome, counter, count), exported) in kernel.iter().zip(deltas(after)) {
        if *outcome == "syn_retransmitted" {
            let what = format!("{role} {outcome} against {counter}; the exporter's own account: {health}");
            common::assert_view_count(HookRun::Established, exported as u64, witnessed_stalls, *count, what);
            continue;
        }
        assert_eq!(
            exported,
            *count as f64,
            "{role} {outcome} against {counter} (after waiting up to {:?}); every series compared: \
             {compared:#?}; the exporter's own account: {health}",
            common::HANG_LIMIT
        );
    }
    let kernel_counted: Vec<&str> = after
        .lines()
        .filter(|l| {
            l.contains(r#"source="kernel_counter""#) || l.starts_with("tfo_trace_kernel_counted_namespaces")
        })
        .collect();
    eprintln!("{}", kernel_counted.join("\n"));
    drop(played);
}

/// What an exporter's exposition says it could not count, and the namespaces behind its
/// kernel-counted series: what a count short of the kernel's is read with.
fn exporter_health(exposition: &str) -> String {
    const HEALTH: [&str; 5] = [
        "tfo_trace_hook_runs_missed_total",
        "tfo_trace_connects_unfollowed_total",
        "tfo_trace_events_lost_total",
        "tfo_trace_outcomes_uncounted_total",
        "tfo_trace_kernel_counted_namespaces",
    ];
    let lines = exposition.lines().filter(|l| HEALTH.iter().any(|m| l.starts_with(m)));
    lines.collect::<Vec<_>>().join(", ")
}

/// Every manifest of deploy/kubernetes/ against Kubernetes' own schema (the OpenAPI of
/// the version kubernetes-validate ships), strictly: an unknown or misspelt field is an
/// error, which a kubelet would otherwise drop without a word. Podman reads fields it
/// does not know as silently, so the pod test above cannot catch those.
fn kubernetes_manifests_pass_the_schema() {
    let Some(validate) = common::which("kubernetes-validate") else {
        common::skip("needs kubernetes-validate (PyPI; `cargo xtask setup` installs it)")
    };
    let manifests = kube::manifests();
    assert!(!manifests.is_empty(), "no manifest in {}", kube::manifests_dir().display());
    for manifest in manifests {
        let out = std::process::Command::new(&validate)
            .args(["--strict", "--no-warn"])
            .arg(&manifest)
            .output()
            .expect("kubernetes-validate");
        let said =
            format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        eprintln!("{}", said.trim_end());
        assert!(out.status.success(), "{}: {said}", manifest.display());
    }
}

module_tests!(
    daemonset_pod_exports_the_lab_exactly,
    kubernetes_manifests_pass_the_schema,
    cgroups_made_while_tracing_name_their_connections,
    docker_containers_are_named_whenever_they_started,
    docker_systemd_driver_containers_are_named,
    podman_containers_are_named,
    a_burst_of_cgroups_leaves_the_tracers_memory_where_it_was,
);
