//! fentry/fexit backend entry points (BPF trampolines, 5.5+; refused on some kernels, see
//! `doctor`). Typed arguments: direct loads. Only TFO's own functions, plus the error end
//! of a connection and a listener's start and stop: a plain client connection runs none
//! of these programs, a plain server connection one (the SYN at tcp_try_fastopen). SYN-ACK
//! resends come from the tp_btf hook.
use aya_ebpf::{
    macros::{fentry, fexit},
    programs::{FEntryContext, FExitContext},
};

use crate::{
    client::{on_active_disable, on_error_end, on_syn_prepared, on_synack, on_timeout, ECONNREFUSED},
    kernel::{Direct, FastopenCookie, RequestSock, SkBuff, Sock},
    server::{on_listen_start, on_listen_stop, try_fastopen_fexit, CallArgs},
};

/// struct sock *tcp_try_fastopen(struct sock *sk, struct sk_buff *skb,
///     struct request_sock *req, struct tcp_fastopen_cookie *foc, const struct dst_entry *dst)
#[fexit(function = "tcp_try_fastopen")]
pub fn tfo_try_fastopen_fexit(ctx: FExitContext) -> u32 {
    // fexit sees the arguments, then the return value.
    let args = CallArgs {
        sk: Sock::at(ctx.arg(0)),
        req: RequestSock::at(ctx.arg(2)),
        foc: FastopenCookie::at(ctx.arg(3)),
    };
    try_fastopen_fexit::<Direct>(args, SkBuff::at(ctx.arg(1)), Sock::at(ctx.arg(5)));
    0
}

/// bool tcp_fastopen_cookie_check(struct sock *sk, u16 *mss, struct tcp_fastopen_cookie *cookie)
#[fexit(function = "tcp_fastopen_cookie_check")]
pub fn tfo_syn_prepared_fexit(ctx: FExitContext) -> u32 {
    // A bool return: only its low byte is defined.
    let sent: u8 = ctx.arg(3);
    on_syn_prepared::<Direct>(Sock::at(ctx.arg(0)), FastopenCookie::at(ctx.arg(2)), sent != 0);
    0
}

/// void tcp_fastopen_active_detect_blackhole(struct sock *sk, bool expired)
#[fentry(function = "tcp_fastopen_active_detect_blackhole")]
pub fn tfo_timeout_fentry(ctx: FEntryContext) -> u32 {
    let expired: u8 = ctx.arg(1);
    on_timeout::<Direct>(Sock::at(ctx.arg(0)), expired != 0);
    0
}

/// void tcp_fastopen_active_disable(struct sock *sk)
#[fentry(function = "tcp_fastopen_active_disable")]
pub fn tfo_active_disable_fentry(ctx: FEntryContext) -> u32 {
    on_active_disable::<Direct>(Sock::at(ctx.arg(0)));
    0
}

/// void tcp_fastopen_cache_set(struct sock *sk, u16 mss, struct tcp_fastopen_cookie *cookie,
///     bool syn_lost, u16 try_exp)
#[fentry(function = "tcp_fastopen_cache_set")]
pub fn tfo_cookie_cached_fentry(ctx: FEntryContext) -> u32 {
    on_synack::<Direct>(Sock::at(ctx.arg(0)), FastopenCookie::at(ctx.arg(2)));
    0
}

/// void tcp_done_with_error(struct sock *sk, int err) (6.1+ on the kernels checked)
#[fentry(function = "tcp_done_with_error")]
pub fn tfo_error_end_fentry(ctx: FEntryContext) -> u32 {
    let err: i32 = ctx.arg(1);
    on_error_end::<Direct>(Sock::at(ctx.arg(0)), err);
    0
}

/// void tcp_reset(struct sock *sk[, struct sk_buff *skb]): where tcp_done_with_error is absent.
#[fentry(function = "tcp_reset")]
pub fn tfo_reset_fentry(ctx: FEntryContext) -> u32 {
    on_error_end::<Direct>(Sock::at(ctx.arg(0)), ECONNREFUSED);
    0
}

/// int inet_csk_listen_start(struct sock *sk[, int backlog])
#[fexit(function = "inet_csk_listen_start")]
pub fn tfo_listen_start_fexit(ctx: FExitContext) -> u32 {
    on_listen_start::<Direct>(Sock::at(ctx.arg(0)));
    0
}

/// void inet_csk_listen_stop(struct sock *sk)
#[fentry(function = "inet_csk_listen_stop")]
pub fn tfo_listen_stop_fentry(ctx: FEntryContext) -> u32 {
    on_listen_stop::<Direct>(Sock::at(ctx.arg(0)));
    0
}
