//! A finished report ([`Built`]): the rows (cells, or spans of them for `--group-by`),
//! ranked by time lost, each shown row built with its verdict only when asked for, the
//! listeners' rows and the kernel cache's drops.
use std::{
    collections::{BTreeMap, HashMap, HashSet},
    net::SocketAddr,
};

use super::{
    gather::{CellKey, ReportBuilder},
    summary::{Rest, Summary},
};
use crate::aggregation::report::{
    connections::{ClientId, Clients, ConnAcc, Slot},
    facts::Facts,
    grouping::{DestKey, GroupBy, GroupKey},
    verdict::{
        self, client_report, AddressShare, CachedDrops, ClientRow, DestinationReport, HostShare, Kind,
        ListenerReport, NamespaceFinding, NAMES_SHOWN,
    },
};

/// Rows the summary names as the worst.
pub(crate) const WORST: usize = 5;
/// Everything materialized (tests, small reports).
#[derive(Clone, Debug, PartialEq)]
pub struct Report {
    pub summary: Summary,
    pub destinations: Vec<DestinationReport>,
    pub rest: Option<Rest>,
    pub listeners: Vec<ListenerReport>,
    pub namespaces: Vec<NamespaceFinding>,
    pub kernel_cache: Vec<CachedDrops>,
}

/// Rows of a grouping other than by destination: cells sorted by group, one span each.
#[derive(Debug)]
pub(super) struct Span {
    pub(super) key: GroupKey,
    pub(super) start: u32,
    pub(super) len: u32,
    pub(super) totals: Totals,
}

/// What ranking and the rest line need of a row, without its sentences.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Totals {
    pub(super) connections: u64,
    pub(super) stalled: u64,
    pub(super) lost_us: u64,
    pub(super) extra_round_trips: u64,
    pub(super) extra_round_trip_us: u64,
}

impl Totals {
    pub(super) fn of(a: &ConnAcc) -> Totals {
        Totals {
            connections: a.connections(),
            stalled: a.stalled(),
            lost_us: a.lost_us_total(),
            extra_round_trips: a.extra_round_trips(),
            extra_round_trip_us: a.extra_round_trip_us,
        }
    }
}

#[derive(Debug)]
pub(super) enum Groups {
    /// Grouping by destination: each cell is a row.
    Cells,
    /// Other groupings: `order` holds the cells sorted by group, each span a row.
    Spans { order: Vec<u32>, spans: Vec<Span> },
}

/// A finished report, every shown row built on demand ([`Built::rows`]).
#[derive(Debug)]
pub struct Built {
    pub(super) b: ReportBuilder,
    pub(super) facts: Facts,
    pub(super) groups: Groups,
    /// Rows in ranking order: the worst first; the first `shown` are shown.
    pub(super) ranked: Vec<u32>,
    pub(super) shown: usize,
    pub summary: Summary,
    pub rest: Option<Rest>,
    /// Destinations the kernel's cache remembers losing SYN-data to, with no event in the
    /// window (live only): apart from the rows, which are connections.
    pub kernel_cache: Vec<CachedDrops>,
    pub listeners: Vec<ListenerReport>,
    pub namespaces: Vec<NamespaceFinding>,
}

impl ReportBuilder {
    /// Ranks the rows; `top`: how many to show (None: all).
    pub(crate) fn finish(self, facts: Facts, top: Option<usize>) -> Built {
        Built::new(self, facts, top)
    }
}

impl Built {
    fn new(b: ReportBuilder, facts: Facts, top: Option<usize>) -> Built {
        let groups = match b.group.by {
            GroupBy::Destination => Groups::Cells,
            _ => spans(&b),
        };
        let mut built = Built {
            b,
            facts,
            groups,
            ranked: Vec::new(),
            shown: 0,
            summary: Summary::default(),
            rest: None,
            kernel_cache: Vec::new(),
            listeners: Vec::new(),
            namespaces: Vec::new(),
        };
        let n = built.len();
        let kinds: Vec<Kind> = (0..n).map(|g| built.kind(g)).collect();
        let shown = top.unwrap_or(n).min(n);
        built.ranked = built.rank(&kinds, shown.max(WORST).min(n));
        built.shown = shown;
        built.summary = built.summarize(&kinds);
        built.rest = built.rest(&kinds);
        built.kernel_cache = built.kernel_cache();
        built.listeners = built.listener_reports();
        built.namespaces = verdict::namespace_findings(&built.listeners, &built.facts, &built.b.pauses);
        built
    }

