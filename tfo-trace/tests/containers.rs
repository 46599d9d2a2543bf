//! Who paid, in containers that come and go: every connection is named by the container
//! it came from, whenever the container started (before the tracer, while it runs) and
//! however briefly it lived (a `run --rm` that connects and exits), by the name its runtime
//! gave it; and the sum is the namespace's own TcpExtTCPFastOpenActive delta. With real
//! engines where they run here (a private dockerd, cgroupfs and systemd drivers; rootful
//! Podman), and with cgroups this test makes itself (what runtimes do underneath, and what
//! runs on every kernel of the VM matrix). The truth of which connection came from which
//! container is each client's own report of its source ports, never the tracer's.
mod common;

use std::{collections::BTreeMap, net::SocketAddr, os::unix::fs::MetadataExt as _, path::Path};

use common::{
    cgroups::Cgroups,
    docker::{CgroupDriver, Engine},
    Deltas, Tracer,
};
use serde_json::Value;
use tfo_trace::{
    events::{Event, Outcome, Role},
    kernel::netstat::Netstat,
    lab::{
        traffic::{ClientArgs, ServerArgs},
        Lab, LabConfig, Side,
    },
};

/// One way a container came to connect, and what the tracer made of its connections.
#[derive(Default)]
struct Case {
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
    /// container `name`: returns how many connections succeeded.
    fn client_said(&mut self, case: &'static str, name: &str, stdout: &str) -> u64 {
        let mut ok = 0;
        for line in stdout.lines().filter(|l| l.starts_with('{')) {
            let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{line:?}: {e}"));
            if v["ok"] == true {
                ok += 1;
                let sport = v["sport"].as_u64().expect("sport") as u16;
                self.truth.insert(sport, (case, name.to_string()));
                self.cases.entry(case).or_default().made += 1;
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

    /// Prints the table (the figures the closing note asks for) and asserts every
    /// connection was named right.
    fn report(&self, what: &str) {
        eprintln!("{what}: case       made  named_right  named_wrong  unknown");
        for (case, c) in &self.cases {
            eprintln!(
                "{what}: {case:<10} {:>4}  {:>11}  {:>11}  {:>7}",
                c.made,
                c.right,
                c.wrong.len(),
                c.unknown
            );
        }
        for (case, c) in &self.cases {
            assert!(c.made > 0, "{what}: no connection made in case {case}");
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

/// The namespace's TcpExtTCPFastOpenActive, as the kernel counts it (via a process in it).
fn tfo_active(pid: u32) -> u64 {
    let path = format!("/proc/{pid}/net/netstat");
    Netstat::read_files(&[Path::new(&path)]).unwrap().get("TcpExtTCPFastOpenActive")
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

    let tracer = Tracer::start(&[]);
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
    pod_scenario(&Engine::docker(CgroupDriver::Cgroupfs));
}

fn docker_systemd_driver_containers_are_named() {
    require_kernel!();
    pod_scenario(&Engine::docker(CgroupDriver::Systemd));
}

fn podman_containers_are_named() {
    require_kernel!();
    pod_scenario(&Engine::podman());
}

/// What the engines do underneath, on any kernel (the VM matrix's too): cgroups made by the
/// test, one before the tracer, others while it runs, each removed as soon as its client
/// exits; a lab client in each. Every connection carries its cgroup's container.
fn cgroups_made_while_tracing_name_their_connections() {
    require_kernel!();
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
    let forgotten = |tracer: &mut Tracer, round: u32| {
        let mut n = 0;
        tracer.wait_stderr_until(&format!("burst {round}'s 1,000 cgroups forgotten"), |line| {
            let said = line.split("cgroups: ").nth(1).and_then(|r| r.split(' ').next()?.parse::<u32>().ok());
            n += said.unwrap_or(0);
            n >= 1000
        });
    };
    let start = rss_kib(tracer.pid());
    burst(&mut cg, 1);
    let after_first = rss_kib(tracer.pid());
    forgotten(&mut tracer, 1);
    let settled_first = rss_kib(tracer.pid());
    burst(&mut cg, 2);
    forgotten(&mut tracer, 2);
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

tests_main!(
    cgroups_made_while_tracing_name_their_connections,
    docker_containers_are_named_whenever_they_started,
    docker_systemd_driver_containers_are_named,
    podman_containers_are_named,
    a_burst_of_cgroups_leaves_the_tracers_memory_where_it_was,
);
