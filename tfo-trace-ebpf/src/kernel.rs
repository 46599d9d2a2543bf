//! Reading kernel structs through offsets userspace found in this kernel's BTF.
//!
//! Two ways in, one per kind of hook ([`Access`]):
//! - [`Direct`]: BTF-typed programs (tp_btf, fentry/fexit) get their arguments as typed
//!   kernel pointers, and the verifier checks each load against the kernel's own types.
//!   Because [`LAYOUT`](crate::globals::LAYOUT) sits in frozen read-only data, the verifier knows every offset as
//!   a constant, so a field is one load instruction.
//! - [`Probe`]: raw tracepoints and kprobes see untyped addresses: each field is a
//!   `bpf_probe_read_kernel`.
//!
//! Both keep a connection's state in the same LRU hash (`maps::conn_state`).
use aya_ebpf::{helpers::bpf_probe_read_kernel, macros::map, maps::PerCpuArray};
use tfo_trace_common::{Field, FAMILY_V4, FAMILY_V6, TCP_SOCK_CAST_CALL};

/// Reads one field description; volatile so the compiler cannot fold the zero initializer.
macro_rules! layout {
    ($field:ident) => {{
        #[allow(unused_unsafe)] // the macro is also used inside unsafe blocks
        // SAFETY: LAYOUT is a valid static; volatile only defeats constant folding.
        let field = unsafe { core::ptr::read_volatile(&$crate::globals::LAYOUT.$field) };
        field
    }};
}
pub(crate) use layout;

/// A member every supported kernel has at the size `$t` (userspace checks both in the
/// kernel's BTF before load, `probes/layout.rs` `fixed`): one load at a verifier-known
/// offset, where [`int`] decodes a whole [`Field`] (presence, size, bit range) at run time,
/// on the path every connection takes.
macro_rules! fixed {
    ($a:ty, $base:expr, $field:ident: $t:ty) => {{
        #[allow(unused_unsafe)]
        // SAFETY: LAYOUT is a valid static; volatile only defeats constant folding.
        let off = unsafe { core::ptr::read_volatile(&$crate::globals::LAYOUT.$field.off) };
        <$a as $crate::kernel::Access>::load::<$t>($base, off)
    }};
}
pub(crate) use fixed;

/// A one-bit member every supported kernel has (checked likewise, `one_bit`): a byte load
/// at its first byte and a shift.
macro_rules! bit {
    ($a:ty, $base:expr, $field:ident) => {{
        #[allow(unused_unsafe)]
        // SAFETY: as for `fixed!`.
        let (off, shift) = unsafe {
            let f = &$crate::globals::LAYOUT.$field;
            (core::ptr::read_volatile(&f.off), core::ptr::read_volatile(&f.shift))
        };
        (<$a as $crate::kernel::Access>::load::<u8>($base, off) >> (shift & 7)) & 1 != 0
    }};
}
pub(crate) use bit;

/// Whether this kernel has a member: one load, where `layout!` reads the whole `Field`.
macro_rules! present {
    ($field:ident) => {{
        #[allow(unused_unsafe)]
        // SAFETY: as for `fixed!`.
        let present = unsafe { core::ptr::read_volatile(&$crate::globals::LAYOUT.$field.present) };
        present != 0
    }};
}
pub(crate) use present;

pub const IPPROTO_TCP: u64 = 6;
const AF_INET: u64 = 2;
const AF_INET6: u64 = 10;

// enum tcp_state (include/net/tcp_states.h): stable uapi numbers.
pub const TCP_ESTABLISHED: i32 = 1;
pub const TCP_SYN_SENT: i32 = 2;
pub const TCP_SYN_RECV: i32 = 3;
pub const TCP_CLOSE: i32 = 7;
pub const TCP_LISTEN: i32 = 10;

/// How a handler reads kernel memory.
///
/// Absent values are null pointers and zeros, never `Option`s of pointers or structs: the
/// BPF backend leaves the payload of such a `None` unset and may still copy it, and the
/// verifier refuses a read of an unset register.
pub trait Access: Sized {
    /// Typed (BTF) pointers: a hook's own arguments are what direct loads may read from;
    /// an address remembered as a number from an earlier hook is not.
    const TYPED: bool;
    /// The socket as a `struct tcp_sock` to read TCP members from, before anything says it
    /// is TCP: on a socket of another protocol (SCTP also passes through SYN_SENT) what is
    /// read there means nothing, so a handler reads the members that send a plain
    /// connection back first and asks [`is_tcp`] only for the few that go on: the protocol
    /// is one load fewer on the path of every connection. Null where the cast refuses.
    fn tcp_view(sk: *const u8) -> *const u8;

