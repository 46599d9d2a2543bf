//! Reading the `EVENTS` ring buffer and the loss counters from userspace.
use std::{
    collections::VecDeque,
    net::SocketAddr,
    os::fd::{AsFd as _, AsRawFd, RawFd},
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::{anyhow, Context as _, Result};
use aya::{
    maps::{MapData, PerCpuArray, PerCpuHashMap, RingBuf},
    Ebpf,
};
use tfo_trace_common::{counter, CountKey, Counts, TfoEvent};
use tokio::io::unix::AsyncFd;

use super::{
    causes::{self, Tell, Telling},
    counts::KernelCounts,
    record_of, Clock, Event, EventRef, Interner, Role,
};
use crate::kernel::{
    listener_directory::{ListenerDirectory, Naming},
    listeners::Owner,
};

/// tokio wants AsRawFd; aya's RingBuf offers AsFd.
struct Ring(RingBuf<MapData>);

impl AsRawFd for Ring {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_fd().as_raw_fd()
    }
}

/// The longest a quietly submitted event waits before userspace reads it.
const POLL_INTERVAL: Duration = Duration::from_millis(100);
/// The longest a server event waits for its namespace's listeners to be read before it
/// goes on named as far as they are known: a read through sock_diag takes milliseconds,
/// one through /proc/PID/net/tcp (a namespace this user may not enter) about 0.75 s per
/// 100,000 sockets of the namespace (issue 55's measure: ~75 ms per 10,000).
const PARK_MAX: Duration = Duration::from_secs(2);
/// Records held back at most (144 bytes each: 9 MiB); past it the oldest go on as named
/// as known.
const PARK_CAP: usize = 65_536;
/// A drain hands events over for about this long at most, then lets the view's loop run
/// (its refresh, its signals); the rest is read at the next wakeup or poll.
const DRAIN_BUDGET: Duration = Duration::from_millis(50);
/// How long the last drain waits for the listener reads it asked for.
const SETTLE_MAX: Duration = Duration::from_millis(500);

/// How often the ring is read again while a refusal waits for the next connection's SYN.
const POLL_WAITING: Duration = Duration::from_millis(1);

pub(crate) struct EventSource {
    ring: AsyncFd<Ring>,
    counters: PerCpuArray<MapData, u64>,
    counts: PerCpuHashMap<MapData, CountKey, Counts>,
    clock: Clock,
    /// Process names, one copy each.
    comms: Interner,
    /// Records that did not decode (a kernel/userspace mismatch): counted, never silent.
    pub malformed: u64,
    /// Every namespace's listeners and their owners, read on a thread of their own.
    directory: ListenerDirectory,
    /// Records held back, in order, while their namespace's listeners are being read
    /// (everything after the first one too: events keep their order), with when.
    /// With what they were told ([`super::causes`]).
    parked: VecDeque<(TfoEvent, Telling, Instant)>,
    /// The view stops: the next drain is the last ([`EventSource::stopping`]).
    stopping: bool,
    netns_names: NetnsNames,
    cgroups: super::cgroups::CgroupLearner,
    /// Events whose cgroup no one could name (`container: unknown`).
    pub unnamed: u64,
    /// `--names`: every namespace's DNS answers, which name client destinations.
    names: Option<crate::names::Names>,
    /// Why refused SYN-data was refused, where the kernel left that to us.
    causes: super::causes::Causes,
}

/// What became of one record.
enum Handed {
    One,
    /// Malformed: counted, not handed over.
    Dropped,
    /// Held back: its namespace's listeners are being read.
    Wait,
}

impl Handed {
    fn count(&self) -> u64 {
        u64::from(matches!(self, Handed::One))
    }
}

/// `ip netns` names by namespace inode, re-read (at most every few seconds) when an event
/// comes from a namespace not seen yet: namespaces come and go while we trace.
#[derive(Default)]
struct NetnsNames {
    names: std::collections::BTreeMap<u64, Arc<str>>,
    unknown: std::collections::BTreeSet<u32>,
    read_at: Option<Instant>,
}

