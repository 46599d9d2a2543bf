//! The benchmark's floor (`tfo-trace floor`, `fixtures` feature only): empty programs on
//! the attach points of a tracepoint backend, whose cost per connection is what attaching
//! anything there costs before a handler does any work; `cargo xtask bench` measures the
//! real programs against it. The programs are in the eBPF object only in this build
//! (tfo-trace-ebpf's `floor` feature).
use anyhow::{Context as _, Result};
use aya::{Ebpf, EbpfLoader};

use super::{attach_all, raise_memlock_rlimit, EBPF_OBJECT};
use crate::backends::{uses_btf, Backend, Hook, HookKind, PlainRuns};

/// Empty programs on the attach points of the BTF-typed (tp_btf) tracepoint backend.
const FLOOR_HOOKS: [Hook; 3] = [
    Hook {
        program: "floor_state",
        kind: HookKind::BtfTracepoint,
        target: "inet_sock_set_state",
        sees: &[],
        why: "",
        plain_runs: PlainRuns::PerStateChange,
    },
    Hook {
        program: "floor_retransmit",
        kind: HookKind::BtfTracepoint,
        target: "tcp_retransmit_skb",
        sees: &[],
        why: "",
        plain_runs: PlainRuns::PerRetransmission,
    },
    Hook {
        program: "floor_synack_retransmit",
        kind: HookKind::BtfTracepoint,
        target: "tcp_retransmit_synack",
        sees: &[],
        why: "",
        plain_runs: PlainRuns::PerSynackResend,
    },
];
const FLOOR_RAW_HOOKS: [Hook; 3] = [
    Hook {
        program: "floor_state_raw",
        kind: HookKind::RawTracepoint,
        target: "inet_sock_set_state",
        sees: &[],
        why: "",
        plain_runs: PlainRuns::PerStateChange,
    },
    Hook {
        program: "floor_retransmit_raw",
        kind: HookKind::RawTracepoint,
        target: "tcp_retransmit_skb",
        sees: &[],
        why: "",
        plain_runs: PlainRuns::PerRetransmission,
    },
    Hook {
        program: "floor_synack_retransmit_raw",
        kind: HookKind::RawTracepoint,
        target: "tcp_retransmit_synack",
        sees: &[],
        why: "",
        plain_runs: PlainRuns::PerSynackResend,
    },
];

/// Empty programs on the same tracepoints as `backend`'s state hooks, in the same flavour.
pub fn hooks(backend: Backend) -> &'static [Hook] {
    if uses_btf(backend) {
        &FLOOR_HOOKS
    } else {
        &FLOOR_RAW_HOOKS
    }
}

/// Loads the object and attaches the floor's programs for `backend`.
pub fn load(backend: Backend) -> Result<Ebpf> {
    raise_memlock_rlimit();
    let mut ebpf = EbpfLoader::new()
        .map_max_entries("EVENTS", 4096)
        .load(EBPF_OBJECT)
        .context("loading the eBPF object")?;
    attach_all(&mut ebpf, hooks(backend))?;
    Ok(ebpf)
}
