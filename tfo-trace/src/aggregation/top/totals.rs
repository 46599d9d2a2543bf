//! `top`'s header totals: from the events ([`super::TopModel::event_totals`]), or from the
//! kernel's counts rather than from the events that arrived ([`row`]): the same columns,
//! exact when the reader fell behind and events were lost; with the outcomes no hook of
//! the backend sees taken from the namespaces' own counters.
use crate::events::{counts::KernelCounts, Role};

use super::table::{GroupStats, RowStats};
use crate::aggregation::{kernel_counted::KernelCounted, stall};

/// The header's numbers: every event (including those of evicted groups), and each role.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Totals {
    pub total: RowStats,
    pub client: RowStats,
    pub server: RowStats,
}

/// The kernel's counts of one role (or both) as a row of `top`, with what its namespace
/// counters counted that no hook sees (`counted`). Handshake quantiles are not in the
/// kernel's coarse histogram's resolution: they stay those of the events.
pub(crate) fn row(
    counts: &KernelCounts,
    counted: &KernelCounted,
    role: Option<Role>,
    from_events: &RowStats,
) -> RowStats {
    let mut g = GroupStats::default();
    for (_, r, o, c) in counts.iter() {
        if role.is_some_and(|want| want != r) {
            continue;
        }
        g.outcomes.add_n(o, c.events);
        if stall::row_counts(r, o) {
            g.stalls += c.stalls;
            g.stall_us += c.stall_ns / 1000;
        }
        if r == Role::Client {
            g.retransmits += c.retransmits;
        }
        g.saved_us += c.saved_ns / 1000;
        // Every such connection's handshake is in the sum, as the events give it.
        if stall::extra_round_trip_of(r, o, None).is_some() {
            g.extra_round_trip_us += c.handshake_ns / 1000;
        }
    }
    // After the hooks' counts: some of what they report as one outcome was another.
    for r in counted.rows.iter().filter(|r| role.is_none_or(|want| want == r.role)) {
        g.outcomes.add_n(r.outcome, r.count);
        if let Some(of) = r.within {
            g.outcomes.take_n(of, r.count);
        }
    }
    // Percentiles and causes are the events' (the kernel counts neither).
    RowStats {
        p50_us: from_events.p50_us,
        p99_us: from_events.p99_us,
        refusal_cause: from_events.refusal_cause,
        ..g.row()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        aggregation::top::TopModel,
        events::{sample_event, Outcome},
    };

    #[test]
    fn kernel_totals_match_the_event_totals_when_nothing_is_lost() {
        let events = [
            crate::events::Event { saved_us: Some(731), ..sample_event(Role::Client, Outcome::Accepted) },
            sample_event(Role::Client, Outcome::CookieRequested),
            crate::events::Event {
                handshake_us: Some(420),
                ..sample_event(Role::Client, Outcome::DataNotAcked)
            },
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
        // Net as `report` weighs it: the saving less the stall; the refused SYN-data's
        // round trip (its handshake) is a gain forgone, apart.
        assert_eq!((snap.client.extra_round_trip_us, snap.client.net_us), (420, 731 - 1_020_000));
        let none = KernelCounted::default();
        assert_eq!(row(&counts, &none, None, &snap.total), snap.total);
        assert_eq!(row(&counts, &none, Some(Role::Client), &snap.client), snap.client);
        assert_eq!(row(&counts, &none, Some(Role::Server), &snap.server), snap.server);
        // One more accepted connection the kernel counted but whose event was lost.
        counts.add_event(&sample_event(Role::Client, Outcome::Accepted));
        assert_eq!(row(&counts, &none, Some(Role::Client), &snap.client).accepted, snap.client.accepted + 1);
    }

    #[test]
    fn outcomes_no_hook_sees_come_from_the_namespace_counters() {
        use crate::aggregation::kernel_counted::CountedRow;
        let mut counts = KernelCounts::default();
        for _ in 0..3 {
            counts.add_event(&sample_event(Role::Server, Outcome::Accepted));
        }
        let row_of = |outcome, count, counter, within| CountedRow {
            netns: 7,
            role: Role::Server,
            outcome,
            count,
            counter,
            within,
        };
        let counted = KernelCounted {
            rows: vec![
                row_of(Outcome::QueueOverflow, 2, "TcpExtTCPFastOpenListenOverflow", None),
                row_of(Outcome::AcceptedAltKey, 1, "TcpExtTCPFastOpenPassiveAltKey", Some(Outcome::Accepted)),
            ],
            ..KernelCounted::default()
        };
        let server = row(&counts, &counted, Some(Role::Server), &RowStats::default());
        assert_eq!(server.queue_overflows, 2);
        assert_eq!(server.backup_key_hits, 1);
        assert_eq!(server.accepted, 3, "two on the primary key, one on the backup");
        assert_eq!(row(&counts, &counted, Some(Role::Client), &RowStats::default()).queue_overflows, 0);
    }
}
