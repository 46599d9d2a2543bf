//! `trace --record` then `report --from` against the real kernel: the lab makes real TFO
//! connections, the recording is replayed, and the report's verdict numbers must equal the
//! kernel's own counter deltas (TcpExtTCPSynRetrans, TcpExtTCPFastOpenActiveFail) and the
//! packets the middlebox dropped. A truncated or corrupt recording must still give the
//! report of all its good lines, then one error line naming the bad ones, and exit 1.
//! Needs root; skips with the reason otherwise.
use crate::common;

use std::{
    collections::BTreeMap, net::SocketAddr, os::unix::fs::PermissionsExt, path::Path, process::Command,
    time::Duration,
};

use common::{netns_inode, wire::WireStalls, Deltas, HookRun, Nstat, TempFile, Tracer};
use serde_json::Value;
use tfo_trace::{
    events::{Event, Outcome, Role},
    lab::{
        traffic::{ClientArgs, ClientMode, ServerArgs},
        Lab, LabConfig, Side,
    },
};

const PORT: u16 = 8080;
/// The lab's clients are tfo-trace's own `lab-client`: the process name events carry.
const LAB_CLIENT_COMM: &str = "tfo-trace";

struct Out {
    code: Option<i32>,
    json: Value,
    stderr: String,
}

fn report_from(path: &Path) -> Out {
    let out = Command::new(common::exe())
        .args(["report", "--format", "json", "--from"])
        .arg(path)
        .output()
        .expect("running tfo-trace report");
    let stdout = String::from_utf8_lossy(&out.stdout);
    Out {
        code: out.status.code(),
        json: serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("report JSON: {e}: {stdout}")),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn destination<'a>(report: &'a Value, dst: &str, netns: u32) -> &'a Value {
    report["destinations"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["destination"] == dst && d["netns"] == netns)
        .unwrap_or_else(|| panic!("no destination {dst} in netns {netns}: {report:#}"))
}

fn client(lab: &Lab, count: u32) -> ClientArgs {
    let dst = SocketAddr::new(lab.server_addr(0, false).unwrap(), PORT);
    ClientArgs { count, mode: ClientMode::MsgFastopen, payload_bytes: 100, ..ClientArgs::new(dst) }
}

/// What one `trace --record` run saw: the events it printed on stdout, the client's
/// counter deltas over it, the backend it used, and its closing line.
struct Recorded {
    events: Vec<Event>,
    delta: Nstat,
    backend: String,
    closing: String,
}

/// Records `n` connections with `tfo-trace trace --json --record FILE`.
fn record(lab: &Lab, file: &TempFile, n: u32) -> Recorded {
    let before = Deltas::since(lab);
    let tracer = Tracer::start_command(&["trace", "--json", "--record", file.path()]);
    let run = lab.run_client(common::exe(), &client(lab, n)).unwrap();
    let (events, stderr) = tracer.stop();
    let delta = before.client();
    assert_eq!(run.ok_count(), n as usize, "lab connections failed: {run:?}");
    let recorded_to = common::closing(&stderr).map(|c| c["recorded_to"].clone());
    assert_eq!(recorded_to, Some(Value::from(file.path())), "{stderr:?}");
    let mode = std::fs::metadata(&file.0).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "recordings are private");
    let backend = common::backend_of(&stderr).to_string();
    let closing = common::closing(&stderr).map(|c| c.to_string()).unwrap_or_default();
    Recorded { events, delta, backend, closing }
}

