//! How a destination's cookie changed (issue 51, items 1, 6 and 7), told per refused
//! SYN-data by the cookie its SYN carried against the one its SYN-ACK brought, checked
//! against the kernel's counters and against tcpdump's account of each SYN and SYN-ACK:
//!
//! - a key rotated without a backup while 16 SYN-data are in flight (8 from non-blocking
//!   sockets, 8 from blocking ones, each in a thread), the server's answers held back
//!   until all have left: one rotation, never churn, a stopped server or "not taken";
//! - two listeners with their own keys behind one port, connections one after another
//!   without waiting for the tracer: the cookie keeps changing (churn), every refusal a
//!   new cookie, never `no_tfo_option`, whatever the reader's speed (item 7);
//! - a client with two source addresses, each holding its own cookie (tcp_metrics keys
//!   entries by source and destination): a rotation seen from the second address is told
//!   from its own entry, not the first address's (item 6).
use crate::common;

use std::{collections::BTreeSet, net::SocketAddr, time::Duration};

use common::{netns_inode, Deltas, HookRun, Nstat, TempFile, Tracer};
use serde_json::Value;
use tfo_trace::{
    events::{Cause, CookieChange, Event, Outcome, Role},
    lab::{traffic::ClientArgs, Lab, LabConfig, ServerHandle, Side, SynCapture, WireSyn},
    probes::Backend,
};

const PORT: u16 = 8080;
const KEY_BEFORE: &str = "00000000-00000000-00000000-000000a1";
const KEY_AFTER: &str = "00000000-00000000-00000000-000000b2";

fn args(dst: SocketAddr, count: u32) -> ClientArgs {
    ClientArgs { count, payload_bytes: 100, timeout_ms: 5000, ..ClientArgs::new(dst) }
}

/// A lab whose server's key is [`KEY_BEFORE`], its listener on `PORT`.
fn lab_with_key() -> (Lab, ServerHandle, SocketAddr) {
    let lab = Lab::create(LabConfig::default()).unwrap();
    lab.set_sysctl(Side::Server, "net.ipv4.tcp_fastopen_key", KEY_BEFORE).unwrap();
    let server = lab.start_server(common::exe(), 0, PORT, 64, false).unwrap();
    let dst = SocketAddr::new(lab.server_addr(0, false).unwrap(), PORT);
    (lab, server, dst)
}

/// What a run is watched with: the tracer, recording (its client namespace only: the
/// traffic of tests running beside it is not this one's), tcpdump on the client's veth and
/// the kernel's counters of both namespaces.
struct Watch<'l> {
    cli_ns: u32,
    file: TempFile,
    capture: SynCapture,
    before: Deltas<'l>,
    tracer: Tracer,
}

/// What it saw.
struct Watched {
    events: Vec<Event>,
    stderr: Vec<String>,
    wire: Vec<WireSyn>,
    client: Nstat,
    server: Nstat,
}

impl<'l> Watch<'l> {
    fn start(lab: &'l Lab, name: &str) -> Watch<'l> {
        let cli_ns = netns_inode(lab, Side::Client);
        let file = TempFile::new(name);
        let capture = lab.capture_syns(Side::Client).unwrap();
        let before = Deltas::since(lab);
        let tracer = Tracer::start(&["--record", file.path(), "--netns", &cli_ns.to_string()]);
        Watch { cli_ns, file, capture, before, tracer }
    }

    fn stop(self) -> (Watched, TempFile, u32) {
        let (events, stderr) = self.tracer.stop();
        let wire = self.capture.stop();
        let (client, server) = self.before.both();
        println!("client {client:?}\nserver {server:?}");
        (Watched { events, stderr, wire, client, server }, self.file, self.cli_ns)
    }
}

/// The client's refused SYN-data in its namespace, as many as the kernel counted
/// (TcpExtTCPFastOpenActiveFail: `kernel`): one short is the kernel's skipped run of the
/// state hook (docs/outcomes.md), which the harness runs again.
fn refusals<'e>(events: &'e [Event], cli_ns: u32, kernel: u64, stderr: &[String]) -> Vec<&'e Event> {
    let refused: Vec<&Event> = events
        .iter()
        .filter(|e| e.netns == cli_ns && e.role == Role::Client && e.outcome == Outcome::DataNotAcked)
        .collect();
    let what = format!("refused SYN-data: {refused:?}; stderr: {stderr:?}");
    common::assert_hook_count(HookRun::Established, refused.len() as u64, kernel, what);
    refused
}

