//! What a stall is, said once: `top`, `stalls`, `report` and `export` all count with [`of`].
//!
//! A stall is a client connection that lost time to a SYN timeout: the kernel
//! retransmitted its SYN before the connection resolved (`retransmits` above 0, and so
//! `stall_us` where the connection's start is known). Its time lost is `stall_us`, the last
//! SYN retransmission minus the first SYN (0 when the connection started before tfo-trace
//! attached). Its [`Cause`] follows from the outcome and whether the SYN carried data.
//!
//! Only the event that ends a connection's story counts ([`Outcome::ends_connection`]):
//! `active_disabled` and `cookie_received` are told alongside a connection that has its own
//! outcome event, and counting them too would count one connection twice.
//!
//! `data_not_acked` is a TFO failure but neither a stall nor time lost: no SYN timed out,
//! the SYN-ACK acknowledged only the SYN, and tcp_rcv_fastopen_synack() marked the data lost
//! and resent it at once on that SYN-ACK (tcp_mark_skb_lost, tcp_non_congestion_loss_retransmit),
//! when plain TCP would first send it. Against no TFO it costs the bytes twice; against a
//! working TFO, the round trip TFO saves: a gain forgone, which views show as
//! [`extra_round_trip_us`], apart from stalls and from the balance ([`net_us`]: saved less
//! stalls' time lost, in every view).
use serde::Serialize;

use crate::events::{Event, Outcome, Role};

/// Why a connection stalled.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Cause {
    /// The SYN carrying data timed out and went again as a plain SYN (a middlebox dropping
    /// SYN-data, typically).
    SynDataDropped,
    /// The SYN asking for a cookie (an empty TFO option) timed out.
    CookieRequestDropped,
    /// A SYN timed out otherwise: the SYN-data got through but the SYN-ACK was lost, or
    /// the connection never completed.
    SynTimeout,
}

impl Cause {
    /// Every cause, in the order of their numbers ([`Cause::index`]).
    pub const ALL: [Cause; 3] = [Cause::SynDataDropped, Cause::CookieRequestDropped, Cause::SynTimeout];

    /// Its place in [`Cause::ALL`]: what per-cause arrays are indexed by.
    pub const fn index(self) -> usize {
        self as usize
    }

    pub fn name(self) -> &'static str {
        match self {
            Cause::SynDataDropped => "syn_data_dropped",
            Cause::CookieRequestDropped => "cookie_request_dropped",
            Cause::SynTimeout => "syn_timeout",
        }
    }
}

/// One stalled connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stall {
    pub cause: Cause,
    /// `stall_us`: the time the SYN timeouts cost.
    pub lost_us: u64,
}

/// Whether a row of the kernel's counts (role, outcome) holds stalls as defined here: a
/// client connection's own outcome. Its `stalls` and `stall_ns` are then the stalls.
pub(crate) fn row_counts(role: Role, outcome: Outcome) -> bool {
    role == Role::Client && outcome.ends_connection()
}

/// The stall this event tells of, if it is one (see the module's documentation).
pub(crate) fn of(e: &Event) -> Option<Stall> {
    let lost_us = lost_us(e.role, e.outcome, e.retransmits, e.stall_us)?;
    let cause = match e.outcome {
        Outcome::SynRetransmitted if e.syn_data_bytes > 0 => Cause::SynDataDropped,
        Outcome::SynRetransmitted => Cause::CookieRequestDropped,
        _ => Cause::SynTimeout,
    };
    Some(Stall { cause, lost_us })
}

/// The time lost if an event of these numbers is a stall ([`of`], without its cause).
pub(crate) fn lost_us(role: Role, outcome: Outcome, retransmits: u32, stall_us: u64) -> Option<u64> {
    if !row_counts(role, outcome) {
        return None;
    }
    let syn_timed_out = outcome == Outcome::SynRetransmitted || retransmits > 0 || stall_us > 0;
    syn_timed_out.then_some(stall_us)
}

/// For `data_not_acked` (not a stall): the round trip a working TFO would have saved it (a
/// gain forgone, not time lost), estimated by the handshake time (0 where it is unknown).
/// None for other events.
pub(crate) fn extra_round_trip_us(e: &Event) -> Option<u64> {
    extra_round_trip_of(e.role, e.outcome, e.handshake_us)
}

