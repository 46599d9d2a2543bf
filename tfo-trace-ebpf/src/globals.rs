//! What userspace sets before load (`EbpfLoader::override_global`), in frozen read-only
//! data: the verifier sees each value as a constant and prunes the branches it rules out.
//! A module of its own, below both `kernel` (which reads the layout) and `maps` (which
//! reads the config), so neither imports the other for it.
use tfo_trace_common::KernelLayout;

/// Offsets of the kernel struct fields the handlers read, from this kernel's BTF.
#[no_mangle]
pub static LAYOUT: KernelLayout = KernelLayout::zeroed();

/// This kernel's BTF type id of `struct tcp_sock`: the second argument of the
/// bpf_rdonly_cast kfunc (`kernel::Direct::tcp_sock`), which the verifier needs as a constant.
#[no_mangle]
pub static TCP_SOCK_BTF_ID: u32 = 0;

/// Bits of `tfo_trace_common::config`.
#[no_mangle]
pub static CONFIG: u32 = 0;

/// Bytes of unread events at which an event wakes the reader: 1/4 of the `EVENTS` ring
/// (`maps::emit_with`). 0 (not set): every event wakes it.
#[no_mangle]
pub static WAKEUP_BYTES: u64 = 0;

/// The key of `tfo_trace_common::cookie_hash`, made by userspace for this run (never
/// written anywhere else): cookies are compared and counted by their keyed hashes.
#[no_mangle]
pub static COOKIE_KEY: [u64; 2] = [0; 2];

/// The kernel's HZ (jiffies per second), found by userspace: the blackhole pause's stamp
/// is in jiffies. 0 (not found): the pause's age is left unknown.
#[no_mangle]
pub static HZ: u32 = 0;

#[inline(always)]
pub fn hz() -> u32 {
    // SAFETY: as for CONFIG.
    unsafe { core::ptr::read_volatile(&HZ) }
}

#[inline(always)]
pub fn cookie_key() -> [u64; 2] {
    // SAFETY: as for CONFIG.
    unsafe { [core::ptr::read_volatile(&COOKIE_KEY[0]), core::ptr::read_volatile(&COOKIE_KEY[1])] }
}

#[inline(always)]
pub fn wakeup_bytes() -> u64 {
    // SAFETY: as for CONFIG.
    unsafe { core::ptr::read_volatile(&WAKEUP_BYTES) }
}

#[inline(always)]
pub fn tcp_sock_btf_id() -> u32 {
    // SAFETY: as for CONFIG.
    unsafe { core::ptr::read_volatile(&TCP_SOCK_BTF_ID) }
}

#[inline(always)]
pub fn config_has(bit: u32) -> bool {
    // SAFETY: CONFIG is a valid static; volatile only defeats constant folding (the
    // verifier folds it instead, from the frozen map, and prunes the dead branch).
    unsafe { core::ptr::read_volatile(&CONFIG) & bit != 0 }
}