/// The SYN a connection sent and the SYN-ACK it got, as the wire saw them: its connection
/// by port and initial sequence number (the kernel may give a later connection the same
/// port, `common::wire`).
fn on_the_wire<'w>(wire: &'w [WireSyn], e: &Event) -> (&'w WireSyn, &'w WireSyn) {
    let conns = common::wire::connections(wire);
    let c = common::wire::connection_of(&conns, e);
    let synack = c.synack.unwrap_or_else(|| panic!("no SYN-ACK of port {} on the wire: {wire:?}", e.sport));
    (c.syns[0], synack) // into `wire`, not `conns` (first() borrows the connection)
}

/// Each refusal's cause against the wire: a refused SYN carried a cookie and data; a
/// `new_cookie` SYN-ACK brought another cookie, a `same_cookie` one the same, a
/// `no_tfo_option` one none. Returns the causes told, by name.
fn causes_match_the_wire(wire: &[WireSyn], refused: &[&Event]) -> Vec<&'static str> {
    refused
        .iter()
        .map(|e| {
            let (syn, synack) = on_the_wire(wire, e);
            assert!(
                syn.cookie.is_some() && syn.payload > 0,
                "the refused SYN carried a cookie and data: {syn:?}"
            );
            let cause = e.cause.unwrap_or_else(|| panic!("a refusal without a cause: {e:?}"));
            match cause {
                Cause::NewCookie => {
                    assert!(
                        synack.cookie.is_some() && synack.cookie != syn.cookie,
                        "{e:?}: {syn:?} {synack:?}"
                    )
                }
                Cause::SameCookie => assert_eq!(synack.cookie, syn.cookie, "{e:?}"),
                Cause::NoTfoOption => assert!(!synack.tfo, "{e:?}: {synack:?}"),
                // No-cookie mode: its SYN carried no TFO option (checked against the wire).
                Cause::NoCookieSent => assert!(syn.cookie.is_none(), "{e:?}: {syn:?}"),
                Cause::Unknown => {}
            }
            cause.name()
        })
        .collect()
}

/// `report --format json --from FILE`: the row of `dst` in `netns`.
fn reported(file: &TempFile, dst: SocketAddr, netns: u32) -> Value {
    let json = common::report_json(&file.0);
    let rows = json["destinations"].as_array().cloned().unwrap_or_default();
    rows.into_iter()
        .find(|d| d["destination"] == dst.to_string() && d["netns"] == netns)
        .unwrap_or_else(|| panic!("no destination {dst} in netns {netns}: {json:#}"))
}

/// The hashes the refusals carry, of one kind: those known, and how many were not.
fn hashes(refused: &[&Event], of: impl Fn(&Event) -> Option<u32>) -> (BTreeSet<u32>, usize) {
    let known: BTreeSet<u32> = refused.iter().filter_map(|e| of(e)).collect();
    (known, refused.iter().filter(|e| of(e).is_none()).count())
}