/// [`extra_round_trip_us`] of an event's numbers.
pub(crate) fn extra_round_trip_of(role: Role, outcome: Outcome, handshake_us: Option<u64>) -> Option<u64> {
    (role == Role::Client && outcome == Outcome::DataNotAcked).then(|| handshake_us.unwrap_or(0))
}

/// Stalls by cause, and the time each cause lost. Sums saturate: a recording may hold any
/// numbers (the replay fuzz target found this).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StallCounts {
    count: [u64; Cause::ALL.len()],
    lost_us: [u64; Cause::ALL.len()],
}

impl super::packed::Words for StallCounts {
    fn put(&self, out: &mut Vec<u64>) {
        let StallCounts { count, lost_us } = self;
        out.extend_from_slice(count);
        out.extend_from_slice(lost_us);
    }

    fn take(w: &mut super::packed::Taker<'_>) -> Self {
        let count = std::array::from_fn(|_| w.word());
        StallCounts { count, lost_us: std::array::from_fn(|_| w.word()) }
    }
}

impl StallCounts {
    pub fn add(&mut self, s: Stall) {
        let i = s.cause.index();
        self.count[i] = self.count[i].saturating_add(1);
        self.lost_us[i] = self.lost_us[i].saturating_add(s.lost_us);
    }

    pub fn merge(&mut self, other: &StallCounts) {
        for i in 0..Cause::ALL.len() {
            self.count[i] = self.count[i].saturating_add(other.count[i]);
            self.lost_us[i] = self.lost_us[i].saturating_add(other.lost_us[i]);
        }
    }

    /// Stalled connections, whatever the cause.
    pub fn count(&self) -> u64 {
        self.count.iter().fold(0, |sum, n| sum.saturating_add(*n))
    }

    /// The time they lost.
    pub fn lost_us(&self) -> u64 {
        self.lost_us.iter().fold(0, |sum, n| sum.saturating_add(*n))
    }

    pub fn count_of(&self, cause: Cause) -> u64 {
        self.count[cause.index()]
    }

    pub fn lost_us_of(&self, cause: Cause) -> u64 {
        self.lost_us[cause.index()]
    }

    /// The causes that stalled a connection, in [`Cause::ALL`]'s order.
    pub fn causes(&self) -> impl Iterator<Item = Cause> + '_ {
        Cause::ALL.into_iter().filter(|c| self.count_of(*c) > 0)
    }
}

/// Time saved less time lost to stalls, saturated: TFO's balance, in µs, in every view
/// (`report`, `top`, `stalls`; `export` gives both sums). A gain forgone is not in it.
pub(crate) fn net_us(saved_us: u64, lost_us: u64) -> i64 {
    let clamp = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    clamp(saved_us).saturating_sub(clamp(lost_us))
}

/// What a client connection's accepted SYN-data saved, where the kernel measured it: the
/// counterpart of a stall's time lost.
pub(crate) fn saved_us(e: &Event) -> Option<u64> {
    (e.role == Role::Client && e.outcome == Outcome::Accepted).then_some(e.saved_us).flatten()
}

/// Stalls of a group of connections, and apart from them the round trips forgone: what
/// `stalls` sums per destination.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct StallTally {
    pub stalls: StallCounts,
    /// `data_not_acked` connections: not stalls, a round trip forgone each.
    pub extra_round_trips: u64,
    /// The gain they forwent ([`extra_round_trip_us`]).
    pub extra_round_trip_us: u64,
    /// Those by what their SYN-ACK said ([`crate::events::Cause`], indexed by its number).
    pub refused_by_cause: [u64; crate::events::Cause::ALL.len()],
    /// What the same destination's accepted connections saved ([`saved_us`]).
    pub saved_us: u64,
}