    /// The socket as a `struct tcp_sock`, or null when it is not a TCP socket.
    #[inline(always)]
    fn tcp_sock(sk: *const u8) -> *const u8 {
        if is_tcp::<Self>(sk) {
            Self::tcp_view(sk)
        } else {
            core::ptr::null()
        }
    }
    /// `size_of::<T>()` bytes at `base + off`; 0 when unreadable. (No Option here: the BPF
    /// backend turned the payload of a `None` into a read of an unset register, which the
    /// verifier refuses.)
    fn load<T: Copy + Default>(base: *const u8, off: u32) -> T;
}

/// BTF-typed programs: direct loads.
pub struct Direct;

impl Access for Direct {
    const TYPED: bool = true;

    /// The hooks that use it see full sockets only (a state change, a retransmission, a
    /// listener or TFO child), so the protocol is all there is to check ([`is_tcp`]).
    #[inline(always)]
    fn tcp_view(sk: *const u8) -> *const u8 {
        cast_to_tcp_sock(sk)
    }

    #[inline(always)]
    fn load<T: Copy + Default>(base: *const u8, off: u32) -> T {
        // SAFETY: `base` is a BTF-typed kernel pointer; the verifier checks this load
        // against the type at that offset and turns it into a fault-tolerant one.
        unsafe { core::ptr::read_volatile(base.wrapping_add(off as usize) as *const T) }
    }
}

/// `sk` as a typed `struct tcp_sock` pointer, which direct loads may read past the end of
/// `struct sock`. A call userspace rewrites before load (`TCP_SOCK_CAST_CALL`):
/// bpf_rdonly_cast(sk, TCP_SOCK_BTF_ID), which costs nothing at run time (the verifier
/// makes it `r0 = r1`), where every plain connection paid a helper call (~17 ns a call on
/// a 2-core EPYC VM with Safe-RET, three calls per connection); bpf_skc_to_tcp_sock(sk)
/// where the kernel lacks the kfunc (before 6.2), which ignores the second argument.
#[inline(always)]
fn cast_to_tcp_sock(sk: *const u8) -> *const u8 {
    let tp: *const u8;
    // SAFETY: a call by the BPF calling convention (arguments in r1, r2; result in r0;
    // r1-r5 clobbered), to a function the verifier checks; it reads nothing through `sk`.
    unsafe {
        core::arch::asm!(
            "call {call}",
            call = const TCP_SOCK_CAST_CALL,
            inlateout("r1") sk => _,
            inlateout("r2") crate::globals::tcp_sock_btf_id() => _,
            lateout("r0") tp,
            lateout("r3") _,
            lateout("r4") _,
            lateout("r5") _,
            options(nostack, readonly, pure),
        );
    }
    tp
}

/// Raw tracepoints and kprobes: bpf_probe_read_kernel.
pub struct Probe;

impl Access for Probe {
    const TYPED: bool = false;

    #[inline(always)]
    fn tcp_view(sk: *const u8) -> *const u8 {
        sk
    }

    #[inline(always)]
    fn load<T: Copy + Default>(base: *const u8, off: u32) -> T {
        // SAFETY: bpf_probe_read_kernel checks the address; a bad one returns an error.
        unsafe { bpf_probe_read_kernel(base.wrapping_add(off as usize) as *const T) }.unwrap_or_default()
    }
}

/// Whether a socket is a TCP one (a u16 `sk_protocol` on every supported kernel, 5.6+).
#[inline(always)]
pub fn is_tcp<A: Access>(sk: *const u8) -> bool {
    !sk.is_null() && fixed!(A, sk, sk_protocol: u16) as u64 == IPPROTO_TCP
}

/// An integer field (or bitfield) widened to u64; 0 when this kernel has no such field.
/// For the members some kernels lack or size differently; the others use `fixed!`/`bit!`.
#[inline(always)]
pub fn int<A: Access>(base: *const u8, f: Field) -> u64 {
    if f.present == 0 {
        return 0;
    }
    // `f` is a verifier-known constant: only one of these loads survives verification.
    let raw = match f.size {
        1 => A::load::<u8>(base, f.off) as u64,
        2 => A::load::<u16>(base, f.off) as u64,
        4 => A::load::<u32>(base, f.off) as u64,
        _ => A::load::<u64>(base, f.off),
    };
    if f.bits == 0 {
        return raw;
    }
    (raw >> f.shift) & ((1u64 << f.bits) - 1)
}