fn report_on_a_recorded_middlebox_drop() {
    require_kernel!();
    let lab = Lab::create(LabConfig::default()).unwrap();
    let _server = lab.start_server(common::exe(), 0, PORT, 16, false).unwrap();
    let warm = lab.run_client(common::exe(), &client(&lab, 1)).unwrap();
    assert_eq!(warm.ok_count(), 1, "cookie fetched");
    lab.middlebox_drop_syn_data(None).unwrap();
    common::delay_stalls(&lab);
    let cli_ns = netns_inode(&lab, Side::Client);
    let dropped_before = lab.middlebox_dropped().unwrap();
    let file = TempFile::new("drop");
    let n = 3;
    let wire = lab.capture_syns(Side::Client).unwrap();
    let Recorded { events, delta, backend, closing } = record(&lab, &file, n);
    let stalled = WireStalls::of(&wire.stop());
    let dropped = lab.middlebox_dropped().unwrap() - dropped_before;

    // The kernel and the wire agree first.
    assert_eq!(delta.get("TcpExtTCPSynRetrans"), u64::from(n), "client counters: {delta:?}");
    assert_eq!(dropped, u64::from(n), "packets dropped by the middlebox");

    let out = report_from(&file.0);
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    assert_eq!(out.json["source"]["events"], events.len(), "every printed event was recorded");
    assert_eq!(out.json["source"]["backend"], backend.as_str(), "the recording names its backend");
    let dst = format!("{}:{PORT}", lab.server_addr(0, false).unwrap());
    let d = destination(&out.json, &dst, cli_ns);
    assert_eq!(d["verdict"]["kind"], "syn_data_dropped", "{d:#}");
    // On a mismatch (seen under CI load, 2 against 3, here and in the merge test below),
    // the events tell which connection the report filed elsewhere, and why.
    let why = format!("{d:#}\nevents: {events:#?}\ntracer: {closing}");
    let reported = d["syn_data_dropped"].as_u64().unwrap_or_else(|| panic!("{why}"));
    common::assert_hook_count(HookRun::Established, reported, delta.get("TcpExtTCPSynRetrans"), &why);
    assert_eq!(d["syn_data_dropped"], dropped, "{why}");
    assert_eq!(d["syn_data_dropped"], delta.get("TcpExtTCPFastOpenActiveFail"), "{why}");
    assert_eq!(d["syn_data_sent"], u64::from(n));
    let sentence = d["verdict"]["sentence"].as_str().unwrap();
    assert!(
        sentence.starts_with(&format!(
            "SYN-data to {dst} was dropped on the path in {n} of {n} connections, +1.0"
        )),
        "{sentence}"
    );
    // The advice names the process that made the connections: the lab's client.
    assert!(
        sentence.ends_with(&format!("disable TFO towards it in {LAB_CLIENT_COMM} or fix the path")),
        "{sentence}"
    );
    // The time lost: each stall recorded, and the report's total, as the wire shows it.
    for e in events.iter().filter(|e| e.netns == cli_ns && e.stall_us > 0) {
        stalled.assert_stall(e, format!("{e:?}"));
    }
    let lost_s = d["lost_us_total"].as_u64().unwrap_or_else(|| panic!("{d:#}")) as f64 / 1e6;
    stalled.assert_total(u64::from(n), lost_s, 0.0, format!("report, {dst}:\n{d:#}"));
    let per = d["lost_us_per_stalled"].as_u64().unwrap_or_else(|| panic!("{d:#}"));
    assert!(per.abs_diff(d["lost_us_total"].as_u64().unwrap() / u64::from(n)) <= 1, "{d:#}");

    // Truncated: the last event cut in half. The good lines are still reported.
    let full = std::fs::read(&file.0).unwrap();
    let lines = full.iter().filter(|&&b| b == b'\n').count(); // header + events
    let cut = TempFile::new("drop-truncated");
    std::fs::write(&cut.0, &full[..full.len() - 30]).unwrap();
    let out = report_from(&cut.0);
    assert_eq!(out.code, Some(1), "a truncated recording fails");
    assert_eq!(out.json["source"]["events"], events.len() - 1, "every good line is used");
    let err: Vec<&str> = out.stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(err.len(), 1, "one error line: {:?}", out.stderr);
    assert!(err[0].contains(&format!("line {lines}: truncated")), "{}", err[0]);
    assert!(!out.stderr.contains("panicked"));

    // Corrupt: line 3 (the second event) overwritten; it alone is skipped, the rest read.
    let text = String::from_utf8(full).unwrap();
    let mut l: Vec<&str> = text.lines().collect();
    l[2] = "{\"ts\": \"garbage";
    let bad = TempFile::new("drop-corrupt");
    std::fs::write(&bad.0, l.join("\n") + "\n").unwrap();
    let out = report_from(&bad.0);
    assert_eq!(out.code, Some(1));
    assert_eq!(out.json["source"]["events"], events.len() - 1);
    assert_eq!(out.json["source"]["bad_lines"], 1);
    assert!(
        out.stderr.contains("1 bad line skipped, the other lines read: line 3: corrupt event"),
        "{}",
        out.stderr
    );
}

/// Issue 30: the middlebox drops one SYN-data in every `k`, and the report's balance (what
/// the accepted SYN-data saved less what the drops lost) must have the sign the kernel's
/// own numbers give: its counters for how many were accepted (TcpExtTCPFastOpenActive) and
/// how many stalled (TcpExtTCPSynRetrans), the wire for what each cost (tcpdump: SYN-data
/// to SYN-ACK of the accepted ones, SYN-data to the resent SYN of the dropped ones). On a
/// veth pair a round trip is tens of µs against a 1 s timeout: TFO cannot pay there at any
/// drop rate a test can make, and the report must say it costs. With netem's 20 ms it
/// breaks even near one drop in 50: one in `k` = 200 must pay.
fn report_balance_agrees_with_the_break_even(delay_ms: u64) {
    require_kernel!();
    let lab = Lab::create(LabConfig::default()).unwrap();
    let _server = lab.start_server(common::exe(), 0, PORT, 16, false).unwrap();
    let warm = lab.run_client(common::exe(), &client(&lab, 1)).unwrap();
    assert_eq!(warm.ok_count(), 1, "cookie fetched");
    let (k, n) = if delay_ms == 0 { (4, 8) } else { (200, 200) };
    if delay_ms > 0 {
        common::delay_or_skip(&lab, Side::Server, Duration::from_millis(delay_ms));
    }
    lab.middlebox_drop_syn_data_one_in(k).unwrap();
    let cli_ns = netns_inode(&lab, Side::Client);
    let wire = lab.capture_syns(Side::Client).unwrap();
    let file = TempFile::new("one-in-k");
    let Recorded { delta, .. } = record(&lab, &file, n);
    let syns = wire.stop();
    let (accepted, stalled) = (delta.get("TcpExtTCPFastOpenActive"), delta.get("TcpExtTCPSynRetrans"));
    assert_eq!(stalled, u64::from(n.div_ceil(k)), "one SYN-data in {k} dropped: {delta:?}");

    // The kernel's numbers: per connection on the wire, its first SYN (with the data), and
    // either the SYN-ACK (accepted) or the SYN resent after the timeout (dropped).
    let mut by_port: BTreeMap<u16, Vec<&tfo_trace::lab::WireSyn>> = BTreeMap::new();
    for s in &syns {
        by_port.entry(if s.syn_ack { s.dport } else { s.sport }).or_default().push(s);
    }
    let (mut saved_s, mut lost_s) = (0.0, 0.0);
    for seen in by_port.values().filter(|v| v.first().is_some_and(|s| !s.syn_ack && s.payload > 0)) {
        let resent = seen.iter().find(|s| !s.syn_ack && s.payload == 0);
        let synack = seen.iter().find(|s| s.syn_ack);
        match (resent, synack) {
            (Some(r), _) => lost_s += r.time_s - seen[0].time_s,
            (None, Some(a)) => saved_s += a.time_s - seen[0].time_s,
            _ => panic!("neither a SYN-ACK nor a resent SYN: {seen:?}"),
        }
    }
    let rt_s = saved_s / accepted.max(1) as f64;
    let per_stall_s = lost_s / stalled.max(1) as f64;
    let break_even = per_stall_s / rt_s;
    let kernel_net_s = saved_s - lost_s;
    eprintln!(
        "{accepted} accepted at {rt_s:.6} s, {stalled} stalls of {per_stall_s:.3} s: breaks even at one stall \
         per {break_even:.0} accepted, seen one per {}; net {kernel_net_s:+.3} s",
        accepted / stalled.max(1)
    );
    assert!(
        kernel_net_s.abs() > 0.2 * saved_s.max(lost_s),
        "too near the break-even to tell: {kernel_net_s}"
    );

    let out = report_from(&file.0);
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    let dst = format!("{}:{PORT}", lab.server_addr(0, false).unwrap());
    let d = destination(&out.json, &dst, cli_ns);
    let net_us = d["net_us"].as_i64().unwrap_or_else(|| panic!("net_us: {d:#}"));
    assert_eq!(net_us > 0, kernel_net_s > 0.0, "report {net_us} µs vs kernel {kernel_net_s:+.3} s: {d:#}");
    assert_eq!(d["saved_measured"], accepted, "{d:#}");
    // The report's round trip is the kernel's sample, which holds the wire's gap plus the
    // stack's own time (kernel_scenarios: saved_agree_with_wire): a few % above the gap
    // with a real delay (more in a TCG guest, where a SYN-ACK is now and then held off for
    // milliseconds), up to a few times the gap on a veth pair.
    let report_even = d["break_even_accepted_per_stall"].as_f64().unwrap();
    let (low, high) = if delay_ms > 0 { (0.8, 1.1) } else { (0.2, 1.1) };
    assert!(
        report_even >= low * break_even && report_even <= high * break_even,
        "report's break-even {report_even} vs {break_even:.0} from the kernel's numbers"
    );
    let sentence = d["verdict"]["sentence"].as_str().unwrap();
    let says = if kernel_net_s > 0.0 { "pays" } else { "costs more than it saves" };
    assert!(sentence.contains(&format!("TFO toward {dst} {says}")), "{sentence}");
    // Where it costs more, the advice names the process that connected (the lab's client).
    if kernel_net_s <= 0.0 {
        let advice = format!("stop using it toward {dst} in {LAB_CLIENT_COMM} or fix the path");
        assert!(sentence.ends_with(&advice), "{sentence}");
    }
}

