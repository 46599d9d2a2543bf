//! What `report` keeps of client connections, per destination, small enough for a million
//! destinations: a destination seen once is one [`OneConn`] (32 bytes); from its second
//! connection on it holds a [`ConnAcc`] (the counts a verdict needs), and, once a second host
//! connects to it, one per host, all of it packed ([`Slot::Many`]: ~40 bytes for the ~400
//! of the counters, most of them 0). Sums saturate: a recording is input, not trusted.
use std::{borrow::Cow, cell::RefCell, collections::BTreeMap};

use crate::aggregation::refusals::{Refusals, Told};
use crate::{
    aggregation::{
        counting::OutcomeCounts,
        packed::{self, put_option, Taker, Words},
        report::key_change::KeyChange,
        stall::{self, Cause, Stall, StallCounts},
    },
    events::{CookieChange, Event, Outcome},
};

/// One client connection's outcome, as far as a report needs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OneConn {
    /// Event time, ns since the epoch (saturated to u64).
    pub ts_ns: u64,
    /// The stall's time lost ([`stall::of`]), when `stall` is set.
    pub stall_us: u64,
    /// `data_not_acked`: the round trip a working TFO would have saved it, forgone
    /// ([`stall::extra_round_trip_us`]);
    /// `accepted`: the round trip it saved (`Event::saved_us`), where `saved_known`;
    /// `cookie_requested`: its handshake (SYN to SYN-ACK), to place when its SYN left. One
    /// field for all three: an outcome has at most one of them.
    pub round_trip_us: u64,
    /// Index of the host (recording) it was seen on ([`OneConn::host`]): 16 bits keep a
    /// connection in 32 bytes; hosts past 65,535 count as the last.
    host: u16,
    /// The client process's name, as the report's name index ([`ClientId`]).
    pub client: ClientId,
    pub outcome: Outcome,
    pub stall: Option<Cause>,
    /// [`Bits`]: two bytes for its small facts, so a connection stays 32 bytes.
    bits: Bits,
}

/// The SYN carried data, `accepted` whose saving the kernel measured, a refusal's cause
/// ([`Told::index`]-like: a [`crate::events::Cause`]'s number, or [`Bits::NOT_RECORDED`]),
/// the experimental TFO option (0xF989) on the SYN, its cookie's change (0 none, else
/// a [`CookieChange`]'s place in its `ALL`, plus 1), and a `connect_failed` ended by a
/// reset. Two bytes: the connection still fits in 32.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Bits(u16);

impl Bits {
    const WITH_DATA: u16 = 1 << 0;
    const SAVED_KNOWN: u16 = 1 << 1;
    const CAUSE_SHIFT: u16 = 2;
    const CAUSE_MASK: u16 = 0b111;
    const NOT_RECORDED: u16 = 7;
    const EXP: u16 = 1 << 5;
    const CHANGE_SHIFT: u16 = 6;
    const CHANGE_MASK: u16 = 0b11;
    /// `connect_failed` ended by a reset (ECONNREFUSED).
    const RESET: u16 = 1 << 8;

    fn new(
        with_data: bool,
        saved_known: bool,
        told: Told,
        exp: bool,
        change: Option<CookieChange>,
        reset: bool,
    ) -> Bits {
        let cause = match told {
            Told::Cause(c) => u16::from(c as u8),
            Told::NotRecorded => Bits::NOT_RECORDED,
        };
        let change = change.map_or(0, |c| c.index() as u16 + 1);
        let mut b = (cause << Bits::CAUSE_SHIFT) | (change << Bits::CHANGE_SHIFT);
        if reset {
            b |= Bits::RESET;
        }
        if with_data {
            b |= Bits::WITH_DATA;
        }
        if saved_known {
            b |= Bits::SAVED_KNOWN;
        }
        if exp {
            b |= Bits::EXP;
        }
        Bits(b)
    }

    fn told(self) -> Told {
        match (self.0 >> Bits::CAUSE_SHIFT) & Bits::CAUSE_MASK {
            Bits::NOT_RECORDED => Told::NotRecorded,
            n => Told::Cause(crate::events::Cause::from_u8(n as u8)),
        }
    }

