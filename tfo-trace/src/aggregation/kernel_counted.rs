//! Outcomes no hook of the running backend sees, counted by the kernel itself: each
//! network namespace's SNMP counters since the tracer started
//! ([`crate::backends::KernelCounter`] says which counter backs which outcome).
//! Attributed to a namespace only, never to a listener or a process. Pure: readings in,
//! counts out ([`CounterDeltas`]), so the views share one meaning.
use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;
use tfo_trace_common::Filter;

use crate::{
    backends::{self, Backend, KernelCounter},
    events::{Outcome, Role},
    kernel::netstat::{NetnsReading, Netstat},
};

/// What JSON and the metrics' `source` label call a count that came from a kernel counter.
pub const SOURCE: &str = "kernel_counter";

/// Each namespace's counters since the tracer started, or since the namespace was born
/// for one that appears later (its counters start at 0 then). What a namespace counted
/// before it went away (or before another took its inode) is kept: a count never goes
/// back, as a Prometheus counter must not.
#[derive(Debug, Default)]
pub struct CounterDeltas {
    started: bool,
    live: BTreeMap<u32, Followed>,
    /// Namespaces found at the start but not readable then: their first reading is their
    /// baseline, not 0 (they did not start with the tracer).
    no_base: BTreeSet<u32>,
    /// Counted by namespaces that are gone (per inode: a later namespace may reuse it).
    retired: BTreeMap<u32, Netstat>,
    /// The last of each namespace no longer found: one found again (a process entered it,
    /// a socket holding it turned up) goes on from where it was, not from 0.
    gone: BTreeMap<u32, Followed>,
}

#[derive(Debug)]
struct Followed {
    cookie: Option<u64>,
    base: Netstat,
    last: Netstat,
}

impl Followed {
    fn delta(&self) -> Netstat {
        Netstat::delta(&self.base, &self.last)
    }

    /// Whether `r` is a reading of the same namespace: the same cookie where the kernel
    /// gives one (5.14+), else no counter gone back (a new namespace's start from 0).
    fn same(&self, r: &NetnsReading) -> bool {
        match (self.cookie, r.cookie) {
            (Some(a), Some(b)) => a == b,
            _ => self.last.0.iter().all(|(k, &v)| r.counters.get(k) >= v),
        }
    }
}

impl CounterDeltas {
    /// One round: the readings of every namespace found now. A namespace found but not
    /// readable this time keeps its last reading; one no longer found is retired.
    pub fn update(&mut self, readings: &BTreeMap<u32, Result<NetnsReading, String>>) {
        let first = !self.started;
        self.started = true;
        let gone: Vec<u32> = self.live.keys().filter(|i| !readings.contains_key(i)).copied().collect();
        for inode in gone {
            self.retire(inode);
        }
        for (&inode, r) in readings {
            let Ok(r) = r else {
                if first {
                    self.no_base.insert(inode);
                }
                continue;
            };
            match self.live.get_mut(&inode) {
                Some(f) if f.same(r) => f.last = r.counters.clone(),
                Some(_) => {
                    self.retire(inode);
                    self.follow(inode, r, Netstat::default());
                }
                None if self.gone.get(&inode).is_some_and(|g| g.same(r)) => self.resume(inode, r),
                None => {
                    let from_start = first || self.no_base.remove(&inode);
                    let base = if from_start { r.counters.clone() } else { Netstat::default() };
                    self.follow(inode, r, base);
                }
            }
        }
    }

    fn follow(&mut self, inode: u32, r: &NetnsReading, base: Netstat) {
        self.live.insert(inode, Followed { cookie: r.cookie, base, last: r.counters.clone() });
    }

    fn retire(&mut self, inode: u32) {
        if let Some(f) = self.live.remove(&inode) {
            let kept = self.retired.entry(inode).or_default();
            for (k, v) in f.delta().0 {
                *kept.0.entry(k).or_default() += v;
            }
            self.gone.insert(inode, f);
        }
    }

    /// A namespace retired while it was only out of sight: its count moves back from
    /// `retired` to the live one, which goes on from its old baseline.
    fn resume(&mut self, inode: u32, r: &NetnsReading) {
        let Some(mut f) = self.gone.remove(&inode) else { return };
        if let Some(kept) = self.retired.get_mut(&inode) {
            for (k, v) in f.delta().0 {
                let left = kept.0.entry(k).or_default();
                *left = left.saturating_sub(v);
            }
        }
        f.last = r.counters.clone();
        self.live.insert(inode, f);
    }

