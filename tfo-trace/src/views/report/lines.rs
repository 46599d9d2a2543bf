//! The lines the text and Markdown reports both say: where from, the summary, a row's
//! names, balance and the rows beyond `--top`, a verdict's strength.
use std::collections::BTreeMap;

use super::{
    source::{Rendered, Source},
    verdict::said_finding,
};
use crate::{
    aggregation::report::{
        verdict::{DestinationReport, Kind, Verdict},
        Rest,
    },
    units,
};

pub(super) fn outcomes_line(o: &BTreeMap<String, u64>) -> String {
    o.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" ")
}

pub(super) fn source_line(s: &Source, sources: &[Source]) -> String {
    if sources.len() > 1 {
        let hosts: Vec<String> =
            sources.iter().map(|s| s.host.clone().unwrap_or_else(|| "?".into())).collect();
        let mut distinct = hosts.clone();
        distinct.sort();
        distinct.dedup();
        const NAMED: usize = 5;
        let mut named = distinct.iter().take(NAMED).cloned().collect::<Vec<_>>().join(", ");
        if distinct.len() > NAMED {
            named.push_str(&format!(" and {} more", units::count((distinct.len() - NAMED) as u64)));
        }
        let mut parts = vec![
            units::plural(s.events, "event", "events"),
            format!(
                "from {} of {}: {named}",
                units::plural(sources.len() as u64, "recording", "recordings"),
                units::plural(distinct.len() as u64, "host", "hosts")
            ),
        ];
        if let Some(b) = &s.backend {
            parts.push(format!("{b} backend"));
        }
        if let Some(w) = window_words(s) {
            parts.push(w);
        }
        return parts.join(", ");
    }
    let mut parts = vec![units::plural(s.events, "event", "events")];
    match s.kind {
        "recording" => parts.push(format!("from the recording {}", s.path.as_deref().unwrap_or("?"))),
        "flight_recorder" => parts.push(format!(
            "from the flight recorder {} ({})",
            s.path.as_deref().unwrap_or("?"),
            units::plural(u64::from(s.segments.unwrap_or(0)), "segment", "segments")
        )),
        _ => parts.push(format!("traced live for {}", units::duration_s(s.window_s.unwrap_or(0.0)))),
    }
    if let Some(w) = window_words(s) {
        parts.push(w);
    }
    if let Some(h) = &s.host {
        parts.push(format!("host {h}"));
    }
    if let Some(k) = &s.kernel {
        parts.push(format!("kernel {k}"));
    }
    if let Some(b) = &s.backend {
        parts.push(format!("{b} backend"));
    }
    if let Some(st) = &s.start {
        parts.push(format!("started {st}"));
    }
    if let Some(l) = s.events_lost.filter(|&l| l > 0) {
        parts.push(format!("{l} events LOST in the kernel (ring buffer full)"));
    }
    parts.join(", ")
}

/// `events from 2026-12-03T03:00:00Z to 2026-12-03T04:00:00Z` (`--since`, `--until`).
fn window_words(s: &Source) -> Option<String> {
    match (&s.since, &s.until) {
        (None, None) => None,
        (Some(a), None) => Some(format!("events since {a}")),
        (None, Some(b)) => Some(format!("events before {b}")),
        (Some(a), Some(b)) => Some(format!("events from {a} to {b}")),
    }
}

/// `saved 420ms over 12 of 12 accepted, lost 1.02s: net -600ms over 13 connections`; for a
/// row where nothing was accepted, what it lost is its net (`nothing accepted, net -11.2s
/// over 11 connections`); None where no saving was measured of what was accepted (a
/// recording without `saved_us`), or nothing happened either way.
pub(super) fn balance_line(
    saved_us: u64,
    measured: u64,
    accepted: Option<u64>,
    net_us: i64,
    connections: u64,
) -> Option<String> {
    if measured == 0 {
        return (accepted == Some(0) && net_us != 0).then(|| {
            format!(
                "nothing accepted, net {} over {}",
                units::net_us(net_us),
                units::plural(connections, "connection", "connections")
            )
        });
    }
    let of = accepted.map(|a| format!(" of {}", units::count(a))).unwrap_or_default();
    Some(format!(
        "saved {} over {}{of} accepted, net {} over {}",
        units::duration_us(saved_us),
        units::count(measured),
        units::net_us(net_us),
        units::plural(connections, "connection", "connections")
    ))
}

/// Refused SYN-data (`data_not_acked`), said apart from the time lost: `gain forgone: 4
/// SYN-data refused, ~800us ...`. tcp_rcv_fastopen_synack() resends the refused data at once
/// on the SYN-ACK, when plain TCP would first send it: against no TFO nothing was lost;
/// against a working TFO each missed the round trip it saves (its handshake, estimated).
pub(super) fn forgone_text(refused: u64, forgone_us: u64) -> String {
    format!(
        "gain forgone: {} refused, ~{} (the round trip a working TFO saves each; against no TFO no time \
         lost: the data went at once on the SYN-ACK)",
        units::plural(refused, "SYN-data", "SYN-data"),
        units::duration_us(forgone_us)
    )
}

/// `strong: 12 of 12 connections, 3 of 37 destinations, 14 of 120 hosts`.
pub(super) fn strength_line<F>(v: &Verdict<F>) -> String {
    let s = &v.support;
    let mut parts = vec![format!(
        "{} of {}",
        units::count(s.connections),
        units::plural(s.of_connections, "connection", "connections")
    )];
    if let (Some(d), Some(of)) = (s.destinations, s.of_destinations) {
        if of > 1 {
            parts.push(format!(
                "{} of {}",
                units::count(d),
                units::plural(of, "destination", "destinations")
            ));
        }
    }
    if s.of_hosts > 1 {
        parts.push(format!("{} of {}", units::count(s.hosts), units::plural(s.of_hosts, "host", "hosts")));
    }
    format!("{}: {}", v.strength.name(), parts.join(", "))
}

