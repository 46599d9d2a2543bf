//! The run's figures, put together ([`Report`]) with the ratios the targets are judged by:
//! every ratio is taken round by round against its reference in the same round, then the
//! median of those (the host's drift between rounds cancels). `render.rs` writes it out.
use std::{fs, path::Path};

use anyhow::{Context, Result};

use super::{
    config::{Config, Mode},
    cost::{Run, Runs},
    scale::{Million, ReportScale},
    stalled_reader::Stall,
    stats::{median, median_of_ratios, spread},
};
use crate::util::workspace_root;

/// Replaces the block from `begin` to `end` in BENCHMARKS.md with `block` (which holds
/// both), or appends it; `who` names the task in the line it prints.
pub(super) fn write_block(file: &Path, begin: &str, end: &str, block: &str, who: &str) -> Result<()> {
    let path = workspace_root().join(file);
    let old = fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let new = match (old.find(begin), old.find(end)) {
        (Some(b), Some(e)) if b < e => {
            let rest = &old[e + end.len()..];
            format!("{}{block}{}", &old[..b], rest.strip_prefix('\n').unwrap_or(rest))
        }
        _ => format!("{old}\n{block}"),
    };
    fs::write(&path, new).with_context(|| format!("writing {}", path.display()))?;
    println!("{who}: written to {}", path.display());
    Ok(())
}

pub(super) struct Report {
    pub(super) command: String,
    pub(super) loadavg: String,
    /// [`super::host::cache_line_transfer_ns`], once per round (none with one CPU).
    pub(super) line_transfer_ns: Vec<f64>,
    /// [`super::host::fixed_work_ms`], once per round.
    pub(super) fixed_work_ms: Vec<f64>,
    pub(super) qemu_note: String,
    pub(super) backend: String,
    pub(super) threads: u32,
    pub(super) rounds: u32,
    pub(super) seconds: u64,
    pub(super) runs: Runs,
    pub(super) stall: Stall,
    pub(super) sweep: Vec<(u32, u32, Run)>,
    pub(super) million: Million,
    pub(super) report_scale: ReportScale,
    pub(super) elapsed_s: f64,
}

pub(super) fn met(ok: bool) -> &'static str {
    if ok {
        "**met**"
    } else {
        "**NOT met**"
    }
}

impl Report {
    pub(super) fn of(&self, m: Mode, c: Config) -> &[Run] {
        self.runs.of(m, c)
    }

    pub(super) fn ratio(&self, m: Mode, c: Config, reference: Config, f: impl Fn(&Run) -> f64) -> f64 {
        self.runs.ratio(m, c, reference, f)
    }

    /// Median CPU per connection over the untraced run's, per round.
    pub(super) fn cpu_ratio(&self, m: Mode, c: Config) -> f64 {
        self.ratio(m, c, Config::Untraced, Run::cpu_per_conn)
    }

    pub(super) fn rate_ratio(&self, m: Mode, c: Config) -> f64 {
        self.ratio(m, c, Config::Untraced, |r| r.load.rate)
    }

    pub(super) fn bpf_ns(&self, m: Mode, c: Config) -> f64 {
        self.runs.bpf_ns(m, c)
    }

    pub(super) fn bpf_ratio(&self, m: Mode, c: Config, reference: Config) -> f64 {
        self.runs.bpf_ratio(m, c, reference)
    }

    /// Tracer CPU seconds per million outcomes the kernel counted.
    pub(super) fn user_cpu_per_million(&self, c: Config) -> f64 {
        median(self.of(Mode::Tfo, c).iter().map(|r| {
            let outcomes = r.counted.or(r.events).unwrap_or(2 * r.load.connections).max(1);
            r.cpu_s / outcomes as f64 * 1e6
        }))
    }

    /// The per-round samples of [`super::host::cache_line_transfer_ns`]: median, min and max.
    pub(super) fn line_transfer(&self) -> String {
        let v = &self.line_transfer_ns;
        match spread(v.iter().copied()) {
            Some((med, min, max)) => {
                format!("median {med:.0} ns, {min:.0}-{max:.0} ns over {} rounds", v.len())
            }
            None => "not measured (one CPU, or no turn-taking within 10 s)".into(),
        }
    }

    /// The per-round samples of [`super::host::fixed_work_ms`]: median, min and max.
    pub(super) fn fixed_work(&self) -> String {
        let v = &self.fixed_work_ms;
        match spread(v.iter().copied()) {
            Some((med, min, max)) => {
                format!(
                    "median {med:.0} ms, {min:.0}-{max:.0} ms over {} rounds ({:.2}x)",
                    v.len(),
                    max / min
                )
            }
            None => "not measured".into(),
        }
    }

    /// The CPU measure against itself: the untraced rerun's CPU per connection over the
    /// untraced run's, round by round (median, min, max).
    pub(super) fn rerun_spread(&self, m: Mode) -> Option<(f64, f64, f64)> {
        self.runs.ratio_spread(m, Config::UntracedAgain, Config::Untraced, Run::cpu_per_conn)
    }

    /// The CPU ratio that the tracer's own parts ([`Run::parts_per_conn`]) alone would give:
    /// untraced CPU plus those parts, over untraced CPU, round by round. What the direct
    /// measure cannot resolve here, these clocks can; they leave out the hooks' dispatch
    /// and indirect costs, so it is a lower bound.
    pub(super) fn parts_ratio(&self, m: Mode, c: Config) -> f64 {
        let untraced: Vec<f64> = self.of(m, Config::Untraced).iter().map(Run::cpu_per_conn).collect();
        let with_parts: Vec<f64> =
            self.of(m, c).iter().zip(&untraced).map(|(r, u)| u + r.parts_per_conn()).collect();
        median_of_ratios(&with_parts, &untraced)
    }

    /// The tfo-trace view (trace, top, export) for which `f` is highest, and that value.
    pub(super) fn worst(&self, f: impl Fn(Config) -> f64) -> (Config, f64) {
        Config::TFO_TRACE
            .into_iter()
            .map(|c| (c, f(c)))
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .unwrap_or((Config::Trace, f64::NAN))
    }

    /// Counts the stalled reader lost: the kernel's accepted connections against export's.
    pub(super) fn counts_lost(&self) -> u64 {
        self.stall.kernel_accepted.abs_diff(self.stall.exported_accepted)
    }

    /// Peak RSS of `top --from` a million destinations, in MiB.
    pub(super) fn million_mib(&self) -> f64 {
        self.million.vm_hwm_kib as f64 / 1024.0
    }
}
