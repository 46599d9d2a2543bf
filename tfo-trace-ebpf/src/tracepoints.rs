//! Raw tracepoint entry points: the fallback where BTF-typed tracepoints do not load.
//! Raw tracepoints take the TP_PROTO arguments as plain addresses (fields are read with
//! bpf_probe_read_kernel) and need no tracefs mount.
use aya_ebpf::{macros::raw_tracepoint, programs::RawTracePointContext};

use crate::{
    handlers::{on_retransmit, on_state_change, on_synack_retransmit},
    kernel::{Probe, RequestSock, Sock},
};

/// TP_PROTO(const struct sock *sk, const int oldstate, const int newstate)
#[raw_tracepoint(tracepoint = "inet_sock_set_state")]
#[inline(always)] // into the entry point: no bpf-to-bpf call per run
pub fn tfo_state_raw(ctx: RawTracePointContext) -> i32 {
    let old: u64 = ctx.arg(1);
    let new: u64 = ctx.arg(2);
    on_state_change::<Probe>(Sock::at(ctx.arg(0)), old as i32, new as i32);
    0
}

/// TP_PROTO(const struct sock *sk, const struct sk_buff *skb[, int err])
#[raw_tracepoint(tracepoint = "tcp_retransmit_skb")]
#[inline(always)] // into the entry point: no bpf-to-bpf call per run
pub fn tfo_retransmit_raw(ctx: RawTracePointContext) -> i32 {
    on_retransmit::<Probe>(Sock::at(ctx.arg(0)));
    0
}

/// TP_PROTO(const struct sock *sk, const struct request_sock *req)
#[raw_tracepoint(tracepoint = "tcp_retransmit_synack")]
#[inline(always)] // into the entry point: no bpf-to-bpf call per run
pub fn tfo_synack_retransmit_raw(ctx: RawTracePointContext) -> i32 {
    on_synack_retransmit::<Probe>(Sock::at(ctx.arg(0)), RequestSock::at(ctx.arg(1)));
    0
}
