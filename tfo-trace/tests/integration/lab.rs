//! The lab against the real kernel: TFO connections between two namespaces, checked with
//! the kernel's own counters. Needs root and iproute2 (nftables for the middlebox cases);
//! skips with a message otherwise.
use std::net::SocketAddr;
use std::os::unix::fs::MetadataExt as _;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::common;

use common::Deltas;
use tfo_trace::lab::{ClientArgs, ClientMode, Lab, LabConfig, ServerArgs, Side};

const EXE: &str = env!("CARGO_BIN_EXE_tfo-trace");
const PORT: u16 = 8080;

/// Why this machine cannot run the test, if it cannot.
fn skip_reason(need_nft: bool) -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root".into());
    }
    let mut tools = vec!["ip", "sysctl"];
    if need_nft {
        tools.push("nft");
    }
    for t in tools {
        let found =
            Command::new(t).arg("--version").output().is_ok() || Command::new(t).arg("-V").output().is_ok();
        if !found {
            return Some(format!("`{t}` not found"));
        }
    }
    None
}

macro_rules! skip_unless_able {
    ($need_nft:expr) => {
        if let Some(why) = skip_reason($need_nft) {
            common::skip(format!("{why}; lab tests create network namespaces"));
        }
    };
}

fn netns_list() -> Vec<String> {
    let out = Command::new("ip").args(["netns", "list"]).output().expect("ip netns list");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect()
}

/// Runs `body` with a fresh lab and checks that the lab's namespaces exist during the run
/// and are gone afterwards.
fn with_lab(cfg: LabConfig, body: impl FnOnce(&Lab)) {
    let lab = Lab::create(cfg).expect("lab");
    let names = [lab.netns(Side::Client).to_string(), lab.netns(Side::Server).to_string()];
    let during = netns_list();
    assert!(names.iter().all(|n| during.contains(n)), "{names:?} not in {during:?}");
    body(&lab);
    drop(lab);
    let after = netns_list();
    assert!(names.iter().all(|n| !after.contains(n)), "left behind: {names:?} in {after:?}");
}

fn show(label: &str, d: &common::Nstat) {
    let tfo: Vec<_> = d.nonzero().filter(|(k, _)| k.contains("FastOpen") || k.contains("Syn")).collect();
    eprintln!("{label}: {tfo:?}");
}

/// Five connections to a TFO listener: the first only fetches a cookie, the other four
/// carry their data in the SYN.
fn tfo((v6, mode): (bool, ClientMode)) {
    skip_unless_able!(false);
    with_lab(LabConfig::default(), |lab| {
        let server = lab.start_server(Path::new(EXE), 0, PORT, 16, v6).expect("server");

        // ip netns exec execs: the pid we spawned is the lab-server itself, in the lab's netns.
        let exe = std::fs::read_link(format!("/proc/{}/exe", server.pid())).expect("exe link");
        assert_eq!(exe, std::fs::canonicalize(EXE).expect("canonical exe"));
        let ns_ino = std::fs::metadata(format!("/proc/{}/ns/net", server.pid())).expect("ns").ino();
        let run_ino =
            std::fs::metadata(Path::new("/run/netns").join(lab.netns(Side::Server))).expect("netns").ino();
        assert_eq!(ns_ino, run_ino, "server is not in the server namespace");

        let before = Deltas::since(lab);
        let spec = ClientArgs { count: 5, mode, ..ClientArgs::new(server.addr()) };
        let run = lab.run_client(Path::new(EXE), &spec).expect("client run");
        let (cli, srv) = before.both();
        show(&format!("v6={v6} {mode} client"), &cli);
        show(&format!("v6={v6} {mode} server"), &srv);

        assert!(run.pid > 0 && run.pid != server.pid());
        assert_eq!(run.results.len(), 5, "{run:?}");
        assert!(run.results.iter().all(|r| r.ok && r.rx_bytes == 64 && r.sport != 0), "{run:?}");
        assert_eq!(cli.get("TcpExtTCPFastOpenActive"), 4);
        assert_eq!(cli.get("TcpExtTCPFastOpenActiveFail"), 0);
        assert_eq!(cli.get("TcpExtTCPSynRetrans"), 0);
        assert_eq!(srv.get("TcpExtTCPFastOpenPassive"), 4);
        assert_eq!(srv.get("TcpExtTCPFastOpenCookieReqd"), 1);
        assert_eq!(srv.get("TcpExtTCPFastOpenPassiveFail"), 0);
    });
}

