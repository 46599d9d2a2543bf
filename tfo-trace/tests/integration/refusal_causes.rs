//! Why a client's SYN-data was refused (issue 38, item 1): the causes made to happen for
//! real, the tracer's `cause` of each `data_not_acked` checked against the server's
//! kernel counters and against the SYN-ACK tcpdump saw on the client's veth. On the
//! fentry/kprobe backends the programs read the SYN-ACK's option; on the tracepoint ones
//! the reader reads the client namespace's cookie cache (tcp_metrics over netlink).
//!
//! Then the cookie's churn (items 2 and 6): a fleet behind one address without a shared key
//! and a client address changed by NAT, recorded and given to `report`, whose verdict and
//! figures are checked against the same counters and the SYN-ACKs' cookies on the wire.
use crate::common;

use std::{collections::BTreeSet, net::SocketAddr, path::Path};

use common::{netns_inode, Deltas, TempFile, Tracer};
use serde_json::Value;
use tfo_trace::{
    events::{Cause, Event, Outcome, Role},
    lab::{
        traffic::{ClientArgs, ServerArgs},
        Lab, LabConfig, Side, WireSyn,
    },
};

const PORT: u16 = 8080;

fn args(dst: SocketAddr, count: u32) -> ClientArgs {
    ClientArgs { count, payload_bytes: 100, timeout_ms: 5000, ..ClientArgs::new(dst) }
}

/// A lab whose client holds a cookie for the server's address (two connections: the
/// cookie request, then one accepted), the server's key set to `key` first where given.
fn lab_with_cookie(key: Option<&str>) -> (Lab, tfo_trace::lab::ServerHandle, SocketAddr) {
    let lab = Lab::create(LabConfig::default()).unwrap();
    if let Some(key) = key {
        lab.set_sysctl(Side::Server, "net.ipv4.tcp_fastopen_key", key).unwrap();
    }
    let server = lab.start_server(common::exe(), 0, PORT, 16, false).unwrap();
    let dst = SocketAddr::new(lab.server_addr(0, false).unwrap(), PORT);
    assert_eq!(lab.run_client(common::exe(), &args(dst, 2)).unwrap().ok_count(), 2, "cookie cached");
    (lab, server, dst)
}

/// The client's refused SYN-data in its namespace.
fn refusals(events: &[Event], cli_ns: u32) -> Vec<&Event> {
    events
        .iter()
        .filter(|e| e.netns == cli_ns && e.role == Role::Client && e.outcome == Outcome::DataNotAcked)
        .collect()
}

/// The client's refused SYN-data, checked first: as many as the kernel counted (`kernel`),
/// every one told as `cause`.
fn refusals_told<'e>(
    events: &'e [Event],
    cli_ns: u32,
    cause: Cause,
    kernel: u64,
    stderr: &[String],
) -> Vec<&'e Event> {
    let refused = refusals(events, cli_ns);
    let told = refused.iter().filter(|e| e.cause == Some(cause)).count() as u64;
    assert_eq!(told, kernel, "{} against the kernel's count: {refused:?}; stderr: {stderr:?}", cause.name());
    assert_eq!(refused.len() as u64, told, "every refusal is {}: {refused:?}", cause.name());
    refused
}

/// The SYN a refused connection sent and the SYN-ACK it got, as the wire saw them (its
/// connection by port and initial sequence number: the kernel may give a later connection
/// the same port, `common::wire`); the SYN must have carried a cookie and data (that is
/// what was refused).
fn on_the_wire<'w>(wire: &'w [WireSyn], e: &Event) -> (&'w WireSyn, &'w WireSyn) {
    let conns = common::wire::connections(wire);
    let c = common::wire::connection_of(&conns, e);
    // The references into `wire`, not into `conns` (first() borrows the connection).
    let (syn, synack) = (c.syns[0], c.synack);
    let Some(synack) = synack else {
        panic!("no SYN-ACK of port {} on the wire: {e:?}; wire: {wire:?}", e.sport)
    };
    assert!(syn.cookie.is_some() && syn.payload > 0, "the refused SYN carried a cookie and data: {syn:?}");
    (syn, synack)
}

