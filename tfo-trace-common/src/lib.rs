//! Wire types shared by the kernel programs and the CLI.
//!
//! Everything here is `#[repr(C)]` with explicit widths and explicit padding, so the
//! byte layout the eBPF program writes is exactly the one userspace reads.
#![no_std]

pub const TASK_COMM_LEN: usize = 16;

/// Which end of the connection an event describes.
pub mod role {
    pub const CLIENT: u8 = 1;
    pub const SERVER: u8 = 2;
}

/// What happened to one TFO connection. Numbers are part of the wire format: never renumber.
pub mod outcome {
    /// Client: SYN with an empty TFO option (no cookie yet). Server: such a SYN arrived.
    pub const COOKIE_REQUESTED: u8 = 1;
    /// Client: the SYN-ACK acknowledged the SYN's data. Server: a child was created from SYN-data.
    pub const ACCEPTED: u8 = 2;
    /// Client: the SYN-ACK acknowledged only the SYN, without a SYN timeout.
    pub const DATA_NOT_ACKED: u8 = 3;
    /// Client: the TFO SYN (data or cookie request) timed out and a plain SYN was resent.
    pub const SYN_RETRANSMITTED: u8 = 4;
    /// Server: the SYN carried a cookie that did not validate (TcpExtTCPFastOpenPassiveFail).
    pub const COOKIE_INVALID: u8 = 5;
    /// Server: the cookie matched the backup key (TcpExtTCPFastOpenPassiveAltKey).
    pub const ACCEPTED_ALT_KEY: u8 = 6;
    /// Server: the listener's TFO queue was full (TcpExtTCPFastOpenListenOverflow).
    pub const QUEUE_OVERFLOW: u8 = 7;
    /// Server: a cookie or data arrived where the listener or namespace does not take TFO.
    pub const LISTENER_DISABLED: u8 = 8;
    /// Client: a TFO connection that never completed (SYN_SENT straight to CLOSE).
    pub const CONNECT_FAILED: u8 = 9;
    /// Client: TFO was asked for but the SYN carried no TFO option (e.g. active TFO disabled
    /// after a blackhole was detected, `tcp_fastopen_active_should_disable`).
    pub const NOT_ATTEMPTED: u8 = 10;
    /// Client: blackhole detection paused active TFO in this namespace
    /// (tcp_fastopen_active_disable, TcpExtTCPFastOpenBlackhole).
    pub const ACTIVE_DISABLED: u8 = 11;
    /// Server: a TFO child (in SYN_RECV) retransmitted its SYN-ACK (tcp:tcp_retransmit_synack).
    pub const SYNACK_RETRANSMITTED: u8 = 12;
    /// Client: a SYN-ACK brought a cookie, now cached for this destination
    /// (tcp_fastopen_cache_set, as `ip tcp_metrics` then shows it).
    pub const COOKIE_RECEIVED: u8 = 13;
}

/// Bits of [`TfoEvent::flags`].
pub mod flags {
    /// `cookie_len` holds a length the probe really saw.
    pub const COOKIE_LEN_KNOWN: u8 = 1 << 0;
    /// Server: a cookie went back in the SYN-ACK.
    pub const COOKIE_ISSUED: u8 = 1 << 1;
    /// The SYN used the experimental option (kind 254, magic 0xF989).
    pub const EXP_OPTION: u8 = 1 << 2;
    /// `pid`/`comm` were captured in the owning process's context (not guessed later).
    pub const PID_KNOWN: u8 = 1 << 3;
    /// `start_ns` is known, so `handshake` can be computed.
    pub const START_KNOWN: u8 = 1 << 4;
    /// `queue_len`/`queue_max` hold the listener's TFO queue as the probe saw it.
    pub const QUEUE_KNOWN: u8 = 1 << 5;
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
    pub role: u8,
    pub outcome: u8,
    pub flags: u8,
    pub cookie_len: u8,
    pub _pad: [u8; 7],
    pub comm: [u8; TASK_COMM_LEN],
    /// Server: the listener's TFO queue (fastopenq.qlen / max_qlen) when the SYN arrived;
    /// 0/0 where the backend does not see it.
    pub queue_len: u32,
    pub queue_max: u32,
}

/// Indexes of the per-CPU `COUNTERS` array.
pub mod counter {
    /// Events dropped because the ring buffer was full.
    pub const EVENTS_LOST: u32 = 0;
    /// TFO connects whose state could not be recorded (their event lacks pid and timing).
    pub const CONN_INSERT_FAILED: u32 = 1;
    pub const COUNT: u32 = 2;
}