/// A key rotated without a backup while 16 SYN-data are in flight (8 non-blocking, 8
/// blocking from threads): the server's answers held back (netem, or a token bucket behind
/// filler datagrams where there is none) until all 16 have left, each SYN carrying the old
/// cookie, each SYN-ACK bringing the one new cookie; then connections one after another,
/// all accepted with it. One rotation: no cookie refused again, the verdict
/// `key_rotated_without_backup`, never churn, a stopped server or "not taken", and a
/// balance that does not go negative.
fn a_rotation_with_syn_data_in_flight_is_one_rotation() {
    require_kernel!();
    let (lab, _server, dst) = lab_with_key();
    // The cookie request, then accepted SYN-data: the client holds the old key's cookie.
    assert_eq!(lab.run_client(common::exe(), &args(dst, 3)).unwrap().ok_count(), 3);
    let watch = Watch::start(&lab, "rotation-in-flight");
    lab.set_sysctl(Side::Server, "net.ipv4.tcp_fastopen_key", KEY_AFTER).unwrap();
    // Where there is no netem the hold is a queue that drains from now, not from the
    // burst's first SYN: the client's start (`ip netns exec`, a 70 MB test binary, on a
    // busy machine) must fit in it. 500 ms, and not more: the last of 16 SYN-ACKs leaves
    // ~350 ms after the queue drains, and a SYN unanswered for 1 s is sent again (the
    // initial RTO), which would turn the refusals into stalls.
    let held = lab.hold_answers(Side::Server, Duration::from_millis(500)).unwrap();
    // Each connection's time, from the burst's start: the held answers take a while.
    let burst = ClientArgs { burst_nonblocking: 8, burst_threads: 8, timeout_ms: 15_000, ..args(dst, 1) };
    let run = lab.run_client(common::exe(), &burst).unwrap();
    lab.release_answers(Side::Server).unwrap();
    assert_eq!(run.ok_count(), 16, "every connection of the burst completed: {:?}", run.results);
    let after = 20;
    assert_eq!(lab.run_client(common::exe(), &args(dst, after)).unwrap().ok_count(), after as usize);
    let (Watched { events, stderr, wire, client: dc, server: ds }, file, cli_ns) = watch.stop();
    println!("held back by {held:?}");

    // The kernel: 16 refused on both ends, then every one after accepted.
    assert_eq!(dc.get("TcpExtTCPFastOpenActiveFail"), 16, "client counters: {dc:?}");
    assert_eq!(ds.get("TcpExtTCPFastOpenPassiveFail"), 16, "server counters: {ds:?}");
    assert_eq!(dc.get("TcpExtTCPFastOpenActive"), u64::from(after), "client counters: {dc:?}");
    assert_eq!(ds.get("TcpExtTCPFastOpenPassive"), u64::from(after), "server counters: {ds:?}");

    // The wire: all 16 SYN-data left before the first SYN-ACK came, each with the old
    // cookie; every SYN-ACK brought the one new cookie.
    let refused = refusals(&events, cli_ns, dc.get("TcpExtTCPFastOpenActiveFail"), &stderr);
    let pairs: Vec<_> = refused.iter().map(|e| on_the_wire(&wire, e)).collect();
    let last_syn = pairs.iter().map(|(syn, _)| syn.time_s).fold(f64::MIN, f64::max);
    let first_synack = pairs.iter().map(|(_, synack)| synack.time_s).fold(f64::MAX, f64::min);
    assert!(last_syn < first_synack, "all in flight before the first answer: {pairs:?}");
    let sent: BTreeSet<_> = pairs.iter().map(|(syn, _)| syn.cookie.clone()).collect();
    let brought: BTreeSet<_> = pairs.iter().map(|(_, synack)| synack.cookie.clone()).collect();
    assert_eq!((sent.len(), brought.len()), (1, 1), "one old and one new cookie: {pairs:?}");
    assert_ne!(sent, brought, "{pairs:?}");

    // The tracer: each cause the wire's; never what would send the server's team astray.
    let causes = causes_match_the_wire(&wire, &refused);
    println!("causes told: {causes:?}");
    assert!(causes.iter().all(|c| ["new_cookie", "unknown"].contains(c)), "{causes:?}");
    let changes: Vec<_> = refused.iter().map(|e| e.cookie_change).collect();
    println!("cookie changes told: {changes:?}");
    assert!(!changes.contains(&Some(CookieChange::Again)), "no cookie refused again: {changes:?}");
    // The hashes as the wire has them: one sent, one brought, not the same.
    let (sent_h, _) = hashes(&refused, |e| e.sent_cookie_hash);
    let (brought_h, _) = hashes(&refused, |e| e.cookie_hash.filter(|_| e.cause == Some(Cause::NewCookie)));
    assert!(sent_h.len() <= 1 && brought_h.len() <= 1 && sent_h.is_disjoint(&brought_h), "{refused:?}");
    match common::backend_of(&stderr) {
        Backend::Fentry | Backend::Kprobe => {
            // The programs saw both cookies of every connection.
            assert!(causes.iter().all(|c| *c == "new_cookie"), "{causes:?}");
            let first = changes.iter().filter(|c| **c == Some(CookieChange::First)).count();
            let in_flight = changes.iter().filter(|c| **c == Some(CookieChange::InFlight)).count();
            assert_eq!((first, in_flight), (1, 15), "{changes:?}");
        }
        backend => {
            // The cache changes with the first SYN-ACK only: that one is told; the others
            // find it already holding the new cookie (in flight, or no option: no telling).
            assert!(causes.contains(&"new_cookie"), "{backend}: the first SYN-ACK's change: {causes:?}");
            common::partial_skip(format!(
                "the {backend} backend tells only the first of the in-flight refusals (the cache holds the \
                 new cookie from then on); the fentry cell tells all 16"
            ));
        }
    }

    // The report: one rotation, not churn, and what it cost did not exceed what TFO saved.
    let row = reported(&file, dst, cli_ns);
    println!("report row: {row:#}");
    assert_eq!(row["data_not_acked"], dc.get("TcpExtTCPFastOpenActiveFail"), "{row:#}");
    assert_eq!(row["accepted"], dc.get("TcpExtTCPFastOpenActive"), "{row:#}");
    assert_eq!(row["verdict"]["kind"], "key_rotated_without_backup", "{row:#}");
    assert_eq!(row["refusals"]["refused_again"], 0, "{row:#}");
    assert_eq!(row["refusals"]["no_tfo_option"], 0, "{row:#}");
    assert_eq!(row["refusals"]["same_cookie"], 0, "{row:#}");
    assert!(
        row["net_us"].as_i64().is_some_and(|n| n >= 0),
        "a one-off costs nothing against plain TCP: {row:#}"
    );
}

