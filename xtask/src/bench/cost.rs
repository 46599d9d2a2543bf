//! Step 1, the cost per connection: rounds in which every mode and configuration makes the
//! same load in turn, each measured as the generator's CPU plus the tracer's and as the
//! tracer programs' BPF time (run_time_ns, kernel.bpf_stats_enabled=1) over the
//! generator's window; with, once per round, what the host itself does ([`super::host`]).
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde_json::Value;

use super::{
    config::{Config, Mode},
    env::{qemu_pids, Env},
    host::{cache_line_transfer_ns, fixed_work_ms},
    load::Load,
    stats::{median, median_of_ratios, spread},
    tracer::{closing_line, Tracer},
};
use crate::util::capture;

/// run_time_ns and run_cnt of one program.
#[derive(Clone, Debug, Default)]
pub(super) struct ProgStat {
    pub(super) name: String,
    pub(super) run_time_ns: u64,
    pub(super) run_cnt: u64,
}

/// One measured run: a generator run under one configuration.
#[derive(Clone, Debug, Default)]
pub(super) struct Run {
    pub(super) load: Load,
    /// Spawn to attached, wall clock (ms).
    pub(super) attach_wall_ms: Option<f64>,
    /// What tfo-trace itself says ("in N ms").
    pub(super) attach_self_ms: Option<f64>,
    /// bpftrace only: spawn to its "Attaching N probes..." line (ms).
    pub(super) attaching_line_ms: Option<f64>,
    /// Deltas over the generator's window, per program.
    pub(super) progs: Vec<ProgStat>,
    /// CPU time of the tracer over the generator's window (s), from its CPU-time clock.
    pub(super) cpu_s: f64,
    pub(super) vm_hwm_kib: u64,
    pub(super) events: Option<u64>,
    pub(super) lost: Option<u64>,
    /// Outcomes the kernel counted (tfo-trace's closing line).
    pub(super) counted: Option<u64>,
}

impl Run {
    /// Generator + tracer CPU per connection (s).
    pub(super) fn cpu_per_conn(&self) -> f64 {
        (self.load.cpu_s + self.cpu_s) / self.load.connections.max(1) as f64
    }

    /// What the tracer's own clocks say it added per connection (s): its programs' run time
    /// and its process's CPU. Not in it: the hooks' dispatch around the programs, and what
    /// they cost the kernel's code after them (caches, branch predictors).
    pub(super) fn parts_per_conn(&self) -> f64 {
        (self.bpf_ns() as f64 / 1e9 + self.cpu_s) / self.load.connections.max(1) as f64
    }

    pub(super) fn bpf_ns(&self) -> u64 {
        self.progs.iter().map(|p| p.run_time_ns).sum()
    }
    pub(super) fn bpf_ns_per_conn(&self) -> Option<f64> {
        (self.load.connections > 0 && !self.progs.is_empty())
            .then(|| self.bpf_ns() as f64 / self.load.connections as f64)
    }
}

/// What the interleaved rounds measured.
pub(super) struct Rounds {
    pub(super) runs: Runs,
    /// Pids of qemu VMs seen running during the rounds (another engineer's, started after
    /// the bench waited): said next to the numbers.
    pub(super) qemu_seen: BTreeSet<u32>,
    /// [`cache_line_transfer_ns`], once per round: the host may move this VM's CPUs closer
    /// or further apart.
    pub(super) line_transfer_ns: Vec<f64>,
    /// [`fixed_work_ms`], once per round: the same work's CPU time moves as the host does.
    pub(super) fixed_work_ms: Vec<f64>,
}

/// `rounds` rounds, each of `modes` and `configs` in each, `window` of load a run.
pub(super) fn rounds(
    env: &Env,
    rounds: u32,
    (modes, configs): (&[Mode], &[Config]),
    threads: u32,
    window: Duration,
) -> Result<Rounds> {
    let mut out = Rounds {
        runs: Runs::default(),
        qemu_seen: BTreeSet::new(),
        line_transfer_ns: Vec::new(),
        fixed_work_ms: Vec::new(),
    };
    for round in 0..rounds {
        let line_ns = cache_line_transfer_ns();
        let said = line_ns.map_or_else(|| "not measured".to_string(), |ns| format!("{ns:.0} ns"));
        println!("bench: round {}/{rounds} cache-line transfer CPU 0 <-> CPU 1: {said}", round + 1);
        out.line_transfer_ns.extend(line_ns);
        let work_ms = fixed_work_ms();
        println!("bench: round {}/{rounds} fixed memory walk: {work_ms:.0} ms of CPU", round + 1);
        out.fixed_work_ms.push(work_ms);
        for &mode in modes {
            for &cfg in configs {
                let r = env.measure(cfg, mode, threads, 0, window, None)?;
                println!(
                    "bench: round {}/{rounds} {:<5} {:<9} {:>7.0} conn/s, CPU {:.2} us/conn{}{}",
                    round + 1,
                    mode.name(),
                    cfg.short(),
                    r.load.rate,
                    r.cpu_per_conn() * 1e6,
                    r.bpf_ns_per_conn().map(|ns| format!(", BPF {ns:.0} ns/conn")).unwrap_or_default(),
                    r.lost.map(|l| format!(", lost {l}")).unwrap_or_default(),
                );
                out.runs.0.entry((mode, cfg)).or_default().push(r);
                out.qemu_seen.extend(qemu_pids());
            }
        }
    }
    Ok(out)
}

