//! Wire types shared by the kernel programs and the CLI.
//!
//! Everything here is `#[repr(C)]` with explicit widths and explicit padding, so the
//! byte layout the eBPF program writes is exactly the one userspace reads. A role or an
//! outcome is declared once, here, as a `#[repr(u8)]` enum: the kernel writes
//! `Outcome::Accepted as u8`, userspace reads it back with [`Outcome::from_u8`].
#![no_std]

mod counts;
mod kernel_layout;
pub mod tcp_options;

pub use counts::{handshake_bucket, CountKey, Counts, HANDSHAKE_BOUNDS_NS, HANDSHAKE_BUCKETS};
pub use kernel_layout::{Field, FieldSpec, KernelLayout, Shape};

pub const TASK_COMM_LEN: usize = 16;

/// Which end of the connection an event describes. Numbers are part of the wire format.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "user", derive(serde::Serialize, serde::Deserialize), serde(rename_all = "snake_case"))]
pub enum Role {
    Client = 1,
    Server = 2,
}

impl Role {
    pub const ALL: [Role; 2] = [Role::Client, Role::Server];

    pub const fn from_u8(v: u8) -> Option<Role> {
        match v {
            1 => Some(Role::Client),
            2 => Some(Role::Server),
            _ => None,
        }
    }

    pub const fn name(self) -> &'static str {
        match self {
            Role::Client => "client",
            Role::Server => "server",
        }
    }
}

/// What happened to one TFO connection. Numbers are part of the wire format (events,
/// counter keys): never renumber; a new outcome takes the next number.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "user", derive(serde::Serialize, serde::Deserialize), serde(rename_all = "snake_case"))]
pub enum Outcome {
    /// Client: SYN with an empty TFO option (no cookie yet). Server: such a SYN arrived.
    CookieRequested = 1,
    /// Client: the SYN-ACK acknowledged the SYN's data. Server: a child was created from SYN-data.
    Accepted = 2,
    /// Client: the SYN-ACK acknowledged only the SYN, without a SYN timeout.
    DataNotAcked = 3,
    /// Client: the TFO SYN (data or cookie request) timed out and a plain SYN was resent.
    SynRetransmitted = 4,
    /// Server: the SYN carried a cookie that did not validate (TcpExtTCPFastOpenPassiveFail).
    CookieInvalid = 5,
    /// Server: the cookie matched the backup key (TcpExtTCPFastOpenPassiveAltKey).
    AcceptedAltKey = 6,
    /// Server: the listener's TFO queue was full (TcpExtTCPFastOpenListenOverflow).
    QueueOverflow = 7,
    /// Server: a cookie or data arrived where the listener or namespace does not take TFO.
    ListenerDisabled = 8,
    /// Client: a TFO connection that never completed (SYN_SENT straight to CLOSE).
    ConnectFailed = 9,
    /// Client: TFO was asked for but the SYN carried no TFO option (e.g. active TFO disabled
    /// after a blackhole was detected, `tcp_fastopen_active_should_disable`).
    NotAttempted = 10,
    /// Client: blackhole detection paused active TFO in this namespace
    /// (tcp_fastopen_active_disable, TcpExtTCPFastOpenBlackhole).
    ActiveDisabled = 11,
    /// Server: a TFO child (in SYN_RECV) retransmitted its SYN-ACK (tcp:tcp_retransmit_synack).
    SynackRetransmitted = 12,
    /// Client: a SYN-ACK brought a cookie, now cached for this destination
    /// (tcp_fastopen_cache_set, as `ip tcp_metrics` then shows it).
    CookieReceived = 13,
    /// Client: the SYN carried a cached cookie but no data (a zero-length sendto with
    /// MSG_FASTOPEN, as a client that reads before it writes makes): TFO gains nothing
    /// there. The kernel moves no TFO counter on the client (tcp_rcv_fastopen_synack
    /// judges only `syn_data`); the server makes a TFO child (TcpExtTCPFastOpenPassive).
    CookieSentNoData = 14,
    /// Server: SYN-data arrived without a TFO option at a listener that takes TFO only with
    /// a cookie (tcp_try_fastopen: `foc->len` -1, no cookie-less mode): a client in
    /// no-cookie mode (`net.ipv4.tcp_fastopen` 0x4, a route's `fastopen_no_cookie`,
    /// TCP_FASTOPEN_NO_COOKIE), or the option stripped on the way in. The data waits for
    /// the handshake; no server counter moves (the client counts ActiveFail).
    DataWithoutCookie = 15,
}

