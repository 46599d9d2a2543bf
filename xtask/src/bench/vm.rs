//! `cargo xtask bench --vm` (issue 41): what the fentry backend costs a plain and a TFO
//! connection, measured where it loads, in a Debian 6.12 guest (this host refuses fentry),
//! as step 1 measures the host's backend: the same generator, the same per-run BPF
//! statistics ([`super::cost`]), the same round-by-round ratios ([`super::cost::Runs`]).
//!
//! The host builds tfo-trace and hands the guest ([`crate::vm::bench`]) this xtask, which
//! runs there as `bench-guest` ([`super::vm_guest::bench_guest`]): interleaved rounds of the floor (empty
//! programs on the state hooks), `trace --backend fentry`, `trace --backend tracepoint`
//! (the state-hook path every backend took before issue 41 item 1) and bpftrace's
//! one-liner, each over plain and TFO connections; then it prints the BENCHMARKS.md
//! section (vm_guest.rs) on the console, line by line behind [`LINE`], and the host
//! writes it between [`BEGIN`] and [`END`]. Under TCG absolute times mean little: the
//! section gives ratios to the floor of the same guest and round, and run counts.
use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};

use super::{
    config::{BenchArgs, Mode},
    env::{ensure_tool, qemu_pids},
    report::write_block,
};
use crate::util::{self, which};
use crate::vm::{
    bench::{run_in_guest, GuestBench},
    Resources,
};

pub(super) const BEGIN: &str = "<!-- cargo xtask bench --vm: begin -->";
pub(super) const END: &str = "<!-- cargo xtask bench --vm: end -->";
/// What marks a line of the section on the guest's console.
pub(super) const LINE: &str = "TFO-BENCH| ";
/// Rounds unless --rounds says otherwise: the whole run stays near ten minutes under TCG.
const VM_ROUNDS: u32 = 3;
/// The kinds of connection: plain closed by a RST (as the host bench's), plain closed by a
/// FIN at both ends (the healthy connection issue 41's targets speak of), TFO.
pub(super) const VM_MODES: [Mode; 3] = [Mode::Plain, Mode::PlainFin, Mode::Tfo];
/// The backend measured, and the guest's memory (bpftrace's libraries are 200 MiB of it).
pub(super) const BACKEND: &str = "fentry";
const MEMORY_MB: u32 = 2048;
/// The host stops a guest still running after this long (a stuck guest).
const GUEST_LIMIT: Duration = Duration::from_secs(45 * 60);

/// `bench-guest`: what the host tells the guest's run.
#[derive(clap::Args, Debug)]
pub struct GuestArgs {
    /// The tfo-trace release build (with `fixtures`: the floor and `lab-load`)
    #[arg(long)]
    pub bin: PathBuf,
    #[arg(long)]
    pub rounds: u32,
    #[arg(long)]
    pub seconds: u64,
    /// The accelerator qemu ran the guest with (said in the section)
    #[arg(long)]
    pub accel: String,
    /// The guest's memory, MiB (said in the section)
    #[arg(long)]
    pub memory_mb: u32,
    /// The host's command line (said in the section)
    #[arg(long)]
    pub command: String,
    /// What else the host ran at the start (said in the section)
    #[arg(long)]
    pub host_note: String,
    /// The kernel's Debian package (said in the section)
    #[arg(long)]
    pub kernel_package: String,
}

/// The host's side: build, boot the guest once, write its section.
pub(super) fn bench_vm(args: &BenchArgs, command: &str) -> Result<()> {
    let started = Instant::now();
    let bin = util::build_release_with_fixtures()?;
    let xtask = std::env::current_exe().context("finding this xtask's executable")?;
    ensure_tool("bpftool", "bpftool")?;
    let bpftool = which("bpftool").unwrap_or_else(|| PathBuf::from("/usr/sbin/bpftool"));
    // Without it on the host the guest says bpftrace was skipped, and why.
    if let Err(e) = ensure_tool("bpftrace", "bpftrace") {
        println!("bench: bpftrace not installed ({e:#}): the guest will skip it");
    }
    let bpftrace = which("bpftrace");
    let mut programs: Vec<&Path> = vec![&bpftool];
    programs.extend(bpftrace.as_deref());
    let loadavg = fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let loadavg = loadavg.split_whitespace().take(3).collect::<Vec<_>>().join(" ");
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let others = match qemu_pids() {
        p if p.is_empty() => "none".to_string(),
        p => format!("{} (pids {p:?})", p.len()),
    };
    let host_note = format!(
        "{cores} cores shared with other engineers' builds and VMs (not waited for); load average at the \
         start {loadavg}; other qemu VMs running at the start: {others}"
    );
    let accel = crate::vm::accel_name(args.accel);
    let rounds = args.rounds.unwrap_or(VM_ROUNDS);
    let mut argv: Vec<String> = vec![xtask.display().to_string(), "bench-guest".into()];
    for (flag, value) in [
        ("--bin", bin.display().to_string()),
        ("--rounds", rounds.to_string()),
        ("--seconds", args.seconds.to_string()),
        ("--accel", accel.to_string()),
        ("--memory-mb", MEMORY_MB.to_string()),
        ("--command", command.to_string()),
        ("--host-note", host_note),
    ] {
        argv.extend([flag.to_string(), value]);
    }
    let spec = GuestBench {
        exes: vec![&xtask, &bin],
        programs,
        argv,
        package_flag: "--kernel-package",
        resources: Resources { accel: args.accel, memory_mb: MEMORY_MB, smp: 1 },
        limit: GUEST_LIMIT,
    };
    let out = run_in_guest(&spec)?;
    let section: String = out
        .lines
        .iter()
        .filter_map(|l| l.strip_prefix(LINE))
        .map(|l| format!("{}\n", l.trim_end()))
        .collect();
    ensure!(
        section.starts_with(BEGIN) && section.trim_end().ends_with(END),
        "the guest printed no whole section"
    );
    println!("bench: the VM run took {:.0} s", started.elapsed().as_secs_f64());
    write_block(&args.output, BEGIN, END, &section, "bench --vm")
}
