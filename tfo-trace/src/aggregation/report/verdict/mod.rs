//! Verdicts for `tfo-trace report`: per destination or group of them (client side) and per
//! listener (server side), the counts by outcome, the time TFO cost, which verdict and how
//! strong it is ([`Strength`]: how many connections, destinations and hosts show it), and
//! the figures its evidence rests on. Pure: counts (gathered by [`super::builder`]) and
//! kernel facts ([`super::facts`]) in, rows out. [`classify`] decides the verdict;
//! [`client`], [`listener`] and [`namespace`] gather each row's figures. No sentence is
//! written here: `views/report/verdict` says each kind in words.
//!
//! The facts the kernel gives are used where they exist: `ip tcp_metrics` (fo_syn_drops and
//! the cached cookie per destination), counter deltas per namespace
//! (TcpExtTCPFastOpenListenOverflow, PassiveFail, PassiveAltKey), listener TFO queue sizes
//! (max_qlen) and somaxconn, and whether a backup key is set.
//!
//! What the running backend cannot see cannot become an event verdict: on the tracepoint
//! backend (this project's host, Linux 6.18 without fentry or kprobes) the server outcomes
//! `queue_overflow`, `cookie_invalid`, `accepted_alt_key` and `listener_disabled` never
//! appear, so the verdicts built on them are unit-tested on synthetic events; on that
//! backend the namespace's counters stand in ([`NamespaceFinding`]).
pub(crate) mod classify;
pub(crate) mod client;
pub(crate) mod listener;
pub(crate) mod namespace;

use std::collections::BTreeMap;

use serde::Serialize;

pub(crate) use self::{
    classify::{Kind, Strength},
    client::{client_report, ClientFigures, ClientRow},
    listener::{listener_row, ListenerFigures},
    namespace::{cached_drops, namespace_findings, CachedDrops, Counted, NamespaceFigures},
};
use super::connections::ConnAcc;

/// What a verdict rests on, in counts.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Support {
    /// Connections (or, for a namespace's counters, counted events) that show the verdict,
    /// and how many could have.
    pub connections: u64,
    pub of_connections: u64,
    /// Client side: destinations that show it, of the row's destinations.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub destinations: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub of_destinations: Option<u64>,
    /// Hosts (recordings) that show it, of those that had connections in the row.
    pub hosts: u64,
    pub of_hosts: u64,
}

/// A row's verdict: which, how strong, and the figures (`F`: [`ClientFigures`],
/// [`ListenerFigures`], [`NamespaceFigures`]) its sentence and evidence are said from.
#[derive(Clone, Debug, PartialEq)]
pub struct Verdict<F> {
    pub kind: Kind,
    /// weak, moderate or strong ([`Strength::of`] on `support`).
    pub strength: Strength,
    pub support: Support,
    pub figures: F,
}

/// One host's share of a row.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct HostShare {
    pub host: String,
    /// Its connections in the row (server side: events), and how many of them show the verdict.
    pub connections: u64,
    pub showing: u64,
    pub stalled: u64,
    pub lost_us_total: u64,
}

/// How many of a row's DNS names are listed (`names`); the others are counted
/// (`more_names`).
pub(crate) const NAMES_SHOWN: usize = 3;

/// One address of a DNS name's row (`--group-by name`), with its own counts.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct AddressShare {
    /// `198.18.0.3:8080`, and the client's namespace (on one host; null across hosts).
    pub address: String,
    pub netns: Option<u32>,
    pub connections: u64,
    pub outcomes: BTreeMap<String, u64>,
    /// Of its connections, how many show the row's verdict, of how many could.
    pub showing: u64,
    pub of: u64,
    pub stalled: u64,
    pub lost_us_total: u64,
    pub extra_round_trips: u64,
    pub extra_round_trip_us: u64,
}

impl AddressShare {
    /// `shows` of `of`: [`Kind::shown_by`] of the row's verdict on `a`.
    pub fn of(address: String, netns: Option<u32>, a: &ConnAcc, shows: u64, of: u64) -> AddressShare {
        AddressShare {
            address,
            netns,
            connections: a.connections(),
            outcomes: a.outcomes(),
            showing: shows,
            of,
            stalled: a.stalled(),
            lost_us_total: a.lost_us_total(),
            extra_round_trips: a.extra_round_trips(),
            extra_round_trip_us: a.extra_round_trip_us,
        }
    }
}

