//! The tracer against the real kernel: the lab makes real TFO connections between two
//! network namespaces while `tfo-trace trace --json` runs, and what the tracer reports
//! must equal the kernel's own counters (nstat, per namespace) and the packets the
//! middlebox dropped. Needs root; skips with the reason otherwise.
use crate::common;

use std::{net::SocketAddr, time::Duration};

use common::{count, netns_inode, of_role, wire, wire::WireStalls, Deltas, HookRun, Tracer};
use tfo_trace::{
    events::{Cause, Errno, Outcome, Role},
    lab::{
        traffic::{ClientArgs, ClientMode},
        ClientRun, Lab, LabConfig, Side,
    },
};

const PORT: u16 = 8080;

fn client(lab: &Lab, v6: bool, count: u32, mode: ClientMode) -> ClientArgs {
    let dst = SocketAddr::new(lab.server_addr(0, v6).unwrap(), PORT);
    ClientArgs { count, mode, payload_bytes: 100, timeout_ms: 5000, ..ClientArgs::new(dst) }
}

/// Scenario 1: first contact (one cookie request), then N accepted SYN-data connections,
/// with both ways of asking for TFO; pid/comm checked against the real client process.
fn first_contact_then_tfo(v6: bool) {
    require_kernel!();
    let lab = Lab::create(LabConfig::default()).unwrap();
    let server = lab.start_server(common::exe(), 0, PORT, 16, v6).unwrap();
    let (cli_ns, srv_ns) = (netns_inode(&lab, Side::Client), netns_inode(&lab, Side::Server));
    let before = Deltas::since(&lab);
    let tracer = Tracer::start(&[]);
    let n = 5;
    let first = lab.run_client(common::exe(), &client(&lab, v6, n + 1, ClientMode::MsgFastopen)).unwrap();
    let second = lab.run_client(common::exe(), &client(&lab, v6, n, ClientMode::FastopenConnect)).unwrap();
    let (events, stderr) = tracer.stop();
    let (dc, ds) = before.both();
    assert_eq!(first.ok_count() + second.ok_count(), (2 * n + 1) as usize, "lab connections failed");
    if common::visible(&stderr, Role::Client, Outcome::CookieReceived) {
        // The cookie the first SYN-ACK brought, as the kernel's metrics cache holds it.
        let metrics = tfo_trace::kernel::tcp_metrics::parse(&lab.tcp_metrics(Side::Client).unwrap()).unwrap();
        let server_ip = lab.server_addr(0, v6).unwrap();
        let cached = metrics.iter().find(|m| m.dst == server_ip).expect("a tcp_metrics entry for the server");
        let received: Vec<_> = of_role(&events, cli_ns, Role::Client)
            .into_iter()
            .filter(|e| e.outcome == Outcome::CookieReceived)
            .collect();
        assert_eq!(received.len(), 1, "one cookie, from the first contact: {received:?}");
        assert_eq!(received[0].cookie_len.map(usize::from), cached.cookie_len, "{received:?} vs {cached:?}");
    }
    if common::visible(&stderr, Role::Server, Outcome::CookieRequested) {
        assert_eq!(
            count(&events, srv_ns, Role::Server, Outcome::CookieRequested),
            ds.get("TcpExtTCPFastOpenCookieReqd")
        );
        for e in events.iter().filter(|e| e.netns == srv_ns && e.outcome == Outcome::CookieRequested) {
            assert_eq!(e.cookie_issued, Some(true), "the server answered with a cookie: {e:?}");
            assert_eq!(e.pid, server.pid());
        }
    }

    // The kernel's view first: exactly one cookie request, every other connection TFO.
    assert_eq!(ds.get("TcpExtTCPFastOpenCookieReqd"), 1, "server counters: {ds:?}");
    assert_eq!(dc.get("TcpExtTCPFastOpenActive"), u64::from(2 * n), "client counters: {dc:?}");
    // The tracer must say the same, outcome by outcome.
    assert_eq!(
        count(&events, cli_ns, Role::Client, Outcome::CookieRequested),
        ds.get("TcpExtTCPFastOpenCookieReqd")
    );
    assert_eq!(count(&events, cli_ns, Role::Client, Outcome::Accepted), dc.get("TcpExtTCPFastOpenActive"));
    assert_eq!(
        count(&events, cli_ns, Role::Client, Outcome::DataNotAcked)
            + count(&events, cli_ns, Role::Client, Outcome::SynRetransmitted),
        dc.get("TcpExtTCPFastOpenActiveFail")
    );
    assert_eq!(
        count(&events, srv_ns, Role::Server, Outcome::Accepted)
            + count(&events, srv_ns, Role::Server, Outcome::AcceptedAltKey),
        ds.get("TcpExtTCPFastOpenPassive")
    );
    let outcomes = of_role(&events, cli_ns, Role::Client).into_iter().filter(|e| e.outcome.ends_connection());
    assert_eq!(outcomes.count(), (2 * n + 1) as usize, "one outcome per connection");

    // Attribution: the client events belong to the two client processes, port by port.
    for (run, label) in [(&first, "msg-fastopen"), (&second, "fastopen-connect")] {
        let ports: Vec<u16> = run.results.iter().map(|r| r.sport).collect();
        let mine: Vec<_> = of_role(&events, cli_ns, Role::Client)
            .into_iter()
            .filter(|e| e.outcome.ends_connection())
            .filter(|e| ports.contains(&e.sport))
            .collect();
        assert_eq!(mine.len(), ports.len(), "{label}: an event for every connection");
        for e in mine {
            assert_eq!(e.pid, run.pid, "{label}: pid of {e:?}");
            assert_eq!(&*e.comm, "tfo-trace", "{label}: comm of {e:?}");
            assert_eq!(e.daddr, lab.server_addr(0, v6).unwrap());
            assert_eq!(e.dport, PORT);
            assert_eq!(e.family, if v6 { 6 } else { 4 });
            assert_eq!(e.netns_name.as_deref(), Some(lab.netns(Side::Client)), "the `ip netns` name: {e:?}");
            assert!(e.handshake_us.is_some(), "handshake measured: {e:?}");
            assert_eq!(e.stall_us, 0);
            if e.outcome == Outcome::Accepted {
                assert_eq!(e.syn_data_bytes, 100, "payload went in the SYN: {e:?}");
            }
        }
    }
    for e in of_role(&events, srv_ns, Role::Server) {
        assert_eq!(e.pid, server.pid(), "listener owner: {e:?}");
        assert_eq!(e.sport, PORT);
        // Cookie requests carry no data; accepted SYNs carry the client's 100 bytes.
        let expected = if e.outcome == Outcome::CookieRequested { 0 } else { 100 };
        assert_eq!(e.syn_data_bytes, expected, "{e:?}");
    }
}

