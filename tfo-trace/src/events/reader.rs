//! Reading the `EVENTS` ring buffer and the loss counters from userspace.
use std::{
    os::fd::{AsFd as _, AsRawFd, RawFd},
    sync::Arc,
};

use anyhow::{anyhow, Context as _, Result};
use aya::{
    maps::{MapData, PerCpuArray, PerCpuHashMap, RingBuf},
    Ebpf,
};
use tfo_trace_common::{counter, CountKey, Counts};
use tokio::io::unix::AsyncFd;

use super::{
    causes::{self, Tell},
    counts::KernelCounts,
    Clock, Event, EventRef, Interner, Role,
};
use crate::kernel::listeners::{ListenerNames, OwnerCache};

/// tokio wants AsRawFd; aya's RingBuf offers AsFd.
struct Ring(RingBuf<MapData>);

impl AsRawFd for Ring {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_fd().as_raw_fd()
    }
}

/// The longest a quietly submitted event waits before userspace reads it.
const POLL_INTERVAL: std::time::Duration = std::time::Duration::from_millis(100);

/// How often the ring is read again while a refusal waits for the next connection's SYN.
const POLL_WAITING: std::time::Duration = std::time::Duration::from_millis(1);

pub(crate) struct EventSource {
    ring: AsyncFd<Ring>,
    counters: PerCpuArray<MapData, u64>,
    counts: PerCpuHashMap<MapData, CountKey, Counts>,
    clock: Clock,
    /// Process names, one copy each.
    comms: Interner,
    /// Records that did not decode (a kernel/userspace mismatch): counted, never silent.
    pub malformed: u64,
    owners: OwnerCache,
    listeners: ListenerNames,
    netns_names: NetnsNames,
    cgroups: super::cgroups::CgroupLearner,
    /// Events whose cgroup no one could name (`container: unknown`).
    pub unnamed: u64,
    /// `--names`: every namespace's DNS answers, which name client destinations.
    names: Option<crate::names::Names>,
    /// Why refused SYN-data was refused, where the kernel left that to us.
    causes: super::causes::Causes,
}

/// `ip netns` names by namespace inode, re-read (at most every few seconds) when an event
/// comes from a namespace not seen yet: namespaces come and go while we trace.
#[derive(Default)]
struct NetnsNames {
    names: std::collections::BTreeMap<u64, Arc<str>>,
    unknown: std::collections::BTreeSet<u32>,
    read_at: Option<std::time::Instant>,
}

impl NetnsNames {
    fn name(&mut self, inode: u32) -> Option<Arc<str>> {
        if let Some(n) = self.names.get(&u64::from(inode)) {
            return Some(n.clone());
        }
        let stale = self.read_at.is_none_or(|t| t.elapsed() > std::time::Duration::from_secs(2));
        if !self.unknown.contains(&inode) || stale {
            self.names =
                crate::kernel::netns::netns_names().into_iter().map(|(i, n)| (i, n.into())).collect();
            self.read_at = Some(std::time::Instant::now());
            self.unknown.clear();
        }
        let found = self.names.get(&u64::from(inode)).cloned();
        if found.is_none() {
            self.unknown.insert(inode);
        }
        found
    }
}

impl EventSource {
    /// `cgroup_hooks`: whether the cgroup hooks attached (see [`super::cgroups`]);
    /// `names`: the DNS answers' reader that names destinations (`--names`); `causes`:
    /// what tells a refused SYN-data's cause.
    pub(crate) fn new(
        ebpf: &mut Ebpf,
        cgroup_hooks: bool,
        names: Option<crate::names::Names>,
        causes: super::causes::Causes,
    ) -> Result<Self> {
        let ring = RingBuf::try_from(ebpf.take_map("EVENTS").ok_or_else(|| anyhow!("EVENTS map missing"))?)
            .context("opening the EVENTS ring buffer")?;
        let counters =
            PerCpuArray::try_from(ebpf.take_map("COUNTERS").ok_or_else(|| anyhow!("COUNTERS map missing"))?)
                .context("opening the COUNTERS map")?;
        let counts =
            PerCpuHashMap::try_from(ebpf.take_map("COUNTS").ok_or_else(|| anyhow!("COUNTS map missing"))?)
                .context("opening the COUNTS map")?;
        Ok(EventSource {
            // SAFETY: the ring buffer's fd is owned by `Ring`, which the AsyncFd owns and
            // deregisters on drop, so the fd stays open for as long as it is registered.
            ring: unsafe { AsyncFd::register(Ring(ring)) }
                .context("registering the ring buffer with tokio")?,
            counters,
            counts,
            clock: Clock::now(),
            comms: Interner::default(),
            malformed: 0,
            owners: OwnerCache::default(),
            listeners: ListenerNames::default(),
            netns_names: NetnsNames::default(),
            cgroups: super::cgroups::CgroupLearner::new(ebpf, cgroup_hooks)?,
            unnamed: 0,
            names,
            causes,
        })
    }

