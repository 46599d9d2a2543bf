//! Pure counting over decoded events: no I/O, so every view and test can share it.
#[cfg(test)]
mod agreement;
pub mod connections;
pub mod grouping;
pub mod kernel_counted;
pub mod metrics;
pub mod quantiles;
pub mod rates;
pub mod report;
pub mod stall;
pub mod table;
pub mod totals;
pub mod verdict;

use std::collections::BTreeMap;

use crate::events::{Event, Outcome, Role};

/// Counts of one group of connections (a destination, a listener, a process, a namespace).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    pub by_outcome: BTreeMap<(Role, Outcome), u64>,
    pub syn_data_bytes: u64,
    /// Stalled connections and the time they lost ([`stall`]).
    pub stalls: u64,
    pub stall_us_total: u64,
    /// Client SYN-data that was not acknowledged, with or without a SYN timeout first: the
    /// events tcp_rcv_fastopen_synack() counts as TcpExtTCPFastOpenActiveFail.
    pub active_fail: u64,
}

impl Tally {
    pub fn add(&mut self, e: &Event) {
        *self.by_outcome.entry((e.role, e.outcome)).or_default() += 1;
        // Saturating: a recording may hold any numbers (the replay fuzz target found this).
        self.syn_data_bytes = self.syn_data_bytes.saturating_add(u64::from(e.syn_data_bytes));
        if let Some(s) = stall::of(e) {
            self.stalls += 1;
            self.stall_us_total = self.stall_us_total.saturating_add(s.lost_us);
        }
        let data_unacked = e.outcome == Outcome::DataNotAcked
            || (e.outcome == Outcome::SynRetransmitted && e.syn_data_bytes > 0);
        if e.role == Role::Client && data_unacked {
            self.active_fail += 1;
        }
    }

    pub fn count(&self, role: Role, outcome: Outcome) -> u64 {
        self.by_outcome.get(&(role, outcome)).copied().unwrap_or(0)
    }

    pub fn total(&self) -> u64 {
        self.by_outcome.values().sum()
    }
}

/// Tallies keyed by something derived from each event.
#[derive(Clone, Debug, Default)]
pub struct GroupedTally<K: Ord> {
    pub groups: BTreeMap<K, Tally>,
    pub total: Tally,
}

impl<K: Ord> GroupedTally<K> {
    pub fn add(&mut self, key: K, e: &Event) {
        self.groups.entry(key).or_default().add(e);
        self.total.add(e);
    }
}

/// Per network namespace: what the tests compare with each namespace's nstat counters.
pub fn by_netns<'a>(events: impl IntoIterator<Item = &'a Event>) -> GroupedTally<u32> {
    let mut t = GroupedTally::default();
    for e in events {
        t.add(e.netns, e);
    }
    t
}

/// Per destination (client side): `198.18.0.2:8080`.
pub fn by_destination<'a>(events: impl IntoIterator<Item = &'a Event>) -> GroupedTally<String> {
    let mut t = GroupedTally::default();
    for e in events.into_iter().filter(|e| e.role == Role::Client) {
        t.add(e.destination(), e);
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::sample_event;
    use std::net::{IpAddr, Ipv4Addr};

    fn ev(role: Role, outcome: Outcome, netns: u32, dport: u16, stall_us: u64, data: u32) -> Event {
        Event {
            sport: 1000,
            daddr: IpAddr::V4(Ipv4Addr::new(198, 18, 0, 2)),
            dport,
            netns,
            syn_data_bytes: data,
            retransmits: u32::from(stall_us > 0),
            stall_us,
            ..sample_event(role, outcome)
        }
    }

    #[test]
    fn counts_per_namespace_and_destination() {
        let events = vec![
            ev(Role::Client, Outcome::CookieRequested, 1, 80, 0, 0),
            ev(Role::Client, Outcome::Accepted, 1, 80, 0, 10),
            ev(Role::Client, Outcome::SynRetransmitted, 1, 81, 1_020_000, 10),
            ev(Role::Server, Outcome::Accepted, 2, 80, 0, 10),
        ];
        let ns = by_netns(&events);
        assert_eq!(ns.groups[&1].count(Role::Client, Outcome::Accepted), 1);
        assert_eq!(ns.groups[&1].total(), 3);
        assert_eq!(ns.groups[&2].count(Role::Server, Outcome::Accepted), 1);
        assert_eq!(ns.total.stalls, 1);
        assert_eq!(ns.total.stall_us_total, 1_020_000);
        assert_eq!(ns.total.syn_data_bytes, 30);

        let dst = by_destination(&events);
        assert_eq!(dst.groups.len(), 2, "server events are not destinations");
        assert_eq!(dst.groups["198.18.0.2:81"].stalls, 1);
        assert_eq!(dst.total.active_fail, 1);
    }
}
