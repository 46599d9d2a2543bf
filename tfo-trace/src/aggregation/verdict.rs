//! Verdicts for `tfo-trace report`: per destination (client side) and per listener (server
//! side), the counts by outcome, the time TFO cost, and one plain sentence saying what is
//! wrong and what to do, with the evidence it rests on. Pure: events and kernel facts in
//! (gathered by `views::report`), a [`Report`] out.
//!
//! The facts the kernel gives are used where they exist: `ip tcp_metrics` (fo_syn_drops and
//! the cached cookie per destination), counter deltas per namespace
//! (TcpExtTCPFastOpenListenOverflow, PassiveFail, PassiveAltKey), listener TFO queue sizes
//! (max_qlen) and somaxconn, and whether a backup key is set.
//!
//! What the running backend cannot see cannot become an event verdict: on the tracepoint
//! backend (this project's host, Linux 6.18 without fentry or kprobes) the server outcomes
//! `queue_overflow`, `cookie_invalid`, `accepted_alt_key` and `listener_disabled` never
//! appear, so the verdicts built on them are unit-tested here on synthetic events; on that
//! backend the namespace's counters stand in ([`NamespaceFinding`]).
use std::{
    collections::{BTreeMap, BTreeSet},
    net::SocketAddr,
};

use serde::Serialize;

use crate::{
    aggregation::{
        stall::{Cause, StallTally},
        Tally,
    },
    events::{Event, Outcome, Role},
    kernel::{netstat::Netstat, tcp_metrics::TcpMetric},
};

/// A TFO listener as the kernel shows it (see `kernel::listeners::tfo_listeners`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ListenerFact {
    pub netns: u32,
    pub addr: SocketAddr,
    /// fastopenq.max_qlen (getsockopt TCP_FASTOPEN); 0 = TFO off on this listener.
    pub max_qlen: Option<u32>,
}

/// What the kernel says besides the events. Everything is optional: a recording replayed
/// elsewhere has none of it.
#[derive(Clone, Debug, Default)]
pub struct Facts {
    /// `ip tcp_metrics` per client namespace (inode); absent namespaces were not read.
    pub tcp_metrics: BTreeMap<u32, Vec<TcpMetric>>,
    pub listeners: Vec<ListenerFact>,
    /// Counter deltas over the window per namespace.
    pub counters: BTreeMap<u32, Netstat>,
    /// A backup TFO key is set, per namespace.
    pub backup_key: BTreeMap<u32, bool>,
    /// net.core.somaxconn per namespace.
    pub somaxconn: BTreeMap<u32, u32>,
    /// Namespace inode -> `ip netns` name, for readable evidence.
    pub netns_names: BTreeMap<u32, String>,
    /// The backend that produced the events (its blind spots are named in findings).
    pub backend: Option<String>,
}

