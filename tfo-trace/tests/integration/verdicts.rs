//! Issue 51's verdicts against the kernel and the wire: what a refused SYN-data costs (a
//! gain forgone, not time lost), a destination that never gives a cookie (with its likely
//! cause, told from the server's namespace), SYN-data dropped by a full accept queue (the
//! server's TcpExtListenOverflows named, not the path), each checked against both
//! namespaces' counters and tcpdump's SYNs and SYN-ACKs. Live reports: they read the
//! namespaces' counters, sysctls and listeners, which a recording has not.
use crate::common;

use std::net::SocketAddr;

use common::{netns_inode, Deltas, Tracer};
use serde_json::Value;
use tfo_trace::lab::{
    traffic::{ClientArgs, ClientMode},
    Lab, LabConfig, ServerArgs, Side,
};

/// The live report's row for `dst` in the client's namespace.
fn destination(report: &Value, dst: SocketAddr, netns: u32) -> &Value {
    report["destinations"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["destination"] == dst.to_string().as_str() && d["netns"] == netns)
        .unwrap_or_else(|| panic!("no row {dst} in netns {netns}: {report:#}"))
}

/// A namespace's counters that moved, for the test's log.
fn nonzero(n: &common::Nstat) -> Vec<(&str, u64)> {
    n.nonzero().filter(|(k, _)| k.starts_with("TcpExt")).collect()
}

fn sentence(row: &Value) -> &str {
    row["verdict"]["sentence"].as_str().unwrap()
}

/// A live `report --format json` of the lab's two namespaces, started now.
fn live_report(lab: &Lab) -> Tracer {
    let (cli, srv) = (lab.netns(Side::Client).to_string(), lab.netns(Side::Server).to_string());
    Tracer::start_command(&["report", "--format", "json", "--netns", &cli, "--netns", &srv])
}

fn stop_report(t: Tracer) -> Value {
    let (lines, stderr) = t.stop_lines();
    serde_json::from_str(&lines.join("\n")).unwrap_or_else(|e| panic!("report JSON: {e}; {stderr:?}"))
}

