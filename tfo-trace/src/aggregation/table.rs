//! The model behind `tfo-trace top`: per-group tallies (per destination, per listener, per
//! process, per container), bounded in memory, with the sort and the filter the views
//! apply, and each group's rates over the last refresh ([`super::rates`]). Pure: no I/O, no
//! clock (the loop measures the time between refreshes), no terminal.
//!
//! A busy host can talk to a million destinations, so each table keeps at most
//! `capacity` groups: a new group beyond that evicts the least recently seen one, and
//! the number evicted is kept (the header shows it; totals still count every event).
use std::{
    borrow::Borrow,
    collections::BTreeMap,
    hash::{Hash, Hasher},
    net::SocketAddr,
    sync::Arc,
    time::Duration,
};

use lru::LruCache;
use serde::Serialize;

use super::{
    counting::OutcomeCounts,
    quantiles::{Decades, LogHistogram},
    rates::{Cumulative, Rates, StallHistory, Trend, HOST_HISTORY, ROW_HISTORY},
    stall,
};
use crate::events::{Event, EventRef, Interner, Outcome, Role};

/// Groups kept per table by default.
pub const DEFAULT_CAPACITY: usize = 10_000;

/// The tables of `top`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum View {
    /// Client events, by destination address:port.
    Destinations,
    /// Server events, by listener address:port and network namespace.
    Listeners,
    /// All events, by process (pid, comm).
    Processes,
    /// All events, by container ([`Event::container_label`]: the container, else the
    /// systemd unit, else the cgroup path; the host's root cgroup on its own row).
    Containers,
}

impl View {
    pub const ALL: [View; 4] = [View::Destinations, View::Listeners, View::Processes, View::Containers];

    pub fn title(self) -> &'static str {
        match self {
            View::Destinations => "destinations",
            View::Listeners => "listeners",
            View::Processes => "processes",
            View::Containers => "containers",
        }
    }

    /// Its number key in the terminal UI (1-based position in [`View::ALL`]).
    pub fn key(self) -> usize {
        View::ALL.iter().position(|&v| v == self).unwrap_or(0) + 1
    }

    pub fn next(self) -> View {
        View::ALL[self.key() % View::ALL.len()]
    }
}

/// What a row is about.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum GroupKey {
    Destination(SocketAddr),
    Listener {
        addr: SocketAddr,
        netns: u32,
    },
    Process {
        pid: u32,
        comm: Arc<str>,
    },
    /// None: no container, unit or cgroup below the root (the host).
    Container(Option<Arc<str>>),
}

impl GroupKey {
    /// The key cells as the tables print them, one per key column of the view.
    pub fn cells(&self) -> Vec<String> {
        match self {
            GroupKey::Destination(a) => vec![a.to_string()],
            GroupKey::Listener { addr, netns } => vec![addr.to_string(), netns.to_string()],
            GroupKey::Process { pid, comm } => vec![
                if *pid == 0 { "-".into() } else { pid.to_string() },
                if comm.is_empty() { "-".into() } else { comm.to_string() },
            ],
            GroupKey::Container(label) => vec![label.as_deref().unwrap_or("-").to_string()],
        }
    }

    /// The key a row of `key` keeps, its names shared through `names`.
    fn owned(key: KeyRef<'_>, names: &mut Interner) -> GroupKey {
        match key {
            KeyRef::Destination(a) => GroupKey::Destination(a),
            KeyRef::Listener { addr, netns } => GroupKey::Listener { addr, netns },
            KeyRef::Process { pid, comm } => GroupKey::Process { pid, comm: names.get(comm) },
            KeyRef::Container(label) => GroupKey::Container(label.map(|l| names.get(l))),
        }
    }

    /// `/` filter: a case-insensitive substring of the address:port, the port, the netns
    /// (its inode, or its `ip netns` name from `netns_names`), the pid, the process name or
    /// the container (`-`: the host). `needle` is already lower case.
    pub fn matches(&self, needle: &str, netns_names: &BTreeMap<u32, Arc<str>>) -> bool {
        let named = |netns: &u32| netns_names.get(netns).is_some_and(|n| n.to_lowercase().contains(needle));
        needle.is_empty()
            || self.cells().iter().any(|c| c.to_lowercase().contains(needle))
            || matches!(self, GroupKey::Listener { netns, .. } if named(netns))
    }
}