/// Scenario 2: the server issued a cookie, then stopped taking TFO (server bit cleared):
/// the client's SYN-data is not acknowledged.
fn server_stops_taking_tfo(v6: bool) {
    require_kernel!();
    let lab = Lab::create(LabConfig::default()).unwrap();
    let _server = lab.start_server(common::exe(), 0, PORT, 16, v6).unwrap();
    let warm = lab.run_client(common::exe(), &client(&lab, v6, 2, ClientMode::MsgFastopen)).unwrap();
    assert_eq!(warm.ok_count(), 2);
    lab.set_sysctl(Side::Server, "net.ipv4.tcp_fastopen", "0").unwrap();
    let (cli_ns, srv_ns) = (netns_inode(&lab, Side::Client), netns_inode(&lab, Side::Server));
    let before = Deltas::since(&lab);
    let tracer = Tracer::start(&[]);
    let n = 4;
    let run = lab.run_client(common::exe(), &client(&lab, v6, n, ClientMode::MsgFastopen)).unwrap();
    let (events, _) = tracer.stop();
    let (dc, ds) = before.both();
    assert_eq!(run.ok_count(), n as usize, "the data still arrives, after the handshake");

    assert_eq!(dc.get("TcpExtTCPFastOpenActiveFail"), u64::from(n), "client counters: {dc:?}");
    assert_eq!(
        count(&events, cli_ns, Role::Client, Outcome::DataNotAcked),
        dc.get("TcpExtTCPFastOpenActiveFail")
    );
    assert_eq!(count(&events, cli_ns, Role::Client, Outcome::Accepted), dc.get("TcpExtTCPFastOpenActive"));
    assert_eq!(count(&events, srv_ns, Role::Server, Outcome::Accepted), ds.get("TcpExtTCPFastOpenPassive"));
    assert_eq!(ds.get("TcpExtTCPFastOpenPassive"), 0);
    for e in of_role(&events, cli_ns, Role::Client) {
        assert_eq!(e.pid, run.pid);
        assert_eq!(e.syn_data_bytes, 100, "the SYN carried the data: {e:?}");
        assert_eq!(e.retransmits, 0);
    }
}

/// Whether the tracer's `saved_us` are the SYN -> SYN-ACK gaps tcpdump saw on the client's
/// veth, as pairs (saved µs, wire µs). The kernel's sample runs from the SYN-data's send
/// stamp (tcp_transmit_skb, above the device) to tcp_rcv_state_process() on the SYN-ACK
/// (after the softirq took it off the device): both ends lie inside the wire's, so each is
/// the gap plus the stack's own time on both sides, never less (2 µs: tcpdump prints each
/// time to the µs). Above it, the lower quartile of the excess: with a real
/// delay on the path (`delayed`), within 10 % of the median gap, or 50 µs where that is
/// more; on a bare veth pair, where the "wire" gap is itself nothing but the stack's time
/// between the capture points (10-40 µs on this project's 2-core host, 200-1,400 µs in a
/// TCG guest), no more than that gap again (the excess measured: 4-25 µs on the host,
/// 36-45 % of the gap in a 5.10 TCG guest), or 50 µs. Not every connection, nor the
/// median: in a one-vCPU TCG guest the SYN-ACK's processing is now and then held off for
/// milliseconds (seen on 6.1: on the wire at 21.4 ms, in the kernel's sample at 32.8 ms;
/// in the arm64 kprobe cell 3 of 8 connections held 2.7-7.7 ms, which put the median
/// excess at 953 µs over a 930 µs gap), a delay the connection really waited but the wire
/// does not show. A sample taken from the wrong moments (the socket's creation, a later
/// ACK) is off in every connection, the lower quartile too.
fn saved_agree_with_wire(pairs: &[(u64, f64)], delayed: bool) -> Result<(), String> {
    if let Some((saved, wire)) = pairs.iter().find(|(saved, wire)| (*saved as f64) + 2.0 < *wire) {
        return Err(format!("saved {saved} µs, less than the {wire:.0} µs on the wire"));
    }
    let quantile = |mut v: Vec<f64>, q: usize| {
        v.sort_by(f64::total_cmp);
        v.get(v.len() / q).copied().unwrap_or(0.0)
    };
    let excess = quantile(pairs.iter().map(|(saved, wire)| *saved as f64 - wire).collect(), 4);
    let wire = quantile(pairs.iter().map(|(_, wire)| *wire).collect(), 2);
    let bound = if delayed { 0.1 * wire } else { wire };
    if excess > bound.max(50.0) {
        return Err(format!(
            "the lower quartile of the savings is {excess:.0} µs above the median {wire:.0} µs on the wire"
        ));
    }
    Ok(())
}

/// The oracle itself, on figures of the arm64 kprobe cell (2026-12-08): three of eight
/// connections held off for milliseconds pass; the same gaps with every sample 1 ms late
/// (taken from the wrong moment), or one sample under its gap, fail.
fn saved_against_the_wire_reads_past_connections_held_off() {
    let held_off = [
        (4661, 1941.0),
        (1550, 970.1),
        (1212, 735.0),
        (5409, 977.0),
        (1738, 784.9),
        (8649, 930.0),
        (855, 523.0),
        (937, 505.0),
    ];
    assert_eq!(saved_agree_with_wire(&held_off, false), Ok(()));
    let late: Vec<(u64, f64)> = held_off.iter().map(|(_, wire)| (*wire as u64 + 1000, *wire)).collect();
    assert!(saved_agree_with_wire(&late, false).is_err(), "every sample 1 ms late: {late:?}");
    let under = [(900, 970.1), (1212, 735.0)];
    assert!(saved_agree_with_wire(&under, false).is_err(), "a saving under its gap");
}

