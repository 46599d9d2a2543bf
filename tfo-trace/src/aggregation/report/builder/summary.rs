//! The report's answer first: its totals ([`Summary`], per host and the worst rows) and
//! the rows beyond `--top` summed ([`Rest`]).
use std::collections::{BTreeMap, HashSet};

use serde::Serialize;

use super::built::{Built, Groups, Totals, WORST};
use crate::aggregation::report::{
    grouping::{GroupBy, GroupKey},
    verdict::{Kind, Strength},
};
use crate::aggregation::stall::Cause;

/// One host's totals, for the summary.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct HostTotals {
    pub host: String,
    /// Client connections, the stalled ones, the time they lost, extra round trips.
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
    /// `data_not_acked`: not stalls, one extra round trip each, estimated.
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

impl Built {
    pub(super) fn summarize(&self, kinds: &[Kind]) -> Summary {
        let a = &self.b.all;
        let balance = a.balance();
        let mut verdicts = BTreeMap::new();
        for k in kinds {
            *verdicts.entry(*k).or_insert(0u64) += 1;
        }
        let destinations = if self.b.group.by.by_destination() {
            self.b.cells.len() as u64
        } else {
            self.b.cells.keys().map(|k| k.dest).collect::<HashSet<_>>().len() as u64
        };
        let by_cause = |f: &dyn Fn(Cause) -> u64| -> BTreeMap<Cause, u64> {
            a.stalls.causes().map(|c| (c, f(c))).collect()
        };
        let worst = self.ranked[..self.ranked.len().min(WORST)]
            .iter()
            .map(|&g| {
                let g = g as usize;
                let t = self.totals(g);
                let acc = self.acc(g);
                let (showing, of) = kinds[g].shown_by(&acc);
                WorstRow {
                    group: self.key(g).label(|t| self.name(t)),
                    kind: kinds[g],
                    strength: Strength::of(showing, of),
                    connections: t.connections,
                    stalled: t.stalled,
                    lost_us_total: t.lost_us,
                    extra_round_trip_us: t.extra_round_trip_us,
                }
            })
            .collect();
        Summary {
            group_by: self.b.group.by,
            events: self.b.events,
            connections: a.connections(),
            destinations,
            groups: self.len() as u64,
            shown: self.shown as u64,
            unnamed_groups: match &self.groups {
                Groups::Spans { spans, .. } if self.b.group.by == GroupBy::Name => {
                    Some(spans.iter().filter(|s| matches!(s.key, GroupKey::Destination(_))).count() as u64)
                }
                _ => None,
            },
            server_events: self.b.server_events,
            listeners: self.b.listeners.len() as u64,
            verdicts,
            stalled: a.stalled(),
            lost_us_total: a.lost_us_total(),
            stalls_by_cause: by_cause(&|c| a.stalls_of(c)),
            lost_us_by_cause: by_cause(&|c| a.lost_us_of(c)),
            extra_round_trips: a.extra_round_trips(),
            extra_round_trip_us: a.extra_round_trip_us,
            saved_us_total: balance.saved_us,
            saved_measured: balance.saves,
            net_us: balance.net_us(),
            hosts: self
                .b
                .hosts
                .iter()
                .zip(&self.b.host_acc)
                .map(|(h, (a, server))| HostTotals {
                    host: h.clone(),
                    connections: a.connections(),
                    stalled: a.stalled(),
                    lost_us_total: a.lost_us_total(),
                    extra_round_trips: a.extra_round_trips(),
                    server_events: *server,
                })
                .collect(),
            worst,
        }
    }

    /// All rows minus the shown ones.
    pub(super) fn rest(&self, kinds: &[Kind]) -> Option<Rest> {
        let n = self.len();
        if self.shown >= n {
            return None;
        }
        let all = Totals::of(&self.b.all);
        let mut rest = Rest {
            groups: (n - self.shown) as u64,
            connections: all.connections,
            stalled: all.stalled,
            lost_us_total: all.lost_us,
            extra_round_trips: all.extra_round_trips,
            extra_round_trip_us: all.extra_round_trip_us,
            verdicts: self.summary.verdicts.clone(),
        };
        for &g in &self.ranked[..self.shown] {
            let t = self.totals(g as usize);
            rest.connections = rest.connections.saturating_sub(t.connections);
            rest.stalled = rest.stalled.saturating_sub(t.stalled);
            rest.lost_us_total = rest.lost_us_total.saturating_sub(t.lost_us);
            rest.extra_round_trips = rest.extra_round_trips.saturating_sub(t.extra_round_trips);
            rest.extra_round_trip_us = rest.extra_round_trip_us.saturating_sub(t.extra_round_trip_us);
            if let Some(v) = rest.verdicts.get_mut(&kinds[g as usize]) {
                *v -= 1;
            }
        }
        rest.verdicts.retain(|_, v| *v > 0);
        Some(rest)
    }
}
