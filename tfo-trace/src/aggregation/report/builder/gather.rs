//! Gathering `report`'s events ([`ReportBuilder`]), one at a time, from one host or many:
//! client connections into cells by destination (and tag), server events by listener.
//!
//! Memory follows destinations, not events: a destination seen once costs one
//! [`Slot`] (40 bytes) in an insertion-ordered hash map.
use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    net::SocketAddr,
};

use indexmap::{map::Entry, IndexMap, IndexSet};

use crate::{
    aggregation::{
        blackhole::Pauses,
        counting::OutcomeCounts,
        report::{
            connections::{ClientId, ConnAcc, OneConn, Slot},
            grouping::{dns_name, DestKey, GroupBy, GroupOptions, NO_NAME},
            key_change::KeyChange,
        },
    },
    events::{Event, Outcome, Role},
};

/// One client row's cell: a destination, and for `--group-by process|container|name` the
/// name ([`NO_NAME`] for a connection without a DNS name).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) struct CellKey {
    pub(super) dest: DestKey,
    pub(super) tag: u32,
}

/// A listener's server events by outcome, in all and per host.
#[derive(Debug, Default)]
pub(super) struct ListenerAcc {
    pub(super) outcomes: OutcomeCounts,
    pub(super) hosts: BTreeMap<u32, OutcomeCounts>,
    /// When its cookies were refused and SYN-data accepted (a key rotation).
    pub(super) key: KeyChange,
    /// TFO children made from a cookie without data: TFO gained them nothing.
    pub(super) accepted_without_data: u64,
}

/// Gathers events; [`ReportBuilder::finish`] ranks them.
#[derive(Debug)]
pub(crate) struct ReportBuilder {
    pub(super) group: GroupOptions,
    /// Several hosts: namespace inodes name nothing across them, so they leave the keys.
    pub(super) fleet: bool,
    pub(super) hosts: IndexSet<String>,
    /// Client connections per host, and server events.
    pub(super) host_acc: Vec<(ConnAcc, u64)>,
    pub(super) names: IndexSet<String>,
    pub(super) cells: IndexMap<CellKey, Slot>,
    /// The DNS names (`Event::dname`) seen per cell (by its index), each with its events:
    /// only cells with a named connection have an entry, so a report without `--names`
    /// costs nothing here.
    pub(super) cell_names: HashMap<u32, Vec<(u32, u32)>>,
    /// By namespace (none across hosts) and listener name.
    pub(super) listeners: IndexMap<(Option<u32>, SocketAddr), ListenerAcc>,
    pub(super) client_netns: BTreeSet<u32>,
    /// Blackhole detection's pauses per client namespace (one host only: across hosts an
    /// inode names nothing).
    pub(super) pauses: Pauses,
    pub(super) all: ConnAcc,
    pub(super) events: u64,
    pub(super) server_events: u64,
}

impl ReportBuilder {
    /// `fleet`: the events come from more than one host.
    pub(crate) fn new(group: GroupOptions, fleet: bool) -> ReportBuilder {
        ReportBuilder {
            group,
            fleet,
            hosts: IndexSet::new(),
            host_acc: Vec::new(),
            names: IndexSet::new(),
            cells: IndexMap::new(),
            cell_names: HashMap::new(),
            listeners: IndexMap::new(),
            client_netns: BTreeSet::new(),
            pauses: Pauses::default(),
            all: ConnAcc::default(),
            events: 0,
            server_events: 0,
        }
    }

    /// The index of a host, for [`ReportBuilder::add`].
    pub(crate) fn host(&mut self, name: &str) -> u32 {
        let (i, new) = self.hosts.insert_full(name.to_string());
        if new {
            self.host_acc.push((ConnAcc::default(), 0));
        }
        i as u32
    }

    fn name(&mut self, name: &str) -> u32 {
        match self.names.get_index_of(name) {
            Some(i) => i as u32,
            None => self.names.insert_full(name.to_string()).0 as u32,
        }
    }

    /// Counts one event seen on `host` (from [`ReportBuilder::host`]).
    pub(crate) fn add(&mut self, e: &Event, host: u32) {
        // A number not from host() is counted under a host named "?".
        let host = if (host as usize) < self.host_acc.len() { host } else { self.host("?") };
        let h = host as usize;
        self.events += 1;
        match e.role {
            Role::Client => {
                let client = ClientId::try_from(self.name(&e.comm)).unwrap_or(ClientId::MAX);
                let one = OneConn::of(e, host, client);
                self.all.add(&one);
                self.host_acc[h].0.add(&one);
                self.client_netns.insert(e.netns);
                if !self.fleet {
                    self.pauses.add(&e.view());
                }
                let dname = dns_name(e).map(|n| self.name(&n));
                let tag = match self.group.by {
                    GroupBy::Name => dname.unwrap_or(NO_NAME),
                    by => by.tag_name(e).map_or(0, |n| self.name(&n)),
                };
                let key = CellKey { dest: DestKey::of(e, !self.fleet), tag };
                let cell = match self.cells.entry(key) {
                    Entry::Occupied(o) => {
                        let i = o.index();
                        o.into_mut().add(one);
                        i
                    }
                    Entry::Vacant(v) => {
                        let i = v.index();
                        v.insert(Slot::One(one));
                        i
                    }
                };
                if let Some(n) = dname {
                    let seen = self.cell_names.entry(cell as u32).or_default();
                    match seen.iter_mut().find(|(m, _)| *m == n) {
                        Some((_, count)) => *count = count.saturating_add(1),
                        None => seen.push((n, 1)),
                    }
                }
            }
            Role::Server => {
                self.server_events += 1;
                self.host_acc[h].1 += 1;
                let netns = (!self.fleet).then_some(e.netns);
                let l = self.listeners.entry((netns, e.view().listener_name())).or_default();
                l.outcomes.add(e.outcome);
                if e.outcome == Outcome::Accepted && e.syn_data_bytes == 0 {
                    l.accepted_without_data += 1;
                }
                l.key.add(e.outcome, u64::try_from(e.ts.unix_ns()).unwrap_or(u64::MAX));
                l.hosts.entry(host).or_default().add(e.outcome);
            }
        }
    }

    /// Namespaces client connections came from (a live report reads their tcp_metrics).
    pub(crate) fn client_namespaces(&self) -> &BTreeSet<u32> {
        &self.client_netns
    }

    pub(crate) fn events(&self) -> u64 {
        self.events
    }
}
