//! What the kernel counts per namespace, role and outcome, whether or not the event reached
//! userspace, with a histogram of handshake times.
/// Upper bounds (ns, inclusive) of the handshake histogram the kernel keeps per
/// [`CountKey`]: fine below 100 ms for healthy TFO, and edges at 0.9 s and 1.1 s around the
/// kernel's 1 s initial SYN RTO (TCP_TIMEOUT_INIT), so the SYN-data stall falls in a bucket
/// of its own; 3 s and 7 s catch the second and third SYN timeout. One more bucket past the
/// last bound holds the rest (+Inf).
pub const HANDSHAKE_BOUNDS_NS: [u64; 15] = [
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    500_000_000,
    900_000_000,
    1_100_000_000,
    1_500_000_000,
    3_000_000_000,
    7_000_000_000,
];
pub const HANDSHAKE_BUCKETS: usize = HANDSHAKE_BOUNDS_NS.len() + 1;

/// Key of the kernel's per-CPU `COUNTS` table: one row per namespace, role and outcome.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CountKey {
    pub netns: u32,
    /// A [`crate::Role`].
    pub role: u8,
    /// An [`crate::Outcome`].
    pub outcome: u8,
    pub _pad: u16,
}

/// What the kernel counts per [`CountKey`], whether or not the event reached userspace:
/// the totals `export` and `top` show stay exact when the reader falls behind.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Counts {
    /// Outcomes seen (events, whether or not the ring buffer took them).
    pub events: u64,
    /// Sum of the time lost to SYN timeouts, each outcome's in whole microseconds (as its
    /// event's `stall_us`), in ns: equal to the events' sum when none was lost.
    pub stall_ns: u64,
    /// Events whose SYN (or SYN-ACK) timed out: `stall_ns` or `retransmits` above 0.
    pub stalls: u64,
    pub syn_data_bytes: u64,
    /// Sum of the events' SYN (client) or SYN-ACK (server) retransmissions.
    pub retransmits: u64,
    /// Sum and count of handshake times, where the start was known.
    pub handshake_ns: u64,
    pub handshakes: u64,
    /// Handshakes per bucket of [`HANDSHAKE_BOUNDS_NS`] (not cumulative), the last one +Inf.
    pub handshake_buckets: [u64; HANDSHAKE_BUCKETS],
    /// Sum (in ns, each in whole µs as its event's `saved_us`) and count of the round
    /// trips saved, over the events whose saving is known (`flags::SAVED_KNOWN`).
    pub saved_ns: u64,
    pub saves: u64,
}

impl Counts {
    pub const fn zeroed() -> Counts {
        Counts {
            events: 0,
            stall_ns: 0,
            stalls: 0,
            syn_data_bytes: 0,
            retransmits: 0,
            handshake_ns: 0,
            handshakes: 0,
            handshake_buckets: [0; HANDSHAKE_BUCKETS],
            saved_ns: 0,
            saves: 0,
        }
    }

    /// Adds another CPU's row (userspace sums the per-CPU values).
    pub fn add(&mut self, other: &Counts) {
        self.events += other.events;
        self.stall_ns += other.stall_ns;
        self.stalls += other.stalls;
        self.syn_data_bytes += other.syn_data_bytes;
        self.retransmits += other.retransmits;
        self.handshake_ns += other.handshake_ns;
        self.handshakes += other.handshakes;
        self.saved_ns += other.saved_ns;
        self.saves += other.saves;
        let mut i = 0;
        while i < HANDSHAKE_BUCKETS {
            self.handshake_buckets[i] += other.handshake_buckets[i];
            i += 1;
        }
    }
}

/// The bucket of [`HANDSHAKE_BOUNDS_NS`] a handshake of `ns` falls in.
#[inline(always)]
pub fn handshake_bucket(ns: u64) -> usize {
    let mut i = 0;
    while i < HANDSHAKE_BOUNDS_NS.len() {
        if ns <= HANDSHAKE_BOUNDS_NS[i] {
            return i;
        }
        i += 1;
    }
    HANDSHAKE_BOUNDS_NS.len()
}