/// The client's accepted connections of one run against tcpdump's SYNs and SYN-ACKs: each
/// carries `saved_us` and they are their SYN -> SYN-ACK gaps ([`saved_agree_with_wire`]).
/// Returns the savings and the client's own results.
fn check_saved_against_wire(lab: &Lab, v6: bool, n: u32, delayed: bool) -> (Vec<u64>, ClientRun) {
    let (cli_ns, srv_ns) = (netns_inode(lab, Side::Client), netns_inode(lab, Side::Server));
    let before = Deltas::since(lab);
    let wire = lab.capture_syns(Side::Client).unwrap();
    let tracer = Tracer::start(&[]);
    let run = lab.run_client(common::exe(), &client(lab, v6, n, ClientMode::MsgFastopen)).unwrap();
    let (events, stderr) = tracer.stop();
    let syns = wire.stop();
    let dc = before.client();
    assert_eq!(run.ok_count(), n as usize);
    assert_eq!(count(&events, cli_ns, Role::Client, Outcome::Accepted), dc.get("TcpExtTCPFastOpenActive"));
    assert_eq!(dc.get("TcpExtTCPFastOpenActive"), u64::from(n), "client counters: {dc:?}");
    let mut pairs = Vec::new();
    let conns = wire::connections(&syns);
    for e in of_role(&events, cli_ns, Role::Client) {
        let saved = e.saved_us.unwrap_or_else(|| panic!("an accepted connection's saving is known: {e:?}"));
        let c = wire::connection_of(&conns, e);
        let (syn, synack) = (c.first(), c.synack.unwrap_or_else(|| panic!("no SYN-ACK on the wire: {c:?}")));
        assert_eq!(syn.payload, 100, "the SYN carried the data: {syn:?}");
        let wire_us = (synack.time_s - syn.time_s) * 1e6;
        eprintln!("port {}: saved {saved} µs, SYN -> SYN-ACK on the wire {wire_us:.0} µs", e.sport);
        assert!(e.handshake_us.is_some_and(|h| h + 1 >= saved), "inside the handshake: {e:?}");
        // Each connection's, not only the median: the client's own clock, socket() to its
        // answer's first byte, holds the SYN-data's send to the SYN-ACK.
        let own = run.results.iter().find(|r| r.sport == e.sport).and_then(|r| r.first_byte_us);
        let own = own.unwrap_or_else(|| panic!("the client's own figures for port {}: {run:?}", e.sport));
        assert!(
            saved <= own,
            "saved {saved} µs, more than the {own} µs its client waited for its answer: {e:?}"
        );
        pairs.push((saved, wire_us));
    }
    if let Err(why) = saved_agree_with_wire(&pairs, delayed) {
        panic!("{why}: (saved µs, wire µs) {pairs:?}");
    }
    let children = of_role(&events, srv_ns, Role::Server);
    let children: Vec<_> = children.iter().filter(|e| e.outcome == Outcome::Accepted).collect();
    assert_eq!(children.len(), n as usize, "{children:?}");
    let from_state = tfo_trace::backends::server_from_state(common::backend_of(&stderr));
    for e in children {
        assert_eq!(e.saved_us.is_some(), from_state, "server saving known only from the state hook: {e:?}");
    }
    (pairs.into_iter().map(|(saved, _)| saved).collect(), run)
}

/// Issue 30: each accepted client connection carries `saved_us`, the round trip its
/// SYN-data saved as the kernel sampled it, and that is the SYN -> SYN-ACK gap on the
/// wire (veth scale: tens of µs). A server child gets its own figure where the state hook
/// reports it (tracepoint backends); where tcp_try_fastopen() reports it (at the SYN,
/// before any round trip) it is unknown.
fn accepted_saves_the_round_trip_on_the_wire(v6: bool) {
    require_kernel!();
    let (lab, _server) = lab_with_cookie(v6);
    check_saved_against_wire(&lab, v6, 8, false);
}

fn median(mut v: Vec<u64>) -> u64 {
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or(0)
}

/// A lab whose client has the server's cookie: its next connections send SYN-data.
fn lab_with_cookie(v6: bool) -> (Lab, tfo_trace::lab::ServerHandle) {
    let lab = Lab::create(LabConfig::default()).unwrap();
    let server = lab.start_server(common::exe(), 0, PORT, 16, v6).unwrap();
    let warm = lab.run_client(common::exe(), &client(&lab, v6, 1, ClientMode::MsgFastopen)).unwrap();
    assert_eq!(warm.ok_count(), 1, "cookie fetched");
    (lab, server)
}

/// The same with a real round trip: netem delays the server's packets by 50 ms (a WAN's
/// round trip), so every SYN-ACK comes back 50 ms later, and each connection's `saved_us`
/// is that round trip (within 10 % of tcpdump's SYN -> SYN-ACK gap, and at least the
/// delay). Then against the client's own clock, A/B: the same client without TFO (a plain
/// connect, then the request) waits longer for the first byte of its answer, and the
/// difference of the two medians is the tracer's median `saved_us` within 20 %. (With 20 ms
/// in a 5.10 TCG guest the two were 3-16 % apart, the sample holding the stack's own 1-3 ms
/// that the application's difference cancels: too near 20 % for arm64 guests, twice as slow.)
fn accepted_saves_a_delayed_round_trip(v6: bool) {
    require_kernel!();
    let (lab, _server) = lab_with_cookie(v6);
    let delay = Duration::from_millis(50);
    common::delay_or_skip(&lab, Side::Server, delay);
    let n = 8;
    let (saved, with_tfo) = check_saved_against_wire(&lab, v6, n, true);
    for s in &saved {
        assert!(*s >= delay.as_micros() as u64, "{s} µs saved, under the {delay:?} delay");
    }
    let before = Deltas::since(&lab);
    let without = lab.run_client(common::exe(), &client(&lab, v6, n, ClientMode::Plain)).unwrap();
    let dc = before.client();
    assert_eq!(without.ok_count(), n as usize, "{:?}", without.results);
    assert_eq!(dc.get("TcpExtTCPFastOpenActive"), 0, "the B side sent no SYN-data: {dc:?}");
    let first_byte = |run: &ClientRun| -> Vec<u64> {
        run.results.iter().map(|r| r.first_byte_us.unwrap_or_else(|| panic!("a first byte: {r:?}"))).collect()
    };
    let (a, b) = (median(first_byte(&with_tfo)), median(first_byte(&without)));
    let (gain, saved) = (b.saturating_sub(a), median(saved));
    eprintln!("first byte: with TFO {a} µs, without {b} µs (medians of {n}): {gain} µs; the tracer's median saved_us {saved} µs");
    assert!(
        gain.abs_diff(saved) * 5 <= saved,
        "the client's own clock saw TFO gain {gain} µs, the tracer {saved} µs: more than 20 % apart"
    );
}