    fn change(self) -> Option<CookieChange> {
        let n = usize::from((self.0 >> Bits::CHANGE_SHIFT) & Bits::CHANGE_MASK);
        n.checked_sub(1).and_then(|i| CookieChange::ALL.get(i).copied())
    }
}

impl OneConn {
    /// A client event (the caller filters by role) of `client` (its comm's name index).
    pub fn of(e: &Event, host: u32, client: ClientId) -> OneConn {
        let s = stall::of(e);
        OneConn {
            ts_ns: u64::try_from(e.ts.unix_ns()).unwrap_or(u64::MAX),
            stall_us: s.map(|s| s.lost_us).unwrap_or(0),
            round_trip_us: match e.outcome {
                Outcome::Accepted => e.saved_us.unwrap_or(0),
                Outcome::CookieRequested => e.handshake_us.unwrap_or(0),
                _ => stall::extra_round_trip_us(e).unwrap_or(0),
            },
            host: u16::try_from(host).unwrap_or(u16::MAX),
            client,
            outcome: e.outcome,
            stall: s.map(|s| s.cause),
            bits: Bits::new(
                e.syn_data_bytes > 0,
                e.outcome == Outcome::Accepted && e.saved_us.is_some(),
                e.cause.map_or(Told::NotRecorded, Told::Cause),
                e.exp_option,
                e.cookie_change,
                e.outcome == Outcome::ConnectFailed && e.error == Some(crate::events::Errno::RESET),
            ),
        }
    }

    pub fn host(&self) -> u32 {
        u32::from(self.host)
    }

    /// The SYN carried data.
    pub fn with_data(&self) -> bool {
        self.bits.0 & Bits::WITH_DATA != 0
    }

    /// `accepted` whose saving the kernel measured.
    pub fn saved_known(&self) -> bool {
        self.bits.0 & Bits::SAVED_KNOWN != 0
    }

    /// A refusal's cause, as its event told it (meaningful on `data_not_acked` only).
    pub fn told(&self) -> Told {
        self.bits.told()
    }

    /// The SYN carried the experimental TFO option (0xF989) rather than RFC 7413's.
    pub fn exp_option(&self) -> bool {
        self.bits.0 & Bits::EXP != 0
    }

    /// A refusal's cookie change, where its event told one.
    pub fn cookie_change(&self) -> Option<CookieChange> {
        self.bits.change()
    }

    /// A connect that ended by a reset answering its first SYN, which carried data: no SYN
    /// timed out before it.
    pub fn syn_data_reset(&self) -> bool {
        self.outcome == Outcome::ConnectFailed
            && self.bits.0 & Bits::RESET != 0
            && self.with_data()
            && self.stall.is_none()
    }
}

/// A destination's cookie requests, to tell requests the server never answered with a
/// cookie from first contact: while the client's kernel holds no cookie for a destination,
/// each TFO connect asks again (tcp_fastopen_cookie_check(): no cookie, a request); a
/// request whose SYN left after an earlier request's SYN-ACK had come back was asked again
/// because that answer brought no cookie. After a request answered without one,
/// tcp_rcv_fastopen_synack() makes the next request try the experimental option (try_exp 1),
/// then RFC 7413's again (try_exp 2): experimental requests are the kernel's own record of it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CookieAsks {
    /// When the first request's SYN-ACK came back (its event), ns since the epoch.
    pub first_answered_ns: Option<u64>,
    /// When the last request's SYN left (its event less its handshake).
    pub last_sent_ns: Option<u64>,
    /// Requests on the experimental option.
    pub exp: u64,
}

impl CookieAsks {
    fn add(&mut self, c: &OneConn) {
        if c.outcome != Outcome::CookieRequested {
            return;
        }
        self.first_answered_ns = min_opt(self.first_answered_ns, Some(c.ts_ns));
        let sent = c.ts_ns.saturating_sub(c.round_trip_us.saturating_mul(1000));
        self.last_sent_ns = self.last_sent_ns.max(Some(sent));
        if c.exp_option() {
            self.exp = self.exp.saturating_add(1);
        }
    }

