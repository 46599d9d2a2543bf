//! What the kernel's per-namespace facts say, in words: one function per finding of a
//! namespace's counters (or a hook's pauses), and the sentence of a destination the
//! kernel's TFO cache remembers; the figures are `aggregation::report::verdict::namespace`'s.
use std::net::SocketAddr;

use super::{
    said::Said,
    server_sentences::{overflow_sentence, rotated_without_backup_sentence, PASSIVE_FAIL_CAUSES},
};
use crate::{
    aggregation::{
        blackhole::PauseSummary,
        report::verdict::{CachedDrops, Counted, NamespaceFinding},
    },
    events::{Role, Trip},
    live::paused::pause_sentence,
    units,
};

/// The sentence and evidence of a namespace's finding.
pub(crate) fn said(n: &NamespaceFinding) -> Said {
    let f = &n.verdict.figures;
    let (ns, backend) = (f.ns.as_str(), f.backend.as_str());
    let (sentence, evidence) = match &f.counted {
        Counted::ListenOverflow { overflow, listeners, somaxconn } => {
            listen_overflow(ns, backend, *overflow, listeners, *somaxconn)
        }
        &Counted::PassiveFail { fail, accepted, no_backup } => {
            passive_fail(ns, backend, fail, accepted, no_backup)
        }
        &Counted::Syncookies { sent, passive, passive_fail, recv, sysctl, ref listeners } => {
            syncookies(ns, sent, (passive, passive_fail, recv), sysctl, listeners)
        }
        Counted::Pause { pause, counter } => paused(pause, ns, *counter, backend),
        &Counted::CookieRequests { asked } => cookie_requests(ns, backend, asked),
        &Counted::AltKey { alt } => alt_key(ns, alt),
    };
    Said { sentence, evidence }
}

/// `0.0.0.0:81 max_qlen 16, [::]:81 max_qlen 16`.
fn listeners_line(listeners: &[(SocketAddr, u32)]) -> String {
    listeners.iter().map(|(a, q)| format!("{a} max_qlen {q}")).collect::<Vec<_>>().join(", ")
}

fn listen_overflow(
    ns: &str,
    backend: &str,
    overflow: u64,
    listeners: &[(SocketAddr, u32)],
    somaxconn: Option<u32>,
) -> (String, Vec<String>) {
    let sentence = match listeners {
        [(addr, q)] => overflow_sentence(&addr.to_string(), overflow, Some(*q), somaxconn),
        _ => format!(
            "{ns}: {} on its listeners; raise fastopen= but keep it below somaxconn",
            units::plural(overflow, "TFO queue overflow", "TFO queue overflows")
        ),
    };
    let mut evidence = vec![format!(
        "TcpExtTCPFastOpenListenOverflow +{overflow} in {ns}; the {backend} backend cannot see which listener"
    )];
    if !listeners.is_empty() {
        evidence.push(format!("TFO listeners there: {}", listeners_line(listeners)));
    }
    (sentence, evidence)
}

/// SYN-data its listeners refused (TcpExtTCPFastOpenPassiveFail) where no hook names the
/// listener: a key changed without a backup where SYN-data was accepted beside them.
fn passive_fail(ns: &str, backend: &str, fail: u64, accepted: u64, no_backup: bool) -> (String, Vec<String>) {
    let mut evidence = vec![format!(
        "TcpExtTCPFastOpenPassiveFail +{fail} in {ns}; the {backend} backend cannot see which listener"
    )];
    let sentence = if accepted >= fail && no_backup {
        evidence.push(format!(
            "{} accepted at its listeners in the same window (the counter gives no order: a rotation \
             refuses first, then accepts)",
            units::plural(accepted, "SYN-data", "SYN-data")
        ));
        rotated_without_backup_sentence(ns, fail, accepted)
    } else {
        let key = if no_backup { "; no backup key is set" } else { "" };
        format!(
            "{ns}: {fail} SYN-data refused by its listeners: {PASSIVE_FAIL_CAUSES}{key}; when rotating the \
             key, keep the old one as backup (`tcp_fastopen_key=NEW,OLD`)"
        )
    };
    (sentence, evidence)
}

