//! Maps shared by every program. Sizes here are defaults; userspace may resize `EVENTS`
//! (`--ring-buffer-size`).
use aya_ebpf::{
    bindings::{BPF_F_NO_COMMON_LRU, BPF_NOEXIST, BPF_RB_AVAIL_DATA, BPF_RB_FORCE_WAKEUP, BPF_RB_NO_WAKEUP},
    macros::map,
    maps::{Array, LruHashMap, PerCpuArray, PerCpuHashMap, RingBuf},
};
use tfo_trace_common::{
    counter, handshake_bucket, synack_slot, CountKey, Counts, ListenerKey, Outcome, ProcInfo, SynackSeq,
    TfoEvent, SYNACK_SEQ_SLOTS,
};

use crate::{globals::wakeup_bytes, kernel::Sock};

/// Per-connection state between the SYN and its outcome. Byte arrays are kept as u64
/// words: the BPF backend copies and zeroes byte arrays with calls to a byte-loop memset
/// or memcpy, which the verifier walks byte by byte on every path (6.1 gave up on it).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ConnState {
    pub start_ns: u64,
    pub last_retrans_ns: u64,
    pub pid: u32,
    pub retransmits: u32,
    pub comm: [u64; 2],
    /// cgroup v2 id of the connecting process.
    pub cgroup_id: u64,
    /// The connecting thread's name (`comm` is the process's).
    pub thread: [u64; 2],
    /// `tfo_trace_common::cookie_hash` of the cookie the SYN carried, where the backend
    /// sees it leave (tcp_fastopen_cookie_check's exit); 0: none, or not seen.
    pub sent_hash: u32,
    /// Where SYN-ACKs are counted per destination (`SYNACK_SEQ`): the destination's count
    /// when the SYN was sent.
    pub syn_seq: u32,
    /// A server child followed past SYN_RECV (closed before its handshake ended): the
    /// SYN's data it was made with.
    pub syn_data_bytes: u32,
    pub _pad: u32,
}

impl ConnState {
    /// A connection starting now, in process `p`.
    #[inline(always)]
    pub fn new(p: &Process) -> Self {
        ConnState {
            start_ns: now(),
            last_retrans_ns: 0,
            pid: p.pid,
            retransmits: 0,
            comm: p.comm,
            cgroup_id: p.cgroup_id,
            thread: p.thread,
            sent_hash: 0,
            syn_seq: 0,
            syn_data_bytes: 0,
            _pad: 0,
        }
    }
}

impl ConnState {
    /// A server's TFO child whose first SYN-ACK went out at `snt_synack_us`
    /// (tcp_clock_us(), the clock of bpf_ktime_get_ns in µs; now where unknown). Its
    /// process is its listener's owner, named when it is resolved.
    #[inline(always)]
    pub fn child_since(snt_synack_us: u64) -> Self {
        let start_ns = if snt_synack_us != 0 { snt_synack_us * 1000 } else { now() };
        ConnState {
            start_ns,
            last_retrans_ns: 0,
            pid: 0,
            retransmits: 0,
            comm: [0; 2],
            cgroup_id: 0,
            thread: [0; 2],
            sent_hash: 0,
            syn_seq: 0,
            syn_data_bytes: 0,
            _pad: 0,
        }
    }
}

/// The process a program runs in (connect(), listen()): its tgid and name, and the name
/// of the thread that runs the call.
pub struct Process {
    pub pid: u32,
    pub comm: [u64; 2],
    pub thread: [u64; 2],
    pub cgroup_id: u64,
}

/// Writes two u64 words into a 16-byte field (an address, a comm) of a map value or a
/// ring-buffer slot, where every such field is 8-byte aligned.
#[inline(always)]
pub fn put16(dst: &mut [u8; 16], words: [u64; 2]) {
    let d = dst.as_mut_ptr() as *mut u64;
    // SAFETY: 16 writable bytes, 8-byte aligned in every struct that has them
    // (TfoEvent.saddr/daddr/comm/thread, ProcInfo.comm/thread: offsets 24, 40, 88, 120,
    // 8, 32).
    // Volatile, or the compiler turns the stores into a memcpy/memset call.
    unsafe {
        d.write_volatile(words[0]);
        d.add(1).write_volatile(words[1]);
    }
}