/// A [`GroupKey`] as an event has it, its names borrowed: rows are found with it, and
/// only a new row makes a key of its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum KeyRef<'a> {
    Destination(SocketAddr),
    Listener { addr: SocketAddr, netns: u32 },
    Process { pid: u32, comm: &'a str },
    Container(Option<&'a str>),
}

/// What a table is looked up by: a row's own key or an event's [`KeyRef`], hashed and
/// compared as the same [`KeyRef`] (the usual way to look a map up by a borrowed key).
trait AsKeyRef {
    fn key_ref(&self) -> KeyRef<'_>;
}

impl AsKeyRef for GroupKey {
    fn key_ref(&self) -> KeyRef<'_> {
        match self {
            GroupKey::Destination(a) => KeyRef::Destination(*a),
            GroupKey::Listener { addr, netns } => KeyRef::Listener { addr: *addr, netns: *netns },
            GroupKey::Process { pid, comm } => KeyRef::Process { pid: *pid, comm },
            GroupKey::Container(label) => KeyRef::Container(label.as_deref()),
        }
    }
}

impl AsKeyRef for KeyRef<'_> {
    fn key_ref(&self) -> KeyRef<'_> {
        *self
    }
}

impl<'a> Borrow<dyn AsKeyRef + 'a> for GroupKey {
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
impl Hash for GroupKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.key_ref().hash(state)
    }
}

/// What one event adds to each row it counts in, worked out once for all of them.
struct Counted {
    outcome: Outcome,
    /// Time lost, if the event is a stall ([`stall::lost_us`]).
    stall_us: Option<u64>,
    /// SYN retransmissions (client events only).
    retransmits: u64,
    handshake_us: Option<u64>,
}

