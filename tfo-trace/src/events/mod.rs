//! Decoding kernel events into [`Event`], the record every view and the JSON output use.
pub(crate) mod causes;
pub(crate) mod cgroups;
mod codes;
pub(crate) mod counts;
mod fields;
pub mod flight;
pub(crate) mod reader;
pub mod record;
pub(crate) mod replay;
mod time;

use std::{
    collections::HashSet,
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
    sync::Arc,
};

use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};
use tfo_trace_common::{flags, TfoEvent, FAMILY_V4, FAMILY_V6, PAUSE_AGE_UNKNOWN, TASK_COMM_LEN};

use crate::kernel::cgroup::NamedCgroup;

pub use causes::CookieChange;
pub use codes::{Errno, Trip};
pub use tfo_trace_common::{Cause, Outcome, Role};
/// Roles and outcomes are declared once, in tfo-trace-common, with their wire numbers.
pub use time::Timestamp;
pub(crate) use time::{monotonic_ns, rfc3339, Clock};

fields::event_fields! {
    /// One decoded TFO event. Field names are the JSON contract users script against.
    /// Names (process, namespace, cgroup, container) are shared with every event of the same
    /// one: an event costs no allocation of its own.
    struct Event;

    /// One event, decoded from its ring-buffer record and named by the reader (listener and
    /// owner, namespace name, container), its names borrowed: what `top` counts and `trace`
    /// prints without making an [`Event`], and what [`EventRef::to_event`] makes one of. The
    /// one decoding of a record is [`EventRef::decode`]; the one naming is the reader's
    /// ([`reader::EventSource::drain_each`]). [`Event::view`] gives one of an [`Event`].
    /// Its fields are [`Event`]'s.
    struct EventRef<'a>;

    // `raw`: the kernel's record; `at`: what decoding checked and worked out of it first;
    // `r`: the view an event is made from; `e`: the event a view is made of.
    decode(raw, at: Checked<'a>) event(r) view(e);

    /// Wall-clock time with ns precision. The view holds it as ns since the epoch
    /// ([`Timestamp::unix_ns`]): a number, so that `trace` makes the text only as it prints it.
    ts: Timestamp, view unix_ns: u128 = at.unix_ns;
        event Timestamp::from_unix_ns(r.unix_ns); view e.ts.unix_ns();
    role: Role = at.role;
    outcome: Outcome = at.outcome;
    family: u8 = at.family;
    saddr: IpAddr = at.saddr;
    sport: u16 = raw.sport;
    daddr: IpAddr = at.daddr;
    dport: u16 = raw.dport;
    /// Client: the DNS name a process of its namespace resolved to `daddr` (the name it
    /// asked for, before any CNAME), where `--names` learnt one; never set otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    dname: Option<Arc<str>>, view dname: Option<&'a Arc<str>> = None;
        event r.dname.cloned(); view e.dname.as_ref();
    netns: u32 = raw.netns;
    /// The namespace's `ip netns` name, where it has one (what a server event's reader
    /// names, and `top`'s `/` filter matches).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    netns_name: Option<Arc<str>>, view netns_name: Option<&'a Arc<str>> = None;
        event r.netns_name.cloned(); view e.netns_name.as_ref();
    /// Server: the listening socket the connection arrived at, named by its bound address
    /// (`0.0.0.0:8080`, `[::]:8080`, or its own address; a dual-stack `[::]:8080` is `*:8080`
    /// in `ss -ltn`), where it was found in /proc.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    listener: Option<std::net::SocketAddr> = None;
    pid: u32 = raw.pid;
    /// The process's name (its main thread's, as /proc/PID/comm shows it).
    comm: Arc<str>, view comm: &'a Arc<str> = at.comm;
        event r.comm.clone(); view &e.comm;
    /// The name of the thread that connected (client) or called listen() (server), where it
    /// is not the process's: a worker's (`connworker`). Absent where the same or unknown,
    /// and in a recording made before events carried it (whose `comm` is the thread's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    thread: Option<Arc<str>>, view thread: Option<&'a Arc<str>> = at.thread;
        event r.thread.cloned(); view e.thread.as_ref();
    syn_data_bytes: u32 = raw.syn_data_bytes;
    /// Length of the TFO cookie, where the backend saw it (null otherwise); 0 on a server
    /// event: the SYN asked for a cookie.
    cookie_len: Option<u8> = (raw.flags & flags::COOKIE_LEN_KNOWN != 0).then_some(raw.cookie_len);
    /// Server `cookie_requested` only: whether a cookie went back.
    #[serde(skip_serializing_if = "Option::is_none")]
    cookie_issued: Option<bool> = (at.role == Role::Server && at.outcome == Outcome::CookieRequested)
        .then_some(raw.flags & flags::COOKIE_ISSUED != 0);
    /// A refused SYN-data (client `data_not_acked`): what its SYN-ACK said, `new_cookie`,
    /// `no_tfo_option`, `same_cookie` or `unknown` (docs/outcomes.md, "Why SYN-data was
    /// refused"); absent on every other event. A recording made before causes were kept
    /// reads as `unknown`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    cause: Option<Cause> = refused_data(at.role, at.outcome).then(|| Cause::from_u8(raw.cause));
    /// A keyed hash of the cookie the event is about (`cookie_received`: the one cached; a
    /// refusal: the one its SYN-ACK brought), never the cookie: its key is made per tracer
    /// run, so hashes compare within one run (one recording) only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    cookie_hash: Option<u32> = (raw.cookie_hash != 0).then_some(raw.cookie_hash);
    /// A refused SYN-data: the same keyed hash of the cookie its SYN carried, where the
    /// tracer saw it leave or could tell it from the destination's cookie cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    sent_cookie_hash: Option<u32> = (raw.sent_cookie_hash != 0).then_some(raw.sent_cookie_hash);
    /// A refused SYN-data, where the cookies its SYN carried and its SYN-ACK brought are
    /// known: `first` (the destination's cookie changed here), `in_flight` (its SYN left
    /// with the old cookie before the new one came), `again` (its SYN carried a cookie the
    /// destination had just handed out to a refused SYN-data, none accepted since: the new
    /// cookie did not hold). Told by the reader, never by the kernel.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    cookie_change: Option<CookieChange> = None;
    /// The SYN used the experimental option (kind 254, magic 0xF989).
    exp_option: bool = raw.flags & flags::EXP_OPTION != 0;
    retransmits: u32 = raw.retransmits;
    /// SYN sent (client) or child created (server) to the outcome; null where unknown.
    handshake_us: Option<u64> = handshake_us(raw);
    /// Time lost to SYN timeouts (0 if none).
    stall_us: u64 = raw.stall_ns / 1000;
    /// `accepted`: the round trip TFO saved this connection, as the kernel sampled it
    /// (client: SYN -> SYN-ACK; server: SYN-data's arrival to the final ACK); null where
    /// unknown (no sample, a backend that decides it before the handshake ends, or a
    /// recording made before events carried it) and on every other outcome.
    #[serde(default)]
    saved_us: Option<u64> = (raw.flags & flags::SAVED_KNOWN != 0).then_some(u64::from(raw.saved_us));
    /// Server: the listener's TFO queue length and its limit (fastopen=) when the SYN
    /// arrived, where the backend sees it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    queue_len: Option<u32> = (raw.flags & flags::QUEUE_KNOWN != 0).then_some(raw.queue_len);
    #[serde(default, skip_serializing_if = "Option::is_none")]
    queue_max: Option<u32> = (raw.flags & flags::QUEUE_KNOWN != 0).then_some(raw.queue_max);
    /// `connect_failed`: the error the connect ended with (`ECONNREFUSED`: a reset;
    /// `ETIMEDOUT`: every SYN timed out; an ICMP error's), where the backend read it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    error: Option<Errno> = (at.outcome == Outcome::ConnectFailed).then(|| Errno::of(raw.error)).flatten();
    /// `not_attempted` and `active_disabled`: the namespace's pauses of active TFO so far as
    /// the kernel counts them (`tfo_active_disable_times`, which sets the last one's
    /// length), where read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pause_times: Option<u16> = (raw.pause_times != 0).then_some(raw.pause_times);
    /// The same events: how long before the event the namespace's last pause began, in ms,
    /// by the kernel's own stamp (`tfo_active_disable_stamp`), where read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pause_age_ms: Option<u32> = (raw.pause_times != 0 && raw.pause_age_ms != PAUSE_AGE_UNKNOWN)
        .then_some(raw.pause_age_ms);
    /// `active_disabled`: what tripped it (`timeouts`, `out_of_order_end`), where told.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    trip: Option<Trip> = (at.outcome == Outcome::ActiveDisabled).then(|| Trip::of(raw.pause_trip)).flatten();
    /// cgroup v2 of `pid` when it connected (client) or called listen() (server): its id
    /// (the directory's inode), its path below the v2 root, and the container that path
    /// names, where it names one. The view holds the cgroup as the reader's table named it
    /// (None: not named by the reader), whose names the event's fields below are made of.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    cgroup_id: Option<u64> = (raw.cgroup_id != 0).then_some(raw.cgroup_id);
    #[serde(default, skip_serializing_if = "Option::is_none")]
    cgroup: Option<Arc<str>>, view cgroup: Option<&'a NamedCgroup> = None;
        event r.cgroup.map(|n| n.path.clone()); view None;
    #[serde(default, skip_serializing_if = "Option::is_none")]
    container_id: Option<Arc<str>>, event only = r.cgroup_name(|n| &n.container_id);
    /// `docker`, `containerd`, `crio`, `podman` (the runtime whose state has the container;
    /// `unknown` for an id no runtime here knows), or a systemd unit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    container_runtime: Option<Arc<str>>, event only = r.cgroup_name(|n| &n.container_runtime);
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pod_uid: Option<Arc<str>>, event only = r.cgroup_name(|n| &n.pod_uid);
    /// Docker's or Podman's name of the container; a Kubernetes container's name in its pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    container_name: Option<Arc<str>>, event only = r.cgroup_name(|n| &n.container_name);
    /// A Kubernetes pod's name and namespace (from the runtime's CRI labels).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pod: Option<Arc<str>>, event only = r.cgroup_name(|n| &n.pod);
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pod_namespace: Option<Arc<str>>, event only = r.cgroup_name(|n| &n.pod_namespace);
    /// What the views show as CONTAINER: the name (`namespace/pod/container` in
    /// Kubernetes), else the short id, the systemd unit or the cgroup path; `unknown` where
    /// the cgroup could not be named; absent for the host (the root cgroup). The view's
    /// is [`Event::container_label`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    container: Option<Arc<str>>, view container: Option<&'a str> = None;
        event r.owned_container(); view e.container_label();
}

/// Names shared by the events and rows that carry them (process names, container
/// labels): each distinct name is allocated once, not once per event. A host has few
/// distinct names; past [`Interner::MAX`] the table starts over (what holds a name keeps
/// it).
#[derive(Default)]
pub struct Interner {
    names: HashSet<Arc<str>, foldhash::fast::RandomState>,
    /// The last few `comm`s asked for, as the kernel sent them, and their names: busy
    /// processes (their threads, client and server) send event after event, and 16 bytes
    /// compared are cheaper than a lossy UTF-8 pass, a hash and a lookup.
    recent_comms: [Option<([u8; TASK_COMM_LEN], Arc<str>)>; RECENT_COMMS],
    /// Where the next `comm` not in `recent_comms` goes (round robin).
    next_recent: usize,
}

const RECENT_COMMS: usize = 4;

impl Interner {
    const MAX: usize = 4096;

    pub fn get(&mut self, name: &str) -> Arc<str> {
        if let Some(shared) = self.names.get(name) {
            return shared.clone();
        }
        if self.names.len() >= Self::MAX {
            self.names.clear();
        }
        let shared: Arc<str> = name.into();
        self.names.insert(shared.clone());
        shared
    }

    /// A `comm` as the kernel sends it (NUL-padded bytes), as a name.
    pub fn comm(&mut self, comm: &[u8; TASK_COMM_LEN]) -> &Arc<str> {
        let at = self.recent_slot(comm, None);
        &self.recent_comms[at].as_ref().expect("found or just set").1
    }

    /// A process's name and its thread's as the kernel sends them, as names: the thread's
    /// only where it is another (an unknown one is all zero, as the process's then is).
    pub(crate) fn comm_and_thread(
        &mut self,
        comm: &[u8; TASK_COMM_LEN],
        thread: &[u8; TASK_COMM_LEN],
    ) -> (&Arc<str>, Option<&Arc<str>>) {
        let at = self.recent_slot(comm, None);
        let thread_at = (thread != comm && thread[0] != 0).then(|| self.recent_slot(thread, Some(at)));
        let name = |i: usize| &self.recent_comms[i].as_ref().expect("found or just set").1;
        (name(at), thread_at.map(name))
    }

    /// The slot of `comm` among the recent ones, put there (in turn, but never over
    /// `keep`) if it is not.
    fn recent_slot(&mut self, comm: &[u8; TASK_COMM_LEN], keep: Option<usize>) -> usize {
        if let Some(at) =
            self.recent_comms.iter().position(|r| r.as_ref().is_some_and(|(raw, _)| raw == comm))
        {
            return at;
        }
        let end = comm.iter().position(|&c| c == 0).unwrap_or(comm.len());
        let name = self.get(&comm_text(&comm[..end]));
        if Some(self.next_recent) == keep {
            self.next_recent = (self.next_recent + 1) % RECENT_COMMS;
        }
        let at = self.next_recent;
        self.next_recent = (at + 1) % RECENT_COMMS;
        self.recent_comms[at] = Some((*comm, name));
        at
    }
}

/// A `comm`'s bytes as text. The kernel keeps the first TASK_COMM_LEN - 1 bytes of a
/// name (`char comm[TASK_COMM_LEN]`, 16, include/linux/sched.h), cutting a multi-byte
/// character at the end of a longer one: that piece goes, as the rest of the name went,
/// rather than show as `\u{fffd}`. Bytes that are not UTF-8 elsewhere show as `\u{fffd}`.
fn comm_text(bytes: &[u8]) -> std::borrow::Cow<'_, str> {
    match std::str::from_utf8(bytes) {
        Ok(s) => s.into(),
        // error_len None: the bytes end inside a character.
        Err(e) if e.error_len().is_none() => String::from_utf8_lossy(&bytes[..e.valid_up_to()]),
        Err(_) => String::from_utf8_lossy(bytes),
    }
}

