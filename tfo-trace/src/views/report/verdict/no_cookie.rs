//! A destination that never gives a cookie (`no_cookie_given`), in words: the likely causes,
//! told apart where the server's own namespace could be read on this host, else all of them
//! named with where the server's team looks. Each cause is a path of the kernel on which the
//! server answers a cookie request without a cookie (6.12):
//! - TFO off on the server: tcp_try_fastopen() returns before making a cookie unless
//!   tcp_fastopen has bit 0x2 (tcp_fastopen.c:365-369);
//! - a listener without TCP_FASTOPEN, or its TFO queue full: tcp_fastopen_queue_check()
//!   fails on max_qlen 0 or counts TcpExtTCPFastOpenListenOverflow (tcp_fastopen.c:300-336);
//! - syncookies: tcp_conn_request() parses no TFO option and calls no tcp_try_fastopen() for
//!   a SYN it answers with a syncookie (tcp_input.c, want_cookie);
//! - a server that needs no cookie (bit 0x200): it makes the child at once and answers with
//!   none (tcp_fastopen.c:372, 401-403); the client then needs no-cookie mode to send data;
//! - otherwise the server did send one: the option was stripped on the way back.
//!
//! TcpExtTCPFastOpenCookieReqd counts every request that reaches a listener, before any of
//! these checks (tcp_fastopen.c:362-363): it tells that the requests arrived, not that a
//! cookie left.
use crate::{
    aggregation::report::{connections::ConnAcc, facts::ServerSide, verdict::ClientFigures},
    events::Outcome,
    units,
};

/// net.ipv4.tcp_fastopen bits (include/net/tcp.h): the server side on, no cookie needed.
const TFO_SERVER_ENABLE: u32 = 0x2;
const TFO_SERVER_COOKIE_NOT_REQD: u32 = 0x200;

/// The sentence of a `no_cookie_given` row, its evidence pushed onto `evidence`.
pub(super) fn sentence(
    subj: &str,
    spread: &str,
    a: &ConnAcc,
    f: &ClientFigures,
    evidence: &mut Vec<String>,
) -> String {
    let asked = a.count(Outcome::CookieRequested);
    let mut asked_line = format!(
        "{} (SYNs with an empty TFO option) and no SYN-data: the client's kernel asks while it holds no \
         cookie for the destination, so no answer brought one",
        units::plural(asked, "cookie request", "cookie requests"),
    );
    if a.asks.exp > 0 {
        asked_line.push_str(&format!(
            "; {} on the experimental option (0xF989): the kernel's own retry after a request answered \
             without a cookie (tcp_rcv_fastopen_synack, try_exp)",
            units::count(a.asks.exp)
        ));
    }
    evidence.push(asked_line);
    let (why, advice) = match &f.server {
        Some(srv) => told(srv, evidence),
        None => untold(evidence),
    };
    format!(
        "{subj} gave no TFO cookie to {} of {} connections{spread}: {why}; TFO gains nothing toward it \
         until it does: {advice}",
        units::count(asked),
        units::count(a.connections()),
    )
}

