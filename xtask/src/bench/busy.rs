//! `cargo xtask bench --busy` (issue 55): `top` beside a namespace that holds many
//! sockets. Per case, a namespace of its own filled with TIME_WAIT sockets (`lab-load
//! --fin`: the server closes first, so each of its sockets waits 60 s), then `top --batch`
//! is started and, once attached, 1,000 new TFO listeners each take connections for
//! [`WINDOW`] (10,000 in all, a new listener every connection for the first 1,000). Over
//! the window: the snapshots `top` printed (one a second is on time), its CPU, and the
//! events it lost; then SIGTERM, and how long it took to exit. Before issue 55 each new
//! listener's name was looked up by reading /proc/PID/net/tcp, every TIME_WAIT socket of
//! the namespace included, on the view's thread.
//!
//! Bounded: every generator run has a count and a time limit; `top` is stopped by SIGTERM
//! (SIGKILL after [`STOP_LIMIT`]); the namespaces go with [`Busy`]'s drop.
use std::fs;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use super::{
    cost::cpu_ns,
    env::{ensure_tool, Env},
    load::parse_load,
    report::write_block,
    tracer::{closing_line, Tracer},
};
use crate::util::{capture, run};

/// The socket counts measured beside.
pub(super) const SOCKETS: [u64; 2] = [10_000, 100_000];
/// New TFO listeners, each a new name to look up.
const LISTENERS: u32 = 1_000;
/// The load while `top` is watched, and the connections made in it.
pub(super) const WINDOW: Duration = Duration::from_secs(10);
const CONNECTIONS: u32 = 10_000;
/// How long `top` may take to exit after SIGTERM before it is killed (the figure is then
/// this, marked as such).
const STOP_LIMIT: Duration = Duration::from_secs(120);

const BEGIN: &str = "<!-- cargo xtask bench --busy: begin -->";
const END: &str = "<!-- cargo xtask bench --busy: end -->";

/// One case's figures.
#[derive(Debug)]
pub(super) struct BusyRun {
    /// TIME_WAIT sockets in the namespace when `top` started (`ss -tan state time-wait`).
    pub(super) time_wait: u64,
    /// Connections the load made in the window ([`CONNECTIONS`] asked).
    pub(super) connections: u64,
    pub(super) snapshots: usize,
    /// `top`'s CPU over the window, seconds.
    pub(super) cpu_s: f64,
    pub(super) events: u64,
    pub(super) lost: u64,
    /// SIGTERM to exit.
    pub(super) exit_after_term_s: f64,
    pub(super) killed: bool,
}

/// A namespace made for one case, deleted on drop.
struct Busy {
    ns: String,
}

impl Drop for Busy {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "delete", &self.ns]).status();
    }
}

impl Busy {
    fn create(name: String) -> Result<Busy> {
        run(Command::new("ip").args(["netns", "add", &name]))?;
        let ns = Busy { ns: name };
        run(Command::new("ip").args(["-n", &ns.ns, "link", "set", "lo", "up"]))?;
        run(Command::new("ip").args(["netns", "exec", &ns.ns, "sysctl", "-qw", "net.ipv4.tcp_fastopen=3"]))?;
        Ok(ns)
    }

    /// `lab-load ARGS` in the namespace, to its end.
    fn load(&self, bin: &Path, args: &[String]) -> Result<super::load::Load> {
        parse_load(&capture(
            Command::new("ip").args(["netns", "exec", &self.ns]).arg(bin).arg("lab-load").args(args),
        )?)
    }

    fn time_wait(&self) -> Result<u64> {
        let out = capture(Command::new("ip").args([
            "netns",
            "exec",
            &self.ns,
            "ss",
            "-tanH",
            "state",
            "time-wait",
        ]))?;
        Ok(out.lines().count() as u64)
    }
}