#[inline(always)]
pub fn get16(src: &[u8; 16]) -> [u64; 2] {
    let s = src.as_ptr() as *const u64;
    // SAFETY: as for put16.
    unsafe { [s.read(), s.add(1).read()] }
}

/// Zeroes a reserved event word by word (no memset call).
#[inline(always)]
fn zero_event(ev: *mut TfoEvent) {
    const _: () = assert!(core::mem::size_of::<TfoEvent>() == 21 * 8);
    let w = ev as *mut u64;
    macro_rules! zero {
        ($($i:literal)*) => {
            // SAFETY: the reservation is a TfoEvent-sized, 8-byte aligned slot. Volatile,
            // or the compiler merges the stores back into a memset call.
            unsafe { $( w.add($i).write_volatile(0); )* }
        };
    }
    zero!(0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20);
}

#[inline(always)]
pub fn now() -> u64 {
    // SAFETY: helper without preconditions.
    unsafe { aya_ebpf::helpers::bpf_ktime_get_ns() }
}

#[map]
pub static EVENTS: RingBuf = RingBuf::with_byte_size(1 << 20, 0);

/// Per-connection state of the TFO connects we follow, keyed by `struct sock *`, for every
/// backend. A preallocated hash: following a connection takes an entry from a free list,
/// where socket-local storage allocated and memcg-charged one per connect and freed it again
/// (measured: a third of the BPF time of a TFO connection). LRU: a connection whose outcome
/// we never see must not pin an entry. One LRU list per CPU (NO_COMMON_LRU): no lock
/// shared by every CPU of a many-core host on each connect and outcome.
#[map]
static CONNS: LruHashMap<u64, ConnState> = LruHashMap::with_max_entries(65536, BPF_F_NO_COMMON_LRU);

/// The state of a connection we follow; null when we do not.
#[inline(always)]
pub fn conn_state<A>(sk: Sock<A>) -> *mut ConnState {
    CONNS.get_ptr_mut(sk.addr()).unwrap_or(core::ptr::null_mut())
}

/// Starts following a connection; false when its state could not be stored.
#[inline(always)]
pub fn follow<A>(sk: Sock<A>, state: &ConnState) -> bool {
    CONNS.insert(sk.addr(), state, 0).is_ok()
}

/// Stops following a connection: its outcome is out.
#[inline(always)]
pub fn forget<A>(sk: Sock<A>) {
    let _ = CONNS.remove(sk.addr());
}

/// The client's TFO SYN-ACKs that may write a destination's cookie cache, counted per
/// destination (`tfo_trace_common::SynackSeq`), on the backends that do not see the
/// cookie: what tells userspace whether its read of the cache after a refusal is that
/// SYN-ACK's, and which SYN-ACKs came between a SYN and its own.
#[map]
static SYNACK_SEQ: Array<SynackSeq> = Array::with_max_entries(SYNACK_SEQ_SLOTS, 0);

/// The count of SYN-ACKs so far at `daddr`'s slot (`SYNACK_SEQ`): one load of a line
/// written only by refusals and cookie requests, read at every TFO connect.
#[inline(always)]
pub fn synack_seq(family: u8, daddr: [u64; 2]) -> u32 {
    match SYNACK_SEQ.get(synack_slot(family, daddr)) {
        // SAFETY: an element of the array, read at once (a u64 load is atomic).
        Some(slot) => unsafe { core::ptr::read_volatile(&slot.seq) as u32 },
        None => 0,
    }
}

/// A SYN-ACK counted in its slot: its number, and the microseconds since the slot's
/// previous one (0: another counted itself meanwhile; u32::MAX: none before).
pub struct SynackMark {
    pub seq: u32,
    pub gap_us: u32,
}

