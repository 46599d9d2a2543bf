//! The flags of `cargo xtask vm` ([`VmArgs`]), checked before anything is installed or
//! built, and what each guest gets from them.
use anyhow::{ensure, Result};
use clap::Args;

use super::arch::ArchChoice;
use super::cells::ONCE_CELL;
use super::kernels::KernelChoice;
use super::qemu::{Accel, Resources};

/// Default limit of one test inside the guest. The longest scenario takes about 30 s under
/// TCG on a busy 2-core machine of this project's kind: ten times that before a test is
/// called hung.
const TEST_LIMIT_S: u64 = 300;

#[derive(Args, Debug, Clone)]
pub struct VmArgs {
    /// Which Debian kernel(s) to boot
    #[arg(long, value_enum, default_value = "all")]
    pub kernel: KernelChoice,
    /// Which CPU architecture's kernels to boot
    #[arg(long, value_enum, default_value = "x86_64")]
    pub arch: ArchChoice,
    /// Only boot each kernel with a busybox /init that prints a marker and powers off: the
    /// architecture's plumbing (package, emulator, console, initramfs), no tests
    #[arg(long)]
    pub boot_only: bool,
    /// Tracer backends to run the backend-dependent tests with (TFO_TRACE_BACKEND in the VM)
    #[arg(long, value_delimiter = ',', default_value = "tracepoint,raw-tracepoint,fentry,kprobe")]
    pub backend: Vec<String>,
    /// Integration test modules to run (tests/integration/NAME.rs; default:
    /// kernel_scenarios, server_outcomes, stalls, report, refusal_causes,
    /// server_speaks_first per backend; lab, kernel_facts, names once per kernel)
    #[arg(long, value_delimiter = ',')]
    pub bins: Vec<String>,
    /// qemu accelerator; CI's budget is planned for TCG
    #[arg(long, value_enum, default_value = "tcg")]
    pub accel: Accel,
    /// Limit of one test inside the guest, in seconds (the test is killed and named past
    /// it; the host kills a guest silent for this long plus two minutes)
    #[arg(long, default_value_t = TEST_LIMIT_S)]
    pub test_limit_s: u64,
    /// Guest memory in MiB
    #[arg(long, default_value_t = 1024)]
    pub memory_mb: u32,
    /// vCPUs per guest
    #[arg(long, default_value_t = 1)]
    pub smp: u32,
    /// Guests at once (default: host cores / vCPUs per guest, at least 1)
    #[arg(long)]
    pub jobs: Option<usize>,
    /// Arguments for the integration tests inside the VM (a name filter, `--exact
    /// MODULE::TEST`, ...), after `--`
    #[arg(last = true)]
    pub filter: Vec<String>,
}

impl Default for VmArgs {
    fn default() -> Self {
        VmArgs {
            kernel: KernelChoice::All,
            arch: ArchChoice::X86_64,
            boot_only: false,
            backend: ["tracepoint", "raw-tracepoint", "fentry", "kprobe"].map(String::from).to_vec(),
            bins: Vec::new(),
            accel: Accel::Tcg,
            test_limit_s: TEST_LIMIT_S,
            memory_mb: 1024,
            smp: 1,
            jobs: None,
            filter: Vec::new(),
        }
    }
}

impl VmArgs {
    /// Rejects bad arguments before anything is installed or built.
    pub fn check(&self) -> Result<()> {
        for b in &self.backend {
            ensure!(
                ["tracepoint", "raw-tracepoint", "fentry", "kprobe", "auto"].contains(&b.as_str()),
                "unknown backend `{b}` (tracepoint, raw-tracepoint, fentry, kprobe, auto)"
            );
            ensure!(b != ONCE_CELL, "`{ONCE_CELL}` names the per-kernel cell, not a backend");
        }
        ensure!(self.smp >= 1, "--smp must be at least 1");
        ensure!(self.jobs != Some(0), "--jobs must be at least 1");
        ensure!(self.test_limit_s >= 10, "--test-limit-s below 10 s would call every test hung");
        Ok(())
    }

    /// What each guest gets.
    pub(super) fn resources(&self) -> Resources {
        Resources { accel: self.accel, memory_mb: self.memory_mb, smp: self.smp }
    }

    pub(super) fn jobs(&self) -> usize {
        self.jobs.unwrap_or_else(|| {
            let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
            (cores / self.smp as usize).max(1)
        })
    }
}
