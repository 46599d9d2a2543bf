//! Who paid, in container terms, and filters decided in the kernel. Lab clients and
//! servers run inside cgroups this test makes (named as docker and systemd name theirs);
//! events must carry those cgroups and containers; tracers started with filters must see
//! exactly the connections the filters select (the lab's own runs say which those are)
//! and count nothing else.
use crate::common;

use std::{
    collections::BTreeSet,
    net::SocketAddr,
    os::unix::fs::MetadataExt as _,
    path::{Path, PathBuf},
    process::Command,
};

use common::{
    cgroups::{rel, Cgroups},
    count, netns_inode, Deltas, Tracer,
};
use serde_json::Value;
use tfo_trace::{
    events::{Event, Outcome, Role},
    lab::{
        traffic::{ClientArgs, ServerArgs},
        Lab, LabConfig, ServerHandle, Side,
    },
};

const CONTAINER: &str = "4f1e6d9a0c2b3a4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5";
const OTHER_CONTAINER: &str = "0a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f9";

fn client_and_server_name_their_cgroup_and_container() {
    require_kernel!();
    let mut cg = Cgroups::new();
    let client_cg = cg.make(&format!("docker-{CONTAINER}.scope"));
    let server_cg = cg.make("tfo-server.service");
    let lab = Lab::create(LabConfig::default()).unwrap();
    let listen = SocketAddr::new(lab.server_addr(0, false).unwrap(), 8080);
    let tracer = Tracer::start(&[]);
    let server = lab
        .start_server_with(
            common::exe(),
            &ServerArgs { tfo_queue: 16, cgroup: Some(server_cg.clone()), ..ServerArgs::new(listen) },
        )
        .unwrap();
    let run = lab
        .run_client(
            common::exe(),
            &ClientArgs { count: 3, cgroup: Some(client_cg.clone()), ..ClientArgs::new(listen) },
        )
        .unwrap();
    let (events, _) = tracer.stop();
    assert_eq!(run.ok_count(), 3);
    let cli_ns = netns_inode(&lab, Side::Client);
    let srv_ns = netns_inode(&lab, Side::Server);
    let clients: Vec<&Event> = events.iter().filter(|e| e.netns == cli_ns).collect();
    let servers: Vec<&Event> = events.iter().filter(|e| e.netns == srv_ns).collect();
    assert_eq!(clients.len(), 3, "cookie request + 2 accepted: {clients:?}");
    assert!(!servers.is_empty(), "the server's accepted children");
    let inode = |d: &Path| std::fs::metadata(d).unwrap().ino();
    for e in &clients {
        assert_eq!(e.pid, run.pid, "{e:?}");
        assert_eq!(e.cgroup_id, Some(inode(&client_cg)), "{e:?}");
        assert_eq!(e.cgroup.as_deref(), Some(rel(&client_cg).as_str()), "{e:?}");
        assert_eq!(e.container_id.as_deref(), Some(CONTAINER), "{e:?}");
        assert_eq!(e.container_runtime.as_deref(), Some("docker"), "{e:?}");
    }
    for e in &servers {
        assert_eq!(e.pid, server.pid(), "{e:?}");
        assert_eq!(e.cgroup_id, Some(inode(&server_cg)), "{e:?}");
        assert_eq!(e.container_runtime.as_deref(), Some("tfo-server.service"), "{e:?}");
        assert!(e.container_id.is_none(), "{e:?}");
    }
    drop(server);
}

