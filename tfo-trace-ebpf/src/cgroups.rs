//! Cgroups as they are made and removed (`cgroup:cgroup_mkdir`, `cgroup:cgroup_rmdir`):
//! userspace names a container's events from its first connection on, and a container
//! that lived 70 ms as well as one that lives for days, without walking the hierarchy
//! after it. These run on a mkdir or rmdir of a cgroup, never on a connection.
//!
//! TP_PROTO(struct cgroup *cgrp, const char *path) (include/trace/events/cgroup.h, the
//! same in 5.10, 6.1, 6.12 and 6.18); `path` is cgroup_path() of the cgroup in its own hierarchy
//! (kernel/cgroup/cgroup.c, TRACE_CGROUP_PATH). Raw tracepoints: the arguments need no
//! BTF and no tracefs, and every backend attaches the same two programs.
use aya_ebpf::{
    bindings::BPF_RB_FORCE_WAKEUP,
    helpers::generated::bpf_probe_read_kernel_str,
    macros::{map, raw_tracepoint},
    maps::RingBuf,
    programs::RawTracePointContext,
};
use tfo_trace_common::{cgroup_event, counter, CgroupEvent, CGROUP_PATH_LEN};

use crate::{
    kernel::{present, Cgroup, Probe},
    maps::bump,
};

/// Cgroup records, apart from `EVENTS`: few (one per mkdir or rmdir), each waking the
/// reader at once, since a short-lived container's runtime state is gone soon after it.
#[map]
pub static CGROUP_EVENTS: RingBuf = RingBuf::with_byte_size(256 << 10, 0);

#[raw_tracepoint(tracepoint = "cgroup_mkdir")]
pub fn tfo_cgroup_mkdir(ctx: RawTracePointContext) -> i32 {
    on_cgroup(Cgroup::at(ctx.arg(0)), ctx.arg(1), cgroup_event::MADE);
    0
}

#[raw_tracepoint(tracepoint = "cgroup_rmdir")]
pub fn tfo_cgroup_rmdir(ctx: RawTracePointContext) -> i32 {
    on_cgroup(Cgroup::at(ctx.arg(0)), ctx.arg(1), cgroup_event::REMOVED);
    0
}

#[inline(always)]
fn on_cgroup(cgrp: Cgroup<Probe>, path: *const u8, kind: u32) {
    if !present!(cgroup_kn) || !present!(cgroup_root) || !present!(kernfs_node_id) {
        return;
    }
    // Only the v2 hierarchy (hierarchy_id 0): bpf_get_current_cgroup_id() names a cgroup
    // there, and a v1 hierarchy's ids are another numbering (a hybrid host makes a
    // docker container's directory in each).
    let root = cgrp.cgroup_root();
    if root.is_null() || root.cgroup_root_hierarchy_id() != 0 {
        return;
    }
    let id = cgrp.cgroup_kn().kernfs_node_id();
    if id == 0 {
        return;
    }
    let Some(mut entry) = CGROUP_EVENTS.reserve::<CgroupEvent>(0) else {
        bump(counter::CGROUP_EVENTS_LOST);
        return;
    };
    let ev = entry.as_mut_ptr();
    // SAFETY: the reservation is a CgroupEvent-sized slot we own until submit; the fields
    // are written through raw pointers (no reference to the unwritten path bytes), and the
    // helper writes at most CGROUP_PATH_LEN bytes into `path`, NUL included.
    unsafe {
        core::ptr::addr_of_mut!((*ev).id).write(id);
        core::ptr::addr_of_mut!((*ev).kind).write(kind);
        let dst = core::ptr::addr_of_mut!((*ev).path) as *mut core::ffi::c_void;
        let n = bpf_probe_read_kernel_str(dst, CGROUP_PATH_LEN as u32, path as *const core::ffi::c_void);
        let len = if n > 0 { n as u32 - 1 } else { 0 };
        core::ptr::addr_of_mut!((*ev).path_len).write(len);
    }
    entry.submit(BPF_RB_FORCE_WAKEUP as u64);
}
