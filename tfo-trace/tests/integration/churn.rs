//! Socket churn: a million short TFO connections to 100,000 destinations (addresses of
//! 10.0.0.0/8 routed to the namespace itself, times 10,000 listeners) while `export` and
//! `top --batch` run. Every count of both must equal the kernel's counters; every kernel
//! map of the tracer must stay bounded, its per-connection state gone with the sockets; the
//! tracers' memory must stay bounded.
use crate::common;

use std::{net::SocketAddr, process::Command};

use common::{http_get, metric_sum, Deltas, Tracer};
use serde_json::Value;
use tfo_trace::lab::{Lab, LabConfig, Side};

const CONNECTIONS: u64 = 1_000_000;
const DESTINATIONS: u32 = 100_000;
const LISTENERS: u32 = 10_000;

/// `bpftool ARGS -j`, parsed; fails the test when bpftool fails or says no JSON (a map
/// that cannot be read must not pass as an empty one).
fn bpftool_json(args: &[&str]) -> Value {
    common::bpftool::json(args).unwrap_or_else(|e| panic!("{e}"))
}

/// The BPF maps a process holds: (id, name, type).
fn maps_of(pid: u32) -> Vec<(u64, String, String)> {
    let ids = common::bpf_ids_of(pid, "map_id");
    ids.into_iter()
        .map(|id| {
            let v = bpftool_json(&["map", "show", "id", &id.to_string()]);
            let field =
                |k: &str| v[k].as_str().unwrap_or_else(|| panic!("map {id}: no {k}: {v}")).to_string();
            (id, field("name"), field("type"))
        })
        .collect()
}

/// Keys of a hash map, as bytes.
fn keys(id: u64) -> Vec<Vec<u8>> {
    let v = bpftool_json(&["map", "dump", "id", &id.to_string()]);
    let entries = v.as_array().unwrap_or_else(|| panic!("map {id}: not a list of entries: {v}"));
    entries
        .iter()
        .map(|e| {
            let key = e["key"].as_array().unwrap_or_else(|| panic!("map {id}: an entry without a key: {e}"));
            key.iter()
                .map(|b| {
                    let hex = b.as_str().unwrap_or_else(|| panic!("map {id}: key byte {b}"));
                    u8::from_str_radix(hex.trim_start_matches("0x"), 16)
                        .unwrap_or_else(|e| panic!("{hex}: {e}"))
                })
                .collect()
        })
        .collect()
}

/// Keys that start with this namespace's inode (ListenerKey, CountKey: `netns` first).
fn of_netns(keys: &[Vec<u8>], netns: u32) -> usize {
    keys.iter().filter(|k| k.get(..4) == Some(&netns.to_le_bytes()[..])).count()
}