fn report_on_a_recorded_server_that_stopped_taking_tfo() {
    require_kernel!();
    let lab = Lab::create(LabConfig::default()).unwrap();
    let _server = lab.start_server(common::exe(), 0, PORT, 16, false).unwrap();
    let warm = lab.run_client(common::exe(), &client(&lab, 2)).unwrap();
    assert_eq!(warm.ok_count(), 2);
    lab.set_sysctl(Side::Server, "net.ipv4.tcp_fastopen", "0").unwrap();
    let cli_ns = netns_inode(&lab, Side::Client);
    let file = TempFile::new("stopped");
    let n = 4;
    let delta = record(&lab, &file, n).delta;
    assert_eq!(delta.get("TcpExtTCPFastOpenActiveFail"), u64::from(n), "client counters: {delta:?}");

    let out = report_from(&file.0);
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    let dst = format!("{}:{PORT}", lab.server_addr(0, false).unwrap());
    let d = destination(&out.json, &dst, cli_ns);
    assert_eq!(d["verdict"]["kind"], "server_stopped_tfo", "{d:#}");
    assert_eq!(d["data_not_acked"], delta.get("TcpExtTCPFastOpenActiveFail"));
    assert_eq!(d["accepted"], delta.get("TcpExtTCPFastOpenActive"));
    assert_eq!(d["syn_data_dropped"], delta.get("TcpExtTCPSynRetrans"));
    let sentence = d["verdict"]["sentence"].as_str().unwrap();
    assert!(
        sentence.starts_with(&format!(
            "server {dst} no longer accepts TFO: {n} of {n} SYN-data not acknowledged"
        )),
        "{sentence}"
    );
}

