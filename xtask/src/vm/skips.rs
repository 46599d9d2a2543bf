//! The skips a VM cell may report: one table, each entry with why.
//!
//! Inside a guest the tests have all they need (root, BTF, the lab's modules, the host's
//! `ip`, `tc`, `nft`, `nstat`, `tcpdump` and dnsmasq), so a test that says it cannot run
//! there, wholly (`ignored (REASON)`) or in part (the harness's `partial: NAME: REASON`),
//! is either a known fact of that kernel or backend, listed here, or a regression: a module
//! that did not load (netem: the delay tests would skip), a backend that lost a hook. A skip
//! not on this list fails its cell.

/// One kind of skip a cell may report.
#[derive(Debug)]
pub(super) struct AllowedSkip {
    /// Kernel series (`5.10`, as `--kernel` takes it), any architecture; empty: every one.
    pub(super) kernels: &'static [&'static str],
    /// Cells (backends, or `lab`); empty: every one.
    pub(super) cells: &'static [&'static str],
    /// `module::test`, the test's name in the integration executable (a prefix: `module::`
    /// for every test of it); empty: any test.
    pub(super) test: &'static str,
    /// A part of the reason the test gives.
    pub(super) reason: &'static str,
    /// Why that cannot run there.
    pub(super) why: &'static str,
}

pub(super) const ALLOWED_SKIPS: &[AllowedSkip] = &[
    AllowedSkip {
        kernels: &[],
        cells: &["tracepoint"],
        test: "",
        reason: "is not visible to the tracepoint backend",
        why: "the tracepoint backends are blind to some outcomes (tfo-trace/src/backends, TRACEPOINT_BLIND); the fentry \
              and kprobe cells check them",
    },
    AllowedSkip {
        kernels: &[],
        cells: &["raw-tracepoint"],
        test: "",
        reason: "is not visible to the raw-tracepoint backend",
        why: "the tracepoint backends are blind to some outcomes (tfo-trace/src/backends, TRACEPOINT_BLIND); the fentry \
              and kprobe cells check them",
    },
    AllowedSkip {
        kernels: &["5.10", "6.1", "6.12"],
        cells: &["tracepoint", "raw-tracepoint"],
        test: "server_speaks_first::",
        reason: "is not visible to the state hook on a kernel without syn_fastopen_child",
        why: "the VM kernels' tcp_sock has no syn_fastopen_child (the host's 6.18 has), and syn_data_acked marks \
              only children made from SYN-data: a TFO child made from a cookie without data leaves SYN_RECV like \
              a plain one; the fentry and kprobe cells check it",
    },
    AllowedSkip {
        kernels: &["5.10"],
        cells: &["lab"],
        test: "kernel_facts::every_backend_verifies_far_below_the_kernel_s_limit",
        reason: "does not report the instructions it verified",
        why: "bpf_prog_info.verified_insns came in 5.16",
    },
];

/// The entry that allows `reason` from `module::test` in `cell` of `kernel` (a cell's
/// kernel label: `5.10`, `5.10-arm64`), if any.
pub(super) fn allowed(
    kernel: &str,
    cell: &str,
    module: &str,
    test: &str,
    reason: &str,
) -> Option<&'static AllowedSkip> {
    let series = kernel.split('-').next().unwrap_or(kernel);
    let name = format!("{module}::{test}");
    ALLOWED_SKIPS.iter().find(|a| {
        (a.kernels.is_empty() || a.kernels.contains(&series))
            && (a.cells.is_empty() || a.cells.contains(&cell))
            && name.starts_with(a.test)
            && reason.contains(a.reason)
    })
}

#[cfg(test)]
mod tests {
    use super::allowed;

    #[test]
    fn only_listed_skips_are_allowed() {
        let blind = "server cookie_invalid is not visible to the tracepoint backend";
        assert!(allowed("5.10", "tracepoint", "report", "x", blind).is_some());
        assert!(allowed("6.12-arm64", "tracepoint", "server_outcomes", "y", blind).is_some());
        assert!(allowed("5.10", "fentry", "report", "x", blind).is_none(), "fentry sees every outcome");
        let figure =
            "this kernel does not report the instructions it verified (bpf_prog_info.verified_insns, 5.16+)";
        let t = "every_backend_verifies_far_below_the_kernel_s_limit";
        assert!(allowed("5.10-arm64", "lab", "kernel_facts", t, figure).is_some());
        assert!(allowed("6.1", "lab", "kernel_facts", t, figure).is_none(), "6.1 reports it");
        let netem =
            "each stall told apart from its handshake: this kernel has no netem (CONFIG_NET_SCH_NETEM)";
        assert!(
            allowed("5.10", "tracepoint", "stalls", "a", netem).is_none(),
            "the VM kernels load sch_netem"
        );
    }
}
