//! Reading kernel structs through offsets userspace found in this kernel's BTF.
//!
//! Each kernel struct the programs read has a pointer type here (`Sock`, `TcpSock`, `Net`,
//! `Cgroup`, ...) with one accessor per member, all made from the one table of members,
//! `tfo_trace_common::kernel_structs!`, which userspace's layout (probes/layout.rs) is made
//! from too: a member's width is its declared type's, checked against the kernel's BTF
//! before load, and a member is read off its own struct only (`tp.fastopen_req()` is a
//! `TcpSock`'s; a `Sock` has no such accessor). Casts between them are explicit:
//! [`Access::tcp_view`], [`Sock::common`], [`RequestSock::common`].
//!
//! Two ways in, one per kind of hook ([`Access`]), a type parameter of every pointer type:
//! - [`Direct`]: BTF-typed programs (tp_btf, fentry/fexit) get their arguments as typed
//!   kernel pointers, and the verifier checks each load against the kernel's own types.
//!   Because [`LAYOUT`](crate::globals::LAYOUT) sits in frozen read-only data, the verifier knows every offset as
//!   a constant, so a field is one load instruction.
//! - [`Probe`]: raw tracepoints and kprobes see untyped addresses: each field is a
//!   `bpf_probe_read_kernel`.
//!
//! Both keep a connection's state in the same LRU hash (`maps::conn_state`).
use core::marker::PhantomData;

use core::mem::{size_of, MaybeUninit};

use aya_ebpf::{helpers::generated as gen, macros::map, maps::PerCpuArray};
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

/// Whether this kernel has a member: one load, where `layout!` reads the whole `Field`.
macro_rules! present {
    ($field:ident) => {{
        #[allow(unused_unsafe)]
        // SAFETY: as for `layout!`.
        let present = unsafe { core::ptr::read_volatile(&$crate::globals::LAYOUT.$field.present) };
        present != 0
    }};
}
pub(crate) use present;

/// The offset of a member userspace checked has one shape on this kernel: one load of
/// `LAYOUT.$field.off`, where `layout!` reads the whole `Field`.
macro_rules! offset {
    ($field:ident) => {{
        // SAFETY: as for `layout!`.
        unsafe { core::ptr::read_volatile(&$crate::globals::LAYOUT.$field.off) }
    }};
}

/// One accessor of a pointer type, by how the table reads the member (see
/// `tfo_trace_common::kernel_structs!`).
macro_rules! accessor {
    // One bit at a byte load's `shift` (userspace gives it only as one bit of one byte).
    ($name:ident bit) => {
        #[inline(always)]
        pub fn $name(self) -> bool {
            // SAFETY: as for `layout!`.
            let (off, shift) = unsafe {
                let f = &$crate::globals::LAYOUT.$name;
                (core::ptr::read_volatile(&f.off), core::ptr::read_volatile(&f.shift))
            };
            (A::load::<u8>(self.addr, off) >> (shift & 7)) & 1 != 0
        }
    };
    // Decoded at run time from the whole Field; 0 where this kernel has no such member.
    ($name:ident int) => {
        #[inline(always)]
        pub fn $name(self) -> u64 {
            int::<A>(self.addr, layout!($name))
        }
    };
    // The same, `$absent` where this kernel has no such member (the Field read once).
    ($name:ident (int or $absent:literal)) => {
        #[inline(always)]
        pub fn $name(self) -> i64 {
            let f = layout!($name);
            if f.present == 0 {
                return $absent;
            }
            int::<A>(self.addr, f) as i64
        }
    };
    // An IPv6 address: two 8-byte loads.
    ($name:ident addr16) => {
        #[inline(always)]
        pub fn $name(self) -> [u64; 2] {
            words16::<A>(self.addr, layout!($name))
        }
    };
    ($name:ident (ptr $to:ident)) => {
        #[inline(always)]
        pub fn $name(self) -> $to<A> {
            $to::at(A::load::<u64>(self.addr, offset!($name)) as *const u8)
        }
    };
    ($name:ident (inner $to:ident)) => {
        #[inline(always)]
        pub fn $name(self) -> $to<A> {
            $to::at(self.addr.wrapping_add(layout!($name).off as usize))
        }
    };
    // One load of exactly the declared type's size (userspace refuses, or leaves absent, a
    // member of another size).
    ($name:ident $int:ty) => {
        #[inline(always)]
        pub fn $name(self) -> $int {
            A::load::<$int>(self.addr, offset!($name))
        }
    };
}