impl Env {
    /// One case: `sockets` TIME_WAIT sockets, then `top` while the listeners come.
    fn busy_case(&self, sockets: u64) -> Result<BusyRun> {
        let ns = Busy::create(format!("{}-busy{sockets}", self.ns))?;
        // Spread over ports, so that a client port used again meets no TIME_WAIT socket of
        // the same pair (which the new SYN would take over): ~2,500 per port.
        let ports = (sockets / 2_500).max(1);
        let fill = [
            "--listen".to_string(),
            "127.0.0.1:20000".into(),
            "--listeners".into(),
            ports.to_string(),
            "--fin".into(),
            "--threads".into(),
            "2".into(),
            "--count".into(),
            sockets.to_string(),
            "--duration".into(),
            "50s".into(),
        ];
        ns.load(&self.bin, &fill)?;
        let time_wait = ns.time_wait()?;
        let out = self.scratch.join(format!("busy{sockets}.txt"));
        let stdout = fs::File::create(&out).with_context(|| format!("creating {}", out.display()))?;
        let top = Tracer::tfo_trace_to(
            &self.bin,
            &["top", "--batch", "--delay", "1", "--json-summary"],
            Stdio::from(stdout),
        )?;
        let snapshots = || {
            fs::read_to_string(&out).map(|t| t.lines().filter(|l| l.starts_with("tfo-trace top ")).count())
        };
        let (before, cpu_before) = (snapshots()?, cpu_ns(top.pid()));
        let started = Instant::now();
        let load = [
            "--listen".to_string(),
            "127.0.0.1:30000".into(),
            "--listeners".into(),
            LISTENERS.to_string(),
            "--count".into(),
            CONNECTIONS.to_string(),
            "--rate".into(),
            (u128::from(CONNECTIONS) * 1000 / WINDOW.as_millis()).to_string(),
            "--duration".into(),
            format!("{}ms", WINDOW.as_millis()),
        ];
        let loaded = ns.load(&self.bin, &load);
        // The window is the load's own (it ends by count or time): wait out the rest.
        std::thread::sleep(WINDOW.saturating_sub(started.elapsed()));
        let (after, cpu_after) = (snapshots()?, cpu_ns(top.pid()));
        let term = Instant::now();
        let (lines, killed) = top.stop_with("-TERM", STOP_LIMIT)?;
        let exit_after_term_s = term.elapsed().as_secs_f64();
        let load = loaded?;
        // Its time limit may end it a little short on a loaded machine: the figure says so.
        if load.failed > 0 || load.connections == 0 {
            bail!("the load made {} connections ({} failed) of {CONNECTIONS}", load.connections, load.failed);
        }
        let closing = closing_line(&lines);
        Ok(BusyRun {
            time_wait,
            connections: load.connections,
            snapshots: after - before,
            cpu_s: cpu_after.saturating_sub(cpu_before) as f64 / 1e9,
            events: closing.events.unwrap_or(0),
            lost: closing.lost.unwrap_or(0),
            exit_after_term_s,
            killed,
        })
    }
}

/// `cargo xtask bench --busy`: every case, then its block of `output`.
pub(super) fn bench_busy(env: &Env, output: &Path, command: &str) -> Result<()> {
    ensure_tool("ss", "iproute2")?;
    let mut runs = Vec::new();
    for sockets in SOCKETS {
        let r = env.busy_case(sockets)?;
        println!(
            "bench: top beside {} TIME_WAIT sockets, {} connections: {} snapshots in {} s, {:.2} CPU-s, {} events, {} lost, exit {:.2} s after SIGTERM",
            r.time_wait,
            r.connections,
            r.snapshots,
            WINDOW.as_secs(),
            r.cpu_s,
            r.events,
            r.lost,
            r.exit_after_term_s
        );
        runs.push((sockets, r));
    }
    write_block(output, BEGIN, END, &render(&runs, command), "bench --busy")
}

/// Seconds as the block prints them.
fn secs(s: f64) -> String {
    format!("{s:.2} s")
}

/// The block of BENCHMARKS.md.
fn render(runs: &[(u64, BusyRun)], command: &str) -> String {
    let window = WINDOW.as_secs();
    let mut t = format!(
        "{BEGIN}\n## `top` beside a namespace with many sockets (`cargo xtask bench --busy`, issue 55)\n\n\
         Per case, a namespace of its own holding that many TIME_WAIT sockets (`lab-load --fin`), then \
         `top --batch --delay 1` and, once it is attached, {LISTENERS} new TFO listeners taking {CONNECTIONS} \
         connections over {window} s (the first {LISTENERS} each at a new listener). Over those {window} s: the \
         snapshots `top` printed, its CPU, the events it lost; then SIGTERM. Command: `{command}`.\n\n\
         | target | sockets | measured | verdict |\n|---|---|---|---|\n"
    );
    for (wanted, r) in runs {
        let label = format!("{wanted} (ss: {} TIME_WAIT; {} connections)", r.time_wait, r.connections);
        let rows = [
            (
                format!("a snapshot every second: {window} in {window} s"),
                format!("{}", r.snapshots),
                r.snapshots as u64 >= window,
            ),
            (
                "`top`'s CPU <= 0.1 core over the load".to_string(),
                secs(r.cpu_s),
                r.cpu_s <= 0.1 * window as f64,
            ),
            ("no event lost".to_string(), format!("{} of {} events", r.lost, r.events + r.lost), r.lost == 0),
            (
                "exit within 1 s of SIGTERM".to_string(),
                if r.killed {
                    format!("killed after {}", secs(r.exit_after_term_s))
                } else {
                    secs(r.exit_after_term_s)
                },
                !r.killed && r.exit_after_term_s <= 1.0,
            ),
        ];
        for (target, measured, ok) in rows {
            t.push_str(&format!("| {target} | {label} | {measured} | {} |\n", super::report::met(ok)));
        }
    }
    t.push_str(END);
    t.push('\n');
    t
}