/// Scenario 3: a middlebox drops SYNs that carry data: every connection times out its
/// SYN-data, resends a plain SYN after the 1 s initial RTO, and pays about a second, which
/// must be the gap tcpdump shows between the two SYNs (`common::wire`).
fn middlebox_drops_syn_data(v6: bool) {
    require_kernel!();
    let lab = Lab::create(LabConfig::default()).unwrap();
    let _server = lab.start_server(common::exe(), 0, PORT, 16, v6).unwrap();
    let warm = lab.run_client(common::exe(), &client(&lab, v6, 1, ClientMode::MsgFastopen)).unwrap();
    assert_eq!(warm.ok_count(), 1, "cookie fetched");
    lab.middlebox_drop_syn_data(None).unwrap();
    let delayed = common::delay_stalls(&lab);
    let cli_ns = netns_inode(&lab, Side::Client);
    let before = Deltas::since(&lab);
    let dropped_before = lab.middlebox_dropped().unwrap();
    let wire = lab.capture_syns(Side::Client).unwrap();
    let tracer = Tracer::start(&[]);
    let n = 3;
    let run = lab.run_client(common::exe(), &client(&lab, v6, n, ClientMode::MsgFastopen)).unwrap();
    let (events, stderr) = tracer.stop();
    let syns = wire.stop();
    let dc = before.client();
    let dropped = lab.middlebox_dropped().unwrap() - dropped_before;
    assert_eq!(run.ok_count(), n as usize);

    // Wire and kernel agree with each other: one SYN-data dropped and one SYN
    // retransmitted per connection.
    assert_eq!(dropped, u64::from(n), "packets dropped by the middlebox");
    assert_eq!(dc.get("TcpExtTCPSynRetrans"), u64::from(n), "client counters: {dc:?}");
    // And the tracer agrees with both.
    let stalls = count(&events, cli_ns, Role::Client, Outcome::SynRetransmitted);
    let seen = || {
        format!(
            "client events: {:?}; tracer: {stderr:?}; SYNs: {syns:?}",
            of_role(&events, cli_ns, Role::Client)
        )
    };
    common::assert_hook_count(HookRun::Established, stalls, dc.get("TcpExtTCPSynRetrans"), seen());
    assert_eq!(stalls, dropped);
    assert_eq!(stalls, dc.get("TcpExtTCPFastOpenActiveFail"));
    let stalled = WireStalls::of(&syns);
    assert_eq!(stalled.count(), u64::from(n), "a stall per connection on the wire: {syns:?}");
    let conns = wire::connections(&syns);
    // The connections ran one after another: the k-th event is the k-th connection's (a
    // port alone may name two: the kernel reuses a closed connection's).
    let mut clients = of_role(&events, cli_ns, Role::Client);
    clients.sort_by_key(|e| e.ts.unix_ns());
    assert_eq!(clients.len(), run.results.len(), "an event per connection: {clients:?}");
    for (e, conn) in clients.into_iter().zip(&run.results) {
        assert_eq!(e.outcome, Outcome::SynRetransmitted, "{e:?}");
        assert_eq!(e.pid, run.pid);
        assert_eq!(e.retransmits, 1);
        assert_eq!(e.syn_data_bytes, 100);
        let sport = e.sport;
        assert_eq!(sport, conn.sport, "the connections in order: {e:?} vs {conn:?}");
        stalled.assert_stall(e, format!("{e:?}"));
        // The client itself measured the whole connection; the stall is inside it.
        assert!(conn.elapsed_us >= e.stall_us, "{conn:?} vs {e:?}");
        if delayed {
            let handshake = e.handshake_us.unwrap_or_else(|| panic!("a handshake time: {e:?}"));
            assert!(
                handshake >= e.stall_us + common::STALL_RTT.as_micros() as u64,
                "stall vs handshake: {e:?}"
            );
        }
        // On the wire: the SYN with the data, then the plain SYN resent after the timeout.
        let mine = &wire::connection_of(&conns, e).syns;
        assert_eq!(mine.len(), 2, "two SYNs left port {sport}: {mine:?}; all: {syns:?}");
        assert_eq!(mine[0].payload, 100, "the first SYN carried the data: {mine:?}");
        assert_eq!(mine[1].payload, 0, "the resent SYN is plain: {mine:?}");
    }
}

