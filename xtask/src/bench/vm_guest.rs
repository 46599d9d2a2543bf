//! `bench --vm`'s guest side (`bench-guest`): the rounds, then the section of
//! BENCHMARKS.md: the guest and the run, issue 41's targets with their verdicts, the
//! configurations side by side, and each program's runs by the end of the connection that
//! runs it.
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};

use super::{
    config::{Config, Mode, BPFTRACE_COUNT},
    cost::{self, ProgStat, Run, Runs},
    env::Env,
    render::Row,
    report::met,
    stats::{median, spread},
    tracer::Tracer,
    vm::{GuestArgs, BACKEND, BEGIN, END, LINE, VM_MODES},
};
use crate::util::{capture, which};

/// What the guest measured.
pub(super) struct VmReport<'a> {
    pub(super) args: &'a GuestArgs,
    /// `uname -r` in the guest.
    pub(super) kernel: String,
    pub(super) runs: Runs,
    pub(super) fixed_work_ms: Vec<f64>,
    /// bpftrace's version, or why it was skipped.
    pub(super) bpftrace: Result<String, String>,
    pub(super) elapsed_s: f64,
}

/// Which end of a connection runs a program: from the kernel function its hook is on.
#[derive(Clone, Copy, PartialEq, Eq)]
enum End {
    Client,
    Server,
    /// Either socket (the state tracepoint, retransmissions, timeouts, errors).
    Either,
    /// A listener's listen() and close: per listener, not per connection.
    Listener,
}

/// tfo-trace's programs whose hook only one end runs (tfo-trace/src/backends/mod.rs, the
/// fentry table): tcp_try_fastopen and tcp_retransmit_synack at a listener,
/// tcp_fastopen_cookie_check and tcp_fastopen_cache_set in a connecting socket,
/// inet_csk_listen_start/stop once per listener. Every other program is [`End::Either`].
const ENDS: &[(&str, End)] = &[
    ("tfo_try_fastopen_fexit", End::Server),
    ("tfo_synack_retransmit", End::Server),
    ("tfo_syn_prepared_fexit", End::Client),
    ("tfo_cookie_cached_fentry", End::Client),
    ("tfo_listen_start_fexit", End::Listener),
    ("tfo_listen_stop_fentry", End::Listener),
];

/// The end of the program the kernel names `name` (its first 15 bytes: BPF_OBJ_NAME_LEN).
fn end_of(name: &str) -> End {
    let short = |full: &str| full.get(..15).unwrap_or(full).to_string();
    ENDS.iter().find(|(full, _)| short(full) == name || *full == name).map_or(End::Either, |(_, e)| *e)
}

/// A kind of connection as the section names it.
fn kind(m: Mode) -> &'static str {
    match m {
        Mode::Plain => "plain, RST",
        Mode::PlainFin => "plain, FIN",
        Mode::Tfo => "TFO",
    }
}

impl End {
    fn name(self) -> &'static str {
        match self {
            End::Client => "client",
            End::Server => "server",
            End::Either => "either",
            End::Listener => "listener",
        }
    }
}

/// A ratio's median with its spread over the rounds.
fn ratio_text(s: Option<(f64, f64, f64)>) -> String {
    s.map_or("not measured".into(), |(m, lo, hi)| format!("{m:.2}x ({lo:.2}-{hi:.2}x over the rounds)"))
}

/// Met when the median is at most `limit`; a miss whose rounds reach the limit says so.
fn verdict(s: Option<(f64, f64, f64)>, limit: f64) -> &'static str {
    match s {
        Some((m, _, _)) if m <= limit => met(true),
        Some((_, lo, hi)) if (lo..=hi).contains(&limit) => "**NOT met**, inside the rounds' spread",
        _ => met(false),
    }
}

/// Runs per connection of the programs `pick` selects, in one run.
fn runs_per_conn(r: &Run, pick: impl Fn(&ProgStat) -> bool) -> f64 {
    r.progs.iter().filter(|p| pick(p)).map(|p| p.run_cnt).sum::<u64>() as f64
        / r.load.connections.max(1) as f64
}