    fn merge(&mut self, o: &CookieAsks) {
        self.first_answered_ns = min_opt(self.first_answered_ns, o.first_answered_ns);
        self.last_sent_ns = self.last_sent_ns.max(o.last_sent_ns);
        self.exp = self.exp.saturating_add(o.exp);
    }

    /// A request was sent after another had been answered (without a cookie, or the client
    /// would have used it), or the kernel retried on the experimental option.
    pub fn asked_again_after_an_answer(&self) -> bool {
        self.exp > 0 || matches!((self.first_answered_ns, self.last_sent_ns), (Some(a), Some(s)) if s > a)
    }
}

impl Words for CookieAsks {
    fn put(&self, out: &mut Vec<u64>) {
        let CookieAsks { first_answered_ns, last_sent_ns, exp } = self;
        put_option(out, *first_answered_ns);
        put_option(out, *last_sent_ns);
        out.push(*exp);
    }

    fn take(w: &mut Taker<'_>) -> Self {
        CookieAsks { first_answered_ns: w.option(), last_sent_ns: w.option(), exp: w.word() }
    }
}

/// A client process name, as an index into the report's names; [`ClientId::MAX`] for any
/// past the 65,535th.
pub(crate) type ClientId = u16;

/// The client processes that made some connections, for the advice that names them: the
/// first [`Clients::KEPT`] names seen with their connections, the rest summed. Fixed size: a
/// destination has few clients, and a million destinations must stay small.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Clients {
    kept: [(ClientId, u32); Clients::KEPT],
    len: u8,
    /// Connections of the processes past the kept ones.
    others: u32,
}

impl Clients {
    pub const KEPT: usize = 3;

    fn add_n(&mut self, id: ClientId, n: u32) {
        let len = usize::from(self.len);
        if let Some(k) = self.kept[..len].iter_mut().find(|k| k.0 == id) {
            k.1 = k.1.saturating_add(n);
        } else if len < Clients::KEPT {
            self.kept[len] = (id, n);
            self.len += 1;
        } else {
            self.others = self.others.saturating_add(n);
        }
    }

    pub fn merge(&mut self, o: &Clients) {
        for &(id, n) in &o.kept[..usize::from(o.len)] {
            self.add_n(id, n);
        }
        self.others = self.others.saturating_add(o.others);
    }

    /// The kept names, most connections first (ties by first seen), and whether other
    /// processes connected too.
    pub fn ranked(&self) -> (Vec<ClientId>, bool) {
        let mut kept = self.kept[..usize::from(self.len)].to_vec();
        kept.sort_by_key(|k| std::cmp::Reverse(k.1));
        (kept.into_iter().map(|(id, _)| id).collect(), self.others > 0)
    }
}

impl Words for Clients {
    fn put(&self, out: &mut Vec<u64>) {
        let Clients { kept, len, others } = self;
        for (id, n) in kept {
            out.extend([u64::from(*id), u64::from(*n)]);
        }
        out.extend([u64::from(*len), u64::from(*others)]);
    }

    fn take(w: &mut Taker<'_>) -> Self {
        let kept = std::array::from_fn(|_| (w.u16(), w.u32()));
        let len = u8::try_from(w.word()).unwrap_or(u8::MAX).min(Clients::KEPT as u8);
        Clients { kept, len, others: w.u32() }
    }
}

/// Counts of client connections (a destination, a host's share of one, or a group): what
/// the verdicts are built from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConnAcc {
    /// Client events by outcome.
    pub outcomes: OutcomeCounts,
    /// `connect_failed` whose SYN carried data.
    pub connect_failed_with_data: u64,
    /// Of those, the ones a reset answered ([`OneConn::syn_data_reset`]).
    pub syn_data_reset: u64,
    pub stalls: StallCounts,
    /// Sum of the `data_not_acked` connections' round trips forgone: what a working TFO
    /// would have saved them (gain forgone, not time lost: see [`Balance`]).
    pub extra_round_trip_us: u64,
    /// Sum of the accepted connections' measured savings, and how many were measured.
    pub saved_us: u64,
    pub saves: u64,
    pub first_accepted_ns: Option<u64>,
    pub first_not_acked_ns: Option<u64>,
    /// When SYN-data was refused and accepted again (a key rotated without a backup).
    pub key: KeyChange,
    /// The refusals by cause, and the longest run of them (cookie churn).
    pub refusals: Refusals,
    /// Which processes made the connections, and which of them sent a cookie without
    /// data (`cookie_sent_no_data`: the advice names them).
    pub clients: Clients,
    pub no_data_clients: Clients,
    /// The cookie requests' timing, to tell those no cookie ever answered.
    pub asks: CookieAsks,
}