/// A middlebox drops every SYN carrying option 34, so cookie requests never get through:
/// each connection times out its cookie-request SYN and falls back to a plain SYN. Only
/// TcpExtTCPSynRetrans moves (no data was in flight, so no ActiveFail).
fn middlebox_drops_tfo_option(v6: bool) {
    require_kernel!();
    let lab = Lab::create(LabConfig::default()).unwrap();
    let _server = lab.start_server(common::exe(), 0, PORT, 16, v6).unwrap();
    lab.middlebox_drop_tfo_option().unwrap();
    let delayed = common::delay_stalls(&lab);
    // One plain connection first (no option 34: it passes), so the client knows the
    // server's link-layer address: else the first SYN waits for it, the answer delayed by
    // netem, and leaves the stack 50 ms before the wire sees it.
    let plain = lab.run_client(common::exe(), &client(&lab, v6, 1, ClientMode::Plain)).unwrap();
    assert_eq!(plain.ok_count(), 1, "a plain handshake passes the middlebox");
    let cli_ns = netns_inode(&lab, Side::Client);
    let before = Deltas::since(&lab);
    let dropped_before = lab.middlebox_dropped().unwrap();
    let wire = lab.capture_syns(Side::Client).unwrap();
    let tracer = Tracer::start(&[]);
    let n = 2;
    let run = lab.run_client(common::exe(), &client(&lab, v6, n, ClientMode::MsgFastopen)).unwrap();
    let (events, stderr) = tracer.stop();
    let syns = wire.stop();
    let (dc, ds) = before.both();
    let dropped = lab.middlebox_dropped().unwrap() - dropped_before;
    assert_eq!(run.ok_count(), n as usize, "plain handshakes after the timeout");

    assert_eq!(dropped, u64::from(n), "one cookie-request SYN dropped per connection");
    assert_eq!(dc.get("TcpExtTCPSynRetrans"), u64::from(n), "client counters: {dc:?}");
    for counter in ["TcpExtTCPFastOpenActive", "TcpExtTCPFastOpenActiveFail"] {
        assert_eq!(dc.get(counter), 0, "{counter}: {dc:?}");
    }
    assert_eq!(ds.get("TcpExtTCPFastOpenCookieReqd"), 0, "no cookie request reached the server");
    let seen = || format!("client events: {:?}; tracer: {stderr:?}", of_role(&events, cli_ns, Role::Client));
    common::assert_hook_count(
        HookRun::Established,
        count(&events, cli_ns, Role::Client, Outcome::SynRetransmitted),
        dc.get("TcpExtTCPSynRetrans"),
        seen(),
    );
    let stalled = WireStalls::of(&syns);
    assert_eq!(stalled.count(), u64::from(n), "a stall per connection on the wire: {syns:?}");
    for e in of_role(&events, cli_ns, Role::Client) {
        assert_eq!(e.outcome, Outcome::SynRetransmitted, "{e:?}");
        assert_eq!(e.syn_data_bytes, 0, "a cookie request carries no data: {e:?}");
        stalled.assert_stall(e, format!("{e:?}"));
        if delayed {
            let handshake = e.handshake_us.unwrap_or_else(|| panic!("a handshake time: {e:?}"));
            assert!(
                handshake >= e.stall_us + common::STALL_RTT.as_micros() as u64,
                "stall vs handshake: {e:?}"
            );
        }
    }
}

/// Two labs at once, one tracer: every event lands in its own lab's namespace with its own
/// processes, and each lab's counts equal that namespace's counters.
fn two_namespaces_at_once_are_told_apart() {
    require_kernel!();
    let labs = [Lab::create(LabConfig::default()).unwrap(), Lab::create(LabConfig::default()).unwrap()];
    let servers: Vec<_> =
        labs.iter().map(|l| l.start_server(common::exe(), 0, PORT, 16, false).unwrap()).collect();
    let befores: Vec<_> = labs.iter().map(Deltas::since).collect();
    let tracer = Tracer::start(&[]);
    let (n0, n1) = (3, 5);
    let c0 =
        labs[0].spawn_client(common::exe(), &client(&labs[0], false, n0, ClientMode::MsgFastopen)).unwrap();
    let c1 = labs[1]
        .spawn_client(common::exe(), &client(&labs[1], false, n1, ClientMode::FastopenConnect))
        .unwrap();
    let runs = [c0.wait(common::HANG_LIMIT).unwrap(), c1.wait(common::HANG_LIMIT).unwrap()];
    let (events, _) = tracer.stop();
    for (i, lab) in labs.iter().enumerate() {
        let (dc, ds) = befores[i].both();
        let (cli_ns, srv_ns) = (netns_inode(lab, Side::Client), netns_inode(lab, Side::Server));
        let clients = of_role(&events, cli_ns, Role::Client);
        let outcomes = clients.iter().filter(|e| e.outcome.ends_connection()).count();
        assert_eq!(outcomes, runs[i].results.len(), "lab {i}: one outcome per connection");
        assert!(clients.iter().all(|e| e.pid == runs[i].pid), "lab {i}: its own client process");
        assert_eq!(
            count(&events, cli_ns, Role::Client, Outcome::Accepted),
            dc.get("TcpExtTCPFastOpenActive"),
            "lab {i}"
        );
        let server_pid = servers[i].pid();
        let accepted = of_role(&events, srv_ns, Role::Server);
        assert!(accepted.iter().all(|e| e.pid == server_pid), "lab {i}: its own server");
        assert_eq!(
            count(&events, srv_ns, Role::Server, Outcome::Accepted),
            ds.get("TcpExtTCPFastOpenPassive"),
            "lab {i}: {ds:?}"
        );
    }
    assert_ne!(netns_inode(&labs[0], Side::Client), netns_inode(&labs[1], Side::Client));
}

/// A server that answers cookie requests without a cookie: the client tries the
/// experimental option (kind 254) next time, then RFC 7413's again (tcp_rcv_fastopen_synack's
/// try_exp). The tracer's `exp_option` must match the option on the wire, SYN by SYN.
fn cookie_request_without_answer_falls_back_to_the_experimental_option() {
    require_kernel!();
    let lab = Lab::create(LabConfig::default()).unwrap();
    lab.set_sysctl(Side::Server, "net.ipv4.tcp_fastopen", "0").unwrap();
    let _server = lab.start_server(common::exe(), 0, PORT, 16, false).unwrap();
    let cli_ns = netns_inode(&lab, Side::Client);
    let before = Deltas::since(&lab);
    let wire = lab.capture_syns(Side::Client).unwrap();
    let tracer = Tracer::start(&[]);
    let run = lab.run_client(common::exe(), &client(&lab, false, 3, ClientMode::MsgFastopen)).unwrap();
    let (events, _) = tracer.stop();
    let syns = wire.stop();
    let ds = before.server();
    assert_eq!(run.ok_count(), 3);

    assert_eq!(ds.get("TcpExtTCPFastOpenCookieReqd"), 3, "every SYN asked for a cookie: {ds:?}");
    assert_eq!(
        count(&events, cli_ns, Role::Client, Outcome::CookieRequested),
        ds.get("TcpExtTCPFastOpenCookieReqd")
    );
    let mut exp_seen = Vec::new();
    let conns = wire::connections(&syns);
    let mut clients = of_role(&events, cli_ns, Role::Client);
    clients.sort_by_key(|e| e.ts.unix_ns());
    assert_eq!(clients.len(), run.results.len(), "an event per connection: {clients:?}");
    for e in clients {
        let syn = wire::connection_of(&conns, e).first();
        assert_eq!(e.exp_option, syn.exp_tfo, "tracer vs wire for port {}: {e:?}", e.sport);
        exp_seen.push(syn.exp_tfo);
    }
    assert_eq!(exp_seen, [false, true, false], "RFC option, then the experimental one, then back");
}