impl Outcome {
    /// Every outcome, in wire order.
    pub const ALL: [Outcome; 15] = [
        Outcome::CookieRequested,
        Outcome::Accepted,
        Outcome::DataNotAcked,
        Outcome::SynRetransmitted,
        Outcome::CookieInvalid,
        Outcome::AcceptedAltKey,
        Outcome::QueueOverflow,
        Outcome::ListenerDisabled,
        Outcome::ConnectFailed,
        Outcome::NotAttempted,
        Outcome::ActiveDisabled,
        Outcome::SynackRetransmitted,
        Outcome::CookieReceived,
        Outcome::CookieSentNoData,
        Outcome::DataWithoutCookie,
    ];

    pub const fn from_u8(v: u8) -> Option<Outcome> {
        if v == 0 || v as usize > Outcome::ALL.len() {
            return None;
        }
        Some(Outcome::ALL[v as usize - 1])
    }

    pub const fn name(self) -> &'static str {
        match self {
            Outcome::CookieRequested => "cookie_requested",
            Outcome::Accepted => "accepted",
            Outcome::DataNotAcked => "data_not_acked",
            Outcome::SynRetransmitted => "syn_retransmitted",
            Outcome::CookieInvalid => "cookie_invalid",
            Outcome::AcceptedAltKey => "accepted_alt_key",
            Outcome::QueueOverflow => "queue_overflow",
            Outcome::ListenerDisabled => "listener_disabled",
            Outcome::ConnectFailed => "connect_failed",
            Outcome::NotAttempted => "not_attempted",
            Outcome::ActiveDisabled => "active_disabled",
            Outcome::SynackRetransmitted => "synack_retransmitted",
            Outcome::CookieReceived => "cookie_received",
            Outcome::CookieSentNoData => "cookie_sent_no_data",
            Outcome::DataWithoutCookie => "data_without_cookie",
        }
    }

    /// Whether the event is the one that ends a connection's TFO story, so that counting
    /// these events counts connections: the one meaning of "a connection" every view
    /// (`top`'s ATTEMPTS, `stalls`, `report`, `export`) and test counts with. Every outcome
    /// but three told alongside a connection that has its own outcome event:
    /// `synack_retransmitted` (per SYN-ACK resent by a server child), `cookie_received` (per
    /// SYN-ACK that brought a cookie) and `active_disabled` (blackhole detection, decided
    /// while a connection that gets its own outcome times out).
    pub const fn ends_connection(self) -> bool {
        !matches!(self, Outcome::SynackRetransmitted | Outcome::CookieReceived | Outcome::ActiveDisabled)
    }

    /// Its place in [`Outcome::ALL`] (its wire number less one): what per-outcome arrays
    /// are indexed by.
    pub const fn index(self) -> usize {
        self as usize - 1
    }
}

/// What the SYN-ACK of a refused SYN-data said (`data_not_acked`, or a `syn_retransmitted`
/// whose SYN carried data), which tells why the server did not take the data. Numbers are
/// part of the wire format.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "user", derive(serde::Serialize, serde::Deserialize), serde(rename_all = "snake_case"))]
pub enum Cause {
    /// Not seen, or not told apart (a backend that cannot see the SYN-ACK and could not
    /// read the client's cookie cache; a recording made before causes were kept).
    Unknown = 0,
    /// The SYN-ACK brought another cookie: the server checked the cookie and refused it
    /// (its key changed, or the client's address as the server sees it: NAT).
    NewCookie = 1,
    /// The SYN-ACK carried no TFO option: the server does not do TFO (off, a listener
    /// without TCP_FASTOPEN, its TFO queue full, syncookies) or the option was stripped.
    NoTfoOption = 2,
    /// The SYN-ACK brought back the cookie the SYN carried: the server took the cookie but
    /// not the data (it could not make the connection's socket).
    SameCookie = 3,
    /// The SYN carried its data without a TFO option: the client is in no-cookie mode
    /// (tcp_fastopen_cookie_check(): `net.ipv4.tcp_fastopen` 0x4, the route's
    /// `fastopen_no_cookie` or TCP_FASTOPEN_NO_COOKIE; the SYN's option is left out,
    /// `syn_fastopen` 0), and a server that needs a cookie takes no data without one.
    NoCookieSent = 4,
}

impl Cause {
    pub const ALL: [Cause; 5] =
        [Cause::Unknown, Cause::NewCookie, Cause::NoTfoOption, Cause::SameCookie, Cause::NoCookieSent];

    pub const fn from_u8(v: u8) -> Cause {
        match v {
            1 => Cause::NewCookie,
            2 => Cause::NoTfoOption,
            3 => Cause::SameCookie,
            4 => Cause::NoCookieSent,
            _ => Cause::Unknown,
        }
    }

    /// The JSON value and the `cause` label of `export`.
    pub const fn name(self) -> &'static str {
        match self {
            Cause::Unknown => "unknown",
            Cause::NewCookie => "new_cookie",
            Cause::NoTfoOption => "no_tfo_option",
            Cause::SameCookie => "same_cookie",
            Cause::NoCookieSent => "no_cookie_sent",
        }
    }
}

