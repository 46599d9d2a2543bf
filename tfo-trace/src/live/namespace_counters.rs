//! The kernel's own counters of every network namespace, followed from the moment the
//! programs attach: where the running backend has no hook for an outcome, its count comes
//! from there (`aggregation::kernel_counted` says how), for every live view alike.
//!
//! Each refresh finds the namespaces again (new ones count from their birth) and reads
//! each from inside it. A namespace that only a socket holds (its processes gone, its
//! mount removed) is looked for at the start and whenever a followed namespace stops
//! being found, which costs a walk of every process's fds and of every namespace's TCP
//! sockets: at the start before the programs attach, later on a thread of its own, its
//! finds taken at the first refresh after it ends (the view's refresh never waits on it;
//! issue 55: with 100,000 TIME_WAIT sockets one namespace's sockets took ~45 ms a family).
//!
//! A namespace with a process in it is read through /proc/PID/net, without entering it
//! (no CAP_SYS_ADMIN, no setns: the systemd unit forbids both). One this user may not
//! name (another user's process, without CAP_SYS_PTRACE) is still read and counted,
//! unnamed, until the kernel names one of its processes (an event, a listener's owner);
//! only namespaces no process is in are entered, and are said unreadable where they
//! cannot be.
use std::{
    collections::{BTreeMap, BTreeSet},
    time::{Duration, Instant},
};

use crate::{
    aggregation::kernel_counted::{CounterDeltas, KernelCounted, Scope},
    backends::Backend,
    kernel::{
        every_netns::{self, Netns, Way},
        netstat::NetnsReading,
    },
};

/// The walk of every process's fds for namespaces only a socket holds, when a followed
/// namespace is no longer found, runs at most this often (the first time at once): on a
/// host where containers come and go every second, each one gone would start a walk. A
/// namespace that meanwhile only a socket holds keeps its count and goes on from it once
/// found (aggregation::kernel_counted).
const SOCKET_WALK_EVERY: Duration = Duration::from_secs(30);

/// At most this many processes the kernel named with their namespace are kept to name
/// namespaces by (one per namespace; those of gone processes are dropped at each read).
const LEARNED_MAX: usize = 4096;

pub struct NamespaceCounters {
    backend: Backend,
    /// What the filters let through, or why kernel counts cannot honour them.
    scope: Result<Scope, String>,
    deltas: CounterDeltas,
    /// Namespaces found only through a socket, until they cannot be entered any more.
    socket_held: Vec<Netns>,
    /// The walk for namespaces only a socket holds, while it runs off the view's thread.
    socket_walk: Option<std::thread::JoinHandle<Vec<Netns>>>,
    unreadable: BTreeMap<u32, String>,
    last_socket_walk: Option<Instant>,
    /// A process in each namespace, as the kernel named them (events, listeners' owners):
    /// names the namespaces whose /proc/PID/ns/net this user may not read.
    learned: BTreeMap<u32, u32>,
    /// The namespaces read by name at the last read: no process needs learning for them.
    named: BTreeSet<u32>,
    /// The last namespace [`NamespaceCounters::saw`] was told of (most events repeat it).
    last_seen: u32,
    /// Namespaces followed without a name (key: their /proc/net/netstat inode) and the pid
    /// they are read through.
    unnamed: BTreeMap<u32, u32>,
    /// The name (inode) of each namespace by its /proc/net/netstat inode, once known: a
    /// namespace named once keeps its name when the process that named it is gone.
    names: BTreeMap<u32, u32>,
}

impl NamespaceCounters {
    /// Takes every namespace's baseline now (call right after the programs attach).
    pub fn start(backend: Backend, filter: &tfo_trace_common::Filter) -> NamespaceCounters {
        let mut me = NamespaceCounters {
            backend,
            scope: Scope::of(filter),
            deltas: CounterDeltas::default(),
            socket_held: Vec::new(),
            socket_walk: None,
            unreadable: BTreeMap::new(),
            last_socket_walk: None,
            learned: BTreeMap::new(),
            named: BTreeSet::new(),
            last_seen: 0,
            unnamed: BTreeMap::new(),
            names: BTreeMap::new(),
        };
        me.read(true);
        me
    }

    /// Process `pid` is in namespace `netns`, as the kernel says (an event's): kept while
    /// some namespace has no name, to name it by. Cheap: most events repeat the last one.
    pub fn saw(&mut self, netns: u32, pid: u32) {
        if pid == 0 || netns == self.last_seen || self.unnamed.is_empty() {
            return;
        }
        self.last_seen = netns;
        if !self.named.contains(&netns) && self.learned.len() < LEARNED_MAX {
            self.learned.insert(netns, pid);
        }
    }

    /// Whether some namespace is followed without a name (then listeners' owners are worth
    /// learning from).
    pub fn has_unnamed(&self) -> bool {
        !self.unnamed.is_empty()
    }

    /// Every namespace's counter deltas since the start (read now): `report`'s findings.
    pub fn deltas(&mut self) -> BTreeMap<u32, crate::kernel::netstat::Netstat> {
        self.read(false);
        self.deltas.deltas()
    }

