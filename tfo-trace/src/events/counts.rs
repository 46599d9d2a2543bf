//! What the kernel counted (its per-CPU `COUNTS` table, summed), as plain data: the totals
//! `export` and `top` show, exact whether or not the event stream kept up.
use std::collections::BTreeMap;

use serde::Serialize;
use tfo_trace_common::{CountKey, Counts};

use super::{Event, Outcome, Role};

/// A snapshot of the kernel's `COUNTS` table: one row per namespace, role and outcome.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct KernelCounts {
    pub rows: BTreeMap<CountKey, Counts>,
}

impl KernelCounts {
    /// The rows of known roles and outcomes (a row the kernel made for a number this build
    /// does not know is skipped: a mismatch, never a panic).
    pub fn iter(&self) -> impl Iterator<Item = (u32, Role, Outcome, &Counts)> {
        self.rows
            .iter()
            .filter_map(|(k, c)| Some((k.netns, Role::from_u8(k.role)?, Outcome::from_u8(k.outcome)?, c)))
    }

    /// The rows of these namespaces only (all when `netns` is empty).
    pub fn only_netns(&self, netns: &[u32]) -> KernelCounts {
        if netns.is_empty() {
            return self.clone();
        }
        KernelCounts {
            rows: self.rows.iter().filter(|(k, _)| netns.contains(&k.netns)).map(|(k, c)| (*k, *c)).collect(),
        }
    }

    /// One role and outcome, summed over every namespace.
    pub fn total(&self, role: Role, outcome: Outcome) -> Counts {
        let mut t = Counts::zeroed();
        for (_, r, o, c) in self.iter() {
            if r == role && o == outcome {
                t.add(c);
            }
        }
        t
    }

    /// One role, every outcome, every namespace.
    pub fn role_total(&self, role: Role) -> Counts {
        let mut t = Counts::zeroed();
        for (_, r, _, c) in self.iter() {
            if r == role {
                t.add(c);
            }
        }
        t
    }

    /// Counts an event as the kernel's `count()` does (tests, and recordings replayed
    /// where no kernel counted).
    pub fn add_event(&mut self, e: &Event) {
        let key = CountKey { netns: e.netns, role: e.role as u8, outcome: e.outcome as u8, _pad: 0 };
        let row = self.rows.entry(key).or_insert_with(Counts::zeroed);
        row.events += 1;
        if e.stall_us > 0 || e.retransmits > 0 {
            row.stalls += 1;
            row.stall_ns += e.stall_us * 1000;
        }
        row.syn_data_bytes += u64::from(e.syn_data_bytes);
        row.retransmits += u64::from(e.retransmits);
        if let Some(us) = e.saved_us {
            row.saves += 1;
            row.saved_ns += us * 1000;
        }
        if let Some(us) = e.handshake_us {
            let ns = us * 1000;
            row.handshake_ns += ns;
            row.handshakes += 1;
            row.handshake_buckets[tfo_trace_common::handshake_bucket(ns)] += 1;
        }
    }
}

/// The kernel's running totals of everything that can leave the other series short (or
/// without detail); what every view's closing line reports, as counters a fleet can alert
/// on. Each only grows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Health {
    /// Events the ring buffer could not take (the kernel still counted them).
    pub events_lost: u64,
    /// Program runs the kernel skipped (a hook hit again while the same program was running
    /// on that CPU): the outcomes they would have decided are neither counted nor sent.
    pub hook_runs_missed: u64,
    /// TFO connects the kernel could not follow (map entry refused): still counted, but
    /// their events lack process and timing.
    pub connects_unfollowed: u64,
    /// Outcomes not counted because the kernel's table of namespaces was full.
    pub outcomes_uncounted: u64,
}

impl Health {
    /// Each total the larger of the two, so that a counter never goes back.
    pub fn never_less(self, o: Health) -> Health {
        Health {
            events_lost: self.events_lost.max(o.events_lost),
            hook_runs_missed: self.hook_runs_missed.max(o.hook_runs_missed),
            connects_unfollowed: self.connects_unfollowed.max(o.connects_unfollowed),
            outcomes_uncounted: self.outcomes_uncounted.max(o.outcomes_uncounted),
        }
    }
}
