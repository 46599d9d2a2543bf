//! kprobe/kretprobe backend entry points: the twins of fentry.rs where trampolines are
//! refused but kprobes exist.
use aya_ebpf::{
    macros::{kprobe, kretprobe},
    programs::{ProbeContext, RetProbeContext},
};

use crate::{
    handlers::{detect_blackhole_enter, detect_blackhole_exit, on_cookie_cached},
    server::{try_fastopen_enter, try_fastopen_exit},
};

#[kprobe]
pub fn tfo_try_fastopen_kprobe(ctx: ProbeContext) -> u32 {
    let (Some(sk), Some(skb), Some(req), Some(foc)) = (ctx.arg(0), ctx.arg(1), ctx.arg(2), ctx.arg(3)) else {
        return 0;
    };
    try_fastopen_enter(sk, skb, req, foc);
    0
}

#[kretprobe]
pub fn tfo_try_fastopen_kretprobe(ctx: RetProbeContext) -> u32 {
    try_fastopen_exit(ctx.ret());
    0
}

#[kprobe]
pub fn tfo_blackhole_kprobe(ctx: ProbeContext) -> u32 {
    if let Some(sk) = ctx.arg(0) {
        detect_blackhole_enter(sk);
    }
    0
}

#[kretprobe]
pub fn tfo_blackhole_kretprobe(_ctx: RetProbeContext) -> u32 {
    detect_blackhole_exit();
    0
}

#[kprobe]
pub fn tfo_cookie_cached_kprobe(ctx: ProbeContext) -> u32 {
    if let (Some(sk), Some(cookie)) = (ctx.arg(0), ctx.arg(2)) {
        on_cookie_cached(sk, cookie);
    }
    0
}