/// A pointer type per kernel struct, and an accessor per member, from the one table
/// (`tfo_trace_common::kernel_structs!`): a member is read off its own struct only, at
/// its declared width, the way `A` reads the kernel.
macro_rules! kernel_types {
    (
        structs { $( $strukt:ident $btf:literal, )* }
        fields { $( $name:ident : $owner:ident $read:tt $req:ident [$($path:literal),+]; )* }
    ) => {
        $(
            #[doc = concat!("A `struct ", $btf, " *`, read the way `A` reads the kernel.")]
            #[repr(transparent)]
            pub struct $strukt<A> {
                addr: *const u8,
                access: PhantomData<A>,
            }

            impl<A> Clone for $strukt<A> {
                #[inline(always)]
                fn clone(&self) -> Self {
                    *self
                }
            }

            impl<A> Copy for $strukt<A> {}

            // Not every struct needs all of these (a member nothing reads is still a
            // warning: its accessor's).
            #[allow(dead_code)]
            impl<A> $strukt<A> {
                /// The struct at `addr` (null: none).
                #[inline(always)]
                pub fn at(addr: *const u8) -> Self {
                    $strukt { addr, access: PhantomData }
                }

                #[inline(always)]
                pub fn null() -> Self {
                    Self::at(core::ptr::null())
                }

                #[inline(always)]
                pub fn is_null(self) -> bool {
                    self.addr.is_null()
                }

                /// Its address, as a map key or to compare.
                #[inline(always)]
                pub fn addr(self) -> u64 {
                    self.addr as u64
                }
            }
        )*
        $(
            impl<A: Access> $owner<A> {
                accessor!($name $read);
            }
        )*
    };
}

tfo_trace_common::kernel_structs!(kernel_types);

impl<A> Sock<A> {
    /// Its `struct sock_common` (`__sk_common`, where it starts).
    #[inline(always)]
    pub fn common(self) -> SockCommon<A> {
        SockCommon::at(self.addr)
    }
}

impl<A> RequestSock<A> {
    /// Its `struct sock_common` (`__req_common`, where it starts): the SYN's addresses and
    /// ports, the server's as the source.
    #[inline(always)]
    pub fn common(self) -> SockCommon<A> {
        SockCommon::at(self.addr)
    }

    /// The `struct tcp_request_sock` it is the start of, read with probe reads whatever
    /// the hook: a BTF-typed program's direct load may not reach past the end of the
    /// `struct request_sock` the hook's argument is typed as.
    #[inline(always)]
    pub fn tcp_request(self) -> TcpRequestSock<Probe> {
        TcpRequestSock::at(self.addr)
    }
}

pub const IPPROTO_TCP: u64 = 6;
const AF_INET: u64 = 2;
const AF_INET6: u64 = 10;

// enum tcp_state (include/net/tcp_states.h): stable uapi numbers.
pub const TCP_ESTABLISHED: i32 = 1;
pub const TCP_SYN_SENT: i32 = 2;
pub const TCP_SYN_RECV: i32 = 3;
pub const TCP_FIN_WAIT1: i32 = 4;
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
    fn tcp_view(sk: Sock<Self>) -> TcpSock<Self>;

    /// The socket as a `struct tcp_sock`, or null when it is not a TCP socket.
    #[inline(always)]
    fn tcp_sock(sk: Sock<Self>) -> TcpSock<Self> {
        if is_tcp(sk) {
            Self::tcp_view(sk)
        } else {
            TcpSock::null()
        }
    }
    /// `size_of::<T>()` bytes at `base + off`; 0 when unreadable. (No Option here: the BPF
    /// backend turned the payload of a `None` into a read of an unset register, which the
    /// verifier refuses.) The pointer types' accessors call it; handlers do not.
    fn load<T: Copy + Default>(base: *const u8, off: u32) -> T;
}

/// BTF-typed programs: direct loads.
pub struct Direct;

impl Access for Direct {
    const TYPED: bool = true;

