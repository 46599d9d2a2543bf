//! kprobe/kretprobe backend entry points: the twins of fentry.rs where trampolines are
//! refused but kprobes exist. Untyped addresses: fields are read with
//! bpf_probe_read_kernel. The client side comes from the tp_btf hooks.
use aya_ebpf::{
    macros::{kprobe, kretprobe},
    programs::{ProbeContext, RetProbeContext},
};

use crate::{
    handlers::{detect_blackhole_enter, detect_blackhole_exit, on_cookie_cached},
    kernel::{FastopenCookie, Probe, RequestSock, SkBuff, Sock},
    server::{try_fastopen_enter, try_fastopen_exit, CallArgs},
};

#[kprobe]
pub fn tfo_try_fastopen_kprobe(ctx: ProbeContext) -> u32 {
    let (Some(sk), Some(skb), Some(req), Some(foc)) = (ctx.arg(0), ctx.arg(1), ctx.arg(2), ctx.arg(3)) else {
        return 0;
    };
    try_fastopen_enter::<Probe>(Sock::at(sk), SkBuff::at(skb), RequestSock::at(req), FastopenCookie::at(foc));
    0
}

#[kretprobe]
pub fn tfo_try_fastopen_kretprobe(ctx: RetProbeContext) -> u32 {
    let seen = CallArgs { sk: Sock::null(), req: RequestSock::null(), foc: FastopenCookie::null() };
    try_fastopen_exit::<Probe>(seen, Sock::at(ctx.ret()));
    0
}

#[kprobe]
pub fn tfo_blackhole_kprobe(ctx: ProbeContext) -> u32 {
    if let Some(sk) = ctx.arg(0) {
        detect_blackhole_enter::<Probe>(Sock::at(sk));
    }
    0
}

#[kretprobe]
pub fn tfo_blackhole_kretprobe(_ctx: RetProbeContext) -> u32 {
    detect_blackhole_exit::<Probe>(Sock::null());
    0
}

#[kprobe]
pub fn tfo_cookie_cached_kprobe(ctx: ProbeContext) -> u32 {
    if let (Some(sk), Some(cookie)) = (ctx.arg(0), ctx.arg(2)) {
        on_cookie_cached::<Probe>(Sock::at(sk), FastopenCookie::at(cookie));
    }
    0
}