impl VmReport<'_> {
    pub(super) fn render(&self) -> String {
        let mut s = format!("{BEGIN}\n");
        self.machine(&mut s);
        self.targets(&mut s);
        self.configurations(&mut s);
        self.programs(&mut s);
        s.push_str(&format!("{END}\n"));
        s
    }

    /// Median over the rounds of the runs per connection of `c`'s programs at `ends`.
    fn end_runs(&self, m: Mode, c: Config, ends: &[End]) -> f64 {
        median(self.runs.of(m, c).iter().map(|r| runs_per_conn(r, |p| ends.contains(&end_of(&p.name)))))
    }

    fn machine(&self, w: &mut String) {
        let a = self.args;
        let work = spread(self.fixed_work_ms.iter().copied()).map_or("not measured".into(), |(m, lo, hi)| {
            format!("median {m:.0} ms, {lo:.0}-{hi:.0} ms over {} rounds", self.fixed_work_ms.len())
        });
        let bpftrace = match &self.bpftrace {
            Ok(v) => v.trim().to_string(),
            Err(why) => format!("bpftrace skipped ({why})"),
        };
        w.push_str(&format!(
            "## The fentry backend in a VM (`cargo xtask bench --vm`, issue 41)\n\n\
             Measured in one guest, in one run, on a shared machine: the figures below are ratios to \
             the floor of the same guest and round, and run counts; under emulation a nanosecond here is \
             not a nanosecond on hardware, and run_time_ns is the guest's clock around each run, so a \
             run during which the host preempted the guest's vCPU counts that time too: single rounds \
             have outliers, hence medians of per-round ratios.\n\n\
             - guest: Debian's `{pkg}` (`uname -r`: {kernel}), x86_64 under qemu, accel {accel}, 1 vCPU, \
             {mem} MiB; a fixed memory walk's CPU time (the host bench's, once per round): {work}\n\
             - host: {note}\n- command: `{cmd}`\n\
             - tracers: tfo-trace release build, `trace --backend {BACKEND}` (TFO's own functions) and \
             `trace --backend tracepoint` (the state hook, what every backend decided at before issue 41 \
             item 1); the floor: `tfo-trace floor --backend tracepoint`, empty programs on \
             inet_sock_set_state, tcp_retransmit_skb and tcp_retransmit_synack; {bpftrace}\n\
             - load: `tfo-trace lab-load` (1 client + 1 server thread in one process, on 127.0.0.1 in a \
             namespace of its own, net.ipv4.tcp_fastopen=3), the server replying and closing first: \
             \"plain, RST\" connections (connect / write / read / close with SO_LINGER 0, a RST, as the \
             host bench's), \"plain, FIN\" (the same closed by a FIN, `--fin`: a healthy connection, as \
             the targets and `plain_cost` mean it) and TFO connections (sendto(MSG_FASTOPEN) / read / \
             close with a RST), {rounds} rounds x {secs} s per kind and configuration, interleaved\n- elapsed in the guest: {el:.0} s\n\n",
            pkg = a.kernel_package,
            kernel = self.kernel,
            accel = a.accel,
            mem = a.memory_mb,
            note = a.host_note,
            cmd = a.command,
            rounds = a.rounds,
            secs = a.seconds,
            el = self.elapsed_s,
        ));
    }

    fn targets(&self, w: &mut String) {
        w.push_str(
            "### Targets (issue 41)\n\nOn \"plain, FIN\" connections for the plain targets. Runs per \
             connection from each program's run_cnt (bpf_stats), by the end whose kernel function the \
             program hooks; programs that either end can run count against both. BPF time: run_time_ns \
             per connection, each round against the floor (or the state-hook `trace`) of the same round, \
             then the median.\n\n\
             | target | measured | verdict |\n|---|---|---|\n",
        );
        for (target, measured, verdict) in self.rows() {
            w.push_str(&format!("| {target} | {measured} | {verdict} |\n"));
        }
    }

    fn rows(&self) -> Vec<Row> {
        let (plain, tfo, fentry) = (Mode::PlainFin, Mode::Tfo, Config::Trace);
        let client = self.end_runs(plain, fentry, &[End::Client, End::Either]);
        let server = self.end_runs(plain, fentry, &[End::Server, End::Either]);
        let spread = |m, reference| self.runs.bpf_ratio_spread(m, fentry, reference);
        let (plain_x, tfo_x_floor, tfo_x_state) =
            (spread(plain, Config::Floor), spread(tfo, Config::Floor), spread(tfo, Config::TraceStateHook));
        let median_of = |s: Option<(f64, f64, f64)>| s.map_or(f64::NAN, |(m, _, _)| m);
        let ns = |m, c| self.runs.bpf_ns(m, c);
        let tfo_verdict = if median_of(tfo_x_floor) <= 1.0 {
            "**met** (below the floor, which the old backend's hooks ran with programs in them)"
        } else if median_of(tfo_x_state) <= 1.0 {
            "**met** against the state-hook `trace`; not shown against the old fentry backend"
        } else {
            verdict(tfo_x_state, 1.0)
        };
        vec![
            (
                "0 runs per plain client connection".into(),
                format!("fentry `trace`: {client:.3} (median of the rounds)"),
                met(client == 0.0),
            ),
            (
                "<= 1 run per plain server connection".into(),
                format!("fentry `trace`: {server:.3}"),
                met(server <= 1.0),
            ),
            (
                "BPF time per plain connection <= 0.1x the floor (empty programs on the state hooks)".into(),
                format!(
                    "{} (medians: {:.0} ns vs floor {:.0} ns)",
                    ratio_text(plain_x),
                    ns(plain, fentry),
                    ns(plain, Config::Floor)
                ),
                verdict(plain_x, 0.1),
            ),
            (
                "BPF time per TFO connection no more than the old (state-hook) fentry backend".into(),
                format!(
                    "the old backend is not on this branch (item 1 replaced it): {} the floor ({:.0} vs \
                     {:.0} ns), {} `trace --backend tracepoint` ({:.0} ns), the state-hook path with the same \
                     ring-buffer records",
                    ratio_text(tfo_x_floor),
                    ns(tfo, fentry),
                    ns(tfo, Config::Floor),
                    ratio_text(tfo_x_state),
                    ns(tfo, Config::TraceStateHook)
                ),
                tfo_verdict,
            ),
        ]
    }

    /// One row per configuration and kind: BPF time, its ratio to the floor, runs.
    fn configurations(&self, w: &mut String) {
        w.push_str(
            "\n### Per configuration\n\nMedians of the rounds; x floor: per round against the floor of \
             that round, then the median.\n\n\
             | configuration | connections | conn/s | BPF ns/conn | x floor | runs/conn |\n\
             |---|---|---|---|---|---|\n",
        );
        for c in [Config::Floor, Config::Trace, Config::TraceStateHook, Config::BpftraceCount] {
            let name = match c {
                Config::Trace => format!("tfo-trace trace --backend {BACKEND} > /dev/null"),
                _ => c.name().to_string(),
            };
            if let (Config::BpftraceCount, Err(why)) = (c, &self.bpftrace) {
                w.push_str(&format!("| {name} | all | skipped: {why} | | | |\n"));
                continue;
            }
            for m in VM_MODES {
                w.push_str(&format!(
                    "| {name} | {} | {:.0} | {:.0} | {:.3} | {:.2} |\n",
                    kind(m),
                    median(self.runs.of(m, c).iter().map(|r| r.load.rate)),
                    self.runs.bpf_ns(m, c),
                    self.runs.bpf_ratio(m, c, Config::Floor),
                    median(self.runs.of(m, c).iter().map(|r| runs_per_conn(r, |_| true))),
                ));
            }
        }
        if self.bpftrace.is_ok() {
            w.push_str(&format!("\nThe bpftrace one-liner:\n\n```\n{BPFTRACE_COUNT}```\n"));
        }
        let (conns, failed) = self
            .runs
            .values()
            .flatten()
            .fold((0, 0), |(c, f), r| (c + r.load.connections, f + r.load.failed));
        let tfo_active: u64 = self
            .runs
            .iter()
            .filter(|((m, _), _)| *m == Mode::Tfo)
            .flat_map(|(_, v)| v)
            .map(|r| r.load.tfo_active)
            .sum();
        w.push_str(&format!(
            "\n{conns} connections in all, {failed} failed; in the TFO runs TcpExtTCPFastOpenActive rose by \
             {tfo_active}.\n"
        ));
    }

    /// Each program's runs and time per connection, per kind, and the end that runs it.
    fn programs(&self, w: &mut String) {
        w.push_str(
            "\n### Per program\n\nRuns and BPF ns per connection. A program on a listener's listen() \
             and close runs once per generator run, not per connection. A connection closed by a RST \
             ends with an error at the end that receives it: here the server, which closed first.\n\n\
             | tracer | program | end |",
        );
        let mut rule = String::from("|---|---|---|");
        for m in VM_MODES {
            w.push_str(&format!(" {0}: runs | {0}: ns |", kind(m)));
            rule.push_str("---|---|");
        }
        w.push_str(&format!("\n{rule}\n"));
        for c in [Config::Floor, Config::Trace, Config::TraceStateHook] {
            let mut names: Vec<&str> = VM_MODES
                .iter()
                .flat_map(|m| self.runs.of(*m, c))
                .flat_map(|r| r.progs.iter().map(|p| p.name.as_str()))
                .collect();
            names.sort();
            names.dedup();
            for n in names {
                let per = |m: Mode, f: &dyn Fn(&ProgStat) -> f64| {
                    median(self.runs.of(m, c).iter().filter_map(|r| {
                        r.progs.iter().find(|p| p.name == n).map(|p| f(p) / r.load.connections.max(1) as f64)
                    }))
                };
                let mut row = format!("| {} | {n} | {} |", c.short(), end_of(n).name());
                for m in VM_MODES {
                    row.push_str(&format!(
                        " {:.3} | {:.0} |",
                        per(m, &|p| p.run_cnt as f64),
                        per(m, &|p| p.run_time_ns as f64)
                    ));
                }
                w.push_str(&format!("{row}\n"));
            }
        }
    }
}