fn addr(family: u8, raw: &[u8; 16]) -> IpAddr {
    if family == FAMILY_V4 {
        IpAddr::V4(Ipv4Addr::new(raw[0], raw[1], raw[2], raw[3]))
    } else {
        IpAddr::V6(Ipv6Addr::from(*raw))
    }
}

/// An IPv6 socket's addresses, where both are IPv4-mapped (`::ffff:a.b.c.d`: a dual-stack
/// listener's child of an IPv4 client, an IPv6 socket connected to an IPv4 address), as
/// the IPv4 addresses they are, family 4: what every view shows and filters on, and what
/// recordings hold. The one rule, applied where an event is decoded (the kernel's record,
/// a recording's line made before it); the kernel's address filter applies the same
/// (tfo-trace-ebpf/src/filter.rs).
pub(crate) fn unmapped(family: u8, saddr: IpAddr, daddr: IpAddr) -> (u8, IpAddr, IpAddr) {
    let v4 = |a: IpAddr| match a {
        IpAddr::V6(a) => a.to_ipv4_mapped(),
        IpAddr::V4(_) => None,
    };
    match (family, v4(saddr), v4(daddr)) {
        (FAMILY_V6, Some(s), Some(d)) => (FAMILY_V4, s.into(), d.into()),
        _ => (family, saddr, daddr),
    }
}