fn rss_kib(pid: u32, key: &str) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':')?.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn a_million_connections_leave_nothing_behind_and_miss_no_count() {
    require_kernel!();
    common::bpftool::require("to read the tracer's maps");
    let lab = Lab::create(LabConfig::default()).unwrap();
    lab.set_sysctl(Side::Client, "net.ipv4.tcp_fastopen", "3").unwrap();
    let ns = lab.netns(Side::Client).to_string();
    let route =
        Command::new("ip").args(["-n", &ns, "route", "add", "local", "10.0.0.0/8", "dev", "lo"]).status();
    assert!(matches!(route, Ok(s) if s.success()), "ip route add local 10.0.0.0/8: {route:?}");
    let netns = common::netns_inode(&lab, Side::Client);
    let inode = netns.to_string();

    let mut export =
        Tracer::start_command(&["export", "--web.listen-address", "127.0.0.1:0", "--netns", &inode]);
    let line = export.wait_stderr("serving metrics on http://");
    let addr: SocketAddr =
        line.split("http://").nth(1).and_then(|r| r.split('/').next()).unwrap().parse().unwrap();
    let mut top = Tracer::start_command(&["top", "--batch", "--json", "--delay", "5", "--netns", &inode]);
    let before = Deltas::since(&lab);

    let out = Command::new("ip")
        .args(["netns", "exec", &ns])
        .arg(common::exe())
        .args(["lab-load", "--listen", "127.0.0.1:20000", "--threads", "2"])
        .args(["--listeners", &LISTENERS.to_string(), "--destinations", &DESTINATIONS.to_string()])
        .args(["--count", &CONNECTIONS.to_string(), "--duration", "400s"])
        .output()
        .expect("running lab-load");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "lab-load exited with {}: {said}", out.status);
    let report: Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("lab-load's report: {e}: {said}"));
    // The load generator's own timeouts (2 s per connection) may fail a few on a busy
    // machine; the counts below are checked against the kernel's either way.
    let made = report["connections"].as_u64().unwrap();
    assert!(made >= CONNECTIONS * 99 / 100, "{report}");
    let d = before.client();

    // The counts against the kernel's: each scrape reads the kernel's counts then.
    let (_, text) = http_get(addr, "/metrics").unwrap();
    let sum = |role: &str, outcome: &str| {
        metric_sum(
            &text,
            "tfo_trace_connections_total",
            &[&format!("role=\"{role}\""), &format!("outcome=\"{outcome}\"")],
        ) as u64
    };
    assert_eq!(sum("client", "accepted"), d.get("TcpExtTCPFastOpenActive"), "{d:?}");
    assert_eq!(sum("server", "accepted"), d.get("TcpExtTCPFastOpenPassive"), "{d:?}");
    assert_eq!(sum("client", "cookie_requested"), d.get("TcpExtTCPFastOpenCookieReqd"), "{d:?}");
    assert!(d.get("TcpExtTCPFastOpenActive") > CONNECTIONS * 9 / 10, "mostly TFO: {d:?}");
    // top's totals of the lab's namespace, at its first snapshot that has them all, equal
    // them too (a snapshot every 5 s; the kernel's counts stopped with lab-load).
    let kernel = [
        ("client", "accepted", d.get("TcpExtTCPFastOpenActive")),
        ("server", "accepted", d.get("TcpExtTCPFastOpenPassive")),
        ("client", "cookie_requests", d.get("TcpExtTCPFastOpenCookieReqd")),
    ];
    let totals = |line: &str| -> Vec<u64> {
        let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("top's line {line:?}: {e}"));
        kernel.map(|(role, field, _)| v["totals"][role][field].as_u64().unwrap_or(0)).to_vec()
    };
    let expected: Vec<u64> = kernel.iter().map(|k| k.2).collect();
    let snapshot = top.wait_stdout("top's totals up to the kernel's", |l| {
        totals(l).iter().zip(&expected).all(|(t, k)| t >= k)
    });
    eprintln!("top's totals {:?} against the kernel's {kernel:?}", totals(&snapshot));
    assert_eq!(totals(&snapshot), expected, "top's totals against the kernel's {kernel:?}");

    // Kernel maps: bounded, and the state of closed sockets gone (lab-load has exited,
    // its sockets closed with it).
    let maps = maps_of(export.pid());
    for wanted in ["CONNS", "LISTENERS", "COUNTS"] {
        assert!(
            maps.iter().any(|(_, name, _)| name == wanted),
            "the exporter holds no {wanted} map: {maps:?}"
        );
    }
    for (id, name, kind) in &maps {
        match name.as_str() {
            // Every backend keeps a TFO connect's state in this hash until its outcome.
            "CONNS" => assert_eq!(keys(*id).len(), 0, "connection state left behind"),
            // Listeners elsewhere on the host stay known; the lab's closed ones must not.
            "LISTENERS" => {
                assert_eq!(of_netns(&keys(*id), netns), 0, "{LISTENERS} listeners closed, entries left")
            }
            // One row per role and outcome in the lab's namespace.
            "COUNTS" => assert!(of_netns(&keys(*id), netns) <= 26, "COUNTS grew to {} rows", keys(*id).len()),
            _ => eprintln!("map {name} ({kind}) not checked"),
        }
    }
    // Userspace memory stays bounded: top's tables are capped (10,000 groups each).
    let (export_rss, top_hwm) = (rss_kib(export.pid(), "VmHWM"), rss_kib(top.pid(), "VmHWM"));
    eprintln!("peak RSS: export {export_rss} KiB, top {top_hwm} KiB");
    assert!(export_rss < 64 * 1024, "export peak RSS {export_rss} KiB");
    assert!(top_hwm < 128 * 1024, "top peak RSS {top_hwm} KiB");
    top.stop_lines();
    export.stop_lines();
}

module_tests!(a_million_connections_leave_nothing_behind_and_miss_no_count);
