//! What the kernel's per-namespace facts say apart from the events: counter deltas that no
//! event of the running backend explains ([`namespace_findings`]), and destinations the TFO
//! cache remembers losing SYN-data to with no connection in the window ([`cached_drops`]).
use std::{collections::BTreeSet, net::IpAddr};

use serde::Serialize;

use super::{
    server_sentences::{overflow_sentence, rotated_without_backup_sentence},
    Kind, ListenerReport, NamespaceFinding, Strength, Support, Verdict,
};
use crate::{
    aggregation::{
        blackhole::{PauseSummary, Pauses},
        kernel_counted,
        report::facts::{Facts, ListenerFact},
    },
    backends::{self, Backend},
    events::{Outcome, Role},
    kernel::{netstat::Netstat, tcp_metrics::TcpMetric},
    units,
};

/// A destination the kernel's TFO cache (`ip tcp_metrics`) remembers losing SYN-data to,
/// with no connection to it in the window: what the cache says, kept apart from the
/// window's connections (its drops are the kernel's memory, not connections seen).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CachedDrops {
    /// `[fd53::3]:*`, `10.1.2.3:*`: the cache is kept per address, for every port.
    pub destination: String,
    pub netns: u32,
    /// SYN-data lost towards it, as the cache counts them (reset when one is acked again).
    pub fo_syn_drops: u32,
    /// Seconds since the last loss, and since the entry was last updated, where shown.
    pub last_drop_s_ago: Option<f64>,
    pub entry_age_s: Option<f64>,
    pub sentence: String,
}

pub fn cached_drops(m: &TcpMetric, netns: u32, facts: &Facts) -> CachedDrops {
    let destination = match m.dst {
        IpAddr::V4(a) => format!("{a}:*"),
        IpAddr::V6(a) => format!("[{a}]:*"),
    };
    let since =
        m.fo_syn_drop_age_s.map(|s| format!(", the last {} ago", units::duration_s(s))).unwrap_or_default();
    CachedDrops {
        sentence: format!(
            "the kernel's TFO cache (ip tcp_metrics in {}) holds {} to {destination} lost on the \
             path{since}; no connection went there in this window: expect a ~1s stall on the next \
             TFO connect there, until one SYN-data gets through",
            facts.ns(netns),
            units::plural(u64::from(m.fo_syn_drops), "SYN-data", "SYN-data"),
        ),
        destination,
        netns,
        fo_syn_drops: m.fo_syn_drops,
        last_drop_s_ago: m.fo_syn_drop_age_s,
        entry_age_s: m.age_s,
    }
}

/// The backend whose events the report holds, where it is known (a live report's).
fn backend_of(facts: &Facts) -> Option<Backend> {
    let name = facts.backend.as_deref()?;
    Backend::ALL.into_iter().find(|b| b.name() == name)
}

/// A finding of one namespace counter's delta `n`, with its one line of evidence.
fn finding(netns: u32, kind: Kind, sentence: String, evidence: String, n: u64) -> NamespaceFinding {
    NamespaceFinding {
        netns,
        source: kernel_counted::SOURCE,
        verdict: counted(kind, sentence, vec![evidence], n),
        pause: None,
    }
}

/// A verdict on a namespace counter's delta `n`: what it counted is all it rests on.
fn counted(kind: Kind, sentence: String, evidence: Vec<String>, n: u64) -> Verdict {
    let support = Support { connections: n, of_connections: n, hosts: 1, of_hosts: 1, ..Default::default() };
    Verdict { kind, sentence, evidence, strength: Strength::of(n, n), support }
}