/// What decoding a record checks and works out before its fields: its role and outcome
/// (known values, or the record is refused), its addresses (IPv4-mapped ones unmapped,
/// with their family), its time, and its process's and thread's names.
pub(crate) struct Checked<'a> {
    role: Role,
    outcome: Outcome,
    family: u8,
    saddr: IpAddr,
    daddr: IpAddr,
    unix_ns: u128,
    comm: &'a Arc<str>,
    thread: Option<&'a Arc<str>>,
}

/// A record's [`Checked`] facts, once its family, role and outcome are known values.
fn checked<'a>(
    raw: &TfoEvent,
    clock: Clock,
    (comm, thread): (&'a Arc<str>, Option<&'a Arc<str>>),
) -> Result<Checked<'a>> {
    if raw.family != FAMILY_V4 && raw.family != FAMILY_V6 {
        bail!("unknown address family {} in event", raw.family);
    }
    let Some(outcome) = Outcome::from_u8(raw.outcome) else {
        bail!("unknown outcome {} in event", raw.outcome)
    };
    let Some(role) = Role::from_u8(raw.role) else { bail!("unknown role {} in event", raw.role) };
    let (family, saddr, daddr) =
        unmapped(raw.family, addr(raw.family, &raw.saddr), addr(raw.family, &raw.daddr));
    Ok(Checked { role, outcome, family, saddr, daddr, unix_ns: clock.to_unix_ns(raw.ts_ns), comm, thread })
}

