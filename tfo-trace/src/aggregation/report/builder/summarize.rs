//! The report's answer first, computed: [`Built::summarize`] totals a finished report
//! into its [`Summary`].
use std::collections::{BTreeMap, HashSet};

use super::{
    built::{Built, Groups, Totals, WORST},
    summary::{HostTotals, Rest, Summary, WorstRow},
};
use crate::aggregation::report::{
    grouping::{GroupBy, GroupKey},
    verdict::{Kind, Strength},
};
use crate::aggregation::stall::Cause;

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