/// A short keyed hash of a TFO cookie (its 16 bytes as the kernel keeps them, as two
/// little-endian words: zero past the cookie's length), for comparing and counting cookies
/// without ever holding one: SipHash-1-3 under a key made per tracer run (never recorded),
/// cut to 32 bits, never 0 (0 is "no cookie"). The length is not hashed: the cookie a SYN
/// carried is read back from `fastopen_req` after tcp_send_syn_data() set its length to
/// -1, its bytes left as they were. The kernel programs and userspace (the cookie cache
/// read over netlink) hash alike, so their hashes compare within one run.
#[inline(always)]
pub const fn cookie_hash(key: [u64; 2], val: [u64; 2]) -> u32 {
    let mut v = [
        key[0] ^ 0x736f_6d65_7073_6575,
        key[1] ^ 0x646f_7261_6e64_6f6d,
        key[0] ^ 0x6c79_6765_6e65_7261,
        key[1] ^ 0x7465_6462_7974_6573,
    ];
    // The 16-byte message: two whole words, then SipHash's final word (the message's
    // length in its top byte).
    let words = [val[0], val[1], 16u64 << 56];
    let mut i = 0;
    while i < 3 {
        v[3] ^= words[i];
        v = sip_round(v);
        v[0] ^= words[i];
        i += 1;
    }
    v[2] ^= 0xff;
    v = sip_round(sip_round(sip_round(v)));
    let h = v[0] ^ v[1] ^ v[2] ^ v[3];
    let h = (h ^ (h >> 32)) as u32;
    if h == 0 {
        1
    } else {
        h
    }
}

#[inline(always)]
const fn sip_round(mut v: [u64; 4]) -> [u64; 4] {
    v[0] = v[0].wrapping_add(v[1]);
    v[1] = v[1].rotate_left(13) ^ v[0];
    v[0] = v[0].rotate_left(32);
    v[2] = v[2].wrapping_add(v[3]);
    v[3] = v[3].rotate_left(16) ^ v[2];
    v[0] = v[0].wrapping_add(v[3]);
    v[3] = v[3].rotate_left(21) ^ v[0];
    v[2] = v[2].wrapping_add(v[1]);
    v[1] = v[1].rotate_left(17) ^ v[2];
    v[2] = v[2].rotate_left(32);
    v
}

/// Bits of [`TfoEvent::flags`].
pub mod flags {
    /// `cookie_len` holds a length the probe really saw.
    pub const COOKIE_LEN_KNOWN: u8 = 1 << 0;
    /// Server: a cookie went back in the SYN-ACK.
    pub const COOKIE_ISSUED: u8 = 1 << 1;
    /// The SYN used the experimental option (kind 254, magic 0xF989).
    pub const EXP_OPTION: u8 = 1 << 2;
    /// `pid`/`comm`/`thread` were captured in the owning process's context (not guessed
    /// later).
    pub const PID_KNOWN: u8 = 1 << 3;
    /// `start_ns` is known, so `handshake` can be computed.
    pub const START_KNOWN: u8 = 1 << 4;
    /// `queue_len`/`queue_max` hold the listener's TFO queue as the probe saw it.
    pub const QUEUE_KNOWN: u8 = 1 << 5;
    /// `saved_us` holds the round trip an `accepted` connection saved, as the kernel
    /// sampled it for that connection.
    pub const SAVED_KNOWN: u8 = 1 << 6;
}

pub const FAMILY_V4: u8 = 4;
pub const FAMILY_V6: u8 = 6;

