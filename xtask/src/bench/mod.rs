//! `cargo xtask bench`: what tfo-trace costs, side by side with no tracer, with empty
//! programs on the same hooks (the floor) and with two bpftrace scripts, in one run on this
//! machine (issues 5 and 9).
//!
//! 1. Cost per connection: `tfo-trace lab-load` (clients and a listener in one process, on
//!    the loopback of a namespace made here) making plain TCP connections (connect, write,
//!    read, close) and TFO connections (sendto(MSG_FASTOPEN)), under every configuration,
//!    interleaved (mode by mode, configuration by configuration, round after round).
//!    Measured as CPU, not throughput (which swings by +-15 % on a shared VM): the
//!    generator's own user + system time (the TCP stack and the programs run in its
//!    context) plus the tracer's, per connection, over the untraced run of the same round;
//!    and BPF time: `kernel.bpf_stats_enabled=1`, run_time_ns of the tracer's programs
//!    (found by the prog_id lines in /proc/PID/fdinfo) over the generator's window.
//!    Beside them, what the CPU measure can resolve here: an untraced rerun in every round
//!    (the measure against itself), a fixed memory walk's CPU time per round (the host's
//!    speed, [`host`]), and the CPU ratio that the tracer's own clocks alone give (BPF time
//!    plus its process's CPU: a lower bound).
//! 2. A stalled reader: `export` with per-destination series (so events flow) stopped with
//!    SIGSTOP for the whole of a 10 s maximum-rate run: events lost (counted), and counts
//!    lost, which must be 0 (its series against the generator's TcpExtTCPFastOpenActive).
//! 3. Loss: with a 4096-byte ring buffer, the rate at which the first loss appears.
//! 4. Userspace: CPU per million events of `trace`, `top --batch`, `export`; VmHWM of
//!    `top --from` a generated recording of 1,000,000 destinations.
//!    And `report --from` a generated recording of 1,000,000 destinations with problems
//!    mixed in (text and JSON): peak RSS and wall time, also alone as `cargo xtask
//!    bench-report` (no root).
//! 5. Start-up: spawn to "programs attached" for tfo-trace; spawn to its tracepoints
//!    attached (seen by `bpftool perf list`) for bpftrace.
//!
//! `--busy` (`busy.rs`, issue 55) measures apart, in its own block of BENCHMARKS.md:
//! `top` beside a namespace of 10,000 and of 100,000 TIME_WAIT sockets while 1,000 new
//! listeners take connections: its snapshots, CPU and events lost, and its exit after
//! SIGTERM.
//!
//! One file per step: `cost.rs` (1), `stalled_reader.rs` (2), `loss.rs` (3), `scale.rs`
//! (4's replays; its CPU figures come from step 1's runs), start-up from every run's
//! attach; around them `env.rs` (the machine), `load.rs` (the generator), `tracer.rs` (the
//! tracers and tfo-trace's closing line), `config.rs` (what is compared), and `report.rs`
//! and `render.rs` (the figures, BENCHMARKS.md). `host.rs` measures the host itself;
//! `static_build.rs` is `cargo xtask bench-static`; `vm.rs` (the host's side) and `vm_guest.rs` (the guest's: rounds and section) are `--vm`
//! (step 1 for the fentry backend, in a 6.12 guest: its own section of BENCHMARKS.md).
//!
//! Everything is root-only and bounded: every generator run has a count and a time limit,
//! every tracer is stopped with SIGINT (SIGKILL after 60 s). The namespace, the sysctl,
//! a tracefs mount made here and the scratch directory are undone by `Drop for Env`.
use std::fs;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::util::{self, is_root, workspace_root};

mod busy;
mod config;
mod cost;
mod env;
mod host;
mod load;
mod loss;
mod render;
mod report;
mod scale;
mod stalled_reader;
mod static_build;
mod stats;
mod tracer;
mod vm;
mod vm_guest;

pub use config::BenchArgs;
use config::{Config, Mode};
use env::{ensure_tool, wait_for_qemu, Env};
use report::Report;
use scale::{report_scale, MILLION};
use stalled_reader::STALL;
use stats::median;
use tracer::Tracer;

pub use scale::bench_report;
pub use static_build::bench_static;
pub use vm::GuestArgs;
pub use vm_guest::bench_guest;

/// BENCHMARKS.md from this line on is written by hand and kept when the bench rewrites the
/// file above it.
const NOTES_MARKER: &str = "<!-- written by hand below: cargo xtask bench keeps it -->";