/// Whether an event is a refused SYN-data, whose [`Event::cause`] is told: a client's
/// `data_not_acked`. Not a `syn_retransmitted`: its SYN-ACK answers the plain SYN resent
/// after the timeout, which carries no TFO option (tcp_send_syn_data sets the request's
/// cookie length to -1 once the first SYN is out), so it says nothing of the server.
pub(crate) fn refused_data(role: Role, outcome: Outcome) -> bool {
    role == Role::Client && outcome == Outcome::DataNotAcked
}

/// SYN sent (client) or child created (server) to the outcome, where the start is known.
fn handshake_us(raw: &TfoEvent) -> Option<u64> {
    let start_known = raw.flags & flags::START_KNOWN != 0 && raw.start_ns <= raw.ts_ns;
    start_known.then(|| (raw.ts_ns - raw.start_ns) / 1000)
}

/// The bytes of one ring-buffer record as the record they hold.
pub(crate) fn record_of(bytes: &[u8]) -> Result<TfoEvent> {
    if bytes.len() < std::mem::size_of::<TfoEvent>() {
        bail!("short event record: {} bytes", bytes.len());
    }
    // SAFETY: length checked above; TfoEvent is plain old data (any bit pattern is
    // valid) and read_unaligned makes no alignment assumption.
    Ok(unsafe { std::ptr::read_unaligned(bytes.as_ptr() as *const TfoEvent) })
}

