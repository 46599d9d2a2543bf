//! Why a client's SYN-data was refused (issue 38, item 1): the causes made to happen for
//! real, the tracer's `cause` of each `data_not_acked` checked against the server's
//! kernel counters and against the SYN-ACK tcpdump saw on the client's veth. On the
//! fentry/kprobe backends the programs read the SYN-ACK's option; on the tracepoint ones
//! the reader reads the client namespace's cookie cache (tcp_metrics over netlink).
mod common;

use std::net::SocketAddr;

use common::{netns_inode, Deltas, Tracer};
use tfo_trace::{
    events::{Cause, Event, Outcome, Role},
    lab::{traffic::ClientArgs, Lab, LabConfig, Side, WireSyn},
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

/// The SYN a refused connection sent and the SYN-ACK it got, as the wire saw them; the SYN
/// must have carried a cookie and data (that is what was refused).
fn on_the_wire<'w>(wire: &'w [WireSyn], e: &Event) -> (&'w WireSyn, &'w WireSyn) {
    let syn = wire.iter().find(|s| !s.syn_ack && s.sport == e.sport);
    let synack = wire.iter().find(|s| s.syn_ack && s.dport == e.sport);
    let (Some(syn), Some(synack)) = (syn, synack) else {
        panic!("no SYN and SYN-ACK of port {} on the wire: {e:?}; wire: {wire:?}", e.sport)
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

tests_main!(key_rotated_without_backup_says_new_cookie, server_tfo_off_says_no_tfo_option);