    pub fn group_by(&self) -> GroupBy {
        self.b.group.by
    }

    /// `netns lab-srv` where the namespace has an `ip netns` name, else `netns 4026532246`.
    pub fn netns_label(&self, netns: u32) -> String {
        self.facts.ns(netns)
    }

    /// `lab-srv`, else `4026532246` ([`crate::units::netns`]): a table's netns cell.
    pub fn netns_name(&self, netns: u32) -> String {
        crate::units::netns(netns, self.facts.netns_names.get(&netns).map(String::as_str))
    }

    /// Several hosts were merged.
    pub fn fleet(&self) -> bool {
        self.b.fleet
    }

    pub(super) fn len(&self) -> usize {
        match &self.groups {
            Groups::Cells => self.b.cells.len(),
            Groups::Spans { spans, .. } => spans.len(),
        }
    }

    /// The cells of row `g`, with their indices.
    pub(super) fn members(&self, g: usize) -> Box<dyn Iterator<Item = (u32, &CellKey, &Slot)> + '_> {
        match &self.groups {
            Groups::Cells => Box::new(self.b.cells.get_index(g).map(|(k, s)| (g as u32, k, s)).into_iter()),
            Groups::Spans { order, spans } => {
                let s = &spans[g];
                let ids = &order[s.start as usize..(s.start + s.len) as usize];
                Box::new(
                    ids.iter().filter_map(|&i| self.b.cells.get_index(i as usize).map(|(k, s)| (i, k, s))),
                )
            }
        }
    }

    pub(super) fn key(&self, g: usize) -> GroupKey {
        match &self.groups {
            Groups::Cells => {
                GroupKey::Destination(self.b.cells.get_index(g).map(|(k, _)| k.dest).unwrap_or(DestKey {
                    ip: std::net::Ipv4Addr::UNSPECIFIED.into(),
                    port: 0,
                    netns: None,
                }))
            }
            Groups::Spans { spans, .. } => spans[g].key,
        }
    }

    pub(super) fn totals(&self, g: usize) -> Totals {
        match &self.groups {
            Groups::Cells => {
                let Some((_, s)) = self.b.cells.get_index(g) else { return Totals::default() };
                match s {
                    Slot::One(c) => {
                        let not_acked = c.outcome == crate::events::Outcome::DataNotAcked;
                        Totals {
                            connections: u64::from(c.outcome.ends_connection()),
                            stalled: u64::from(c.stall.is_some()),
                            lost_us: s.lost_us_total(),
                            extra_round_trips: u64::from(not_acked),
                            extra_round_trip_us: if not_acked { c.round_trip_us } else { 0 },
                        }
                    }
                    Slot::Many { .. } => Totals::of(&s.acc()),
                }
            }
            Groups::Spans { spans, .. } => spans[g].totals,
        }
    }

    pub(super) fn acc(&self, g: usize) -> ConnAcc {
        let mut a = ConnAcc::default();
        for (_, _, s) in self.members(g) {
            a.merge(&s.acc());
        }
        a
    }

    pub(super) fn kind(&self, g: usize) -> Kind {
        match &self.groups {
            Groups::Cells => {
                self.b.cells.get_index(g).map(|(_, s)| Kind::of_clients(&s.acc())).unwrap_or(Kind::Info)
            }
            Groups::Spans { .. } => Kind::of_clients(&self.acc(g)),
        }
    }

    /// The `want` worst rows, worst first: most time lost, then most extra round trips,
    /// then problems before healthy rows, then most connections, then by key. Each row's
    /// totals are read once (a packed row is unpacked to read them), and only the `want`
    /// worst so far are kept.
    pub(super) fn rank(&self, kinds: &[Kind], want: usize) -> Vec<u32> {
        /// What a row is ranked by, the worst greatest.
        #[derive(PartialEq, Eq, PartialOrd, Ord)]
        struct Rank {
            lost_us: u64,
            extra_round_trip_us: u64,
            severity: u8,
            connections: u64,
            key: std::cmp::Reverse<GroupKey>,
            id: std::cmp::Reverse<u32>,
        }
        let rank = |g: u32| {
            let t = self.totals(g as usize);
            Rank {
                lost_us: t.lost_us,
                extra_round_trip_us: t.extra_round_trip_us,
                severity: kinds[g as usize].severity(),
                connections: t.connections,
                key: std::cmp::Reverse(self.key(g as usize)),
                id: std::cmp::Reverse(g),
            }
        };
        if want == 0 {
            return Vec::new();
        }
        // The `want` worst so far, the least bad on top.
        let mut worst = std::collections::BinaryHeap::with_capacity(want.min(self.len()) + 1);
        for g in 0..self.len() as u32 {
            worst.push(std::cmp::Reverse(rank(g)));
            if worst.len() > want {
                worst.pop();
            }
        }
        let mut ranked: Vec<Rank> = worst.into_iter().map(|r| r.0).collect();
        ranked.sort_unstable_by(|a, b| b.cmp(a));
        ranked.into_iter().map(|r| r.id.0).collect()
    }

    pub(super) fn name(&self, tag: u32) -> String {
        self.b.names.get_index(tag as usize).cloned().unwrap_or_default()
    }

    /// Row `g` with its members' evidence, ready for [`client_report`].
    pub(super) fn row(&self, g: usize) -> ClientRow {
        let key = self.key(g);
        let acc = self.acc(g);
        let kind = Kind::of_clients(&acc);
        let mut destinations = 0u64;
        let mut showing = 0u64;
        let mut per_host: BTreeMap<u32, ConnAcc> = BTreeMap::new();
        let mut worst: Vec<(u64, CellKey)> = Vec::new();
        let mut names: HashMap<u32, u64> = HashMap::new();
        let mut addresses: Vec<AddressShare> = Vec::new();
        let by_name = matches!(key, GroupKey::Name(_));
        for (i, k, s) in self.members(g) {
            destinations += 1;
            let a = s.acc();
            let (shows, of) = kind.shown_by(&a);
            if shows > 0 {
                showing += 1;
            }
            for &(n, count) in self.b.cell_names.get(&i).into_iter().flatten() {
                let c = names.entry(n).or_default();
                *c = c.saturating_add(u64::from(count));
            }
            if by_name {
                addresses.push(AddressShare::of(k.dest.label(), k.dest.netns, &a, shows, of));
            }
            s.for_each_host(|h, a| per_host.entry(h).or_default().merge(a));
            let lost = s.lost_us_total();
            if lost > 0 {
                worst.push((lost, *k));
                worst.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
                worst.truncate(3);
            }
        }
        let mut hosts: Vec<HostShare> = per_host
            .into_iter()
            .map(|(h, a)| HostShare {
                host: self.b.hosts.get_index(h as usize).cloned().unwrap_or_default(),
                connections: a.connections(),
                showing: kind.shown_by(&a).0,
                stalled: a.stalled(),
                lost_us_total: a.lost_us_total(),
            })
            .collect();
        hosts.sort_by(|a, b| {
            b.showing
                .cmp(&a.showing)
                .then(b.lost_us_total.cmp(&a.lost_us_total))
                .then(b.connections.cmp(&a.connections))
                .then(a.host.cmp(&b.host))
        });
        let client_names = |c: &Clients| {
            let (ids, more) = c.ranked();
            let names = ids
                .into_iter()
                .map(|id| if id == ClientId::MAX { "?".to_string() } else { self.name(u32::from(id)) })
                .collect();
            (names, more)
        };
        let (clients, more_clients) = client_names(&acc.clients);
        let (no_data_clients, more_no_data_clients) = client_names(&acc.no_data_clients);
        // The row's names, most events first (ties by name), the first few shown.
        let mut names: Vec<(String, u64)> = names.into_iter().map(|(n, c)| (self.name(n), c)).collect();
        names.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        let more_names = names.len().saturating_sub(NAMES_SHOWN) as u64;
        names.truncate(NAMES_SHOWN);
        // A name's addresses, worst first: most time lost, most extra round trips, most
        // showing the verdict, most connections.
        addresses.sort_by(|a, b| {
            b.lost_us_total
                .cmp(&a.lost_us_total)
                .then(b.extra_round_trip_us.cmp(&a.extra_round_trip_us))
                .then(b.showing.cmp(&a.showing))
                .then(b.connections.cmp(&a.connections))
                .then_with(|| a.address.cmp(&b.address))
                .then(a.netns.cmp(&b.netns))
        });
        let name = |t| self.name(t);
        ClientRow {
            names: names.into_iter().map(|(n, _)| n).collect(),
            more_names,
            addresses,
            clients,
            more_clients,
            no_data_clients,
            more_no_data_clients,
            key,
            label: key.label(name),
            acc,
            kind,
            destinations,
            destinations_showing: showing,
            hosts,
            fleet: self.b.fleet,
            worst: worst.into_iter().map(|(l, k)| (k.dest.label(), l)).collect(),
        }
    }

    /// The shown rows, worst first, built one at a time.
    pub fn rows(&self) -> impl Iterator<Item = DestinationReport> + '_ {
        self.ranked[..self.shown].iter().map(|&g| client_report(self.row(g as usize), &self.facts))
    }

    pub fn materialize(&self) -> Report {
        Report {
            summary: self.summary.clone(),
            destinations: self.rows().collect(),
            rest: self.rest.clone(),
            listeners: self.listeners.clone(),
            namespaces: self.namespaces.clone(),
            kernel_cache: self.kernel_cache.clone(),
        }
    }

    /// tcp_metrics entries with SYN-data drops and no connection in the report. The set is
    /// of those entries (the kernel's cache is bounded), not of the destinations: a set of a
    /// million destinations was 60 MiB, the peak of a replay, which has no entries at all.
    pub(super) fn kernel_cache(&self) -> Vec<CachedDrops> {
        let dropped = || {
            self.facts
                .tcp_metrics
                .iter()
                .flat_map(|(&netns, entries)| entries.iter().map(move |m| (netns, m)))
                .filter(|(_, m)| m.fo_syn_drops > 0)
        };
        let mut unseen: HashSet<(std::net::IpAddr, u32)> =
            dropped().map(|(netns, m)| (m.dst, netns)).collect();
        if unseen.is_empty() {
            return Vec::new();
        }
        for k in self.b.cells.keys() {
            if let Some(netns) = k.dest.netns {
                unseen.remove(&(k.dest.ip, netns));
            }
        }
        dropped()
            .filter(|(netns, m)| unseen.contains(&(m.dst, *netns)))
            .map(|(netns, m)| verdict::cached_drops(m, netns, &self.facts))
            .collect()
    }

    pub(super) fn listener_reports(&self) -> Vec<ListenerReport> {
        let mut keys: Vec<&(Option<u32>, SocketAddr)> = self.b.listeners.keys().collect();
        keys.sort();
        keys.into_iter()
            .filter_map(|k| {
                let l = self.b.listeners.get(k)?;
                let hosts = l
                    .hosts
                    .iter()
                    .map(|(h, t)| (self.b.hosts.get_index(*h as usize).cloned().unwrap_or_default(), t))
                    .collect::<Vec<_>>();
                Some(verdict::listener_row(
                    k.0,
                    k.1,
                    (&l.outcomes, &l.key, l.accepted_without_data),
                    &hosts,
                    self.b.fleet,
                    &self.facts,
                ))
            })
            .collect()
    }
}

