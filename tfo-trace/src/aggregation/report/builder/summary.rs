//! The report's answer first: its totals ([`Summary`], per host and the worst rows) and
//! the rows beyond `--top` summed ([`Rest`]).
use std::collections::BTreeMap;

use serde::Serialize;

use crate::aggregation::report::{
    grouping::GroupBy,
    verdict::{Kind, Strength},
};
use crate::aggregation::stall::Cause;

/// One host's totals, for the summary.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct HostTotals {
    pub host: String,
    /// Client connections, the stalled ones, the time they lost, refused SYN-data.
    pub connections: u64,
    pub stalled: u64,
    pub lost_us_total: u64,
    pub extra_round_trips: u64,
    pub server_events: u64,
}

/// One of the worst rows, in the summary.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct WorstRow {
    pub group: String,
    pub kind: Kind,
    pub strength: Strength,
    pub connections: u64,
    pub stalled: u64,
    pub lost_us_total: u64,
    pub extra_round_trip_us: u64,
}

/// The answer first: the report's totals.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Summary {
    pub group_by: GroupBy,
    pub events: u64,
    /// Client connections (one event each) and the destinations they went to.
    pub connections: u64,
    pub destinations: u64,
    /// Client-side rows (destinations, or groups with `--group-by`), and how many are shown.
    pub groups: u64,
    pub shown: u64,
    /// `--group-by name`: of `groups`, the rows that are one address because its
    /// connections carried no DNS name (they keep their destination's row); absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unnamed_groups: Option<u64>,
    pub server_events: u64,
    pub listeners: u64,
    /// Client-side rows by verdict kind.
    pub verdicts: BTreeMap<Kind, u64>,
    /// Stalled connections (SYN timeouts) and the time they lost, in all and by cause.
    pub stalled: u64,
    pub lost_us_total: u64,
    pub stalls_by_cause: BTreeMap<Cause, u64>,
    pub lost_us_by_cause: BTreeMap<Cause, u64>,
    /// `data_not_acked`: not stalls and no time lost against no TFO; the round trip a
    /// working TFO saves, forgone, each (estimated by its handshake): not in `net_us`.
    pub extra_round_trips: u64,
    pub extra_round_trip_us: u64,
    /// What accepted SYN-data saved (the kernel's round trips, over `saved_measured`
    /// connections), and saved less lost (stalls and extra round trips).
    pub saved_us_total: u64,
    pub saved_measured: u64,
    pub net_us: i64,
    /// Per host (recording), in the order they were read.
    pub hosts: Vec<HostTotals>,
    /// The rows that lost the most time (the first of the ranking).
    pub worst: Vec<WorstRow>,
}

/// The rows not shown, summed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Rest {
    pub groups: u64,
    pub connections: u64,
    pub stalled: u64,
    pub lost_us_total: u64,
    pub extra_round_trips: u64,
    pub extra_round_trip_us: u64,
    pub verdicts: BTreeMap<Kind, u64>,
}