impl Counted {
    fn of(e: &EventRef<'_>) -> Counted {
        Counted {
            outcome: e.outcome,
            stall_us: stall::lost_us(e.role, e.outcome, e.retransmits, e.stall_us),
            retransmits: if e.role == Role::Client { u64::from(e.retransmits) } else { 0 },
            handshake_us: e.handshake_us,
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
}

impl GroupStats {
    pub fn add(&mut self, e: &Event) {
        self.count_in(&Counted::of(&e.view()));
    }

    fn count_in(&mut self, t: &Counted) {
        self.outcomes.add(t.outcome);
        // Saturating: a recording may hold any numbers (the replay fuzz target found this).
        if let Some(lost_us) = t.stall_us {
            self.stalls += 1;
            self.stall_us = self.stall_us.saturating_add(lost_us);
        }
        self.retransmits = self.retransmits.saturating_add(t.retransmits);
        if let Some(us) = t.handshake_us {
            self.handshake.record(us);
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
            stalls: self.stalls,
            stall_us: self.stall_us,
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
    pub stalls: u64,
    pub stall_us: u64,
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
}

/// Groups of one table, at most `capacity`, least recently seen evicted first.
pub struct BoundedTable {
    capacity: usize,
    /// In order of the last event: a hit moves its row to the front in O(1) (a B-tree
    /// reorder per event was most of `top`'s CPU). Unbounded here: rows are allocated as
    /// they come, and `add` evicts at `capacity`.
    groups: LruCache<GroupKey, Entry>,
    pub evicted: u64,
}

impl BoundedTable {
    pub fn new(capacity: usize) -> Self {
        BoundedTable { capacity: capacity.max(1), groups: LruCache::unbounded(), evicted: 0 }
    }

    /// Counts `t` in the row of `key`, made (its key's names shared through `names`) if new.
    fn add(&mut self, key: KeyRef<'_>, t: &Counted, names: &mut Interner) {
        // The row of the last event first: events come in runs (a destination's connections,
        // a process's), and that row is counted again without a hash or a reorder.
        if let Some((_, entry)) = self.groups.iter_mut().next().filter(|(k, _)| k.key_ref() == key) {
            entry.stats.count_in(t);
            return;
        }
        if let Some(entry) = self.groups.get_mut(&key as &dyn AsKeyRef) {
            entry.stats.count_in(t);
            return;
        }
        if self.groups.len() >= self.capacity && self.groups.pop_lru().is_some() {
            self.evicted += 1;
        }
        let mut stats = GroupStats::default();
        stats.count_in(t);
        self.groups.put(GroupKey::owned(key, names), Entry { stats, trend: Trend::default() });
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

    pub fn get(&self, key: &GroupKey) -> Option<&GroupStats> {
        self.groups.peek(key).map(|e| &e.stats)
    }

    fn rows(&self) -> Vec<Row> {
        self.groups
            .iter()
            .map(|(k, e)| Row {
                key: k.clone(),
                stats: e.stats.row().with_rates(e.trend.rates()),
                history: e.trend.history(),
            })
            .collect()
    }
}

/// The header's numbers: every event (including those of evicted groups), and each role.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Totals {
    pub total: RowStats,
    pub client: RowStats,
    pub server: RowStats,
}

/// Every event `top` has seen, grouped four ways, plus the totals.
pub struct TopModel {
    pub destinations: BoundedTable,
    pub listeners: BoundedTable,
    pub processes: BoundedTable,
    pub containers: BoundedTable,
    /// The names in the rows' keys (processes, containers): an event borrows its names, a
    /// row owns them.
    names: Interner,
    /// Every event, including those of evicted groups.
    pub total: GroupStats,
    pub client_total: GroupStats,
    pub server_total: GroupStats,
    pub decades: Decades,
    pub events: u64,
    /// `ip netns` names of the listeners' namespaces, for the `/` filter.
    netns_names: BTreeMap<u32, Arc<str>>,
    /// The totals' rates (of the totals shown: the kernel's, where it counts); the
    /// client's stall history is the header's graph.
    total_trend: Trend,
    client_trend: Trend,
    server_trend: Trend,
    /// The real length of the last refresh interval.
    last_interval: Option<Duration>,
}

impl Default for TopModel {
    fn default() -> Self {
        Self::new(DEFAULT_CAPACITY)
    }
}

impl TopModel {
    pub fn new(capacity: usize) -> Self {
        TopModel {
            destinations: BoundedTable::new(capacity),
            listeners: BoundedTable::new(capacity),
            processes: BoundedTable::new(capacity),
            containers: BoundedTable::new(capacity),
            names: Interner::default(),
            total: GroupStats::default(),
            client_total: GroupStats::default(),
            server_total: GroupStats::default(),
            decades: Decades::default(),
            events: 0,
            netns_names: BTreeMap::new(),
            total_trend: Trend::default(),
            client_trend: Trend::default(),
            server_trend: Trend::default(),
            last_interval: None,
        }
    }

    pub fn add(&mut self, e: &Event) {
        self.add_view(e.view());
    }

    /// [`TopModel::add`] for an event as the ring buffer's reader hands it over.
    pub fn add_view(&mut self, e: EventRef<'_>) {
        let t = Counted::of(&e);
        self.events += 1;
        self.total.count_in(&t);
        match e.role {
            Role::Client => {
                self.client_total.count_in(&t);
                let key = KeyRef::Destination(SocketAddr::new(e.daddr, e.dport));
                self.destinations.add(key, &t, &mut self.names);
            }
            Role::Server => {
                self.server_total.count_in(&t);
                let key = KeyRef::Listener { addr: e.listener_name(), netns: e.netns };
                self.listeners.add(key, &t, &mut self.names);
                if let Some(name) = e.netns_name.filter(|_| !self.netns_names.contains_key(&e.netns)) {
                    self.netns_names.insert(e.netns, self.names.get(name));
                }
            }
        }
        self.processes.add(KeyRef::Process { pid: e.pid, comm: e.comm }, &t, &mut self.names);
        self.containers.add(KeyRef::Container(e.container), &t, &mut self.names);
        if let Some(us) = e.handshake_us {
            self.decades.record(us);
        }
    }

    pub fn table(&self, view: View) -> &BoundedTable {
        match view {
            View::Destinations => &self.destinations,
            View::Listeners => &self.listeners,
            View::Processes => &self.processes,
            View::Containers => &self.containers,
        }
    }

    /// The totals as the events count them (the view may take the kernel's instead).
    pub fn event_totals(&self) -> Totals {
        Totals { total: self.total.row(), client: self.client_total.row(), server: self.server_total.row() }
    }

    /// Closes one refresh interval that lasted `elapsed` (real time, measured by the
    /// caller): every row's and the totals' rates and stall histories. `totals` are the
    /// totals shown at this refresh.
    pub fn tick(&mut self, elapsed: Duration, totals: &Totals) {
        for v in View::ALL {
            self.table_mut(v).tick(elapsed);
        }
        let of = |r: &RowStats| Cumulative { attempts: r.attempts, stalls: r.stalls, stall_us: r.stall_us };
        self.total_trend.tick(of(&totals.total), elapsed, HOST_HISTORY);
        self.client_trend.tick(of(&totals.client), elapsed, HOST_HISTORY);
        self.server_trend.tick(of(&totals.server), elapsed, HOST_HISTORY);
        self.last_interval = Some(elapsed);
    }

    fn table_mut(&mut self, view: View) -> &mut BoundedTable {
        match view {
            View::Destinations => &mut self.destinations,
            View::Listeners => &mut self.listeners,
            View::Processes => &mut self.processes,
            View::Containers => &mut self.containers,
        }
    }

    /// A frozen copy for display: all rows of all tables, unsorted, with the events' totals.
    pub fn snapshot(&self) -> Snapshot {
        self.snapshot_with(self.event_totals())
    }

    /// A frozen copy for display with `totals` in the header (the kernel's, where it
    /// counts); rates are those of the last refresh.
    pub fn snapshot_with(&self, totals: Totals) -> Snapshot {
        let table = |v: View| {
            let t = self.table(v);
            TableSnapshot { rows: t.rows(), evicted: t.evicted }
        };
        Snapshot {
            events: self.events,
            total: totals.total.with_rates(self.total_trend.rates()),
            client: totals.client.with_rates(self.client_trend.rates()),
            server: totals.server.with_rates(self.server_trend.rates()),
            stall_history: self.client_trend.history(),
            rate_interval: self.last_interval,
            decades: self.decades,
            destinations: table(View::Destinations),
            listeners: table(View::Listeners),
            processes: table(View::Processes),
            containers: table(View::Containers),
            kernel_counted: Default::default(),
            netns_names: self.netns_names.clone(),
        }
    }
}

/// The model fed with a batch of events (replay, tests).
pub fn model_of<'a>(events: impl IntoIterator<Item = &'a Event>) -> TopModel {
    let mut m = TopModel::default();
    for e in events {
        m.add(e);
    }
    m
}

#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    pub key: GroupKey,
    pub stats: RowStats,
    /// Stalls per refresh, the last [`ROW_HISTORY`] refreshes.
    pub history: StallHistory,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct TableSnapshot {
    pub rows: Vec<Row>,
    pub evicted: u64,
}

/// What one refresh shows: taken from the model once per interval (and kept while paused).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Snapshot {
    pub events: u64,
    pub total: RowStats,
    pub client: RowStats,
    pub server: RowStats,
    /// Host-wide (client) stalls per refresh: the header's graph.
    pub stall_history: StallHistory,
    /// The real length of the refresh interval the rates were taken over; None before the
    /// first refresh and when replaying.
    pub rate_interval: Option<Duration>,
    pub decades: Decades,
    pub destinations: TableSnapshot,
    pub listeners: TableSnapshot,
    pub processes: TableSnapshot,
    pub containers: TableSnapshot,
    /// What the namespaces' counters counted of the outcomes no hook sees (live only).
    pub kernel_counted: super::kernel_counted::KernelCounted,
    /// `ip netns` names of the listeners' namespaces, for the `/` filter.
    pub netns_names: BTreeMap<u32, Arc<str>>,
}

impl Snapshot {
    pub fn table(&self, view: View) -> &TableSnapshot {
        match view {
            View::Destinations => &self.destinations,
            View::Listeners => &self.listeners,
            View::Processes => &self.processes,
            View::Containers => &self.containers,
        }
    }

    /// The rows of one table that pass `filter`, in `sort` order.
    pub fn rows(&self, view: View, sort: Sort, filter: &str) -> Vec<&Row> {
        let needle = filter.trim().to_lowercase();
        let mut rows: Vec<&Row> =
            self.table(view).rows.iter().filter(|r| r.key.matches(&needle, &self.netns_names)).collect();
        rows.sort_by(|a, b| sort.compare(a, b));
        rows
    }

    pub fn evicted(&self) -> u64 {
        View::ALL.iter().map(|&v| self.table(v).evicted).sum()
    }
}

/// Sort orders `s` cycles through: biggest first, then by key so the order is stable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Sort {
    Attempts,
    Stalls,
    /// Stalls per second over the last refresh: what is stalling now.
    StallRate,
    Lost,
    P99,
    Accepted,
    Name,
}

impl Sort {
    pub const ALL: [Sort; 7] =
        [Sort::Attempts, Sort::Stalls, Sort::StallRate, Sort::Lost, Sort::P99, Sort::Accepted, Sort::Name];

