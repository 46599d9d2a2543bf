//! A listener's verdict in words: one function per verdict kind, each its sentence and the
//! evidence that kind adds; the figures are `aggregation::report::verdict::listener`'s.
use super::{
    said::{hosts_line, Said},
    server_sentences::{overflow_sentence, rotated_without_backup_sentence, PASSIVE_FAIL_CAUSES},
};
use crate::{
    aggregation::report::verdict::{Kind, ListenerFigures, ListenerReport},
    events::Outcome,
    units,
};

/// What every kind's sentence of a listener draws on.
struct Listener<'a> {
    /// `0.0.0.0:81`.
    name: &'a str,
    f: &'a ListenerFigures,
}

impl Listener<'_> {
    fn count(&self, o: Outcome) -> u64 {
        self.f.counts[o]
    }

    /// SYN-data accepted, with the primary key or the backup.
    fn accepted(&self) -> u64 {
        self.count(Outcome::Accepted) + self.count(Outcome::AcceptedAltKey)
    }

    /// SYN-data that arrived at it, whatever became of it.
    fn syn_data(&self) -> u64 {
        self.accepted()
            + self.count(Outcome::CookieInvalid)
            + self.count(Outcome::QueueOverflow)
            + self.count(Outcome::ListenerDisabled)
    }
}

/// The sentence and evidence of a listener's verdict.
pub(crate) fn said(l: &ListenerReport) -> Said {
    let f = &l.verdict.figures;
    let r = Listener { name: &l.listener, f };
    let mut evidence = Vec::new();
    let sentence = match l.verdict.kind {
        Kind::QueueOverflow => queue_overflow(&r, l.max_qlen, &mut evidence),
        Kind::CookieInvalid => cookie_invalid(&r, &mut evidence),
        Kind::KeyRotatedWithoutBackup => key_rotated_without_backup(&r, &mut evidence),
        Kind::KeyRotated => key_rotated(&r, &mut evidence),
        Kind::ListenerDisabled => listener_disabled(&r),
        Kind::Healthy => healthy(&r),
        _ => cookie_requests_only(&r),
    };
    if let Some(q) = l.max_qlen {
        evidence.push(format!("TFO queue max_qlen {q}"));
    }
    if f.without_data > 0 {
        evidence.push(format!(
            "{} made from a cookie without data (TcpExtTCPFastOpenPassive counts them): their clients sent \
             nothing in the SYN; TFO saved them a round trip where this server wrote first (a banner), \
             nothing where they write first",
            units::plural(f.without_data, "TFO child", "TFO children")
        ));
    }
    if f.fleet {
        evidence.push(hosts_line(&l.hosts));
    }
    Said { sentence, evidence }
}

fn queue_overflow(r: &Listener<'_>, max_qlen: Option<u32>, evidence: &mut Vec<String>) -> String {
    if let Some(n) = r.f.listen_overflow {
        evidence.push(format!("TcpExtTCPFastOpenListenOverflow +{n} in {}", r.f.ns));
    }
    evidence.push(
        "each overflowed SYN-data fell back to a plain handshake: the data waits one round trip".into(),
    );
    overflow_sentence(r.name, r.count(Outcome::QueueOverflow), max_qlen, r.f.somaxconn)
}

fn cookie_invalid(r: &Listener<'_>, evidence: &mut Vec<String>) -> String {
    if let Some(n) = r.f.passive_fail {
        evidence.push(format!("TcpExtTCPFastOpenPassiveFail +{n} in {}", r.f.ns));
    }
    let key = match r.f.backup_key {
        Some(false) => " and no backup key is set",
        _ => "",
    };
    format!(
        "listener {}: {} of {} SYN-data refused: {PASSIVE_FAIL_CAUSES}{key}; a rotation refuses each \
         client once, then accepts its new cookie: when rotating, keep the old key as backup (`sysctl -w \
         net.ipv4.tcp_fastopen_key=NEW,OLD`)",
        r.name,
        r.count(Outcome::CookieInvalid),
        r.syn_data()
    )
}