    /// `--names`: read the answers of namespaces made since the last look, from now on.
    pub(crate) fn watch_new_namespaces(&mut self) {
        if let Some(names) = &mut self.names {
            names.rescan();
        }
    }

    /// What `--names` has read so far (None without it).
    pub(crate) fn names_stats(&self) -> Option<crate::names::NamesStats> {
        self.names.as_ref().map(crate::names::Names::stats)
    }

    /// Everything already in the ring buffer, without waiting, as events.
    pub(crate) fn drain(&mut self, out: &mut Vec<Event>) {
        self.drain_each(|e| out.push(e.to_event()));
    }

    /// Everything already in the ring buffer, without waiting, each record decoded
    /// ([`EventRef::decode`]), named and handed to `each` without making an [`Event`]
    /// (what `top` counts and `trace` prints, with no name cloned). The one place a record
    /// is named: a server event's listener by its bound address, and its owner where the
    /// kernel map had none (a listener opened before we attached), both from /proc; every
    /// event's namespace name and container, and a client's destination by its DNS name
    /// (`--names`; the answers queued before the records are read first); and a refused
    /// SYN-data's cause where the kernel left it to us ([`super::causes`]). A refusal that
    /// waits for the next connection's SYN to be told holds back the events after it, in
    /// order, for at most [`causes::HOLD`] each and [`causes::HOLD_PER_DRAIN`] in all:
    /// every record read is handed over before this returns. Returns how many were.
    pub(crate) fn drain_each(&mut self, mut each: impl FnMut(EventRef<'_>)) -> u64 {
        let lost = self.lost();
        let EventSource {
            ring,
            clock,
            comms,
            malformed,
            owners,
            listeners,
            netns_names,
            cgroups,
            unnamed,
            names,
            causes,
            ..
        } = self;
        if let Some(names) = names.as_mut() {
            names.learn(std::time::Instant::now());
        }
        causes.events_lost(lost);
        let ring = &mut ring.get_mut().0;
        let mut learning = cgroups.names();
        let mut handed = 0;
        // Records held back behind a refusal that waits, with what they were told.
        let mut held: std::collections::VecDeque<(Vec<u8>, Tell)> = std::collections::VecDeque::new();
        let mut waited_until = None;
        // Past this drain's time: what is still held goes untold.
        let mut flush = false;
        // Names an event, and hands it over.
        macro_rules! hand_over {
            ($e:ident) => {{
                let mut e = $e;
                if e.role == Role::Server {
                    e.listener =
                        listeners.lookup(e.netns, e.pid, std::net::SocketAddr::new(e.saddr, e.sport));
                }
                let owner = (e.role == Role::Server && e.pid == 0)
                    .then(|| owners.lookup(e.netns, e.sport, e.listener))
                    .flatten();
                if let Some(o) = &owner {
                    (e.pid, e.comm) = (o.pid, &o.comm);
                    e.cgroup_id = e.cgroup_id.or(o.cgroup_id);
                }
                if let (Some(names), Role::Client) = (names.as_mut(), e.role) {
                    if !names.reads(e.netns) {
                        names.saw_namespace(e.netns);
                    } else {
                        // Also where a name is found: a newer answer for the same address
                        // may have come after the last read began (a repeated lookup, a
                        // CNAME).
                        names.catch_up(e.unix_ns);
                    }
                }
                if let (Some(names), Role::Client) = (names.as_ref(), e.role) {
                    e.dname = names.name_of(e.netns, e.daddr, e.unix_ns);
                    if e.dname.is_none() && names.reads(e.netns) && log::log_enabled!(log::Level::Debug) {
                        let kept = names.kept(e.netns, e.daddr);
                        log::debug!(
                            "--names: {} at {} in netns {}: none of {kept:?}",
                            e.daddr,
                            e.unix_ns,
                            e.netns
                        );
                    }
                }
                let ns_name = netns_names.name(e.netns);
                e.netns_name = ns_name.as_ref();
                e.cgroup = e.cgroup_id.and_then(|id| learning.named(id));
                e.container = match e.cgroup {
                    Some(n) => n.label.as_deref(),
                    None => {
                        *unnamed += 1;
                        Some(crate::kernel::cgroup::UNKNOWN)
                    }
                };
                handed += 1;
                each(e);
            }};
        }
        loop {
            // The held records whose turn has come, in order.
            while let Some((bytes, tell)) = held.front() {
                let told = match tell {
                    Tell::Now(told) => *told,
                    Tell::Later(id) => match causes.take(*id) {
                        Some(told) => told,
                        None if flush => Default::default(),
                        None => break,
                    },
                };
                if let Ok(mut e) = EventRef::from_bytes(bytes, *clock, comms) {
                    told.apply(&mut e);
                    hand_over!(e);
                }
                held.pop_front();
            }
            if let Some(item) = ring.next() {
                let decoded = super::record_of(&item)
                    .and_then(|raw| EventRef::from_bytes(&item, *clock, comms).map(|e| (raw, e)));
                let (raw, mut e) = match decoded {
                    Ok(d) => d,
                    Err(err) => {
                        *malformed += 1;
                        log::debug!("malformed event: {err:#}");
                        continue;
                    }
                };
                match causes.tell(&e, &raw) {
                    Tell::Now(told) if held.is_empty() => {
                        told.apply(&mut e);
                        hand_over!(e);
                    }
                    tell => held.push_back((item.to_vec(), tell)),
                }
                continue;
            }
            if held.is_empty() {
                break;
            }
            // A refusal waits for the next connection's SYN: what came meanwhile is read,
            // for at most its own time and this drain's.
            let now = std::time::Instant::now();
            let until = *waited_until.get_or_insert(now + causes::HOLD_PER_DRAIN);
            match causes.waits_until() {
                Some(deadline) if now < until && now < deadline => {
                    std::thread::sleep(deadline.min(until).saturating_duration_since(now).min(POLL_WAITING));
                }
                Some(_) => causes.give_up(now >= until),
                None => {
                    causes.give_up(true);
                    flush = true;
                }
            }
        }
        learning.names.events_read();
        handed
    }

    /// Waits until the kernel wakes us (it does so once the ring is 1/4 full, see
    /// `emit` in the eBPF maps) or 100 ms pass, then drains what is there.
    pub(crate) async fn next_batch(&mut self, out: &mut Vec<Event>) -> Result<()> {
        self.wait().await?;
        self.drain(out);
        Ok(())
    }

    /// Waits until the kernel wakes us or 100 ms pass (then there may be events to drain).
    pub(crate) async fn wait(&mut self) -> Result<()> {
        if let Ok(ready) = tokio::time::timeout(POLL_INTERVAL, self.ring.readable_mut()).await {
            ready.context("waiting on the ring buffer")?.clear_ready();
        }
        Ok(())
    }

    fn counter(&self, index: u32) -> u64 {
        self.counters.get(&index, 0).map(|per_cpu| per_cpu.iter().sum()).unwrap_or(0)
    }

    /// Events the kernel could not write because the ring buffer was full (their counts
    /// are still in [`EventSource::kernel_counts`]).
    pub(crate) fn lost(&self) -> u64 {
        self.counter(counter::EVENTS_LOST)
    }

    /// TFO connects whose state could not be stored (their events lack pid and timing).
    pub(crate) fn state_failures(&self) -> u64 {
        self.counter(counter::CONN_STATE_FAILED)
    }

    /// Cgroup records the kernel could not write because their ring was full (those
    /// cgroups are named by a walk of the hierarchy, where they still exist).
    pub(crate) fn cgroup_records_lost(&self) -> u64 {
        self.counter(counter::CGROUP_EVENTS_LOST)
    }

    /// Outcomes the kernel could not count because its table of namespaces was full.
    pub(crate) fn uncounted(&self) -> u64 {
        self.counter(counter::COUNTS_FULL)
    }

    /// What the kernel has counted since the programs were loaded, per namespace, role and
    /// outcome, summed over CPUs: exact whether or not this reader kept up with the events.
    pub(crate) fn kernel_counts(&self) -> Result<KernelCounts> {
        let mut rows = std::collections::BTreeMap::new();
        for item in self.counts.iter() {
            let (key, per_cpu) = item.context("reading the COUNTS map")?;
            let mut total = Counts::zeroed();
            for c in per_cpu.iter() {
                total.add(c);
            }
            rows.insert(key, total);
        }
        Ok(KernelCounts { rows })
    }
}