/// A TFO connect refused by RST (issue 31, item 3): the client has the server's cookie,
/// the server has gone (its port closed), the SYN-data is answered with a RST. The
/// `connect_failed` event names the port the SYN left from, as the wire shows it (it said
/// 0: by the time the socket reaches CLOSE, inet_put_port() has cleared its bound port).
fn connect_refused_by_rst_names_its_port(v6: bool) {
    require_kernel!();
    let lab = Lab::create(LabConfig::default()).unwrap();
    let server = lab.start_server(common::exe(), 0, PORT, 16, v6).unwrap();
    let warm = lab.run_client(common::exe(), &client(&lab, v6, 1, ClientMode::MsgFastopen)).unwrap();
    assert_eq!(warm.ok_count(), 1, "cookie fetched");
    server.stop();
    let cli_ns = netns_inode(&lab, Side::Client);
    let wire = lab.capture_syns(Side::Client).unwrap();
    let tracer = Tracer::start(&[]);
    let n = 2;
    let refused = ClientArgs { timeout_ms: 2000, ..client(&lab, v6, n, ClientMode::MsgFastopen) };
    let run = lab.run_client(common::exe(), &refused).unwrap();
    let (events, stderr) = tracer.stop();
    let syns = wire.stop();
    assert_eq!(run.ok_count(), 0, "nothing listens: {run:?}");
    let failed: Vec<_> = common::with_outcome(&events, cli_ns, Role::Client, Outcome::ConnectFailed);
    let sent: Vec<u16> = syns.iter().filter(|s| !s.syn_ack && s.dport == PORT).map(|s| s.sport).collect();
    assert_eq!(sent.len(), n as usize, "one SYN-data per connection, no retransmission: {syns:?}");
    assert_eq!(failed.len(), n as usize, "{failed:?}; tracer: {stderr:?}");
    for (e, port) in failed.iter().zip(&sent) {
        assert_eq!(e.sport, *port, "the port on the wire: {e:?}; SYNs: {syns:?}");
        assert_eq!((e.retransmits, e.syn_data_bytes), (0, 100), "{e:?}");
        assert_eq!(e.pid, run.pid);
    }
}

/// The row `report --format json` (its lines) gives `dst`, its sentence printed.
fn report_row(report: &[String], dst: SocketAddr) -> serde_json::Value {
    let report: serde_json::Value = serde_json::from_str(&report.join("\n")).unwrap();
    let rows = report["destinations"].as_array().cloned().unwrap_or_default();
    let row = rows
        .iter()
        .find(|d| d["destination"] == dst.to_string())
        .unwrap_or_else(|| panic!("{dst}: {report}"));
    eprintln!("report: {}", row["verdict"]["sentence"]);
    row.clone()
}

/// A firewall that rejects SYNs carrying data with a reset (issue 51, item 10), SYNs without
/// data let through: the first connect asks for a cookie and completes; every SYN-data after
/// it is answered by a RST (the nft rule's counter), its connect fails with ECONNREFUSED
/// (TcpAttemptFails, no TFO counter moved, no SYN resent). Each `connect_failed` carries that
/// error, and `report` names the destination as one whose SYN-data is reset while its SYNs
/// without data are answered.
fn syn_data_reset_by_a_firewall_is_named(v6: bool) {
    require_kernel!();
    let lab = Lab::create(LabConfig::default()).unwrap();
    let _server = lab.start_server(common::exe(), 0, PORT, 16, v6).unwrap();
    lab.middlebox_reset_syn_data().unwrap();
    let cli_ns = netns_inode(&lab, Side::Client);
    let ns = cli_ns.to_string();
    let wire = lab.capture_syns(Side::Client).unwrap();
    let before = Deltas::since(&lab);
    let tracer = Tracer::start(&["--netns", &ns]);
    let report = Tracer::start_command(&["report", "--format", "json", "--netns", &ns]);
    let n = 3;
    let asked = lab.run_client(common::exe(), &client(&lab, v6, 1, ClientMode::MsgFastopen)).unwrap();
    let reset = lab
        .run_client(
            common::exe(),
            &ClientArgs { timeout_ms: 2000, ..client(&lab, v6, n, ClientMode::MsgFastopen) },
        )
        .unwrap();
    let (dc, ds) = before.both();
    let (events, stderr) = tracer.stop();
    let (report, _) = report.stop_lines();
    let syns: Vec<_> = wire.stop().into_iter().filter(|s| !s.syn_ack && s.dport == PORT).collect();
    let rejected = lab.middlebox_dropped().unwrap();

    eprintln!(
        "nstat client: AttemptFails {} ActiveFail {} Active {} SynRetrans {}; server Passive {}; nft rejects \
         {rejected}; wire SYNs (payload, option): {:?}",
        dc.get("TcpAttemptFails"),
        dc.get("TcpExtTCPFastOpenActiveFail"),
        dc.get("TcpExtTCPFastOpenActive"),
        dc.get("TcpExtTCPSynRetrans"),
        ds.get("TcpExtTCPFastOpenPassive"),
        syns.iter().map(|s| (s.payload, s.tfo)).collect::<Vec<_>>()
    );
    assert_eq!(asked.ok_count(), 1, "a SYN without data passes: {asked:?}");
    assert_eq!(reset.ok_count(), 0, "every SYN-data is reset: {reset:?}");
    assert!(
        reset.results.iter().all(|r| r.error.as_deref().is_some_and(|e| e.contains("refused"))),
        "{reset:?}"
    );
    // The kernel: each reset ends a connect (tcp_done in SYN_SENT), no SYN is resent, TFO
    // counts nothing (no SYN-ACK came); the firewall reset each SYN-data once.
    assert_eq!(dc.get("TcpAttemptFails"), u64::from(n), "{dc:?}");
    assert_eq!(dc.get("TcpExtTCPSynRetrans"), 0, "{dc:?}");
    assert_eq!(dc.get("TcpExtTCPFastOpenActive") + dc.get("TcpExtTCPFastOpenActiveFail"), 0, "{dc:?}");
    assert_eq!(ds.get("TcpExtTCPFastOpenPassive"), 0, "{ds:?}");
    assert_eq!(rejected, u64::from(n));
    let with_data: Vec<_> = syns.iter().filter(|s| s.payload == 100).collect();
    assert_eq!(with_data.len(), n as usize, "one SYN-data each, none resent: {syns:?}");
    assert!(with_data.iter().all(|s| s.cookie.is_some()), "each carried the cookie: {syns:?}");

    // The tracer: one connect_failed per reset, with its error, on every backend.
    let failed: Vec<_> = common::with_outcome(&events, cli_ns, Role::Client, Outcome::ConnectFailed);
    assert_eq!(failed.len() as u64, dc.get("TcpAttemptFails"), "{failed:?}; tracer: {stderr:?}");
    for e in &failed {
        assert_eq!(e.error, Some(Errno::RESET), "{e:?}");
        assert_eq!((e.retransmits, e.syn_data_bytes), (0, 100), "{e:?}");
        assert!(with_data.iter().any(|s| s.sport == e.sport), "its SYN-data on the wire: {e:?}");
    }
    assert_eq!(count(&events, cli_ns, Role::Client, Outcome::CookieRequested), 1);

    // report: the destination, as one whose SYN-data is reset.
    let row = report_row(&report, SocketAddr::new(lab.server_addr(0, v6).unwrap(), PORT));
    assert_eq!(row["verdict"]["kind"], "syn_data_reset", "{row}");
    assert_eq!(row["verdict"]["support"]["connections"], u64::from(n), "{row}");
}

