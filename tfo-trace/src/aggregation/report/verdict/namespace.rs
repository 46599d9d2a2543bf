//! What the kernel's per-namespace facts say apart from the events: counter deltas that no
//! event of the running backend explains ([`namespace_findings`]), and destinations the TFO
//! cache remembers losing SYN-data to with no connection in the window ([`cached_drops`]).
use std::net::IpAddr;

use serde::Serialize;

use super::{
    listener::overflow_sentence, Kind, ListenerReport, NamespaceFinding, Strength, Support, Verdict,
};
use crate::{
    aggregation::{
        kernel_counted,
        report::facts::{Facts, ListenerFact},
    },
    events::{Outcome, Role},
    kernel::tcp_metrics::TcpMetric,
    probes::{table, Backend},
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
    }
}

/// A verdict on a namespace counter's delta `n`: what it counted is all it rests on.
fn counted(kind: Kind, sentence: String, evidence: Vec<String>, n: u64) -> Verdict {
    let support = Support { connections: n, of_connections: n, hosts: 1, of_hosts: 1, ..Default::default() };
    Verdict { kind, sentence, evidence, strength: Strength::of(n, n), support }
}

/// Counter deltas the events do not explain, because the backend cannot see them.
pub fn namespace_findings(listeners: &[ListenerReport], facts: &Facts) -> Vec<NamespaceFinding> {
    let backend = facts.backend.as_deref().unwrap_or("running");
    let mut out = Vec::new();
    for (&netns, n) in &facts.counters {
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
            let (max, sentence) = match tfo_listeners.as_slice() {
                [one] => (
                    one.max_qlen,
                    overflow_sentence(
                        &one.addr.to_string(),
                        overflow,
                        one.max_qlen,
                        facts.somaxconn.get(&netns).copied(),
                    ),
                ),
                _ => (
                    None,
                    format!(
                        "{ns}: {} on its listeners; raise fastopen= but keep it below somaxconn",
                        units::plural(overflow, "TFO queue overflow", "TFO queue overflows")
                    ),
                ),
            };
            let _ = max;
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
            });
        }
        let fail = n.get("TcpExtTCPFastOpenPassiveFail");
        if fail > seen(Outcome::CookieInvalid) {
            let key = match facts.backup_key.get(&netns) {
                Some(false) => " and no backup key is set",
                _ => "",
            };
            out.push(NamespaceFinding {
                netns,
                source: kernel_counted::SOURCE,
                verdict: counted(
                    Kind::CookieInvalid,
                    format!(
                        "{ns}: {} SYN-data refused by its listeners (invalid cookie or child creation failed{key}): \
                         when rotating the key, keep the old one as backup (`tcp_fastopen_key=NEW,OLD`)",
                        fail
                    ),
                    vec![format!(
                        "TcpExtTCPFastOpenPassiveFail +{fail} in {ns}; the {backend} backend cannot see which listener"
                    )],
                    fail,
                ),
            });
        }
        // Outcomes only a namespace counter sees on this backend, said from the counter.
        let blind = |role, outcome| backend_of(facts).is_some_and(|b| !table::sees(b, role, outcome));
        let paused = n.get("TcpExtTCPFastOpenBlackhole");
        if paused > 0 && blind(Role::Client, Outcome::ActiveDisabled) {
            let sentence = format!(
                "{ns}: blackhole detection paused active TFO {}: a TFO connect's SYNs timed out, and the \
                 connections that followed went without TFO for tcp_fastopen_blackhole_timeout_sec \
                 (doubled at each new pause)",
                units::plural(paused, "time", "times")
            );
            let evidence = format!(
                "TcpExtTCPFastOpenBlackhole +{paused} in {ns}; the {backend} backend cannot see which \
                 connection tripped it"
            );
            out.push(finding(netns, Kind::ActiveTfoPaused, sentence, evidence, paused));
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
            out.push(NamespaceFinding {
                netns,
                source: kernel_counted::SOURCE,
                verdict: counted(
                    Kind::KeyRotated,
                    format!(
                        "{ns}: the TFO key was rotated: {alt} SYN-data carried a cookie of the backup key and were accepted"
                    ),
                    vec![format!("TcpExtTCPFastOpenPassiveAltKey +{alt} in {ns}")],
                    alt,
                ),
            });
        }
    }
    out
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
        assert!(paused.verdict.sentence.contains("paused active TFO 1 time:"), "{paused:?}");
        blind.backend = Some("fentry".into());
        let b = report(&[srv("accepted", 0)], &blind);
        assert!(b.namespaces.iter().all(|n| !matches!(n.verdict.kind, Kind::ActiveTfoPaused | Kind::Info)));
    }
}