impl Words for ConnAcc {
    fn put(&self, out: &mut Vec<u64>) {
        let ConnAcc {
            outcomes,
            connect_failed_with_data,
            syn_data_reset,
            stalls,
            extra_round_trip_us,
            saved_us,
            saves,
            first_accepted_ns,
            first_not_acked_ns,
            key,
            refusals,
            clients,
            no_data_clients,
            asks,
        } = self;
        outcomes.put(out);
        out.extend([*connect_failed_with_data, *syn_data_reset]);
        stalls.put(out);
        out.extend([*extra_round_trip_us, *saved_us, *saves]);
        put_option(out, *first_accepted_ns);
        put_option(out, *first_not_acked_ns);
        key.put(out);
        refusals.put(out);
        clients.put(out);
        no_data_clients.put(out);
        asks.put(out);
    }

    fn take(w: &mut Taker<'_>) -> Self {
        ConnAcc {
            outcomes: OutcomeCounts::take(w),
            connect_failed_with_data: w.word(),
            syn_data_reset: w.word(),
            stalls: StallCounts::take(w),
            extra_round_trip_us: w.word(),
            saved_us: w.word(),
            saves: w.word(),
            first_accepted_ns: w.option(),
            first_not_acked_ns: w.option(),
            key: KeyChange::take(w),
            refusals: Refusals::take(w),
            clients: Clients::take(w),
            no_data_clients: Clients::take(w),
            asks: CookieAsks::take(w),
        }
    }
}