/// Bad input without a kernel: not a recording at all, and a missing file.
fn report_rejects_what_is_not_a_recording() {
    let f = TempFile::new("not-a-recording");
    std::fs::write(&f.0, "hello\n").unwrap();
    let out = Command::new(common::exe()).args(["report", "--from", f.path()]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("line 1: not a tfo-trace recording"), "{err}");
    let out =
        Command::new(common::exe()).args(["report", "--from", "/nonexistent/r.jsonl"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("opening the recording /nonexistent/r.jsonl"));
    let out =
        Command::new(common::exe()).args(["report", "--from", "x", "--duration", "5s"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "--from and --duration conflict");
}

/// `report --from` and `top --from` with `--netns NAME` select the events recorded with that
/// `netns_name`, whatever /run/netns holds today: the namespace gone (it was a usage error)
/// or made again under the same name (it matched nothing, silently: another inode). A name
/// no event of the recording carries is one line listing those it does (issue 37, item 8).
fn replays_select_namespaces_by_their_recorded_names() {
    let rec = TempFile::new("recorded-names");
    let (cli, srv) =
        (format!("tfo-test-{}-cli", std::process::id()), format!("tfo-test-{}-srv", std::process::id()));
    // 8 client events in one namespace, 3 server ones in the other, as a lab records them.
    let header = r#"{"tfo_trace_recording":1,"host":"vm","kernel":"6.18","backend":"tracepoint","start":"2026-11-30T08:00:00.000000000Z","version":"0.1.0"}"#;
    let mut lines = vec![header.to_string()];
    for (n, (role, netns, name)) in std::iter::repeat_n(("client", 4026532177u32, &cli), 8)
        .chain(std::iter::repeat_n(("server", 4026532239, &srv), 3))
        .enumerate()
    {
        let (saddr, daddr) =
            if role == "client" { ("198.18.0.1", "198.18.0.2") } else { ("198.18.0.2", "198.18.0.1") };
        lines.push(
            serde_json::json!({
                "ts": format!("2026-11-30T08:00:{n:02}.000000000Z"), "role": role, "outcome": "accepted",
                "family": 4, "saddr": saddr, "sport": 40000 + n, "daddr": daddr, "dport": PORT,
                "netns": netns, "netns_name": name, "pid": 7, "comm": "tfo-trace", "syn_data_bytes": 64,
                "cookie_len": null, "exp_option": false, "retransmits": 0, "handshake_us": 90, "stall_us": 0,
            })
            .to_string(),
        );
    }
    std::fs::write(&rec.0, lines.join("\n") + "\n").unwrap();
    let report = |netns: &str| {
        Command::new(common::exe())
            .args(["report", "--format", "json", "--from", rec.path(), "--netns", netns])
            .output()
            .unwrap()
    };
    let events = |out: &std::process::Output| {
        assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
        let json: Value = serde_json::from_slice(&out.stdout).unwrap();
        json["source"]["events"].as_u64().unwrap()
    };
    // 3 server events and 8 client ones in the recording; neither namespace exists now.
    assert_eq!(events(&report(&srv)), 3);
    assert_eq!(events(&report(&cli)), 8);
    let top = Command::new(common::exe())
        .args(["top", "--json", "--from", rec.path(), "--netns", &srv])
        .output()
        .unwrap();
    assert_eq!(top.status.code(), Some(0), "{}", String::from_utf8_lossy(&top.stderr));
    let last: Value =
        serde_json::from_str(String::from_utf8_lossy(&top.stdout).lines().last().unwrap()).unwrap();
    assert_eq!(last["events"], 3, "{last}");
    // A name in no event of the recording: one line naming those it has, exit 2.
    let out = report("tfo-test-no-such-name");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("tfo-test-no-such-name") && err.contains(&cli) && err.contains(&srv), "{err}");
    // Made again under the same name (root: `ip netns add`): still the recorded events.
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        common::skip("needs root to make a namespace of the recorded name (the rest passed)");
    }
    let made = Command::new("ip").args(["netns", "add", &srv]).status().unwrap();
    assert!(made.success());
    let again = report(&srv);
    let _ = Command::new("ip").args(["netns", "del", &srv]).status();
    assert_eq!(events(&again), 3);
}

/// A recording whose client events carry the DNS name their process resolved (`dname`, as
/// `--names` records it), without a kernel: `--group-by name` makes one row per name whose
/// counts are its addresses' rows (by destination) summed, those rows as its evidence; an
/// address without a name keeps its own row; by destination, each row lists its names.
fn report_groups_a_recording_by_name() {
    let f = TempFile::new("names");
    let header = r#"{"tfo_trace_recording":1,"host":"web-1","kernel":"6.18","backend":"tracepoint","start":"2026-11-30T08:00:00.000000000Z","version":"0.1.0"}"#;
    let mut lines = vec![header.to_string()];
    let mut event = |role: &str, outcome: &str, daddr: &str, name: Option<&str>, stall_us: u64| {
        let n = lines.len();
        let mut e = serde_json::json!({
            "ts": format!("2026-11-30T08:00:{:02}.000000000Z", n), "role": role, "outcome": outcome,
            "family": 4, "saddr": "198.18.0.1", "sport": 40000 + n, "daddr": daddr, "dport": PORT,
            "netns": 4026532177u32, "pid": 7, "comm": "curl", "syn_data_bytes": 64, "cookie_len": null,
            "exp_option": false, "retransmits": u32::from(stall_us > 0), "handshake_us": 200 + stall_us,
            "stall_us": stall_us,
        });
        if let Some(name) = name {
            e["dname"] = name.into();
        }
        lines.push(e.to_string());
    };
    for _ in 0..4 {
        event("client", "accepted", "198.18.0.3", Some("api.example"), 0);
    }
    event("client", "accepted", "198.18.0.3", Some("www.example"), 0);
    for _ in 0..2 {
        event("client", "syn_retransmitted", "198.18.0.4", Some("api.example"), 1_020_000);
        event("client", "data_not_acked", "198.18.0.4", Some("api.example"), 0);
    }
    event("client", "accepted", "198.18.0.5", None, 0);
    event("server", "accepted", "198.18.0.1", None, 0);
    std::fs::write(&f.0, lines.join("\n") + "\n").unwrap();

    let by_name = report_json(&["--from", f.path(), "--group-by", "name"]);
    let by_dest = report_json(&["--from", f.path()]);
    let rows = |r: &Value| r["destinations"].as_array().unwrap().clone();
    let row = |r: &Value, d: &str| {
        rows(r).into_iter().find(|x| x["destination"] == d).unwrap_or_else(|| panic!("no {d}: {r:#}"))
    };
    // Every connection is in some row, by name as by destination.
    let total = |r: &Value| rows(r).iter().map(|d| d["connections"].as_u64().unwrap()).sum::<u64>();
    assert_eq!(total(&by_name), total(&by_dest));
    assert_eq!(by_name["summary"]["connections"], by_dest["summary"]["connections"]);
    assert_eq!(
        (by_name["summary"]["groups"].clone(), by_name["summary"]["unnamed_groups"].clone()),
        (3.into(), 1.into())
    );
    let api = row(&by_name, "api.example");
    assert_eq!(api["destinations"], 2);
    assert_eq!(api["verdict"]["kind"], "syn_data_dropped");
    // Its addresses: the same counts as their own rows by destination where only this name
    // went (198.18.0.4), and as the name's share of a shared one (198.18.0.3: 4 of its 5).
    let addrs = api["addresses"].as_array().unwrap();
    let addr = |a: &str| addrs.iter().find(|x| x["address"] == format!("{a}:{PORT}")).unwrap();
    let only = row(&by_dest, &format!("198.18.0.4:{PORT}"));
    for k in
        ["connections", "outcomes", "stalled", "lost_us_total", "extra_round_trips", "extra_round_trip_us"]
    {
        assert_eq!(addr("198.18.0.4")[k], only[k], "{k}");
    }
    assert_eq!(addr("198.18.0.3")["outcomes"], serde_json::json!({"accepted": 4}));
    let summed = |k: &str| addrs.iter().map(|a| a[k].as_u64().unwrap()).sum::<u64>();
    for k in ["connections", "stalled", "lost_us_total", "extra_round_trips", "extra_round_trip_us"] {
        assert_eq!(api[k].as_u64().unwrap(), summed(k), "{k}");
    }
    let evidence = api["verdict"]["evidence"].to_string();
    assert!(
        evidence.contains(&format!("address 198.18.0.3:{PORT}: 4 connections (accepted=4)")),
        "{evidence}"
    );
    // No name: the address's own row, the same as by destination.
    let unnamed = row(&by_name, &format!("198.18.0.5:{PORT}"));
    assert_eq!(unnamed["verdict"], row(&by_dest, &format!("198.18.0.5:{PORT}"))["verdict"]);
    assert_eq!(unnamed["names"], serde_json::json!([]));
    // Server events are grouped as without names.
    assert_eq!(by_name["listeners"], by_dest["listeners"]);
    // By destination: each row names its names.
    assert_eq!(
        row(&by_dest, &format!("198.18.0.3:{PORT}"))["names"],
        serde_json::json!(["api.example", "www.example"])
    );
    let out = Command::new(common::exe())
        .args(["report", "--group-by", "name", "--from", f.path()])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("\napi.example (2 destinations)\n"), "{text}");
    assert!(text.contains("in 2 names and 1 address without a name"), "{text}");
}

