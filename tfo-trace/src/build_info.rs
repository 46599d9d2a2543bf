//! What this binary is, from build.rs: its version, the commit it was built from
//! (`-dirty` when `cargo xtask dist` built it with uncommitted changes; `unknown` outside
//! git), the target it was built for (`x86_64-unknown-linux-musl`: a static binary) and
//! the SHA-256 of the eBPF object embedded in it. Two hosts whose `tfo-trace --version`
//! match run the same kernel programs.

/// `tfo-trace --version` (clap puts the name first).
pub const LONG_VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    "\ncommit: ",
    env!("TFO_TRACE_COMMIT"),
    "\ntarget: ",
    env!("TFO_TRACE_TARGET"),
    "\nebpf:   sha256:",
    env!("TFO_TRACE_EBPF_SHA256"),
);