    /// Each namespace's counter deltas (those gone included).
    pub fn deltas(&self) -> BTreeMap<u32, Netstat> {
        let mut out = self.retired.clone();
        for (&inode, f) in &self.live {
            let sum = out.entry(inode).or_default();
            for (k, v) in f.delta().0 {
                *sum.0.entry(k).or_default() += v;
            }
        }
        out
    }

    /// The namespaces being followed now.
    pub fn live(&self) -> impl Iterator<Item = u32> + '_ {
        self.live.keys().copied()
    }

    /// A namespace followed under key `from` is known as `to` from now on (one without a
    /// name, found again under its inode): its count goes on under `to`, from the same
    /// baseline, and nothing is counted twice.
    pub fn rename(&mut self, from: u32, to: u32) {
        if from == to || self.live.contains_key(&to) {
            return;
        }
        if let Some(f) = self.live.remove(&from) {
            self.live.insert(to, f);
        }
        if self.no_base.remove(&from) {
            self.no_base.insert(to);
        }
        if let Some(kept) = self.retired.remove(&from) {
            self.retired.insert(to, kept);
        }
        if let Some(g) = self.gone.remove(&from) {
            self.gone.insert(to, g);
        }
    }
}

/// Which kernel-counted outcomes a run's filters let through: the kernel's counters know
/// namespaces, roles and outcomes, nothing finer.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Scope {
    /// Empty: every namespace.
    pub netns: Vec<u32>,
    /// Bit `1 << role` (0: every role), as the kernel filter has it.
    roles: u8,
    /// Bit `1 << outcome` (0: every outcome).
    outcomes: u32,
}

impl Scope {
    /// The scope of the kernel filter; Err (why) when it selects by what a counter
    /// cannot tell: a process, a cgroup, a port or an address.
    pub fn of(f: &Filter) -> Result<Scope, String> {
        let finer = [
            (f.n_pids > 0, "--pid"),
            (f.n_comms > 0, "--comm"),
            (f.n_cgroups > 0, "--cgroup"),
            (f.n_ports > 0, "--port"),
            (f.n_daddrs > 0, "--daddr"),
            (f.n_saddrs > 0, "--saddr"),
        ];
        let by: Vec<&str> = finer.iter().filter(|(on, _)| *on).map(|(_, name)| *name).collect();
        if !by.is_empty() {
            return Err(format!(
                "not shown: the kernel's counters count per namespace, and {} selects within one",
                by.join(", ")
            ));
        }
        Ok(Scope { netns: f.netns[..f.n_netns as usize].to_vec(), roles: f.roles, outcomes: f.outcomes })
    }

    fn keeps(&self, netns: u32, role: Role, outcome: Outcome) -> bool {
        (self.netns.is_empty() || self.netns.contains(&netns))
            && (self.roles == 0 || self.roles & (1 << role as u8) != 0)
            && (self.outcomes == 0 || self.outcomes & (1 << outcome as u8) != 0)
    }
}

/// One kernel-counted outcome in one namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct CountedRow {
    pub netns: u32,
    pub role: Role,
    pub outcome: Outcome,
    pub count: u64,
    /// The counter it comes from (`nstat`'s name).
    pub counter: &'static str,
    /// The outcome the backend's hooks report these as, if any (its count is less by as
    /// many, so that it means what it means on a backend that sees both).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub within: Option<Outcome>,
}

/// The counters of a SYN flood at a listener, `nstat`'s names, as every output says them
/// beside the kernel-counted outcomes, whatever the backend's hooks see: no hook runs for
/// them. The kernel (6.12) counts each at a listener's SYN: SyncookiesSent when it answers
/// with a syncookie (cookie_init_sequence(), include/net/tcp.h:2351), which it does when
/// the SYN queue holds more than the listen backlog (tcp_conn_request(),
/// inet_csk_reqsk_queue_is_full(): net/ipv4/tcp_input.c:7268) and which skips TFO
/// (tcp_input.c:7371-7373); ListenOverflows when the accept queue is full
/// (tcp_input.c:7277, tcp_ipv4.c:1851); ListenDrops for every SYN or handshake a listener
/// dropped (tcp_listendrop(), include/net/tcp.h:2584).
pub const FLOOD_COUNTERS: [&str; 3] = ["TcpExtSyncookiesSent", "TcpExtListenOverflows", "TcpExtListenDrops"];

