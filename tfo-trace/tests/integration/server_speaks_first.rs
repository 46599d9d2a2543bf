//! TFO asked, nothing gained (issue 38, item 5): a client that holds a cookie and reads
//! before it writes (a server that speaks first, as SMTP and FTP send a banner) makes its
//! TFO SYN with sendto(fd, "", 0, MSG_FASTOPEN): the SYN carries the cookie and no data.
//! The tracer must call each such connection `cookie_sent_no_data` (not a cookie request),
//! and `report` must say so for that process, never advising to turn TFO off (issue 51,
//! item 2): a SYN with a valid cookie and no data makes the server's child at once
//! (tcp_try_fastopen(): "Data-less SYN with valid cookie is allowed to send data in
//! SYN_RECV state"), so the banner leaves a round trip early. Where netem gives the path a
//! round trip (the VM kernels), the time to the banner is compared with the same client
//! with TFO off.
//! Checked against the client's counters (TcpExtTCPFastOpenActive and ActiveFail do not
//! move: tcp_rcv_fastopen_synack judges only `syn_data`), the server's (a TFO child each,
//! TcpExtTCPFastOpenPassive; no cookie request) and tcpdump (SYNs with a cookie, no payload).
use crate::common;

use std::net::SocketAddr;

use common::{count, netns_inode, Deltas, TempFile, Tracer};
use serde_json::Value;
use tfo_trace::{
    events::{Outcome, Role},
    lab::{
        traffic::{ClientArgs, ClientMode},
        Lab, LabConfig, ServerArgs, Side,
    },
};

const PORT: u16 = 2525;
/// The banner the server writes first.
const BANNER_BYTES: usize = 40;
/// The lab's clients are tfo-trace's own `lab-client`: the process name events carry.
const LAB_CLIENT_COMM: &str = "tfo-trace";

/// The report's row (`table`, keyed by `field`) for `label` in namespace `netns`.
fn row<'r>(report: &'r Value, (table, field): (&str, &str), label: &str, netns: u32) -> &'r Value {
    report[table]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r[field] == label && r["netns"] == netns)
        .unwrap_or_else(|| panic!("no {field} {label} in netns {netns}: {report:#}"))
}

/// Whether the tracer reports a server child made from a cookie without data: the hook on
/// tcp_try_fastopen() sees every child; the state hook only where the kernel marks TFO
/// children (`syn_fastopen_child`; before it, `syn_data_acked` marks only those with data).
/// Whether the kernel has it is read from its BTF by the tests' own reader (`common::btf`),
/// not the product's: a bug there must fail this test, not turn it into an allowed skip.
fn data_less_children_visible(stderr: &[String]) -> bool {
    if !tfo_trace::backends::server_from_state(common::backend_of(stderr)) {
        return true;
    }
    let btf =
        common::btf::Btf::read(common::btf::VMLINUX).unwrap_or_else(|e| panic!("the kernel's BTF: {e}"));
    btf.struct_has_member("tcp_sock", "syn_fastopen_child").unwrap_or_else(|e| panic!("{e}"))
}

/// The lab's server writing its banner at accept, and a client that holds its cookie (one
/// connection that writes first: a cookie request, then the data after the handshake).
fn banner_server(lab: &Lab, v6: bool) -> (tfo_trace::lab::ServerHandle, SocketAddr) {
    let listen = SocketAddr::new(lab.server_addr(0, v6).unwrap(), PORT);
    let server_args = ServerArgs {
        tfo_queue: 16,
        reply_bytes: BANNER_BYTES,
        speaks_first: true,
        ..ServerArgs::new(listen)
    };
    let server = lab.start_server_with(common::exe(), &server_args).unwrap();
    let warm = ClientArgs { count: 1, payload_bytes: 100, ..ClientArgs::new(listen) };
    assert_eq!(lab.run_client(common::exe(), &warm).unwrap().ok_count(), 1, "cookie fetched");
    (server, listen)
}