    pub fn next(self) -> Sort {
        let i = Self::ALL.iter().position(|&s| s == self).unwrap_or(0);
        Self::ALL[(i + 1) % Self::ALL.len()]
    }

    pub fn name(self) -> &'static str {
        match self {
            Sort::Attempts => "attempts",
            Sort::Stalls => "stalls",
            Sort::StallRate => "stalls/s",
            Sort::Lost => "lost",
            Sort::P99 => "p99",
            Sort::Accepted => "accepted",
            Sort::Name => "name",
        }
    }

    fn compare(self, a: &Row, b: &Row) -> std::cmp::Ordering {
        let (x, y) = (&a.stats, &b.stats);
        let by = match self {
            Sort::Attempts => y.attempts.cmp(&x.attempts),
            Sort::Stalls => (y.stalls, y.stall_us).cmp(&(x.stalls, x.stall_us)),
            Sort::StallRate => {
                let now = |s: &RowStats| (s.stalls_per_s.unwrap_or(-1.0), s.lost_per_s.unwrap_or(-1.0));
                now(y).partial_cmp(&now(x)).unwrap_or(std::cmp::Ordering::Equal)
            }
            Sort::Lost => (y.stall_us, y.stalls).cmp(&(x.stall_us, x.stalls)),
            Sort::P99 => y.p99_us.cmp(&x.p99_us),
            Sort::Accepted => y.accepted.cmp(&x.accepted),
            Sort::Name => std::cmp::Ordering::Equal,
        };
        by.then_with(|| a.key.cmp(&b.key))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::events::sample_event;
    use std::net::{IpAddr, Ipv4Addr};

    /// A client event towards 198.18.0.`host`:`port` by pid 100 "curl".
    pub(crate) fn client(outcome: Outcome, host: u8, port: u16, handshake_us: u64, stall_us: u64) -> Event {
        Event {
            daddr: IpAddr::V4(Ipv4Addr::new(198, 18, 0, host)),
            dport: port,
            netns: 4026532177,
            pid: 100,
            comm: "curl".into(),
            syn_data_bytes: if outcome == Outcome::CookieRequested { 0 } else { 64 },
            retransmits: u32::from(stall_us > 0),
            handshake_us: Some(handshake_us),
            stall_us,
            ..sample_event(Role::Client, outcome)
        }
    }

    pub(crate) fn server(outcome: Outcome, port: u16, netns: u32) -> Event {
        let mut e = client(outcome, 2, 40000, 50, 0);
        e.role = Role::Server;
        e.saddr = IpAddr::V4(Ipv4Addr::new(198, 18, 0, 2));
        e.sport = port;
        e.daddr = IpAddr::V4(Ipv4Addr::new(198, 18, 0, 1));
        e.netns = netns;
        e.pid = 200;
        e.comm = "nginx".into();
        e
    }

    /// The demo's traffic: a clean destination and one behind the middlebox.
    pub(crate) fn demo_events() -> Vec<Event> {
        let mut v = vec![client(Outcome::CookieRequested, 2, 8080, 120, 0)];
        for _ in 0..7 {
            v.push(client(Outcome::Accepted, 2, 8080, 100, 0));
            v.push(server(Outcome::Accepted, 8080, 4026532246));
        }
        v.push(client(Outcome::CookieRequested, 3, 8080, 150, 0));
        v.push(client(Outcome::SynRetransmitted, 3, 8080, 1_006_800, 1_005_900));
        v.push(client(Outcome::SynRetransmitted, 3, 8080, 1_024_000, 1_023_000));
        v.push(server(Outcome::QueueOverflow, 8081, 4026532246));
        v.push(server(Outcome::AcceptedAltKey, 8081, 4026532246));
        v.push(server(Outcome::CookieInvalid, 8081, 4026532246));
        v
    }

    /// The demo events as live `top` sees them over refreshes 1 s apart: the clean traffic
    /// over the first five, the middlebox destination's cookie request and first stall in
    /// the sixth, its second stall and the server's refusals in the seventh; then `quiet`
    /// refreshes without an event.
    pub(crate) fn demo_refreshes(quiet: usize) -> TopModel {
        let events = demo_events();
        let mut m = TopModel::default();
        let refresh = |m: &mut TopModel, chunk: &[Event]| {
            chunk.iter().for_each(|e| m.add(e));
            let totals = m.event_totals();
            m.tick(Duration::from_secs(1), &totals);
        };
        for chunk in events[..15].chunks(3) {
            refresh(&mut m, chunk);
        }
        refresh(&mut m, &events[15..17]);
        refresh(&mut m, &events[17..]);
        for _ in 0..quiet {
            refresh(&mut m, &[]);
        }
        m
    }

    #[test]
    fn refreshes_give_each_row_its_rates_and_stall_history() {
        let m = demo_refreshes(0);
        let s = m.snapshot();
        let bad = s.destinations.rows.iter().find(|r| r.key == dst(3, 8080)).unwrap();
        // The last refresh: one stall (1.023 s lost) in one second.
        assert_eq!(bad.stats.stalls, 2);
        assert_eq!(
            (bad.stats.attempts_per_s, bad.stats.stalls_per_s, bad.stats.lost_per_s),
            (Some(1.0), Some(1.0), Some(1.023))
        );
        assert_eq!(bad.history.last(10), [1, 1], "a row's graph starts with the row");
        let clean = s.destinations.rows.iter().find(|r| r.key == dst(2, 8080)).unwrap();
        assert_eq!(clean.stats.stalls_per_s, Some(0.0));
        assert!(clean.history.samples.is_empty(), "no graph kept for a row that never stalled");
        assert_eq!(s.client.stalls_per_s, Some(1.0));
        assert_eq!(s.stall_history.last(10), [0, 0, 0, 0, 0, 1, 1]);
        assert_eq!(s.rate_interval, Some(Duration::from_secs(1)));

        // Quiet refreshes: the totals stay, the rates are 0 at the next refresh.
        let s = demo_refreshes(2).snapshot();
        let bad = s.destinations.rows.iter().find(|r| r.key == dst(3, 8080)).unwrap();
        assert_eq!((bad.stats.stalls, bad.stats.stall_us), (2, 2_028_900));
        assert_eq!((bad.stats.stalls_per_s, bad.stats.lost_per_s), (Some(0.0), Some(0.0)));
        assert_eq!(bad.history.last(10), [1, 1, 0, 0]);
        assert_eq!(s.client.stalls_per_s, Some(0.0));

        // Without refreshes (a replay), no rate at all.
        let s = model_of(&demo_events()).snapshot();
        assert_eq!(s.client.stalls_per_s, None);
        assert!(s.destinations.rows.iter().all(|r| r.stats.attempts_per_s.is_none()));
    }

    fn dst(host: u8, port: u16) -> GroupKey {
        GroupKey::Destination(SocketAddr::new(IpAddr::V4(Ipv4Addr::new(198, 18, 0, host)), port))
    }

    #[test]
    fn tallies_per_destination_listener_and_process() {
        let m = model_of(&demo_events());
        let clean = m.destinations.get(&dst(2, 8080)).unwrap().row();
        assert_eq!((clean.attempts, clean.cookie_requests, clean.accepted, clean.stalls), (8, 1, 7, 0));
        let bad = m.destinations.get(&dst(3, 8080)).unwrap().row();
        assert_eq!((bad.attempts, bad.cookie_requests, bad.accepted, bad.stalls), (3, 1, 0, 2));
        assert_eq!(bad.stall_us, 2_028_900);
        assert_eq!(bad.syn_retransmits, 2);
        assert!(bad.p99_us.unwrap() >= 1_000_000, "{bad:?}");

        assert_eq!(m.listeners.len(), 2);
        let l81 = GroupKey::Listener { addr: "198.18.0.2:8081".parse().unwrap(), netns: 4026532246 };
        let l81 = m.listeners.get(&l81).unwrap().row();
        assert_eq!(
            (l81.queue_overflows, l81.backup_key_hits, l81.invalid_cookies, l81.accepted),
            (1, 1, 1, 1)
        );

        assert_eq!(m.processes.len(), 2);
        let curl = m.processes.get(&GroupKey::Process { pid: 100, comm: "curl".into() }).unwrap();
        assert_eq!(curl.attempts(), 11);
        assert_eq!(m.total.attempts(), 21);
        assert_eq!(m.client_total.stalls, 2);
        assert_eq!(m.server_total.accepted(), 8);
        assert_eq!(m.decades.mode(), Some(0));
        assert_eq!(m.decades.counts[4], 2, "the two stalls are in the >=1s bucket");
    }

    #[test]
    fn tables_are_bounded_and_evict_the_least_recently_seen() {
        let mut m = TopModel::new(3);
        for host in 1..=3 {
            m.add(&client(Outcome::Accepted, host, 80, 100, 0));
        }
        // Touch host 1 again: host 2 is now the oldest.
        m.add(&client(Outcome::Accepted, 1, 80, 100, 0));
        m.add(&client(Outcome::Accepted, 4, 80, 100, 0));
        assert_eq!(m.destinations.len(), 3);
        assert_eq!(m.destinations.evicted, 1);
        assert!(m.destinations.get(&dst(2, 80)).is_none(), "least recently seen evicted");
        assert_eq!(m.destinations.get(&dst(1, 80)).unwrap().attempts(), 2);
        assert!(m.destinations.get(&dst(4, 80)).is_some());
        assert_eq!(m.total.attempts(), 5, "totals keep evicted groups' events");
        assert_eq!(m.snapshot().evicted(), 1);

        // A million destinations stay within the bound.
        let mut big = TopModel::new(1000);
        for i in 0..20_000u32 {
            let mut e = client(Outcome::Accepted, 1, 80, 100, 0);
            e.daddr = IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i));
            big.add(&e);
        }
        assert_eq!(big.destinations.len(), 1000);
        assert_eq!(big.destinations.evicted, 19_000);
    }

    #[test]
    fn sort_and_filter() {
        let s = model_of(&demo_events()).snapshot();
        let by_attempts = s.rows(View::Destinations, Sort::Attempts, "");
        assert_eq!(by_attempts[0].key, dst(2, 8080));
        let by_stalls = s.rows(View::Destinations, Sort::Stalls, "");
        assert_eq!(by_stalls[0].key, dst(3, 8080));
        assert_eq!(s.rows(View::Destinations, Sort::Lost, "")[0].key, dst(3, 8080));
        assert_eq!(s.rows(View::Destinations, Sort::P99, "")[0].key, dst(3, 8080));
        let by_name = s.rows(View::Destinations, Sort::Name, "");
        assert_eq!(by_name[0].key, dst(2, 8080));

        assert_eq!(s.rows(View::Destinations, Sort::Attempts, "0.3:").len(), 1);
        assert_eq!(s.rows(View::Destinations, Sort::Attempts, "8080").len(), 2, "by port");
        assert_eq!(s.rows(View::Listeners, Sort::Attempts, "8081").len(), 1);
        assert_eq!(s.rows(View::Listeners, Sort::Attempts, "4026532246").len(), 2, "by netns");
        // By the namespace's `ip netns` name too, as events name it (issue 31, item 12).
        let named: Vec<Event> = demo_events()
            .into_iter()
            .map(|e| Event { netns_name: (e.role == Role::Server).then(|| "tfolab-7-srv".into()), ..e })
            .collect();
        let n = model_of(&named).snapshot();
        assert_eq!(n.rows(View::Listeners, Sort::Attempts, "TFOLAB-7").len(), 2, "by netns name");
        assert!(s.rows(View::Listeners, Sort::Attempts, "tfolab").is_empty(), "no names known");
        assert_eq!(s.rows(View::Processes, Sort::Attempts, "NGINX").len(), 1, "by name, any case");
        assert_eq!(s.rows(View::Processes, Sort::Attempts, "100").len(), 1, "by pid");
        assert!(s.rows(View::Processes, Sort::Attempts, "nothing").is_empty());

        let mut sort = Sort::Attempts;
        for _ in 0..Sort::ALL.len() {
            sort = sort.next();
        }
        assert_eq!(sort, Sort::Attempts, "s cycles back");
        assert_eq!(View::Processes.next(), View::Containers);
        assert_eq!(View::Containers.next(), View::Destinations);
        assert_eq!(View::Containers.key(), 4);
    }

    const DOCKER_ID: &str = "4f1e6d9a0c2b3a4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5";

    /// `e` from a process in a docker container (`docker ps` shows it as `4f1e6d9a0c2b`).
    pub(crate) fn in_docker(e: Event) -> Event {
        let path = format!("/system.slice/docker-{DOCKER_ID}.scope");
        in_cgroup(e, &path, Some(DOCKER_ID), Some("docker"))
    }

    /// The demo's events with the first five (a cookie request, then two accepted
    /// connections seen at both ends) from a docker container, the rest from the host.
    pub(crate) fn demo_events_in_a_container() -> Vec<Event> {
        let mut events = demo_events();
        for e in &mut events[..5] {
            *e = in_docker(e.clone());
        }
        events
    }

    /// `e` from a process in `cgroup`, with the container the reader names for that path.
    fn in_cgroup(e: Event, cgroup: &str, id: Option<&str>, runtime: Option<&str>) -> Event {
        Event {
            cgroup_id: Some(7),
            cgroup: Some(cgroup.into()),
            container_id: id.map(Into::into),
            container_runtime: runtime.map(Into::into),
            ..e
        }
    }

    #[test]
    fn tallies_per_container_with_the_host_on_its_own_row() {
        let mut other_pid = client(Outcome::Accepted, 3, 443, 100, 0);
        other_pid.pid = 101;
        let events = vec![
            // One container, two processes, two destinations: one row.
            in_docker(client(Outcome::Accepted, 2, 8080, 100, 0)),
            in_docker(client(Outcome::Accepted, 2, 8080, 100, 0)),
            in_docker(other_pid),
            in_docker(client(Outcome::SynRetransmitted, 3, 8080, 1_006_800, 1_005_900)),
            // A listener in a systemd unit: server events have a container too.
            in_cgroup(
                server(Outcome::Accepted, 8080, 9),
                "/system.slice/nginx.service",
                None,
                Some("nginx.service"),
            ),
            in_cgroup(
                server(Outcome::QueueOverflow, 8080, 9),
                "/system.slice/nginx.service",
                None,
                Some("nginx.service"),
            ),
            // A cgroup that names no container: its path.
            in_cgroup(client(Outcome::Accepted, 2, 8080, 100, 0), "/tfo-test/plain", None, None),
            // The host: the root cgroup, and a cgroup not known.
            in_cgroup(client(Outcome::CookieRequested, 2, 8080, 100, 0), "/", None, None),
            client(Outcome::Accepted, 2, 8080, 100, 0),
        ];
        let m = model_of(&events);
        assert_eq!(m.containers.len(), 4);
        assert_eq!(m.processes.len(), 3, "the docker rows come from two processes");
        let get = |label: Option<&str>| {
            m.containers.get(&GroupKey::Container(label.map(Into::into))).unwrap().row()
        };
        let d = get(Some(&DOCKER_ID[..12]));
        assert_eq!((d.attempts, d.accepted, d.stalls, d.stall_us), (4, 3, 1, 1_005_900));
        let unit = get(Some("nginx.service"));
        assert_eq!((unit.attempts, unit.accepted, unit.queue_overflows), (2, 1, 1));
        assert_eq!(get(Some("/tfo-test/plain")).accepted, 1);
        let host = get(None);
        assert_eq!((host.attempts, host.cookie_requests, host.accepted), (2, 1, 1));
        let rows: u64 = m.snapshot().containers.rows.iter().map(|r| r.stats.attempts).sum();
        assert_eq!(rows, m.total.attempts(), "every event in exactly one container row");

        let s = m.snapshot();
        let by_name = s.rows(View::Containers, Sort::Name, "");
        assert_eq!(by_name[0].key.cells(), ["-"], "the host first, shown as -");
        assert_eq!(s.rows(View::Containers, Sort::Stalls, "")[0].key.cells(), [&DOCKER_ID[..12]]);
        assert_eq!(s.rows(View::Containers, Sort::Attempts, "4F1E").len(), 1, "by id, any case");
        assert_eq!(s.rows(View::Containers, Sort::Attempts, "nginx").len(), 1, "by unit");
        assert!(s.rows(View::Containers, Sort::Attempts, "nothing").is_empty());

        // Bounded like the others.
        let mut small = TopModel::new(2);
        for e in &events[4..] {
            small.add(e);
        }
        assert_eq!((small.containers.len(), small.containers.evicted), (2, 1));
        assert!(small.containers.get(&GroupKey::Container(Some("nginx.service".into()))).is_none());
        assert_eq!(small.snapshot().evicted(), 1, "the other tables keep everything here");
    }

    #[test]
    fn rows_are_found_whatever_the_order_of_their_events() {
        // Processes in turn, so a row is found by its hash as often as as the last one
        // counted; one table bounded to two rows.
        let named = |pid: u32, comm: &str| Event {
            pid,
            comm: comm.into(),
            ..sample_event(Role::Client, Outcome::Accepted)
        };
        let events: Vec<Event> =
            [(1, "a"), (2, "b"), (1, "a"), (1, "a"), (3, "b"), (2, "b"), (1, "a"), (3, "b")]
                .map(|(p, c)| named(p, c))
                .into();
        let m = model_of(&events);
        let key = |pid: u32, comm: &str| GroupKey::Process { pid, comm: comm.into() };
        let counts: Vec<u64> = [key(1, "a"), key(2, "b"), key(3, "b")]
            .iter()
            .map(|k| m.processes.get(k).map_or(0, |s| s.count(Outcome::Accepted)))
            .collect();
        assert_eq!((counts, m.processes.len(), m.processes.evicted), (vec![4, 2, 2], 3, 0));
        assert_eq!(m.destinations.len(), 1);

        let mut small = TopModel::new(2);
        events.iter().for_each(|e| small.add(e));
        // 3 evicts 2 (least recently seen), 2 then evicts 1, 1 evicts 3, 3 evicts 2.
        assert_eq!(small.processes.evicted, 4);
        assert_eq!(small.processes.get(&key(3, "b")).map(|s| s.count(Outcome::Accepted)), Some(1));
        assert_eq!(small.processes.get(&key(1, "a")).map(|s| s.count(Outcome::Accepted)), Some(1));
        assert!(small.processes.get(&key(2, "b")).is_none());
    }

    #[test]
    fn unknown_process_shows_a_dash() {
        assert_eq!(GroupKey::Process { pid: 0, comm: "".into() }.cells(), vec!["-", "-"]);
    }
}