    /// The hooks that use it see full sockets only (a state change, a retransmission, a
    /// listener or TFO child), so the protocol is all there is to check ([`is_tcp`]).
    #[inline(always)]
    fn tcp_view(sk: Sock<Self>) -> TcpSock<Self> {
        TcpSock::at(cast_to_tcp_sock(sk.addr))
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
    fn tcp_view(sk: Sock<Self>) -> TcpSock<Self> {
        TcpSock::at(sk.addr)
    }

    /// Without a branch on the helper's result: the kernel zeroes the destination when the
    /// read faults (bpf_probe_read_kernel_common(), every kernel since the helper came in
    /// 5.5), which is the 0 `load` promises. A branch per read (`unwrap_or_default`) split
    /// the verifier's paths at every read, and the verifiers before 6.3 could not prune
    /// them again: the raw state-change program walked 937,376 of 5.10's limit of
    /// 1,000,000 instructions (8.7 s in an emulated guest; 873,309 on 6.1), its BTF-typed
    /// twin 20,636. Without the branch: 24,041 instructions, 0.26 s.
    #[inline(always)]
    fn load<T: Copy + Default>(base: *const u8, off: u32) -> T {
        let mut value = MaybeUninit::<T>::uninit();
        // SAFETY: the helper checks the source address and writes all size_of::<T>() bytes
        // of `value`: the kernel's, or zeros where they cannot be read.
        unsafe {
            gen::bpf_probe_read_kernel(
                value.as_mut_ptr().cast(),
                size_of::<T>() as u32,
                base.wrapping_add(off as usize).cast(),
            );
            value.assume_init()
        }
    }
}

/// Whether a socket is a TCP one (a u16 `sk_protocol` on every supported kernel, 5.6+).
#[inline(always)]
pub fn is_tcp<A: Access>(sk: Sock<A>) -> bool {
    !sk.is_null() && sk.sk_protocol() as u64 == IPPROTO_TCP
}

/// An integer field (or bitfield) widened to u64; 0 when this kernel has no such field.
/// For the members some kernels lack or size differently (`int` in the table); the
/// others are one load at their declared width.
#[inline(always)]
fn int<A: Access>(base: *const u8, f: Field) -> u64 {
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

/// A 16-byte field (an IPv6 address), in two 8-byte loads.
#[inline(always)]
fn words16<A: Access>(base: *const u8, f: Field) -> [u64; 2] {
    [A::load(base, f.off), A::load(base, f.off + 8)]
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
pub fn netns_of<A: Access>(sk: SockCommon<A>) -> u32 {
    let net = sk.skc_net();
    if net.is_null() {
        return 0;
    }
    if !present!(net_cookie) {
        return net.net_ns_inum();
    }
    let cookie = net.net_cookie();
    let Some(seen) = NETNS_SEEN.get_ptr_mut(0) else {
        return net.net_ns_inum();
    };
    // SAFETY: this CPU's slot, used only within this program run.
    let seen = unsafe { &mut *seen };
    if seen.net == net.addr() && seen.cookie == cookie && cookie != 0 {
        return seen.inum;
    }
    let inum = net.net_ns_inum();
    *seen = NetnsSeen { net: net.addr(), cookie, inum, _pad: 0 };
    inum
}

/// The name of the process the program runs in: its thread group leader's comm, as
/// /proc/PID/comm shows it, where bpf_get_current_comm gives the calling thread's (a
/// worker's `connworker`). Read at connect() and listen() of TFO sockets only: a helper
/// call and three probe reads.
#[inline(always)]
pub fn process_name() -> [u64; 2] {
    // SAFETY: helper without preconditions; its result is only probe-read.
    let task = TaskStruct::<Probe>::at(unsafe { gen::bpf_get_current_task() } as *const u8);
    tfo_trace_common::cleared_after_nul(task.task_group_leader().task_comm())
}

/// The state of a socket (sk_state).
#[inline(always)]
pub fn state_of<A: Access>(sk: SockCommon<A>) -> i32 {
    sk.skc_state() as i32
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
pub fn family_of<A: Access>(sk: SockCommon<A>) -> u8 {
    match sk.skc_family() as u64 {
        AF_INET => FAMILY_V4,
        AF_INET6 => FAMILY_V6,
        _ => 0,
    }
}

/// The 4-tuple as the socket holds it once connected (ports in host order). A request
/// sock's (`RequestSock::common`) too.
#[inline(always)]
pub fn tuple_of<A: Access>(sk: SockCommon<A>) -> Tuple {
    let family = sk.skc_family() as u64;
    let mut t = Tuple {
        family: 0,
        saddr: [0; 2],
        daddr: [0; 2],
        sport: sk.skc_num(),
        dport: u16::from_be(sk.skc_dport()),
    };
    if family == AF_INET {
        t.family = FAMILY_V4;
        // Little-endian words: the address's four bytes, as loaded, are the low half.
        t.saddr[0] = sk.skc_rcv_saddr() as u64;
        t.daddr[0] = sk.skc_daddr() as u64;
    } else if family == AF_INET6 {
        t.family = FAMILY_V6;
        t.saddr = sk.skc_v6_rcv_saddr();
        t.daddr = sk.skc_v6_daddr();
    }
    t
}