/// Listeners that answered SYNs with syncookies (TcpExtSyncookiesSent): the kernel skips
/// TFO for such a SYN, so no TFO counter moves, the SYN-ACK carries no TFO option and the
/// client's SYN-data is not acked. `(passive, passive_fail, recv)`: the namespace's
/// TcpExtTCPFastOpenPassive, PassiveFail and TcpExtSyncookiesRecv.
fn syncookies(
    ns: &str,
    sent: u64,
    (took, passive_fail, recv): (u64, u64, u64),
    sysctl: Option<u32>,
    listeners: &[(SocketAddr, u32)],
) -> (String, Vec<String>) {
    let why = match sysctl {
        Some(2) => "tcp_syncookies=2 there: set it to 1 (syncookies only when a SYN queue overflows)",
        // tcp_conn_request(): with tcp_syncookies=1 a syncookie answers a SYN when the
        // listener's SYN queue is fuller than its backlog (inet_csk_reqsk_queue_is_full():
        // sk_max_ack_backlog, listen()'s backlog capped by somaxconn); tcp_max_syn_backlog
        // plays no part then (it drops unproven peers only with syncookies off).
        Some(1) => {
            "a SYN flood, or more handshakes in flight than a listener's backlog (tcp_syncookies=1 there \
             sends them only when a listener's SYN queue holds more than its listen() backlog, capped by \
             net.core.somaxconn): find the flood, or raise that listener's backlog (and somaxconn if it \
             caps it); net.ipv4.tcp_max_syn_backlog does not decide syncookies"
        }
        _ => "tcp_syncookies=2 there, or a SYN flood",
    };
    let took_text =
        if took == 0 { "took no SYN-data".to_string() } else { format!("took SYN-data only {took} times") };
    let sentence = format!(
        "listeners in {ns} answered {} with syncookies and {took_text}: {why}",
        units::plural(sent, "SYN", "SYNs")
    );
    let mut evidence = vec![
        format!(
            "TcpExtSyncookiesSent +{sent} in {ns}; TcpExtTCPFastOpenPassive +{took}, PassiveFail +{passive_fail}: \
             a SYN answered with a syncookie skips TFO, its SYN-ACK carries no TFO option and the client's data \
             is not acked (the client counts ActiveFail)"
        ),
        "no hook of any backend sees such a SYN: the namespace is named, not the listener".to_string(),
    ];
    if recv > 0 {
        evidence.push(format!("TcpExtSyncookiesRecv +{recv}: handshakes completed on a syncookie"));
    }
    if !listeners.is_empty() {
        evidence.push(format!("TFO listeners there: {}", listeners_line(listeners)));
    }
    (sentence, evidence)
}

/// Blackhole detection's pauses in a client namespace: which connection and destination
/// tripped them, until when, and the connections left without TFO.
fn paused(p: &PauseSummary, ns: &str, counter: u64, backend: &str) -> (String, Vec<String>) {
    let mut evidence = Vec::new();
    if p.from_events {
        evidence.push(format!(
            "{} from the {backend} backend's hook",
            units::plural(p.pauses, "active_disabled event", "active_disabled events")
        ));
    } else if p.each.iter().any(|e| e.nth.is_some() && e.began.is_some()) {
        evidence.push(format!(
            "TcpExtTCPFastOpenBlackhole +{counter} in {ns}; no {backend} hook sees the pause: its start is the \
             kernel's stamp (tfo_active_disable_stamp, read by the not_attempted events), its connection the \
             one of these events that timed out across that start"
        ));
    } else {
        evidence.push(format!(
            "TcpExtTCPFastOpenBlackhole +{counter} in {ns}; no {backend} hook sees the pause: its connection is \
             the one whose SYNs timed out just before TFO stopped being attempted"
        ));
    }
    for t in p.each.iter().filter_map(|e| e.tripped_by.as_ref()) {
        let by = match (t.role, t.trip) {
            (_, Some(Trip::OutOfOrderEnd)) => format!(
                "a TFO connection to {} whose server's FIN or RST came before any data",
                t.destination
            ),
            (Role::Server, _) => {
                format!("a TFO child serving {} whose data timed out three times in a row", t.destination)
            }
            _ => format!("connecting to {}", t.destination),
        };
        evidence.push(format!(
            "tripped at {} by pid {} ({}) {by}: {} after {}",
            t.at.millis(),
            t.pid,
            t.comm,
            t.outcome.name(),
            units::plural(u64::from(t.retransmits), "retransmission", "retransmissions")
        ));
    }
    if let Some(last) = p.last() {
        match (last.length_s, p.timeout_s, last.nth) {
            (Some(len), Some(t), Some(nth)) => evidence.push(format!(
                "pause length {}: tcp_fastopen_blackhole_timeout_sec={t} << {} for the namespace's pause \
                 number {nth} by the kernel's count (tfo_active_disable_times; the kernel doubles up to 64x), \
                 from its stamp",
                units::duration_s(len as f64),
                (u32::from(nth).max(1) - 1).min(6),
            )),
            (Some(len), Some(t), None) => evidence.push(format!(
                "pause length {}: tcp_fastopen_blackhole_timeout_sec={t}, doubled for each pause before it \
                 ({} seen; no event read the kernel's count)",
                units::duration_s(len as f64),
                p.pauses
            )),
            _ => {}
        }
    }
    if p.without_tfo > 0 {
        let each: Vec<String> = p
            .without_tfo_by_destination
            .iter()
            .take(5)
            .map(|d| format!("{} {}", d.destination, d.connections))
            .collect();
        evidence.push(format!(
            "not_attempted (SYN without the TFO option although TFO was asked for): {}",
            each.join(", ")
        ));
    }
    (pause_sentence(p, ns), evidence)
}