/// Counter deltas the events do not explain, because the backend cannot see them, and
/// what blackhole detection's pauses did to each client namespace ([`Pauses`]).
pub fn namespace_findings(
    listeners: &[ListenerReport],
    facts: &Facts,
    pauses: &Pauses,
) -> Vec<NamespaceFinding> {
    let backend = facts.backend.as_deref().unwrap_or("running");
    // Outcomes only a namespace counter sees on this backend, said from the counter.
    let blind = |role, outcome| backend_of(facts).is_some_and(|b| !backends::sees(b, role, outcome));
    let mut out = Vec::new();
    let none = Netstat::default();
    let mut namespaces: BTreeSet<u32> = facts.counters.keys().copied().collect();
    namespaces.extend(pauses.namespaces());
    for netns in namespaces {
        let n = facts.counters.get(&netns).unwrap_or(&none);
        let ns = facts.ns(netns);
        let seen = |o: Outcome| -> u64 {
            listeners
                .iter()
                .filter(|l| l.netns == Some(netns))
                .map(|l| l.outcomes.get(o.name()).copied().unwrap_or(0))
                .sum()
        };
        let tfo_listeners: Vec<&ListenerFact> =
            facts.listeners.iter().filter(|l| l.netns == netns && l.max_qlen.unwrap_or(0) > 0).collect();
        let list = tfo_listeners
            .iter()
            .map(|l| format!("{} max_qlen {}", l.addr, l.max_qlen.unwrap_or(0)))
            .collect::<Vec<_>>()
            .join(", ");
        let overflow = n.get("TcpExtTCPFastOpenListenOverflow");
        if overflow > seen(Outcome::QueueOverflow) {
            let sentence = match tfo_listeners.as_slice() {
                [one] => overflow_sentence(
                    &one.addr.to_string(),
                    overflow,
                    one.max_qlen,
                    facts.somaxconn.get(&netns).copied(),
                ),
                _ => format!(
                    "{ns}: {} on its listeners; raise fastopen= but keep it below somaxconn",
                    units::plural(overflow, "TFO queue overflow", "TFO queue overflows")
                ),
            };
            let mut evidence = vec![format!(
                "TcpExtTCPFastOpenListenOverflow +{overflow} in {ns}; the {backend} backend cannot see which listener"
            )];
            if !list.is_empty() {
                evidence.push(format!("TFO listeners there: {list}"));
            }
            out.push(NamespaceFinding {
                netns,
                source: kernel_counted::SOURCE,
                verdict: counted(Kind::QueueOverflow, sentence, evidence, overflow),
                pause: None,
            });
        }
        let fail = n.get("TcpExtTCPFastOpenPassiveFail");
        if fail > seen(Outcome::CookieInvalid) {
            out.push(refused_finding(netns, &ns, fail, seen(Outcome::Accepted), facts, backend));
        }
        let cookies = n.get("TcpExtSyncookiesSent");
        if cookies > 0 {
            out.push(syncookie_finding(netns, &ns, n, &list, facts));
        }
        let paused = n.get("TcpExtTCPFastOpenBlackhole");
        let counted_pauses = blind(Role::Client, Outcome::ActiveDisabled).then_some(paused);
        let timeout = facts.blackhole_timeout_s.get(&netns).copied();
        if let Some(p) = pauses.summary(netns, counted_pauses, timeout) {
            out.push(pause_finding(p, &ns, paused, backend));
        }
        let asked = n.get("TcpExtTCPFastOpenCookieReqd");
        if asked > 0 && blind(Role::Server, Outcome::CookieRequested) {
            let sentence = format!(
                "{ns}: {} reached its listeners",
                units::plural(asked, "cookie request", "cookie requests")
            );
            let evidence = format!(
                "TcpExtTCPFastOpenCookieReqd +{asked} in {ns}; the {backend} backend cannot see which listener"
            );
            out.push(finding(netns, Kind::Info, sentence, evidence, asked));
        }
        let alt = n.get("TcpExtTCPFastOpenPassiveAltKey");
        if alt > seen(Outcome::AcceptedAltKey) {
            let were = if alt == 1 { "was" } else { "were" };
            let sentence = format!(
                "{ns}: the TFO key was rotated with the old one kept as backup: {alt} SYN-data carried a \
                 cookie of the backup key and {were} accepted; a rotation done right, not a fault"
            );
            let evidence = format!("TcpExtTCPFastOpenPassiveAltKey +{alt} in {ns}");
            out.push(finding(netns, Kind::KeyRotated, sentence, evidence, alt));
        }
    }
    out
}

/// SYN-data its listeners refused (TcpExtTCPFastOpenPassiveFail) where no hook names the
/// listener. With SYN-data accepted beside them and no backup key, a key changed without
/// a backup: each client's old cookie is refused once, then its new one works.
fn refused_finding(
    netns: u32,
    ns: &str,
    fail: u64,
    accepted: u64,
    facts: &Facts,
    backend: &str,
) -> NamespaceFinding {
    let no_backup = facts.backup_key.get(&netns) == Some(&false);
    let mut evidence = vec![format!(
        "TcpExtTCPFastOpenPassiveFail +{fail} in {ns}; the {backend} backend cannot see which listener"
    )];
    let (kind, sentence) = if accepted >= fail && no_backup {
        evidence.push(format!(
            "{} accepted at its listeners in the same window (the counter gives no order: a rotation \
             refuses first, then accepts)",
            units::plural(accepted, "SYN-data", "SYN-data")
        ));
        (Kind::KeyRotatedWithoutBackup, rotated_without_backup_sentence(ns, fail, accepted))
    } else {
        let key = if no_backup { " and no backup key is set" } else { "" };
        let sentence = format!(
            "{ns}: {fail} SYN-data refused by its listeners (invalid cookie or child creation failed{key}): \
             when rotating the key, keep the old one as backup (`tcp_fastopen_key=NEW,OLD`)"
        );
        (Kind::CookieInvalid, sentence)
    };
    NamespaceFinding {
        netns,
        source: kernel_counted::SOURCE,
        verdict: counted(kind, sentence, evidence, fail),
        pause: None,
    }
}

