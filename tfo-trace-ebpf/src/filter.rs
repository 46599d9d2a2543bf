//! What to trace, decided in the kernel (`tfo_trace_common::Filter`, set by userspace in
//! read-only data: the verifier knows every count, and drops the checks of an empty kind).
//! A connection filtered out costs what a plain one costs: no state, no event, no count.
use aya_ebpf::{helpers::generated::bpf_current_task_under_cgroup, macros::map, maps::CgroupArray};
use tfo_trace_common::{Cidr, Filter, Outcome, Role, FAMILY_V4, FAMILY_V6, FILTER_SLOTS};

/// Filled in by userspace before load (`EbpfLoader::override_global`).
#[no_mangle]
pub static FILTER: Filter = Filter::none();

/// The cgroups of `--cgroup`, slots 0..n_cgroups, set by userspace after load.
#[map]
pub static CGROUP_FILTER: CgroupArray = CgroupArray::with_max_entries(FILTER_SLOTS as u32, 0);

/// One scalar field of FILTER; volatile so the compiler cannot fold the zero initializer
/// (the verifier folds it instead, from the frozen map). Arrays are read an element (or a
/// word) at a time: a whole-array copy would be a memcpy call.
macro_rules! filter {
    ($field:ident) => {{
        // SAFETY: FILTER is a valid static.
        unsafe { core::ptr::read_volatile(&FILTER.$field) }
    }};
    ($field:ident[$i:expr]) => {{
        // SAFETY: FILTER is a valid static; callers keep `$i` below FILTER_SLOTS.
        unsafe { core::ptr::read_volatile(&FILTER.$field[$i]) }
    }};
}

/// Whether `$value` is one of the first `$n` values of the FILTER array `$field` (an
/// unrolled loop over the slots: the verifier sees constant indexes).
macro_rules! listed {
    ($field:ident, $n:expr, $value:expr) => {{
        let mut hit = false;
        for i in 0..FILTER_SLOTS {
            if i < $n && filter!($field[i]) == $value {
                hit = true;
            }
        }
        hit
    }};
}

/// Two words of a 16-byte field of FILTER.
#[inline(always)]
fn words(p: *const [u8; 16]) -> [u64; 2] {
    let w = p as *const u64;
    // SAFETY: 16 bytes of the FILTER static, 8-byte aligned (Cidr.addr at offset 0 of an
    // 8-aligned array; comms at an 8-aligned offset).
    unsafe { [core::ptr::read_volatile(w), core::ptr::read_volatile(w.add(1))] }
}

/// Whether any filter needs to know the connection's process or addresses from its
/// connect(): then a client connection without state (older than the tracer, or filtered
/// out) cannot be shown.
#[inline(always)]
pub fn needs_state() -> bool {
    filter!(n_pids) > 0
        || filter!(n_comms) > 0
        || filter!(n_cgroups) > 0
        || filter!(n_netns) > 0
        || filter!(n_ports) > 0
        || filter!(n_daddrs) > 0
        || filter!(n_saddrs) > 0
}

/// Whether any process filter is set (pid, comm, cgroup).
#[inline(always)]
pub fn by_process() -> bool {
    filter!(n_pids) > 0 || filter!(n_comms) > 0 || filter!(n_cgroups) > 0
}

/// pid, comm and cgroup filters, in the context of the process (connect(), listen()):
/// `--comm` takes the process's name (`comm`) or the calling thread's (`thread`).
#[inline(always)]
pub fn process_selected(pid: u32, comm: &[u64; 2], thread: &[u64; 2]) -> bool {
    let n = filter!(n_pids) as usize;
    if n > 0 && !listed!(pids, n, pid) {
        return false;
    }
    let n = filter!(n_comms) as usize;
    if n > 0 {
        let mut hit = false;
        for i in 0..FILTER_SLOTS {
            // Each is NUL padded to 16 bytes: compared as two words.
            let name = words(&FILTER.comms[i]);
            if i < n && (name == *comm || name == *thread) {
                hit = true;
            }
        }
        if !hit {
            return false;
        }
    }
    let n = filter!(n_cgroups) as usize;
    if n > 0 {
        let mut hit = false;
        for i in 0..FILTER_SLOTS {
            // The helper takes the cgroup array and a slot; a slot out of range or empty
            // answers an error (< 0), not 1.
            let under = |slot: u32| {
                // SAFETY: as said above; the helper only reads the map and the task.
                unsafe { bpf_current_task_under_cgroup(&CGROUP_FILTER as *const _ as *mut _, slot) }
            };
            if i < n && under(i as u32) == 1 {
                hit = true;
            }
        }
        if !hit {
            return false;
        }
    }
    true
}