/// Counts a SYN-ACK at `at_ns` toward `daddr` (see `SYNACK_SEQ`). The count is an atomic
/// add whose result is not used (BPF_ATOMIC_ADD, which every supported kernel has; a fetch
/// needs 5.12): another CPU's add between the loads around it shows as a count that moved
/// by more than one.
#[inline(always)]
pub fn count_synack(family: u8, daddr: [u64; 2], at_ns: u64) -> SynackMark {
    let Some(slot) = SYNACK_SEQ.get_ptr_mut(synack_slot(family, daddr)) else {
        return SynackMark { seq: 0, gap_us: 0 };
    };
    // SAFETY: an element of the array, valid for this program run; `seq` is an aligned
    // u64, shared with other CPUs only through the atomic add and whole loads.
    unsafe {
        let seq = core::ptr::addr_of_mut!((*slot).seq);
        let before = core::ptr::read_volatile(seq);
        atomic_add(seq, 1);
        let after = core::ptr::read_volatile(seq);
        let last_ns = core::ptr::read_volatile(&(*slot).last_ns);
        core::ptr::write_volatile(core::ptr::addr_of_mut!((*slot).last_ns), at_ns);
        let gap_us = if after != before.wrapping_add(1) {
            0
        } else if last_ns == 0 {
            u32::MAX
        } else {
            let us = at_ns.saturating_sub(last_ns) / 1000;
            if us >= u32::MAX as u64 {
                u32::MAX - 1
            } else {
                us as u32
            }
        };
        SynackMark { seq: after as u32, gap_us }
    }
}

/// `*p += v` in one atomic instruction (BPF_ATOMIC_ADD, BPF_XADD before 5.12: every
/// supported kernel has it; the verifier allows it on a map value). core has no atomic
/// read-modify-write for the bpf target.
///
/// # Safety
/// `p` points into a map value, aligned to 8 bytes.
#[inline(always)]
unsafe fn atomic_add(p: *mut u64, v: u64) {
    // SAFETY: per the function's contract; one instruction, no stack.
    unsafe {
        core::arch::asm!("lock *(u64 *)({p} + 0) += {v}", p = in(reg) p, v = in(reg) v, options(nostack))
    };
}

/// Who called listen() on which (netns, port): softirq context cannot name the owner.
#[map]
pub static LISTENERS: LruHashMap<ListenerKey, ProcInfo> = LruHashMap::with_max_entries(16384, 0);

/// The tracer's own health (`tfo_trace_common::counter`).
#[map]
pub static COUNTERS: PerCpuArray<u64> = PerCpuArray::with_max_entries(counter::COUNT, 0);

/// Every outcome, counted per namespace, role and outcome: what `export` and the totals
/// of `top` read, exact even when the ring buffer overflows.
#[map]
pub static COUNTS: PerCpuHashMap<CountKey, Counts> = PerCpuHashMap::with_max_entries(4096, 0);

/// A zeroed row to insert into `COUNTS` from (never written, so always zero): a `Counts`
/// would be a memset call on the stack.
#[map]
static COUNTS_ZERO: PerCpuArray<Counts> = PerCpuArray::with_max_entries(1, 0);

#[inline(always)]
pub fn bump(index: u32) {
    if let Some(slot) = COUNTERS.get_ptr_mut(index) {
        // SAFETY: per-CPU slot, only this CPU writes it while this program runs.
        unsafe { *slot += 1 };
    }
}

/// What an outcome adds to its row of `COUNTS`.
pub struct Measure {
    pub stall_ns: u64,
    pub syn_data_bytes: u32,
    pub retransmits: u32,
    /// From the SYN (or the child) to the outcome; 0 where the start is unknown.
    pub handshake_ns: u64,
    /// When it happened, where the caller read the clock already (for `handshake_ns`); 0:
    /// the event reads it, if one is sent (counts need no time).
    pub at_ns: u64,
    /// `accepted`: the connection's `srtt_us` as the kernel keeps it (<< 3), whose first
    /// sample is the round trip TFO saved (see `TfoEvent::saved_us`); 0 where there is no
    /// sample (tcp_rtt_estimator stores at least 1 once it has one) or no saving.
    pub saved_srtt_us: u32,
}

