//! BTF-typed tracepoint entry points (tp_btf, 5.5+): the same tracepoints as the raw ones,
//! with typed arguments, so fields are direct loads the verifier checks. Every backend but
//! `raw-tracepoint` uses these.
use aya_ebpf::{macros::btf_tracepoint, programs::BtfTracePointContext};

use crate::{
    handlers::{on_retransmit, on_state_change, on_synack_retransmit},
    kernel::{Direct, RequestSock, Sock},
};

/// TP_PROTO(const struct sock *sk, const int oldstate, const int newstate)
#[btf_tracepoint(function = "inet_sock_set_state")]
#[inline(always)] // into the entry point: no bpf-to-bpf call per run
pub fn tfo_state(ctx: BtfTracePointContext) -> i32 {
    let old: i32 = ctx.arg(1);
    let new: i32 = ctx.arg(2);
    on_state_change::<Direct>(Sock::at(ctx.arg(0)), old, new);
    0
}

/// TP_PROTO(const struct sock *sk, const struct sk_buff *skb[, int err])
#[btf_tracepoint(function = "tcp_retransmit_skb")]
#[inline(always)] // into the entry point: no bpf-to-bpf call per run
pub fn tfo_retransmit(ctx: BtfTracePointContext) -> i32 {
    on_retransmit::<Direct>(Sock::at(ctx.arg(0)));
    0
}

/// TP_PROTO(const struct sock *sk, const struct request_sock *req)
#[btf_tracepoint(function = "tcp_retransmit_synack")]
#[inline(always)] // into the entry point: no bpf-to-bpf call per run
pub fn tfo_synack_retransmit(ctx: BtfTracePointContext) -> i32 {
    on_synack_retransmit::<Direct>(Sock::at(ctx.arg(0)), RequestSock::at(ctx.arg(1)));
    0
}
