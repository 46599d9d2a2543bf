//! When SYN-data was refused and when accepted again: a key rotated without a backup
//! (refused once per client, then accepted) apart from refusals that go on. Kept per
//! listener and per destination row, so small and mergeable.
use crate::events::Outcome;

/// When SYN-data was refused and accepted, toward one server or at one listener: what tells
/// a key rotated without a backup (refusals, then acceptance again) from refusals that go
/// on (a fleet behind one address without a shared key, a NAT pool, TFO off). A refusal is
/// the server's `cookie_invalid` or the client's `data_not_acked`. Times are unix ns, 0 for
/// never (no timestamp is 0), to keep it small: every destination row carries one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KeyChange {
    first_refused_ns: u64,
    last_refused_ns: u64,
    last_accepted_ns: u64,
    /// SYN-data accepted after the first refusal.
    accepted_since: u64,
}

impl KeyChange {
    pub fn add(&mut self, outcome: Outcome, at_ns: u64) {
        match outcome {
            Outcome::CookieInvalid | Outcome::DataNotAcked => {
                self.first_refused_ns = earliest(self.first_refused_ns, at_ns);
                self.last_refused_ns = self.last_refused_ns.max(at_ns);
            }
            Outcome::Accepted | Outcome::AcceptedAltKey => {
                self.last_accepted_ns = self.last_accepted_ns.max(at_ns);
                if self.first_refused_ns != 0 && at_ns > self.first_refused_ns {
                    self.accepted_since = self.accepted_since.saturating_add(1);
                }
            }
            _ => {}
        }
    }

    /// Both together (a group of destinations, a host's share). `accepted_since` becomes
    /// a lower bound: acceptance on a side without refusals is not counted, so a merge can
    /// only call fewer rotations, never more.
    pub fn merge(&mut self, o: &KeyChange) {
        self.first_refused_ns = earliest(self.first_refused_ns, o.first_refused_ns);
        self.last_refused_ns = self.last_refused_ns.max(o.last_refused_ns);
        self.last_accepted_ns = self.last_accepted_ns.max(o.last_accepted_ns);
        self.accepted_since = self.accepted_since.saturating_add(o.accepted_since);
    }

    /// `refused` SYN-data were a rotation without a backup key: acceptance came back after
    /// the last refusal, and no more were refused than accepted since the first (each
    /// client refused once, then served on its new cookie).
    pub fn rotated(&self, refused: u64) -> bool {
        let resumed = self.last_refused_ns != 0 && self.last_accepted_ns > self.last_refused_ns;
        refused > 0 && resumed && refused <= self.accepted_since
    }
}

impl crate::aggregation::packed::Words for KeyChange {
    fn put(&self, out: &mut Vec<u64>) {
        let KeyChange { first_refused_ns, last_refused_ns, last_accepted_ns, accepted_since } = *self;
        out.extend([first_refused_ns, last_refused_ns, last_accepted_ns, accepted_since]);
    }

    fn take(w: &mut crate::aggregation::packed::Taker<'_>) -> Self {
        let (first_refused_ns, last_refused_ns, last_accepted_ns) = (w.word(), w.word(), w.word());
        KeyChange { first_refused_ns, last_refused_ns, last_accepted_ns, accepted_since: w.word() }
    }
}

/// The earlier of two times, 0 being never.
fn earliest(a: u64, b: u64) -> u64 {
    match (a, b) {
        (0, t) | (t, 0) => t,
        (a, b) => a.min(b),
    }
}