/// Client side: one destination in one namespace, or one group of them (`--group-by`).
/// Its JSON is the view's (`views/report/json.rs`), with the verdict said in words last.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DestinationReport {
    /// The row's name: the destination (`198.18.0.2:8080`), or the group's (`198.18.0.0/24`,
    /// `port 443`, `process curl`, `container 3f2a9c1b0d4e`).
    pub destination: String,
    /// The same name, under the name every grouping shares.
    pub group: String,
    /// The client's namespace (grouping by destination on one host; null otherwise).
    pub netns: Option<u32>,
    /// Destinations in the row (1 when grouping by destination).
    pub destinations: u64,
    /// The DNS names the clients resolved to the row's addresses (`--names`, `Event::dname`),
    /// the most connected-to first: at most [`NAMES_SHOWN`], `more_names` counting the
    /// others. Empty where no event of the row carried a name.
    pub names: Vec<String>,
    pub more_names: u64,
    /// `--group-by name`: each address of the name, with its own counts, the most time lost
    /// first (absent in other groupings).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub addresses: Vec<AddressShare>,
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
    /// Those refusals by what their SYN-ACK said (a new cookie: the destination handed out
    /// another one), and the most in a row.
    pub refusals: crate::aggregation::refusals::RefusalFigures,
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
    /// What the accepted SYN-data saved: the sum of the round trips the kernel measured,
    /// over `saved_measured` of the `accepted` connections (a recording made before events
    /// carried `saved_us` measured none).
    pub saved_us_total: u64,
    pub saved_measured: u64,
    /// Saved less lost: `saved_us_total` less `lost_us_total` and `extra_round_trip_us`.
    pub net_us: i64,
    /// How many accepted connections repay one stall at the measured round trip (null
    /// without a stall or a measured saving).
    pub break_even_accepted_per_stall: Option<u64>,
    /// Each host's share, the most affected first.
    pub hosts: Vec<HostShare>,
    #[serde(skip)]
    pub verdict: Verdict<ClientFigures>,
}

/// Server side, one listening port in one namespace (in a report of several hosts: one
/// port on all of them). Its JSON is the view's, as for [`DestinationReport`].
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ListenerReport {
    pub listener: String,
    pub netns: Option<u32>,
    pub outcomes: BTreeMap<String, u64>,
    pub max_qlen: Option<u32>,
    pub hosts: Vec<HostShare>,
    #[serde(skip)]
    pub verdict: Verdict<ListenerFigures>,
}

/// From a namespace's counters, for what the backend's events cannot show: counted by
/// the kernel, never attributed to a listener or a process.
#[derive(Clone, Debug, PartialEq)]
pub struct NamespaceFinding {
    pub netns: u32,
    pub verdict: Verdict<NamespaceFigures>,
    /// Where its counts come from: [`super::kernel_counted::SOURCE`], or `events` (a
    /// pause that a hook's `active_disabled` events tell).
    pub source: &'static str,
    /// `active_tfo_paused`: the pauses' figures (which connection tripped each, when it
    /// ends, the connections left without TFO by destination).
    pub pause: Option<crate::aggregation::blackhole::PauseSummary>,
}

/// Events as the tests of the verdicts build them.
#[cfg(test)]
pub(crate) mod fixtures {
    use std::net::SocketAddr;

    use crate::events::{Event, Timestamp};

    pub(crate) const NS_CLI: u32 = 4026532177;
    pub(crate) const NS_SRV: u32 = 4026532246;

    /// Built from JSON so fields other work adds to Event (as Options) need no edit here.
    pub(crate) fn ev(role: &str, outcome: &str, dst: &str, data: u32, stall_us: u64, t_ms: u64) -> Event {
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
        e.ts = Timestamp::from_unix_ns(u128::from(t_ms) * 1_000_000);
        e
    }

    pub(crate) fn cli(outcome: &str, dst: &str, data: u32, stall_us: u64, t: u64) -> Event {
        ev("client", outcome, dst, data, stall_us, t)
    }

    pub(crate) fn srv(outcome: &str, t: u64) -> Event {
        ev("server", outcome, "198.18.0.2:81", 64, 0, t)
    }
}