    fn read(&mut self, at_start: bool) {
        // A learned process that is gone names nothing any more.
        self.learned.retain(|_, pid| std::path::Path::new(&format!("/proc/{pid}")).exists());
        let mut found = every_netns::every_netns(&self.learned);
        for ns in found.iter_mut() {
            match (ns.is_unnamed(), ns.netstat_inode) {
                // Named before: it keeps that name.
                (true, _) => {
                    if let (Some(&inode), Some(pid)) = (self.names.get(&ns.inode), ns.process()) {
                        (ns.inode, ns.way) = (inode, Way::Process(pid));
                    }
                }
                (false, Some(key)) => {
                    self.names.insert(key, ns.inode);
                    // Followed without a name until now: it goes on under its name.
                    if self.unnamed.remove(&key).is_some() {
                        self.deltas.rename(key, ns.inode);
                    }
                }
                (false, None) => {}
            }
        }
        let found_keys: BTreeSet<u32> = found.iter().filter_map(|n| n.netstat_inode).collect();
        self.names.retain(|k, _| found_keys.contains(k));
        // Each namespace once, read through a process where one names it (no entering).
        let through: BTreeSet<u32> =
            found.iter().filter(|n| n.process().is_some()).map(|n| n.inode).collect();
        found.retain(|n| n.process().is_some() || n.way == Way::Current || !through.contains(&n.inode));
        let mut once = BTreeSet::new();
        found.retain(|n| once.insert(n.inode));
        // A walk that ended since the last read: what it found, not found otherwise.
        if self.socket_walk.as_ref().is_some_and(|w| w.is_finished()) {
            let held = self.socket_walk.take().and_then(|w| w.join().ok()).unwrap_or_default();
            for ns in held {
                if !self.socket_held.iter().any(|s| s.inode == ns.inode) {
                    self.socket_held.push(ns);
                }
            }
        }
        // Found again through a process or a mount: no socket needed for it any more.
        self.socket_held.retain(|s| !found.iter().any(|n| n.inode == s.inode));
        found.extend(self.socket_held.iter().cloned());
        let lost_one = self.deltas.live().any(|i| !found.iter().any(|n| n.inode == i));
        let walked_lately = self.last_socket_walk.is_some_and(|t| t.elapsed() < SOCKET_WALK_EVERY);
        if at_start {
            // Before the programs attach: the baseline takes what it finds at once.
            let held = every_netns::held_by_sockets(&found);
            self.socket_held.extend(held.iter().cloned());
            found.extend(held);
        } else if lost_one && !walked_lately && self.socket_walk.is_none() {
            // The start's walk does not count: the first namespace lost is looked for at once.
            self.last_socket_walk = Some(Instant::now());
            let known = found.clone();
            self.socket_walk = std::thread::Builder::new()
                .name("tfo-socket-walk".into())
                .spawn(move || every_netns::held_by_sockets(&known))
                .ok();
        }
        let readings: BTreeMap<u32, Result<NetnsReading, String>> =
            every_netns::read_counters(&found).into_iter().collect();
        // A socket that no longer leads anywhere: its namespace is gone (retired below).
        let gone: Vec<u32> = found
            .iter()
            .filter(|n| {
                matches!(n.way, Way::Socket { .. }) && readings.get(&n.inode).is_some_and(|r| r.is_err())
            })
            .map(|n| n.inode)
            .collect();
        self.socket_held.retain(|s| !gone.contains(&s.inode));
        let readings: BTreeMap<_, _> = readings.into_iter().filter(|(i, _)| !gone.contains(i)).collect();
        self.unreadable =
            readings.iter().filter_map(|(i, r)| r.as_ref().err().map(|e| (*i, e.clone()))).collect();
        self.named = found.iter().filter(|n| !n.is_unnamed()).map(|n| n.inode).collect();
        for ns in found.iter().filter(|n| n.is_unnamed()) {
            self.unnamed.insert(ns.inode, ns.process().unwrap_or(0));
        }
        self.deltas.update(&readings);
    }

    /// What the kernel counted, up to now, of the outcomes no hook of the backend sees, and
    /// of SYN floods at listeners (no hook of any backend sees those): read on every backend.
    pub fn counted(&mut self) -> KernelCounted {
        let scope = match &self.scope {
            Ok(s) => s.clone(),
            Err(why) => return KernelCounted::unavailable(why.clone()),
        };
        self.read(false);
        let mut counted = KernelCounted::of(self.backend, &self.deltas.deltas(), &scope);
        if !counted.rows.is_empty() || !counted.flood.is_empty() {
            counted.netns_names =
                crate::kernel::netns::netns_names().into_iter().map(|(i, n)| (i as u32, n)).collect();
        }
        counted.unreadable = self
            .unreadable
            .iter()
            .filter(|(i, _)| scope.netns.is_empty() || scope.netns.contains(i))
            .map(|(i, e)| (*i, e.clone()))
            .collect();
        if scope.netns.is_empty() {
            counted.unnamed = self.unnamed.clone();
        } else if !self.unnamed.is_empty() {
            // A namespace asked for by name may be one of those read without a name.
            for &ns in scope.netns.iter().filter(|n| !self.named.contains(n)) {
                counted.unreadable.insert(ns, unnamed_why(self.unnamed.len()));
            }
        }
        counted
    }
}

/// Why a namespace asked for by `--netns` has no count, where some namespaces could be
/// read only without their names.
fn unnamed_why(unnamed: usize) -> String {
    format!(
        "not found by name: {unnamed} namespaces are read only through processes whose namespace \
         this user may not see (/proc/PID/ns/net needs CAP_SYS_PTRACE or root for another user's \
         process); it is named once one of its processes makes a TFO connection or listens"
    )
}
