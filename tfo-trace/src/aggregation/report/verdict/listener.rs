//! The verdict's sentence and evidence for a listener: its server events, each host's
//! share, and the kernel's facts about that listening socket.
use std::net::SocketAddr;

use super::{
    classify::{self, listener_shown_by},
    hosts_line,
    server_sentences::{overflow_sentence, rotated_without_backup_sentence},
    HostShare, Kind, ListenerReport, Strength, Support, Verdict,
};
use crate::{
    aggregation::{
        counting::OutcomeCounts,
        report::{facts::Facts, key_change::KeyChange},
    },
    events::Outcome,
    units,
};

/// The verdict on one listener (named by its bound address: [`crate::events::EventRef::listener_name`]):
/// its events (with its children made from a cookie without data), each host's share, and
/// the kernel's facts about that listening socket.
pub fn listener_row(
    netns: Option<u32>,
    listener: SocketAddr,
    (t, key, without_data): (&OutcomeCounts, &KeyChange, u64),
    hosts: &[(String, &OutcomeCounts)],
    fleet: bool,
    facts: &Facts,
) -> ListenerReport {
    let fact = netns.and_then(|ns| facts.listeners.iter().find(|l| l.netns == ns && l.addr == listener));
    let mut r = listener_report(listener.to_string(), netns, (t, key), fact.and_then(|f| f.max_qlen), facts);
    if without_data > 0 {
        r.verdict.evidence.push(format!(
            "{} made from a cookie without data (TcpExtTCPFastOpenPassive counts them): their clients sent \
             nothing in the SYN (this server speaks first, or they read before they write), so TFO gained \
             them nothing",
            units::plural(without_data, "TFO child", "TFO children")
        ));
    }
    let shown = |t: &OutcomeCounts| listener_shown_by(r.verdict.kind, t).0;
    r.hosts = hosts
        .iter()
        .map(|(h, t)| HostShare {
            host: h.clone(),
            connections: t.total(),
            showing: shown(t),
            stalled: 0,
            lost_us_total: 0,
        })
        .collect();
    r.hosts.sort_by(|a, b| {
        b.showing.cmp(&a.showing).then(b.connections.cmp(&a.connections)).then(a.host.cmp(&b.host))
    });
    r.verdict.support.hosts = r.hosts.iter().filter(|h| h.showing > 0).count() as u64;
    r.verdict.support.of_hosts = r.hosts.len() as u64;
    if fleet {
        r.verdict.evidence.push(hosts_line(&r.hosts));
    }
    r
}

