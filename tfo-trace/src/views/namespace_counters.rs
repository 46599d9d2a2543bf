//! The kernel's own counters of every network namespace, followed from the moment the
//! programs attach: where the running backend has no hook for an outcome, its count comes
//! from there (`aggregation::kernel_counted` says how), for every live view alike.
//!
//! Each refresh finds the namespaces again (new ones count from their birth) and reads
//! each from inside it. A namespace that only a socket holds (its processes gone, its
//! mount removed) is looked for at the start and whenever a followed namespace stops
//! being found, which costs a walk of every process's fds.
use std::{
    collections::BTreeMap,
    time::{Duration, Instant},
};

use crate::{
    aggregation::kernel_counted::{CounterDeltas, KernelCounted, Scope},
    kernel::{
        every_netns::{self, Netns, Way},
        netstat::NetnsReading,
    },
    probes::{table, Backend},
};

/// The walk of every process's fds for namespaces only a socket holds, when a followed
/// namespace is no longer found, runs at most this often (the first time at once): on a
/// host where containers come and go every second, each one gone would start a walk. A
/// namespace that meanwhile only a socket holds keeps its count and goes on from it once
/// found (aggregation::kernel_counted).
const SOCKET_WALK_EVERY: Duration = Duration::from_secs(30);

pub struct NamespaceCounters {
    backend: Backend,
    /// What the filters let through, or why kernel counts cannot honour them.
    scope: Result<Scope, String>,
    deltas: CounterDeltas,
    /// Namespaces found only through a socket, until they cannot be entered any more.
    socket_held: Vec<Netns>,
    unreadable: BTreeMap<u32, String>,
    last_socket_walk: Option<Instant>,
}

impl NamespaceCounters {
    /// Takes every namespace's baseline now (call right after the programs attach).
    pub fn start(backend: Backend, filter: &tfo_trace_common::Filter) -> NamespaceCounters {
        let mut me = NamespaceCounters {
            backend,
            scope: Scope::of(filter),
            deltas: CounterDeltas::default(),
            socket_held: Vec::new(),
            unreadable: BTreeMap::new(),
            last_socket_walk: None,
        };
        me.read(true);
        me
    }

    /// Every namespace's counter deltas since the start (read now): `report`'s findings.
    pub fn deltas(&mut self) -> BTreeMap<u32, crate::kernel::netstat::Netstat> {
        self.read(false);
        self.deltas.deltas()
    }

    fn read(&mut self, at_start: bool) {
        let mut found = every_netns::every_netns();
        // Found again through a process or a mount: no socket needed for it any more.
        self.socket_held.retain(|s| !found.iter().any(|n| n.inode == s.inode));
        found.extend(self.socket_held.iter().cloned());
        let lost_one = self.deltas.live().any(|i| !found.iter().any(|n| n.inode == i));
        let walked_lately = self.last_socket_walk.is_some_and(|t| t.elapsed() < SOCKET_WALK_EVERY);
        if at_start || (lost_one && !walked_lately) {
            // The start's walk does not count: the first namespace lost is looked for at once.
            if !at_start {
                self.last_socket_walk = Some(Instant::now());
            }
            let held = every_netns::held_by_sockets(&found);
            self.socket_held.extend(held.iter().cloned());
            found.extend(held);
        }
        let readings: BTreeMap<u32, Result<NetnsReading, String>> =
            every_netns::run_in_each(&found, NetnsReading::here)
                .into_iter()
                .map(|(inode, r)| (inode, r.and_then(|r| r.map_err(|e| format!("{e:#}")))))
                .collect();
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
        self.deltas.update(&readings);
    }

    /// What the kernel counted, up to now, of the outcomes no hook of the backend sees.
    pub fn counted(&mut self) -> KernelCounted {
        if table::kernel_counted(self.backend).next().is_none() {
            return KernelCounted::default();
        }
        let scope = match &self.scope {
            Ok(s) => s.clone(),
            Err(why) => return KernelCounted::unavailable(why.clone()),
        };
        self.read(false);
        let mut counted = KernelCounted::of(self.backend, &self.deltas.deltas(), &scope);
        if !counted.rows.is_empty() {
            counted.netns_names =
                crate::kernel::netns::netns_names().into_iter().map(|(i, n)| (i as u32, n)).collect();
        }
        counted.unreadable = self
            .unreadable
            .iter()
            .filter(|(i, _)| scope.netns.is_empty() || scope.netns.contains(i))
            .map(|(i, e)| (*i, e.clone()))
            .collect();
        counted
    }
}
