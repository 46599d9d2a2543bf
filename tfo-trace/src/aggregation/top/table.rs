//! One table of `top` (destinations, listeners, processes or containers): its rows by
//! key, each row's counts ([`GroupStats`]) and rates, at most `capacity` rows, the least
//! recently seen evicted first.
use std::{
    borrow::Borrow,
    hash::{Hash, Hasher},
    net::SocketAddr,
    sync::Arc,
    time::Duration,
};

use lru::LruCache;
use serde::Serialize;

use super::rates::{Cumulative, Rates, StallHistory, Trend, ROW_HISTORY};
use crate::{
    aggregation::{
        counting::OutcomeCounts,
        quantiles::LogHistogram,
        refusals::{Refusals, Told},
        stall,
    },
    events::{Cause, Event, EventRef, Interner, Outcome, Role},
};

/// What a row is about: its key in its table.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum RowKey {
    Destination(SocketAddr),
    Listener {
        addr: SocketAddr,
        netns: u32,
    },
    Process {
        pid: u32,
        comm: Arc<str>,
    },
    /// A container's connections of one role: a connection counts once in a row, as in
    /// the destinations' (clients) and the listeners' (servers), where one row for both
    /// ends counted it twice when both are in the container. `label` None: no container,
    /// unit or cgroup below the root (the host).
    Container {
        label: Option<Arc<str>>,
        role: Role,
    },
}

impl RowKey {
    /// The key a row of `key` keeps, its names shared through `names`.
    fn owned(key: KeyRef<'_>, names: &mut Interner) -> RowKey {
        match key {
            KeyRef::Destination(a) => RowKey::Destination(a),
            KeyRef::Listener { addr, netns } => RowKey::Listener { addr, netns },
            KeyRef::Process { pid, comm } => RowKey::Process { pid, comm: names.get(comm) },
            KeyRef::Container { label, role } => {
                RowKey::Container { label: label.map(|l| names.get(l)), role }
            }
        }
    }
}

/// A [`RowKey`] as an event has it, its names borrowed: rows are found with it, and
/// only a new row makes a key of its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum KeyRef<'a> {
    Destination(SocketAddr),
    Listener { addr: SocketAddr, netns: u32 },
    Process { pid: u32, comm: &'a str },
    Container { label: Option<&'a str>, role: Role },
}

/// What a table is looked up by: a row's own key or an event's [`KeyRef`], hashed and
/// compared as the same [`KeyRef`] (the usual way to look a map up by a borrowed key).
trait AsKeyRef {
    fn key_ref(&self) -> KeyRef<'_>;
}

impl AsKeyRef for RowKey {
    fn key_ref(&self) -> KeyRef<'_> {
        match self {
            RowKey::Destination(a) => KeyRef::Destination(*a),
            RowKey::Listener { addr, netns } => KeyRef::Listener { addr: *addr, netns: *netns },
            RowKey::Process { pid, comm } => KeyRef::Process { pid: *pid, comm },
            RowKey::Container { label, role } => KeyRef::Container { label: label.as_deref(), role: *role },
        }
    }
}

impl AsKeyRef for KeyRef<'_> {
    fn key_ref(&self) -> KeyRef<'_> {
        *self
    }
}

impl<'a> Borrow<dyn AsKeyRef + 'a> for RowKey {
    fn borrow(&self) -> &(dyn AsKeyRef + 'a) {
        self
    }
}

impl Hash for dyn AsKeyRef + '_ {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.key_ref().hash(state)
    }
}

impl PartialEq for dyn AsKeyRef + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.key_ref() == other.key_ref()
    }
}

impl Eq for dyn AsKeyRef + '_ {}

/// As its [`KeyRef`], so that a table finds a row by either.
impl Hash for RowKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.key_ref().hash(state)
    }
}

/// What one event adds to each row it counts in, worked out once for all of them.
pub(super) struct Counted {
    outcome: Outcome,
    /// Time lost, if the event is a stall ([`stall::lost_us`]).
    stall_us: Option<u64>,
    /// SYN retransmissions (client events only).
    retransmits: u64,
    handshake_us: Option<u64>,
    /// The round trip an accepted connection saved, where measured (`Event::saved_us`).
    saved_us: Option<u64>,
    /// A `data_not_acked` connection's extra round trip ([`stall::extra_round_trip_of`]).
    extra_round_trip_us: Option<u64>,
    /// What a refused SYN-data's SYN-ACK said ([`Told::of`]), and its cookie's change.
    told: Option<Told>,
    cookie_change: Option<crate::events::CookieChange>,
}

