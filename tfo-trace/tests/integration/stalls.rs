//! `tfo-trace stalls` against the real kernel: a middlebox drops SYN-data, and every
//! connection that paid the 1 s SYN timeout must be listed, matching the kernel's
//! TcpExtTCPSynRetrans and the middlebox's drop counter, each with the time tcpdump shows
//! it lost (`common::wire`). And every view that counts stalls (`stalls`, `top` and
//! `report` on one recording, a live `export`) must give the same stalls and time lost.
use crate::common;

use std::{net::SocketAddr, path::PathBuf, process::Command};

use common::{netns_inode, wire::WireStalls, Deltas, HookRun, Tracer};
use serde_json::Value;
use tfo_trace::{
    events::record,
    lab::{traffic::ClientArgs, Lab, LabConfig, Side},
};

/// A listed stall as the event it is (`stalls --json` lines are events plus their cause).
fn event_of(line: &Value) -> tfo_trace::events::Event {
    let mut event = line.clone();
    event.as_object_mut().map(|o| o.remove("cause"));
    serde_json::from_value(event).unwrap_or_else(|e| panic!("not an event: {e}: {line}"))
}

fn stalls_lists_every_connection_that_paid_a_syn_timeout() {
    require_kernel!();
    let lab = Lab::create(LabConfig::default()).unwrap();
    let _server = lab.start_server(common::exe(), 0, 8443, 16, false).unwrap();
    let dst = SocketAddr::new(lab.server_addr(0, false).unwrap(), 8443);
    let clean = lab.run_client(common::exe(), &ClientArgs { count: 3, ..ClientArgs::new(dst) }).unwrap();
    assert_eq!(clean.ok_count(), 3);
    lab.middlebox_drop_syn_data(None).unwrap();
    common::delay_stalls(&lab);
    let cli_ns = netns_inode(&lab, Side::Client);
    let before = Deltas::since(&lab);
    let dropped_before = lab.middlebox_dropped().unwrap();

    // This lab's client namespace only, filtered in the kernel: the closing summary's count
    // is then this lab's alone.
    let wire = lab.capture_syns(Side::Client).unwrap();
    let tracer = Tracer::start_command(&["stalls", "--json", "--netns", &cli_ns.to_string()]);
    // One clean run first (cookie cached, nothing lost), then stalled ones.
    lab.middlebox_clear().unwrap();
    let fine = lab.run_client(common::exe(), &ClientArgs { count: 2, ..ClientArgs::new(dst) }).unwrap();
    lab.middlebox_drop_syn_data(None).unwrap();
    let n = 2;
    let run = lab.run_client(common::exe(), &ClientArgs { count: n, ..ClientArgs::new(dst) }).unwrap();
    let (lines, stderr) = tracer.stop_json();
    let stalled = WireStalls::of(&wire.stop());
    let delta = before.client();
    let dropped = lab.middlebox_dropped().unwrap() - dropped_before;
    assert_eq!(fine.ok_count() + run.ok_count(), (2 + n) as usize);

    assert!(lines.iter().all(|l| l["netns"] == cli_ns), "only this lab's namespace: {lines:?}");
    assert_eq!(delta.get("TcpExtTCPSynRetrans"), u64::from(n), "kernel: {delta:?}");
    assert_eq!(dropped, u64::from(n), "packets the middlebox dropped");
    common::assert_hook_count(
        HookRun::Established,
        lines.len() as u64,
        delta.get("TcpExtTCPSynRetrans"),
        format!("one line per stalled connection: {lines:?}"),
    );
    assert_eq!(stalled.count(), u64::from(n), "stalls on the wire: {stalled:?}");
    for l in &lines {
        assert_eq!(l["cause"], "syn_data_dropped", "{l}");
        assert_eq!(l["pid"], run.pid, "the stalled process: {l}");
        // The event's own fields, as `trace --json` has them (one schema everywhere).
        assert_eq!(
            (&l["daddr"], &l["dport"]),
            (&Value::from(dst.ip().to_string()), &Value::from(dst.port()))
        );
        assert!(l["sport"].as_u64().is_some_and(|p| p > 0) && l.get("lost_us").is_none(), "{l}");
        assert_eq!(l["retransmits"], 1);
        stalled.assert_stall(&event_of(l), l);
    }
    // The stalled connections it listed, in its closing summary.
    let closing = common::closing(&stderr).unwrap_or_else(|| panic!("no closing summary: {stderr:?}"));
    let count = closing["stalled"].as_u64().unwrap_or_else(|| panic!("{closing}"));
    assert_eq!(count, lines.len() as u64, "{closing}");
}