impl NetnsNames {
    fn name(&mut self, inode: u32) -> Option<Arc<str>> {
        if let Some(n) = self.names.get(&u64::from(inode)) {
            return Some(n.clone());
        }
        let stale = self.read_at.is_none_or(|t| t.elapsed() > Duration::from_secs(2));
        if !self.unknown.contains(&inode) || stale {
            self.names =
                crate::kernel::netns::netns_names().into_iter().map(|(i, n)| (i, n.into())).collect();
            self.read_at = Some(Instant::now());
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
            directory: ListenerDirectory::default(),
            parked: VecDeque::new(),
            stopping: false,
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
    /// kernel map had none (a listener opened before we attached), both from the
    /// [`ListenerDirectory`]; every event's namespace name and container, and a client's
    /// destination by its DNS name (`--names`; the answers queued before the records are
    /// read first); and a refused SYN-data's cause where the kernel left it to us
    /// ([`super::causes`]).
    ///
    /// Events keep their order, and two things hold them back. A refusal that waits for
    /// the next connection's SYN to be told holds back the events after it for at most
    /// [`causes::HOLD`] each and [`causes::HOLD_PER_DRAIN`] in all, within this call. A
    /// server event whose namespace's listeners are being read (never on this thread) is
    /// held back, with the events after it, until they are in, [`PARK_MAX`] at most, across
    /// calls. A call stops reading the ring after about [`DRAIN_BUDGET`] (the rest is left
    /// for the next), so the view's refresh and signals keep their time. The last drain
    /// ([`EventSource::stopping`]) reads the ring to its end, waits [`SETTLE_MAX`] at most
    /// for the listener reads it asked for, and hands everything over. Returns how many
    /// records were handed over.
    pub(crate) fn drain_each(&mut self, mut each: impl FnMut(EventRef<'_>)) -> u64 {
        let lost = self.lost();
        let EventSource {
            ring,
            clock,
            comms,
            malformed,
            directory,
            parked,
            stopping,
            netns_names,
            cgroups,
            unnamed,
            names,
            causes,
            ..
        } = self;
        if let Some(names) = names.as_mut() {
            names.learn(Instant::now());
        }
        causes.events_lost(lost);
        directory.collect();
        let ring = &mut ring.get_mut().0;
        let mut learning = cgroups.names();
        let last = *stopping;
        let mut undecoded = 0u64;
        // One record, told, named and handed over; Wait where its listeners are being read
        // (`late`: named as far as they are known now).
        let mut hand = |directory: &mut ListenerDirectory,
                        comms: &mut Interner,
                        raw: &TfoEvent,
                        told: Telling,
                        late: bool|
         -> Handed {
            // The owner outlives the event, which borrows its name.
            let owner: Option<Owner>;
            let mut e = match EventRef::decode(raw, *clock, comms.comm_and_thread(&raw.comm, &raw.thread)) {
                Ok(e) => e,
                Err(err) => {
                    undecoded += 1;
                    log::debug!("malformed event: {err:#}");
                    return Handed::Dropped;
                }
            };
            told.apply(&mut e);
            if e.role == Role::Server {
                let local = SocketAddr::new(e.saddr, e.sport);
                let wants_owner = e.pid == 0;
                let named = if late {
                    directory.name_now(e.netns, local, wants_owner)
                } else {
                    match directory.name(e.netns, e.pid, local, raw.ts_ns, wants_owner) {
                        Naming::Wait => return Handed::Wait,
                        Naming::Named { listener, owner } => (listener, owner),
                    }
                };
                (e.listener, owner) = named;
                if let Some(o) = &owner {
                    (e.pid, e.comm) = (o.pid, &o.comm);
                    e.cgroup_id = e.cgroup_id.or(o.cgroup_id);
                }
            }
            if let (Some(names), Role::Client) = (names.as_mut(), e.role) {
                if !names.reads(e.netns) {
                    names.saw_namespace(e.netns);
                } else {
                    // Also where a name is found: a newer answer for the same address may
                    // have come after the last read began (a repeated lookup, a CNAME).
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
            each(e);
            Handed::One
        };
        let mut handed = 0;
        // What waited for its listeners first, in order, as far as they are known now.
        while let Some((raw, told, since)) = parked.front() {
            match hand(directory, comms, raw, *told, since.elapsed() >= PARK_MAX) {
                Handed::Wait => break,
                h => handed += h.count(),
            }
            parked.pop_front();
        }
        // A told record goes on, or waits for its listeners behind those that do.
        macro_rules! forward {
            ($raw:expr, $told:expr) => {{
                let (raw, told): (TfoEvent, Telling) = ($raw, $told);
                if parked.is_empty() {
                    match hand(directory, comms, &raw, told, false) {
                        Handed::Wait => parked.push_back((raw, told, Instant::now())),
                        h => handed += h.count(),
                    }
                } else {
                    if parked.len() >= PARK_CAP {
                        if let Some((oldest, oldest_told, _)) = parked.pop_front() {
                            handed += hand(directory, comms, &oldest, oldest_told, true).count();
                        }
                    }
                    parked.push_back((raw, told, Instant::now()));
                }
            }};
        }
        // Records held back behind a refusal that waits, with what they were told.
        let mut held: VecDeque<(TfoEvent, Tell)> = VecDeque::new();
        let mut waited_until = None;
        // Past this drain's time: what is still held goes untold.
        let mut flush = false;
        let started = Instant::now();
        loop {
            // The held records whose turn has come, in order.
            while let Some((raw, tell)) = held.front() {
                let told = match tell {
                    Tell::Now(told) => *told,
                    Tell::Later(id) => match causes.take(*id) {
                        Some(told) => told,
                        None if flush => Default::default(),
                        None => break,
                    },
                };
                let raw = *raw;
                held.pop_front();
                forward!(raw, told);
            }
            // This drain's time is up: the rest is read at the next (a refusal that waits
            // still reads on, for the SYN it waits for).
            let over = !last && held.is_empty() && started.elapsed() >= DRAIN_BUDGET;
            if let Some(item) = (!over).then(|| ring.next()).flatten() {
                let decoded = record_of(&item)
                    .and_then(|raw| EventRef::from_bytes(&item, *clock, comms).map(|e| (raw, e)));
                let (raw, e) = match decoded {
                    Ok(d) => d,
                    Err(err) => {
                        *malformed += 1;
                        log::debug!("malformed event: {err:#}");
                        continue;
                    }
                };
                let tell = causes.tell(&e, &raw);
                drop(item);
                match tell {
                    Tell::Now(told) if held.is_empty() => forward!(raw, told),
                    tell => held.push_back((raw, tell)),
                }
                continue;
            }
            if held.is_empty() {
                break;
            }
            // A refusal waits for the next connection's SYN: what came meanwhile is read,
            // for at most its own time and this drain's.
            let now = Instant::now();
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
        if last && !parked.is_empty() {
            // The reads the records held back asked for, then every one, named as far as
            // the tables say.
            directory.settle(SETTLE_MAX);
            while let Some((raw, told, _)) = parked.pop_front() {
                handed += hand(directory, comms, &raw, told, true).count();
            }
        }
        *malformed += undecoded;
        learning.names.events_read();
        handed
    }

    /// The view stops: the next drain is the last, which hands over all there is (see
    /// [`EventSource::drain_each`]).
    pub(crate) fn stopping(&mut self) {
        self.stopping = true;
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
