//! fentry/fexit backend entry points (BPF trampolines, 5.5+; refused on some kernels, see
//! `doctor`). Typed arguments: direct loads. The client side comes from the tp_btf hooks.
use aya_ebpf::{
    macros::{fentry, fexit},
    programs::{FEntryContext, FExitContext},
};

use crate::{
    handlers::{detect_blackhole_enter, detect_blackhole_exit, on_cookie_cached},
    kernel::{Direct, FastopenCookie, RequestSock, SkBuff, Sock},
    server::{try_fastopen_enter, try_fastopen_exit, CallArgs},
};

/// struct sock *tcp_try_fastopen(struct sock *sk, struct sk_buff *skb,
///     struct request_sock *req, struct tcp_fastopen_cookie *foc, const struct dst_entry *dst)
#[fentry(function = "tcp_try_fastopen")]
pub fn tfo_try_fastopen_fentry(ctx: FEntryContext) -> u32 {
    let (sk, skb, req, foc) = (
        Sock::at(ctx.arg(0)),
        SkBuff::at(ctx.arg(1)),
        RequestSock::at(ctx.arg(2)),
        FastopenCookie::at(ctx.arg(3)),
    );
    try_fastopen_enter::<Direct>(sk, skb, req, foc);
    0
}

#[fexit(function = "tcp_try_fastopen")]
pub fn tfo_try_fastopen_fexit(ctx: FExitContext) -> u32 {
    // fexit sees the arguments, then the return value.
    let args = CallArgs {
        sk: Sock::at(ctx.arg(0)),
        req: RequestSock::at(ctx.arg(2)),
        foc: FastopenCookie::at(ctx.arg(3)),
    };
    try_fastopen_exit::<Direct>(args, Sock::at(ctx.arg(5)));
    0
}

/// void tcp_fastopen_active_detect_blackhole(struct sock *sk, bool expired)
#[fentry(function = "tcp_fastopen_active_detect_blackhole")]
pub fn tfo_blackhole_fentry(ctx: FEntryContext) -> u32 {
    detect_blackhole_enter::<Direct>(Sock::at(ctx.arg(0)));
    0
}

#[fexit(function = "tcp_fastopen_active_detect_blackhole")]
pub fn tfo_blackhole_fexit(ctx: FExitContext) -> u32 {
    detect_blackhole_exit::<Direct>(Sock::at(ctx.arg(0)));
    0
}

/// void tcp_fastopen_cache_set(struct sock *sk, u16 mss, struct tcp_fastopen_cookie *cookie,
///     bool syn_lost, u16 try_exp)
#[fentry(function = "tcp_fastopen_cache_set")]
pub fn tfo_cookie_cached_fentry(ctx: FEntryContext) -> u32 {
    on_cookie_cached::<Direct>(Sock::at(ctx.arg(0)), FastopenCookie::at(ctx.arg(2)));
    0
}