/// Two listeners with their own keys behind one port (nft numgen redirect), connections
/// one after another as fast as they go, the tracer never waited for: every SYN-data meets
/// the other key and its SYN-ACK brings the other cookie (PassiveFail on the server each
/// time). Every refusal told is a new cookie, each carrying the cookie the previous one
/// brought: churn, never `no_tfo_option` (issue 51 item 7: the tracepoint backends' read of
/// the cookie cache came after the next connection had changed it).
fn two_keys_behind_one_port_one_after_another_is_churn() {
    require_kernel!();
    let lab = Lab::create(LabConfig::default()).unwrap();
    let (_servers, dst) = crate::refusal_causes::two_keys_behind_one_port(&lab);
    // The cookie request, answered by the first listener.
    assert_eq!(lab.run_client(common::exe(), &args(dst, 1)).unwrap().ok_count(), 1);
    let watch = Watch::start(&lab, "two-keys");
    let n = 8;
    assert_eq!(lab.run_client(common::exe(), &args(dst, n)).unwrap().ok_count(), n as usize);
    let (Watched { events, stderr, wire, client: dc, server: ds }, file, cli_ns) = watch.stop();

    assert_eq!(dc.get("TcpExtTCPFastOpenActiveFail"), u64::from(n), "client counters: {dc:?}");
    assert_eq!(ds.get("TcpExtTCPFastOpenPassiveFail"), u64::from(n), "server counters: {ds:?}");
    let refused = refusals(&events, cli_ns, dc.get("TcpExtTCPFastOpenActiveFail"), &stderr);
    // The wire: each SYN carried the cookie the previous SYN-ACK brought, and each SYN-ACK
    // another: the two keys' cookies in turn.
    let mut pairs: Vec<_> = refused.iter().map(|e| on_the_wire(&wire, e)).collect();
    pairs.sort_by(|a, b| a.0.time_s.total_cmp(&b.0.time_s));
    for w in pairs.windows(2) {
        assert_eq!(w[1].0.cookie, w[0].1.cookie, "each SYN sends what the last SYN-ACK brought: {pairs:?}");
    }
    let causes = causes_match_the_wire(&wire, &refused);
    println!(
        "causes told: {causes:?}; changes: {:?}",
        refused.iter().map(|e| e.cookie_change).collect::<Vec<_>>()
    );
    assert!(!causes.contains(&"no_tfo_option"), "{causes:?}");
    assert!(causes.iter().all(|c| *c == "new_cookie"), "every refusal told: {causes:?}; stderr: {stderr:?}");

    let row = reported(&file, dst, cli_ns);
    println!("report row: {row:#}");
    assert_eq!(row["refusals"]["new_cookie"], ds.get("TcpExtTCPFastOpenPassiveFail"), "{row:#}");
    assert_eq!(row["refusals"]["no_tfo_option"], 0, "{row:#}");
    assert_eq!(row["refusals"]["refused_again"], u64::from(n - 1), "each new cookie refused again: {row:#}");
    assert_eq!(row["verdict"]["kind"], "cookie_churn", "{row:#}");
}