fn listener_report(
    listener: String,
    netns: Option<u32>,
    (t, key): (&OutcomeCounts, &KeyChange),
    max_qlen: Option<u32>,
    facts: &Facts,
) -> ListenerReport {
    let c = |o| t[o];
    let overflow = c(Outcome::QueueOverflow);
    let invalid = c(Outcome::CookieInvalid);
    let alt = c(Outcome::AcceptedAltKey);
    let disabled = c(Outcome::ListenerDisabled);
    let accepted = c(Outcome::Accepted) + alt;
    let cookie_req = c(Outcome::CookieRequested);
    let syn_data = accepted + invalid + overflow + disabled;
    let counters = netns.and_then(|n| facts.counters.get(&n));
    let somaxconn = netns.and_then(|n| facts.somaxconn.get(&n).copied());
    let backup = netns.and_then(|n| facts.backup_key.get(&n).copied());
    let ns = netns.map(|n| facts.ns(n)).unwrap_or_else(|| "the listener's namespace".into());
    let mut evidence = Vec::new();
    let counter = |key: &str| counters.map(|n| n.get(key));

    let kind = classify::of_listener(t, key);
    let sentence = match kind {
        Kind::QueueOverflow => {
            if let Some(n) = counter("TcpExtTCPFastOpenListenOverflow") {
                evidence.push(format!("TcpExtTCPFastOpenListenOverflow +{n} in {ns}"));
            }
            evidence.push(
                "each overflowed SYN-data fell back to a plain handshake: the data waits one round trip"
                    .into(),
            );
            overflow_sentence(&listener, overflow, max_qlen, somaxconn)
        }
        Kind::CookieInvalid => {
            if let Some(n) = counter("TcpExtTCPFastOpenPassiveFail") {
                evidence.push(format!("TcpExtTCPFastOpenPassiveFail +{n} in {ns}"));
            }
            let key = match backup {
                Some(false) => " and no backup key is set",
                _ => "",
            };
            format!(
                "listener {listener}: {invalid} of {syn_data} SYN-data carried a cookie it no longer accepts \
                 (key rotated{key}): when rotating, keep the old key as backup (`sysctl -w \
                 net.ipv4.tcp_fastopen_key=NEW,OLD`)"
            )
        }
        Kind::KeyRotatedWithoutBackup => {
            if let Some(n) = counter("TcpExtTCPFastOpenPassiveFail") {
                evidence.push(format!("TcpExtTCPFastOpenPassiveFail +{n} in {ns}"));
            }
            evidence.push(format!(
                "{invalid} cookie_invalid, then accepted again ({accepted} accepted in all): the refusals \
                 stopped once clients had the new cookie"
            ));
            rotated_without_backup_sentence(&format!("listener {listener}"), invalid, accepted)
        }
        Kind::KeyRotated => {
            if let Some(n) = counter("TcpExtTCPFastOpenPassiveAltKey") {
                evidence.push(format!("TcpExtTCPFastOpenPassiveAltKey +{n} in {ns}"));
            }
            let were = if alt == 1 { "was" } else { "were" };
            format!(
                "listener {listener}: the TFO key was rotated with the old one kept as backup: {alt} of \
                 {syn_data} SYN-data carried a cookie of the backup key and {were} accepted; a rotation done \
                 right, not a fault (those clients get a new cookie on the next cookie request)"
            )
        }
        Kind::ListenerDisabled => format!(
            "listener {listener}: {disabled} SYN-data arrived but TFO is off on it: set TCP_FASTOPEN on \
             the listener, or set bit 0x400 before it calls listen() (read only there)"
        ),
        Kind::Healthy => format!(
            "listener {listener}: {} accepted",
            units::plural(accepted, "TFO connection", "TFO connections")
        ),
        _ => format!(
            "listener {listener}: {} answered",
            units::plural(cookie_req, "cookie request", "cookie requests")
        ),
    };
    if let Some(q) = max_qlen {
        evidence.push(format!("TFO queue max_qlen {q}"));
    }
    let (showing, of) = listener_shown_by(kind, t);
    let support =
        Support { connections: showing, of_connections: of, hosts: 1, of_hosts: 1, ..Default::default() };
    ListenerReport {
        listener,
        netns,
        outcomes: t.by_name(),
        max_qlen,
        hosts: Vec::new(),
        verdict: Verdict { kind, sentence, evidence, strength: Strength::of(showing, of), support },
    }
}

#[cfg(test)]
mod tests {
    use super::super::{fixtures::*, Kind};
    use crate::aggregation::report::ListenerFact;
    use crate::{
        aggregation::report::{of_events as report, Facts},
        events::Event,
    };

    /// Children made from a cookie without data (issue 38, item 5) are told in the evidence.
    #[test]
    fn children_without_data_are_named_in_the_evidence() {
        let mut events: Vec<Event> =
            (0..3).map(|i| Event { syn_data_bytes: 0, ..srv("accepted", i) }).collect();
        events.push(srv("accepted", 10));
        let r = report(&events, &Facts::default());
        let l = &r.listeners[0];
        assert_eq!(l.verdict.kind, Kind::Healthy);
        let ev = l.verdict.evidence.join("\n");
        assert!(ev.contains("3 TFO children made from a cookie without data"), "{ev}");
        let with_data = report(&events[3..], &Facts::default());
        assert!(!with_data.listeners[0].verdict.evidence.join("\n").contains("without data"));
    }