/// With a cookie cached, a middlebox that drops SYN-data costs each connection one SYN
/// RTO (1 s): the plain SYN retransmission gets through, the data follows the handshake.
fn middlebox_drops_syn_data() {
    skip_unless_able!(true);
    with_lab(LabConfig::default(), |lab| {
        let exe = Path::new(EXE);
        let server = lab.start_server(exe, 0, PORT, 16, false).expect("server");
        let first = lab.run_client(exe, &ClientArgs::new(server.addr())).expect("cookie run");
        assert!(first.results.iter().all(|r| r.ok), "{first:?}");

        lab.middlebox_drop_syn_data(None).expect("middlebox");
        let before = Deltas::since(lab);
        let run = lab
            .run_client(exe, &ClientArgs { count: 2, ..ClientArgs::new(server.addr()) })
            .expect("client run");
        let (cli, srv) = before.both();
        show("middlebox client", &cli);
        show("middlebox server", &srv);
        let durations: Vec<_> = run.results.iter().map(|r| Duration::from_micros(r.elapsed_us)).collect();
        eprintln!("middlebox durations: {durations:?}");

        assert_eq!(run.results.len(), 2, "{run:?}");
        for (r, d) in run.results.iter().zip(&durations) {
            assert!(r.ok, "{r:?}");
            assert!(*d >= Duration::from_millis(900) && *d <= Duration::from_millis(1500), "{r:?}");
        }
        assert_eq!(cli.get("TcpExtTCPSynRetrans"), 2);
        assert_eq!(cli.get("TcpExtTCPFastOpenActiveFail"), 2);
        assert_eq!(cli.get("TcpExtTCPFastOpenActive"), 0);
        assert_eq!(lab.middlebox_dropped().expect("nft counters"), 2);
        let metrics = lab.tcp_metrics(Side::Client).expect("tcp_metrics");
        assert!(metrics.contains("fo_syn_drops 2"), "{metrics}");
    });
}

/// The demo's layout: two destinations on one server, the middlebox only in front of the
/// second. Also checks that the cookie-only SYN (no data) passes the filter.
fn middlebox_on_one_of_two_destinations() {
    skip_unless_able!(true);
    let cfg = LabConfig { client_fastopen: 0x3, server_fastopen: 0x3, server_addrs: 2 };
    with_lab(cfg, |lab| {
        let exe = Path::new(EXE);
        let listen: SocketAddr = "0.0.0.0:8080".parse().expect("addr");
        let _server = lab
            .start_server_with(exe, &ServerArgs { tfo_queue: 16, max_seconds: 60, ..ServerArgs::new(listen) })
            .expect("server");
        let clean = SocketAddr::new(lab.server_addr(0, false).expect("addr 0"), PORT);
        let filtered = SocketAddr::new(lab.server_addr(1, false).expect("addr 1"), PORT);
        assert_eq!(lab.sysctl(Side::Client, "net.ipv4.tcp_fastopen").expect("sysctl"), "3");

        lab.middlebox_drop_syn_data(Some(filtered.ip())).expect("middlebox");
        // Cookie requests carry no data: they must pass the filter.
        for dst in [clean, filtered] {
            let r = lab.run_client(exe, &ClientArgs::new(dst)).expect("cookie run");
            assert!(r.results[0].ok && r.results[0].elapsed_us < 500_000, "{r:?}");
        }
        // A SYN with a cookie and no data must pass too (72 bytes of IPv4).
        let before = Deltas::since(lab);
        let r = lab
            .run_client(exe, &ClientArgs { payload_bytes: 0, ..ClientArgs::new(filtered) })
            .expect("empty run");
        assert!(r.results[0].ok && r.results[0].elapsed_us < 500_000, "{r:?}");
        assert_eq!(before.client().get("TcpExtTCPSynRetrans"), 0);

        let before = Deltas::since(lab);
        let fast = lab.run_client(exe, &ClientArgs::new(clean)).expect("clean run");
        let slow = lab.run_client(exe, &ClientArgs::new(filtered)).expect("filtered run");
        let cli = before.client();
        show("two destinations client", &cli);
        eprintln!("clean {} us, filtered {} us", fast.results[0].elapsed_us, slow.results[0].elapsed_us);
        assert!(fast.results[0].ok && fast.results[0].elapsed_us < 500_000, "{fast:?}");
        assert!(slow.results[0].ok && slow.results[0].elapsed_us >= 900_000, "{slow:?}");
        assert_eq!(cli.get("TcpExtTCPFastOpenActive"), 1);
        assert_eq!(cli.get("TcpExtTCPSynRetrans"), 1);

        // Server stops taking TFO after issuing cookies: the data is not acked in the
        // SYN-ACK and the client retransmits it (ActiveFail), without any SYN loss.
        lab.set_sysctl(Side::Server, "net.ipv4.tcp_fastopen", "0").expect("sysctl");
        let before = Deltas::since(lab);
        let r = lab.run_client(exe, &ClientArgs::new(clean)).expect("tfo-off run");
        let cli = before.client();
        show("server TFO off client", &cli);
        assert!(r.results[0].ok, "{r:?}");
        assert_eq!(cli.get("TcpExtTCPFastOpenActiveFail"), 1);
        assert_eq!(cli.get("TcpExtTCPSynRetrans"), 0);
    });
}

