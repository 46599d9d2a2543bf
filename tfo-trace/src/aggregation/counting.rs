//! The counting core every view shares: events by outcome ([`OutcomeCounts`]), and with
//! [`Outcome::ends_connection`] the one meaning of "a connection". What a stall is, and
//! stalls by cause, are beside it in [`super::stall`].
//!
//! Sums saturate: a recording is input, not trusted (the replay fuzz target found a sum
//! that overflowed).
use std::{collections::BTreeMap, ops::Index};

use crate::events::Outcome;

/// Events by outcome, indexed by [`Outcome`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OutcomeCounts([u64; Outcome::ALL.len()]);

impl OutcomeCounts {
    /// One more event of `outcome`.
    pub fn add(&mut self, outcome: Outcome) {
        self.add_n(outcome, 1);
    }

    pub fn add_n(&mut self, outcome: Outcome, n: u64) {
        let slot = &mut self.0[outcome.index()];
        *slot = slot.saturating_add(n);
    }

    /// `n` fewer of `outcome` (never below 0): counted as another outcome after all.
    pub fn take_n(&mut self, outcome: Outcome, n: u64) {
        let slot = &mut self.0[outcome.index()];
        *slot = slot.saturating_sub(n);
    }

    pub fn merge(&mut self, other: &OutcomeCounts) {
        for o in Outcome::ALL {
            self.add_n(o, other[o]);
        }
    }

    /// Every event, whatever its outcome.
    pub fn total(&self) -> u64 {
        self.0.iter().fold(0, |sum, n| sum.saturating_add(*n))
    }

    /// Connections: the events that end one ([`Outcome::ends_connection`]).
    pub fn connections(&self) -> u64 {
        Outcome::ALL.iter().filter(|o| o.ends_connection()).fold(0, |sum, o| sum.saturating_add(self[*o]))
    }

    /// The outcomes seen, by name: the JSON `outcomes` objects.
    pub fn by_name(&self) -> BTreeMap<String, u64> {
        Outcome::ALL.iter().filter(|o| self[**o] > 0).map(|o| (o.name().to_string(), self[*o])).collect()
    }
}

impl super::packed::Words for OutcomeCounts {
    fn put(&self, out: &mut Vec<u64>) {
        let OutcomeCounts(counts) = self;
        out.extend_from_slice(counts);
    }

    fn take(w: &mut super::packed::Taker<'_>) -> Self {
        OutcomeCounts(std::array::from_fn(|_| w.word()))
    }
}

impl Index<Outcome> for OutcomeCounts {
    type Output = u64;

    fn index(&self, outcome: Outcome) -> &u64 {
        &self.0[outcome.index()]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_leave_out_what_is_told_beside_one() {
        let mut c = OutcomeCounts::default();
        for o in [Outcome::Accepted, Outcome::Accepted, Outcome::CookieReceived, Outcome::ActiveDisabled] {
            c.add(o);
        }
        c.add_n(Outcome::SynackRetransmitted, 4);
        assert_eq!((c[Outcome::Accepted], c.total(), c.connections()), (2, 8, 2));
        assert_eq!(
            c.by_name().keys().collect::<Vec<_>>(),
            ["accepted", "active_disabled", "cookie_received", "synack_retransmitted"]
        );
        let mut d = c;
        d.merge(&c);
        d.take_n(Outcome::Accepted, 5);
        assert_eq!((d[Outcome::Accepted], d.total()), (0, 12));
        d.add_n(Outcome::NotAttempted, u64::MAX);
        d.add(Outcome::NotAttempted);
        assert_eq!(d[Outcome::NotAttempted], u64::MAX, "saturates");
    }
}