/// Issue 51, item 3: the server stops taking TFO after its clients hold cookies (its bit
/// 0x2 off), so their SYN-data is refused. tcp_rcv_fastopen_synack() resends the data at
/// once on the SYN-ACK: against no TFO that loses no round trip, so the refusals are a gain
/// forgone, apart from the balance, which stays what the accepted SYN-data saved; "costs
/// more than it saves" is not said, in `report` nor in `top`.
fn refused_syn_data_is_a_gain_forgone_not_time_lost() {
    require_kernel!();
    const PORT: u16 = 8471;
    let lab = Lab::create(LabConfig::default()).unwrap();
    let dst = SocketAddr::new(lab.server_addr(0, false).unwrap(), PORT);
    let _server =
        lab.start_server_with(common::exe(), &ServerArgs { tfo_queue: 16, ..ServerArgs::new(dst) }).unwrap();
    assert_eq!(lab.run_client(common::exe(), &ClientArgs::new(dst)).unwrap().ok_count(), 1, "cookie");
    let cli_ns = netns_inode(&lab, Side::Client);
    let cli = lab.netns(Side::Client).to_string();
    let report = live_report(&lab);
    let top = Tracer::start_command(&["top", "--batch", "--json", "-d", "1", "--netns", &cli]);
    let capture = lab.capture_syns(Side::Client).unwrap();
    let before = Deltas::since(&lab);
    let (accepted, refused) = (3u32, 4u32);
    let run = |n| lab.run_client(common::exe(), &ClientArgs { count: n, ..ClientArgs::new(dst) }).unwrap();
    assert_eq!(run(accepted).ok_count(), accepted as usize);
    lab.set_sysctl(Side::Server, "net.ipv4.tcp_fastopen", "1").unwrap();
    let refused_run = run(refused);
    assert_eq!(refused_run.ok_count(), refused as usize, "{refused_run:?}");
    let (dc, ds) = before.both();
    let wire = capture.stop();
    let r = stop_report(report);
    let (lines, _) = top.stop_lines();

    // The kernel: the client counted each refusal, the server no TFO for them.
    let (a, f) = (u64::from(accepted), u64::from(refused));
    assert_eq!((dc.get("TcpExtTCPFastOpenActive"), dc.get("TcpExtTCPFastOpenActiveFail")), (a, f), "{dc:?}");
    assert_eq!(dc.get("TcpExtTCPSynRetrans"), 0, "no SYN timed out: {dc:?}");
    assert_eq!(ds.get("TcpExtTCPFastOpenPassive"), a, "{ds:?}");
    // The wire: every SYN carried data and a cookie, once (none timed out); no SYN-ACK a TFO
    // option (an accepted SYN-data's brings none, nor one from a server with TFO off).
    let syns: Vec<_> = wire.iter().filter(|s| !s.syn_ack && s.dport == PORT).collect();
    let acks: Vec<_> = wire.iter().filter(|s| s.syn_ack && s.sport == PORT).collect();
    assert_eq!(syns.len() as u64, a + f, "{wire:?}");
    assert!(syns.iter().all(|s| s.payload > 0 && s.cookie.is_some()), "{syns:?}");
    assert_eq!(acks.len() as u64, a + f, "{wire:?}");
    assert!(acks.iter().all(|s| !s.tfo), "SYN-ACKs: {acks:?}");

    // The report: refused, not stalled, nothing lost; the balance is the saving alone.
    let d = destination(&r, dst, cli_ns);
    eprintln!("client {:?}\nserver {:?}\nwire {wire:?}\nreport {d:#}", nonzero(&dc), nonzero(&ds));
    assert_eq!((d["data_not_acked"].as_u64(), d["accepted"].as_u64()), (Some(f), Some(a)), "{d:#}");
    assert_eq!((d["stalled"].as_u64(), d["lost_us_total"].as_u64()), (Some(0), Some(0)), "{d:#}");
    let (saved, net, forgone) = (
        d["saved_us_total"].as_i64().unwrap(),
        d["net_us"].as_i64().unwrap(),
        d["extra_round_trip_us"].as_u64().unwrap(),
    );
    assert!(forgone > 0, "the gain forgone is kept: {d:#}");
    assert_eq!(net, saved, "the balance leaves the refusals out: {d:#}");
    assert!(net >= 0, "{d:#}");
    let said = sentence(d);
    assert_eq!(d["verdict"]["kind"], "server_stopped_tfo", "{d:#}");
    assert!(!said.contains("costs more than it saves") && !said.contains("stop using"), "{said}");
    let evidence = d["verdict"]["evidence"].to_string();
    assert!(evidence.contains("no time lost against no TFO, +1 RTT against a working TFO"), "{evidence}");
    // `top`: the same balance, the same gain forgone.
    let snap: Value = serde_json::from_str(lines.last().unwrap()).unwrap();
    let c = &snap["totals"]["client"];
    assert_eq!(c["data_not_acked"].as_u64(), Some(f), "{c:#}");
    assert_eq!(c["net_us"].as_i64(), c["saved_us"].as_i64(), "top's balance: {c:#}");
    assert!(c["extra_round_trip_us"].as_u64().unwrap() > 0, "{c:#}");
}

/// How a listener fails to give cookies, one lab each.
#[derive(Clone, Copy, Debug)]
enum NoCookie {
    /// net.ipv4.tcp_fastopen without bit 0x2 in the server's namespace.
    ServerBitOff,
    /// A listener without TCP_FASTOPEN.
    ListenerWithout,
    /// net.ipv4.tcp_syncookies=2: every SYN answered with a syncookie, TFO skipped.
    Syncookies,
}