/// The server's key rotated without a backup key, three times, one connection after each:
/// every SYN-data is refused (TcpExtTCPFastOpenPassiveFail) and its SYN-ACK brings a cookie
/// other than the one the SYN carried; the tracer says `new_cookie` for each, and for none
/// else. Each refusal is awaited before the next rotation: a connection that changes the
/// destination's cookie again before the reader has read the cache (tracepoint backends)
/// would leave it nothing to compare.
fn key_rotated_without_backup_says_new_cookie() {
    require_kernel!();
    const KEYS: [&str; 4] = [
        "00000000-00000000-00000000-0000000a",
        "00000000-00000000-00000000-0000000b",
        "00000000-00000000-00000000-0000000c",
        "00000000-00000000-00000000-0000000d",
    ];
    let (lab, _server, dst) = lab_with_cookie(Some(KEYS[0]));
    let cli_ns = netns_inode(&lab, Side::Client);
    let capture = lab.capture_syns(Side::Client).unwrap();
    let before = Deltas::since(&lab);
    let mut tracer = Tracer::start(&[]);
    for key in &KEYS[1..] {
        lab.set_sysctl(Side::Server, "net.ipv4.tcp_fastopen_key", key).unwrap();
        assert_eq!(lab.run_client(common::exe(), &args(dst, 1)).unwrap().ok_count(), 1);
        tracer.wait_stdout("the refusal after a rotation", |l| {
            serde_json::from_str::<Event>(l).is_ok_and(|e| refusals(&[e], cli_ns).len() == 1)
        });
    }
    let (events, stderr) = tracer.stop();
    let wire = capture.stop();
    let (dc, ds) = before.both();

    let rotations = (KEYS.len() - 1) as u64;
    assert_eq!(ds.get("TcpExtTCPFastOpenPassiveFail"), rotations, "server counters: {ds:?}");
    assert_eq!(dc.get("TcpExtTCPFastOpenActiveFail"), rotations, "client counters: {dc:?}");
    for e in refusals_told(&events, cli_ns, Cause::NewCookie, ds.get("TcpExtTCPFastOpenPassiveFail"), &stderr)
    {
        let (syn, synack) = on_the_wire(&wire, e);
        assert!(synack.cookie.is_some(), "the SYN-ACK brought a cookie: {synack:?}");
        assert_ne!(synack.cookie, syn.cookie, "the SYN-ACK's cookie is another: {e:?}");
    }
}

/// The server's TFO turned off (net.ipv4.tcp_fastopen=0 in its namespace) after the client
/// cached a cookie: every SYN-data is refused (the client's TcpExtTCPFastOpenActiveFail; no
/// server TFO counter moves) and its SYN-ACK carries no TFO option; the tracer says
/// `no_tfo_option` for each.
fn server_tfo_off_says_no_tfo_option() {
    require_kernel!();
    let (lab, _server, dst) = lab_with_cookie(None);
    lab.set_sysctl(Side::Server, "net.ipv4.tcp_fastopen", "0").unwrap();
    let cli_ns = netns_inode(&lab, Side::Client);
    let capture = lab.capture_syns(Side::Client).unwrap();
    let before = Deltas::since(&lab);
    let tracer = Tracer::start(&[]);
    let n = 3;
    assert_eq!(lab.run_client(common::exe(), &args(dst, n)).unwrap().ok_count(), n as usize);
    let (events, stderr) = tracer.stop();
    let wire = capture.stop();
    let (dc, ds) = before.both();

    assert_eq!(dc.get("TcpExtTCPFastOpenActiveFail"), u64::from(n), "client counters: {dc:?}");
    assert_eq!(ds.get("TcpExtTCPFastOpenPassive") + ds.get("TcpExtTCPFastOpenPassiveFail"), 0, "{ds:?}");
    for e in
        refusals_told(&events, cli_ns, Cause::NoTfoOption, dc.get("TcpExtTCPFastOpenActiveFail"), &stderr)
    {
        let (_, synack) = on_the_wire(&wire, e);
        assert!(!synack.tfo, "the SYN-ACK carries no TFO option: {synack:?}");
    }
}

/// `report --format json --from FILE`: the row of `dst` in `netns`.
fn reported(file: &Path, dst: SocketAddr, netns: u32) -> Value {
    let json = common::report_json(file);
    let rows = json["destinations"].as_array().cloned().unwrap_or_default();
    rows.into_iter()
        .find(|d| d["destination"] == dst.to_string() && d["netns"] == netns)
        .unwrap_or_else(|| panic!("no destination {dst} in netns {netns}: {json:#}"))
}