/// One flood counter that moved in one namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct FloodRow {
    pub netns: u32,
    /// `nstat`'s name, one of [`FLOOD_COUNTERS`].
    pub counter: &'static str,
    pub count: u64,
}

/// A kernel-counted (role, outcome) as every JSON output says it: `client/active_disabled`.
pub fn outcome_label(role: Role, outcome: Outcome) -> String {
    format!("{}/{}", role.name(), outcome.name())
}

fn ser_outcome_labels<S: serde::Serializer>(outcomes: &[(Role, Outcome)], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(outcomes.iter().map(|&(r, o)| outcome_label(r, o)))
}

/// What the kernel counted of the outcomes the backend cannot see, per namespace.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct KernelCounted {
    /// The (role, outcome) pairs the backend takes from the counters (empty: none); said
    /// as [`outcome_label`]s.
    #[serde(serialize_with = "ser_outcome_labels")]
    pub outcomes: Vec<(Role, Outcome)>,
    /// How many namespaces' counters were followed.
    pub namespaces: usize,
    /// Only what moved, per namespace ([`Self::series`] lists every outcome counted so).
    pub rows: Vec<CountedRow>,
    /// The listeners' SYN flood counters that moved, per namespace ([`FLOOD_COUNTERS`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub flood: Vec<FloodRow>,
    /// Why there is nothing to show (the filters, no counter readable), if so.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unavailable: Option<String>,
    /// Namespaces whose counters could not be read, and why: their counts are missing
    /// from the totals (never shown as 0 without saying so).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub unreadable: BTreeMap<u32, String>,
    /// Namespaces read, and counted, through a process whose namespace this user may not
    /// name (another user's, without CAP_SYS_PTRACE): their key (the `netns` of their rows)
    /// is the inode of their /proc/net/netstat, not a namespace's; the value is that pid.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub unnamed: BTreeMap<u32, u32>,
    /// `ip netns` names of the namespaces, where they have one.
    #[serde(skip)]
    pub netns_names: BTreeMap<u32, String>,
}

impl KernelCounted {
    /// The backend's kernel-counted outcomes from each namespace's counter deltas, as far
    /// as `scope` lets them through.
    pub fn of(backend: Backend, deltas: &BTreeMap<u32, Netstat>, scope: &Scope) -> KernelCounted {
        let mut rows = Vec::new();
        for (&netns, d) in deltas {
            for b in backends::kernel_counted(backend) {
                let (counter, within) = match b.counter {
                    KernelCounter::Exact(c) => (c, None),
                    KernelCounter::Within { counter, of } => (counter, Some(of)),
                    KernelCounter::None(_) => continue,
                };
                let count = d.get(counter);
                if count > 0 && scope.keeps(netns, b.role, b.outcome) {
                    rows.push(CountedRow { netns, role: b.role, outcome: b.outcome, count, counter, within });
                }
            }
        }
        let outcomes = backends::kernel_counted(backend)
            .filter(|b| scope.roles == 0 || scope.roles & (1 << b.role as u8) != 0)
            .filter(|b| scope.outcomes == 0 || scope.outcomes & (1 << b.outcome as u8) != 0)
            .map(|b| (b.role, b.outcome))
            .collect();
        let in_scope = |n: &u32| scope.netns.is_empty() || scope.netns.contains(n);
        let namespaces = deltas.keys().filter(|n| in_scope(n)).count();
        // A listener's counters: left out only where --role keeps servers out.
        let servers = scope.roles == 0 || scope.roles & (1 << Role::Server as u8) != 0;
        let flood = deltas
            .iter()
            .filter(|(n, _)| servers && in_scope(n))
            .flat_map(|(&netns, d)| {
                FLOOD_COUNTERS.into_iter().map(move |counter| FloodRow {
                    netns,
                    counter,
                    count: d.get(counter),
                })
            })
            .filter(|r| r.count > 0)
            .collect();
        KernelCounted { outcomes, namespaces, rows, flood, ..KernelCounted::default() }
    }

    /// Whether (role, outcome) is counted by the namespaces' counters here.
    pub fn counts(&self, role: Role, outcome: Outcome) -> bool {
        self.outcomes.contains(&(role, outcome))
    }

    /// Nothing counted, and why.
    pub fn unavailable(why: impl Into<String>) -> KernelCounted {
        KernelCounted { unavailable: Some(why.into()), ..KernelCounted::default() }
    }