/// The causes the server's namespace shows, and the advice for them.
fn told(srv: &ServerSide, evidence: &mut Vec<String>) -> (String, String) {
    let ns = &srv.ns;
    evidence.push(format!(
        "the server's namespace {ns} (listener {}): TcpExtTCPFastOpenCookieReqd +{} (every request that \
         reached a listener, answered or not), tcp_fastopen={}, listener TCP_FASTOPEN max_qlen {}, \
         tcp_syncookies={}, TcpExtSyncookiesSent +{}, TcpExtTCPFastOpenListenOverflow +{}",
        srv.listener,
        srv.cookie_requests,
        srv.tcp_fastopen.map_or("unknown".into(), |v| format!("{v:#x}")),
        srv.max_qlen.map_or("unknown".into(), |q| q.to_string()),
        srv.syncookies.map_or("unknown".into(), |v| v.to_string()),
        srv.syncookies_sent,
        srv.tfo_queue_overflows,
    ));
    let mut why = Vec::new();
    let mut advice = Vec::new();
    if let Some(v) = srv.tcp_fastopen.filter(|v| v & TFO_SERVER_ENABLE == 0) {
        why.push(format!("TFO is off on the server (net.ipv4.tcp_fastopen={v:#x} in {ns}, no bit 0x2)"));
        advice.push(format!("its team sets bit 0x2 of net.ipv4.tcp_fastopen in {ns} if TFO is wanted there"));
    }
    if srv.max_qlen == Some(0) {
        why.push(format!("its listener {} has no TCP_FASTOPEN (max_qlen 0)", srv.listener));
        advice.push("its team sets TCP_FASTOPEN on the listener (nginx: `listen ... fastopen=N`)".into());
    }
    if srv.syncookies == Some(2) || srv.sent_syncookies() {
        why.push(format!(
            "its listeners answer with syncookies, which skip TFO (tcp_syncookies={} in {ns}, \
             TcpExtSyncookiesSent +{})",
            srv.syncookies.map_or("unknown".into(), |v| v.to_string()),
            srv.syncookies_sent
        ));
        advice.push(if srv.syncookies == Some(2) {
            "tcp_syncookies=1 there (syncookies only when a SYN queue overflows)".into()
        } else {
            "find the SYN flood, or raise the listener's backlog".into()
        });
    }
    if srv.tfo_queue_overflows > 0 {
        why.push(format!(
            "its TFO queue is full (TcpExtTCPFastOpenListenOverflow +{})",
            srv.tfo_queue_overflows
        ));
        advice.push("raise the listener's fastopen= queue, below somaxconn".into());
    }
    if let Some(v) = srv.tcp_fastopen.filter(|v| v & TFO_SERVER_COOKIE_NOT_REQD != 0) {
        why.push(format!(
            "the server takes TFO without cookies (net.ipv4.tcp_fastopen={v:#x}, bit 0x200) and so gives none"
        ));
        advice.push(
            "the client sends its data without a cookie (no-cookie mode: net.ipv4.tcp_fastopen bit 0x4, or the \
             route's fastopen_no_cookie)"
                .into(),
        );
    }
    if why.is_empty() {
        // TFO on, a TFO listener, no syncookie, no overflow: the server made a cookie.
        why.push(format!(
            "the server does TFO (listener {} with TCP_FASTOPEN, bit 0x2 set, no syncookies, no TFO queue \
             overflow), so its SYN-ACKs carried a cookie: the option is stripped on the way back",
            srv.listener
        ));
        advice.push("the path's owner stops stripping the TFO option (kind 34) from SYN-ACKs".into());
    }
    (format!("likely {}", why.join("; and ")), advice.join("; "))
}

/// The causes where the server's side could not be read: all of them, and where to look.
fn untold(evidence: &mut Vec<String>) -> (String, String) {
    evidence.push(
        "every SYN-ACK came without a TFO option, which the client cannot tell apart: on the server, look at \
         net.ipv4.tcp_fastopen (bit 0x2; 0x200 gives no cookie), the listener's TCP_FASTOPEN, \
         TcpExtTCPFastOpenListenOverflow, TcpExtSyncookiesSent; else a middlebox strips the option"
            .into(),
    );
    (
        "likely TFO off on the server (net.ipv4.tcp_fastopen bit 0x2), a listener without TCP_FASTOPEN, \
         its TFO queue full, syncookies, a server that needs no cookie (bit 0x200), or the option stripped \
         on the way back"
            .into(),
        "the server's team checks those (the evidence says where), or the client's team turns TFO off \
         toward it"
            .into(),
    )
}

#[cfg(test)]
mod tests {
    use crate::{
        aggregation::report::{
            of_events as report,
            verdict::{fixtures::*, Kind},
            Facts, ListenerFact,
        },
        events::Event,
        kernel::netstat::Netstat,
        views::report::verdict::said_client as said,
    };

    const DST: &str = "198.18.0.2:8080";