/// Issue 51, item 9: a client that asks for a cookie again and again and never gets one.
/// After a few requests the destination has its own finding, `no_cookie_given`, with the
/// cause the server's namespace shows; checked against its TcpExtTCPFastOpenCookieReqd
/// (counted before any check: every request that reached the listener) or
/// TcpExtSyncookiesSent, and tcpdump's SYN-ACKs, none with a TFO option.
fn a_server_that_never_gives_a_cookie_is_a_finding(how: NoCookie) {
    require_kernel!();
    const PORT: u16 = 8472;
    let lab = Lab::create(LabConfig::default()).unwrap();
    let dst = SocketAddr::new(lab.server_addr(0, false).unwrap(), PORT);
    let tfo_queue = if matches!(how, NoCookie::ListenerWithout) { 0 } else { 16 };
    let _server =
        lab.start_server_with(common::exe(), &ServerArgs { tfo_queue, ..ServerArgs::new(dst) }).unwrap();
    match how {
        NoCookie::ServerBitOff => lab.set_sysctl(Side::Server, "net.ipv4.tcp_fastopen", "1").unwrap(),
        NoCookie::Syncookies => lab.set_sysctl(Side::Server, "net.ipv4.tcp_syncookies", "2").unwrap(),
        NoCookie::ListenerWithout => {}
    }
    let cli_ns = netns_inode(&lab, Side::Client);
    let report = live_report(&lab);
    let capture = lab.capture_syns(Side::Client).unwrap();
    let before = Deltas::since(&lab);
    let n = 4u32;
    let run = lab.run_client(common::exe(), &ClientArgs { count: n, ..ClientArgs::new(dst) }).unwrap();
    assert_eq!(run.ok_count(), n as usize, "{run:?}");
    let (dc, ds) = before.both();
    let wire = capture.stop();
    let r = stop_report(report);

    let n = u64::from(n);
    // The kernel: the client sent no SYN-data; the server counted the requests (or, with
    // syncookies, never looked at their option).
    assert_eq!((dc.get("TcpExtTCPFastOpenActive"), dc.get("TcpExtTCPFastOpenActiveFail")), (0, 0), "{dc:?}");
    match how {
        NoCookie::Syncookies => {
            assert_eq!(ds.get("TcpExtSyncookiesSent"), n, "{ds:?}");
            assert_eq!(ds.get("TcpExtTCPFastOpenCookieReqd"), 0, "{ds:?}");
        }
        _ => assert_eq!(ds.get("TcpExtTCPFastOpenCookieReqd"), n, "{ds:?}"),
    }
    assert_eq!(ds.get("TcpExtTCPFastOpenPassive"), 0, "{ds:?}");
    // The wire: n cookie requests (a TFO option, no cookie, no data), n SYN-ACKs without one.
    let syns: Vec<_> = wire.iter().filter(|s| !s.syn_ack && s.dport == PORT).collect();
    let acks: Vec<_> = wire.iter().filter(|s| s.syn_ack && s.sport == PORT).collect();
    assert_eq!(syns.len() as u64, n, "{wire:?}");
    assert!(syns.iter().all(|s| s.tfo && s.cookie.is_none() && s.payload == 0), "{syns:?}");
    assert_eq!(acks.len() as u64, n, "{wire:?}");
    assert!(acks.iter().all(|s| !s.tfo), "no cookie given: {acks:?}");
    let exp_on_wire = syns.iter().filter(|s| s.exp_tfo).count();

    // The report: a finding for the destination, with the cause its server shows.
    let d = destination(&r, dst, cli_ns);
    eprintln!("{how:?}: client {:?}\nserver {:?}\nwire {wire:?}\nreport {d:#}", nonzero(&dc), nonzero(&ds));
    assert_eq!(d["verdict"]["kind"], "no_cookie_given", "{d:#}");
    assert_eq!(d["outcomes"]["cookie_requested"].as_u64(), Some(n), "{d:#}");
    let said = sentence(d);
    let want = match how {
        NoCookie::ServerBitOff => "likely TFO is off on the server (net.ipv4.tcp_fastopen=0x1",
        NoCookie::ListenerWithout => "has no TCP_FASTOPEN (max_qlen 0)",
        NoCookie::Syncookies => "answer with syncookies, which skip TFO (tcp_syncookies=2",
    };
    assert!(said.contains(want), "{how:?}: want {want:?} in {said}");
    assert!(said.starts_with(&format!("{dst} gave no TFO cookie to {n} of {n} connections")), "{said}");
    let evidence = d["verdict"]["evidence"].to_string();
    if exp_on_wire > 0 {
        assert!(evidence.contains(&format!("{exp_on_wire} on the experimental option")), "{evidence}");
    }
}