/// One lab, two clients in two cgroups, two listeners; five tracers with five filters at
/// once. Each must see exactly what its filter selects: the counts come from the lab's
/// own runs and the kernel's counters, never from the tracer.
fn filters_select_in_the_kernel() {
    require_kernel!();
    let mut cg = Cgroups::new();
    let (cg_a, cg_b) = (cg.make("a.scope"), cg.make("b.scope"));
    let lab = Lab::create(LabConfig::default()).unwrap();
    let srv_ip = lab.server_addr(0, false).unwrap();
    let (p1, p2) = (SocketAddr::new(srv_ip, 8080), SocketAddr::new(srv_ip, 8081));
    let s1 =
        lab.start_server_with(common::exe(), &ServerArgs { tfo_queue: 16, ..ServerArgs::new(p1) }).unwrap();
    let _s2 =
        lab.start_server_with(common::exe(), &ServerArgs { tfo_queue: 16, ..ServerArgs::new(p2) }).unwrap();
    let (cli_ns, srv_ns) = (netns_inode(&lab, Side::Client), netns_inode(&lab, Side::Server));
    // Cookies first, so every filtered connection below is an accepted TFO one.
    for p in [p1, p2] {
        assert_eq!(lab.run_client(common::exe(), &ClientArgs::new(p)).unwrap().ok_count(), 1);
    }
    let a_cgroup = rel(&cg_a);
    let s1_pid = s1.pid().to_string();
    let srv_name = lab.netns(Side::Server).to_string();
    // Tests beside this one run labs with the same ports and outcomes: the filters that
    // would also match theirs are scoped to this lab's namespaces (flags AND together).
    let cli_name = lab.netns(Side::Client).to_string();
    let ours = ["--netns", &cli_name, "--netns", &srv_name];
    let tracers = [
        Tracer::start(&["--cgroup", &a_cgroup]),
        Tracer::start(&[&["--port", "8081"][..], &ours].concat()),
        Tracer::start(&[&["--role", "server", "--outcome", "accepted"][..], &ours].concat()),
        Tracer::start(&["--pid", &s1_pid]),
        Tracer::start(&["--netns", &srv_name, "--daddr", &format!("{srv_ip}/32")]),
    ];
    let before = Deltas::since(&lab);
    let run = |dst, n, dir: &PathBuf| {
        let r = lab
            .run_client(
                common::exe(),
                &ClientArgs { count: n, cgroup: Some(dir.clone()), ..ClientArgs::new(dst) },
            )
            .unwrap();
        assert_eq!(r.ok_count(), n as usize);
        r
    };
    run(p1, 3, &cg_a); // A -> 8080: 3
    run(p2, 4, &cg_a); // A -> 8081: 4
    run(p1, 5, &cg_b); // B -> 8080: 5
    let (dc, ds) = before.both();
    assert_eq!((dc.get("TcpExtTCPFastOpenActive"), ds.get("TcpExtTCPFastOpenPassive")), (12, 12));
    let [by_cgroup, by_port, by_outcome, by_pid, by_netns] = tracers.map(|t| t.stop().0);
    let acc = |ev: &[Event], ns, role| count(ev, ns, role, Outcome::Accepted);
    let (client, server) = (Role::Client, Role::Server);
    // --cgroup: A's client connections only (the servers are not in A).
    assert_eq!((acc(&by_cgroup, cli_ns, client), acc(&by_cgroup, srv_ns, server)), (7, 0));
    assert_eq!(by_cgroup.len(), 7, "nothing but A's: {by_cgroup:?}");
    // --port 8081: both ends of the connections to 8081.
    assert_eq!((acc(&by_port, cli_ns, client), acc(&by_port, srv_ns, server)), (4, 4));
    assert_eq!(by_port.len(), 8, "{by_port:?}");
    // --role server --outcome accepted: every server child, nothing else.
    assert_eq!(acc(&by_outcome, srv_ns, server), ds.get("TcpExtTCPFastOpenPassive"));
    assert_eq!(by_outcome.len() as u64, ds.get("TcpExtTCPFastOpenPassive"), "{by_outcome:?}");
    // --pid of the 8080 server: its children only (3 from A, 5 from B).
    assert_eq!(acc(&by_pid, srv_ns, server), 8);
    assert_eq!(by_pid.len(), 8, "{by_pid:?}");
    // --netns (by name) and --daddr: the server namespace's events, all to that address.
    assert_eq!(acc(&by_netns, srv_ns, server), 12);
    assert!(by_netns.iter().all(|e| e.netns == srv_ns), "{by_netns:?}");
}