/// A client with two source addresses, each holding its own cookie (the kernel keys its
/// cache by namespace, source and destination; tcp_get_metrics, net/ipv4/tcp_metrics.c),
/// the first address's entry made last, so that it heads the destination's hash chain
/// (tcpm_new puts a new entry first): a look-up without the source would be answered with
/// it. Then, from the second address only: the server's key rotated without a backup (its
/// first SYN-data refused with a new cookie, the next accepted), then the server's TFO
/// turned off (refused, no option). Each told from the second address's own entry:
/// `new_cookie` (a one-off), then `no_tfo_option` (the first address's cookie, another
/// than the one sent, would have read as a new one).
fn a_second_source_address_reads_its_own_cookie() {
    require_kernel!();
    let (lab, _server, dst) = lab_with_key();
    let second = lab.add_client_addr(false).unwrap();
    let from = |bind, count| ClientArgs { bind, ..args(dst, count) };
    for bind in [Some(second), None] {
        assert_eq!(lab.run_client(common::exe(), &from(bind, 2)).unwrap().ok_count(), 2, "{bind:?}");
    }
    let metrics = lab.tcp_metrics(Side::Client).unwrap();
    println!("{metrics}");
    let with_cookie = metrics.lines().filter(|l| l.contains("fo_cookie")).count();
    assert_eq!(with_cookie, 2, "a cookie per source address: {metrics}");
    let watch = Watch::start(&lab, "second-source");
    lab.set_sysctl(Side::Server, "net.ipv4.tcp_fastopen_key", KEY_AFTER).unwrap();
    assert_eq!(lab.run_client(common::exe(), &from(Some(second), 2)).unwrap().ok_count(), 2);
    lab.set_sysctl(Side::Server, "net.ipv4.tcp_fastopen", "0").unwrap();
    assert_eq!(lab.run_client(common::exe(), &from(Some(second), 1)).unwrap().ok_count(), 1);
    let (Watched { events, stderr, wire, client: dc, server: ds }, file, cli_ns) = watch.stop();

    assert_eq!(dc.get("TcpExtTCPFastOpenActiveFail"), 2, "client counters: {dc:?}");
    assert_eq!(ds.get("TcpExtTCPFastOpenPassiveFail"), 1, "server counters: {ds:?}");
    assert_eq!(dc.get("TcpExtTCPFastOpenActive"), 1, "client counters: {dc:?}");
    let mut refused = refusals(&events, cli_ns, dc.get("TcpExtTCPFastOpenActiveFail"), &stderr);
    refused.sort_by_key(|e| e.ts.unix_ns());
    assert!(refused.iter().all(|e| e.saddr == second), "{refused:?}");
    let causes = causes_match_the_wire(&wire, &refused);
    println!("causes told: {causes:?}");
    assert_eq!(causes, ["new_cookie", "no_tfo_option"], "{refused:?}; stderr: {stderr:?}");
    assert_eq!(refused[0].cookie_change, Some(CookieChange::First), "{refused:?}");
    let row = reported(&file, dst, cli_ns);
    let r = &row["refusals"];
    assert_eq!(
        (&r["new_cookie"], &r["no_tfo_option"], &r["unknown"]),
        (&1.into(), &1.into(), &0.into()),
        "{row:#}"
    );
}

module_tests!(
    a_rotation_with_syn_data_in_flight_is_one_rotation,
    two_keys_behind_one_port_one_after_another_is_churn,
    a_second_source_address_reads_its_own_cookie
);