impl Counted {
    pub(super) fn of(e: &EventRef<'_>) -> Counted {
        Counted {
            outcome: e.outcome,
            stall_us: stall::lost_us(e.role, e.outcome, e.retransmits, e.stall_us),
            retransmits: if e.role == Role::Client { u64::from(e.retransmits) } else { 0 },
            handshake_us: e.handshake_us,
            saved_us: e.saved_us,
            extra_round_trip_us: stall::extra_round_trip_of(e.role, e.outcome, e.handshake_us),
            told: Told::of(e),
            cookie_change: e.cookie_change,
        }
    }
}

/// Tallies of one group: the columns of `top`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GroupStats {
    pub outcomes: OutcomeCounts,
    /// Connections that lost time to a SYN timeout, and that time ([`super::stall`]).
    pub stalls: u64,
    pub stall_us: u64,
    /// SYN retransmissions in all (what TcpExtTCPSynRetrans counts on the client).
    pub retransmits: u64,
    pub handshake: LogHistogram,
    /// What accepted connections saved (their measured round trips, summed).
    pub saved_us: u64,
    /// What `data_not_acked` connections forwent: the round trip a working TFO would have
    /// saved each (their handshake's). Not time lost: the kernel resends the data at once on
    /// the SYN-ACK, as plain TCP would send it; apart from the balance, as `report` and
    /// `stalls` keep it.
    pub extra_round_trip_us: u64,
    /// Refused SYN-data by what its SYN-ACK said.
    pub refusals: Refusals,
}

impl GroupStats {
    pub fn add(&mut self, e: &Event) {
        self.count_in(&Counted::of(&e.view()));
    }

    pub(super) fn count_in(&mut self, t: &Counted) {
        self.outcomes.add(t.outcome);
        // Saturating: a recording may hold any numbers (the replay fuzz target found this).
        if let Some(lost_us) = t.stall_us {
            self.stalls += 1;
            self.stall_us = self.stall_us.saturating_add(lost_us);
        }
        self.retransmits = self.retransmits.saturating_add(t.retransmits);
        if let Some(us) = t.saved_us {
            self.saved_us = self.saved_us.saturating_add(us);
        }
        if let Some(us) = t.extra_round_trip_us {
            self.extra_round_trip_us = self.extra_round_trip_us.saturating_add(us);
        }
        if let Some(us) = t.handshake_us {
            self.handshake.record(us);
        }
        if let Some(told) = t.told {
            self.refusals.add(t.outcome, told, t.cookie_change);
        }
    }

    pub fn count(&self, o: Outcome) -> u64 {
        self.outcomes[o]
    }

    /// Connections ([`Outcome::ends_connection`]): the attempts.
    pub fn attempts(&self) -> u64 {
        self.outcomes.connections()
    }

    /// Data taken in the SYN; server children made with the backup key count too.
    pub fn accepted(&self) -> u64 {
        self.count(Outcome::Accepted) + self.count(Outcome::AcceptedAltKey)
    }

    /// What rates are taken of.
    pub fn cumulative(&self) -> Cumulative {
        Cumulative { attempts: self.attempts(), stalls: self.stalls, stall_us: self.stall_us }
    }

    pub fn row(&self) -> RowStats {
        RowStats {
            attempts: self.attempts(),
            cookie_requests: self.count(Outcome::CookieRequested),
            accepted: self.accepted(),
            data_not_acked: self.count(Outcome::DataNotAcked),
            refusal_cause: self.refusals.named_cause(),
            stalls: self.stalls,
            stall_us: self.stall_us,
            saved_us: self.saved_us,
            extra_round_trip_us: self.extra_round_trip_us,
            net_us: stall::net_us(self.saved_us, self.stall_us),
            syn_retransmits: self.retransmits,
            queue_overflows: self.count(Outcome::QueueOverflow),
            invalid_cookies: self.count(Outcome::CookieInvalid),
            backup_key_hits: self.count(Outcome::AcceptedAltKey),
            connect_failed: self.count(Outcome::ConnectFailed),
            p50_us: self.handshake.quantile(0.50),
            p99_us: self.handshake.quantile(0.99),
            ..RowStats::default()
        }
    }
}

/// The numbers of one row, frozen for display (and the JSON snapshot's fields).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct RowStats {
    pub attempts: u64,
    pub cookie_requests: u64,
    pub accepted: u64,
    pub data_not_acked: u64,
    /// What most refused SYN-data's SYN-ACKs said (`new_cookie`, `no_tfo_option`, ...);
    /// null without refusals.
    pub refusal_cause: Option<Cause>,
    pub stalls: u64,
    pub stall_us: u64,
    /// What accepted connections saved; what `data_not_acked` connections forwent (the
    /// round trip a working TFO saves, their handshake's: a gain forgone, not time lost);
    /// the saving less what stalls lost (`stall_us`), as `report`, `stalls` and `export`
    /// weigh them.
    pub saved_us: u64,
    pub extra_round_trip_us: u64,
    pub net_us: i64,
    pub syn_retransmits: u64,
    pub queue_overflows: u64,
    pub invalid_cookies: u64,
    pub backup_key_hits: u64,
    pub connect_failed: u64,
    pub p50_us: Option<u64>,
    pub p99_us: Option<u64>,
    /// Over the last refresh interval ([`Rates`]); null before the first refresh and when
    /// replaying a recording (no "now" there).
    pub attempts_per_s: Option<f64>,
    pub stalls_per_s: Option<f64>,
    pub lost_per_s: Option<f64>,
}