fn min_opt(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

impl ConnAcc {
    pub fn of(one: &OneConn) -> ConnAcc {
        let mut a = ConnAcc::default();
        a.add(one);
        a
    }

    pub fn add(&mut self, c: &OneConn) {
        self.outcomes.add(c.outcome);
        if c.outcome.ends_connection() {
            self.clients.add_n(c.client, 1);
        }
        if c.outcome == Outcome::CookieSentNoData {
            self.no_data_clients.add_n(c.client, 1);
        }
        if c.outcome == Outcome::ConnectFailed && c.with_data() {
            self.connect_failed_with_data = self.connect_failed_with_data.saturating_add(1);
        }
        if c.syn_data_reset() {
            self.syn_data_reset = self.syn_data_reset.saturating_add(1);
        }
        if let Some(cause) = c.stall {
            self.stalls.add(Stall { cause, lost_us: c.stall_us });
        }
        if c.outcome == Outcome::DataNotAcked {
            self.extra_round_trip_us = self.extra_round_trip_us.saturating_add(c.round_trip_us);
            self.first_not_acked_ns = min_opt(self.first_not_acked_ns, Some(c.ts_ns));
        }
        if c.saved_known() {
            self.saved_us = self.saved_us.saturating_add(c.round_trip_us);
            self.saves = self.saves.saturating_add(1);
        }
        if c.outcome == Outcome::Accepted {
            self.first_accepted_ns = min_opt(self.first_accepted_ns, Some(c.ts_ns));
        }
        self.key.add(c.outcome, c.ts_ns);
        self.refusals.add(c.outcome, c.told(), c.cookie_change());
        self.asks.add(c);
    }

    pub fn merge(&mut self, o: &ConnAcc) {
        self.outcomes.merge(&o.outcomes);
        self.connect_failed_with_data =
            self.connect_failed_with_data.saturating_add(o.connect_failed_with_data);
        self.syn_data_reset = self.syn_data_reset.saturating_add(o.syn_data_reset);
        self.stalls.merge(&o.stalls);
        self.extra_round_trip_us = self.extra_round_trip_us.saturating_add(o.extra_round_trip_us);
        self.saved_us = self.saved_us.saturating_add(o.saved_us);
        self.saves = self.saves.saturating_add(o.saves);
        self.first_accepted_ns = min_opt(self.first_accepted_ns, o.first_accepted_ns);
        self.first_not_acked_ns = min_opt(self.first_not_acked_ns, o.first_not_acked_ns);
        self.key.merge(&o.key);
        self.refusals.merge(&o.refusals);
        self.clients.merge(&o.clients);
        self.no_data_clients.merge(&o.no_data_clients);
        self.asks.merge(&o.asks);
    }

    pub fn count(&self, o: Outcome) -> u64 {
        self.outcomes[o]
    }

    /// Client connections: the events that end one ([`Outcome::ends_connection`]).
    pub fn connections(&self) -> u64 {
        self.outcomes.connections()
    }

    pub fn stalled(&self) -> u64 {
        self.stalls.count()
    }

    pub fn stalls_of(&self, c: Cause) -> u64 {
        self.stalls.count_of(c)
    }

    pub fn lost_us_of(&self, c: Cause) -> u64 {
        self.stalls.lost_us_of(c)
    }

    pub fn lost_us_total(&self) -> u64 {
        self.stalls.lost_us()
    }

    /// `data_not_acked` connections: a round trip each against a working TFO (gain
    /// forgone), none against no TFO; not stalls.
    pub fn extra_round_trips(&self) -> u64 {
        self.count(Outcome::DataNotAcked)
    }

    /// SYN-data dropped on the path: a SYN with data timed out and went again without.
    pub fn syn_data_dropped(&self) -> u64 {
        self.stalls_of(Cause::SynDataDropped)
    }

    /// Connections whose SYNs without data were answered: cookie requests, cookies sent
    /// without data, plain SYNs while TFO was paused.
    pub fn answered_without_data(&self) -> u64 {
        self.count(Outcome::CookieRequested)
            .saturating_add(self.count(Outcome::CookieSentNoData))
            .saturating_add(self.count(Outcome::NotAttempted))
    }

    /// Connections whose SYN carried data (and whose fate is known).
    pub fn syn_data_sent(&self) -> u64 {
        self.count(Outcome::Accepted)
            .saturating_add(self.count(Outcome::DataNotAcked))
            .saturating_add(self.syn_data_dropped())
            .saturating_add(self.connect_failed_with_data)
    }

    /// What TFO gained and cost these connections ([`Balance`]).
    pub fn balance(&self) -> Balance {
        Balance {
            saved_us: self.saved_us,
            saves: self.saves,
            accepted: self.count(Outcome::Accepted),
            lost_us: self.lost_us_total(),
            stalled: self.stalled(),
            connections: self.connections(),
        }
    }

    /// Client outcomes seen, by name (the JSON `outcomes` object).
    pub fn outcomes(&self) -> BTreeMap<String, u64> {
        self.outcomes.by_name()
    }
}

/// Time TFO saved beside time it lost, over some client connections, against the same
/// connections without TFO: each accepted SYN-data saved the round trip the kernel
/// measured for it (`Event::saved_us`); each stall lost its SYN timeout. A `data_not_acked`
/// is in neither: tcp_rcv_fastopen_synack() marks the refused data lost and resends it at
/// once on the SYN-ACK (tcp_mark_skb_lost, tcp_non_congestion_loss_retransmit), when plain
/// TCP would first send it, so against no TFO it costs the bytes twice, not a round trip;
/// the round trip it did not save is a gain forgone ([`ConnAcc::extra_round_trip_us`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Balance {
    /// Sum of the measured savings, over `saves` accepted connections (of `accepted`).
    pub saved_us: u64,
    pub saves: u64,
    pub accepted: u64,
    /// Stalls' time lost, over `stalled` stalls.
    pub lost_us: u64,
    pub stalled: u64,
    pub connections: u64,
}

impl Balance {
    /// Saved less lost (saturated), in µs.
    pub fn net_us(&self) -> i64 {
        stall::net_us(self.saved_us, self.lost_us)
    }

    /// The round trip one accepted SYN-data saved, on average (measured ones only).
    pub fn saved_per_accepted_us(&self) -> Option<u64> {
        (self.saves > 0).then(|| self.saved_us / self.saves)
    }