/// A dual-stack listener (`[::]:8082`, IPV6_V6ONLY off, Go's default) and clients to its
/// IPv4 address, one from an IPv4 socket and one from an IPv6 socket connecting to the
/// IPv4-mapped address: both ends' sockets of the second, and the server's children of
/// both, hold `::ffff:a.b.c.d`. Every event must show the IPv4 addresses they are, and the
/// address filters (decided in the kernel) select them as such: `--saddr` the client's
/// /24 and `--daddr` the server's address see the server's events too, equal to the
/// kernel's TcpExtTCPFastOpenPassive; a recording holds and replays them as IPv4
/// (issue 37, item 3: the server's events were `[::ffff:10.77.0.2]:8082`, unfiltered).
fn dual_stack_listeners_show_and_filter_ipv4() {
    require_kernel!();
    let lab = Lab::create(LabConfig::default()).unwrap();
    let (srv, cli) = (lab.server_addr(0, false).unwrap(), lab.client_addr(false));
    let (std::net::IpAddr::V4(srv4), std::net::IpAddr::V4(cli4)) = (srv, cli) else { unreachable!() };
    let listen: SocketAddr = "[::]:8082".parse().unwrap();
    let _server = lab
        .start_server_with(common::exe(), &ServerArgs { tfo_queue: 16, ..ServerArgs::new(listen) })
        .unwrap();
    let to_v4 = SocketAddr::new(srv, 8082);
    let to_mapped = SocketAddr::new(srv4.to_ipv6_mapped().into(), 8082);
    // The cookie first (one per server address, whatever the client socket's family).
    assert_eq!(lab.run_client(common::exe(), &ClientArgs::new(to_v4)).unwrap().ok_count(), 1);
    let (cli_name, srv_name) = (lab.netns(Side::Client).to_string(), lab.netns(Side::Server).to_string());
    let ours = ["--netns", &cli_name, "--netns", &srv_name];
    let client_net = format!("{}/24", cli4);
    let rec = common::TempFile::new("dual-stack");
    let tracers = [
        Tracer::start(&[&["--saddr", &client_net, "--port", "8082"][..], &ours].concat()),
        Tracer::start(&[&["--daddr", &srv.to_string()][..], &ours].concat()),
        Tracer::start(&[&["--record", rec.path()][..], &ours].concat()),
    ];
    let before = Deltas::since(&lab);
    for dst in [to_v4, to_mapped] {
        assert_eq!(
            lab.run_client(common::exe(), &ClientArgs { count: 3, ..ClientArgs::new(dst) })
                .unwrap()
                .ok_count(),
            3
        );
    }
    let (dc, ds) = before.both();
    let (active, passive) = (dc.get("TcpExtTCPFastOpenActive"), ds.get("TcpExtTCPFastOpenPassive"));
    assert_eq!((active, passive), (6, 6), "the kernel: {dc:?} {ds:?}");
    let (cli_ns, srv_ns) = (netns_inode(&lab, Side::Client), netns_inode(&lab, Side::Server));
    let [by_saddr, by_daddr, all] = tracers.map(|t| t.stop().0);
    for (what, events) in [("--saddr", &by_saddr), ("--daddr", &by_daddr), ("unfiltered", &all)] {
        let acc = |ns, role| count(events, ns, role, Outcome::Accepted);
        assert_eq!(
            (acc(cli_ns, Role::Client), acc(srv_ns, Role::Server)),
            (active, passive),
            "{what}: {events:?}"
        );
        for e in events.iter() {
            let (server, client) =
                if e.role == Role::Client { (e.daddr, e.saddr) } else { (e.saddr, e.daddr) };
            assert_eq!((e.family, server, client), (4, srv, cli), "{what}: IPv4 as it is: {e:?}");
        }
        let listeners: BTreeSet<_> =
            events.iter().filter(|e| e.role == Role::Server).map(|e| e.listener).collect();
        assert_eq!(listeners, BTreeSet::from([Some(listen)]), "{what}: its listener, by its bound address");
    }
    // The recording: the addresses as trace printed them, and a replay's filter selects them.
    let text = std::fs::read_to_string(&rec.0).unwrap();
    assert!(!text.contains("::ffff:"), "{text}");
    let replay = Command::new(common::exe())
        .args([
            "report",
            "--format",
            "json",
            "--from",
            rec.path(),
            "--daddr",
            &format!("{srv}/32"),
            "--role",
            "server",
        ])
        .output()
        .unwrap();
    assert!(replay.status.success(), "{}", String::from_utf8_lossy(&replay.stderr));
    let report: Value = serde_json::from_slice(&replay.stdout).unwrap();
    assert_eq!(report["source"]["events"], passive, "{report:#}");
}