/// Listeners that answered SYNs with syncookies (TcpExtSyncookiesSent): the kernel skips
/// TFO for such a SYN (tcp_conn_request(): no tcp_try_fastopen() when it wants a cookie),
/// so no TFO counter moves, the SYN-ACK carries no TFO option and the client's SYN-data
/// is not acked. No hook of any backend sees that SYN: the namespace is all that is known.
fn syncookie_finding(
    netns: u32,
    ns: &str,
    n: &Netstat,
    tfo_listeners: &str,
    facts: &Facts,
) -> NamespaceFinding {
    let sent = n.get("TcpExtSyncookiesSent");
    let took = n.get("TcpExtTCPFastOpenPassive");
    let why = match facts.syncookies.get(&netns) {
        Some(2) => "tcp_syncookies=2 there: set it to 1 (syncookies only when a SYN queue overflows)",
        Some(1) => {
            "a SYN flood, or a SYN queue too small for the load (tcp_syncookies=1 there sends them only \
             when one overflows): find the flood, or raise the listen backlog and net.ipv4.tcp_max_syn_backlog"
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
            "TcpExtSyncookiesSent +{sent} in {ns}; TcpExtTCPFastOpenPassive +{took}, PassiveFail +{}: a SYN \
             answered with a syncookie skips TFO, its SYN-ACK carries no TFO option and the client's data \
             is not acked (the client counts ActiveFail)",
            n.get("TcpExtTCPFastOpenPassiveFail")
        ),
        "no hook of any backend sees such a SYN: the namespace is named, not the listener".to_string(),
    ];
    if let Some(r) = Some(n.get("TcpExtSyncookiesRecv")).filter(|&r| r > 0) {
        evidence.push(format!("TcpExtSyncookiesRecv +{r}: handshakes completed on a syncookie"));
    }
    if !tfo_listeners.is_empty() {
        evidence.push(format!("TFO listeners there: {tfo_listeners}"));
    }
    NamespaceFinding {
        netns,
        source: kernel_counted::SOURCE,
        verdict: counted(Kind::Syncookies, sentence, evidence, sent),
        pause: None,
    }
}