    /// `n` cookie requests, one every 10 ms, each answered 1 ms after its SYN.
    fn asks(n: u64) -> Vec<Event> {
        (0..n)
            .map(|i| Event { handshake_us: Some(1_000), ..cli("cookie_requested", DST, 0, 0, 10 * i + 1) })
            .collect()
    }

    fn server(fastopen: u32, max_qlen: u32, syncookies: u32, counters: &[(&str, u64)]) -> Facts {
        let mut facts = Facts::default();
        facts.listeners.push(ListenerFact {
            netns: NS_SRV,
            addr: "0.0.0.0:8080".parse().unwrap(),
            max_qlen: Some(max_qlen),
        });
        facts.tcp_fastopen.insert(NS_SRV, fastopen);
        facts.syncookies.insert(NS_SRV, syncookies);
        let names: Vec<&str> = counters.iter().map(|(k, _)| k.trim_start_matches("TcpExt")).collect();
        let values: Vec<String> = counters.iter().map(|(_, v)| v.to_string()).collect();
        let text = format!("TcpExt: {}\nTcpExt: {}\n", names.join(" "), values.join(" "));
        facts.counters.insert(NS_SRV, Netstat::parse(&text).unwrap());
        facts
    }

    #[test]
    fn requests_that_get_no_cookie_are_a_finding_after_a_few() {
        let d = report(&asks(2), &Facts::default()).destinations[0].clone();
        assert_eq!(d.verdict.kind, Kind::Info, "two may be first contact");
        // Three at once (a pool's first burst): first contact still.
        let burst: Vec<Event> = (0..3)
            .map(|i| Event { handshake_us: Some(1_000), ..cli("cookie_requested", DST, 0, 0, 1 + i / 10) })
            .collect();
        assert_eq!(report(&burst, &Facts::default()).destinations[0].verdict.kind, Kind::Info);
        let d = report(&asks(5), &Facts::default()).destinations[0].clone();
        assert_eq!(d.verdict.kind, Kind::NoCookieGiven);
        assert_eq!((d.verdict.support.connections, d.verdict.support.of_connections), (5, 5));
        let s = said(&d).sentence;
        assert!(
            s.starts_with("198.18.0.2:8080 gave no TFO cookie to 5 of 5 connections: likely TFO off"),
            "{s}"
        );
        assert!(said(&d).evidence.join("\n").contains("which the client cannot tell apart"), "{d:?}");
        // One SYN-data accepted: the cookie came.
        let mut events = asks(5);
        events.push(cli("accepted", DST, 64, 0, 100));
        assert_eq!(report(&events, &Facts::default()).destinations[0].verdict.kind, Kind::Healthy);
    }

    #[test]
    fn the_server_namespace_tells_the_cause() {
        let req = [("TcpExtTCPFastOpenCookieReqd", 5)];
        let cases: [(Facts, &str); 5] = [
            (server(0x1, 16, 1, &req), "TFO is off on the server (net.ipv4.tcp_fastopen=0x1 in netns"),
            (server(0x3, 0, 1, &req), "its listener 0.0.0.0:8080 has no TCP_FASTOPEN (max_qlen 0)"),
            (
                server(0x3, 16, 2, &[("TcpExtTCPFastOpenCookieReqd", 0), ("TcpExtSyncookiesSent", 5)]),
                "its listeners answer with syncookies, which skip TFO (tcp_syncookies=2",
            ),
            (
                server(0x203, 16, 1, &req),
                "takes TFO without cookies (net.ipv4.tcp_fastopen=0x203, bit 0x200)",
            ),
            (
                server(0x3, 16, 1, &req),
                "so its SYN-ACKs carried a cookie: the option is stripped on the way back",
            ),
        ];
        for (facts, want) in cases {
            let d = report(&asks(4), &facts).destinations[0].clone();
            assert_eq!(d.verdict.kind, Kind::NoCookieGiven);
            let s = said(&d).sentence;
            assert!(s.contains(want), "want {want:?} in {s}");
        }
    }
}