impl Env {
    /// One generator run under `cfg`.
    pub(super) fn measure(
        &self,
        cfg: Config,
        mode: Mode,
        threads: u32,
        rate: u32,
        dur: Duration,
        ring: Option<u32>,
    ) -> Result<Run> {
        let mut run = Run::default();
        let mut tracer = match (cfg, cfg.bpftrace_script()) {
            (Config::Untraced | Config::UntracedAgain, _) => None,
            (_, Some((script, probes))) => Some(Tracer::bpftrace(&self.scratch, script, probes)?),
            (Config::Floor, _) => Some(Tracer::floor(&self.bin, &self.backend)?),
            _ => Some(Tracer::tfo_trace(&self.bin, cfg, ring, self.tfo_backend.as_deref())?),
        };
        if let Some(t) = &tracer {
            run.attach_wall_ms = Some(t.attach_wall_ms);
            run.attach_self_ms = t.attach_self_ms;
            run.attaching_line_ms = t.attaching_line_ms;
        }
        let ids = tracer.as_ref().map(|t| prog_ids(t.pid())).unwrap_or_default();
        let before_progs = prog_stats(&ids)?;
        let before_cpu = tracer.as_ref().map(|t| cpu_ns(t.pid())).unwrap_or(0);
        let load = self.load(mode, threads, rate, dur);
        let after_cpu = tracer.as_ref().map(|t| cpu_ns(t.pid())).unwrap_or(0);
        let after_progs = prog_stats(&ids)?;
        if let Some(t) = &tracer {
            run.vm_hwm_kib = status_kib(t.pid(), "VmHWM").unwrap_or(0);
        }
        let stopped = tracer.take().map(Tracer::stop).transpose()?;
        run.load = load?;
        run.cpu_s = after_cpu.saturating_sub(before_cpu) as f64 / 1e9;
        run.progs = ids
            .iter()
            .filter_map(|id| {
                let (a, b) = (after_progs.get(id)?, before_progs.get(id)?);
                Some(ProgStat {
                    name: a.name.clone(),
                    run_time_ns: a.run_time_ns.saturating_sub(b.run_time_ns),
                    run_cnt: a.run_cnt.saturating_sub(b.run_cnt),
                })
            })
            .collect();
        if let Some(lines) = stopped {
            let exit = closing_line(&lines);
            (run.events, run.lost, run.counted) = (exit.events, exit.lost, exit.counted);
            if cfg.is_tfo_trace() && run.lost.is_none() {
                bail!("{}: no loss count at exit; stderr was:\n{}", cfg.name(), lines.join("\n"));
            }
        }
        Ok(run)
    }
}

/// The prog ids a process holds (its fds on BPF programs, and links to them).
pub(super) fn prog_ids(pid: u32) -> BTreeSet<u64> {
    let Ok(dir) = fs::read_dir(format!("/proc/{pid}/fdinfo")) else { return BTreeSet::new() };
    dir.filter_map(|e| fs::read_to_string(e.ok()?.path()).ok())
        .filter_map(|info| info.lines().find_map(|l| l.strip_prefix("prog_id:")?.trim().parse().ok()))
        .collect()
}