    /// The rows of these namespaces only (all when `netns` is empty).
    pub fn only_netns(mut self, netns: &[u32]) -> KernelCounted {
        if !netns.is_empty() {
            self.rows.retain(|r| netns.contains(&r.netns));
            self.flood.retain(|r| netns.contains(&r.netns));
            self.unreadable.retain(|i, _| netns.contains(i));
            self.unnamed.clear();
        }
        self
    }

    /// One role and outcome, over every namespace.
    pub fn total(&self, role: Role, outcome: Outcome) -> u64 {
        self.rows.iter().filter(|r| (r.role, r.outcome) == (role, outcome)).map(|r| r.count).sum()
    }

    /// How many of what the hooks report as (role, `of`) the kernel counted as another
    /// outcome (in `netns`, or everywhere).
    pub fn moved_from(&self, netns: Option<u32>, role: Role, of: Outcome) -> u64 {
        self.rows
            .iter()
            .filter(|r| r.role == role && r.within == Some(of) && netns.is_none_or(|n| n == r.netns))
            .map(|r| r.count)
            .sum()
    }

    /// The rows by namespace.
    pub fn by_namespace(&self) -> BTreeMap<u32, Vec<&CountedRow>> {
        let mut out: BTreeMap<u32, Vec<&CountedRow>> = BTreeMap::new();
        for r in &self.rows {
            out.entry(r.netns).or_default().push(r);
        }
        out
    }

    /// One flood counter of one namespace (0 where it did not move).
    pub fn flood_count(&self, netns: u32, counter: &str) -> u64 {
        self.flood.iter().filter(|r| r.netns == netns && r.counter == counter).map(|r| r.count).sum()
    }