/// What users call the container (or unit) of a process in a recording made before events
/// carried their `container`: the container id shortened as `docker ps` does, else the
/// runtime's unit, else the cgroup path (not the root's).
pub(crate) fn container_label<'a>(
    id: Option<&'a str>,
    runtime: Option<&'a str>,
    cgroup: Option<&'a str>,
) -> Option<&'a str> {
    crate::kernel::cgroup::plain_label(id, runtime, cgroup)
}

/// The shared `unknown` label.
fn unknown_label() -> Arc<str> {
    thread_local! {
        static UNKNOWN: Arc<str> = crate::kernel::cgroup::UNKNOWN.into();
    }
    UNKNOWN.with(Arc::clone)
}

impl<'a> EventRef<'a> {
    /// A ring-buffer record as the event it holds, its process's name `comm` and its
    /// thread's (the record's, named): not yet named by the reader (no listener, namespace
    /// name or container).
    pub(crate) fn decode(
        raw: &TfoEvent,
        clock: Clock,
        names: (&'a Arc<str>, Option<&'a Arc<str>>),
    ) -> Result<Self> {
        Ok(Self::of_record(raw, checked(raw, clock, names)?))
    }

    /// [`EventRef::decode`] the bytes of one ring-buffer record.
    pub(crate) fn from_bytes(bytes: &[u8], clock: Clock, names: &'a mut Interner) -> Result<Self> {
        let raw = record_of(bytes)?;
        Self::decode(&raw, clock, names.comm_and_thread(&raw.comm, &raw.thread))
    }

    /// One name of the cgroup the reader named, owned (shared).
    fn cgroup_name(&self, name: fn(&NamedCgroup) -> &Option<Arc<str>>) -> Option<Arc<str>> {
        self.cgroup.and_then(|n| name(n).clone())
    }

    /// [`Event::container`]: the label of the cgroup the reader named, else the view's.
    fn owned_container(&self) -> Option<Arc<str>> {
        match self.cgroup {
            Some(n) => n.label.clone(),
            None => self.container.map(|label| match label {
                crate::kernel::cgroup::UNKNOWN => unknown_label(),
                other => other.into(),
            }),
        }
    }
}

impl Event {
    /// Decodes the bytes of one ring-buffer record ([`EventRef::decode`]), not named by the
    /// reader: what the fuzz target and the tests decode.
    pub fn from_bytes(bytes: &[u8], clock: Clock, names: &mut Interner) -> Result<Self> {
        EventRef::from_bytes(bytes, clock, names).map(|e| e.to_event())
    }

    /// What users call the container (or unit) of the process ([`Event::container`]),
    /// owned.
    pub fn container_name(&self) -> Option<String> {
        self.container_label().map(str::to_owned)
    }

    /// [`Event::container`], borrowed (the views print it for every event); for a
    /// recording made before events carried it, [`container_label`] of its cgroup's names.
    pub(crate) fn container_label(&self) -> Option<&str> {
        if let Some(label) = &self.container {
            return Some(label);
        }
        container_label(
            self.container_id.as_deref(),
            self.container_runtime.as_deref(),
            self.cgroup.as_deref(),
        )
    }

    /// The destination as users name it: `198.18.0.2:8080`, `[fd00::2]:8080`.
    pub fn destination(&self) -> String {
        std::net::SocketAddr::new(self.daddr, self.dport).to_string()
    }

    pub fn source(&self) -> String {
        std::net::SocketAddr::new(self.saddr, self.sport).to_string()
    }
}

impl EventRef<'_> {
    /// A server event's listener as every view names it: the listening socket's bound
    /// address ([`Event::listener`]), else (not found, or a recording made before it was
    /// recorded) the address the connection arrived at.
    pub(crate) fn listener_name(&self) -> std::net::SocketAddr {
        self.listener.unwrap_or(std::net::SocketAddr::new(self.saddr, self.sport))
    }
}

