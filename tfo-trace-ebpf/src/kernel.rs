//! Reading kernel structs through offsets that userspace found in this kernel's BTF.
use aya_ebpf::helpers::bpf_probe_read_kernel;
use tfo_trace_common::{Field, KernelLayout, FAMILY_V4, FAMILY_V6};

/// Filled in by userspace before load (`EbpfLoader::set_global`).
#[no_mangle]
pub static LAYOUT: KernelLayout = KernelLayout::zeroed();

/// Bits of `tfo_trace_common::config`, set by userspace before load.
#[no_mangle]
pub static CONFIG: u32 = 0;

#[inline(always)]
pub fn config_has(bit: u32) -> bool {
    // SAFETY: CONFIG is a valid static; volatile only defeats constant folding.
    unsafe { core::ptr::read_volatile(&CONFIG) & bit != 0 }
}

/// Reads one field description; volatile so the compiler cannot fold the zero initializer.
macro_rules! layout {
    ($field:ident) => {{
        // SAFETY: LAYOUT is a valid static; volatile only defeats constant folding.
        #[allow(unused_unsafe)] // the macro is also used inside unsafe blocks
        let field = unsafe { core::ptr::read_volatile(&$crate::kernel::LAYOUT.$field) };
        field
    }};
}
pub(crate) use layout;

pub const IPPROTO_TCP: u32 = 6;
const AF_INET: u16 = 2;
const AF_INET6: u16 = 10;

// enum tcp_state (include/net/tcp_states.h): stable uapi numbers.
pub const TCP_ESTABLISHED: i32 = 1;
pub const TCP_SYN_SENT: i32 = 2;
pub const TCP_SYN_RECV: i32 = 3;
pub const TCP_CLOSE: i32 = 7;
pub const TCP_LISTEN: i32 = 10;

/// Reads a whole field of type T at `base + field.off`; None when absent or unreadable.
#[inline(always)]
pub fn read<T>(base: *const u8, field: Field) -> Option<T> {
    if field.present == 0 {
        return None;
    }
    // SAFETY: bpf_probe_read_kernel checks the address; a bad one returns an error.
    unsafe { bpf_probe_read_kernel(base.wrapping_add(field.off as usize) as *const T).ok() }
}

/// Reads a bitfield (or a small whole field when `bits == 0`) as u32.
#[inline(always)]
pub fn read_bits(base: *const u8, field: Field) -> Option<u32> {
    let raw: u32 = read(base, field)?;
    if field.bits == 0 || field.bits >= 32 {
        return Some(raw);
    }
    Some((raw >> field.shift) & ((1u32 << field.bits) - 1))
}

#[inline(always)]
pub fn flag(sk: *const u8, field: Field) -> bool {
    read_bits(sk, field).unwrap_or(0) != 0
}

/// Network namespace inode of a socket: sk->__sk_common.skc_net.net->ns.inum.
#[inline(always)]
pub fn netns_of(sk: *const u8) -> u32 {
    let net: u64 = read(sk, layout!(skc_net)).unwrap_or(0);
    if net == 0 {
        return 0;
    }
    read(net as *const u8, layout!(net_ns_inum)).unwrap_or(0)
}

pub struct Tuple {
    pub family: u8,
    pub saddr: [u8; 16],
    pub daddr: [u8; 16],
    pub sport: u16,
    pub dport: u16,
}

/// The 4-tuple as the socket holds it once connected (ports in host order).
#[inline(always)]
pub fn tuple_of(sk: *const u8) -> Tuple {
    let family: u16 = read(sk, layout!(skc_family)).unwrap_or(0);
    let mut t = Tuple {
        family: 0,
        saddr: [0; 16],
        daddr: [0; 16],
        sport: read(sk, layout!(skc_num)).unwrap_or(0),
        dport: u16::from_be(read(sk, layout!(skc_dport)).unwrap_or(0)),
    };
    if family == AF_INET {
        t.family = FAMILY_V4;
        let s: [u8; 4] = read(sk, layout!(skc_rcv_saddr)).unwrap_or([0; 4]);
        let d: [u8; 4] = read(sk, layout!(skc_daddr)).unwrap_or([0; 4]);
        t.saddr[..4].copy_from_slice(&s);
        t.daddr[..4].copy_from_slice(&d);
    } else if family == AF_INET6 {
        t.family = FAMILY_V6;
        t.saddr = read(sk, layout!(skc_v6_rcv_saddr)).unwrap_or([0; 16]);
        t.daddr = read(sk, layout!(skc_v6_daddr)).unwrap_or([0; 16]);
    }
    t
}