fn cookie_requests(ns: &str, backend: &str, asked: u64) -> (String, Vec<String>) {
    let sentence =
        format!("{ns}: {} reached its listeners", units::plural(asked, "cookie request", "cookie requests"));
    let evidence = format!(
        "TcpExtTCPFastOpenCookieReqd +{asked} in {ns}; the {backend} backend cannot see which listener"
    );
    (sentence, vec![evidence])
}

fn alt_key(ns: &str, alt: u64) -> (String, Vec<String>) {
    let were = if alt == 1 { "was" } else { "were" };
    let sentence = format!(
        "{ns}: the TFO key was rotated with the old one kept as backup: {alt} SYN-data carried a cookie of \
         the backup key and {were} accepted; a rotation done right, not a fault"
    );
    (sentence, vec![format!("TcpExtTCPFastOpenPassiveAltKey +{alt} in {ns}")])
}

/// What the kernel's TFO cache holds of a destination no connection went to in the window.
pub(crate) fn cached_sentence(c: &CachedDrops) -> String {
    let since =
        c.last_drop_s_ago.map(|s| format!(", the last {} ago", units::duration_s(s))).unwrap_or_default();
    format!(
        "the kernel's TFO cache (ip tcp_metrics in {}) holds {} to {} lost on the path{since}; no \
         connection went there in this window: expect a ~1s stall on the next TFO connect there, until \
         one SYN-data gets through",
        c.ns,
        units::plural(u64::from(c.fo_syn_drops), "SYN-data", "SYN-data"),
        c.destination,
    )
}
#[cfg(test)]
mod tests {
    use super::{cached_sentence, said};
    use crate::aggregation::report::verdict::{fixtures::*, Kind};
    use crate::{aggregation::report::ListenerFact, kernel::netstat::Netstat};
    use crate::{
        aggregation::report::{of_events as report, Facts},
        events::Event,
    };

    /// The client namespace's `ip tcp_metrics` as `text` says.
    fn cached(text: &str) -> Facts {
        let mut facts = Facts::default();
        facts.tcp_metrics.insert(NS_CLI, crate::kernel::tcp_metrics::parse(text).unwrap());
        facts
    }

    #[test]
    fn remembered_drops_without_events() {
        let facts = cached("10.1.2.3 age 9.000sec fo_syn_drops 3/0.060usec ago source 10.1.2.1\n");
        let r = report(&[], &facts);
        assert!(r.destinations.is_empty(), "no connection in the window: no row of them");
        assert_eq!(r.kernel_cache.len(), 1);
        let c = &r.kernel_cache[0];
        assert_eq!(
            (c.destination.as_str(), c.fo_syn_drops, c.last_drop_s_ago),
            ("10.1.2.3:*", 3, Some(60.0))
        );
        assert!(
            cached_sentence(c).contains("holds 3 SYN-data to 10.1.2.3:* lost on the path, the last 60s ago"),
            "{c:?}"
        );
    }