/// One event per connection and outcome, written to the `EVENTS` ring buffer.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TfoEvent {
    /// CLOCK_MONOTONIC ns (`bpf_ktime_get_ns`) when the outcome became known.
    pub ts_ns: u64,
    /// CLOCK_MONOTONIC ns when the SYN went out (client) or the child was created (server).
    pub start_ns: u64,
    /// Time lost to SYN timeouts: last SYN retransmission minus the first SYN.
    pub stall_ns: u64,
    /// Source and destination address; IPv4 in the first four bytes, network order.
    pub saddr: [u8; 16],
    pub daddr: [u8; 16],
    /// Network namespace inode number (`/proc/PID/ns/net`).
    pub netns: u32,
    /// Process (tgid) that opened the connection or owns the listener; 0 when unknown.
    pub pid: u32,
    pub syn_data_bytes: u32,
    pub retransmits: u32,
    /// Ports in host order.
    pub sport: u16,
    pub dport: u16,
    pub family: u8,
    /// A [`Role`].
    pub role: u8,
    /// An [`Outcome`].
    pub outcome: u8,
    pub flags: u8,
    pub cookie_len: u8,
    /// A refused SYN-data (`data_not_acked`, a `syn_retransmitted` that carried data): what
    /// its SYN-ACK said, a [`Cause`], where the kernel could tell (fentry/kprobe backends);
    /// `Cause::Unknown` (0) elsewhere, and where userspace is left to tell it.
    pub cause: u8,
    pub _pad: [u8; 2],
    /// `accepted` only, where [`flags::SAVED_KNOWN`]: the round trip TFO saved, in µs.
    /// Client: the SYN -> SYN-ACK round trip the kernel sampled for this connection
    /// (tcp_ack() on the SYN-ACK set `srtt_us` from it just before ESTABLISHED): the
    /// request travelled with the SYN instead of one round trip later. Server: the
    /// child's first round-trip sample as it leaves SYN_RECV (tcp_synack_rtt_meas, from
    /// the SYN-ACK sent as the SYN-data arrived to the final ACK): how long the data sat
    /// at the listener ahead of the handshake's end.
    pub saved_us: u32,
    /// The process's name: its thread group leader's comm (`/proc/PID/comm`), whichever
    /// of its threads connected (client) or called listen() (server).
    pub comm: [u8; TASK_COMM_LEN],
    /// Server: the listener's TFO queue (fastopenq.qlen / max_qlen) when the SYN arrived;
    /// 0/0 where the backend does not see it.
    pub queue_len: u32,
    pub queue_max: u32,
    /// cgroup v2 id (the cgroup directory's inode) of `pid` when it connected (client) or
    /// called listen() (server); 0 when unknown.
    pub cgroup_id: u64,
    /// The name of the thread that connected or called listen() (bpf_get_current_comm),
    /// where `comm` is known: the same as `comm` in a single-threaded process, a worker's
    /// name (`connworker`) in others.
    pub thread: [u8; TASK_COMM_LEN],
    /// [`cookie_hash`] of the cookie the event is about, never the cookie: for
    /// `cookie_received` the one cached, for a refused SYN-data the one its SYN-ACK
    /// brought; 0 for none. After the fields of the first version, so that those keep
    /// their offsets.
    pub cookie_hash: u32,
    /// A refused SYN-data: [`cookie_hash`] of the cookie its SYN carried, where the
    /// programs saw it (at the exit of tcp_fastopen_cookie_check, or in a blocking
    /// socket's `fastopen_req` at the SYN-ACK); 0 where they did not.
    pub sent_cookie_hash: u32,
    /// Backends that do not see the SYN-ACK's cookie (tracepoints), client events whose
    /// SYN-ACK may have written the destination's cookie cache: [`SynackSeq::seq`] of the
    /// destination's slot when the SYN was sent (`syn_seq`) and as this SYN-ACK counted
    /// itself (`synack_seq`); 0 elsewhere. See [`SynackSeq`].
    pub syn_seq: u32,
    pub synack_seq: u32,
    /// With `synack_seq`: microseconds since the slot's previous SYN-ACK, 0 where another
    /// SYN-ACK counted itself in the same slot while this one did, `u32::MAX` where it had
    /// none: a SYN-ACK close behind another may have its cookie cached before or after
    /// that one's, so a read of the cache cannot tell which.
    pub synack_gap_us: u32,
    /// Spelled out: the record stays a whole number of 8-byte words.
    pub _pad2: u32,
    /// `not_attempted` and `active_disabled`: how long ago, in ms, the namespace's last pause
    /// of active TFO began, from the kernel's own stamp (`tfo_active_disable_stamp`, in
    /// jiffies); [`PAUSE_AGE_UNKNOWN`] where it could not be read (or no pause: see
    /// `pause_times`).
    pub pause_age_ms: u32,
    /// The same events: the namespace's `tfo_active_disable_times` (the pauses so far, which
    /// set the last one's length: tcp_fastopen_active_should_disable()), capped; 0 none or
    /// unknown.
    pub pause_times: u16,
    /// `connect_failed`: the error the connect ended with (an errno: ECONNREFUSED for a
    /// reset, ETIMEDOUT for SYNs that all timed out, an ICMP error's), where the backend
    /// read it; 0 unknown.
    pub error: u8,
    /// `active_disabled`: what tripped it, a [`trip`] value.
    pub pause_trip: u8,
}

/// [`TfoEvent::pause_age_ms`] unknown.
pub const PAUSE_AGE_UNKNOWN: u32 = u32::MAX;

/// What tripped blackhole detection ([`TfoEvent::pause_trip`]).
pub mod trip {
    /// Not told.
    pub const UNKNOWN: u8 = 0;
    /// tcp_fastopen_active_detect_blackhole(): a TFO socket's third timeout in a row, or
    /// one that gave up before it.
    pub const TIMEOUTS: u8 = 1;
    /// tcp_fastopen_active_disable() called elsewhere: the peer's FIN or RST arrived out of
    /// order on a TFO client socket before any data (its data lost on the path:
    /// tcp_fastopen_active_disable_ofo_check(), tcp_validate_incoming(),
    /// tcp_rcv_state_process()).
    pub const OUT_OF_ORDER_END: u8 = 2;
}