    /// How many accepted connections one stall's loss takes to repay at the measured round
    /// trip: TFO breaks even at one stall per this many accepted.
    pub fn break_even_accepted_per_stall(&self) -> Option<u64> {
        let rt = self.saved_per_accepted_us().filter(|rt| *rt > 0)?;
        (self.stalled > 0).then(|| (self.lost_us / self.stalled).div_ceil(rt))
    }

    /// Accepted connections per stall, as seen.
    pub fn accepted_per_stall(&self) -> Option<u64> {
        (self.stalled > 0).then(|| self.accepted / self.stalled)
    }
}

/// Which hosts connected to a destination, and each one's share once there are two.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Hosts {
    One(u32),
    Many(BTreeMap<u32, ConnAcc>),
}

/// A destination seen more than once, unpacked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Many {
    pub acc: ConnAcc,
    pub hosts: Hosts,
}

impl Words for Many {
    fn put(&self, out: &mut Vec<u64>) {
        let Many { acc, hosts } = self;
        match hosts {
            Hosts::One(h) => out.extend([0, u64::from(*h)]),
            Hosts::Many(map) => {
                out.extend([1, map.len() as u64]);
                for (h, a) in map {
                    out.push(u64::from(*h));
                    a.put(out);
                }
            }
        }
        acc.put(out);
    }

    fn take(w: &mut Taker<'_>) -> Self {
        let hosts = match w.word() {
            0 => Hosts::One(w.u32()),
            _ => {
                let n = w.word();
                // Bounded by the words there are: a corrupt count cannot make it loop on.
                Hosts::Many((0..n).map_while(|_| Some((w.u32(), ConnAcc::take(w)))).take(1 << 16).collect())
            }
        };
        Many { acc: ConnAcc::take(w), hosts }
    }
}

thread_local! {
    /// The words of the [`Many`] being packed or unpacked: one buffer, not one per event.
    static WORDS: RefCell<Vec<u64>> = const { RefCell::new(Vec::new()) };
}

impl Many {
    fn pack(&self) -> Box<[u8]> {
        WORDS.with_borrow_mut(|w| {
            w.clear();
            self.put(w);
            packed::pack(w)
        })
    }

    fn unpack(bytes: &[u8]) -> Many {
        WORDS.with_borrow_mut(|w| {
            packed::unpack(bytes, w);
            Many::take(&mut Taker::new(w))
        })
    }

    /// One more connection (its host's share apart from the second host on).
    fn add(&mut self, c: &OneConn) {
        match &mut self.hosts {
            Hosts::One(h) if *h == c.host() => {}
            Hosts::One(h) => {
                // Everything so far came from the one host.
                let so_far = self.acc.clone();
                self.hosts = Hosts::Many(BTreeMap::from([(*h, so_far), (c.host(), ConnAcc::of(c))]));
            }
            Hosts::Many(map) => map.entry(c.host()).or_default().add(c),
        }
        self.acc.add(c);
    }
}

/// A destination's connections (or a process's connections to it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Slot {
    One(OneConn),
    /// Seen more than once: its [`Many`] packed, with the time lost beside it (ranking reads
    /// it for every row).
    Many {
        packed: Box<[u8]>,
        lost_us: u64,
    },
}

impl Slot {
    pub(crate) fn add(&mut self, c: OneConn) {
        let many = match self {
            Slot::One(first) => {
                let first = *first;
                let mut many = Many { acc: ConnAcc::of(&first), hosts: Hosts::One(first.host()) };
                many.add(&c);
                many
            }
            Slot::Many { packed, .. } => {
                let mut many = Many::unpack(packed);
                many.add(&c);
                many
            }
        };
        *self = Slot::Many { packed: many.pack(), lost_us: many.acc.lost_us_total() };
    }

