//! Tracepoint backend entry points. Raw tracepoints take the TP_PROTO arguments
//! directly, which are stable across kernels, and need no tracefs mount.
use aya_ebpf::{macros::raw_tracepoint, programs::RawTracePointContext};

use crate::handlers::{on_retransmit, on_state_change, on_synack_retransmit};

/// TP_PROTO(const struct sock *sk, const int oldstate, const int newstate)
#[raw_tracepoint(tracepoint = "inet_sock_set_state")]
pub fn tfo_state(ctx: RawTracePointContext) -> i32 {
    let sk: *const u8 = ctx.arg(0);
    let old: u64 = ctx.arg(1);
    let new: u64 = ctx.arg(2);
    on_state_change(&ctx, sk, old as i32, new as i32);
    0
}

/// TP_PROTO(const struct sock *sk, const struct sk_buff *skb[, int err])
#[raw_tracepoint(tracepoint = "tcp_retransmit_skb")]
pub fn tfo_retransmit(ctx: RawTracePointContext) -> i32 {
    let sk: *const u8 = ctx.arg(0);
    on_retransmit(sk);
    0
}

/// TP_PROTO(const struct sock *sk, const struct request_sock *req)
#[raw_tracepoint(tracepoint = "tcp_retransmit_synack")]
pub fn tfo_synack_retransmit(ctx: RawTracePointContext) -> i32 {
    on_synack_retransmit(ctx.arg(0), ctx.arg(1));
    0
}