fn key_rotated_without_backup(r: &Listener<'_>, evidence: &mut Vec<String>) -> String {
    if let Some(n) = r.f.passive_fail {
        evidence.push(format!("TcpExtTCPFastOpenPassiveFail +{n} in {}", r.f.ns));
    }
    let (invalid, accepted) = (r.count(Outcome::CookieInvalid), r.accepted());
    evidence.push(format!(
        "{invalid} cookie_invalid, then accepted again ({accepted} accepted in all): the refusals stopped \
         once clients had the new cookie"
    ));
    rotated_without_backup_sentence(&format!("listener {}", r.name), invalid, accepted)
}

fn key_rotated(r: &Listener<'_>, evidence: &mut Vec<String>) -> String {
    if let Some(n) = r.f.passive_alt_key {
        evidence.push(format!("TcpExtTCPFastOpenPassiveAltKey +{n} in {}", r.f.ns));
    }
    let alt = r.count(Outcome::AcceptedAltKey);
    let were = if alt == 1 { "was" } else { "were" };
    format!(
        "listener {}: the TFO key was rotated with the old one kept as backup: {alt} of {} SYN-data \
         carried a cookie of the backup key and {were} accepted; a rotation done right, not a fault \
         (those clients get a new cookie on the next cookie request)",
        r.name,
        r.syn_data()
    )
}

fn listener_disabled(r: &Listener<'_>) -> String {
    format!(
        "listener {}: {} SYN-data arrived but TFO is off on it: set TCP_FASTOPEN on the listener, or set \
         bit 0x400 before it calls listen() (read only there)",
        r.name,
        r.count(Outcome::ListenerDisabled)
    )
}

fn healthy(r: &Listener<'_>) -> String {
    format!(
        "listener {}: {} accepted",
        r.name,
        units::plural(r.accepted(), "TFO connection", "TFO connections")
    )
}

/// Nothing to judge yet: cookie requests only.
fn cookie_requests_only(r: &Listener<'_>) -> String {
    format!(
        "listener {}: {} answered",
        r.name,
        units::plural(r.count(Outcome::CookieRequested), "cookie request", "cookie requests")
    )
}
#[cfg(test)]
mod tests {
    use super::said;
    use crate::aggregation::report::verdict::{fixtures::*, Kind};
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
        let ev = said(l).evidence.join("\n");
        assert!(ev.contains("3 TFO children made from a cookie without data"), "{ev}");
        let with_data = report(&events[3..], &Facts::default());
        assert!(!said(&with_data.listeners[0]).evidence.join("\n").contains("without data"));
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
            said(l).sentence,
            "listener 0.0.0.0:81: 37 TFO queue overflows (max_qlen 16); raise fastopen= but keep it below somaxconn"
        );
        assert_eq!(l.outcomes["queue_overflow"], 37);
        facts.somaxconn.insert(NS_SRV, 16);
        let r = report(&events, &facts);
        assert!(said(&r.listeners[0]).sentence.contains("already at somaxconn (16)"), "{:?}", r.listeners[0]);
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
            said(&r.listeners[0]).sentence,
            "listener 198.18.0.2:81: 37 TFO queue overflows (max_qlen unknown); raise fastopen= but keep it below somaxconn"
        );
    }

    #[test]
    fn key_rotation_invalid_cookie_and_disabled_listener() {
        let events = vec![srv("accepted", 0), srv("accepted_alt_key", 1), srv("accepted_alt_key", 2)];
        let mut facts = Facts::default();
        let r = report(&events, &facts);
        assert_eq!(r.listeners[0].verdict.kind, Kind::KeyRotated);
        assert!(said(&r.listeners[0])
            .sentence
            .contains("2 of 3 SYN-data carried a cookie of the backup key"));

        let events = vec![srv("accepted", 0), srv("cookie_invalid", 1)];
        facts.backup_key.insert(NS_SRV, false);
        let r = report(&events, &facts);
        assert_eq!(r.listeners[0].verdict.kind, Kind::CookieInvalid);
        assert!(
            said(&r.listeners[0]).sentence.contains("1 of 2 SYN-data"),
            "{}",
            said(&r.listeners[0]).sentence
        );
        assert!(said(&r.listeners[0]).sentence.contains("no backup key is set"));

        let r = report(&[srv("listener_disabled", 0)], &Facts::default());
        assert_eq!(r.listeners[0].verdict.kind, Kind::ListenerDisabled);
        let r = report(&[srv("accepted", 0), srv("accepted", 1)], &Facts::default());
        assert_eq!(said(&r.listeners[0]).sentence, "listener 198.18.0.2:81: 2 TFO connections accepted");
    }
}