/// run_time_ns / run_cnt of the programs `ids` (kernel.bpf_stats_enabled=1).
pub(super) fn prog_stats(ids: &BTreeSet<u64>) -> Result<BTreeMap<u64, ProgStat>> {
    if ids.is_empty() {
        return Ok(BTreeMap::new());
    }
    let out = capture(Command::new("bpftool").args(["prog", "show", "-j"]))?;
    let v: Value = serde_json::from_str(&out).context("parsing `bpftool prog show -j`")?;
    let mut m = BTreeMap::new();
    for p in v.as_array().into_iter().flatten() {
        let Some(id) = p.get("id").and_then(Value::as_u64) else { continue };
        if ids.contains(&id) {
            m.insert(
                id,
                ProgStat {
                    name: p.get("name").and_then(Value::as_str).unwrap_or("?").to_string(),
                    run_time_ns: p.get("run_time_ns").and_then(Value::as_u64).unwrap_or(0),
                    run_cnt: p.get("run_cnt").and_then(Value::as_u64).unwrap_or(0),
                },
            );
        }
    }
    Ok(m)
}

/// CPU time (ns) of a whole process, its exited threads included: its CPU-time clock
/// (clock_getcpuclockid), to the nanosecond where /proc/PID/stat counts clock ticks (10 ms:
/// a fifth of what `trace` uses in a 3 s round). 0 once it is gone.
pub(super) fn cpu_ns(pid: u32) -> u64 {
    // 0 (and what wraps to -1) would name the caller itself.
    let Ok(pid) = libc::pid_t::try_from(pid) else { return 0 };
    if pid <= 0 {
        return 0;
    }
    let mut clock: libc::clockid_t = 0;
    // SAFETY: clock_getcpuclockid writes one clockid_t; clock_gettime one timespec.
    unsafe {
        if libc::clock_getcpuclockid(pid, &mut clock) != 0 {
            return 0;
        }
        let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        if libc::clock_gettime(clock, &mut ts) != 0 {
            return 0;
        }
        ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
    }
}

/// A `kB` line of /proc/PID/status, e.g. VmHWM.
pub(super) fn status_kib(pid: u32, key: &str) -> Option<u64> {
    let s = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines().find_map(|l| l.strip_prefix(key)?.strip_prefix(':')?.split_whitespace().next()?.parse().ok())
}

/// Every measured run, by kind of connection and configuration, in round order.
#[derive(Default)]
pub(super) struct Runs(pub(super) BTreeMap<(Mode, Config), Vec<Run>>);

impl std::ops::Deref for Runs {
    type Target = BTreeMap<(Mode, Config), Vec<Run>>;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl Runs {
    pub(super) fn of(&self, m: Mode, c: Config) -> &[Run] {
        self.get(&(m, c)).map(Vec::as_slice).unwrap_or(&[])
    }

    /// Median over rounds of `f` under `c` over `f` under `reference` in the same round: the
    /// host's drift from one round to the next cancels, where a ratio of two medians keeps it.
    pub(super) fn ratio(&self, m: Mode, c: Config, reference: Config, f: impl Fn(&Run) -> f64) -> f64 {
        let of = |c| self.of(m, c).iter().map(&f).collect::<Vec<_>>();
        median_of_ratios(&of(c), &of(reference))
    }

    /// `f` under `c` over `f` under `reference`, round by round: median, min and max.
    pub(super) fn ratio_spread(
        &self,
        m: Mode,
        c: Config,
        reference: Config,
        f: impl Fn(&Run) -> f64,
    ) -> Option<(f64, f64, f64)> {
        let of = |c| self.of(m, c).iter().map(&f).collect::<Vec<_>>();
        spread(of(c).iter().zip(&of(reference)).map(|(v, r)| v / r))
    }

    /// [`Runs::ratio_spread`] of BPF time per connection.
    pub(super) fn bpf_ratio_spread(&self, m: Mode, c: Config, reference: Config) -> Option<(f64, f64, f64)> {
        self.ratio_spread(m, c, reference, |r| r.bpf_ns_per_conn().unwrap_or(f64::NAN))
    }

    /// Median BPF time per connection over the rounds.
    pub(super) fn bpf_ns(&self, m: Mode, c: Config) -> f64 {
        median(self.of(m, c).iter().filter_map(Run::bpf_ns_per_conn))
    }

    /// Median BPF time per connection over `reference`'s, per round (the targets' measure,
    /// as for CPU).
    pub(super) fn bpf_ratio(&self, m: Mode, c: Config, reference: Config) -> f64 {
        self.ratio(m, c, reference, |r| r.bpf_ns_per_conn().unwrap_or(f64::NAN))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_time_of_a_process() {
        let mut gone = Command::new("true").spawn().unwrap();
        gone.wait().unwrap();
        assert_eq!(cpu_ns(gone.id()), 0, "a process that has exited and been reaped");
        assert_eq!(cpu_ns(0), 0, "not a process (0 would name the caller)");
        assert!(cpu_ns(std::process::id()) > 0, "this test's own CPU time");
    }
}