fn listener(report: &Value, port: u16, netns: u32) -> &Value {
    report["listeners"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| {
            l["listener"].as_str().is_some_and(|a| a.ends_with(&format!(":{port}"))) && l["netns"] == netns
        })
        .unwrap_or_else(|| panic!("no listener :{port} in netns {netns}: {report:#}"))
}

/// Server-side verdicts from lab recordings: key rotation without a backup key, and a TFO
/// queue that overflows. They need a backend that sees server outcomes (fentry/kprobe, the
/// VM matrix); on the tracepoint backend the test says so and checks the report still runs.
fn report_on_recorded_key_rotation_and_queue_overflow() {
    require_kernel!();
    let lab = Lab::create(LabConfig::default()).unwrap();
    lab.set_sysctl(Side::Server, "net.ipv4.tcp_fastopen_key", "00000000-00000000-00000000-0000000a").unwrap();
    let _server = lab.start_server(common::exe(), 0, PORT, 2, false).unwrap();
    assert_eq!(lab.run_client(common::exe(), &client(&lab, 1)).unwrap().ok_count(), 1, "cookie cached");
    let srv_ns = netns_inode(&lab, Side::Server);

    // Key rotation without backup: the next SYN-data's cookie is invalid.
    lab.set_sysctl(Side::Server, "net.ipv4.tcp_fastopen_key", "00000000-00000000-00000000-0000000b").unwrap();
    let rotation = TempFile::new("rotation");
    let before = Deltas::since(&lab);
    let tracer = Tracer::start_command(&["trace", "--json", "--record", rotation.path()]);
    assert_eq!(lab.run_client(common::exe(), &client(&lab, 1)).unwrap().ok_count(), 1);
    let (_, rotation_stderr) = tracer.stop();
    let rotated = before.server();
    assert_eq!(rotated.get("TcpExtTCPFastOpenPassiveFail"), 1, "{rotated:?}");

    // Overflow: the client drops SYN-ACKs, children pile up in SYN_RECV (fastopen=2).
    lab.client_drop_synack().unwrap();
    let overflow = TempFile::new("overflow");
    let before = Deltas::since(&lab);
    let tracer = Tracer::start_command(&["trace", "--json", "--record", overflow.path()]);
    let stuck = ClientArgs { timeout_ms: 700, ..client(&lab, 4) };
    assert_eq!(lab.run_client(common::exe(), &stuck).unwrap().ok_count(), 0);
    let (_, overflow_stderr) = tracer.stop();
    let overflowed = before.server();
    assert!(overflowed.get("TcpExtTCPFastOpenListenOverflow") >= 2, "{overflowed:?}");

    let r = report_from(&rotation.0);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    if common::visible(&rotation_stderr, Role::Server, Outcome::CookieInvalid) {
        let l = listener(&r.json, PORT, srv_ns);
        assert_eq!(l["verdict"]["kind"], "cookie_invalid", "{l:#}");
        assert_eq!(l["outcomes"]["cookie_invalid"], rotated.get("TcpExtTCPFastOpenPassiveFail"), "{l:#}");
    }
    let r = report_from(&overflow.0);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    if common::visible(&overflow_stderr, Role::Server, Outcome::QueueOverflow) {
        let l = listener(&r.json, PORT, srv_ns);
        assert_eq!(l["verdict"]["kind"], "queue_overflow", "{l:#}");
        assert_eq!(
            l["outcomes"]["queue_overflow"],
            overflowed.get("TcpExtTCPFastOpenListenOverflow"),
            "{l:#}"
        );
    }
}