impl Facts {
    fn ns(&self, netns: u32) -> String {
        match self.netns_names.get(&netns) {
            Some(n) => format!("netns {n}"),
            None => format!("netns {netns}"),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// TFO works: every SYN-data accepted.
    Healthy,
    /// Nothing wrong, nothing to judge yet (cookie requests only, no traffic).
    Info,
    SynDataDropped,
    CookieRequestDropped,
    ServerStoppedTfo,
    ConnectFailed,
    NotAttempted,
    QueueOverflow,
    CookieInvalid,
    KeyRotated,
    ListenerDisabled,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Verdict {
    pub kind: Kind,
    /// One plain sentence: what happens and what to do.
    pub sentence: String,
    /// The facts it rests on, one per line.
    pub evidence: Vec<String>,
}

/// Client side, one destination in one namespace.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DestinationReport {
    pub destination: String,
    pub netns: u32,
    /// Connections with a TFO outcome (one event each).
    pub connections: u64,
    pub outcomes: BTreeMap<String, u64>,
    /// Connections whose SYN carried data.
    pub syn_data_sent: u64,
    pub accepted: u64,
    /// SYN-data that timed out and was resent as a plain SYN (dropped on the path).
    pub syn_data_dropped: u64,
    /// SYN-data the SYN-ACK did not acknowledge.
    pub data_not_acked: u64,
    /// Connections that lost time to a SYN timeout (see `aggregation::stall`).
    pub stalled: u64,
    /// Time the stalls lost.
    pub lost_us_total: u64,
    /// Mean over the stalled connections.
    pub lost_us_per_stalled: u64,
    /// Mean over all connections.
    pub lost_us_per_connection: u64,
    /// Not stalls: the data not acked went again after the handshake, one extra round trip
    /// per such connection, estimated by its handshake time (in none of the `lost_us_*`).
    pub extra_round_trips: u64,
    pub extra_round_trip_us: u64,
    pub verdict: Verdict,
}

/// Server side, one listening port in one namespace.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ListenerReport {
    pub listener: String,
    pub netns: u32,
    pub outcomes: BTreeMap<String, u64>,
    pub max_qlen: Option<u32>,
    pub verdict: Verdict,
}

/// From a namespace's counters, for what the backend's events cannot show.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct NamespaceFinding {
    pub netns: u32,
    pub verdict: Verdict,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Report {
    pub destinations: Vec<DestinationReport>,
    pub listeners: Vec<ListenerReport>,
    pub namespaces: Vec<NamespaceFinding>,
}

/// `1.02 s`, `35.0 ms`, `120 us`.
pub fn human_us(us: u64) -> String {
    if us >= 100_000 {
        format!("{:.2} s", us as f64 / 1e6)
    } else if us >= 1_000 {
        format!("{:.1} ms", us as f64 / 1e3)
    } else {
        format!("{us} us")
    }
}

fn outcomes(t: &Tally, role: Role) -> BTreeMap<String, u64> {
    t.by_outcome
        .iter()
        .filter(|((r, _), _)| *r == role)
        .map(|((_, o), n)| (o.name().to_string(), *n))
        .collect()
}

fn plural(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// Builds the whole report.
pub fn report(events: &[Event], facts: &Facts) -> Report {
    let mut destinations = destinations(events, facts);
    destinations
        .sort_by(|a, b| b.lost_us_total.cmp(&a.lost_us_total).then(a.destination.cmp(&b.destination)));
    let listeners = listeners(events, facts);
    let namespaces = namespace_findings(&listeners, facts);
    Report { destinations, listeners, namespaces }
}

#[derive(Default)]
struct Dst<'a> {
    tally: Tally,
    events: Vec<&'a Event>,
}

fn destinations(events: &[Event], facts: &Facts) -> Vec<DestinationReport> {
    let mut groups: BTreeMap<(String, u32), Dst> = BTreeMap::new();
    for e in events.iter().filter(|e| e.role == Role::Client) {
        let g = groups.entry((e.destination(), e.netns)).or_default();
        g.tally.add(e);
        g.events.push(e);
    }
    let mut out: Vec<DestinationReport> = groups
        .into_iter()
        .map(|((destination, netns), g)| destination_report(destination, netns, &g, facts))
        .collect();
    // Destinations the kernel remembers losing SYN-data to, without events in this window.
    for (&netns, entries) in &facts.tcp_metrics {
        for m in entries.iter().filter(|m| m.fo_syn_drops > 0) {
            if out.iter().any(|d| d.netns == netns && dest_ip(&d.destination) == Some(m.dst)) {
                continue;
            }
            let age = m.fo_syn_drop_age_s.map(|s| format!(", the last {s:.0} s ago")).unwrap_or_default();
            out.push(DestinationReport {
                destination: m.dst.to_string(),
                netns,
                connections: 0,
                outcomes: BTreeMap::new(),
                syn_data_sent: 0,
                accepted: 0,
                syn_data_dropped: 0,
                data_not_acked: 0,
                stalled: 0,
                lost_us_total: 0,
                lost_us_per_stalled: 0,
                lost_us_per_connection: 0,
                extra_round_trips: 0,
                extra_round_trip_us: 0,
                verdict: Verdict {
                    kind: Kind::SynDataDropped,
                    sentence: format!(
                        "the kernel remembers {} to {} lost on the path{age} (no connection to it in this \
                         window): expect a ~1 s stall on the next TFO connect there",
                        plural(u64::from(m.fo_syn_drops), "SYN-data", "SYN-data"),
                        m.dst
                    ),
                    evidence: vec![format!(
                        "ip tcp_metrics in {}: fo_syn_drops {}{age}",
                        facts.ns(netns),
                        m.fo_syn_drops
                    )],
                },
            });
        }
    }
    out
}

fn dest_ip(destination: &str) -> Option<std::net::IpAddr> {
    destination.parse::<SocketAddr>().ok().map(|s| s.ip()).or_else(|| destination.parse().ok())
}

fn destination_report(destination: String, netns: u32, g: &Dst, facts: &Facts) -> DestinationReport {
    let t = &g.tally;
    let c = |o| t.count(Role::Client, o);
    let with_data =
        |o: Outcome| g.events.iter().filter(|e| e.outcome == o && e.syn_data_bytes > 0).count() as u64;
    let mut stalls = StallTally::default();
    for e in &g.events {
        stalls.add(e);
    }
    let accepted = c(Outcome::Accepted);
    let not_acked = c(Outcome::DataNotAcked);
    let dropped = stalls.count(Cause::SynDataDropped);
    let cookie_dropped = stalls.count(Cause::CookieRequestDropped);
    let failed = c(Outcome::ConnectFailed);
    let not_attempted = c(Outcome::NotAttempted);
    let cookie_req = c(Outcome::CookieRequested);
    let sent = accepted + not_acked + dropped + with_data(Outcome::ConnectFailed);
    let connections = t.total();

    let drop_lost = stalls.lost_us_of(Cause::SynDataDropped);
    let cookie_drop_lost = stalls.lost_us_of(Cause::CookieRequestDropped);
    let each = |total: u64, n: u64| human_us(total / n.max(1));

    let metric = dest_ip(&destination)
        .and_then(|ip| facts.tcp_metrics.get(&netns).and_then(|v| v.iter().find(|m| m.dst == ip)));
    let mut evidence = Vec::new();
    let ns = facts.ns(netns);
    let metrics_line = |m: &TcpMetric| {
        let mut s = format!("ip tcp_metrics in {ns}: cookie {}", m.cookie_redacted());
        if let Some(mss) = m.fo_mss {
            s.push_str(&format!(", fo_mss {mss}"));
        }
        s.push_str(&format!(", fo_syn_drops {}", m.fo_syn_drops));
        if let Some(a) = m.fo_syn_drop_age_s.filter(|_| m.fo_syn_drops > 0) {
            s.push_str(&format!(" (last {a:.0} s ago)"));
        }
        s
    };

    let (kind, sentence) = if dropped > 0 {
        evidence.push(format!(
            "{} timed out and went again as a plain SYN after the initial RTO (TcpExtTCPSynRetrans, \
             TcpExtTCPFastOpenActiveFail), {} lost in total",
            plural(dropped, "SYN carrying data", "SYNs carrying data"),
            human_us(drop_lost)
        ));
        if cookie_req > 0 || accepted > 0 || metric.is_some_and(|m| m.cookie_len.is_some()) {
            evidence.push(
                "SYNs without data get through (the cookie was obtained): something on the path drops \
                 SYNs that carry data"
                    .into(),
            );
        }
        if accepted > 0 {
            evidence.push(format!(
                "{} accepted: the drops are intermittent or path-dependent",
                plural(accepted, "SYN-data was", "SYN-data were")
            ));
        }
        (
            Kind::SynDataDropped,
            format!(
                "SYN-data to {destination} was dropped on the path in {dropped} of {sent} connections, \
                 +{} each: disable TFO towards it or fix the path",
                each(drop_lost, dropped)
            ),
        )
    } else if not_acked > 0 {
        let first_fail =
            g.events.iter().filter(|e| e.outcome == Outcome::DataNotAcked).map(|e| e.ts_unix_ns).min();
        let accepted_before =
            g.events.iter().any(|e| e.outcome == Outcome::Accepted && Some(e.ts_unix_ns) < first_fail);
        let why = if accepted_before {
            "cookie accepted earlier"
        } else {
            "the client sent a cookie it got from that server"
        };
        evidence.push(format!(
            "{} not acknowledged by the SYN-ACK (TcpExtTCPFastOpenActiveFail): the data went again \
             after the handshake, +{} each",
            plural(not_acked, "SYN-data", "SYN-data"),
            each(stalls.extra_round_trip_us, stalls.extra_round_trips)
        ));
        evidence.push(
            "likely: TFO turned off on the server (tcp_fastopen bit 0x2 or TCP_FASTOPEN), its key \
             changed without keeping the old one as backup, or its TFO queue full"
                .into(),
        );
        (
            Kind::ServerStoppedTfo,
            format!(
                "server {destination} no longer accepts TFO: {not_acked} of {sent} SYN-data not acknowledged ({why})"
            ),
        )
    } else if cookie_dropped > 0 {
        evidence.push(format!(
            "{} with an empty TFO option timed out, {} lost",
            plural(cookie_dropped, "SYN", "SYNs"),
            human_us(cookie_drop_lost)
        ));
        (
            Kind::CookieRequestDropped,
            format!(
                "cookie requests to {destination} were lost in {cookie_dropped} of {} connections, +{} each: \
                 something on the path drops SYNs with the TFO option; disable TFO towards it",
                cookie_req + cookie_dropped,
                each(cookie_drop_lost, cookie_dropped)
            ),
        )
    } else if failed > 0 {
        (
            Kind::ConnectFailed,
            format!(
                "{} to {destination} never completed: check that the server is reachable",
                plural(failed, "TFO connection", "TFO connections")
            ),
        )
    } else if not_attempted > 0 && accepted == 0 {
        evidence.push("the SYN carried no TFO option although the application asked for TFO".into());
        (
            Kind::NotAttempted,
            format!(
                "TFO to {destination} was not attempted in {not_attempted} of {connections} connections: active \
                 TFO is off in {ns} (sysctl bit 0x1) or paused after a detected blackhole"
            ),
        )
    } else if accepted > 0 {
        (Kind::Healthy, format!("TFO works towards {destination}: {accepted} of {sent} SYN-data accepted"))
    } else {
        (
            Kind::Info,
            format!(
                "{destination}: {}, no SYN-data yet (the first connection to a server fetches the cookie)",
                plural(cookie_req, "cookie request", "cookie requests")
            ),
        )
    };
    if let Some(m) = metric {
        evidence.push(metrics_line(m));
    }
    DestinationReport {
        destination,
        netns,
        connections,
        outcomes: outcomes(t, Role::Client),
        syn_data_sent: sent,
        accepted,
        syn_data_dropped: dropped,
        data_not_acked: not_acked,
        stalled: stalls.stalls,
        lost_us_total: stalls.lost_us,
        lost_us_per_stalled: stalls.lost_us / stalls.stalls.max(1),
        lost_us_per_connection: stalls.lost_us / connections.max(1),
        extra_round_trips: stalls.extra_round_trips,
        extra_round_trip_us: stalls.extra_round_trip_us,
        verdict: Verdict { kind, sentence, evidence },
    }
}

fn listeners(events: &[Event], facts: &Facts) -> Vec<ListenerReport> {
    let mut groups: BTreeMap<(u32, u16), (Tally, BTreeSet<String>)> = BTreeMap::new();
    for e in events.iter().filter(|e| e.role == Role::Server) {
        let g = groups.entry((e.netns, e.sport)).or_default();
        g.0.add(e);
        g.1.insert(e.source());
    }
    groups
        .into_iter()
        .map(|((netns, port), (t, locals))| {
            let fact = facts.listeners.iter().find(|l| l.netns == netns && l.addr.port() == port);
            let label = match (fact, locals.len()) {
                (Some(f), _) => f.addr.to_string(),
                (None, 1) => locals.into_iter().next().unwrap_or_default(),
                (None, _) => format!("*:{port}"),
            };
            listener_report(label, netns, &t, fact.and_then(|f| f.max_qlen), facts)
        })
        .collect()
}

fn listener_report(
    listener: String,
    netns: u32,
    t: &Tally,
    max_qlen: Option<u32>,
    facts: &Facts,
) -> ListenerReport {
    let c = |o| t.count(Role::Server, o);
    let overflow = c(Outcome::QueueOverflow);
    let invalid = c(Outcome::CookieInvalid);
    let alt = c(Outcome::AcceptedAltKey);
    let disabled = c(Outcome::ListenerDisabled);
    let accepted = c(Outcome::Accepted) + alt;
    let cookie_req = c(Outcome::CookieRequested);
    let syn_data = accepted + invalid + overflow + disabled;
    let counters = facts.counters.get(&netns);
    let somaxconn = facts.somaxconn.get(&netns).copied();
    let backup = facts.backup_key.get(&netns).copied();
    let mut evidence = Vec::new();
    let counter = |key: &str| counters.map(|n| n.get(key));

    let (kind, sentence) = if overflow > 0 {
        if let Some(n) = counter("TcpExtTCPFastOpenListenOverflow") {
            evidence.push(format!("TcpExtTCPFastOpenListenOverflow +{n} in {}", facts.ns(netns)));
        }
        evidence.push(
            "each overflowed SYN-data fell back to a plain handshake: the data waits one round trip".into(),
        );
        (Kind::QueueOverflow, overflow_sentence(&listener, overflow, max_qlen, somaxconn))
    } else if invalid > 0 {
        if let Some(n) = counter("TcpExtTCPFastOpenPassiveFail") {
            evidence.push(format!("TcpExtTCPFastOpenPassiveFail +{n} in {}", facts.ns(netns)));
        }
        let key = match backup {
            Some(false) => " and no backup key is set",
            _ => "",
        };
        (
            Kind::CookieInvalid,
            format!(
                "listener {listener}: {invalid} of {syn_data} SYN-data carried a cookie it no longer accepts \
                 (key rotated{key}): when rotating, keep the old key as backup (`sysctl -w \
                 net.ipv4.tcp_fastopen_key=NEW,OLD`)"
            ),
        )
    } else if alt > 0 {
        if let Some(n) = counter("TcpExtTCPFastOpenPassiveAltKey") {
            evidence.push(format!("TcpExtTCPFastOpenPassiveAltKey +{n} in {}", facts.ns(netns)));
        }
        (
            Kind::KeyRotated,
            format!(
                "listener {listener}: the TFO key was rotated: {alt} of {syn_data} SYN-data carried a cookie of \
                 the backup key and were accepted; those clients get a new cookie on the next cookie request"
            ),
        )
    } else if disabled > 0 {
        (
            Kind::ListenerDisabled,
            format!(
                "listener {listener}: {disabled} SYN-data arrived but TFO is off on it: set TCP_FASTOPEN on \
                 the listener, or set bit 0x400 before it calls listen() (read only there)"
            ),
        )
    } else if accepted > 0 {
        (
            Kind::Healthy,
            format!(
                "listener {listener}: {} accepted",
                plural(accepted, "TFO connection", "TFO connections")
            ),
        )
    } else {
        (
            Kind::Info,
            format!(
                "listener {listener}: {} answered",
                plural(cookie_req, "cookie request", "cookie requests")
            ),
        )
    };
    if let Some(q) = max_qlen {
        evidence.push(format!("TFO queue max_qlen {q}"));
    }
    ListenerReport {
        listener,
        netns,
        outcomes: outcomes(t, Role::Server),
        max_qlen,
        verdict: Verdict { kind, sentence, evidence },
    }
}

fn overflow_sentence(listener: &str, n: u64, max_qlen: Option<u32>, somaxconn: Option<u32>) -> String {
    let q = max_qlen.map(|q| format!("max_qlen {q}")).unwrap_or_else(|| "max_qlen unknown".into());
    let advice = match (max_qlen, somaxconn) {
        (Some(q), Some(s)) if q >= s => {
            format!("max_qlen is already at somaxconn ({s}): raise net.core.somaxconn first, then fastopen=")
        }
        _ => "raise fastopen= but keep it below somaxconn".into(),
    };
    format!("{listener}: {} ({q}); {advice}", plural(n, "TFO queue overflow", "TFO queue overflows"))
        .replacen(listener, &format!("listener {listener}"), 1)
}

/// Counter deltas the events do not explain, because the backend cannot see them.
fn namespace_findings(listeners: &[ListenerReport], facts: &Facts) -> Vec<NamespaceFinding> {
    let backend = facts.backend.as_deref().unwrap_or("running");
    let mut out = Vec::new();
    for (&netns, n) in &facts.counters {
        let ns = facts.ns(netns);
        let seen = |o: Outcome| -> u64 {
            listeners
                .iter()
                .filter(|l| l.netns == netns)
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
                        plural(overflow, "TFO queue overflow", "TFO queue overflows")
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
                verdict: Verdict { kind: Kind::QueueOverflow, sentence, evidence },
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
                verdict: Verdict {
                    kind: Kind::CookieInvalid,
                    sentence: format!(
                        "{ns}: {} SYN-data refused by its listeners (invalid cookie or child creation failed{key}): \
                         when rotating the key, keep the old one as backup (`tcp_fastopen_key=NEW,OLD`)",
                        fail
                    ),
                    evidence: vec![format!(
                        "TcpExtTCPFastOpenPassiveFail +{fail} in {ns}; the {backend} backend cannot see which listener"
                    )],
                },
            });
        }
        let alt = n.get("TcpExtTCPFastOpenPassiveAltKey");
        if alt > seen(Outcome::AcceptedAltKey) {
            out.push(NamespaceFinding {
                netns,
                verdict: Verdict {
                    kind: Kind::KeyRotated,
                    sentence: format!(
                        "{ns}: the TFO key was rotated: {alt} SYN-data carried a cookie of the backup key and were accepted"
                    ),
                    evidence: vec![format!("TcpExtTCPFastOpenPassiveAltKey +{alt} in {ns}")],
                },
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const NS_CLI: u32 = 4026532177;
    const NS_SRV: u32 = 4026532246;

    /// Built from JSON so fields other work adds to Event (as Options) need no edit here.
    fn ev(role: &str, outcome: &str, dst: &str, data: u32, stall_us: u64, t_ms: u64) -> Event {
        let dst: SocketAddr = dst.parse().unwrap();
        let (saddr, sport, daddr, dport, netns) = if role == "client" {
            ("198.18.0.1".to_string(), 40000, dst.ip().to_string(), dst.port(), NS_CLI)
        } else {
            (dst.ip().to_string(), dst.port(), "198.18.0.1".to_string(), 40000, NS_SRV)
        };
        let mut e: Event = serde_json::from_value(serde_json::json!({
            "ts": "2026-11-30T08:00:00.000000000Z", "role": role, "outcome": outcome, "family": 4,
            "saddr": saddr, "sport": sport, "daddr": daddr, "dport": dport, "netns": netns,
            "pid": 7, "comm": "curl", "syn_data_bytes": data, "cookie_len": null,
            "exp_option": false, "retransmits": u32::from(stall_us > 0),
            "handshake_us": 200 + stall_us, "stall_us": stall_us,
        }))
        .unwrap();
        e.ts_unix_ns = u128::from(t_ms) * 1_000_000;
        e
    }

    fn cli(outcome: &str, dst: &str, data: u32, stall_us: u64, t: u64) -> Event {
        ev("client", outcome, dst, data, stall_us, t)
    }

    #[test]
    fn syn_data_dropped_on_the_path() {
        let mut events = vec![cli("cookie_requested", "198.18.0.3:8080", 0, 0, 0)];
        for i in 0..12 {
            events.push(cli("syn_retransmitted", "198.18.0.3:8080", 64, 1_020_000, 10 + i));
        }
        let mut facts = Facts::default();
        facts.tcp_metrics.insert(
            NS_CLI,
            crate::kernel::tcp_metrics::parse(
                "198.18.0.3 age 1.000sec fo_mss 1460 fo_syn_drops 12/0.003usec ago fo_cookie 0011223344556677 source 198.18.0.1\n",
            )
            .unwrap(),
        );
        let r = report(&events, &facts);
        let d = &r.destinations[0];
        assert_eq!(d.verdict.kind, Kind::SynDataDropped);
        assert_eq!(
            d.verdict.sentence,
            "SYN-data to 198.18.0.3:8080 was dropped on the path in 12 of 12 connections, +1.02 s each: \
             disable TFO towards it or fix the path"
        );
        assert_eq!((d.syn_data_dropped, d.syn_data_sent, d.connections, d.stalled), (12, 12, 13, 12));
        assert_eq!(d.lost_us_total, 12 * 1_020_000);
        assert_eq!(d.lost_us_per_stalled, 1_020_000);
        let ev = d.verdict.evidence.join("\n");
        assert!(ev.contains("fo_syn_drops 12 (last 3 s ago)"), "{ev}");
        assert!(ev.contains("cookie present (8 bytes)"), "{ev}");
        assert!(!ev.contains("0011223344556677"));
        assert!(ev.contains("SYNs without data get through"), "{ev}");
    }

    #[test]
    fn server_no_longer_accepts_tfo() {
        let mut events = vec![cli("accepted", "198.18.0.2:8080", 64, 0, 0)];
        for i in 0..4 {
            events.push(cli("data_not_acked", "198.18.0.2:8080", 64, 0, 10 + i));
        }
        let r = report(&events, &Facts::default());
        let d = &r.destinations[0];
        assert_eq!(d.verdict.kind, Kind::ServerStoppedTfo);
        // 1 accepted + 4 not acked = 5 sent.
        assert_eq!(
            d.verdict.sentence,
            "server 198.18.0.2:8080 no longer accepts TFO: 4 of 5 SYN-data not acknowledged (cookie accepted earlier)"
        );
        assert_eq!(d.data_not_acked, 4);
        // Not stalls: one extra round trip each, estimated by the handshake time.
        assert_eq!((d.stalled, d.lost_us_total), (0, 0));
        assert_eq!((d.extra_round_trips, d.extra_round_trip_us), (4, 800));
        assert!(d.verdict.evidence[0].ends_with("after the handshake, +200 us each"), "{:?}", d.verdict);

        let only_fail: Vec<Event> =
            (0..4).map(|i| cli("data_not_acked", "198.18.0.2:8080", 64, 0, i)).collect();
        let d = &report(&only_fail, &Facts::default()).destinations[0];
        assert_eq!(
            d.verdict.sentence,
            "server 198.18.0.2:8080 no longer accepts TFO: 4 of 4 SYN-data not acknowledged (the client sent a \
             cookie it got from that server)"
        );
    }

    #[test]
    fn healthy_info_cookie_drop_and_not_attempted() {
        let events = vec![
            cli("cookie_requested", "198.18.0.2:80", 0, 0, 0),
            cli("accepted", "198.18.0.2:80", 64, 0, 1),
            cli("cookie_requested", "198.18.0.4:80", 0, 0, 2),
            cli("syn_retransmitted", "198.18.0.5:80", 0, 1_010_000, 3),
            cli("not_attempted", "198.18.0.6:80", 0, 0, 4),
        ];
        let r = report(&events, &Facts::default());
        let by = |d: &str| r.destinations.iter().find(|x| x.destination == d).unwrap();
        assert_eq!(
            by("198.18.0.2:80").verdict.sentence,
            "TFO works towards 198.18.0.2:80: 1 of 1 SYN-data accepted"
        );
        assert_eq!(by("198.18.0.4:80").verdict.kind, Kind::Info);
        assert_eq!(by("198.18.0.5:80").verdict.kind, Kind::CookieRequestDropped);
        assert!(by("198.18.0.5:80").verdict.sentence.contains("+1.01 s each"));
        assert_eq!(by("198.18.0.6:80").verdict.kind, Kind::NotAttempted);
        assert_eq!(r.destinations[0].destination, "198.18.0.5:80", "most time lost first");
        assert!(r.listeners.is_empty() && r.namespaces.is_empty());
    }

    #[test]
    fn remembered_drops_without_events() {
        let mut facts = Facts::default();
        facts.tcp_metrics.insert(
            NS_CLI,
            crate::kernel::tcp_metrics::parse(
                "10.1.2.3 age 9.000sec fo_syn_drops 3/0.060usec ago source 10.1.2.1\n",
            )
            .unwrap(),
        );
        let r = report(&[], &facts);
        assert_eq!(r.destinations.len(), 1);
        assert!(
            r.destinations[0].verdict.sentence.contains("remembers 3 SYN-data to 10.1.2.3 lost"),
            "{:?}",
            r
        );
        assert!(r.destinations[0].verdict.sentence.contains("the last 60 s ago"));
    }

    fn srv(outcome: &str, t: u64) -> Event {
        ev("server", outcome, "198.18.0.2:81", 64, 0, t)
    }

    #[test]
    fn queue_overflow_uses_max_qlen_and_somaxconn() {
        let mut events: Vec<Event> = (0..37).map(|i| srv("queue_overflow", i)).collect();
        events.push(srv("accepted", 100));
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
        // No listener facts: the address the SYNs arrived on, max_qlen unknown.
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
    }

    #[test]
    fn human_durations() {
        assert_eq!(human_us(1_020_000), "1.02 s");
        assert_eq!(human_us(35_000), "35.0 ms");
        assert_eq!(human_us(120), "120 us");
    }
}