/// The number of slots of the kernel's per-destination count of SYN-ACKs ([`SynackSeq`]).
pub const SYNACK_SEQ_SLOTS: u32 = 8192;

/// Where the client's TFO SYN-ACKs toward a destination are counted, on the backends that
/// do not see their cookie (the tracepoints): the destination's cookie cache
/// (tcp_metrics, tcp_fastopen_cache_set) is read by userspace after the event, and the
/// count tells whether another SYN-ACK wrote it in between (the read then says nothing of
/// this one), and which SYN-ACKs came between a connection's SYN and its own. Every TFO
/// SYN-ACK that can write the cache and is not an accepted SYN-data counts (a refused
/// SYN-data, a cookie request's, a cookie sent without data): those are the rare ones,
/// so the slot's line is written rarely and read at every TFO connect. A slot is one
/// destination address (whatever the namespace or the source address): destinations
/// that share one only make a read useless more often, never wrong.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SynackSeq {
    /// SYN-ACKs counted so far.
    pub seq: u64,
    /// When the last one was counted (CLOCK_MONOTONIC ns, the packet's time).
    pub last_ns: u64,
}

/// The slot of [`SynackSeq`] a destination address is counted in: `addr` is the address
/// as the programs load it (IPv4: its 4 bytes as a little-endian word; IPv6: two
/// little-endian words), an IPv4-mapped IPv6 address counting as its IPv4 one (tcp_metrics
/// keeps those under the IPv4 address).
#[inline(always)]
pub const fn synack_slot(family: u8, addr: [u64; 2]) -> u32 {
    let x = if family == FAMILY_V4 {
        addr[0]
    } else if addr[0] == 0 && addr[1] as u32 == 0xffff_0000 {
        addr[1] >> 32 // ::ffff:a.b.c.d: a.b.c.d, as the IPv4 word
    } else {
        addr[0] ^ addr[1].rotate_left(29)
    };
    (x.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - SYNACK_SEQ_SLOTS.trailing_zeros())) as u32
}

/// A comm's 16 bytes, as two little-endian words, as bpf_get_current_comm gives them: zero
/// from the first NUL on. A task's `comm` array itself may hold an older, longer name's
/// bytes past its NUL (5.10's __set_task_comm copies with strlcpy, which does not pad), and
/// the programs compare names as two words. Branch-light, for the programs' verifier.
#[inline(always)]
pub fn cleared_after_nul(w: [u64; 2]) -> [u64; 2] {
    // The lowest byte that is zero (the first in memory), as its high bit: the bits above
    // it may be wrong (a borrow), the lowest set one is not.
    let first_nul = |v: u64| {
        let zeros = v.wrapping_sub(0x0101_0101_0101_0101) & !v & 0x8080_8080_8080_8080;
        zeros & zeros.wrapping_neg()
    };
    let keep_below = |v: u64, nul: u64| if nul == 0 { v } else { v & ((nul >> 7) - 1) };
    let nul0 = first_nul(w[0]);
    if nul0 != 0 {
        return [keep_below(w[0], nul0), 0];
    }
    [w[0], keep_below(w[1], first_nul(w[1]))]
}

impl TfoEvent {
    /// Every field 0: what the kernel's programs start an event from, and tests too.
    pub const fn zeroed() -> TfoEvent {
        // SAFETY: TfoEvent is plain integers and byte arrays; all zero is a valid value.
        unsafe { core::mem::zeroed() }
    }
}

/// Indexes of the per-CPU `COUNTERS` array: the tracer's own health.
pub mod counter {
    /// Events dropped because the ring buffer was full (their counts are still in `COUNTS`).
    pub const EVENTS_LOST: u32 = 0;
    /// TFO connects whose state could not be recorded (their event lacks pid and timing).
    pub const CONN_STATE_FAILED: u32 = 1;
    /// Outcomes not counted in `COUNTS` because its table of namespaces was full.
    pub const COUNTS_FULL: u32 = 2;
    /// Cgroup records dropped because the `CGROUP_EVENTS` ring buffer was full (userspace
    /// then names those cgroups by walking the hierarchy, as far as they still exist).
    pub const CGROUP_EVENTS_LOST: u32 = 3;
    pub const COUNT: u32 = 4;
}

/// The longest cgroup path a [`CgroupEvent`] carries, with its NUL (the kernel's own
/// buffer for these tracepoints holds 1024: TRACE_CGROUP_PATH_LEN). Kubernetes' deepest
/// systemd form is under 200 bytes; a longer path arrives cut and is looked up on disk.
pub const CGROUP_PATH_LEN: usize = 512;

/// What happened to a cgroup (`CgroupEvent::kind`).
pub mod cgroup_event {
    /// `cgroup:cgroup_mkdir`: the cgroup exists from now on.
    pub const MADE: u32 = 1;
    /// `cgroup:cgroup_rmdir`: the cgroup is gone (events may still name it: a socket
    /// outlives its process).
    pub const REMOVED: u32 = 2;
}