impl RowStats {
    pub fn with_rates(self, r: Option<Rates>) -> RowStats {
        RowStats {
            attempts_per_s: r.map(|r| r.attempts_per_s),
            stalls_per_s: r.map(|r| r.stalls_per_s),
            lost_per_s: r.map(|r| r.lost_per_s),
            ..self
        }
    }
}

struct Entry {
    stats: GroupStats,
    trend: Trend,
    /// A destination's name ([`Row::name`]).
    name: Option<Arc<str>>,
}

impl Entry {
    fn count_in(&mut self, t: &Counted, name: Option<&Arc<str>>) {
        self.stats.count_in(t);
        // The most recent name known wins; an event without one (a connect before the
        // answer, a name's TTL past) leaves the row's.
        if let Some(name) = name {
            if !self.name.as_ref().is_some_and(|n| Arc::ptr_eq(n, name) || n == name) {
                self.name = Some(name.clone());
            }
        }
    }
}

/// Groups of one table, at most `capacity`, least recently seen evicted first.
pub struct BoundedTable {
    capacity: usize,
    /// In order of the last event: a hit moves its row to the front in O(1) (a B-tree
    /// reorder per event was most of `top`'s CPU). Unbounded here: rows are allocated as
    /// they come, and `add` evicts at `capacity`.
    groups: LruCache<RowKey, Entry>,
    pub evicted: u64,
}

impl BoundedTable {
    pub fn new(capacity: usize) -> Self {
        BoundedTable { capacity: capacity.max(1), groups: LruCache::unbounded(), evicted: 0 }
    }

    /// Counts `t` in the row of `key`, made (its key's names shared through `names`) if new;
    /// `name`: the destination's name the event came with, if any ([`Row::name`]).
    pub(super) fn add(
        &mut self,
        key: KeyRef<'_>,
        t: &Counted,
        names: &mut Interner,
        name: Option<&Arc<str>>,
    ) {
        // The row of the last event first: events come in runs (a destination's connections,
        // a process's), and that row is counted again without a hash or a reorder.
        if let Some((_, entry)) = self.groups.iter_mut().next().filter(|(k, _)| k.key_ref() == key) {
            entry.count_in(t, name);
            return;
        }
        if let Some(entry) = self.groups.get_mut(&key as &dyn AsKeyRef) {
            entry.count_in(t, name);
            return;
        }
        if self.groups.len() >= self.capacity && self.groups.pop_lru().is_some() {
            self.evicted += 1;
        }
        let mut entry = Entry { stats: GroupStats::default(), trend: Trend::default(), name: None };
        entry.count_in(t, name);
        self.groups.put(RowKey::owned(key, names), entry);
    }

    /// Closes a refresh interval for every group: their rates and stall histories.
    pub fn tick(&mut self, elapsed: Duration) {
        for (_, e) in self.groups.iter_mut() {
            e.trend.tick(e.stats.cumulative(), elapsed, ROW_HISTORY);
        }
    }

    pub fn len(&self) -> usize {
        self.groups.len()
    }

    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }

    pub fn get(&self, key: &RowKey) -> Option<&GroupStats> {
        self.groups.peek(key).map(|e| &e.stats)
    }

    /// The name of the row of `key` ([`Row::name`]).
    pub fn name_of(&self, key: &RowKey) -> Option<&Arc<str>> {
        self.groups.peek(key).and_then(|e| e.name.as_ref())
    }

    pub(super) fn rows(&self) -> Vec<Row> {
        self.groups
            .iter()
            .map(|(k, e)| Row {
                key: k.clone(),
                stats: e.stats.row().with_rates(e.trend.rates()),
                history: e.trend.history(),
                name: e.name.clone(),
            })
            .collect()
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    pub key: RowKey,
    pub stats: RowStats,
    /// Stalls per refresh, the last [`ROW_HISTORY`] refreshes.
    pub history: StallHistory,
    /// A destination row's name: the last its client events came with (`--names`,
    /// `Event::dname`), kept when later ones come without; None on the other tables. An
    /// attribute of the row, not of its key: one address, one row, whatever it was called.
    pub name: Option<Arc<str>>,
}