/// The guest's side (`bench-guest`): the rounds, then the section on stdout.
pub fn bench_guest(args: &GuestArgs) -> Result<()> {
    let started = Instant::now();
    let mut env = Env::create(args.bin.clone())?;
    env.tfo_backend = Some(BACKEND.to_string());
    let picked = Tracer::tfo_trace(&env.bin, Config::Trace, None, Some(BACKEND))?.stop_backend()?;
    ensure!(picked == BACKEND, "tfo-trace --backend {BACKEND} ran the {picked} backend");
    let mut configs = vec![Config::Floor, Config::Trace, Config::TraceStateHook];
    let bpftrace_skipped = match bpftrace_attaches(&env) {
        Ok(()) => {
            configs.push(Config::BpftraceCount);
            None
        }
        Err(e) => {
            let why = format!("{e:#}").lines().next().unwrap_or_default().to_string();
            println!("bench: bpftrace skipped: {why}");
            Some(why)
        }
    };
    let bpftrace_version = capture(Command::new("bpftrace").arg("--version")).ok();
    let window = Duration::from_secs(args.seconds);
    // One vCPU: one client and one server thread.
    let rounds = cost::rounds(&env, args.rounds, (&VM_MODES, &configs), 1, window)?;
    env.restore_now();
    let report = VmReport {
        args,
        kernel: capture(Command::new("uname").arg("-r")).unwrap_or_default().trim().to_string(),
        runs: rounds.runs,
        fixed_work_ms: rounds.fixed_work_ms,
        bpftrace: bpftrace_skipped.map_or_else(|| Ok(bpftrace_version.unwrap_or_default()), Err),
        elapsed_s: started.elapsed().as_secs_f64(),
    };
    for line in report.render().lines() {
        println!("{LINE}{line}");
    }
    Ok(())
}

/// Whether bpftrace runs here: the one-liner attached once and stopped.
fn bpftrace_attaches(env: &Env) -> Result<()> {
    which("bpftrace")
        .context("bpftrace is not installed on the host, so it was not copied into the guest")?;
    Tracer::bpftrace(&env.scratch, BPFTRACE_COUNT, 1)?.stop()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn programs_are_told_apart_by_their_kernel_names() {
        assert!(end_of("tfo_try_fastope") == End::Server, "15 bytes of tfo_try_fastopen_fexit");
        assert!(end_of("tfo_syn_prepare") == End::Client);
        assert!(end_of("tfo_cookie_cach") == End::Client);
        assert!(end_of("tfo_listen_star") == End::Listener);
        assert!(end_of("tfo_state") == End::Either, "the state hook runs for both sockets");
        assert!(end_of("tfo_timeout_fex") == End::Either);
    }
}