/// One cgroup v2 made or removed, written to the `CGROUP_EVENTS` ring buffer: the
/// containers' cgroups are learnt as they come, not by walking the hierarchy after them.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CgroupEvent {
    /// The cgroup's id: its kernfs node id, what bpf_get_current_cgroup_id() returns and
    /// the inode of its directory.
    pub id: u64,
    /// [`cgroup_event`].
    pub kind: u32,
    /// Bytes of `path` before its NUL; `CGROUP_PATH_LEN - 1` may be a cut path.
    pub path_len: u32,
    /// Below the v2 root: `/system.slice/docker-<id>.scope` (NUL-terminated).
    pub path: [u8; CGROUP_PATH_LEN],
}

/// Global flags userspace sets before load (read-only data: the verifier prunes the
/// branches a backend does not take).
pub mod config {
    /// The state-change hook reports server `accepted` (tracepoint backends only: the richer
    /// backends report every server outcome from tcp_try_fastopen instead).
    pub const SERVER_FROM_STATE: u32 = 1 << 0;
    /// tcp_fastopen_cache_set is hooked: a client connection's state is kept past
    /// ESTABLISHED until the SYN-ACK's cookie is cached, so `cookie_received` names its process.
    pub const COOKIE_FROM_CACHE_SET: u32 = 1 << 1;
    /// Count outcomes (`COUNTS`), and of the events send only refused SYN-data
    /// (`data_not_acked`), whose cause userspace tells: an exporter without
    /// per-destination series needs no other.
    pub const REFUSAL_EVENTS_ONLY: u32 = 1 << 2;
}

/// Key of the kernel-side listener table: who called listen() on which port, of which
/// family. `0.0.0.0:80` and an IPv6-only `[::]:80` are two listeners, often of two
/// processes; a child socket has its listener's family (sk_clone_lock copies it).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ListenerKey {
    pub netns: u32,
    pub port: u16,
    /// [`FAMILY_V4`] or [`FAMILY_V6`].
    pub family: u8,
    pub _pad: u8,
}

impl ListenerKey {
    pub const fn new(netns: u32, port: u16, family: u8) -> ListenerKey {
        ListenerKey { netns, port, family, _pad: 0 }
    }
}

/// The process that owns a listener.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcInfo {
    pub pid: u32,
    /// 1 when the owner passed the process filters (pid, comm, cgroup) at listen().
    pub selected: u32,
    /// The process's name, and its thread's that called listen() ([`TfoEvent::thread`]).
    pub comm: [u8; TASK_COMM_LEN],
    pub cgroup_id: u64,
    pub thread: [u8; TASK_COMM_LEN],
}

/// The call instruction the eBPF object carries where it casts a socket to `struct
/// tcp_sock` (`kernel::Direct::tcp_sock`): a helper number no kernel has, which userspace
/// rewrites before load into the kfunc bpf_rdonly_cast (6.2+; the verifier turns it into a
/// register move) or, where that kfunc is missing, the helper bpf_skc_to_tcp_sock.
/// (aya has no kfunc relocations: this placeholder is ours.)
pub const TCP_SOCK_CAST_CALL: i32 = 0x7f7c_0001;

/// How many values each kind of filter takes (`--pid` given more often is a usage error).
pub const FILTER_SLOTS: usize = 8;

/// An address prefix, for `--daddr` / `--saddr`: `addr` masked to `bits`, IPv4 in the
/// first four bytes as events hold it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cidr {
    pub addr: [u8; 16],
    pub family: u8,
    pub bits: u8,
    pub _pad: [u8; 6],
}

/// What to trace, decided in the kernel (userspace sets it before load, in read-only data,
/// so the verifier drops the checks of every kind of filter that is empty). Values of one
/// kind OR together, kinds AND together. Process filters (pid, comm, cgroup) are decided
/// where the process is known: at connect() for a client, at listen() for a server;
/// connection filters (namespace, server port, addresses) and role and outcome at the
/// outcome. A connection filtered out gets no state, no event and no count.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Filter {
    pub pids: [u32; FILTER_SLOTS],
    /// A process's name or its thread's (`--comm` matches either).
    pub comms: [[u8; TASK_COMM_LEN]; FILTER_SLOTS],
    pub netns: [u32; FILTER_SLOTS],
    /// The server's port (where the connection goes), host order.
    pub ports: [u16; FILTER_SLOTS],
    /// The server's address (where the connection goes).
    pub daddrs: [Cidr; FILTER_SLOTS],
    /// The client's address.
    pub saddrs: [Cidr; FILTER_SLOTS],
    pub n_pids: u8,
    pub n_comms: u8,
    /// cgroups (and their subtrees) in the `CGROUP_FILTER` map, slots 0..n.
    pub n_cgroups: u8,
    pub n_netns: u8,
    pub n_ports: u8,
    pub n_daddrs: u8,
    pub n_saddrs: u8,
    /// Bit `1 << role`; 0: every role.
    pub roles: u8,
    /// Bit `1 << outcome`; 0: every outcome.
    pub outcomes: u32,
    pub _pad: u32,
}

