//! One outcome, counted and sent: the process a hook runs in, what was known of the
//! connection, and the event every outcome shares (`record`), for the client's, the
//! server's and the state hook's handlers alike.
use aya_ebpf::helpers::{
    bpf_get_current_pid_tgid,
    generated::{bpf_get_current_cgroup_id, bpf_get_current_comm},
};
use tfo_trace_common::{config, flags, CountKey, Outcome, Role, TfoEvent, TASK_COMM_LEN};

use crate::{
    filter,
    globals::config_has,
    kernel::{process_name, tuple_of, Access, SockCommon},
    maps::{count, emit_with, now, put16, ConnState, Measure, Process},
};

/// The process we run in: tgid, its name and the calling thread's (each as two words, see
/// `maps::put16`) and cgroup.
#[inline(always)]
pub(crate) fn current_process() -> Process {
    let pid = (bpf_get_current_pid_tgid() >> 32) as u32;
    let mut thread = core::mem::MaybeUninit::<[u64; 2]>::uninit();
    let p = thread.as_mut_ptr() as *mut u64;
    // SAFETY: 16 writable bytes, zeroed word by word first (volatile: not a memset call),
    // so a failed helper call leaves an empty name; then the helper fills them.
    let thread = unsafe {
        p.write_volatile(0);
        p.add(1).write_volatile(0);
        bpf_get_current_comm(p as *mut _, TASK_COMM_LEN as u32);
        thread.assume_init()
    };
    // SAFETY: helper without preconditions.
    let cgroup_id = unsafe { bpf_get_current_cgroup_id() };
    Process { pid, comm: process_name(), thread, cgroup_id }
}

/// What we knew of a connection, copied out of its state as plain values (zeros where
/// we had no state: see `kernel::Access` on why no `Option<ConnState>`).
#[derive(Clone, Copy)]
pub(crate) struct Known {
    pub known: bool,
    pub start_ns: u64,
    pub last_retrans_ns: u64,
    pub pid: u32,
    pub comm: [u64; 2],
    pub thread: [u64; 2],
    pub cgroup_id: u64,
    /// The hash of the cookie its SYN carried, and its destination's SYN-ACK count then
    /// (`ConnState`); 0 where not seen.
    pub sent_hash: u32,
    pub syn_seq: u32,
}

impl Known {
    pub const NONE: Known = Known {
        known: false,
        start_ns: 0,
        last_retrans_ns: 0,
        pid: 0,
        comm: [0; 2],
        thread: [0; 2],
        cgroup_id: 0,
        sent_hash: 0,
        syn_seq: 0,
    };

    /// Copies the state at `p` (null: none).
    #[inline(always)]
    pub(crate) fn of(p: *const ConnState) -> Known {
        if p.is_null() {
            return Known::NONE;
        }
        // SAFETY: a map value of this program run, read at once.
        let s = unsafe { &*p };
        Known {
            known: true,
            start_ns: s.start_ns,
            last_retrans_ns: s.last_retrans_ns,
            pid: s.pid,
            comm: s.comm,
            thread: s.thread,
            cgroup_id: s.cgroup_id,
            sent_hash: s.sent_hash,
            syn_seq: s.syn_seq,
        }
    }

    /// Time lost to SYN timeouts: the last SYN retransmission minus the first SYN.
    #[inline(always)]
    pub(crate) fn stall_ns(&self) -> u64 {
        if self.known && self.last_retrans_ns > self.start_ns {
            self.last_retrans_ns - self.start_ns
        } else {
            0
        }
    }

    /// [`Known::stall_ns`] once the SYN-ACK is in, for a connection whose SYN was
    /// retransmitted: where the retransmission's hook run never came (seen on 6.18 under
    /// load: a SYN retransmission that neither these programs nor bpftrace's saw, no
    /// recursion miss counted), the handshake less the round trip tcp_ack() has just
    /// measured on the last SYN says the same, to a millisecond.
    #[inline(always)]
    pub(crate) fn stall_at_synack_ns(&self, handshake_ns: u64, last_syn_rtt_ns: u64) -> u64 {
        match self.stall_ns() {
            0 => handshake_ns.saturating_sub(last_syn_rtt_ns),
            stall => stall,
        }
    }

    /// From the SYN to `at_ns`; 0 (unknown) without state.
    #[inline(always)]
    pub(crate) fn since_start(&self, at_ns: u64) -> u64 {
        if self.known {
            at_ns.saturating_sub(self.start_ns).max(1)
        } else {
            0
        }
    }
}

/// One outcome: counted in `COUNTS` (always), then sent as an event with the fields
/// every outcome shares, filled in place in the ring-buffer slot (no event-sized copy on
/// the 512-byte BPF stack), plus what `extra` adds.
#[inline(always)]
pub(crate) fn record<A: Access>(
    sk: SockCommon<A>,
    role: Role,
    outcome: Outcome,
    netns: u32,
    conn: &Known,
    measure: Measure,
    extra: impl FnOnce(&mut TfoEvent),
) {
    if !filter::outcome_selected(role, outcome) {
        return;
    }
    let key = CountKey { netns, role: role as u8, outcome: outcome as u8, _pad: 0 };
    count(key, &measure);
    if config_has(config::REFUSAL_EVENTS_ONLY) && outcome != Outcome::DataNotAcked {
        return; // counted: an exporter without per-destination series needs no more
    }
    emit_with(|ev| {
        let t = tuple_of(sk);
        ev.ts_ns = if measure.at_ns != 0 { measure.at_ns } else { now() };
        put16(&mut ev.saddr, t.saddr);
        put16(&mut ev.daddr, t.daddr);
        ev.netns = netns;
        ev.sport = t.sport;
        ev.dport = t.dport;
        ev.family = t.family;
        ev.role = role as u8;
        ev.outcome = outcome as u8;
        ev.stall_ns = measure.stall_ns;
        ev.syn_data_bytes = measure.syn_data_bytes;
        ev.retransmits = measure.retransmits;
        if measure.saved_srtt_us != 0 {
            ev.saved_us = measure.saved_us();
            ev.flags |= flags::SAVED_KNOWN;
        }
        if conn.known {
            ev.start_ns = conn.start_ns;
            ev.flags |= flags::START_KNOWN;
            if conn.pid != 0 {
                ev.pid = conn.pid;
                put16(&mut ev.comm, conn.comm);
                put16(&mut ev.thread, conn.thread);
                ev.cgroup_id = conn.cgroup_id;
                ev.flags |= flags::PID_KNOWN;
            }
        }
        extra(ev);
    });
}