    #[test]
    fn remembered_drops_of_a_destination_with_connections_are_its_row_s() {
        let facts = cached(
            "10.1.2.3 age 9.000sec fo_syn_drops 3/0.060usec ago source 10.1.2.1\n\
             10.1.2.4 age 9.000sec fo_syn_drops 1/0.060usec ago source 10.1.2.1\n",
        );
        let r = report(&[cli("accepted", "10.1.2.3:443", 64, 0, 1)], &facts);
        let listed: Vec<&str> = r.kernel_cache.iter().map(|c| c.destination.as_str()).collect();
        assert_eq!(listed, ["10.1.2.4:*"], "10.1.2.3 has a connection in the window: {listed:?}");
    }

    /// Blackhole detection on a backend without the hook: the counter moved once, the
    /// connection to .3 that gave up just before the plain SYNs tripped it.
    #[test]
    fn a_pause_names_what_tripped_it_and_what_it_cost() {
        let mut facts = Facts { backend: Some("tracepoint".into()), ..Default::default() };
        facts.netns_names.insert(NS_CLI, "cli".into());
        facts.counters.insert(NS_CLI, Netstat::parse("TcpExt: TCPFastOpenBlackhole\nTcpExt: 1\n").unwrap());
        facts.blackhole_timeout_s.insert(NS_CLI, 60);
        let mut events = vec![
            cli("accepted", "198.18.0.2:443", 64, 0, 0),
            cli("connect_failed", "198.18.0.3:443", 0, 3_000_000, 4_000),
        ];
        events.extend((5..9).map(|t| cli("not_attempted", "198.18.0.2:443", 0, 0, t * 1000)));
        let r = report(&events, &facts);
        let p = r.namespaces.iter().find(|n| n.verdict.kind == Kind::ActiveTfoPaused).unwrap();
        assert_eq!(
            said(p).sentence,
            "TFO paused in netns cli until 1970-01-01 00:01:04.000 UTC because SYNs to 198.18.0.3:443 were lost; \
             4 connections to 1 other destination went without TFO: fix the path to it, or set \
             net.ipv4.tcp_fastopen_blackhole_timeout_sec=0 (the default since Linux 5.14, and in the stable \
             kernels that took the change) so that one lost destination does not pause TFO for every other"
        );
        let pause = p.pause.as_ref().unwrap();
        assert_eq!((pause.pauses, pause.without_tfo), (1, 4));
        assert!(said(p).evidence.iter().any(|e| e.contains("by pid 7 (curl) connecting to 198.18.0.3:443")));
        let json = serde_json::to_value(super::super::SaidFinding::of(p)).unwrap();
        assert_eq!(json["pause"]["each"][0]["tripped_by"]["destination"], "198.18.0.3:443");
        assert_eq!(json["pause"]["without_tfo_by_destination"][0]["connections"], 4);
    }

    /// Syncookies in the server's namespace: a finding of their own, whatever the backend;
    /// the sysctl says why.
    #[test]
    fn listeners_answering_with_syncookies_took_no_syn_data() {
        let mut facts = Facts { backend: Some("fentry".into()), ..Default::default() };
        facts.netns_names.insert(NS_SRV, "srv".into());
        facts.counters.insert(
            NS_SRV,
            Netstat::parse("TcpExt: SyncookiesSent SyncookiesRecv TCPFastOpenPassive\nTcpExt: 3 3 0\n")
                .unwrap(),
        );
        facts.syncookies.insert(NS_SRV, 2);
        let r = report(&[], &facts);
        let f = &r.namespaces[0];
        assert_eq!(f.verdict.kind, Kind::Syncookies);
        assert_eq!(
            said(f).sentence,
            "listeners in netns srv answered 3 SYNs with syncookies and took no SYN-data: tcp_syncookies=2 \
             there: set it to 1 (syncookies only when a SYN queue overflows)"
        );
        facts.syncookies.insert(NS_SRV, 1);
        assert!(said(&report(&[], &facts).namespaces[0]).sentence.contains(": a SYN flood"));
    }