/// Whether `addr` is in slot `i` of a prefix list of FILTER.
#[inline(always)]
fn in_prefix(c: &Cidr, family: u8, addr: &[u64; 2]) -> bool {
    // SAFETY: a field of the FILTER static.
    let (c_family, c_bits) =
        unsafe { (core::ptr::read_volatile(&c.family), core::ptr::read_volatile(&c.bits)) };
    if c_family != family {
        return false;
    }
    let want = words(&c.addr);
    let bits = if family == FAMILY_V4 { c_bits.min(32) } else { c_bits.min(128) } as u32;
    let (m0, m1) = (prefix_mask(bits.min(64)), prefix_mask(bits.saturating_sub(64)));
    addr[0] & m0 == want[0] & m0 && addr[1] & m1 == want[1] & m1
}

/// The first `bits` bits of an address word in network order: bytes are the little-endian
/// word's low bytes first, and within a byte the high bits first.
#[inline(always)]
fn prefix_mask(bits: u32) -> u64 {
    if bits >= 64 {
        return u64::MAX;
    }
    let bytes = bits / 8;
    let mut m = if bytes == 0 { 0 } else { u64::MAX >> (64 - 8 * bytes) };
    let rest = bits % 8;
    if rest > 0 {
        m |= ((0xffu64 << (8 - rest)) & 0xff) << (8 * bytes);
    }
    m
}

/// An IPv6 socket's IPv4-mapped address (`::ffff:a.b.c.d`: a dual-stack listener's child
/// of an IPv4 client, or an IPv6 socket connected to an IPv4 address) as the IPv4 address
/// it is, held as an IPv4 one is (its four bytes in the low half of the first word): an
/// IPv4 prefix selects it, an IPv6 one does not, as userspace shows and replays it.
#[inline(always)]
fn as_ipv4_if_mapped(family: u8, addr: &[u64; 2]) -> (u8, [u64; 2]) {
    // Little-endian words: bytes 8..12 are 00 00 ff ff, bytes 12..16 the IPv4 address.
    if family == FAMILY_V6 && addr[0] == 0 && addr[1] as u32 == 0xffff_0000 {
        (FAMILY_V4, [addr[1] >> 32, 0])
    } else {
        (family, *addr)
    }
}

/// Whether `addr` is in one of the first `n` prefixes of `list`; called only where an
/// address filter is set, so a mapped address costs nothing more without one.
#[inline(always)]
fn any_prefix(list: &[Cidr; FILTER_SLOTS], n: usize, family: u8, addr: &[u64; 2]) -> bool {
    let (family, addr) = as_ipv4_if_mapped(family, addr);
    let addr = &addr;
    let mut hit = false;
    for (i, c) in list.iter().enumerate() {
        if i < n && in_prefix(c, family, addr) {
            hit = true;
        }
    }
    hit
}

/// Namespace, server port and addresses: where the connection goes and from where.
#[inline(always)]
pub fn connection_selected(
    netns: u32,
    family: u8,
    server: &[u64; 2],
    server_port: u16,
    client: &[u64; 2],
) -> bool {
    let n = filter!(n_netns) as usize;
    if n > 0 && !listed!(netns, n, netns) {
        return false;
    }
    let n = filter!(n_ports) as usize;
    if n > 0 && !listed!(ports, n, server_port) {
        return false;
    }
    let n = filter!(n_daddrs) as usize;
    if n > 0 && !any_prefix(&FILTER.daddrs, n, family, server) {
        return false;
    }
    let n = filter!(n_saddrs) as usize;
    if n > 0 && !any_prefix(&FILTER.saddrs, n, family, client) {
        return false;
    }
    true
}

/// `--role` and `--outcome`.
#[inline(always)]
pub fn outcome_selected(role: Role, outcome: Outcome) -> bool {
    let roles = filter!(roles);
    let outcomes = filter!(outcomes);
    (roles == 0 || roles & (1 << role as u8) != 0) && (outcomes == 0 || outcomes & (1 << outcome as u8) != 0)
}
