//! What the kernel counted (its per-CPU `COUNTS` table, summed), as plain data: the totals
//! `export` and `top` show, exact whether or not the event stream kept up.
use std::collections::BTreeMap;

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
        if let Some(us) = e.handshake_us {
            let ns = us * 1000;
            row.handshake_ns += ns;
            row.handshakes += 1;
            row.handshake_buckets[tfo_trace_common::handshake_bucket(ns)] += 1;
        }
    }
}