    /// Every (role, outcome, counter) the backend counts this way: the series that exist
    /// (at 0 until one happens), so a dashboard tells "none" from "not exported".
    pub fn series(backend: Backend) -> impl Iterator<Item = (Role, Outcome, &'static str)> {
        backends::kernel_counted(backend).filter_map(|b| Some((b.role, b.outcome, b.counter.name()?)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading(pairs: &[(&str, u64)], cookie: Option<u64>) -> NetnsReading {
        NetnsReading { counters: Netstat(pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()), cookie }
    }

    fn round(rs: &[(u32, NetnsReading)]) -> BTreeMap<u32, Result<NetnsReading, String>> {
        rs.iter().map(|(i, r)| (*i, Ok(r.clone()))).collect()
    }

    const OVERFLOW: &str = "TcpExtTCPFastOpenListenOverflow";

    #[test]
    fn counts_from_the_start_and_from_birth() {
        let mut d = CounterDeltas::default();
        d.update(&round(&[(1, reading(&[(OVERFLOW, 10)], Some(100)))]));
        // Namespace 2 appears while tracing: everything it counted is new.
        d.update(&round(&[
            (1, reading(&[(OVERFLOW, 13)], Some(100))),
            (2, reading(&[(OVERFLOW, 2)], Some(200))),
        ]));
        let deltas = d.deltas();
        assert_eq!((deltas[&1].get(OVERFLOW), deltas[&2].get(OVERFLOW)), (3, 2));
    }

    #[test]
    fn a_namespace_that_goes_keeps_its_count_and_a_new_one_on_its_inode_starts_at_zero() {
        let mut d = CounterDeltas::default();
        d.update(&round(&[(1, reading(&[(OVERFLOW, 10)], Some(100)))]));
        d.update(&round(&[(1, reading(&[(OVERFLOW, 14)], Some(100)))]));
        d.update(&round(&[]));
        assert_eq!(d.deltas()[&1].get(OVERFLOW), 4, "gone, not forgotten");
        // Inode 1 again, another namespace (another cookie), with counts of its own.
        d.update(&round(&[(1, reading(&[(OVERFLOW, 1)], Some(300)))]));
        assert_eq!(d.deltas()[&1].get(OVERFLOW), 5);
        // Without cookies (before 5.14): a counter gone back tells the new namespace.
        let mut d = CounterDeltas::default();
        d.update(&round(&[(1, reading(&[(OVERFLOW, 10)], None))]));
        d.update(&round(&[(1, reading(&[(OVERFLOW, 12)], None))]));
        d.update(&round(&[(1, reading(&[(OVERFLOW, 3)], None))]));
        assert_eq!(d.deltas()[&1].get(OVERFLOW), 5);
    }

    #[test]
    fn a_namespace_out_of_sight_for_a_while_goes_on_where_it_was() {
        let mut d = CounterDeltas::default();
        d.update(&round(&[(1, reading(&[(OVERFLOW, 10)], Some(100)))]));
        d.update(&round(&[(1, reading(&[(OVERFLOW, 12)], Some(100)))]));
        d.update(&round(&[]));
        d.update(&round(&[(1, reading(&[(OVERFLOW, 15)], Some(100)))]));
        assert_eq!(d.deltas()[&1].get(OVERFLOW), 5, "counted once, from the start");
        // Without cookies: no counter gone back is the same namespace too.
        let mut d = CounterDeltas::default();
        d.update(&round(&[(1, reading(&[(OVERFLOW, 10)], None))]));
        d.update(&round(&[]));
        d.update(&round(&[(1, reading(&[(OVERFLOW, 11)], None))]));
        assert_eq!(d.deltas()[&1].get(OVERFLOW), 1);
    }

    #[test]
    fn unreadable_at_the_start_counts_from_its_first_reading() {
        let mut d = CounterDeltas::default();
        d.update(&[(1, Err("setns: EPERM".to_string()))].into_iter().collect());
        d.update(&round(&[(1, reading(&[(OVERFLOW, 7)], Some(1)))]));
        d.update(&round(&[(1, reading(&[(OVERFLOW, 9)], Some(1)))]));
        assert_eq!(d.deltas()[&1].get(OVERFLOW), 2);
    }

    #[test]
    fn outcomes_of_the_tracepoint_backend_from_the_counters() {
        let deltas: BTreeMap<u32, Netstat> = [
            (
                7,
                reading(
                    &[
                        (OVERFLOW, 3),
                        ("TcpExtTCPFastOpenPassiveAltKey", 2),
                        ("TcpExtTCPFastOpenPassive", 5),
                        ("TcpExtTCPFastOpenCookieReqd", 0),
                        ("TcpExtSyncookiesSent", 40),
                        ("TcpExtListenDrops", 0),
                    ],
                    None,
                )
                .counters,
            ),
            (
                8,
                reading(&[("TcpExtTCPFastOpenBlackhole", 1), ("TcpExtTCPFastOpenPassiveFail", 4)], None)
                    .counters,
            ),
        ]
        .into_iter()
        .collect();
        let all = KernelCounted::of(Backend::Tracepoint, &deltas, &Scope::default());
        assert_eq!(all.total(Role::Server, Outcome::QueueOverflow), 3);
        assert_eq!(all.total(Role::Server, Outcome::AcceptedAltKey), 2);
        assert_eq!(all.total(Role::Server, Outcome::CookieInvalid), 4);
        assert_eq!(all.total(Role::Client, Outcome::ActiveDisabled), 1);
        assert_eq!(all.total(Role::Server, Outcome::Accepted), 0, "the hooks count it");
        assert_eq!(all.moved_from(None, Role::Server, Outcome::Accepted), 2);
        assert_eq!(all.moved_from(Some(8), Role::Server, Outcome::Accepted), 0);
        assert_eq!(all.by_namespace()[&7].len(), 2, "only what moved: {:?}", all.rows);
        // The flood's counters, whatever the backend sees, only where they moved.
        assert_eq!(all.flood, [FloodRow { netns: 7, counter: "TcpExtSyncookiesSent", count: 40 }]);
        assert_eq!(KernelCounted::of(Backend::Fentry, &deltas, &Scope::default()).flood, all.flood);
        // A backend that sees them all takes nothing from the counters.
        assert!(KernelCounted::of(Backend::Fentry, &deltas, &Scope::default()).rows.is_empty());
        // --netns and --role narrow it; a process filter cannot apply.
        let mut f = Filter::none();
        f.netns[0] = 8;
        f.n_netns = 1;
        f.roles = 1 << Role::Client as u8;
        let scope = Scope::of(&f).unwrap();
        let some = KernelCounted::of(Backend::Tracepoint, &deltas, &scope);
        assert_eq!(some.rows.len(), 1);
        assert_eq!(some.namespaces, 1, "only those --netns names");
        assert_eq!((some.rows[0].role, some.rows[0].outcome), (Role::Client, Outcome::ActiveDisabled));
        assert!(some.flood.is_empty(), "a listener's counter, and --role client: {:?}", some.flood);
        f.n_pids = 1;
        assert!(Scope::of(&f).unwrap_err().contains("--pid"));
    }
}