impl Measure {
    /// The round trip saved, in µs, where known.
    #[inline(always)]
    pub fn saved_us(&self) -> u32 {
        self.saved_srtt_us >> 3
    }
}

#[inline(always)]
fn add(row: *mut Counts, m: &Measure) {
    // SAFETY: a per-CPU row of COUNTS (or of COUNTS_ZERO), written only by this CPU.
    let row = unsafe { &mut *row };
    row.events += 1;
    // A SYN timed out (aggregation/stall.rs: which rows' stalls userspace counts).
    if m.stall_ns > 0 || m.retransmits > 0 {
        row.stalls += 1;
        // In whole microseconds, as the event's stall_us is made: the kernel's sum and the
        // sum of the events' are then equal to the unit when no event was lost.
        row.stall_ns += m.stall_ns / 1000 * 1000;
    }
    row.syn_data_bytes += m.syn_data_bytes as u64;
    row.retransmits += m.retransmits as u64;
    if m.saved_srtt_us != 0 {
        row.saves += 1;
        row.saved_ns += m.saved_us() as u64 * 1000;
    }
    if m.handshake_ns > 0 {
        let ns = m.handshake_ns;
        row.handshake_ns += ns;
        row.handshakes += 1;
        let b = handshake_bucket(ns);
        if b < row.handshake_buckets.len() {
            row.handshake_buckets[b] += 1;
        }
    }
}

/// Counts one outcome in `COUNTS`. A namespace beyond the table's size is counted under
/// netns 0, and if even that row cannot be made, in `counter::COUNTS_FULL`.
#[inline(always)]
pub fn count(mut key: CountKey, m: &Measure) {
    for _ in 0..2 {
        if let Some(row) = COUNTS.get_ptr_mut(key) {
            return add(row, m);
        }
        if let Some(zero) = COUNTS_ZERO.get_ptr(0) {
            // NOEXIST: another CPU may have made the row in between; then it is used.
            // SAFETY: a row of COUNTS_ZERO, which nothing ever writes: all zero.
            let _ = COUNTS.insert(key, unsafe { *zero }, BPF_NOEXIST as u64);
            if let Some(row) = COUNTS.get_ptr_mut(key) {
                return add(row, m);
            }
        }
        key.netns = 0;
    }
    bump(counter::COUNTS_FULL);
}

/// Sends one event, filled in place by `fill`; a full ring buffer is counted, never silent.
///
/// Waking the reader on every event costs a self-IPI per event (irq_work), measured as
/// most of our per-connection cost under load; so events are submitted quietly and the
/// reader is woken once 1/4 of the ring has filled. Userspace also polls every 100 ms,
/// which bounds the delay of a lone event. A refused SYN-data (`data_not_acked`, rare) wakes
/// it at once: where no hook sees the SYN-ACK, userspace reads the client's cookie cache for
/// it, which the next connection to that destination may change. Told by the outcome
/// `fill` wrote, read back from the slot: no flag for every caller to pass.
#[inline(always)]
pub fn emit_with(fill: impl FnOnce(&mut TfoEvent)) {
    match EVENTS.reserve::<TfoEvent>(0) {
        Some(mut entry) => {
            let ev = entry.as_mut_ptr();
            zero_event(ev);
            // SAFETY: the reservation is a TfoEvent-sized slot we own until submit; zeroed
            // bytes are a valid TfoEvent (plain integers), so the reference is sound.
            unsafe { fill(&mut *ev) };
            // SAFETY: as above, the slot is ours until submit.
            let urgent = unsafe { (*ev).outcome } == Outcome::DataNotAcked as u8;
            // The ring's size is known at load: one query per event, not two.
            let pending = EVENTS.query(BPF_RB_AVAIL_DATA as u64);
            let flags =
                if urgent || pending >= wakeup_bytes() { BPF_RB_FORCE_WAKEUP } else { BPF_RB_NO_WAKEUP };
            entry.submit(flags as u64);
        }
        None => bump(counter::EVENTS_LOST),
    }
}
