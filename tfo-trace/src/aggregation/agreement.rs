//! One meaning of "a connection", "a stall" and "time lost" across the views: the same
//! events, every outcome the richest backend (fentry) reports, fed to what `top`, `stalls`,
//! `report` and `export` count with, give the same figures in each.
use std::net::{IpAddr, Ipv4Addr};

use super::{
    kernel_counted::KernelCounted,
    metrics::{BuildInfo, Metrics},
    report::{of_events, Facts},
    stall::StallTally,
    top::{model_of, totals, RowStats},
};
use crate::{
    backends::{self, Backend},
    events::{
        counts::{Health, KernelCounts},
        sample_event, Event, Outcome, Role,
    },
};

/// A client event of one connection (or told alongside one) to 198.18.0.`host`.
fn client(outcome: Outcome, host: u8, data: u32, stall_us: u64, retransmits: u32) -> Event {
    Event {
        daddr: IpAddr::V4(Ipv4Addr::new(198, 18, 0, host)),
        syn_data_bytes: data,
        retransmits,
        stall_us,
        handshake_us: Some(900 + stall_us),
        ..sample_event(Role::Client, outcome)
    }
}

/// The events of every (role, outcome) `backend` reports, as its hooks tell them: each
/// client connection's own outcome event, and beside some of them the events that are
/// told alongside a connection (the cookie its SYN-ACK brought, blackhole detection, a
/// server child's SYN-ACK resent), carrying that connection's stall again.
fn events_of(backend: Backend) -> Vec<Event> {
    let mut out = Vec::new();
    for role in Role::ALL {
        for o in Outcome::ALL.into_iter().filter(|&o| backends::sees(backend, role, o)) {
            let before = out.len();
            let host = o as u8;
            match (role, o) {
                (Role::Client, Outcome::CookieRequested) => {
                    out.push(client(o, host, 0, 0, 0));
                    out.push(client(o, host, 0, 1_010_000, 1));
                }
                (Role::Client, Outcome::Accepted) => {
                    out.push(client(o, host, 64, 0, 0));
                    out.push(client(o, host, 64, 0, 0));
                    // The SYN-data got through, its SYN-ACK was lost: a stall.
                    out.push(client(o, host, 64, 1_000_000, 1));
                }
                (Role::Client, Outcome::DataNotAcked) => {
                    out.push(client(o, host, 64, 0, 0));
                    out.push(client(o, host, 64, 0, 0));
                }
                (Role::Client, Outcome::SynRetransmitted) => {
                    out.push(client(o, host, 64, 1_020_000, 1));
                    out.push(client(o, host, 64, 1_030_000, 1));
                    out.push(client(o, host, 0, 1_005_000, 1));
                }
                (Role::Client, Outcome::ConnectFailed) => {
                    out.push(client(o, host, 64, 3_000_000, 3));
                    out.push(client(o, host, 64, 0, 0));
                }
                (Role::Client, Outcome::NotAttempted) => out.push(client(o, host, 64, 0, 0)),
                (Role::Client, Outcome::CookieSentNoData) => out.push(client(o, host, 0, 0, 0)),
                // Told alongside the accepted connections above: one cookie each.
                (Role::Client, Outcome::CookieReceived) => {
                    let accepted = Outcome::Accepted as u8;
                    out.push(client(o, accepted, 0, 0, 0));
                    out.push(client(o, accepted, 0, 0, 0));
                    out.push(client(o, accepted, 0, 1_000_000, 1));
                }
                // Decided while the first SYN-data above timed out: its stall again.
                (Role::Client, Outcome::ActiveDisabled) => {
                    out.push(client(o, Outcome::SynRetransmitted as u8, 64, 1_020_000, 1))
                }
                (Role::Server, Outcome::SynackRetransmitted) => {
                    for _ in 0..2 {
                        out.push(Event { retransmits: 1, ..sample_event(role, o) });
                    }
                }
                (Role::Server, _) => out.push(sample_event(role, o)),
                (Role::Client, _) => panic!("no events made for client {o:?}: add them here"),
            }
            assert!(out.len() > before, "no events made for {role:?} {o:?}");
        }
    }
    out
}

/// Client connections (14), the stalled ones (6) and the time they lost, as built above.
const CONNECTIONS: u64 = 2 + 3 + 2 + 3 + 2 + 1 + 1;
const STALLS: u64 = 1 + 1 + 3 + 1;
const LOST_US: u64 = 1_010_000 + 1_000_000 + 1_020_000 + 1_030_000 + 1_005_000 + 3_000_000;
/// Server connections: one SYN each, the SYN-ACKs resent not among them.
const SERVER_CONNECTIONS: u64 = 7;

/// The value of one exposition sample line (name and labels, exactly).
fn sample(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {series} in\n{text}"))
}

#[test]
fn every_view_counts_the_same_connections_stalls_and_time_lost() {
    let events = events_of(Backend::Fentry);
    let want = (CONNECTIONS, STALLS, LOST_US);

    // top: the totals from the events, the rows, and the totals from the kernel's counts.
    let snap = model_of(&events).snapshot();
    assert_eq!((snap.client.attempts, snap.client.stalls, snap.client.stall_us), want, "top");
    let rows = &snap.destinations.rows;
    let sum = |f: fn(&RowStats) -> u64| rows.iter().map(|r| f(&r.stats)).sum::<u64>();
    assert_eq!((sum(|s| s.attempts), sum(|s| s.stalls), sum(|s| s.stall_us)), want, "top's rows");
    assert_eq!(snap.server.attempts, SERVER_CONNECTIONS, "top's server");
    let mut counts = KernelCounts::default();
    events.iter().for_each(|e| counts.add_event(e));
    let none = KernelCounted::default();
    let kernel = totals::row(&counts, &none, Some(Role::Client), &snap.client);
    assert_eq!((kernel.attempts, kernel.stalls, kernel.stall_us), want, "top from the kernel's counts");
    assert_eq!(totals::row(&counts, &none, Some(Role::Server), &snap.server).attempts, SERVER_CONNECTIONS);

    // stalls: what its lines and its closing count are made of.
    let mut stalls = StallTally::default();
    for e in &events {
        stalls.add(e);
    }
    assert_eq!((stalls.stalls.count(), stalls.stalls.lost_us()), (STALLS, LOST_US), "stalls");

    // report.
    let s = of_events(&events, &Facts::default()).summary;
    assert_eq!((s.connections, s.stalled, s.lost_us_total), want, "report");

    // export: the connection series of the outcomes that end a connection, and the time lost.
    let build = BuildInfo { version: "0".into(), backend: Backend::Fentry, kernel: "6.12".into() };
    let metrics = Metrics::new(&build, None);
    metrics.set_kernel(counts, Health::default());
    let text = metrics.encode();
    let connections = |role: Role| -> u64 {
        Outcome::ALL
            .into_iter()
            .filter(|o| o.ends_connection() && backends::sees(Backend::Fentry, role, *o))
            .map(|o| {
                let series = format!(
                    r#"tfo_trace_connections_total{{role="{}",outcome="{}"}}"#,
                    role.name(),
                    o.name()
                );
                sample(&text, &series) as u64
            })
            .sum()
    };
    assert_eq!(connections(Role::Client), CONNECTIONS, "export");
    assert_eq!(connections(Role::Server), SERVER_CONNECTIONS, "export's server");
    let lost_s = sample(&text, "tfo_trace_stall_seconds_total");
    assert!((lost_s * 1e6 - LOST_US as f64).abs() < 0.5, "export: {lost_s} s");
}