fn server_speaks_first_sends_the_cookie_without_data(v6: bool) {
    require_kernel!();
    let lab = Lab::create(LabConfig::default()).unwrap();
    let (_server, dst) = banner_server(&lab, v6);

    let cli_ns = netns_inode(&lab, Side::Client);
    let srv_ns = netns_inode(&lab, Side::Server);
    let capture = lab.capture_syns(Side::Client).unwrap();
    let before = Deltas::since(&lab);
    let file = TempFile::new(if v6 { "speaks-first-v6" } else { "speaks-first-v4" });
    let tracer = Tracer::start_command(&["trace", "--json", "--record", file.path()]);
    let n: u32 = 4;
    // Reads first: sendto(fd, "", 0, MSG_FASTOPEN), then the banner to its end.
    let reads_first = ClientArgs { count: n, payload_bytes: 0, ..ClientArgs::new(dst) };
    let run = lab.run_client(common::exe(), &reads_first).unwrap();
    assert_eq!(run.ok_count(), n as usize, "{run:?}");
    let (events, stderr) = tracer.stop();
    let wire = capture.stop();
    let (dc, ds) = before.both();
    let n = u64::from(n);

    // The kernel: no client TFO counter moves, a TFO child per connection on the server.
    for name in ["TcpExtTCPFastOpenActive", "TcpExtTCPFastOpenActiveFail", "TcpExtTCPSynRetrans"] {
        assert_eq!(dc.get(name), 0, "{name} in the client's namespace: {dc:?}");
    }
    assert_eq!(ds.get("TcpExtTCPFastOpenPassive"), n, "server counters: {ds:?}");
    assert_eq!(ds.get("TcpExtTCPFastOpenCookieReqd"), 0, "no cookie request: {ds:?}");

    // The wire: n SYNs with a cookie and no payload, and no other SYN from the client.
    let syns: Vec<_> = wire.iter().filter(|s| !s.syn_ack && s.dport == PORT).collect();
    assert_eq!(syns.len() as u64, n, "one SYN per connection: {syns:?}");
    for s in &syns {
        assert!(s.cookie.is_some() && s.payload == 0, "a SYN with a cookie and no data: {s:?}");
    }

    // The tracer: each of them `cookie_sent_no_data`, from the port tcpdump saw.
    let no_data: Vec<_> = events
        .iter()
        .filter(|e| e.netns == cli_ns && e.role == Role::Client && e.outcome == Outcome::CookieSentNoData)
        .collect();
    assert_eq!(no_data.len() as u64, n, "cookie_sent_no_data: {events:?}; stderr: {stderr:?}");
    assert_eq!(count(&events, cli_ns, Role::Client, Outcome::CookieRequested), 0, "{events:?}");
    for e in &no_data {
        assert_eq!(e.syn_data_bytes, 0, "{e:?}");
        assert_eq!(&*e.comm, LAB_CLIENT_COMM, "{e:?}");
        assert!(syns.iter().any(|s| s.sport == e.sport), "its SYN on the wire: {e:?}; {syns:?}");
    }
    // The server's TFO children, where the backend sees them: made from no data.
    let mut children_seen = false;
    if common::visible(&stderr, Role::Server, Outcome::Accepted) {
        let children: Vec<_> = events
            .iter()
            .filter(|e| e.netns == srv_ns && e.role == Role::Server && e.outcome == Outcome::Accepted)
            .collect();
        assert!(children.iter().all(|e| e.syn_data_bytes == 0 && e.saved_us.is_none()), "{children:?}");
        if data_less_children_visible(&stderr) {
            assert_eq!(children.len() as u64, ds.get("TcpExtTCPFastOpenPassive"), "{children:?}; {stderr:?}");
            children_seen = true;
        } else {
            assert!(children.is_empty(), "{children:?}");
            common::partial_skip(
                "a TFO child made without data is not visible to the state hook on a kernel without \
                 syn_fastopen_child (syn_data_acked stays 0)",
            );
        }
    }

    // The report: a cookie without data, in that process, with the counts, and no advice
    // to turn TFO off.
    let report = common::report_json(&file.0);
    let label = dst.to_string();
    let d = row(&report, ("destinations", "destination"), &label, cli_ns);
    assert_eq!(d["verdict"]["kind"], "cookie_without_data", "{d:#}");
    assert_eq!(d["outcomes"]["cookie_sent_no_data"], n, "{d:#}");
    assert_eq!(d["verdict"]["support"]["connections"], n, "{d:#}");
    let sentence = d["verdict"]["sentence"].as_str().unwrap();
    let want = format!("{n} of {n} connections to {label} in {LAB_CLIENT_COMM} sent a cookie but no data");
    assert!(sentence.starts_with(&want), "{sentence}");
    assert!(sentence.contains("a round trip saved where the server writes first"), "{sentence}");
    assert!(!sentence.contains("TFO off") && !sentence.contains("disable TFO"), "{sentence}");
    // And the listener's side, where its children were seen: the same count, from Passive.
    if children_seen {
        let l = row(&report, ("listeners", "listener"), &label, srv_ns);
        let want =
            format!("{} TFO children made from a cookie without data", ds.get("TcpExtTCPFastOpenPassive"));
        assert!(
            l["verdict"]["evidence"]
                .as_array()
                .unwrap()
                .iter()
                .any(|e| e.as_str().unwrap().starts_with(&want)),
            "{l:#}"
        );
    }
}