pub fn bench(args: &BenchArgs) -> Result<()> {
    if !is_root() {
        bail!("the benchmark loads eBPF programs and makes network namespaces: run it as root");
    }
    let command = format!("cargo xtask {}", std::env::args().skip(1).collect::<Vec<_>>().join(" "));
    if args.vm {
        return vm::bench_vm(args, &command);
    }
    if args.busy {
        let bin = util::build_release_with_fixtures()?;
        let env = Env::create(bin)?;
        return busy::bench_busy(&env, &args.output, &command);
    }
    let round_count = args.rounds.unwrap_or(11);
    // The floor's programs and the generator (`lab-load`) come with the `fixtures` feature.
    let bin = util::build_release_with_fixtures()?;
    ensure_tool("bpftrace", "bpftrace")?;
    ensure_tool("bpftool", "bpftool")?;

    let qemu_note = if args.no_wait { "not waited for (--no-wait)".to_string() } else { wait_for_qemu()? };
    let mut env = Env::create(bin)?;
    let loadavg = fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let loadavg = loadavg.split_whitespace().take(3).collect::<Vec<_>>().join(" ");
    println!("bench: load average {loadavg}; qemu: {qemu_note}");
    let started = Instant::now();

    let threads = match args.threads {
        Some(t) => t,
        None => load::fastest_threads(&env)?,
    };
    let window = Duration::from_secs(args.seconds);
    // The backend tfo-trace picks here; the floor is empty programs on its tracepoints.
    env.backend = Tracer::tfo_trace(&env.bin, Config::Trace, None, None)?.stop_backend()?;
    println!("bench: tfo-trace uses the {} backend here", env.backend);

    // 1 (and 4's CPU figures): interleaved rounds, every mode and configuration in each.
    let rounds = cost::rounds(&env, round_count, (&Mode::ALL, &Config::ALL), threads, window)?;

    // 2: the stalled reader.
    let stall = env.stalled_reader(threads)?;
    println!(
        "bench: stalled reader: {} TFO connections while stopped {:.0} s; {} events lost; kernel counted {} \
         accepted, export says {}",
        stall.connections,
        STALL.as_secs_f64(),
        stall.events_lost,
        stall.kernel_accepted,
        stall.exported_accepted
    );

    // 3: the rate at which a 4096-byte ring buffer starts losing events.
    let max_rate = median(rounds.runs[&(Mode::Tfo, Config::Untraced)].iter().map(|r| r.load.rate));
    let sweep = loss::ring_sweep(&env, threads, max_rate)?;

    // 4: a million distinct destinations through top's bounded tables.
    let million = env.million_destinations()?;
    println!(
        "bench: top --from {} events ({} destinations): peak RSS {:.1} MiB, evicted {}, {:.1} s",
        MILLION,
        MILLION,
        million.vm_hwm_kib as f64 / 1024.0,
        million.evicted.map(|e| e.to_string()).unwrap_or_else(|| "?".into()),
        million.seconds
    );

    // 5: report --from a million destinations, text and JSON.
    let report_scale = report_scale(&env.bin, &env.scratch)?;
    println!("bench: report --from {MILLION} destinations: {}", report_scale.figures());

    let qemu_note = if rounds.qemu_seen.is_empty() {
        qemu_note
    } else {
        format!("{qemu_note}; qemu started DURING the run (pids {:?}): figures are noisy", rounds.qemu_seen)
    };
    let report = Report {
        command,
        loadavg,
        line_transfer_ns: rounds.line_transfer_ns,
        fixed_work_ms: rounds.fixed_work_ms,
        qemu_note,
        backend: env.backend.clone(),
        threads,
        rounds: round_count,
        seconds: args.seconds,
        runs: rounds.runs,
        stall,
        sweep,
        million,
        report_scale,
        elapsed_s: started.elapsed().as_secs_f64(),
    };
    let text = report.render();
    println!("\n{text}");
    let out = workspace_root().join(&args.output);
    // What people wrote below the marker (the analysis of the figures) survives a rerun.
    let kept = fs::read_to_string(&out)
        .ok()
        .and_then(|old| old.find(NOTES_MARKER).map(|at| old[at..].to_string()))
        .unwrap_or_default();
    let text = if kept.is_empty() { text } else { format!("{}\n{kept}", text.trim_end()) };
    fs::write(&out, &text).with_context(|| format!("writing {}", out.display()))?;
    println!("bench: written to {}", out.display());
    env.restore_now();
    Ok(())
}
