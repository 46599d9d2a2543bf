//! `top`'s totals from the kernel's counts rather than from the events that arrived: the
//! same columns, exact when the reader fell behind and events were lost.
use crate::events::{counts::KernelCounts, Role};

use super::table::{GroupStats, RowStats};

/// The kernel's counts of one role (or both) as a row of `top`. Handshake quantiles are
/// not in the kernel's coarse histogram's resolution: they stay those of the events.
pub fn row(counts: &KernelCounts, role: Option<Role>, from_events: &RowStats) -> RowStats {
    let mut g = GroupStats::default();
    for (_, r, o, c) in counts.iter() {
        if role.is_some_and(|want| want != r) {
            continue;
        }
        // GroupStats indexes outcomes like Outcome::ALL: by wire number - 1.
        g.outcomes[o as usize - 1] += c.events;
        if super::stall::row_counts(r, o) {
            g.stalls += c.stalls;
            g.stall_us += c.stall_ns / 1000;
        }
        if r == Role::Client {
            g.retransmits += c.retransmits;
        }
    }
    RowStats { p50_us: from_events.p50_us, p99_us: from_events.p99_us, ..g.row() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        aggregation::table::TopModel,
        events::{sample_event, Outcome},
    };

    #[test]
    fn kernel_totals_match_the_event_totals_when_nothing_is_lost() {
        let events = [
            sample_event(Role::Client, Outcome::Accepted),
            sample_event(Role::Client, Outcome::CookieRequested),
            crate::events::Event {
                stall_us: 1_020_000,
                retransmits: 1,
                syn_data_bytes: 64,
                ..sample_event(Role::Client, Outcome::SynRetransmitted)
            },
            sample_event(Role::Server, Outcome::Accepted),
        ];
        let mut model = TopModel::new(100);
        let mut counts = KernelCounts::default();
        for e in &events {
            model.add(e);
            counts.add_event(e);
        }
        let snap = model.snapshot();
        assert_eq!(row(&counts, None, &snap.total), snap.total);
        assert_eq!(row(&counts, Some(Role::Client), &snap.client), snap.client);
        assert_eq!(row(&counts, Some(Role::Server), &snap.server), snap.server);
        // One more accepted connection the kernel counted but whose event was lost.
        counts.add_event(&sample_event(Role::Client, Outcome::Accepted));
        assert_eq!(row(&counts, Some(Role::Client), &snap.client).accepted, snap.client.accepted + 1);
    }
}