/// `2 syn_data_dropped, 940 healthy`: the most common first.
fn verdict_counts(v: &BTreeMap<crate::aggregation::report::verdict::Kind, u64>) -> String {
    let mut v: Vec<_> = v.iter().collect();
    v.sort_by(|a, b| b.0.severity().cmp(&a.0.severity()).then(b.1.cmp(a.1)));
    v.iter().map(|(k, n)| format!("{} {}", units::count(**n), k.name())).collect::<Vec<_>>().join(", ")
}

/// The summary's lines, without indentation: what text and Markdown both show.
pub(super) fn summary_lines(r: &Rendered) -> Vec<String> {
    let s = &r.built.summary;
    let g = s.group_by;
    let mut out = Vec::new();
    let mut first = format!(
        "{} to {}",
        units::plural(s.connections, "client connection", "client connections"),
        units::plural(s.destinations, "destination", "destinations")
    );
    match s.unnamed_groups {
        // By name: the rows that are an address without a name are said apart.
        Some(unnamed) if unnamed > 0 => first.push_str(&format!(
            ", in {} and {} without a name",
            units::plural(s.groups - unnamed.min(s.groups), g.name(), g.rows()),
            units::plural(unnamed, "address", "addresses")
        )),
        _ if g != crate::aggregation::report::grouping::GroupBy::Destination => {
            first.push_str(&format!(", in {}", units::plural(s.groups, g.name(), g.rows())));
        }
        _ => {}
    }
    if s.server_events > 0 {
        first.push_str(&format!(
            "; {} at {}",
            units::plural(s.server_events, "server event", "server events"),
            units::plural(s.listeners, "listener", "listeners")
        ));
    }
    out.push(first);
    // What paused TFO for a whole namespace, or kept its listeners from it, is the answer
    // before any destination's.
    for n in r
        .built
        .namespaces
        .iter()
        .filter(|n| matches!(n.verdict.kind, Kind::ActiveTfoPaused | Kind::Syncookies))
    {
        out.push(said_finding(n).sentence);
    }
    if !s.verdicts.is_empty() {
        out.push(format!("verdicts (one per {}): {}", g.name(), verdict_counts(&s.verdicts)));
    }
    let mut lost = if s.stalled == 0 {
        "time lost: none to SYN timeouts".to_string()
    } else {
        let causes: Vec<String> = s
            .stalls_by_cause
            .iter()
            .map(|(c, n)| {
                let lost = s.lost_us_by_cause.get(c).copied().unwrap_or(0);
                format!("{} {}, {}", c.name(), units::count(*n), units::duration_us(lost))
            })
            .collect();
        format!(
            "time lost: {} in {} ({})",
            units::duration_us(s.lost_us_total),
            units::plural(s.stalled, "stalled connection", "stalled connections"),
            causes.join("; ")
        )
    };
    if s.extra_round_trips > 0 {
        lost.push_str(&format!("; {}", forgone_text(s.extra_round_trips, s.extra_round_trip_us)));
    }
    out.push(lost);
    out.extend(balance_line(s.saved_us_total, s.saved_measured, None, s.net_us, s.connections));
    let worst: Vec<String> = s
        .worst
        .iter()
        .filter(|w| w.lost_us_total > 0 || w.extra_round_trip_us > 0)
        .map(|w| {
            let t = if w.lost_us_total > 0 {
                units::duration_us(w.lost_us_total)
            } else {
                format!("~{} forgone", units::duration_us(w.extra_round_trip_us))
            };
            format!("{} {t} ({}, {})", w.group, w.kind.name(), w.strength.name())
        })
        .collect();
    if !worst.is_empty() {
        out.push(format!("worst: {}", worst.join("; ")));
    }
    if r.built.fleet() {
        let hosts: Vec<String> = s
            .hosts
            .iter()
            .map(|h| {
                let lost = if h.stalled > 0 {
                    format!("{} lost", units::duration_us(h.lost_us_total))
                } else {
                    "no time lost".into()
                };
                format!("{} {} conns, {lost}", h.host, units::count(h.connections))
            })
            .collect();
        const NAMED: usize = 8;
        let mut line = format!("hosts: {}", hosts.iter().take(NAMED).cloned().collect::<Vec<_>>().join("; "));
        if hosts.len() > NAMED {
            line.push_str(&format!("; and {} more", units::count((hosts.len() - NAMED) as u64)));
        }
        out.push(line);
    }
    out
}

/// `api.example, www.example`, `a, b, c +2 more`: the DNS names of a row's addresses; None
/// where it has none, or is the one name's row (its title names it).
pub(super) fn names_line(d: &DestinationReport) -> Option<String> {
    if d.names.is_empty() || (d.more_names == 0 && d.names.len() == 1 && d.names[0] == d.destination) {
        return None;
    }
    let mut line = d.names.join(", ");
    if d.more_names > 0 {
        line.push_str(&format!(" +{} more", units::count(d.more_names)));
    }
    Some(line)
}

pub(super) fn rest_line(rest: &Rest, rows: &str) -> String {
    let lost = if rest.stalled > 0 {
        format!("{} lost in {} stalled", units::duration_us(rest.lost_us_total), units::count(rest.stalled))
    } else {
        "no time lost".into()
    };
    let verdicts = if rest.verdicts.is_empty() {
        String::new()
    } else {
        format!(" ({})", verdict_counts(&rest.verdicts))
    };
    format!(
        "... and {} more {rows}: {}, {lost}{verdicts} (--all shows them)",
        units::count(rest.groups),
        units::plural(rest.connections, "connection", "connections")
    )
}