    #[test]
    fn queue_overflow_uses_max_qlen_and_somaxconn() {
        let mut events: Vec<Event> = (0..37).map(|i| srv("queue_overflow", i)).collect();
        events.push(srv("accepted", 100));
        // The listening socket, as the live reader names it from /proc.
        events.iter_mut().for_each(|e| e.listener = Some("0.0.0.0:81".parse().unwrap()));
        let mut facts = Facts::default();
        facts.listeners.push(ListenerFact {
            netns: NS_SRV,
            addr: "0.0.0.0:81".parse().unwrap(),
            max_qlen: Some(16),
        });
        facts.somaxconn.insert(NS_SRV, 4096);
        let r = report(&events, &facts);
        let l = &r.listeners[0];
        assert_eq!(l.verdict.kind, Kind::QueueOverflow);
        assert_eq!(
            l.verdict.sentence,
            "listener 0.0.0.0:81: 37 TFO queue overflows (max_qlen 16); raise fastopen= but keep it below somaxconn"
        );
        assert_eq!(l.outcomes["queue_overflow"], 37);
        facts.somaxconn.insert(NS_SRV, 16);
        let r = report(&events, &facts);
        assert!(
            r.listeners[0].verdict.sentence.contains("already at somaxconn (16)"),
            "{:?}",
            r.listeners[0]
        );
        // Another listener on the port (IPv6 only): its own row, never the IPv4 one's queue.
        let mut v6 = srv("accepted", 200);
        (v6.family, v6.saddr, v6.listener) =
            (6, "fd00:7f0::2".parse().unwrap(), Some("[::]:81".parse().unwrap()));
        let both: Vec<Event> = events.iter().cloned().chain([v6]).collect();
        let r = report(&both, &facts);
        let names: Vec<(&str, Option<u32>)> =
            r.listeners.iter().map(|l| (l.listener.as_str(), l.max_qlen)).collect();
        assert_eq!(names, [("0.0.0.0:81", Some(16)), ("[::]:81", None)]);
        // No listener named (a recording made before events named it): the address the
        // SYNs arrived on, max_qlen unknown.
        events.iter_mut().for_each(|e| e.listener = None);
        let r = report(&events, &Facts::default());
        assert_eq!(
            r.listeners[0].verdict.sentence,
            "listener 198.18.0.2:81: 37 TFO queue overflows (max_qlen unknown); raise fastopen= but keep it below somaxconn"
        );
    }

    #[test]
    fn key_rotation_invalid_cookie_and_disabled_listener() {
        let events = vec![srv("accepted", 0), srv("accepted_alt_key", 1), srv("accepted_alt_key", 2)];
        let mut facts = Facts::default();
        let r = report(&events, &facts);
        assert_eq!(r.listeners[0].verdict.kind, Kind::KeyRotated);
        assert!(r.listeners[0]
            .verdict
            .sentence
            .contains("2 of 3 SYN-data carried a cookie of the backup key"));

        let events = vec![srv("accepted", 0), srv("cookie_invalid", 1)];
        facts.backup_key.insert(NS_SRV, false);
        let r = report(&events, &facts);
        assert_eq!(r.listeners[0].verdict.kind, Kind::CookieInvalid);
        assert!(
            r.listeners[0].verdict.sentence.contains("1 of 2 SYN-data"),
            "{}",
            r.listeners[0].verdict.sentence
        );
        assert!(r.listeners[0].verdict.sentence.contains("no backup key is set"));

        let r = report(&[srv("listener_disabled", 0)], &Facts::default());
        assert_eq!(r.listeners[0].verdict.kind, Kind::ListenerDisabled);
        let r = report(&[srv("accepted", 0), srv("accepted", 1)], &Facts::default());
        assert_eq!(r.listeners[0].verdict.sentence, "listener 198.18.0.2:81: 2 TFO connections accepted");
    }
}