/// An event with plain values, for unit tests to adjust with struct update syntax:
/// client 198.18.0.1:40000 -> 198.18.0.2:8080 (reversed for a server), netns 1, pid 1,
/// `c`, a handshake of 100 µs at the epoch; everything else absent or 0 (decoded from a
/// record of zeros: a new field needs nothing here).
#[cfg(test)]
pub(crate) fn sample_event(role: Role, outcome: Outcome) -> Event {
    let (client, server) = ([198, 18, 0, 1], [198, 18, 0, 2]);
    let ((saddr, sport), (daddr, dport)) = match role {
        Role::Client => ((client, 40000), (server, 8080)),
        Role::Server => ((server, 8080), (client, 40000)),
    };
    let mut raw = TfoEvent {
        ts_ns: 100_000,
        flags: flags::START_KNOWN,
        family: FAMILY_V4,
        role: role as u8,
        outcome: outcome as u8,
        sport,
        dport,
        netns: 1,
        pid: 1,
        ..TfoEvent::zeroed()
    };
    raw.saddr[..4].copy_from_slice(&saddr);
    raw.daddr[..4].copy_from_slice(&daddr);
    let comm: Arc<str> = "c".into();
    let e = EventRef::decode(&raw, Clock::fixed(-100_000), (&comm, None)).expect("a valid record").to_event();
    debug_assert_eq!((e.ts.unix_ns(), e.handshake_us), (0, Some(100)));
    e
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw() -> TfoEvent {
        let mut comm = [0u8; TASK_COMM_LEN];
        comm[..4].copy_from_slice(b"curl");
        let mut saddr = [0u8; 16];
        saddr[..4].copy_from_slice(&[198, 18, 0, 1]);
        let mut daddr = [0u8; 16];
        daddr[..4].copy_from_slice(&[198, 18, 0, 2]);
        TfoEvent {
            ts_ns: 5_000_000_000,
            start_ns: 3_900_000_000,
            stall_ns: 1_020_000_000,
            saddr,
            daddr,
            netns: 4026532000,
            pid: 4242,
            syn_data_bytes: 100,
            retransmits: 1,
            sport: 40000,
            dport: 8080,
            family: FAMILY_V4,
            role: Role::Client as u8,
            outcome: Outcome::SynRetransmitted as u8,
            flags: flags::START_KNOWN | flags::PID_KNOWN,
            comm,
            thread: comm,
            ..TfoEvent::zeroed()
        }
    }

    /// The event a record holds, not named by the reader.
    fn decode(r: &TfoEvent, clock: Clock) -> Result<Event> {
        let mut names = Interner::default();
        EventRef::decode(r, clock, names.comm_and_thread(&r.comm, &r.thread)).map(|e| e.to_event())
    }

    #[test]
    fn decodes_a_client_stall() {
        let e = decode(&raw(), Clock::fixed(1_000_000_000_000_000_000)).unwrap();
        assert_eq!(e.outcome, Outcome::SynRetransmitted);
        assert_eq!(e.role, Role::Client);
        assert_eq!(e.destination(), "198.18.0.2:8080");
        assert_eq!(&*e.comm, "curl");
        assert_eq!(e.handshake_us, Some(1_100_000));
        assert_eq!(e.stall_us, 1_020_000);
        assert_eq!(e.cookie_len, None);
        assert_eq!(e.cookie_issued, None);
        assert_eq!(e.ts.to_string(), "2001-09-09T01:46:45.000000000Z");
    }

    /// A dual-stack listener's child of an IPv4 client holds both addresses IPv4-mapped:
    /// they are IPv4, family 4; an IPv6 connection, or one mapped address alone, stays.
    #[test]
    fn ipv4_mapped_addresses_are_ipv4() {
        let mapped = |a: [u8; 4]| {
            let mut raw = [0u8; 16];
            raw[10..12].copy_from_slice(&[0xff, 0xff]);
            raw[12..].copy_from_slice(&a);
            raw
        };
        let server = TfoEvent {
            family: FAMILY_V6,
            role: Role::Server as u8,
            outcome: Outcome::Accepted as u8,
            saddr: mapped([10, 77, 0, 2]),
            daddr: mapped([10, 77, 0, 1]),
            sport: 8082,
            dport: 40000,
            ..raw()
        };
        let e = decode(&server, Clock::fixed(0)).unwrap();
        assert_eq!(
            (e.family, e.source(), e.destination()),
            (4, "10.77.0.2:8082".into(), "10.77.0.1:40000".into())
        );
        let v6 = TfoEvent { daddr: Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1).octets(), ..server };
        let e = decode(&v6, Clock::fixed(0)).unwrap();
        assert_eq!(
            (e.family, e.source()),
            (6, "[::ffff:10.77.0.2]:8082".into()),
            "one mapped address alone stays"
        );
    }

    #[test]
    fn rejects_unknown_values() {
        let mut r = raw();
        r.outcome = 200;
        assert!(decode(&r, Clock::fixed(0)).is_err());
        let mut r = raw();
        r.family = 9;
        assert!(decode(&r, Clock::fixed(0)).is_err());
        assert!(Event::from_bytes(&[0u8; 10], Clock::fixed(0), &mut Interner::default()).is_err());
    }

    #[test]
    fn saved_is_known_only_where_the_kernel_flagged_it() {
        let accepted = TfoEvent { outcome: Outcome::Accepted as u8, stall_ns: 0, retransmits: 0, ..raw() };
        let e = decode(&TfoEvent { saved_us: 731, ..accepted }, Clock::fixed(0)).unwrap();
        assert_eq!(e.saved_us, None, "a value without its flag is not a measurement");
        let known = TfoEvent { saved_us: 731, flags: accepted.flags | flags::SAVED_KNOWN, ..accepted };
        assert_eq!(decode(&known, Clock::fixed(0)).unwrap().saved_us, Some(731));
        let zero = TfoEvent { saved_us: 0, ..known };
        assert_eq!(decode(&zero, Clock::fixed(0)).unwrap().saved_us, Some(0), "a sub-µs loopback sample");
    }

    #[test]
    fn views_of_a_record_and_of_its_event_agree() {
        let mut server = raw();
        server.role = Role::Server as u8;
        server.outcome = Outcome::CookieRequested as u8;
        server.flags = 0;
        server.cgroup_id = 77;
        // The record's bytes, as the ring buffer holds them.
        let bytes = |r: &TfoEvent| {
            // SAFETY: TfoEvent is plain old data without padding; the slice lives no longer.
            unsafe { std::slice::from_raw_parts(r as *const TfoEvent as *const u8, size_of::<TfoEvent>()) }
                .to_vec()
        };
        for r in [raw(), server] {
            let e = Event::from_bytes(&bytes(&r), Clock::fixed(0), &mut Interner::default()).unwrap();
            let mut names = Interner::default();
            assert_eq!(EventRef::from_bytes(&bytes(&r), Clock::fixed(0), &mut names).unwrap(), e.view());
        }
        // Named by a reader: the event it makes has the names, and views back as it was.
        let named = crate::kernel::cgroup::NamedCgroup {
            path: "/system.slice/docker-4f1e6d9a0c2b.scope".into(),
            container_id: Some("4f1e6d9a0c2b".into()),
            container_runtime: Some("docker".into()),
            pod_uid: None,
            container_name: Some("web".into()),
            pod: None,
            pod_namespace: None,
            label: Some("web".into()),
        };
        let ns: Arc<str> = "lab-srv".into();
        let mut names = Interner::default();
        let mut e = EventRef::from_bytes(&bytes(&raw()), Clock::fixed(0), &mut names).unwrap();
        (e.cgroup, e.container, e.netns_name) = (Some(&named), Some("web"), Some(&ns));
        let owned = e.to_event();
        assert_eq!(
            (owned.cgroup.as_deref(), owned.container_name.as_deref(), owned.container_label()),
            (Some("/system.slice/docker-4f1e6d9a0c2b.scope"), Some("web"), Some("web"))
        );
        assert_eq!(owned.view(), EventRef { cgroup: None, ..e });
        // Not named (its cgroup unknown to the reader): `unknown`, one shared label.
        e.cgroup = None;
        e.container = Some(crate::kernel::cgroup::UNKNOWN);
        assert_eq!(e.to_event().container.as_deref(), Some(crate::kernel::cgroup::UNKNOWN));

        let mut bad = raw();
        bad.role = 9;
        assert!(EventRef::from_bytes(&bytes(&bad), Clock::fixed(0), &mut Interner::default()).is_err());
        assert!(
            EventRef::from_bytes(&bytes(&raw())[..10], Clock::fixed(0), &mut Interner::default()).is_err()
        );
    }

    /// A worker thread's name beside its process's: `thread` where it differs, and the two
    /// kept apart by the recent names whatever their order.
    #[test]
    fn the_thread_is_named_where_it_is_not_the_process() {
        let name = |n: &str| {
            let mut c = [0u8; TASK_COMM_LEN];
            c[..n.len()].copy_from_slice(n.as_bytes());
            c
        };
        let worker = TfoEvent { comm: name("python3"), thread: name("connworker"), ..raw() };
        let e = decode(&worker, Clock::fixed(0)).unwrap();
        assert_eq!((&*e.comm, e.thread.as_deref()), ("python3", Some("connworker")));
        assert_eq!(decode(&raw(), Clock::fixed(0)).unwrap().thread, None, "one thread: the same name");
        let unknown = TfoEvent { comm: [0; 16], thread: [0; 16], ..raw() };
        assert_eq!(decode(&unknown, Clock::fixed(0)).unwrap().thread, None);
        let mut names = Interner::default();
        for n in ["a", "b", "c", "d", "e", "f", "g"] {
            let (comm, thread) = names.comm_and_thread(&name(n), &name(&format!("{n}-worker")));
            assert_eq!((&**comm, thread.map(|t| &**t)), (n, Some(format!("{n}-worker").as_str())));
        }
        let v = serde_json::to_value(decode(&worker, Clock::fixed(0)).unwrap()).unwrap();
        assert_eq!(
            (&v["comm"], &v["thread"]),
            (&serde_json::json!("python3"), &serde_json::json!("connworker"))
        );
    }

    /// Issue 55, item 5: a name the kernel cut inside a character ("aデータベース" is 19
    /// bytes; comm keeps 15) shows without the piece, never as `\u{fffd}`.
    #[test]
    fn a_comm_cut_inside_a_character_drops_the_piece() {
        let name = |s: &str| {
            let mut raw = [0u8; TASK_COMM_LEN];
            let n = s.len().min(TASK_COMM_LEN - 1);
            raw[..n].copy_from_slice(&s.as_bytes()[..n]);
            raw
        };
        let mut names = Interner::default();
        assert_eq!(&**names.comm(&name("aデータベース")), "aデータベ");
        assert_eq!(&**names.comm(&name("数据库客户端")), "数据库客户");
        assert_eq!(&**names.comm(&name("python3")), "python3");
        // Not UTF-8 inside: said as such.
        assert_eq!(&**names.comm(&[b'a', 0xff, b'b', 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]), "a\u{fffd}b");
    }

    #[test]
    fn comms_are_named_past_the_recent_ones() {
        let mut names = Interner::default();
        let comm = |name: &str| {
            let mut c = [0u8; TASK_COMM_LEN];
            c[..name.len()].copy_from_slice(name.as_bytes());
            c
        };
        // More names than are kept as recent, in turn, twice; then bytes that are not UTF-8.
        let all = ["a", "bb", "ccc", "dddd", "eeeee", "f\u{e9}"];
        for _ in 0..2 {
            for name in all {
                assert_eq!(&**names.comm(&comm(name)), name);
            }
        }
        assert_eq!(&**names.comm(&[0xff; TASK_COMM_LEN]), "\u{fffd}".repeat(TASK_COMM_LEN));
        let bb = names.comm(&comm("bb")).clone();
        assert!(Arc::ptr_eq(&bb, &names.get("bb")), "one copy of each name");
    }

    #[test]
    fn json_has_the_documented_fields() {
        let e = decode(&raw(), Clock::fixed(0)).unwrap();
        let v = serde_json::to_value(&e).unwrap();
        for key in [
            "ts",
            "role",
            "outcome",
            "family",
            "saddr",
            "sport",
            "daddr",
            "dport",
            "netns",
            "pid",
            "comm",
            "syn_data_bytes",
            "cookie_len",
            "retransmits",
            "handshake_us",
            "stall_us",
        ] {
            assert!(v.get(key).is_some(), "missing {key}");
        }
        assert_eq!(v["outcome"], "syn_retransmitted");
        assert_eq!(v["role"], "client");
        assert_eq!(v["saddr"], "198.18.0.1");
    }

    #[test]
    fn timestamps_print_as_recorded() {
        let canonical = "2024-02-29T23:59:59.000000001Z";
        let ts = Timestamp::parse(canonical).unwrap();
        assert_eq!(ts, Timestamp::from_unix_ns(1_709_251_199_000_000_001), "no text kept when it is ours");
        assert_eq!((ts.to_string(), ts.millis()), (canonical.into(), "2024-02-29 23:59:59.000".into()));
        // A recording's shorter text is printed back as it was written.
        let short = Timestamp::parse("2024-02-29T23:59:59.5Z").unwrap();
        assert_eq!(short.unix_ns(), 1_709_251_199_500_000_000);
        assert_eq!(
            (short.to_string(), short.millis()),
            ("2024-02-29T23:59:59.5Z".into(), "2024-02-29 23:59:59.5Z".into())
        );
        assert_eq!(serde_json::to_string(&short).unwrap(), r#""2024-02-29T23:59:59.5Z""#);
        let bad = serde_json::from_str::<Timestamp>(r#""x0""#).unwrap_err().to_string();
        assert!(bad.contains(r#"bad time "x0""#), "{bad}");
    }

    #[test]
    fn rfc3339_known_dates() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000000000Z");
        assert_eq!(rfc3339(1_709_251_199_000_000_001), "2024-02-29T23:59:59.000000001Z");
    }
}