/// `n` connections to `dst`, one at a time, each awaited in the tracer's output (its
/// refusal or acceptance) before the next: on tracepoint backends the reader reads the
/// cookie cache after a refusal, and the next connection would change it first.
fn one_by_one(lab: &Lab, tracer: &mut Tracer, dst: SocketAddr, n: u32, cli_ns: u32) {
    for i in 0..n {
        assert_eq!(lab.run_client(common::exe(), &args(dst, 1)).unwrap().ok_count(), 1, "connection {i}");
        tracer.wait_stdout("the connection's outcome", |l| {
            serde_json::from_str::<Event>(l).is_ok_and(|e| {
                e.netns == cli_ns
                    && e.role == Role::Client
                    && matches!(e.outcome, Outcome::DataNotAcked | Outcome::Accepted)
            })
        });
    }
}

/// The SYN-ACK cookies of the refused connections, checked on the wire first: each brought
/// a cookie other than the one its SYN carried. Returns how many different ones came.
fn new_cookies_on_the_wire(wire: &[WireSyn], refused: &[&Event]) -> usize {
    let mut seen = BTreeSet::new();
    for e in refused {
        let (syn, synack) = on_the_wire(wire, e);
        assert!(synack.cookie.is_some(), "the SYN-ACK brought a cookie: {synack:?}");
        assert_ne!(synack.cookie, syn.cookie, "the SYN-ACK's cookie is another: {e:?}");
        seen.insert(synack.cookie.clone());
    }
    seen.len()
}

/// What a recorded run of connections to one destination showed, checked on the way.
struct Churn {
    /// The report's row of the destination.
    row: Value,
    /// The different cookies the refused SYN-data's SYN-ACKs brought (tcpdump).
    cookies: usize,
    /// The first refusal's SYN-ACK, and every SYN and SYN-ACK of the run.
    first_synack: WireSyn,
    wire: Vec<WireSyn>,
    server: common::Nstat,
}

/// Records `n` connections to `dst` ([`one_by_one`]) and reports them; checks first that the
/// kernel refused `refused` of them on both ends (the client's ActiveFail, the server's
/// PassiveFail), that the tracer told each a `new_cookie` and that each one's SYN-ACK
/// brought another cookie; then that the report's row counts the same: its refusals and
/// new cookies as the kernel's, its accepted SYN-data as the client's TcpExtTCPFastOpenActive.
fn churn(lab: &Lab, dst: SocketAddr, n: u32, refused: u64, name: &str) -> Churn {
    let cli_ns = netns_inode(lab, Side::Client);
    let file = TempFile::new(name);
    let capture = lab.capture_syns(Side::Client).unwrap();
    let before = Deltas::since(lab);
    let mut tracer = Tracer::start(&["--record", file.path()]);
    one_by_one(lab, &mut tracer, dst, n, cli_ns);
    let (events, stderr) = tracer.stop();
    let wire = capture.stop();
    let (dc, ds) = before.both();

    assert_eq!(dc.get("TcpExtTCPFastOpenActiveFail"), refused, "client counters: {dc:?}");
    assert_eq!(ds.get("TcpExtTCPFastOpenPassiveFail"), refused, "server counters: {ds:?}");
    let told =
        refusals_told(&events, cli_ns, Cause::NewCookie, ds.get("TcpExtTCPFastOpenPassiveFail"), &stderr);
    let cookies = new_cookies_on_the_wire(&wire, &told);
    let first_synack = on_the_wire(&wire, told[0]).1.clone();

    let row = reported(&file.0, dst, cli_ns);
    assert_eq!(row["data_not_acked"], dc.get("TcpExtTCPFastOpenActiveFail"), "ActiveFail: {row:#}");
    assert_eq!(row["refusals"]["new_cookie"], ds.get("TcpExtTCPFastOpenPassiveFail"), "PassiveFail: {row:#}");
    assert_eq!(row["refusals"]["no_tfo_option"], 0, "{row:#}");
    assert_eq!(row["accepted"], dc.get("TcpExtTCPFastOpenActive"), "{row:#}");
    Churn { row, cookies, first_synack, wire, server: ds }
}

/// Two listeners with their own TCP_FASTOPEN_KEY behind one address and port `PORT` (nft
/// redirect, numgen: new connections to each in turn): the servers, and the address.
pub(crate) fn two_keys_behind_one_port(lab: &Lab) -> (Vec<tfo_trace::lab::ServerHandle>, SocketAddr) {
    let ip = lab.server_addr(0, false).unwrap();
    let servers = [(PORT + 1, [0xa1; 16]), (PORT + 2, [0xb2; 16])]
        .into_iter()
        .map(|(port, key)| {
            let listen = SocketAddr::new(ip, port);
            let s = ServerArgs { tfo_queue: 16, tfo_key: Some(key), ..ServerArgs::new(listen) };
            lab.start_server_with(common::exe(), &s).unwrap()
        })
        .collect();
    lab.server_spread_port(PORT, &[PORT + 1, PORT + 2]).unwrap();
    (servers, SocketAddr::new(ip, PORT))
}