/// Cells sorted by group, cut into one span per group with its totals.
fn spans(b: &ReportBuilder) -> Groups {
    let key_of = |i: u32| -> GroupKey {
        let (k, _) = b.cells.get_index(i as usize).expect("cell index in range");
        b.group.key(&k.dest, k.tag)
    };
    let mut order: Vec<u32> = (0..b.cells.len() as u32).collect();
    order.sort_unstable_by(|x, y| key_of(*x).cmp(&key_of(*y)).then(x.cmp(y)));
    let mut spans: Vec<Span> = Vec::new();
    let mut acc = ConnAcc::default();
    for (pos, &i) in order.iter().enumerate() {
        let key = key_of(i);
        if spans.last().is_none_or(|s| s.key != key) {
            if let Some(s) = spans.last_mut() {
                s.totals = Totals::of(&acc);
            }
            acc = ConnAcc::default();
            spans.push(Span { key, start: pos as u32, len: 0, totals: Totals::default() });
        }
        if let (Some(s), Some((_, slot))) = (spans.last_mut(), b.cells.get_index(i as usize)) {
            s.len += 1;
            acc.merge(&slot.acc());
        }
    }
    if let Some(s) = spans.last_mut() {
        s.totals = Totals::of(&acc);
    }
    Groups::Spans { order, spans }
}