/// One lab as one "host": cookies fetched, then `n` connections recorded with `trace
/// --record --netns` (its client namespace only, in the kernel), the middlebox dropping
/// SYN-data or not. Returns the client counter deltas over the recording, and the tracer's
/// closing line.
fn record_host(lab: &Lab, file: &TempFile, n: u32, drop: bool) -> (Nstat, String) {
    let _server = lab.start_server(common::exe(), 0, PORT, 16, false).unwrap();
    assert_eq!(lab.run_client(common::exe(), &client(lab, 1)).unwrap().ok_count(), 1, "cookie fetched");
    if drop {
        lab.middlebox_drop_syn_data(None).unwrap();
    }
    let ns = netns_inode(lab, Side::Client).to_string();
    let before = Deltas::since(lab);
    let tracer = Tracer::start_command(&["trace", "--json", "--record", file.path(), "--netns", &ns]);
    let run = lab.run_client(common::exe(), &client(lab, n)).unwrap();
    let (_, stderr) = tracer.stop();
    assert_eq!(run.ok_count(), n as usize, "lab connections failed: {run:?}");
    let closing = common::closing(&stderr).map(|c| c.to_string()).unwrap_or_default();
    (before.client(), closing)
}

/// Sets (Some) or removes (None: a recording from before hosts were named) the host in a
/// recording's header. The two labs run on this one machine; a fleet's recordings differ
/// only in that name.
fn set_host(file: &TempFile, host: Option<&str>) {
    let text = std::fs::read_to_string(&file.0).unwrap();
    let (header, events) = text.split_once('\n').unwrap();
    let mut h: Value = serde_json::from_str(header).unwrap();
    match host {
        Some(name) => h["host"] = Value::from(name),
        None => drop(h.as_object_mut().unwrap().remove("host")),
    }
    std::fs::write(&file.0, format!("{h}\n{events}")).unwrap();
}

