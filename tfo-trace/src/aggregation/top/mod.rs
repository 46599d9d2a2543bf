//! The model behind `tfo-trace top`: per-row counts in four tables (per destination, per
//! listener, per process, per container: [`table`]), bounded in memory, with each row's
//! rates over the last refresh ([`rates`]) and the header's totals ([`totals`]). Pure: no
//! I/O, no clock (the loop measures the time between refreshes), no terminal; which
//! table is shown, in what order and through which filter is the view's business
//! (`views::top`).
//!
//! A busy host can talk to a million destinations, so each table keeps at most
//! `capacity` groups: a new group beyond that evicts the least recently seen one, and
//! the number evicted is kept (the header shows it; totals still count every event).
use std::{collections::BTreeMap, net::SocketAddr, sync::Arc, time::Duration};

pub(crate) mod rates;
pub(crate) mod table;
pub(crate) mod totals;

use self::{
    rates::{Cumulative, StallHistory, Trend, HOST_HISTORY},
    table::{Counted, KeyRef},
};
pub(crate) use self::{
    table::{BoundedTable, GroupStats, Row, RowKey, RowStats},
    totals::Totals,
};
use super::{blackhole::Pauses, quantiles::Decades};
use crate::events::{Event, EventRef, Interner, Role};

/// Groups kept per table by default.
pub(crate) const DEFAULT_CAPACITY: usize = 10_000;

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
    /// Blackhole detection's pauses per client namespace.
    pub pauses: Pauses,
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
            pauses: Pauses::default(),
        }
    }

    pub fn add(&mut self, e: &Event) {
        self.add_view(e.view());
    }

    /// [`TopModel::add`] for an event as the ring buffer's reader hands it over.
    pub fn add_view(&mut self, e: EventRef<'_>) {
        let t = Counted::of(&e);
        self.events += 1;
        self.pauses.add(&e);
        self.total.count_in(&t);
        match e.role {
            Role::Client => {
                self.client_total.count_in(&t);
                let key = KeyRef::Destination(SocketAddr::new(e.daddr, e.dport));
                self.destinations.add(key, &t, &mut self.names, e.dname);
            }
            Role::Server => {
                self.server_total.count_in(&t);
                let key = KeyRef::Listener { addr: e.listener_name(), netns: e.netns };
                self.listeners.add(key, &t, &mut self.names, None);
                if let Some(name) = e.netns_name.filter(|_| !self.netns_names.contains_key(&e.netns)) {
                    self.netns_names.insert(e.netns, self.names.get(name));
                }
            }
        }
        self.processes.add(KeyRef::Process { pid: e.pid, comm: e.comm }, &t, &mut self.names, None);
        let container = KeyRef::Container { label: e.container, role: e.role };
        self.containers.add(container, &t, &mut self.names, None);
        if let Some(us) = e.handshake_us {
            self.decades.record(us);
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
        for t in [&mut self.destinations, &mut self.listeners, &mut self.processes, &mut self.containers] {
            t.tick(elapsed);
        }
        let of = |r: &RowStats| Cumulative { attempts: r.attempts, stalls: r.stalls, stall_us: r.stall_us };
        self.total_trend.tick(of(&totals.total), elapsed, HOST_HISTORY);
        self.client_trend.tick(of(&totals.client), elapsed, HOST_HISTORY);
        self.server_trend.tick(of(&totals.server), elapsed, HOST_HISTORY);
        self.last_interval = Some(elapsed);
    }

    /// A frozen copy for display: all rows of all tables, unsorted, with the events' totals.
    pub fn snapshot(&self) -> Snapshot {
        self.snapshot_with(self.event_totals())
    }

    /// A frozen copy for display with `totals` in the header (the kernel's, where it
    /// counts); rates are those of the last refresh.
    pub fn snapshot_with(&self, totals: Totals) -> Snapshot {
        let table = |t: &BoundedTable| TableSnapshot { rows: t.rows(), evicted: t.evicted };
        Snapshot {
            events: self.events,
            total: totals.total.with_rates(self.total_trend.rates()),
            client: totals.client.with_rates(self.client_trend.rates()),
            server: totals.server.with_rates(self.server_trend.rates()),
            stall_history: self.client_trend.history(),
            rate_interval: self.last_interval,
            decades: self.decades,
            destinations: table(&self.destinations),
            listeners: table(&self.listeners),
            processes: table(&self.processes),
            containers: table(&self.containers),
            kernel_counted: Default::default(),
            netns_names: self.netns_names.clone(),
        }
    }
}

/// The model fed with a batch of events (tests, fuzzing).
#[cfg(any(test, feature = "fixtures"))]
pub(crate) fn model_of<'a>(events: impl IntoIterator<Item = &'a Event>) -> TopModel {
    let mut m = TopModel::default();
    for e in events {
        m.add(e);
    }
    m
}

/// One table's rows at a refresh, in no order, and how many rows it evicted so far.
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
    pub kernel_counted: crate::aggregation::kernel_counted::KernelCounted,
    /// `ip netns` names of the listeners' namespaces, for the `/` filter.
    pub netns_names: BTreeMap<u32, Arc<str>>,
}