/// The path's round trip where netem gives it one: each server packet is delayed by this.
const PATH_DELAY: std::time::Duration = std::time::Duration::from_millis(50);

/// Median of the lab client's SYN -> first byte of the reply (its own clock: from socket()
/// to the first byte read), over `run`'s connections, in µs.
fn median_first_byte_us(run: &tfo_trace::lab::ClientRun) -> u64 {
    let mut t: Vec<u64> = run.results.iter().filter_map(|r| r.first_byte_us).collect();
    assert_eq!(t.len(), run.results.len(), "a banner on every connection: {run:?}");
    t.sort_unstable();
    t[t.len() / 2]
}

/// Issue 51, item 2: a banner at accept reaches a client that sends a cookie without data
/// one round trip before it reaches the same client with TFO off: the server's child is
/// made from the SYN (a TcpExtTCPFastOpenPassive each), not from the handshake's last ACK.
/// Needs a path with a round trip well above the lab's scheduling noise: netem (the VM
/// kernels); this host has none.
fn the_banner_comes_a_round_trip_earlier_with_a_cookie() {
    require_kernel!();
    let lab = Lab::create(LabConfig::default()).unwrap();
    let (_server, listen) = banner_server(&lab, false);
    if !common::delay_where_netem(&lab, Side::Server, PATH_DELAY, "") {
        common::skip(
            "the banner's round trip needs netem (CONFIG_NET_SCH_NETEM) for a path slower than the lab's \
             scheduling noise; covered by the VM cells (cargo xtask vm --kernel 6.12 --backend fentry, and \
             --backend tracepoint, --bins server_speaks_first)",
        );
    }
    let n = 4u32;
    let file = TempFile::new("banner-rtt");
    let tracer = Tracer::start_command(&["trace", "--json", "--record", file.path()]);
    let before = Deltas::since(&lab);
    let cookie_only = ClientArgs { count: n, payload_bytes: 0, ..ClientArgs::new(listen) };
    let tfo = lab.run_client(common::exe(), &cookie_only).unwrap();
    let passive_tfo = before.server().get("TcpExtTCPFastOpenPassive");
    let plain = ClientArgs { mode: ClientMode::Plain, ..cookie_only };
    let plain = lab.run_client(common::exe(), &plain).unwrap();
    let (_events, _stderr) = tracer.stop();
    let ds = before.server();
    assert_eq!((tfo.ok_count(), plain.ok_count()), (n as usize, n as usize), "{tfo:?} {plain:?}");
    // The kernel: a TFO child per cookie-only SYN, none for the plain ones.
    assert_eq!((passive_tfo, ds.get("TcpExtTCPFastOpenPassive")), (u64::from(n), u64::from(n)), "{ds:?}");
    let (t_tfo, t_plain) = (median_first_byte_us(&tfo), median_first_byte_us(&plain));
    let rtt = PATH_DELAY.as_micros() as u64;
    // Plain: SYN-ACK after one round trip, the ACK makes the child, the banner one more
    // round trip. With a cookie: the banner comes with the SYN-ACK's round trip.
    assert!(t_plain >= 2 * rtt && t_tfo < 2 * rtt, "first byte: with a cookie {t_tfo}us, plain {t_plain}us");
    assert!(t_plain - t_tfo >= rtt / 2, "a round trip earlier: with a cookie {t_tfo}us, plain {t_plain}us");
    eprintln!("first byte of the banner: {t_tfo}us with a cookie, {t_plain}us with TFO off (path {rtt}us)");
    // And the report advises nothing against it.
    let report = common::report_json(&file.0);
    let cli_ns = netns_inode(&lab, Side::Client);
    let d = row(&report, ("destinations", "destination"), &listen.to_string(), cli_ns);
    let sentence = d["verdict"]["sentence"].as_str().unwrap();
    assert!(!sentence.contains("TFO off") && !sentence.contains("disable TFO"), "{sentence}");
}

module_tests!(
    server_speaks_first_sends_the_cookie_without_data { ipv4: false, ipv6: true },
    the_banner_comes_a_round_trip_earlier_with_a_cookie,
);
