//! The tests' own oracles, tested: what every other test compares the tracer with must be
//! right by itself, and share nothing with the product. The counters read by `nstat`
//! (`common::nstat`), which fail on a counter nstat does not list.
use crate::common;

use std::panic;

use common::{Deltas, Nstat};
use tfo_trace::lab::{traffic::ClientArgs, Lab, LabConfig, ServerArgs, Side};

/// What a failed check said, where it failed.
fn failure(check: impl FnOnce()) -> Option<String> {
    let failed = panic::catch_unwind(panic::AssertUnwindSafe(check)).err()?;
    Some(failed.downcast_ref::<String>().cloned().unwrap_or_default())
}

/// nstat's text, read by the test's own parser; a counter nstat does not list fails the
/// test (a misspelt name would otherwise read 0 and agree with a silent tracer).
fn nstat_fails_on_a_counter_it_does_not_list() {
    let text = "#kernel\nTcpExtTCPFastOpenActive         4                  0.0\nTcpExtTCPSynRetrans 2 0.0\n";
    let n = Nstat::of_text("lab", text);
    assert_eq!((n.get("TcpExtTCPFastOpenActive"), n.get("TcpExtTCPSynRetrans")), (4, 2));
    let before = Nstat::of_text("lab", "#kernel\nTcpExtTCPFastOpenActive 1 0.0\nTcpExtTCPSynRetrans 2 0.0\n");
    assert_eq!(format!("{:?}", n.since(&before)), r#"{"TcpExtTCPFastOpenActive": 3}"#);
    let said = failure(|| {
        n.get("TcpExtTCPFastopenActive");
    })
    .expect("an unlisted counter must fail");
    assert!(said.contains("lists no counter \"TcpExtTCPFastopenActive\""), "{said}");
    assert!(said.contains("TcpExtTCPFastOpenActive"), "names the counter it most likely meant: {said}");
    // A text of another shape is no set of zeros.
    assert!(Nstat::parse("TcpExtTCPFastOpenActive four 0.0\n").is_err());
    assert!(Nstat::parse("#kernel\n").is_err());
}

/// On this kernel: `nstat` in a lab's namespaces counts two connections to a TFO listener
/// on each end, and nothing before them: both opens on each side, the first's cookie
/// request (TcpExtTCPFastOpenCookieReqd, tcp_try_fastopen(), net/ipv4/tcp_fastopen.c:363
/// in 6.12), the second's SYN-data taken (TcpExtTCPFastOpenPassive, :406; the client's
/// TcpExtTCPFastOpenActive, tcp_rcv_fastopen_synack()). A counter it does not list fails
/// there too.
fn nstat_counts_a_lab_s_connections() {
    require_kernel!();
    let lab = Lab::create(LabConfig::default()).unwrap();
    let listen = std::net::SocketAddr::new(lab.server_addr(0, false).unwrap(), 8080);
    let server_args = ServerArgs { tfo_queue: 16, ..ServerArgs::new(listen) };
    let _server = lab.start_server_with(common::exe(), &server_args).unwrap();
    let d = Deltas::since(&lab);
    let (dc, ds) = d.both();
    assert_eq!((dc.nonzero().count(), ds.nonzero().count()), (0, 0), "nothing ran yet: {dc:?} {ds:?}");
    let two = ClientArgs { count: 2, payload_bytes: 100, ..ClientArgs::new(listen) };
    assert_eq!(lab.run_client(common::exe(), &two).unwrap().ok_count(), 2);
    let ds = d.wait_for(Side::Server, "TcpExtTCPFastOpenPassive", 1);
    let dc = d.client();
    eprintln!("client {dc:?}\nserver {ds:?}");
    assert_eq!((dc.get("TcpActiveOpens"), ds.get("TcpPassiveOpens")), (2, 2), "{dc:?} {ds:?}");
    let tfo = (
        ds.get("TcpExtTCPFastOpenCookieReqd"),
        dc.get("TcpExtTCPFastOpenActive"),
        ds.get("TcpExtTCPFastOpenPassive"),
    );
    assert_eq!(tfo, (1, 1, 1), "{dc:?} {ds:?}");
    assert!(failure(|| {
        dc.get("TcpExtNoSuchCounter");
    })
    .is_some());
}

module_tests!(nstat_fails_on_a_counter_it_does_not_list, nstat_counts_a_lab_s_connections);