impl StallTally {
    /// Counts the event; returns its stall, if it is one.
    pub(crate) fn add(&mut self, e: &Event) -> Option<Stall> {
        if let Some(us) = saved_us(e) {
            self.saved_us = self.saved_us.saturating_add(us);
        }
        if let Some(us) = extra_round_trip_us(e) {
            self.extra_round_trips += 1;
            self.extra_round_trip_us = self.extra_round_trip_us.saturating_add(us);
            if let Some(cause) = e.cause {
                self.refused_by_cause[cause as usize] += 1;
            }
        }
        let s = of(e)?;
        self.stalls.add(s);
        Some(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::sample_event;

    /// A client event as the kernel side makes it: a SYN timeout shows in both
    /// `retransmits` and `stall_us`.
    fn client(outcome: Outcome, data: u32, stall_us: u64) -> Event {
        Event {
            syn_data_bytes: data,
            retransmits: u32::from(stall_us > 0),
            handshake_us: Some(200 + stall_us),
            stall_us,
            ..sample_event(Role::Client, outcome)
        }
    }

    #[test]
    fn causes_follow_the_outcome_and_the_data() {
        let s = |e: &Event| of(e).map(|s| (s.cause, s.lost_us));
        assert_eq!(
            s(&client(Outcome::SynRetransmitted, 64, 1_020_000)),
            Some((Cause::SynDataDropped, 1_020_000))
        );
        assert_eq!(
            s(&client(Outcome::SynRetransmitted, 0, 1_010_000)),
            Some((Cause::CookieRequestDropped, 1_010_000))
        );
        // The SYN-data got through, the SYN-ACK was lost: the SYN went again.
        assert_eq!(s(&client(Outcome::Accepted, 64, 1_000_000)), Some((Cause::SynTimeout, 1_000_000)));
        // Never completed after its SYN timed out (three times here).
        let failed = Event { retransmits: 3, ..client(Outcome::ConnectFailed, 64, 7_000_000) };
        assert_eq!(s(&failed), Some((Cause::SynTimeout, 7_000_000)));
    }

    #[test]
    fn not_stalls() {
        for o in [Outcome::Accepted, Outcome::CookieRequested, Outcome::DataNotAcked, Outcome::NotAttempted] {
            assert_eq!(of(&client(o, 64, 0)), None, "{o:?} without a SYN timeout");
        }
        // Refused or reset without a SYN timeout: no time lost to TFO.
        assert_eq!(of(&client(Outcome::ConnectFailed, 64, 0)), None);
        let mut server = client(Outcome::Accepted, 64, 1_000_000);
        server.role = Role::Server;
        assert_eq!(of(&server), None, "a stall is a client connection");
    }

    #[test]
    fn one_connection_is_one_stall() {
        // Blackhole detection and the cookie cache speak of a connection whose own outcome
        // event is counted: they carry its stall_us, but are not a second stall.
        for o in [Outcome::ActiveDisabled, Outcome::CookieReceived] {
            assert_eq!(of(&client(o, 64, 2_000_000)), None, "{o:?}");
        }
    }

    #[test]
    fn start_unknown_still_a_stall() {
        // Started before tfo-trace attached: no start time, so no stall_us, but the
        // kernel's retransmit count says the SYN timed out.
        let e = Event { stall_us: 0, handshake_us: None, ..client(Outcome::SynRetransmitted, 64, 1) };
        assert_eq!(e.retransmits, 1);
        assert_eq!(of(&e), Some(Stall { cause: Cause::SynDataDropped, lost_us: 0 }));
    }

    #[test]
    fn data_not_acked_is_an_extra_round_trip_not_a_stall() {
        let e = client(Outcome::DataNotAcked, 64, 0);
        assert_eq!(of(&e), None);
        assert_eq!(extra_round_trip_us(&e), Some(200), "estimated by the handshake time");
        assert_eq!(extra_round_trip_us(&Event { handshake_us: None, ..e }), Some(0));
        assert_eq!(extra_round_trip_us(&client(Outcome::SynRetransmitted, 64, 1_000_000)), None);
    }

    #[test]
    fn tally_keeps_stalls_and_extra_round_trips_apart() {
        let mut t = StallTally::default();
        for e in [
            client(Outcome::Accepted, 64, 0),
            client(Outcome::SynRetransmitted, 64, 1_020_000),
            client(Outcome::SynRetransmitted, 64, 1_030_000),
            client(Outcome::SynRetransmitted, 0, 1_010_000),
            client(Outcome::DataNotAcked, 64, 0),
            client(Outcome::DataNotAcked, 64, 0),
        ] {
            t.add(&e);
        }
        let s = &t.stalls;
        assert_eq!((s.count(), s.lost_us()), (3, 3_060_000));
        assert_eq!((s.count_of(Cause::SynDataDropped), s.lost_us_of(Cause::SynDataDropped)), (2, 2_050_000));
        assert_eq!(s.count_of(Cause::CookieRequestDropped), 1);
        assert_eq!(s.count_of(Cause::SynTimeout), 0);
        assert_eq!(s.causes().collect::<Vec<_>>(), [Cause::SynDataDropped, Cause::CookieRequestDropped]);
        assert_eq!((t.extra_round_trips, t.extra_round_trip_us), (2, 400));
    }
}