    pub(crate) fn acc(&self) -> Cow<'_, ConnAcc> {
        match self {
            Slot::One(c) => Cow::Owned(ConnAcc::of(c)),
            Slot::Many { packed, .. } => Cow::Owned(Many::unpack(packed).acc),
        }
    }

    /// Each host's share: (host, its connections).
    pub(crate) fn for_each_host(&self, mut f: impl FnMut(u32, &ConnAcc)) {
        match self {
            Slot::One(c) => f(c.host(), &ConnAcc::of(c)),
            Slot::Many { packed, .. } => {
                let m = Many::unpack(packed);
                match &m.hosts {
                    Hosts::One(h) => f(*h, &m.acc),
                    Hosts::Many(map) => map.iter().for_each(|(h, a)| f(*h, a)),
                }
            }
        }
    }

    /// Time lost to stalls, without building a [`ConnAcc`] (ranking reads it for every row).
    pub(crate) fn lost_us_total(&self) -> u64 {
        match self {
            Slot::One(c) => c.stall.map(|_| c.stall_us).unwrap_or(0),
            Slot::Many { lost_us, .. } => *lost_us,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::{sample_event, Role, Timestamp};

    fn conn(outcome: Outcome, data: u32, stall_us: u64, host: u32, t: u128) -> OneConn {
        let e = Event {
            syn_data_bytes: data,
            retransmits: u32::from(stall_us > 0),
            stall_us,
            handshake_us: Some(200 + stall_us),
            ts: Timestamp::from_unix_ns(t),
            ..sample_event(Role::Client, outcome)
        };
        OneConn::of(&e, host, 0)
    }

    #[test]
    fn one_connection_is_small() {
        assert!(std::mem::size_of::<OneConn>() <= 32, "{}", std::mem::size_of::<OneConn>());
        assert!(std::mem::size_of::<Slot>() <= 32, "{}", std::mem::size_of::<Slot>());
        // Its four facts in one byte, each read back as given.
        let told = crate::events::Cause::ALL.map(Told::Cause);
        let changes = CookieChange::ALL.map(Some);
        for told in told.into_iter().chain([Told::NotRecorded]) {
            for change in changes.into_iter().chain([None]) {
                for (data, saved, exp, reset) in
                    (0..16).map(|i| (i & 1 != 0, i & 2 != 0, i & 4 != 0, i & 8 != 0))
                {
                    let b = Bits::new(data, saved, told, exp, change, reset);
                    let c = OneConn { bits: b, ..conn(Outcome::DataNotAcked, 64, 0, 0, 1) };
                    let read = (c.with_data(), c.saved_known(), c.told(), c.exp_option(), c.cookie_change());
                    assert_eq!(read, (data, saved, told, exp, change));
                    let failed = OneConn { outcome: Outcome::ConnectFailed, stall: None, ..c };
                    assert_eq!(failed.syn_data_reset(), reset && data);
                }
            }
        }
    }

    #[test]
    fn clients_keep_the_first_three_and_count_the_rest() {
        let mut a = ConnAcc::default();
        for (client, n) in [(7, 1), (3, 4), (9, 2), (5, 6), (3, 1)] {
            for _ in 0..n {
                a.add(&OneConn { client, ..conn(Outcome::Accepted, 64, 0, 0, 1) });
            }
        }
        // Cookie requests end no connection: not counted for anyone.
        a.add(&OneConn { client: 8, ..conn(Outcome::CookieRequested, 0, 0, 0, 1) });
        assert_eq!(a.clients.ranked(), (vec![3, 9, 7], true));
        let mut b = ConnAcc::default();
        b.add(&OneConn { client: 7, ..conn(Outcome::Accepted, 64, 0, 1, 1) });
        b.add(&OneConn { client: 7, ..conn(Outcome::Accepted, 64, 0, 1, 1) });
        let mut merged = ConnAcc::default();
        merged.merge(&b);
        merged.merge(&a);
        assert_eq!(merged.clients.ranked(), (vec![3, 7, 9], true));
    }

    #[test]
    fn counts_follow_the_stall_definition() {
        let mut a = ConnAcc::default();
        for c in [
            conn(Outcome::Accepted, 64, 0, 0, 5),
            conn(Outcome::SynRetransmitted, 64, 1_020_000, 0, 6),
            conn(Outcome::SynRetransmitted, 0, 1_010_000, 0, 7),
            conn(Outcome::DataNotAcked, 64, 0, 0, 9),
            conn(Outcome::DataNotAcked, 64, 0, 0, 8),
            conn(Outcome::ConnectFailed, 64, 0, 0, 10),
            conn(Outcome::CookieRequested, 0, 0, 0, 1),
            // Told alongside connections counted above: no connection of their own.
            conn(Outcome::CookieReceived, 0, 0, 0, 5),
            conn(Outcome::ActiveDisabled, 64, 1_020_000, 0, 6),
        ] {
            a.add(&c);
        }
        assert_eq!(a.connections(), 7);
        assert_eq!(Slot::One(conn(Outcome::CookieReceived, 0, 0, 0, 5)).acc().connections(), 0);
        assert_eq!((a.stalled(), a.lost_us_total()), (2, 2_030_000));
        assert_eq!((a.syn_data_dropped(), a.stalls_of(Cause::CookieRequestDropped)), (1, 1));
        assert_eq!((a.extra_round_trips(), a.extra_round_trip_us), (2, 400));
        assert_eq!(a.syn_data_sent(), 1 + 2 + 1 + 1);
        assert_eq!((a.first_accepted_ns, a.first_not_acked_ns), (Some(5), Some(8)));
        assert_eq!(a.outcomes()["syn_retransmitted"], 2);
        let mut b = a.clone();
        b.merge(&a);
        assert_eq!((b.connections(), b.lost_us_total(), b.first_not_acked_ns), (14, 4_060_000, Some(8)));
    }

    #[test]
    fn a_slot_splits_by_host_from_the_second_host_on() {
        let mut s = Slot::One(conn(Outcome::SynRetransmitted, 64, 1_000_000, 3, 0));
        assert_eq!((s.lost_us_total(), s.acc().connections()), (1_000_000, 1));
        s.add(conn(Outcome::Accepted, 64, 0, 3, 1));
        assert!(matches!(&s, Slot::Many { packed, .. } if Many::unpack(packed).hosts == Hosts::One(3)));
        s.add(conn(Outcome::SynRetransmitted, 64, 2_000_000, 7, 2));
        s.add(conn(Outcome::Accepted, 64, 0, 3, 3));
        let mut per = BTreeMap::new();
        s.for_each_host(|h, a| {
            per.insert(h, (a.connections(), a.syn_data_dropped(), a.lost_us_total()));
        });
        assert_eq!(per, BTreeMap::from([(3, (3, 1, 1_000_000)), (7, (1, 1, 2_000_000))]));
        assert_eq!((s.acc().connections(), s.lost_us_total()), (4, 3_000_000));
    }

    /// Issue 51, item 9: requests that overlap (a pool's first burst) are first contact;
    /// one sent after an earlier one's SYN-ACK came back was asked again.
    #[test]
    fn a_request_sent_after_an_answer_was_asked_again() {
        let ask = |t_ms: u64, handshake_us: u64, exp: bool| {
            let e = Event {
                handshake_us: Some(handshake_us),
                exp_option: exp,
                ts: Timestamp::from_unix_ns(u128::from(t_ms) * 1_000_000),
                ..sample_event(Role::Client, Outcome::CookieRequested)
            };
            OneConn::of(&e, 0, 0)
        };
        let mut burst = ConnAcc::default();
        // Three SYNs left at 0 ms, answered at 10, 11 and 12 ms.
        for (t, hs) in [(10, 10_000), (11, 11_000), (12, 12_000)] {
            burst.add(&ask(t, hs, false));
        }
        assert!(!burst.asks.asked_again_after_an_answer(), "{:?}", burst.asks);
        let mut again = burst.clone();
        again.add(&ask(30, 10_000, false)); // left at 20 ms, after the first answer
        assert!(again.asks.asked_again_after_an_answer(), "{:?}", again.asks);
        let mut exp = burst.clone();
        exp.add(&ask(13, 13_000, true));
        assert!(exp.asks.asked_again_after_an_answer(), "the kernel's own retry");
        let mut merged = ConnAcc::default();
        merged.merge(&burst);
        merged.merge(&again);
        assert_eq!(merged.asks, again.asks);
    }

    #[test]
    fn sums_saturate() {
        let mut a = ConnAcc::default();
        let big = OneConn { stall_us: u64::MAX, ..conn(Outcome::SynRetransmitted, 64, 1, 0, 0) };
        a.add(&big);
        a.add(&big);
        assert_eq!(a.lost_us_total(), u64::MAX);
    }
}
