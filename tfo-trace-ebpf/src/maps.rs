//! Maps shared by every program. Sizes here are defaults; userspace may resize
//! `EVENTS` (`--ring-buffer-size`) before load.
use aya_ebpf::{
    bindings::{BPF_RB_AVAIL_DATA, BPF_RB_FORCE_WAKEUP, BPF_RB_NO_WAKEUP, BPF_RB_RING_SIZE},
    macros::map,
    maps::{LruHashMap, PerCpuArray, RingBuf},
};
use tfo_trace_common::{counter, ListenerKey, ProcInfo, TfoEvent, TASK_COMM_LEN};

/// Per-connection state between the SYN and its outcome, keyed by `struct sock *`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ConnState {
    pub start_ns: u64,
    pub last_retrans_ns: u64,
    pub pid: u32,
    pub retransmits: u32,
    pub comm: [u8; TASK_COMM_LEN],
    /// Source port seen while the SYN was outstanding: a socket that fails is unhashed
    /// (port 0) by the time it reaches CLOSE.
    pub sport: u16,
    pub _pad: [u8; 6],
}

impl ConnState {
    /// A connection starting now.
    #[inline(always)]
    pub fn new(pid: u32, comm: [u8; TASK_COMM_LEN]) -> Self {
        // SAFETY: helper without preconditions.
        let start_ns = unsafe { aya_ebpf::helpers::bpf_ktime_get_ns() };
        ConnState { start_ns, last_retrans_ns: 0, pid, retransmits: 0, comm, sport: 0, _pad: [0; 6] }
    }
}

#[map]
pub static EVENTS: RingBuf = RingBuf::with_byte_size(1 << 20, 0);

/// LRU: a connection whose outcome we never see (e.g. lost state) must not pin an entry.
#[map]
pub static CONNS: LruHashMap<u64, ConnState> = LruHashMap::with_max_entries(65536, 0);

/// Who called listen() on which (netns, port): softirq context cannot name the owner.
#[map]
pub static LISTENERS: LruHashMap<ListenerKey, ProcInfo> = LruHashMap::with_max_entries(16384, 0);

#[map]
pub static COUNTERS: PerCpuArray<u64> = PerCpuArray::with_max_entries(counter::COUNT, 0);

#[inline(always)]
pub fn bump(index: u32) {
    if let Some(slot) = COUNTERS.get_ptr_mut(index) {
        // SAFETY: per-CPU slot, only this CPU writes it while this program runs.
        unsafe { *slot += 1 };
    }
}

/// Sends one event, filled in place by `fill`; a full ring buffer is counted, never silent.
///
/// Waking the reader on every event costs a self-IPI per event (irq_work), measured as
/// most of our per-connection cost under load; so events are submitted quietly and the
/// reader is woken once 1/16 of the ring has filled. Userspace also polls every 100 ms,
/// which bounds the delay of a lone event.
#[inline(always)]
pub fn emit_with(fill: impl FnOnce(&mut TfoEvent)) {
    match EVENTS.reserve::<TfoEvent>(0) {
        Some(mut entry) => {
            let ev = entry.as_mut_ptr();
            // SAFETY: the reservation is a TfoEvent-sized slot we own until submit; zeroed
            // bytes are a valid TfoEvent (plain integers), so the reference is sound.
            unsafe {
                core::ptr::write_bytes(ev, 0, 1);
                fill(&mut *ev);
            }
            let pending = EVENTS.query(BPF_RB_AVAIL_DATA as u64);
            let size = EVENTS.query(BPF_RB_RING_SIZE as u64);
            let flags = if pending >= size / 16 { BPF_RB_FORCE_WAKEUP } else { BPF_RB_NO_WAKEUP };
            entry.submit(flags as u64);
        }
        None => bump(counter::EVENTS_LOST),
    }
}