fn bad_config_is_rejected() {
    skip_unless_able!(false);
    // Validated before anything is created (other tests' labs run in parallel, so a
    // namespace count here would race).
    let err = Lab::create(LabConfig { server_addrs: 3, ..LabConfig::default() }).expect_err("3 addrs");
    assert!(err.to_string().contains("server_addrs"), "{err:#}");
}

fn client_refuses_foreign_destinations() {
    skip_unless_able!(false);
    with_lab(LabConfig::default(), |lab| {
        let dst: SocketAddr = "192.0.2.1:80".parse().expect("addr");
        assert!(lab.spawn_client(Path::new(EXE), &ClientArgs::new(dst)).is_err());
    });
}

/// A failure on the last step of create (an out-of-range sysctl value) must remove the
/// namespaces, veth and addresses made before it.
fn failed_create_leaves_nothing() {
    skip_unless_able!(false);
    let err = Lab::create(LabConfig { client_fastopen: u32::MAX, ..LabConfig::default() })
        .expect_err("tcp_fastopen=4294967295 is rejected by the kernel");
    let msg = format!("{err:#}");
    assert!(msg.contains("sysctl") && msg.contains("Invalid argument"), "{msg}");
    // The error names both namespaces ("creating lab <cli> / <srv>").
    let names: std::collections::BTreeSet<&str> = msg
        .split_whitespace()
        .filter(|w| w.starts_with("tfolab-"))
        .map(|w| w.trim_end_matches(':'))
        .collect();
    assert_eq!(names.len(), 2, "{msg}");
    let after = netns_list();
    assert!(names.iter().all(|n| !after.iter().any(|a| a == n)), "left behind: {names:?} in {after:?}");
}

/// `ip netns exec` execs: the pid spawn_client reports is the lab-client process itself,
/// running the tfo-trace executable inside the client namespace.
fn client_pid_is_the_client_process() {
    skip_unless_able!(false);
    with_lab(LabConfig::default(), |lab| {
        let exe = Path::new(EXE);
        let server = lab.start_server(exe, 0, PORT, 16, false).expect("server");
        let spec = ClientArgs { count: 3, interval_ms: 300, ..ClientArgs::new(server.addr()) };
        let mut child = lab.spawn_client(exe, &spec).expect("spawn client");
        let pid = child.pid();
        // Right after spawn the pid may still be running `ip`; it execs within milliseconds.
        let want = std::fs::canonicalize(EXE).expect("canonical exe");
        common::eventually(format!("pid {pid} running {want:?}"), || {
            match std::fs::read_link(format!("/proc/{pid}/exe")) {
                Ok(exe) if exe == want => Ok(()),
                other => Err(other),
            }
        });
        let ns_ino = std::fs::metadata(format!("/proc/{pid}/ns/net")).expect("ns").ino();
        let run_ino =
            std::fs::metadata(Path::new("/run/netns").join(lab.netns(Side::Client))).expect("netns").ino();
        assert_eq!(ns_ino, run_ino, "client is not in the client namespace");
        assert!(!child.has_exited().expect("try_wait"));
        let run = child.wait(spec.worst_case() + Duration::from_secs(60)).expect("client run");
        assert_eq!(run.pid, pid);
        assert_eq!(run.ok_count(), 3, "{run:?}");
    });
}

/// Failed connections are reported per line, and the client still exits 0.
fn refused_connections_are_reported() {
    skip_unless_able!(false);
    with_lab(LabConfig::default(), |lab| {
        let dst = SocketAddr::new(lab.server_addr(0, true).expect("addr"), 9); // nobody listens
        for mode in [ClientMode::MsgFastopen, ClientMode::FastopenConnect] {
            let spec = ClientArgs { count: 2, mode, timeout_ms: 1000, ..ClientArgs::new(dst) };
            let run = lab.run_client(Path::new(EXE), &spec).expect("client run");
            eprintln!("refused {mode}: {:?}", run.results);
            assert_eq!(run.results.len(), 2);
            for r in &run.results {
                assert!(!r.ok && r.error.as_deref().is_some_and(|e| e.contains("refused")), "{r:?}");
            }
        }
    });
}

module_tests!(
    tfo {
        ipv4_msg_fastopen: (false, ClientMode::MsgFastopen),
        ipv4_fastopen_connect: (false, ClientMode::FastopenConnect),
        ipv6_msg_fastopen: (true, ClientMode::MsgFastopen),
    },
    middlebox_drops_syn_data,
    middlebox_on_one_of_two_destinations,
    bad_config_is_rejected,
    client_refuses_foreign_destinations,
    failed_create_leaves_nothing,
    client_pid_is_the_client_process,
    refused_connections_are_reported,
);