/// Two listeners with their own TCP_FASTOPEN_KEY behind one address and port, new
/// connections sent to each in turn (nft redirect, numgen): every SYN-data meets the other
/// key and is refused with a new cookie, for ever. `report` says the servers do not share
/// a key (`cookie_churn`), with the churn's figures equal to the kernel's counts.
fn a_fleet_without_a_shared_key_is_cookie_churn() {
    require_kernel!();
    let lab = Lab::create(LabConfig::default()).unwrap();
    let (_servers, dst) = two_keys_behind_one_port(&lab);
    // The cookie request, answered by the first listener.
    assert_eq!(lab.run_client(common::exe(), &args(dst, 1)).unwrap().ok_count(), 1);
    let n = 6;
    let c = churn(&lab, dst, n, u64::from(n), "fleet");
    assert_eq!(c.cookies, 2, "the two keys' cookies in turn: {:?}", c.wire);
    assert_eq!(c.row["verdict"]["kind"], "cookie_churn", "{:#}", c.row);
    assert_eq!(c.row["refusals"]["longest_run"], u64::from(n), "none accepted between: {:#}", c.row);
    let sentence = c.row["verdict"]["sentence"].as_str().unwrap();
    assert!(sentence.starts_with(&format!("the servers behind {dst} do not share a TFO key")), "{sentence}");
    assert!(sentence.contains("share the key across them"), "{sentence}");
}

/// The client's address as the server sees it changed once (SNAT in front of it switched
/// to another address after it got its cookie): the first SYN-data is refused with a new
/// cookie, the next ones carry it and are accepted. `report` says a one-off
/// (`key_rotated_without_backup`), never "stop using TFO".
fn a_nat_switched_once_is_a_one_off() {
    require_kernel!();
    let (lab, _server, dst) = lab_with_cookie(None);
    lab.client_snat(&[lab.client_nat_addr(0, false)]).unwrap();
    let n = 4;
    let c = churn(&lab, dst, n, 1, "nat-once");
    assert_eq!(c.server.get("TcpExtTCPFastOpenPassive"), u64::from(n - 1), "then accepted: {:?}", c.server);
    // The SYNs after it carry the new cookie, from the new address, with data.
    let later: Vec<&WireSyn> =
        c.wire.iter().filter(|s| !s.syn_ack && s.time_s > c.first_synack.time_s).collect();
    assert_eq!(later.len() as u64, u64::from(n - 1), "{:?}", c.wire);
    assert!(later.iter().all(|s| s.cookie == c.first_synack.cookie && s.payload > 0), "{later:?}");

    assert_eq!(c.row["verdict"]["kind"], "key_rotated_without_backup", "{:#}", c.row);
    let sentence = c.row["verdict"]["sentence"].as_str().unwrap();
    assert!(sentence.contains("once, then accepted again"), "{sentence}");
    assert!(sentence.contains("changed (NAT): a one-off, not a fault"), "{sentence}");
    assert!(!sentence.contains("stop using") && !sentence.contains("stop TFO"), "{sentence}");
}

/// The client's address changed on every connection (SNAT taking two addresses in turn,
/// a NAT pool): every SYN-data is refused with a new cookie; `report` says churn.
fn a_nat_pool_is_cookie_churn() {
    require_kernel!();
    let (lab, _server, dst) = lab_with_cookie(None);
    // The other address first: the first SYN-data already meets the change.
    lab.client_snat(&[lab.client_nat_addr(0, false), lab.client_addr(false)]).unwrap();
    let n = 6;
    let c = churn(&lab, dst, n, u64::from(n), "nat-pool");
    assert_eq!(c.cookies, 2, "one cookie per address: {:?}", c.wire);
    assert_eq!(c.row["verdict"]["kind"], "cookie_churn", "{:#}", c.row);
    assert_eq!(c.row["refusals"]["longest_run"], u64::from(n), "{:#}", c.row);
    let sentence = c.row["verdict"]["sentence"].as_str().unwrap();
    assert!(sentence.contains("the client's address changes per connection (a NAT pool)"), "{sentence}");
}

module_tests!(
    key_rotated_without_backup_says_new_cookie,
    server_tfo_off_says_no_tfo_option,
    a_fleet_without_a_shared_key_is_cookie_churn,
    a_nat_switched_once_is_a_one_off,
    a_nat_pool_is_cookie_churn
);