/// How a client is put in no-cookie mode (tcp_fastopen_no_cookie()).
#[derive(Clone, Copy, Debug)]
enum NoCookie {
    /// `net.ipv4.tcp_fastopen` 0x4 in its namespace.
    Sysctl,
    /// `fastopen_no_cookie 1` on its route to the server.
    Route,
}

/// A client in no-cookie mode toward a server that needs a cookie (issue 51, item 5): every
/// SYN carries data and no TFO option (tcpdump), the server's tcp_try_fastopen() takes none
/// of it and moves no counter (no CookieReqd, Passive or PassiveFail), the client counts each
/// as TcpExtTCPFastOpenActiveFail. Each `data_not_acked` is told `no_cookie_sent` (not "the
/// server stopped TFO"), the server's `data_without_cookie` where a hook sees
/// tcp_try_fastopen(), and `report` says client no-cookie mode.
fn client_no_cookie_mode_toward_a_server_that_needs_one(mode: NoCookie) {
    require_kernel!();
    let client_fastopen = match mode {
        NoCookie::Sysctl => 0x1 | 0x4,
        NoCookie::Route => 0x1,
    };
    let lab = Lab::create(LabConfig { client_fastopen, ..LabConfig::default() }).unwrap();
    if let NoCookie::Route = mode {
        lab.client_route_no_cookie().unwrap();
    }
    let _server = lab.start_server(common::exe(), 0, PORT, 16, false).unwrap();
    let (cli_ns, srv_ns) = (netns_inode(&lab, Side::Client), netns_inode(&lab, Side::Server));
    let (cli, srv) = (cli_ns.to_string(), srv_ns.to_string());
    let wire = lab.capture_syns(Side::Client).unwrap();
    let before = Deltas::since(&lab);
    let tracer = Tracer::start(&["--netns", &cli, "--netns", &srv]);
    let report = Tracer::start_command(&["report", "--format", "json", "--netns", &cli]);
    let n = 3;
    let run = lab.run_client(common::exe(), &client(&lab, false, n, ClientMode::MsgFastopen)).unwrap();
    let (dc, ds) = before.both();
    let (events, stderr) = tracer.stop();
    let (report, _) = report.stop_lines();
    let wire = wire.stop();
    let syns: Vec<_> = wire.iter().filter(|s| !s.syn_ack && s.dport == PORT).collect();
    let synacks: Vec<_> = wire.iter().filter(|s| s.syn_ack && s.sport == PORT).collect();

    eprintln!(
        "{mode:?}: nstat client ActiveFail {} Active {}; server CookieReqd {} Passive {} PassiveFail {}; \
         wire SYNs (payload, option) {:?}, SYN-ACKs with an option {}",
        dc.get("TcpExtTCPFastOpenActiveFail"),
        dc.get("TcpExtTCPFastOpenActive"),
        ds.get("TcpExtTCPFastOpenCookieReqd"),
        ds.get("TcpExtTCPFastOpenPassive"),
        ds.get("TcpExtTCPFastOpenPassiveFail"),
        syns.iter().map(|s| (s.payload, s.tfo)).collect::<Vec<_>>(),
        synacks.iter().filter(|s| s.tfo).count(),
    );
    assert_eq!(run.ok_count(), n as usize, "{run:?}");
    assert_eq!(dc.get("TcpExtTCPFastOpenActiveFail"), u64::from(n), "{dc:?}");
    assert_eq!(dc.get("TcpExtTCPFastOpenActive"), 0, "{dc:?}");
    for c in ["TcpExtTCPFastOpenCookieReqd", "TcpExtTCPFastOpenPassive", "TcpExtTCPFastOpenPassiveFail"] {
        assert_eq!(ds.get(c), 0, "{c}: {ds:?}");
    }
    assert_eq!(syns.len(), n as usize, "{wire:?}");
    assert!(syns.iter().all(|s| s.payload == 100 && !s.tfo), "data, no TFO option: {syns:?}");
    assert!(synacks.iter().all(|s| !s.tfo), "no cookie back: {synacks:?}");

    let refused: Vec<_> = common::with_outcome(&events, cli_ns, Role::Client, Outcome::DataNotAcked);
    assert_eq!(refused.len() as u64, dc.get("TcpExtTCPFastOpenActiveFail"), "{refused:?}; {stderr:?}");
    for e in &refused {
        assert_eq!(e.cause, Some(Cause::NoCookieSent), "{e:?}");
        assert_eq!(e.syn_data_bytes, 100, "{e:?}");
    }
    if common::visible(&stderr, Role::Server, Outcome::DataWithoutCookie) {
        assert_eq!(
            count(&events, srv_ns, Role::Server, Outcome::DataWithoutCookie),
            u64::from(n),
            "{events:?}"
        );
        assert_eq!(of_role(&events, srv_ns, Role::Server).len(), n as usize, "one event per SYN: {events:?}");
    }
    let row = report_row(&report, SocketAddr::new(lab.server_addr(0, false).unwrap(), PORT));
    assert_eq!(row["verdict"]["kind"], "client_no_cookie_mode", "{row}");
    assert_eq!(row["refusals"]["no_cookie_sent"], u64::from(n), "{row}");
}