#[inline(always)]
pub fn flag<A: Access>(base: *const u8, f: Field) -> bool {
    int::<A>(base, f) != 0
}

/// A 16-byte field (an IPv6 address), in two 8-byte loads.
#[inline(always)]
fn words16<A: Access>(base: *const u8, f: Field) -> [u64; 2] {
    [A::load(base, f.off), A::load(base, f.off + 8)]
}

/// The socket's `struct net` (sk->__sk_common.skc_net.net).
#[inline(always)]
pub fn net_of<A: Access>(sk: *const u8) -> *const u8 {
    fixed!(A, sk, skc_net: u64) as *const u8
}

/// The last namespace this CPU named: `struct net` address, its `net_cookie`, its inode.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct NetnsSeen {
    net: u64,
    cookie: u64,
    inum: u32,
    _pad: u32,
}

/// One entry per CPU (see [`netns_of`]).
#[map]
static NETNS_SEEN: PerCpuArray<NetnsSeen> = PerCpuArray::with_max_entries(1, 0);

/// Network namespace inode of a socket: its net->ns.inum.
///
/// ns.inum shares a cache line with the namespace's reference count (ns_common), which
/// every socket allocated or freed in it, on any CPU, writes: on a busy host that read
/// misses nearly every time (profiled: the costliest load of a TFO outcome). So each CPU
/// keeps the last namespace it named, checked against `net_cookie`, which the kernel never
/// reuses and never writes after creation: a freed `struct net` reused at the same address
/// is a new cookie, never a stale name.
#[inline(always)]
pub fn netns_of<A: Access>(sk: *const u8) -> u32 {
    let net = net_of::<A>(sk);
    if net.is_null() {
        return 0;
    }
    if !present!(net_cookie) {
        return fixed!(A, net, net_ns_inum: u32);
    }
    let cookie = fixed!(A, net, net_cookie: u64);
    let Some(seen) = NETNS_SEEN.get_ptr_mut(0) else {
        return fixed!(A, net, net_ns_inum: u32);
    };
    // SAFETY: this CPU's slot, used only within this program run.
    let seen = unsafe { &mut *seen };
    if seen.net == net as u64 && seen.cookie == cookie && cookie != 0 {
        return seen.inum;
    }
    let inum = fixed!(A, net, net_ns_inum: u32);
    *seen = NetnsSeen { net: net as u64, cookie, inum, _pad: 0 };
    inum
}

/// The state of a socket (sk_state).
#[inline(always)]
pub fn state_of<A: Access>(sk: *const u8) -> i32 {
    fixed!(A, sk, skc_state: u8) as i32
}

/// Addresses as the event holds them: 16 bytes each, IPv4 in the first four, network
/// order, kept as two u64 words (see `maps::put16`).
pub struct Tuple {
    pub family: u8,
    pub saddr: [u64; 2],
    pub daddr: [u64; 2],
    pub sport: u16,
    pub dport: u16,
}

/// The socket's family as events carry it: [`FAMILY_V4`], [`FAMILY_V6`], or 0 for another.
#[inline(always)]
pub fn family_of<A: Access>(sk: *const u8) -> u8 {
    match fixed!(A, sk, skc_family: u16) as u64 {
        AF_INET => FAMILY_V4,
        AF_INET6 => FAMILY_V6,
        _ => 0,
    }
}

/// The 4-tuple as the socket holds it once connected (ports in host order). Also works on
/// a request sock, which starts with the same sock_common.
#[inline(always)]
pub fn tuple_of<A: Access>(sk: *const u8) -> Tuple {
    let family = fixed!(A, sk, skc_family: u16) as u64;
    let mut t = Tuple {
        family: 0,
        saddr: [0; 2],
        daddr: [0; 2],
        sport: fixed!(A, sk, skc_num: u16),
        dport: u16::from_be(fixed!(A, sk, skc_dport: u16)),
    };
    if family == AF_INET {
        t.family = FAMILY_V4;
        // Little-endian words: the address's four bytes, as loaded, are the low half.
        t.saddr[0] = fixed!(A, sk, skc_rcv_saddr: u32) as u64;
        t.daddr[0] = fixed!(A, sk, skc_daddr: u32) as u64;
    } else if family == AF_INET6 {
        t.family = FAMILY_V6;
        t.saddr = words16::<A>(sk, layout!(skc_v6_rcv_saddr));
        t.daddr = words16::<A>(sk, layout!(skc_v6_daddr));
    }
    t
}