    /// PassiveFail where no hook sees it, with SYN-data accepted beside it and no backup
    /// key: a rotation, said as one; refusals that outnumber acceptance are not.
    #[test]
    fn refused_cookies_beside_accepted_ones_are_a_rotation() {
        let mut facts = Facts { backend: Some("tracepoint".into()), ..Default::default() };
        facts.counters.insert(NS_SRV, Netstat::parse("TcpExt: TCPFastOpenPassiveFail\nTcpExt: 1\n").unwrap());
        facts.backup_key.insert(NS_SRV, false);
        let r = report(&[srv("accepted", 5)], &facts);
        let f = &r.namespaces[0];
        assert_eq!(f.verdict.kind, Kind::KeyRotatedWithoutBackup, "{f:?}");
        assert!(said(f).sentence.contains("the TFO key was likely rotated without a backup key"), "{f:?}");
        assert!(said(f).sentence.contains("a one-off, not a fault"), "{f:?}");
        let f = &report(&[], &facts).namespaces[0];
        assert_eq!(f.verdict.kind, Kind::CookieInvalid);
        // Issue 51, item 12: PassiveFail is not only a rotation.
        let s = said(f).sentence;
        assert!(
            s.contains("another server's cookie") && s.contains("NAT") && s.contains("could not be made"),
            "{s}"
        );
    }

    #[test]
    fn counters_stand_in_for_what_the_backend_cannot_see() {
        let mut facts = Facts { backend: Some("tracepoint".into()), ..Default::default() };
        facts.netns_names.insert(NS_SRV, "srv".into());
        facts.counters.insert(
            NS_SRV,
            Netstat::parse(
                "TcpExt: TCPFastOpenListenOverflow TCPFastOpenPassiveFail TCPFastOpenPassiveAltKey\nTcpExt: 5 0 2\n",
            )
            .unwrap(),
        );
        facts.listeners.push(ListenerFact {
            netns: NS_SRV,
            addr: "0.0.0.0:81".parse().unwrap(),
            max_qlen: Some(4),
        });
        let r = report(&[srv("accepted", 0)], &facts);
        assert_eq!(r.namespaces.len(), 2, "{:?}", r.namespaces);

        assert_eq!(
            said(&r.namespaces[0]).sentence,
            "listener 0.0.0.0:81: 5 TFO queue overflows (max_qlen 4); raise fastopen= but keep it below somaxconn"
        );
        assert!(
            said(&r.namespaces[0]).evidence[0].contains("in netns srv; the tracepoint backend cannot see")
        );
        assert_eq!(r.namespaces[1].verdict.kind, Kind::KeyRotated);
        // When the events already show them, the counters add no second finding.
        let events: Vec<Event> = (0..5)
            .map(|i| srv("queue_overflow", i))
            .chain((0..2).map(|i| srv("accepted_alt_key", i)))
            .collect();
        assert!(report(&events, &facts).namespaces.is_empty());
        // Blackhole pauses and cookie requests too, where the backend has no hook for them.
        let mut blind = facts.clone();
        blind.counters.insert(
            NS_CLI,
            Netstat::parse("TcpExt: TCPFastOpenBlackhole TCPFastOpenCookieReqd\nTcpExt: 1 0\n").unwrap(),
        );
        blind.counters.get_mut(&NS_SRV).unwrap().0.insert("TcpExtTCPFastOpenCookieReqd".into(), 3);
        let b = report(&[srv("accepted", 0)], &blind);
        let said: Vec<(u32, Kind)> = b.namespaces.iter().map(|n| (n.netns, n.verdict.kind)).collect();
        assert!(said.contains(&(NS_CLI, Kind::ActiveTfoPaused)), "{said:?}");
        assert!(said.contains(&(NS_SRV, Kind::Info)), "{said:?}");
        let paused = b.namespaces.iter().find(|n| n.verdict.kind == Kind::ActiveTfoPaused).unwrap();
        assert!(super::said(paused).sentence.starts_with("TFO paused in netns 4026532177 for"), "{paused:?}");
        blind.backend = Some("fentry".into());
        let b = report(&[srv("accepted", 0)], &blind);
        assert!(b.namespaces.iter().all(|n| !matches!(n.verdict.kind, Kind::ActiveTfoPaused | Kind::Info)));
    }
}