/// The TFO option stripped on the way in (issue 51, item 5): the client sends SYN-data
/// with its cookie, a middlebox before the server turns the option into NOPs (nft `reset tcp
/// option fastopen`); the server sees SYN-data without a cookie and takes none of it (no
/// server counter moves), its SYN-ACK carries no option. The client's refusal is
/// `no_tfo_option`; the server's `data_without_cookie` where a hook sees tcp_try_fastopen().
fn tfo_option_stripped_on_the_way_in() {
    require_kernel!();
    let lab = Lab::create(LabConfig::default()).unwrap();
    let _server = lab.start_server(common::exe(), 0, PORT, 16, false).unwrap();
    assert_eq!(
        lab.run_client(common::exe(), &client(&lab, false, 1, ClientMode::MsgFastopen)).unwrap().ok_count(),
        1
    );
    if let Err(e) = lab.middlebox_strip_tfo_option() {
        common::skip(format!("nft cannot reset a TCP option on this kernel: {e:#}"));
    }
    let (cli_ns, srv_ns) = (netns_inode(&lab, Side::Client), netns_inode(&lab, Side::Server));
    let srv_wire = lab.capture_syns(Side::Server).unwrap();
    let before = Deltas::since(&lab);
    let tracer = Tracer::start(&["--netns", &cli_ns.to_string(), "--netns", &srv_ns.to_string()]);
    let n: u32 = 2;
    // One at a time: on the tracepoint backends the reader reads the cookie cache for each.
    for _ in 0..n {
        let run = lab.run_client(common::exe(), &client(&lab, false, 1, ClientMode::MsgFastopen)).unwrap();
        assert_eq!(run.ok_count(), 1, "{run:?}");
    }
    let (dc, ds) = before.both();
    let (events, stderr) = tracer.stop();
    let syns: Vec<_> = srv_wire.stop().into_iter().filter(|s| !s.syn_ack && s.dport == PORT).collect();
    eprintln!(
        "nstat client ActiveFail {}; server CookieReqd {} Passive {} PassiveFail {}; SYNs at the server \
         (payload, option): {:?}",
        dc.get("TcpExtTCPFastOpenActiveFail"),
        ds.get("TcpExtTCPFastOpenCookieReqd"),
        ds.get("TcpExtTCPFastOpenPassive"),
        ds.get("TcpExtTCPFastOpenPassiveFail"),
        syns.iter().map(|s| (s.payload, s.tfo)).collect::<Vec<_>>()
    );
    assert_eq!(dc.get("TcpExtTCPFastOpenActiveFail"), u64::from(n), "{dc:?}");
    for c in ["TcpExtTCPFastOpenCookieReqd", "TcpExtTCPFastOpenPassive", "TcpExtTCPFastOpenPassiveFail"] {
        assert_eq!(ds.get(c), 0, "{c}: {ds:?}");
    }
    // tcpdump on the server's veth sees what arrived before the nft input hook: the option
    // is stripped after it; the data came.
    assert!(syns.iter().all(|s| s.payload == 100), "{syns:?}");
    let refused: Vec<_> = common::with_outcome(&events, cli_ns, Role::Client, Outcome::DataNotAcked);
    assert_eq!(refused.len() as u64, dc.get("TcpExtTCPFastOpenActiveFail"), "{stderr:?}");
    assert!(refused.iter().all(|e| e.cause == Some(Cause::NoTfoOption)), "{refused:?}");
    if common::visible(&stderr, Role::Server, Outcome::DataWithoutCookie) {
        assert_eq!(
            count(&events, srv_ns, Role::Server, Outcome::DataWithoutCookie),
            u64::from(n),
            "{events:?}"
        );
    }
}

module_tests!(
    syn_data_reset_by_a_firewall_is_named { ipv4: false, ipv6: true },
    client_no_cookie_mode_toward_a_server_that_needs_one { sysctl: NoCookie::Sysctl, route: NoCookie::Route },
    tfo_option_stripped_on_the_way_in,
    connect_refused_by_rst_names_its_port { ipv4: false, ipv6: true },
    first_contact_then_tfo { ipv4: false, ipv6: true },
    accepted_saves_the_round_trip_on_the_wire { ipv4: false, ipv6: true },
    saved_against_the_wire_reads_past_connections_held_off,
    accepted_saves_a_delayed_round_trip { ipv4: false, ipv6: true },
    server_stops_taking_tfo { ipv4: false, ipv6: true },
    middlebox_drops_syn_data { ipv4: false, ipv6: true },
    middlebox_drops_tfo_option { ipv4: false, ipv6: true },
    two_namespaces_at_once_are_told_apart,
    cookie_request_without_answer_falls_back_to_the_experimental_option,
);
