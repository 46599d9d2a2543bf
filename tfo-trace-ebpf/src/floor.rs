//! Empty programs on the attach points of the tracepoint backends: the benchmark's floor,
//! what any program there costs before it does anything (`tfo-trace floor`).
use aya_ebpf::{
    macros::{btf_tracepoint, raw_tracepoint},
    programs::{BtfTracePointContext, RawTracePointContext},
};

#[btf_tracepoint(function = "inet_sock_set_state")]
pub fn floor_state(_ctx: BtfTracePointContext) -> i32 {
    0
}

#[btf_tracepoint(function = "tcp_retransmit_skb")]
pub fn floor_retransmit(_ctx: BtfTracePointContext) -> i32 {
    0
}

#[btf_tracepoint(function = "tcp_retransmit_synack")]
pub fn floor_synack_retransmit(_ctx: BtfTracePointContext) -> i32 {
    0
}

#[raw_tracepoint(tracepoint = "inet_sock_set_state")]
pub fn floor_state_raw(_ctx: RawTracePointContext) -> i32 {
    0
}

#[raw_tracepoint(tracepoint = "tcp_retransmit_skb")]
pub fn floor_retransmit_raw(_ctx: RawTracePointContext) -> i32 {
    0
}

#[raw_tracepoint(tracepoint = "tcp_retransmit_synack")]
pub fn floor_synack_retransmit_raw(_ctx: RawTracePointContext) -> i32 {
    0
}
