//! What `top` shows as *now*: rates over the last refresh interval and the stalls of the
//! last refreshes. Pure: the caller measures the real time between two refreshes and
//! hands it in, so a late refresh (a busy machine, a stopped terminal) divides by the time
//! that really passed, not by the nominal interval.
use std::{collections::VecDeque, time::Duration};

use serde::Serialize;

/// Refreshes a row keeps in its stall history (enough for the widest per-row graph).
pub(crate) const ROW_HISTORY: usize = 30;
/// Refreshes the host-wide stall history keeps: two minutes at the default 1 s interval.
pub(crate) const HOST_HISTORY: usize = 120;

/// The counters a rate is taken of, as they stood at one refresh.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cumulative {
    pub attempts: u64,
    pub stalls: u64,
    pub stall_us: u64,
}

/// Per second of real time, over one refresh interval.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Rates {
    /// Connections (one outcome event each) per second.
    pub attempts_per_s: f64,
    /// Stalled connections per second ([`crate::aggregation::stall`]).
    pub stalls_per_s: f64,
    /// Seconds lost to SYN timeouts per second: 1.0 means a connection-second lost every
    /// second.
    pub lost_per_s: f64,
}

impl Rates {
    /// The rates between two refreshes `elapsed` apart. A counter that went down (a row
    /// evicted and seen again starts from zero) counts as no change, never as negative.
    pub fn between(before: Cumulative, after: Cumulative, elapsed: Duration) -> Rates {
        let s = elapsed.as_secs_f64();
        if s <= 0.0 {
            return Rates::default();
        }
        let per_s = |a: u64, b: u64| b.saturating_sub(a) as f64 / s;
        Rates {
            attempts_per_s: per_s(before.attempts, after.attempts),
            stalls_per_s: per_s(before.stalls, after.stalls),
            lost_per_s: per_s(before.stall_us, after.stall_us) / 1e6,
        }
    }
}

/// Stalls per refresh interval, oldest first, over the last refreshes, and how many
/// refreshes there have been.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StallHistory {
    /// Refreshes seen (capped at `u32::MAX`).
    pub intervals: u32,
    /// The last refreshes, as many as there were up to the capacity; empty when none of
    /// them had a stall.
    pub samples: Vec<u32>,
}

impl StallHistory {
    /// The last `n` refreshes, oldest first: fewer if there have not been `n`, or if older
    /// ones are no longer kept.
    pub fn last(&self, n: usize) -> Vec<u32> {
        if self.samples.is_empty() {
            return vec![0; n.min(self.intervals as usize)];
        }
        self.samples[self.samples.len().saturating_sub(n)..].to_vec()
    }
}

/// The rates of one row (or of the totals) and its stall history, updated once per refresh.
#[derive(Clone, Debug, Default)]
pub(crate) struct Trend {
    last: Cumulative,
    /// None until the first refresh.
    rates: Option<Rates>,
    intervals: u32,
    /// Allocated at the first stall, so the many rows that never stall cost nothing.
    history: Option<VecDeque<u32>>,
}

impl Trend {
    /// Closes one refresh interval of `elapsed` real time at which the counters stood at
    /// `now`. `capacity`: refreshes of history kept.
    pub(crate) fn tick(&mut self, now: Cumulative, elapsed: Duration, capacity: usize) {
        let capacity = capacity.max(1);
        self.rates = Some(Rates::between(self.last, now, elapsed));
        let stalls = u32::try_from(now.stalls.saturating_sub(self.last.stalls)).unwrap_or(u32::MAX);
        self.last = now;
        if stalls > 0 && self.history.is_none() {
            // The refreshes before had no stall: they are kept as zeros from here on.
            let zeros = (self.intervals as usize).min(capacity - 1);
            let mut h = VecDeque::with_capacity(capacity);
            h.extend(std::iter::repeat_n(0, zeros));
            self.history = Some(h);
        }
        self.intervals = self.intervals.saturating_add(1);
        if let Some(h) = &mut self.history {
            if h.len() >= capacity {
                h.pop_front();
            }
            h.push_back(stalls);
        }
    }

    /// The rates over the last refresh interval; None before the first refresh.
    pub(crate) fn rates(&self) -> Option<Rates> {
        self.rates
    }