fn report_json(args: &[&str]) -> Value {
    let out = Command::new(common::exe()).args(["report", "--format", "json"]).args(args).output().unwrap();
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Two labs recorded apart, as two hosts: on one a middlebox drops SYN-data, on the other
/// nothing does. `report --from A --from B` (and `--from DIR`) merges them: the counts per
/// host and in all equal the kernel's counters of each lab's client namespace, and the
/// verdict on the network both labs' servers sit in names the one host of two that shows it.
fn report_merges_recordings_of_two_hosts() {
    require_kernel!();
    let (a, b) = (Lab::create(LabConfig::default()).unwrap(), Lab::create(LabConfig::default()).unwrap());
    let dir = std::env::temp_dir().join(format!("tfo-report-test-{}-fleet", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (fa, fb) = (TempFile(dir.join("lab-a.jsonl")), TempFile(dir.join("lab-b.jsonl")));
    let (na, nb) = (3, 4);
    let (da, closing_a) = record_host(&a, &fa, na, true);
    let (db, closing_b) = record_host(&b, &fb, nb, false);
    set_host(&fa, Some("lab-a.ams1.example.net"));
    set_host(&fb, None);
    let retrans = |d: &Nstat| d.get("TcpExtTCPSynRetrans");
    let active = |d: &Nstat| d.get("TcpExtTCPFastOpenActive");
    assert_eq!((retrans(&da), retrans(&db)), (u64::from(na), 0), "kernel: {da:?} {db:?}");

    // Both labs' servers are in 198.18.0.0/16: one row, one verdict, its evidence per host.
    let r =
        report_json(&["--from", fa.path(), "--from", fb.path(), "--group-by", "prefix", "--prefix-v4", "16"]);
    assert_eq!(r["source"]["kind"], "recordings", "{r:#}");
    let hosts: Vec<&str> =
        r["sources"].as_array().unwrap().iter().map(|s| s["host"].as_str().unwrap()).collect();
    assert_eq!(
        hosts,
        ["lab-a.ams1.example.net", "lab-b"],
        "lab-b's recording has no host: its file names it"
    );
    let rows = r["destinations"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{r:#}");
    let row = &rows[0];
    assert_eq!(row["destination"], "198.18.0.0/16");
    assert_eq!(row["verdict"]["kind"], "syn_data_dropped", "{row:#}");
    // On a mismatch (seen under CI load), the recording and the tracer's closing line too.
    let why = || {
        let recorded = std::fs::read_to_string(&fa.0).unwrap_or_default();
        format!("{r:#}\nlab-a recorded:\n{recorded}\ntracers: {closing_a}\n{closing_b}")
    };
    let reported = row["syn_data_dropped"].as_u64().unwrap_or_else(|| panic!("{}", why()));
    common::assert_hook_count(HookRun::Established, reported, retrans(&da) + retrans(&db), why());
    assert_eq!(row["accepted"], active(&da) + active(&db));
    assert_eq!(row["data_not_acked"], da.get("TcpExtTCPFastOpenActiveFail") - retrans(&da));
    let showing = [&da, &db].iter().filter(|d| retrans(d) > 0).count();
    assert_eq!(row["verdict"]["support"]["hosts"], showing);
    assert_eq!(row["verdict"]["support"]["of_hosts"], 2);
    assert_eq!(row["verdict"]["support"]["connections"], retrans(&da) + retrans(&db));
    let sentence = row["verdict"]["sentence"].as_str().unwrap();
    assert!(sentence.contains(&format!("from {showing} of 2 hosts")), "{sentence}");
    for (h, d) in [("lab-a.ams1.example.net", &da), ("lab-b", &db)] {
        let share = row["hosts"].as_array().unwrap().iter().find(|s| s["host"] == h).unwrap();
        assert_eq!(share["showing"], retrans(d), "{share}");
        assert_eq!(share["stalled"], retrans(d), "{share}");
        let per_host = r["summary"]["hosts"].as_array().unwrap().iter().find(|s| s["host"] == h).unwrap();
        assert_eq!(per_host["stalled"], retrans(d), "{per_host}");
    }
    let s = &r["summary"];
    assert_eq!(s["stalls_by_cause"]["syn_data_dropped"], retrans(&da) + retrans(&db), "{s:#}");
    assert_eq!(s["stalled"], retrans(&da) + retrans(&db));
    assert_eq!(s["groups"], 1);

    // By destination: each lab's server a row of its own, the whole summary the same. A
    // folder gives the same report as its files.
    let by_dst = report_json(&["--from", fa.path(), "--from", fb.path()]);
    let from_dir = report_json(&["--from", dir.to_str().unwrap()]);
    assert_eq!(by_dst["summary"], from_dir["summary"]);
    assert_eq!(by_dst["destinations"], from_dir["destinations"]);
    assert_eq!(by_dst["summary"]["groups"], 2);
    assert_eq!(by_dst["summary"]["connections"], r["summary"]["connections"]);
    let dst_a = format!("{}:{PORT}", a.server_addr(0, false).unwrap());
    let row_a =
        by_dst["destinations"].as_array().unwrap().iter().find(|d| d["destination"] == dst_a).unwrap();
    assert_eq!(row_a["syn_data_dropped"], retrans(&da));
    assert_eq!(row_a["netns"], Value::Null, "an inode names nothing across hosts");
    let _ = std::fs::remove_dir(&dir);
}

/// The listeners on `port` as `ss -ltn` names them in the lab's server namespace.
fn ss_listeners(lab: &Lab, port: u16) -> std::collections::BTreeSet<String> {
    let out = Command::new("ip")
        .args(["netns", "exec", lab.netns(Side::Server), "ss", "-ltnH"])
        .output()
        .expect("running ss in the server namespace");
    assert!(out.status.success(), "ss: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().nth(3).map(String::from))
        .filter(|local| local.ends_with(&format!(":{port}")))
        .collect()
}

/// `name -> accepted` of each listener row of a view, the rows found under `key`.
fn accepted_by_listener(rows: &Value, count: &dyn Fn(&Value) -> u64) -> BTreeMap<String, u64> {
    rows.as_array()
        .unwrap_or_else(|| panic!("no listener rows: {rows}"))
        .iter()
        .map(|l| (l["listener"].as_str().unwrap().to_string(), count(l)))
        .collect()
}

/// An IPv4 listener `0.0.0.0:P` (TFO queue 5) and an IPv6-only `[::]:P` (TFO queue 100) in
/// one namespace, N connections over IPv6 and M over IPv4 (issue 31, item 1: the live
/// report gave the IPv6 ones to the IPv4 listener with its queue size, and the views named
/// one listener four ways). Every view names each listener as `ss -ltn` does, counts its
/// own connections (the lab's runs, summing to the kernel's TcpExtTCPFastOpenPassive), and
/// the live report gives each its own queue size.
fn one_listener_one_name_in_every_view() {
    require_kernel!();
    const P: u16 = 8082;
    let lab = Lab::create(LabConfig::default()).unwrap();
    let any = |v6: bool| -> SocketAddr {
        if v6 {
            SocketAddr::from(([0u16; 8], P))
        } else {
            SocketAddr::from(([0u8; 4], P))
        }
    };
    let v4_server = ServerArgs { tfo_queue: 5, ..ServerArgs::new(any(false)) };
    let v6_server = ServerArgs { tfo_queue: 100, v6_only: true, ..ServerArgs::new(any(true)) };
    let listeners = [v4_server, v6_server].map(|a| lab.start_server_with(common::exe(), &a).unwrap());
    let dst = |v6| SocketAddr::new(lab.server_addr(0, v6).unwrap(), P);
    for v6 in [false, true] {
        assert_eq!(lab.run_client(common::exe(), &ClientArgs::new(dst(v6))).unwrap().ok_count(), 1, "cookie");
    }
    let names = ss_listeners(&lab, P);
    assert_eq!(names, ["0.0.0.0:8082", "[::]:8082"].map(String::from).into(), "the lab's two listeners");
    let srv = lab.netns(Side::Server).to_string();
    let scope = ["--netns", srv.as_str(), "--port", "8082"];
    let file = TempFile::new("listeners");
    let report = Tracer::start_command(&[&["report", "--format", "json"][..], &scope].concat());
    // Its `/` filter (--filter) by the namespace's name, as the live reader names it.
    let top = Tracer::start_command(
        &[&["top", "--batch", "--json", "-d", "1", "--filter", &srv][..], &scope].concat(),
    );
    let trace = Tracer::start_command(&[&["trace", "--json", "--record", file.path()][..], &scope].concat());
    let before = Deltas::since(&lab);
    let (n6, n4) = (3u32, 2u32);
    for (v6, n) in [(true, n6), (false, n4)] {
        let run =
            lab.run_client(common::exe(), &ClientArgs { count: n, ..ClientArgs::new(dst(v6)) }).unwrap();
        assert_eq!(run.ok_count(), n as usize);
    }
    let passive = before.server().get("TcpExtTCPFastOpenPassive");
    assert_eq!(passive, u64::from(n6 + n4), "the kernel agrees with the lab first");
    let expected: BTreeMap<String, u64> =
        [("[::]:8082".to_string(), u64::from(n6)), ("0.0.0.0:8082".to_string(), u64::from(n4))].into();

    let (events, _) = trace.stop();
    let servers: Vec<&Event> = events.iter().filter(|e| e.role == Role::Server).collect();
    for e in &servers {
        let wanted = if e.family == 6 { "[::]:8082" } else { "0.0.0.0:8082" };
        assert_eq!(
            e.listener.map(|l| l.to_string()).as_deref(),
            Some(wanted),
            "trace names the listener: {e:?}"
        );
        // Two listeners on one port, two owners: the kernel keeps them apart by family.
        let owner = &listeners[usize::from(e.family == 6)];
        assert_eq!(e.pid, owner.pid(), "the process that listens there: {e:?}");
    }
    assert_eq!(servers.len() as u64, u64::from(n6 + n4), "{events:?}");
    let (lines, _) = report.stop_lines();
    let live: Value = serde_json::from_str(&lines.join("\n")).unwrap();
    let accepted = |l: &Value| l["outcomes"]["accepted"].as_u64().unwrap_or(0);
    assert_eq!(accepted_by_listener(&live["listeners"], &accepted), expected, "live report: {live:#}");
    for l in live["listeners"].as_array().unwrap() {
        let queue = if l["listener"] == "[::]:8082" { 100 } else { 5 };
        assert_eq!(l["max_qlen"], queue, "its own queue size: {l}");
    }
    let (lines, _) = top.stop_lines();
    let snap: Value = serde_json::from_str(lines.last().unwrap()).unwrap();
    let top_accepted = |l: &Value| l["accepted"].as_u64().unwrap();
    assert_eq!(accepted_by_listener(&snap["listeners"], &top_accepted), expected, "top: {snap:#}");
    let replayed = report_from(&file.0);
    assert_eq!(replayed.code, Some(0), "{}", replayed.stderr);
    assert_eq!(accepted_by_listener(&replayed.json["listeners"], &accepted), expected, "report --from");
    let doctor = Command::new(common::exe()).args(["doctor", "--json"]).output().unwrap();
    let doctor: Value = serde_json::from_slice(&doctor.stdout).unwrap();
    let srv_inode = netns_inode(&lab, Side::Server);
    let in_doctor: std::collections::BTreeSet<String> = doctor["listeners"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| l["netns"] == srv_inode && l["addr"].as_str().unwrap().ends_with(":8082"))
        .map(|l| l["addr"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(in_doctor, names, "doctor");
}

/// What only the kernel's cache (`ip tcp_metrics`) knows, kept apart from the window's
/// connections (issue 31, item 7): SYN-data to an IPv6 destination was dropped before the
/// live report started, and no connection went there during it. The report must not give
/// that destination a row of connections (it said "connections: 0 ... strong: 39 of 39
/// connections", 39 being the cache's fo_syn_drops); it lists it apart, as the kernel's
/// cache, named as rows are (`[fd..]:*`, the cache knowing no port), with the count the
/// kernel's own `ip tcp_metrics` shows.
fn the_kernel_cache_is_kept_apart_from_the_window() {
    require_kernel!();
    let lab = Lab::create(LabConfig::default()).unwrap();
    let _server = lab.start_server(common::exe(), 0, PORT, 16, true).unwrap();
    let v6 = SocketAddr::new(lab.server_addr(0, true).unwrap(), PORT);
    assert_eq!(lab.run_client(common::exe(), &ClientArgs::new(v6)).unwrap().ok_count(), 1, "cookie");
    lab.middlebox_drop_syn_data(Some(v6.ip())).unwrap();
    let n = 2;
    assert_eq!(
        lab.run_client(common::exe(), &ClientArgs { count: n, ..ClientArgs::new(v6) }).unwrap().ok_count(),
        n as usize
    );
    let cached = tfo_trace::kernel::tcp_metrics::parse(&lab.tcp_metrics(Side::Client).unwrap()).unwrap();
    let drops = cached.iter().find(|m| m.dst == v6.ip()).map(|m| m.fo_syn_drops).unwrap_or(0);
    assert!(drops > 0, "the kernel cached the drops: {cached:?}");

    let cli = lab.netns(Side::Client).to_string();
    let json = Tracer::start_command(&["report", "--format", "json", "--netns", &cli]);
    let text = Tracer::start_command(&["report", "--netns", &cli]);
    // In the window, connections to the IPv4 address only (the live report reads the
    // cache of the namespaces its clients ran in).
    let v4 = SocketAddr::new(lab.server_addr(0, false).unwrap(), PORT);
    let _v4_server = lab.start_server(common::exe(), 0, PORT, 16, false).unwrap();
    assert_eq!(lab.run_client(common::exe(), &ClientArgs::new(v4)).unwrap().ok_count(), 1);
    let (json, _) = json.stop_lines();
    let (text, _) = text.stop_lines();
    let r: Value = serde_json::from_str(&json.join("\n")).unwrap();
    let name = format!("[{}]:*", v6.ip());
    let rows: Vec<&Value> = r["destinations"].as_array().unwrap().iter().map(|d| &d["destination"]).collect();
    assert_eq!(rows, [&Value::from(v4.to_string())], "rows are the window's connections: {r:#}");
    assert_eq!(r["summary"]["connections"], 1);
    let kept = r["kernel_cache"].as_array().unwrap_or_else(|| panic!("no kernel_cache: {r:#}"));
    let entry = kept.iter().find(|c| c["destination"] == name.as_str()).unwrap_or_else(|| panic!("{r:#}"));
    assert_eq!(entry["fo_syn_drops"], drops, "as ip tcp_metrics shows it: {entry}");
    let text = text.join("\n");
    assert!(text.contains(&format!("\n{name} (netns ")), "{text}");
    assert!(!text.contains("connections: 0"), "{text}");
    assert!(text.contains("  1 client connection to 1 destination\n"), "the summary is the window's: {text}");
    assert!(!text.contains(&format!("of {drops} connections")), "drops are no connections: {text}");
    assert!(text.contains("ip tcp_metrics"), "{text}");
}

module_tests!(
    the_kernel_cache_is_kept_apart_from_the_window,
    one_listener_one_name_in_every_view,
    report_merges_recordings_of_two_hosts,
    report_on_a_recorded_middlebox_drop,
    report_balance_agrees_with_the_break_even { veth: 0, delayed_20ms: 20 },
    report_on_a_recorded_server_that_stopped_taking_tfo,
    report_rejects_what_is_not_a_recording,
    replays_select_namespaces_by_their_recorded_names,
    report_groups_a_recording_by_name,
    report_on_recorded_key_rotation_and_queue_overflow,
);
