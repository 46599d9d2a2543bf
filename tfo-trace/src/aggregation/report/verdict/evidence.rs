//! What every verdict rests on, whichever its row: the counts behind it ([`Support`]),
//! the verdict with its figures ([`Verdict`]), and the shares of hosts and addresses.
use std::collections::BTreeMap;

use serde::Serialize;

use super::classify::{Kind, Strength};
use crate::aggregation::report::connections::ConnAcc;

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

/// A row's verdict: which, how strong, and the figures (`F`: [`super::client::ClientFigures`],
/// [`super::listener::ListenerFigures`], [`super::namespace::NamespaceFigures`]) its sentence and evidence are said from.
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
