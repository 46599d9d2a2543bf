//! Client SYN-data the server did not take (`data_not_acked`), by what its SYN-ACK said
//! ([`Cause`]): export's `tfo_trace_syn_data_refused_total{cause}`. The cause is told per
//! event (the reader's [`crate::events::causes`]), so these counts come from events, apart
//! from `tfo_trace_connections_total`, which stays the kernel's exact count: an event lost
//! is missing here (and counted in `tfo_trace_events_lost_total`), never guessed at.
use std::collections::BTreeMap;

use crate::events::{Cause, Event, EventRef, Outcome, Role};

/// One count per cause, indexed by its wire number ([`Cause::ALL`]'s order).
pub type PerCause = [u64; Cause::ALL.len()];

/// The cause of `e` if it is a refused SYN-data (a client's `data_not_acked`): `unknown`
/// where it could not be told.
pub fn cause_of(e: &Event) -> Option<Cause> {
    cause_of_view(&e.view())
}

/// [`cause_of`] an event's view.
pub fn cause_of_view(e: &EventRef<'_>) -> Option<Cause> {
    (e.role == Role::Client && e.outcome == Outcome::DataNotAcked).then(|| e.cause.unwrap_or(Cause::Unknown))
}

/// The cause most refusals had, a told one before `unknown` on a tie; None without any.
pub fn main_cause(counts: &PerCause) -> Option<Cause> {
    Cause::ALL
        .into_iter()
        .filter(|c| counts[*c as usize] > 0)
        .max_by_key(|c| (counts[*c as usize], *c != Cause::Unknown))
}

/// Refusals by cause, in all and per value of the opt-in label (destination, container).
#[derive(Debug, Default)]
pub struct Refusals {
    all: PerCause,
    by_value: BTreeMap<String, PerCause>,
}

impl Refusals {
    /// Counts `cause` in all, and under `value` when that has a series of its own.
    pub fn add(&mut self, cause: Cause, value: Option<&str>) {
        let i = cause as usize;
        self.all[i] += 1;
        if let Some(v) = value {
            self.by_value.entry(v.to_string()).or_default()[i] += 1;
        }
    }

    pub fn all(&self) -> &PerCause {
        &self.all
    }

    /// The values with a series of their own, and their counts.
    pub fn by_value(&self) -> impl Iterator<Item = (&str, &PerCause)> {
        self.by_value.iter().map(|(v, c)| (v.as_str(), c))
    }

    /// What no value with a series of its own took: the `other` series, per cause.
    pub fn rest(&self) -> PerCause {
        let mut rest = self.all;
        for counts in self.by_value.values() {
            for (r, n) in rest.iter_mut().zip(counts) {
                *r = r.saturating_sub(*n);
            }
        }
        rest
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::sample_event;

    #[test]
    fn only_refused_syn_data_has_a_cause() {
        let refused = |cause| Event { cause, ..sample_event(Role::Client, Outcome::DataNotAcked) };
        assert_eq!(cause_of(&refused(Some(Cause::NewCookie))), Some(Cause::NewCookie));
        assert_eq!(cause_of(&refused(None)), Some(Cause::Unknown), "a recording from before causes");
        assert_eq!(cause_of(&sample_event(Role::Client, Outcome::Accepted)), None);
        assert_eq!(cause_of(&sample_event(Role::Server, Outcome::CookieInvalid)), None);
    }

    #[test]
    fn the_rest_is_what_no_value_of_its_own_took() {
        let mut r = Refusals::default();
        r.add(Cause::NewCookie, Some("198.18.0.3:8080"));
        r.add(Cause::NewCookie, None);
        r.add(Cause::NoTfoOption, Some("198.18.0.3:8080"));
        r.add(Cause::NoTfoOption, Some("198.18.0.4:8080"));
        assert_eq!(r.all(), &[0, 2, 2, 0]);
        assert_eq!(r.rest(), [0, 1, 0, 0]);
        let by: Vec<_> = r.by_value().map(|(v, c)| (v.to_string(), *c)).collect();
        assert_eq!(
            by,
            [("198.18.0.3:8080".to_string(), [0, 1, 1, 0]), ("198.18.0.4:8080".to_string(), [0, 0, 1, 0])]
        );
    }
}