/// Issue 51, item 4: a full accept queue drops the SYN in tcp_conn_request() before TFO
/// is tried, so the client sees its SYN-data time out (`syn_data_dropped`), not its cookie
/// sent back. A listener whose owner accepts nothing for a while (its backlog 0: one
/// connection waiting fills it) is reached with SYN-data; the report names the server's
/// TcpExtListenOverflows and ListenDrops and says the server, not the path, dropped it.
fn syn_data_to_a_full_accept_queue_names_the_server() {
    require_kernel!();
    const WARM: u16 = 8473;
    const FULL: u16 = 8474;
    let lab = Lab::create(LabConfig::default()).unwrap();
    let ip = lab.server_addr(0, false).unwrap();
    let (warm, full) = (SocketAddr::new(ip, WARM), SocketAddr::new(ip, FULL));
    // The cookie, from another port of the same address and key (cookies are per address).
    let _warm =
        lab.start_server_with(common::exe(), &ServerArgs { tfo_queue: 16, ..ServerArgs::new(warm) }).unwrap();
    assert_eq!(lab.run_client(common::exe(), &ClientArgs::new(warm)).unwrap().ok_count(), 1, "cookie");
    let cli_ns = netns_inode(&lab, Side::Client);
    let report = live_report(&lab);
    let capture = lab.capture_syns(Side::Client).unwrap();
    let before = Deltas::since(&lab);
    // Started last, so that its hold is still on when the filler and the SYN-data come:
    // the SYN-data's retransmissions (1 s, 3 s, 7 s after it) reach it once it accepts.
    let held = ServerArgs { tfo_queue: 16, backlog: 0, hold_accepts_ms: 5_000, ..ServerArgs::new(full) };
    let _full = lab.start_server_with(common::exe(), &held).unwrap();
    // One plain connection waits in the accept queue: backlog 0 is full with one.
    let filler = ClientArgs { mode: ClientMode::Plain, timeout_ms: 20_000, ..ClientArgs::new(full) };
    let filler = lab.spawn_client(common::exe(), &filler).unwrap();
    common::eventually("the filler waiting in the accept queue", || {
        match lab.sockets_in_state(Side::Server, "established") {
            Ok(n) if n >= 1 => Ok(()),
            other => Err(format!("{other:?}")),
        }
    });
    let tfo = ClientArgs { timeout_ms: 20_000, ..ClientArgs::new(full) };
    let run = lab.run_client(common::exe(), &tfo).unwrap();
    assert_eq!(run.ok_count(), 1, "through once the queue drained: {run:?}");
    assert_eq!(filler.wait(std::time::Duration::from_secs(30)).unwrap().ok_count(), 1);
    let (dc, ds) = before.both();
    let wire = capture.stop();
    let r = stop_report(report);

    // The kernel: the server dropped SYNs at its full accept queue; the client's SYN-data
    // timed out and went again without data.
    let overflows = ds.get("TcpExtListenOverflows");
    assert!(overflows >= 1, "{ds:?}");
    assert!(ds.get("TcpExtListenDrops") >= overflows, "{ds:?}");
    assert_eq!(ds.get("TcpExtTCPFastOpenPassiveFail"), 0, "TFO never tried: {ds:?}");
    assert!(dc.get("TcpExtTCPSynRetrans") >= 1 && dc.get("TcpExtTCPFastOpenActiveFail") >= 1, "{dc:?}");
    // The wire: the first SYN to the full port carried data and no SYN-ACK answered it.
    let tfo_syns: Vec<_> =
        wire.iter().filter(|s| !s.syn_ack && s.dport == FULL && s.cookie.is_some()).collect();
    assert!(!tfo_syns.is_empty() && tfo_syns.iter().all(|s| s.payload > 0), "{wire:?}");
    let sport = tfo_syns[0].sport;
    let resent = wire.iter().filter(|s| !s.syn_ack && s.sport == sport && s.payload == 0).count();
    assert!(resent >= 1, "the SYN went again without data: {wire:?}");

    let d = destination(&r, full, cli_ns);
    eprintln!("client {:?}\nserver {:?}\nwire {wire:?}\nreport {d:#}", nonzero(&dc), nonzero(&ds));
    assert_eq!(d["verdict"]["kind"], "syn_data_dropped", "{d:#}");
    let said = sentence(d);
    let want = format!("its accept queue full (TcpExtListenOverflows +{overflows} in netns");
    assert!(said.contains(&want) && said.contains("not the path"), "want {want:?} in {said}");
    let evidence = d["verdict"]["evidence"].to_string();
    assert!(evidence.contains(&format!("TcpExtListenDrops +{}", ds.get("TcpExtListenDrops"))), "{evidence}");
}

module_tests!(
    refused_syn_data_is_a_gain_forgone_not_time_lost,
    a_server_that_never_gives_a_cookie_is_a_finding {
        server_bit_off: NoCookie::ServerBitOff,
        listener_without_tcp_fastopen: NoCookie::ListenerWithout,
        syncookies: NoCookie::Syncookies,
    },
    syn_data_to_a_full_accept_queue_names_the_server,
);