/// Deleted on drop, also when the test fails.
struct TempFile(PathBuf);
impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// `tfo-trace ARGS`: its stdout, after checking it exited 0.
fn stdout_of(args: &[&str]) -> String {
    let out = Command::new(common::exe()).args(args).output().expect("running tfo-trace");
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// The issue's lab recording: 3 connections accepted, 2 to a listener without TCP_FASTOPEN
/// (data not acked: one extra round trip, not a stall), 2 whose SYN-data a middlebox drops
/// (the 1 s SYN timeout: stalls). `stalls --json --record` traces it, with a real `export`
/// beside it; the recording then goes through `top --from --batch --json` and `report
/// --from --format json`. All four must count the kernel's 2 stalls, lose the time the
/// wire shows (tcpdump's gap between each SYN-data and the SYN resent after it), the three
/// replays exactly what `stalls` listed, and keep the data not acked apart.
fn one_recording_gives_the_same_stalls_in_every_view() {
    require_kernel!();
    let lab = Lab::create(LabConfig { server_addrs: 2, ..LabConfig::default() }).unwrap();
    let (clean_ip, blocked_ip) = (lab.server_addr(0, false).unwrap(), lab.server_addr(1, false).unwrap());
    let clean = SocketAddr::new(clean_ip, 8080);
    let plain = SocketAddr::new(clean_ip, 8081);
    let blocked = SocketAddr::new(blocked_ip, 8080);
    let _s0 = lab.start_server(common::exe(), 0, clean.port(), 16, false).unwrap();
    let _s1 = lab.start_server(common::exe(), 0, plain.port(), 0, false).unwrap();
    let _s2 = lab.start_server(common::exe(), 1, blocked.port(), 16, false).unwrap();
    let client = |dst, count| ClientArgs { count, timeout_ms: 5000, ..ClientArgs::new(dst) };
    // Cookies first (per server address: the plain listener's address has one too).
    for dst in [clean, blocked] {
        assert_eq!(
            lab.run_client(common::exe(), &client(dst, 1)).unwrap().ok_count(),
            1,
            "cookie from {dst}"
        );
    }
    lab.middlebox_drop_syn_data(Some(blocked_ip)).unwrap();
    let cli_ns = netns_inode(&lab, Side::Client);
    let file = TempFile(std::env::temp_dir().join(format!("tfo-stall-views-{}.jsonl", std::process::id())));
    let path = file.0.to_str().unwrap();

    common::delay_stalls(&lab);
    let before = Deltas::since(&lab);
    // Only this lab's client namespace, filtered in the kernel: a test running beside this
    // one has its own lab with the same addresses, and its stalls are not ours.
    let ns = cli_ns.to_string();
    let wire = lab.capture_syns(Side::Client).unwrap();
    let exporter: SocketAddr = format!("127.0.0.1:{}", common::free_port()).parse().unwrap();
    let listen = exporter.to_string();
    let export = Tracer::start_command(&["export", "--web.listen-address", &listen, "--netns", &ns]);
    let tracer = Tracer::start_command(&["stalls", "--json", "--record", path, "--netns", &ns]);
    for (dst, n) in [(clean, 3), (plain, 2), (blocked, 2)] {
        assert_eq!(
            lab.run_client(common::exe(), &client(dst, n)).unwrap().ok_count(),
            n as usize,
            "to {dst}"
        );
    }
    let (lines, stderr) = tracer.stop_json();
    // Each scrape reads the kernel's counts then: every outcome was counted before its
    // client returned.
    let (status, exposition) = common::http_get(exporter, "/metrics").unwrap();
    assert_eq!(status, 200, "{exposition}");
    export.stop_lines();
    let stalled = WireStalls::of(&wire.stop());
    let dc = before.client();

    // The kernel's view first: 2 SYN timeouts, 3 + 0 SYN-data acked, 2 + 2 not.
    assert_eq!(dc.get("TcpExtTCPSynRetrans"), 2, "client counters: {dc:?}");
    assert_eq!(dc.get("TcpExtTCPFastOpenActive"), 3, "client counters: {dc:?}");
    assert_eq!(dc.get("TcpExtTCPFastOpenActiveFail"), 4, "client counters: {dc:?}");
    let kernel_stalls = dc.get("TcpExtTCPSynRetrans");
    // The recording holds this lab's client namespace only; its destinations are these.
    let ours = |dst: &Value| [clean, plain, blocked].iter().any(|d| dst == &Value::from(d.to_string()));

    // stalls: one line per stalled connection.
    let mine: Vec<&Value> = lines.iter().filter(|l| l["netns"] == cli_ns).collect();
    let stalls_lost: u64 = mine.iter().map(|l| l["stall_us"].as_u64().unwrap()).sum();
    common::assert_hook_count(HookRun::Established, mine.len() as u64, kernel_stalls, format!("{mine:?}"));
    let to_blocked = |l: &&Value| l["daddr"] == blocked.ip().to_string() && l["dport"] == blocked.port();
    assert!(mine.iter().all(|l| l["cause"] == "syn_data_dropped" && to_blocked(l)), "{mine:?}");
    for l in &mine {
        stalled.assert_stall(&event_of(l), l);
    }
    stalled.assert_total(kernel_stalls, stalls_lost as f64 / 1e6, 0.0, "stalls");

    // top, replayed: the destination rows of this lab.
    let top = stdout_of(&["top", "--from", path, "--batch", "--json"]);
    let snap: Value = serde_json::from_str(top.lines().last().unwrap()).unwrap();
    let rows: Vec<&Value> =
        snap["destinations"].as_array().unwrap().iter().filter(|r| ours(&r["destination"])).collect();
    let sum = |rows: &[&Value], key: &str| rows.iter().map(|r| r[key].as_u64().unwrap()).sum::<u64>();
    assert_eq!(rows.len(), 3, "{snap}");
    assert_eq!((sum(&rows, "stalls"), sum(&rows, "stall_us")), (kernel_stalls, stalls_lost), "top: {rows:?}");
    assert_eq!(sum(&rows, "data_not_acked"), 2, "top: {rows:?}");

    // report, replayed: the destinations of this lab's client namespace.
    let report: Value =
        serde_json::from_str(&stdout_of(&["report", "--from", path, "--format", "json"])).unwrap();
    let dsts: Vec<&Value> =
        report["destinations"].as_array().unwrap().iter().filter(|d| d["netns"] == cli_ns).collect();
    assert_eq!(dsts.len(), 3, "{report:#}");
    assert_eq!(
        (sum(&dsts, "stalled"), sum(&dsts, "lost_us_total")),
        (kernel_stalls, stalls_lost),
        "report: {dsts:#?}"
    );
    // Data not acked: apart from the stalls, as extra round trips.
    assert_eq!((sum(&dsts, "data_not_acked"), sum(&dsts, "extra_round_trips")), (2, 2), "report: {dsts:#?}");
    let plain_report = dsts.iter().find(|d| d["destination"] == plain.to_string()).unwrap();
    assert_eq!(
        (plain_report["stalled"].as_u64(), plain_report["lost_us_total"].as_u64()),
        (Some(0), Some(0))
    );

    // The recording names the backend that made it.
    let (header, _, bad) = record::read_recording(&file.0).unwrap();
    assert!(bad.is_empty(), "{bad:?}");
    assert_eq!(header.backend, common::backend_of(&stderr).to_string());

    // export, live beside `stalls`: the kernel's count of this namespace's stalls, and the
    // time the wire shows they lost (its own programs' clock reads, so not to the
    // microsecond of what `stalls` timed).
    let stall_conns = common::metric_sum(
        &exposition,
        "tfo_trace_connections_total",
        &[r#"role="client""#, r#"outcome="syn_retransmitted""#],
    );
    common::assert_hook_count(HookRun::Established, stall_conns as u64, kernel_stalls, &exposition);
    let exported = common::metric_sum(&exposition, "tfo_trace_stall_seconds_total", &[]);
    stalled.assert_total(kernel_stalls, exported, 0.0, format!("export\n{exposition}"));
}

/// Time lost, summed by the kernel and summed from the events, when no event was lost
/// (issue 31, item 8): `export` put a few microseconds under destination="other" though
/// every destination had its own series, and `top --json`'s client total was 3 us more
/// than its rows (the kernel summed nanoseconds, the events whole microseconds). Now each
/// view's kernel total equals the sum of its rows to the microsecond, and both equal what
/// `stalls --json` lists; the stalls themselves are the kernel's TcpExtTCPSynRetrans.
fn kernel_and_event_sums_of_time_lost_agree() {
    require_kernel!();
    let lab = Lab::create(LabConfig { server_addrs: 2, ..LabConfig::default() }).unwrap();
    let port = 8443;
    let (clean, blocked) = (
        SocketAddr::new(lab.server_addr(0, false).unwrap(), port),
        SocketAddr::new(lab.server_addr(1, false).unwrap(), port),
    );
    let _servers = [0, 1].map(|i| lab.start_server(common::exe(), i, port, 16, false).unwrap());
    for dst in [clean, blocked] {
        assert_eq!(lab.run_client(common::exe(), &ClientArgs::new(dst)).unwrap().ok_count(), 1, "cookie");
    }
    lab.middlebox_drop_syn_data(Some(blocked.ip())).unwrap();
    common::delay_stalls(&lab);
    let ns = netns_inode(&lab, Side::Client).to_string();
    let wire = lab.capture_syns(Side::Client).unwrap();
    let exporter: SocketAddr = format!("127.0.0.1:{}", common::free_port()).parse().unwrap();
    let addr = exporter.to_string();
    let export = Tracer::start_command(&[
        "export",
        "--web.listen-address",
        &addr,
        "--netns",
        &ns,
        "--top-destinations",
        "5",
        "--json-summary",
    ]);
    let top = Tracer::start_command(&["top", "--batch", "--json", "-d", "1", "--netns", &ns]);
    let stalls = Tracer::start_command(&["stalls", "--json", "--netns", &ns]);
    let before = Deltas::since(&lab);
    let n = 3;
    let run = lab.run_client(common::exe(), &ClientArgs { count: n, ..ClientArgs::new(blocked) }).unwrap();
    assert_eq!(run.ok_count(), n as usize);
    assert_eq!(
        lab.run_client(common::exe(), &ClientArgs { count: 2, ..ClientArgs::new(clean) }).unwrap().ok_count(),
        2
    );
    let retrans = before.client().get("TcpExtTCPSynRetrans");
    assert_eq!(retrans, u64::from(n), "the kernel agrees with the lab first");

    // The exporter's series, once its events are in.
    let metric =
        |text: &str, labels: &[&str]| common::metric_sum(text, "tfo_trace_stall_seconds_total", labels);
    let stalled = format!(r#"destination="{blocked}""#);
    let connections = |text: &str| {
        common::metric_sum(text, "tfo_trace_connections_total", &[r#"outcome="syn_retransmitted""#, &stalled])
    };
    let exposition = common::eventually(format!("{n} stalled connections in the exporter's series"), || {
        let (status, text) = common::http_get(exporter, "/metrics").unwrap();
        assert_eq!(status, 200);
        if connections(&text) >= f64::from(n) {
            Ok(text)
        } else {
            Err(text)
        }
    });
    let (_, export_err) = export.stop_lines();
    let (top_lines, top_err) = top.stop_lines();
    let (listed, stalls_err) = stalls.stop_json();
    for err in [&export_err, &top_err, &stalls_err] {
        let closing = common::closing(err).unwrap_or_else(|| panic!("no closing summary: {err:?}"));
        assert_eq!(closing["events_lost"], 0, "nothing lost, or the sums may differ: {closing}");
    }
    let listed_us: u64 = listed.iter().map(|e| e["stall_us"].as_u64().unwrap()).sum();
    common::assert_hook_count(HookRun::Established, listed.len() as u64, retrans, format!("{listed:?}"));
    WireStalls::of(&wire.stop()).assert_total(retrans, listed_us as f64 / 1e6, 0.0, "stalls");

    // Each tracer times a stall with its own programs' clock reads, one tracer's programs
    // after the other's on the same hook: microseconds apart on hardware, up to 1.7 ms
    // under TCG (arm64 6.12, kprobe: 5,128 and 4,092 µs over 3 stalls, where a kprobe hit
    // is an emulated exception). Across tracers the times agree within 5 ms a stall (0.5 %
    // of the 1 s each lost); within one tracer, exactly.
    let near = |us: f64, what: &str| {
        let off = (us - listed_us as f64).abs();
        assert!(off <= 5000.0 * f64::from(n), "{what}: {us} us against {listed_us} listed by stalls");
    };
    assert_eq!(connections(&exposition), f64::from(n), "{exposition}");
    assert_eq!(metric(&exposition, &[r#"destination="other""#]), 0.0, "nothing is other's: {exposition}");
    assert_eq!(metric(&exposition, &[&stalled]), metric(&exposition, &[]), "{exposition}");
    near(metric(&exposition, &[]) * 1e6, "export");

    let snap: Value = serde_json::from_str(top_lines.last().unwrap()).unwrap();
    let rows: u64 =
        snap["destinations"].as_array().unwrap().iter().map(|r| r["stall_us"].as_u64().unwrap()).sum();
    assert_eq!(snap["totals"]["client"]["stall_us"], rows, "the kernel's total is its rows' sum: {snap}");
    assert_eq!(snap["totals"]["client"]["stalls"], retrans);
    near(rows as f64, "top");
}

module_tests!(
    kernel_and_event_sums_of_time_lost_agree,
    stalls_lists_every_connection_that_paid_a_syn_timeout,
    one_recording_gives_the_same_stalls_in_every_view,
);