/// Blackhole detection's pauses in a client namespace, as a finding: which connection and
/// destination tripped them, until when, and the connections left without TFO.
fn pause_finding(p: PauseSummary, ns: &str, counter: u64, backend: &str) -> NamespaceFinding {
    let mut evidence = Vec::new();
    if p.from_events {
        evidence.push(format!(
            "{} from the {backend} backend's hook",
            units::plural(p.pauses, "active_disabled event", "active_disabled events")
        ));
    } else {
        evidence.push(format!(
            "TcpExtTCPFastOpenBlackhole +{counter} in {ns}; no {backend} hook sees the pause: its connection is \
             the one whose SYNs timed out just before TFO stopped being attempted"
        ));
    }
    for t in p.each.iter().filter_map(|e| e.tripped_by.as_ref()) {
        evidence.push(format!(
            "tripped at {} by pid {} ({}) connecting to {}: {} after {}",
            t.at.millis(),
            t.pid,
            t.comm,
            t.destination,
            t.outcome.name(),
            units::plural(u64::from(t.retransmits), "SYN retransmission", "SYN retransmissions")
        ));
    }
    if let Some(last) = p.last() {
        if let (Some(len), Some(t)) = (last.length_s, p.timeout_s) {
            evidence.push(format!(
                "pause length {}: tcp_fastopen_blackhole_timeout_sec={t}, doubled for each pause before it \
                 ({} seen; the kernel doubles up to 64x and does not export its count)",
                units::duration_s(len as f64),
                p.pauses
            ));
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
    let sentence = pause_sentence(&p, ns);
    let n = p.pauses.max(1);
    NamespaceFinding {
        netns: p.netns,
        source: if p.from_events { "events" } else { kernel_counted::SOURCE },
        verdict: counted(Kind::ActiveTfoPaused, sentence, evidence, n),
        pause: Some(p),
    }
}

/// `TFO paused in netns N until T because SYNs to X were lost; 4 connections to 1 other
/// destination went without TFO`: the one wording of `report`, `stalls` and `top`.
pub fn pause_sentence(p: &PauseSummary, ns: &str) -> String {
    let times = if p.pauses > 1 { format!(" {} times", p.pauses) } else { String::new() };
    let mut s = format!("TFO paused in {ns}{times}");
    let last = p.last();
    let end = match (last.and_then(|l| l.resumed.as_ref()), last.and_then(|l| l.until.as_ref())) {
        (Some(r), _) => format!(" until {} UTC (TFO attempted again)", r.millis()),
        (None, Some(u)) => format!(" until {} UTC", u.millis()),
        (None, None) if p.timeout_s == Some(0) => {
            " (tcp_fastopen_blackhole_timeout_sec is 0 now: paused no more)".to_string()
        }
        (None, None) => " for tcp_fastopen_blackhole_timeout_sec, doubled at each pause".to_string(),
    };
    s.push_str(&end);
    let trippers = p.tripping_destinations();
    if trippers.is_empty() && p.pauses == 0 {
        s.push_str(" (since before tfo-trace started)");
    } else if trippers.is_empty() {
        s.push_str(" (no event shows the connection that tripped it)");
    } else {
        let named: Vec<&str> = trippers.iter().map(|t| t.destination.as_str()).collect();
        s.push_str(&format!(" because SYNs to {} were lost", named.join(" and ")));
    }
    let (others, destinations) = p.to_others();
    let itself = p.without_tfo - others;
    if p.without_tfo == 0 {
        s.push_str("; no connection went without TFO during it");
    } else if trippers.is_empty() {
        s.push_str(&format!(
            "; {} to {} went without TFO",
            units::plural(p.without_tfo, "connection", "connections"),
            units::plural(destinations, "destination", "destinations")
        ));
    } else {
        if others > 0 {
            s.push_str(&format!(
                "; {} to {} went without TFO",
                units::plural(others, "connection", "connections"),
                units::plural(destinations, "other destination", "other destinations")
            ));
        }
        if itself > 0 {
            let to = if trippers.len() == 1 { trippers[0].destination.as_str() } else { "those" };
            s.push_str(&format!("{} {itself} to {to}", if others > 0 { " and" } else { ";" }));
            if others == 0 {
                s.push_str(" went without TFO");
            }
        }
    }
    if !trippers.is_empty() && p.timeout_s != Some(0) {
        s.push_str(
            ": fix the path to it, or set net.ipv4.tcp_fastopen_blackhole_timeout_sec=0 (the default since \
             Linux 5.14) so that one lost destination does not pause TFO for every other",
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::super::{fixtures::*, Kind};
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
            c.sentence.contains("holds 3 SYN-data to 10.1.2.3:* lost on the path, the last 60s ago"),
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
            p.verdict.sentence,
            "TFO paused in netns cli until 1970-01-01 00:01:04.000 UTC because SYNs to 198.18.0.3:443 were lost; \
             4 connections to 1 other destination went without TFO: fix the path to it, or set \
             net.ipv4.tcp_fastopen_blackhole_timeout_sec=0 (the default since Linux 5.14) so that one lost \
             destination does not pause TFO for every other"
        );
        let pause = p.pause.as_ref().unwrap();
        assert_eq!((pause.pauses, pause.without_tfo), (1, 4));
        assert!(p
            .verdict
            .evidence
            .iter()
            .any(|e| e.contains("by pid 7 (curl) connecting to 198.18.0.3:443")));
        let json = serde_json::to_value(p).unwrap();
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
            f.verdict.sentence,
            "listeners in netns srv answered 3 SYNs with syncookies and took no SYN-data: tcp_syncookies=2 \
             there: set it to 1 (syncookies only when a SYN queue overflows)"
        );
        facts.syncookies.insert(NS_SRV, 1);
        assert!(report(&[], &facts).namespaces[0].verdict.sentence.contains(": a SYN flood"));
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
        assert!(f.verdict.sentence.contains("the TFO key was rotated without a backup key"), "{f:?}");
        assert!(f.verdict.sentence.contains("a one-off, not a fault"), "{f:?}");
        assert_eq!(report(&[], &facts).namespaces[0].verdict.kind, Kind::CookieInvalid);
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
            r.namespaces[0].verdict.sentence,
            "listener 0.0.0.0:81: 5 TFO queue overflows (max_qlen 4); raise fastopen= but keep it below somaxconn"
        );
        assert!(
            r.namespaces[0].verdict.evidence[0].contains("in netns srv; the tracepoint backend cannot see")
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
        assert!(paused.verdict.sentence.starts_with("TFO paused in netns 4026532177 for"), "{paused:?}");
        blind.backend = Some("fentry".into());
        let b = report(&[srv("accepted", 0)], &blind);
        assert!(b.namespaces.iter().all(|n| !matches!(n.verdict.kind, Kind::ActiveTfoPaused | Kind::Info)));
    }
}