impl Filter {
    pub const fn none() -> Filter {
        // SAFETY: Filter is plain integers; all zero is "no filter".
        unsafe { core::mem::zeroed() }
    }

    /// Whether any process filter is set (pid, comm, cgroup).
    pub const fn by_process(&self) -> bool {
        self.n_pids > 0 || self.n_comms > 0 || self.n_cgroups > 0
    }
}

#[cfg(feature = "user")]
mod pod {
    // SAFETY: all of these are repr(C), made only of integers and byte arrays, with
    // every padding byte spelled out as a field, so any bit pattern is a valid value.
    unsafe impl aya::Pod for super::TfoEvent {}
    // SAFETY: as for TfoEvent.
    unsafe impl aya::Pod for super::CgroupEvent {}
    // SAFETY: as for TfoEvent.
    unsafe impl aya::Pod for super::Field {}
    // SAFETY: as for TfoEvent.
    unsafe impl aya::Pod for super::KernelLayout {}
    // SAFETY: as for TfoEvent.
    unsafe impl aya::Pod for super::ListenerKey {}
    // SAFETY: as for TfoEvent.
    unsafe impl aya::Pod for super::ProcInfo {}
    // SAFETY: as for TfoEvent.
    unsafe impl aya::Pod for super::CountKey {}
    // SAFETY: as for TfoEvent.
    unsafe impl aya::Pod for super::Counts {}
    // SAFETY: as for TfoEvent.
    unsafe impl aya::Pod for super::Filter {}
    // SAFETY: as for TfoEvent.
    unsafe impl aya::Pod for super::Cidr {}
    // SAFETY: as for TfoEvent.
    unsafe impl aya::Pod for super::SynackSeq {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::mem::size_of;

    #[test]
    fn wire_sizes_have_no_hidden_padding() {
        assert_eq!(size_of::<TfoEvent>(), 168);
        assert_eq!(size_of::<SynackSeq>(), 16);
        assert_eq!(size_of::<CgroupEvent>(), 16 + CGROUP_PATH_LEN);
        assert_eq!(size_of::<Field>(), 8);
        assert_eq!(size_of::<ListenerKey>(), 8);
        assert_eq!(size_of::<ProcInfo>(), 48);
        assert_eq!(size_of::<Cidr>(), 24);
        assert_eq!(size_of::<Filter>(), 32 + 128 + 32 + 16 + 192 + 192 + 8 + 8);
        assert_eq!(size_of::<CountKey>(), 8);
        assert_eq!(size_of::<Counts>(), 8 * (9 + HANDSHAKE_BUCKETS));
    }

    /// Each field of `KernelLayout` is made from its own spec, in the struct's order: the
    /// table of kernel_structs! is the only place a member is declared.
    #[test]
    fn every_layout_field_has_its_spec_in_order() {
        let n = KernelLayout::FIELDS.len();
        assert_eq!(size_of::<KernelLayout>(), n * size_of::<Field>(), "one Field per spec");
        // Each field gets its spec's index as its offset...
        let mut i = 0;
        let layout = KernelLayout::try_from_specs::<()>(|_| {
            i += 1;
            Ok(Field { off: i - 1, ..Field::default() })
        })
        .unwrap();
        // ... and the field named like a spec holds that spec's index.
        assert_eq!(layout.skc_family.off, 0);
        assert_eq!(KernelLayout::FIELDS[layout.fastopen_req.off as usize].name, "fastopen_req");
        assert_eq!(KernelLayout::FIELDS[layout.task_comm.off as usize].name, "task_comm");
        assert_eq!(layout.task_comm.off as usize, n - 1);
        for (j, spec) in KernelLayout::FIELDS.iter().enumerate() {
            assert!(KernelLayout::FIELDS[..j].iter().all(|s| s.name != spec.name), "{} twice", spec.name);
        }
        // Widths come from the declared types.
        let spec = |name: &str| *KernelLayout::FIELDS.iter().find(|s| s.name == name).unwrap();
        assert_eq!(spec("skc_state").shape, Shape::Bytes(1));
        assert_eq!(spec("skc_family").shape, Shape::Bytes(2));
        assert_eq!(spec("total_retrans").shape, Shape::Bytes(4));
        assert_eq!(spec("skc_net").shape, Shape::Bytes(8));
        assert_eq!(spec("skc_v6_daddr").shape, Shape::Bytes(16));
        assert_eq!(spec("syn_data").shape, Shape::OneBit);
        assert_eq!(spec("foc_len").shape, Shape::Any);
        assert_eq!((spec("skc_family").strukt, spec("fastopen_req").strukt), ("sock_common", "tcp_sock"));
        assert!(spec("fastopen_req").required && !spec("net_cookie").required);
    }