    pub(crate) fn history(&self) -> StallHistory {
        StallHistory {
            intervals: self.intervals,
            samples: self.history.as_ref().map(|h| h.iter().copied().collect()).unwrap_or_default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(attempts: u64, stalls: u64, stall_us: u64) -> Cumulative {
        Cumulative { attempts, stalls, stall_us }
    }

    #[test]
    fn rates_divide_by_the_real_elapsed_time() {
        let r = Rates::between(at(10, 1, 1_000_000), at(30, 5, 5_080_000), Duration::from_secs(2));
        assert_eq!(r, Rates { attempts_per_s: 10.0, stalls_per_s: 2.0, lost_per_s: 2.04 });
        // The same counts over a late refresh (2.5 s instead of the nominal 1 s).
        let r = Rates::between(at(0, 0, 0), at(5, 5, 5_000_000), Duration::from_millis(2500));
        assert_eq!((r.attempts_per_s, r.stalls_per_s, r.lost_per_s), (2.0, 2.0, 2.0));
        // No time, no rate (never a division by zero); counters going down are no change.
        assert_eq!(Rates::between(at(0, 0, 0), at(9, 9, 9), Duration::ZERO), Rates::default());
        assert_eq!(Rates::between(at(9, 9, 9), at(1, 1, 1), Duration::from_secs(1)), Rates::default());
    }

    #[test]
    fn the_rate_falls_back_to_zero_when_stalls_stop() {
        let mut t = Trend::default();
        assert_eq!(t.rates(), None, "no rate before the first refresh");
        assert_eq!(t.history().last(10), Vec::<u32>::new());
        // Refreshes at 1.0 s, 2.1 s (late), 3.1 s, 4.1 s; stalls in the first two only.
        t.tick(at(3, 2, 2_000_000), Duration::from_secs(1), ROW_HISTORY);
        assert_eq!(t.rates().unwrap().stalls_per_s, 2.0);
        t.tick(at(4, 3, 3_100_000), Duration::from_millis(1100), ROW_HISTORY);
        let r = t.rates().unwrap();
        assert!((r.stalls_per_s - 1.0 / 1.1).abs() < 1e-9, "{r:?}");
        assert!((r.lost_per_s - 1.0).abs() < 1e-9, "{r:?}");
        t.tick(at(4, 3, 3_100_000), Duration::from_secs(1), ROW_HISTORY);
        assert_eq!(t.rates(), Some(Rates::default()), "no stall in the last interval: 0 at once");
        t.tick(at(5, 3, 3_100_000), Duration::from_secs(1), ROW_HISTORY);
        assert_eq!(t.rates().unwrap(), Rates { attempts_per_s: 1.0, ..Rates::default() });
        assert_eq!(t.history().last(10), [2, 1, 0, 0]);
        assert_eq!(t.history().last(2), [0, 0]);
    }

    #[test]
    fn history_is_bounded_and_free_for_rows_that_never_stall() {
        let mut quiet = Trend::default();
        for i in 0..1000 {
            quiet.tick(at(i, 0, 0), Duration::from_secs(1), 5);
        }
        assert!(quiet.history.is_none(), "no allocation without a stall");
        assert_eq!(quiet.history().last(3), [0, 0, 0]);

        let mut busy = Trend::default();
        busy.tick(at(0, 0, 0), Duration::from_secs(1), 5);
        for i in 1..=1000u64 {
            busy.tick(at(0, i * (i + 1) / 2, 0), Duration::from_secs(1), 5);
        }
        let h = busy.history();
        assert_eq!(h.samples, [996, 997, 998, 999, 1000], "the last five, oldest first");
        assert_eq!(h.intervals, 1001);
        assert_eq!(h.last(8), [996, 997, 998, 999, 1000], "no more than kept, never made-up zeros");

        // A row that stalls late: its quiet refreshes before are zeros, within the bound.
        let mut late = Trend::default();
        for _ in 0..3 {
            late.tick(at(0, 0, 0), Duration::from_secs(1), 5);
        }
        late.tick(at(1, 1, 0), Duration::from_secs(1), 5);
        assert_eq!(late.history().last(8), [0, 0, 0, 1]);
        for _ in 0..10 {
            late.tick(at(1, 1, 0), Duration::from_secs(1), 5);
        }
        assert_eq!(late.history().last(8), [0, 0, 0, 0, 0]);
    }
}