/// A client whose connecting thread is named `connworker` (prctl(PR_SET_NAME), as
/// multi-threaded servers name their workers) in a process named `tfo-trace`, to a
/// destination behind a middlebox that drops SYN-data: COMM is the process's name, the
/// thread's beside it (`thread`); `--comm` finds the connections by either; the report's
/// advice names the process. `--comm` matched the thread's name only, COMM showed it and
/// the advice named it (issue 37, item 4).
fn comm_is_the_process_and_the_thread_beside_it() {
    require_kernel!();
    let lab = Lab::create(LabConfig::default()).unwrap();
    let dst = SocketAddr::new(lab.server_addr(0, false).unwrap(), 8080);
    let _server =
        lab.start_server_with(common::exe(), &ServerArgs { tfo_queue: 16, ..ServerArgs::new(dst) }).unwrap();
    lab.middlebox_drop_syn_data(Some(dst.ip())).unwrap();
    let cli = lab.netns(Side::Client).to_string();
    let process =
        common::exe().file_name().unwrap().to_str().unwrap()[..].chars().take(15).collect::<String>();
    let rec = common::TempFile::new("thread-name");
    let tracers = [
        Tracer::start(&["--netns", &cli, "--comm", &process]),
        Tracer::start(&["--netns", &cli, "--comm", "connworker"]),
        Tracer::start(&["--netns", &cli, "--comm", "nosuchname", "--comm", &process]),
        Tracer::start(&["--netns", &cli, "--record", rec.path()]),
    ];
    let before = Deltas::since(&lab);
    let worker = ClientArgs { count: 3, thread_name: Some("connworker".into()), ..ClientArgs::new(dst) };
    let run = lab.run_client(common::exe(), &worker).unwrap();
    assert_eq!(run.ok_count(), 3);
    let dc = before.client();
    // A cookie request (small enough to pass), then two SYN-data dropped and resent.
    assert_eq!((dc.get("TcpExtTCPSynRetrans"), dc.get("TcpExtTCPFastOpenActiveFail")), (2, 2), "{dc:?}");
    let [by_process, by_thread, either, all] = tracers.map(|t| t.stop().0);
    let cli_ns = netns_inode(&lab, Side::Client);
    let stalled = |events: &[Event]| count(events, cli_ns, Role::Client, Outcome::SynRetransmitted);
    // What each connection's events were (the hook backends also see the cookie arrive):
    // every filter keeps all of them, as the unfiltered tracer saw them.
    let outcomes = |events: &[Event]| {
        let mut seen: Vec<_> = events.iter().map(|e| (e.sport, e.outcome)).collect();
        seen.sort();
        seen
    };
    let ports: BTreeSet<_> = all.iter().map(|e| e.sport).collect();
    assert_eq!(ports.len(), 3, "three connections: {all:?}");
    for (what, events) in
        [("--comm process", &by_process), ("--comm thread", &by_thread), ("either", &either), ("all", &all)]
    {
        assert_eq!(outcomes(events), outcomes(&all), "{what}: {events:?}");
        assert_eq!(stalled(events), dc.get("TcpExtTCPSynRetrans"), "{what}: {events:?}");
        for e in events.iter() {
            assert_eq!(
                (e.pid, &*e.comm, e.thread.as_deref()),
                (run.pid, process.as_str(), Some("connworker")),
                "{what}: {e:?}"
            );
        }
    }
    // The report on the recording: its advice names the process.
    let out = Command::new(common::exe()).args(["report", "--from", rec.path()]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let verdict = text
        .lines()
        .find(|l| l.contains("verdict:") && l.contains(&dst.to_string()))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(verdict.contains(&format!(" in {process}")) && !verdict.contains("connworker"), "{verdict}");
    // `trace`'s COMM: the process's name, the thread's beside it.
    let mut text_trace = Tracer::start_command(&["trace", "--netns", &cli]);
    let one = ClientArgs { thread_name: Some("connworker".into()), ..ClientArgs::new(dst) };
    assert_eq!(lab.run_client(common::exe(), &one).unwrap().ok_count(), 1);
    let line = text_trace.wait_stdout("the stalled connection's line", |l| l.contains("syn_retransmitted"));
    assert!(line.contains(&format!(" {process}/connworker ")), "{line}");
}

/// Two cgroups named as docker names its containers' ([`CONTAINER`], [`OTHER_CONTAINER`]),
/// and a lab whose client already has the server's cookie: every connection from there on
/// is accepted TFO. Dropped server first, cgroups last.
struct ContainerLab {
    _server: ServerHandle,
    lab: Lab,
    dirs: [PathBuf; 2],
    listen: SocketAddr,
    _cg: Cgroups,
}

impl ContainerLab {
    fn new() -> ContainerLab {
        let mut cg = Cgroups::new();
        let dirs = [CONTAINER, OTHER_CONTAINER].map(|id| cg.make(&format!("docker-{id}.scope")));
        let lab = Lab::create(LabConfig::default()).unwrap();
        let listen = SocketAddr::new(lab.server_addr(0, false).unwrap(), 8080);
        let server = lab
            .start_server_with(common::exe(), &ServerArgs { tfo_queue: 16, ..ServerArgs::new(listen) })
            .unwrap();
        // The cookie first, before any tracer starts.
        assert_eq!(lab.run_client(common::exe(), &ClientArgs::new(listen)).unwrap().ok_count(), 1);
        ContainerLab { _server: server, lab, dirs, listen, _cg: cg }
    }

    /// `counts[i]` connections from a client in container i, one container after the
    /// other; returns the kernel's TcpExtTCPFastOpenActive delta, checked against the
    /// lab's own count first.
    fn connect(&self, counts: [u32; 2]) -> u64 {
        let before = Deltas::since(&self.lab);
        for (dir, n) in self.dirs.iter().zip(counts) {
            let args = ClientArgs { count: n, cgroup: Some(dir.clone()), ..ClientArgs::new(self.listen) };
            assert_eq!(self.lab.run_client(common::exe(), &args).unwrap().ok_count(), n as usize);
        }
        let accepted = before.client().get("TcpExtTCPFastOpenActive");
        assert_eq!(accepted, u64::from(counts[0] + counts[1]), "the kernel agrees with the lab first");
        accepted
    }
}

/// `export --top-containers 1`: the first container seen keeps its own `container` label,
/// the next is summed into "other", and together they equal the kernel's count.
fn export_labels_containers_within_a_bound() {
    require_kernel!();
    let other = OTHER_CONTAINER;
    let lab = ContainerLab::new();
    let exporter: SocketAddr = format!("127.0.0.1:{}", common::free_port()).parse().unwrap();
    let cli_ns = netns_inode(&lab.lab, Side::Client).to_string();
    let tracer = Tracer::start_command(&[
        "export",
        "--web.listen-address",
        &exporter.to_string(),
        "--netns",
        &cli_ns,
        "--top-containers",
        "1",
    ]);
    let accepted = lab.connect([3, 4]);
    let metric = "tfo_trace_connections_total";
    let sum = |text: &str, label: &str| {
        common::metric_sum(text, metric, &[r#"role="client""#, r#"outcome="accepted""#, label])
    };
    // The kernel's counts are complete at once; the events that label them reach the
    // exporter within its poll interval. The first container's connections came first, so
    // once its series shows them all, every label is settled.
    let first = format!(r#"container="{}""#, &CONTAINER[..12]);
    let text = common::eventually("the first container's 3 connections in its series", || {
        let (status, text) = common::http_get(exporter, "/metrics").unwrap();
        assert_eq!(status, 200);
        if sum(&text, &first) >= 3.0 {
            Ok(text)
        } else {
            Err(text)
        }
    });
    drop(tracer);
    assert_eq!(sum(&text, &first), 3.0, "{text}");
    assert_eq!(sum(&text, r#"container="other""#), 4.0, "{text}");
    assert_eq!(sum(&text, ""), accepted as f64, "{text}");
    assert!(!text.contains(&other[..12]), "the second container has no series of its own: {text}");
}

/// `top --batch --json`, scoped to the lab's client namespace, while clients in two
/// containers make N and M accepted TFO connections: the containers table has a row for
/// each with N and M accepted, and its rows sum to the kernel's count. The recording made
/// meanwhile replays (`top --from`) into the same rows.
fn top_tables_each_container() {
    require_kernel!();
    let lab = ContainerLab::new();
    let cli_ns = netns_inode(&lab.lab, Side::Client).to_string();
    let recording = std::env::temp_dir().join(format!("tfo-top-containers-{}.jsonl", std::process::id()));
    let _ = std::fs::remove_file(&recording); // a first run's, if this is the retry
    let top = Tracer::start_command(&[
        "top",
        "--batch",
        "--json",
        "-d",
        "1",
        "--netns",
        &cli_ns,
        "--record",
        &recording.display().to_string(),
    ]);
    let (n, m) = (3u32, 4u32);
    let accepted = lab.connect([n, m]);
    // Stopped once the connections are done: its last snapshot has every event.
    let (lines, stderr) = top.stop_lines();
    let check = |line: Option<&String>, what: &str| {
        let line = line.unwrap_or_else(|| panic!("{what}: no snapshot; stderr {stderr:?}"));
        let snap: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{what}: {e}: {line}"));
        let rows = snap["containers"].as_array().unwrap_or_else(|| panic!("{what}: no containers: {snap}"));
        let accepted_in = |id: &str| {
            let row = rows.iter().find(|r| r["container"] == id[..12]);
            row.and_then(|r| r["accepted"].as_u64())
        };
        assert_eq!(accepted_in(CONTAINER), Some(u64::from(n)), "{what}: {rows:?}");
        assert_eq!(accepted_in(OTHER_CONTAINER), Some(u64::from(m)), "{what}: {rows:?}");
        let sum: u64 = rows.iter().map(|r| r["accepted"].as_u64().unwrap()).sum();
        assert_eq!(sum, accepted, "{what}: the rows sum to the kernel's TcpExtTCPFastOpenActive: {rows:?}");
    };
    check(lines.last(), "live");
    let replay = Command::new(common::exe())
        .args(["top", "--batch", "--json", "--from"])
        .arg(&recording)
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&recording);
    assert!(replay.status.success(), "{}", String::from_utf8_lossy(&replay.stderr));
    let text = String::from_utf8_lossy(&replay.stdout).into_owned();
    let replayed: Vec<String> = text.lines().map(String::from).collect();
    check(replayed.last(), "replayed");
}

/// The parts of `report --format json` and `top --batch --json` that the events make (not
/// where they were read from, nor when).
fn replayed(args: &[&str], from: &Path, filter: &[&str]) -> (Value, Value) {
    let run = |cmd: &[&str]| {
        let out =
            Command::new(common::exe()).args(cmd).arg("--from").arg(from).args(filter).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{cmd:?} --from {} {filter:?}: {err}", from.display());
        String::from_utf8(out.stdout).unwrap()
    };
    let report: Value =
        serde_json::from_str(&run(&[&["report", "--format", "json", "--all"][..], args].concat())).unwrap();
    let top_text = run(&["top", "--batch", "--json"]);
    let top: Value = serde_json::from_str(top_text.lines().last().unwrap()).unwrap();
    // Each tracer times a connection with its own program run, a few us apart from the
    // others': times are left out, what was counted stays.
    fn untimed(v: &mut Value) {
        match v {
            Value::Object(m) => {
                m.retain(|k, _| !["p50_us", "p99_us"].contains(&k.as_str()));
                m.values_mut().for_each(untimed);
            }
            Value::Array(a) => a.iter_mut().for_each(untimed),
            _ => {}
        }
    }
    let pick = |v: &Value, keys: &[&str]| -> Value {
        let mut picked = keys.iter().map(|k| (k.to_string(), v[k].clone())).collect();
        untimed(&mut picked);
        picked
    };
    (
        pick(&report, &["summary", "destinations", "listeners"]),
        pick(&top, &["events", "totals", "destinations", "listeners", "processes", "containers"]),
    )
}

/// Filters on a replay select what they select live (issue 31, item 2): one lab, one
/// tracer recording everything of it, and beside it one tracer per filter, filtered in
/// the kernel, recording what it saw. Each filter's own recording holds the events the
/// test's own traffic gives it (7 TFO connections, each accepted at both ends by the
/// kernel's TcpExtTCPFastOpenActive and Passive: which of them a filter selects is known
/// from where each went, from which cgroup, to which server), never all or nothing; and
/// `report --from` and `top --from` of the whole recording with a filter must show
/// exactly what they show of that filter's own recording.
fn filters_select_the_same_in_a_replay() {
    require_kernel!();
    let mut cg = Cgroups::new();
    let (cg_a, cg_b) = (cg.make("a.scope"), cg.make("b.scope"));
    let lab = Lab::create(LabConfig::default()).unwrap();
    let (v4, v6) = (lab.server_addr(0, false).unwrap(), lab.server_addr(0, true).unwrap());
    let (p1, p2, p1v6) = (SocketAddr::new(v4, 8080), SocketAddr::new(v4, 8081), SocketAddr::new(v6, 8082));
    let servers: Vec<ServerHandle> = [p1, p2, p1v6]
        .iter()
        .map(|&a| {
            lab.start_server_with(common::exe(), &ServerArgs { tfo_queue: 16, ..ServerArgs::new(a) }).unwrap()
        })
        .collect();
    for p in [p1, p2, p1v6] {
        assert_eq!(lab.run_client(common::exe(), &ClientArgs::new(p)).unwrap().ok_count(), 1);
    }
    let (cli_name, srv_name) = (lab.netns(Side::Client).to_string(), lab.netns(Side::Server).to_string());
    let ours = ["--netns", &cli_name, "--netns", &srv_name];
    let folder = common::TempDir::new("replay-filters");
    let dir = &folder.0;
    let s1_pid = servers[0].pid().to_string();
    let (a_cgroup, v6_prefix, client_v4) =
        (rel(&cg_a), format!("{v6}/128"), format!("{}/32", lab.client_addr(false)));
    // Each filter, and the events it selects of the traffic below (2 connections to p1
    // and 2 to p2 from cgroup a, 3 to p1v6 from cgroup b; an event at each end of each).
    let filters: Vec<(Vec<&str>, u64)> = vec![
        ([&["--daddr", &v6_prefix][..], &ours].concat(), 3 * 2), // to p1v6, both ends
        ([&["--port", "8081", "--role", "server"][..], &ours].concat(), 2), // p2's server
        ([&["--pid", &s1_pid][..], &ours].concat(), 2),          // p1's listener's owner
        ([&["--cgroup", &a_cgroup][..], &ours].concat(), 2 + 2), // the clients in a
        ([&["--outcome", "accepted", "--saddr", &client_v4][..], &ours].concat(), 4 * 2), // IPv4 clients
        (vec!["--comm", "tfo-trace", "--netns", &srv_name], 7),  // every server child
    ];
    let record = |name: &str, flags: &[&str]| {
        let file = dir.join(name);
        let path = file.to_str().unwrap().to_string();
        let tracer = Tracer::start_command(&[&["trace", "--json", "--record", &path][..], flags].concat());
        (file, tracer)
    };
    let (all, all_tracer) = record("all.jsonl", &ours);
    let filtered: Vec<(PathBuf, Tracer)> =
        filters.iter().enumerate().map(|(i, (f, _))| record(&format!("f{i}.jsonl"), f)).collect();
    let counters = Deltas::since(&lab);
    let client = |dst, n, dir: &PathBuf| {
        let args = ClientArgs { count: n, cgroup: Some(dir.clone()), ..ClientArgs::new(dst) };
        assert_eq!(lab.run_client(common::exe(), &args).unwrap().ok_count(), n as usize);
    };
    client(p1, 2, &cg_a);
    client(p2, 2, &cg_a);
    client(p1v6, 3, &cg_b);
    let (all_events, _) = all_tracer.stop();
    let filtered: Vec<PathBuf> = filtered
        .into_iter()
        .map(|(file, t)| {
            t.stop_lines();
            file
        })
        .collect();
    drop(servers);
    let (dc, ds) = counters.both();
    let accepted = (dc.get("TcpExtTCPFastOpenActive"), ds.get("TcpExtTCPFastOpenPassive"));
    assert_eq!(accepted, (7, 7), "every connection TFO-accepted at both ends: {dc:?} {ds:?}");
    assert_eq!(all_events.len(), 14, "7 connections, both ends: {all_events:?}");
    for ((flags, expected), own) in filters.iter().zip(&filtered) {
        let kernel = replayed(&[], own, &[]);
        let events = kernel.1["events"].as_u64().unwrap();
        assert_eq!(events, *expected, "{flags:?}: the events of the traffic it selects");
        assert_eq!(replayed(&[], &all, flags), kernel, "{flags:?}: the replay filters as the kernel did");
    }
}

/// The same without a kernel, on the lab recording: a filter narrows the replay, and
/// a filter that matches nothing shows nothing (exit 0).
fn filters_narrow_a_replay_without_a_kernel() {
    let lab = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../fuzz/seeds/recording/lab.jsonl"));
    let (report, top) = replayed(&[], lab, &["--daddr", "198.18.0.3"]);
    let rows = report["destinations"].as_array().unwrap();
    assert!(!rows.is_empty() && rows.iter().all(|d| d["destination"] == "198.18.0.3:8080"), "{report}");
    assert_eq!(report["listeners"], serde_json::json!([]), "the server's address is 198.18.0.2");
    assert!(top["destinations"].as_array().unwrap().iter().all(|d| d["destination"] == "198.18.0.3:8080"));
    let (report, top) = replayed(&[], lab, &["--role", "server"]);
    assert_eq!(report["summary"]["connections"], 0, "{report}");
    assert!(!report["listeners"].as_array().unwrap().is_empty());
    assert_eq!(top["events"], top["totals"]["server"]["attempts"]);
    let (_, top) = replayed(&[], lab, &["--pid", "1"]);
    assert_eq!(top["events"], 0);
    // top's `/` filter (--filter) on a namespace's `ip netns` name (issue 31, item 12).
    let out = Command::new(common::exe())
        .args(["top", "--batch", "--json", "--filter", "tfolab-24622-0-srv", "--from"])
        .arg(lab)
        .output()
        .unwrap();
    let snap: Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows: Vec<&Value> = snap["listeners"].as_array().unwrap().iter().collect();
    assert!(!rows.is_empty() && rows.iter().all(|l| l["netns"] == 4026532246u32), "{snap}");
    assert_eq!(snap["destinations"], serde_json::json!([]), "no destination has that name: {snap}");
}

/// Bad filter values are usage errors, before anything loads: clap's message, exit 2.
fn bad_filter_values_are_usage_errors() {
    let cases: [&[&str]; 8] = [
        &["trace", "--port", "0"],
        &["trace", "--port", "70000"],
        &["trace", "--daddr", "10.0.0.0/33"],
        &["trace", "--saddr", "not-an-address"],
        &["trace", "--comm", "a-name-far-too-long-for-comm"],
        &["trace", "--outcome", "accept"],
        &["top", "--netns", "no-such-namespace-anywhere"],
        &["export", "--cgroup", "/no/such/cgroup/here"],
    ];
    for args in cases {
        let out = Command::new(common::exe()).args(args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.starts_with("error:") && !err.contains("panicked"), "{args:?}: {err}");
    }
    let many: Vec<String> = ["trace"]
        .into_iter()
        .map(String::from)
        .chain((1..=9).flat_map(|p| ["--port".into(), p.to_string()]))
        .collect();
    let out = Command::new(common::exe()).args(&many).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("--port given 9 times: at most 8"), "{err}");
}

module_tests!(
    filters_narrow_a_replay_without_a_kernel,
    filters_select_the_same_in_a_replay,
    client_and_server_name_their_cgroup_and_container,
    filters_select_in_the_kernel,
    export_labels_containers_within_a_bound,
    top_tables_each_container,
    bad_filter_values_are_usage_errors,
    dual_stack_listeners_show_and_filter_ipv4,
    comm_is_the_process_and_the_thread_beside_it,
);