/// Where a field lives inside a kernel struct, as found in the running kernel's BTF.
/// `bits == 0` means a whole field read by its natural size; otherwise a bitfield of
/// `bits` bits starting `shift` bits into the byte at `off`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Field {
    pub off: u32,
    pub shift: u8,
    pub bits: u8,
    /// 0 when this kernel has no such field (the program then treats it as absent).
    pub present: u8,
    pub _pad: u8,
}

/// Offsets of every kernel field the programs read. Filled in by userspace from
/// /sys/kernel/btf/vmlinux before load: Rust eBPF cannot emit CO-RE relocations, and
/// offsets generated for one kernel would be wrong on the next.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KernelLayout {
    // struct sock_common / struct sock
    pub skc_family: Field,
    pub skc_state: Field,
    pub skc_num: Field,
    pub skc_dport: Field,
    pub skc_rcv_saddr: Field,
    pub skc_daddr: Field,
    pub skc_v6_rcv_saddr: Field,
    pub skc_v6_daddr: Field,
    pub skc_net: Field,
    pub sk_protocol: Field,
    pub tcp_rtx_queue: Field,
    // struct net -> ns.inum
    pub net_ns_inum: Field,
    // struct tcp_sock
    pub fastopen_req: Field,
    pub total_retrans: Field,
    pub bytes_sent: Field,
    pub bytes_received: Field,
    pub fastopen_connect: Field,
    pub syn_data: Field,
    pub syn_fastopen: Field,
    pub syn_fastopen_exp: Field,
    pub syn_data_acked: Field,
    pub syn_fastopen_child: Field,
    // Server hooks on tcp_try_fastopen (fentry/kprobe backends)
    /// struct tcp_fastopen_cookie: len (s8), exp (bool)
    pub foc_len: Field,
    pub foc_exp: Field,
    /// struct sk_buff: cb[], where struct tcp_skb_cb { seq, end_seq, ... } lives
    pub skb_cb: Field,
    pub tcb_seq: Field,
    pub tcb_end_seq: Field,
    /// Listener's icsk_accept_queue.fastopenq.{qlen, max_qlen}
    pub fastopenq_qlen: Field,
    pub fastopenq_max_qlen: Field,
    /// struct net: ipv4.sysctl_tcp_fastopen (the namespace's bits, read at the SYN)
    pub net_sysctl_tcp_fastopen: Field,
    /// struct net: ipv4.tfo_active_disable_times (bumped when active TFO is paused)
    pub net_tfo_active_disable_times: Field,
    /// struct request_sock: num_retrans (u8), SYN-ACKs retransmitted so far
    pub req_num_retrans: Field,
}

/// Global flags userspace sets before load.
pub mod config {
    /// The state-change hook reports server `accepted` (tracepoint backend only: the richer
    /// backends report every server outcome from tcp_try_fastopen instead).
    pub const SERVER_FROM_STATE: u32 = 1 << 0;
    /// tcp_fastopen_cache_set is hooked: a client connection's state is kept past
    /// ESTABLISHED until the SYN-ACK's cookie is cached, so `cookie_received` names its process.
    pub const COOKIE_FROM_CACHE_SET: u32 = 1 << 1;
}

/// Key of the kernel-side listener table: who called listen() on which port.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ListenerKey {
    pub netns: u32,
    pub port: u16,
    pub _pad: u16,
}

/// The process that owns a listener.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcInfo {
    pub pid: u32,
    pub _pad: u32,
    pub comm: [u8; TASK_COMM_LEN],
}

#[cfg(feature = "user")]
mod pod {
    // SAFETY: all of these are repr(C), made only of integers and byte arrays, with
    // every padding byte spelled out as a field, so any bit pattern is a valid value.
    unsafe impl aya::Pod for super::TfoEvent {}
    unsafe impl aya::Pod for super::Field {}
    unsafe impl aya::Pod for super::KernelLayout {}
    unsafe impl aya::Pod for super::ListenerKey {}
    unsafe impl aya::Pod for super::ProcInfo {}
}

impl KernelLayout {
    /// All fields absent; userspace overwrites this before load.
    pub const fn zeroed() -> Self {
        // SAFETY: KernelLayout is plain integers, for which all-zero is a valid value.
        unsafe { core::mem::zeroed() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::mem::size_of;

    #[test]
    fn wire_sizes_have_no_hidden_padding() {
        assert_eq!(size_of::<TfoEvent>(), 112);
        assert_eq!(size_of::<Field>(), 8);
        assert_eq!(size_of::<ListenerKey>(), 8);
        assert_eq!(size_of::<ProcInfo>(), 24);
    }
}