impl Snapshot {
    /// Rows evicted from every table.
    pub fn evicted(&self) -> u64 {
        [&self.destinations, &self.listeners, &self.processes, &self.containers]
            .iter()
            .map(|t| t.evicted)
            .sum()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::events::{sample_event, Outcome};
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

    fn dst(host: u8, port: u16) -> RowKey {
        RowKey::Destination(SocketAddr::new(IpAddr::V4(Ipv4Addr::new(198, 18, 0, host)), port))
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
        let l81 = RowKey::Listener { addr: "198.18.0.2:8081".parse().unwrap(), netns: 4026532246 };
        let l81 = m.listeners.get(&l81).unwrap().row();
        assert_eq!(
            (l81.queue_overflows, l81.backup_key_hits, l81.invalid_cookies, l81.accepted),
            (1, 1, 1, 1)
        );

        assert_eq!(m.processes.len(), 2);
        let curl = m.processes.get(&RowKey::Process { pid: 100, comm: "curl".into() }).unwrap();
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

    /// `--names`: a destination's row stays keyed by its address; its name is the last one
    /// an event came with (an event without one leaves it), IPv4 and IPv6 alike.
    #[test]
    fn a_destination_row_keeps_its_address_and_the_last_name_seen() {
        let named = |host, name: Option<&str>| Event {
            dname: name.map(Into::into),
            ..client(Outcome::Accepted, host, 443, 100, 0)
        };
        let v6 = |name: Option<&str>| Event { daddr: "fd00:7f0::2".parse().unwrap(), ..named(0, name) };
        let events = [
            named(2, None),
            named(2, Some("old.example")),
            named(3, None),
            named(2, Some("api.example")),
            named(2, None),
            v6(Some("v6.example")),
            v6(None),
        ];
        let m = model_of(&events);
        assert_eq!(m.destinations.len(), 3, "one row per address, whatever its names");
        let v6_key = RowKey::Destination("[fd00:7f0::2]:443".parse().unwrap());
        assert_eq!(m.destinations.get(&dst(2, 443)).unwrap().attempts(), 4);
        let name = |key: &RowKey| m.destinations.name_of(key).map(|n| n.to_string());
        assert_eq!(name(&dst(2, 443)).as_deref(), Some("api.example"));
        assert_eq!(name(&dst(3, 443)), None);
        assert_eq!(name(&v6_key).as_deref(), Some("v6.example"));
        // The snapshot's rows carry it; the other tables have none.
        let s = m.snapshot();
        let row = s.destinations.rows.iter().find(|r| r.key == dst(2, 443)).unwrap();
        assert_eq!(row.name.as_deref(), Some("api.example"));
        assert!(s.processes.rows.iter().chain(&s.containers.rows).all(|r| r.name.is_none()));
    }

    /// The demo's events with its clean destination named `api.example` by some of its
    /// connections (`--names`), and an IPv6 destination named by a long name.
    pub(crate) fn named_demo_events() -> Vec<Event> {
        let mut events = demo_events();
        let clean = IpAddr::V4(Ipv4Addr::new(198, 18, 0, 2));
        for e in events.iter_mut().filter(|e| e.role == Role::Client && e.daddr == clean) {
            e.dname = Some("api.example".into());
        }
        events.push(Event {
            daddr: "fd00:7f0::2".parse().unwrap(),
            dname: Some(LONG_NAME.into()),
            ..client(Outcome::Accepted, 0, 8080, 100, 0)
        });
        events
    }

    /// A name wider than `top`'s widest key column (47).
    pub(crate) const LONG_NAME: &str = "a-very-long-service-name.eu-west-1.compute.example.com";

    pub(crate) const DOCKER_ID: &str = "4f1e6d9a0c2b3a4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5";

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

    /// Events from a docker container (two processes), a systemd unit's listener, a cgroup
    /// that names no container, and the host.
    pub(crate) fn container_events() -> Vec<Event> {
        let mut other_pid = client(Outcome::Accepted, 3, 443, 100, 0);
        other_pid.pid = 101;
        vec![
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
        ]
    }

    #[test]
    fn tallies_per_container_with_the_host_on_its_own_row() {
        let events = container_events();
        let m = model_of(&events);
        assert_eq!(m.containers.len(), 4);
        assert_eq!(m.processes.len(), 3, "the docker rows come from two processes");
        let key = |label: Option<&str>, role| RowKey::Container { label: label.map(Into::into), role };
        let get = |label: Option<&str>| {
            let role = if label == Some("nginx.service") { Role::Server } else { Role::Client };
            m.containers.get(&key(label, role)).unwrap().row()
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

        // Bounded like the others.
        let mut small = TopModel::new(2);
        for e in &events[4..] {
            small.add(e);
        }
        assert_eq!((small.containers.len(), small.containers.evicted), (2, 1));
        assert!(small.containers.get(&key(Some("nginx.service"), Role::Server)).is_none());
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
        let key = |pid: u32, comm: &str| RowKey::Process { pid, comm: comm.into() };
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
}