    #[test]
    fn outcomes_and_roles_round_trip_their_wire_numbers() {
        for (i, o) in Outcome::ALL.iter().enumerate() {
            assert_eq!(*o as u8 as usize, i + 1, "{o:?} is numbered by its place in ALL");
            assert_eq!(Outcome::from_u8(*o as u8), Some(*o));
        }
        assert_eq!(Outcome::from_u8(0), None);
        assert_eq!(Outcome::from_u8(Outcome::ALL.len() as u8 + 1), None);
        for r in Role::ALL {
            assert_eq!(Role::from_u8(r as u8), Some(r));
        }
        assert_eq!(Role::from_u8(0), None);
        for o in Outcome::ALL {
            assert_eq!(Outcome::ALL[o.index()], o);
        }
    }

    #[test]
    fn a_comm_is_cleared_after_its_nul() {
        let words = |b: &[u8; 16]| {
            [u64::from_le_bytes(b[..8].try_into().unwrap()), u64::from_le_bytes(b[8..].try_into().unwrap())]
        };
        let name = |n: &[u8]| {
            let mut b = [0u8; 16];
            b[..n.len()].copy_from_slice(n);
            b
        };
        // A short name over a longer one's leftovers (strlcpy), at every length.
        for len in 0..16 {
            let mut stale = *b"abcdefghijklmnop";
            stale[len] = 0;
            let mut want = [0u8; 16];
            want[..len].copy_from_slice(&stale[..len]);
            assert_eq!(cleared_after_nul(words(&stale)), words(&want), "{len}");
        }
        // Already clean, a 0x01 byte (the borrow's worst case) and a 0x80 one kept.
        for clean in [name(b"tfo-trace"), name(b"a\x01b"), name(b"\x80\x01\x01\x01\x01\x01\x01\x01\x01")] {
            assert_eq!(cleared_after_nul(words(&clean)), words(&clean));
        }
        let mut full = *b"abcdefghijklmnop";
        assert_eq!(cleared_after_nul(words(&full)), words(&full), "no NUL: all 16 bytes");
        full[9] = 0;
        full[10] = 0x01;
        assert_eq!(cleared_after_nul(words(&full)), words(&name(b"abcdefghi")));
    }

    #[test]
    fn cookie_hashes_tell_cookies_apart_under_one_key() {
        let key = [0x0123_4567_89ab_cdef, 0xfedc_ba98_7654_3210];
        let a = cookie_hash(key, [0x1122_3344_5566_7788, 0]);
        assert_eq!(a, cookie_hash(key, [0x1122_3344_5566_7788, 0]), "the same cookie, the same hash");
        assert_ne!(a, cookie_hash(key, [0x1122_3344_5566_7789, 0]));
        assert_ne!(a, cookie_hash(key, [0x1122_3344_5566_7788, 1]), "its second word counts");
        assert_ne!(a, cookie_hash([key[0], key[1] + 1], [0x1122_3344_5566_7788, 0]), "another run");
        for c in Cause::ALL {
            assert_eq!(Cause::from_u8(c as u8), c);
        }
    }

    #[test]
    fn an_ipv4_address_and_its_mapped_ipv6_form_share_a_slot() {
        let v4 = u32::from_le_bytes([198, 18, 0, 2]) as u64;
        let mapped = [0, 0xffff_0000 | (v4 << 32)];
        let slot = synack_slot(FAMILY_V4, [v4, 0]);
        assert_eq!(synack_slot(FAMILY_V6, mapped), slot);
        assert!(slot < SYNACK_SEQ_SLOTS);
        let other = synack_slot(FAMILY_V4, [u32::from_le_bytes([198, 18, 0, 3]) as u64, 0]);
        assert_ne!(other, slot, "neighbours spread");
        let v6 = [0x0000_0000_f007_00fd, 0x0200_0000_0000_0000];
        assert!(synack_slot(FAMILY_V6, v6) < SYNACK_SEQ_SLOTS);
    }

    #[test]
    fn handshake_buckets_split_at_the_initial_rto() {
        assert_eq!(handshake_bucket(0), 0);
        assert_eq!(handshake_bucket(500_000), 0);
        assert_eq!(handshake_bucket(500_001), 1);
        let one_rto = handshake_bucket(1_020_000_000);
        assert_eq!(HANDSHAKE_BOUNDS_NS[one_rto], 1_100_000_000);
        assert_eq!(HANDSHAKE_BOUNDS_NS[one_rto - 1], 900_000_000);
        assert_eq!(handshake_bucket(u64::MAX), HANDSHAKE_BUCKETS - 1);
    }
}
