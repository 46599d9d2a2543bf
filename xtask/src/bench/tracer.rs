//! The tracers a run measures: tfo-trace (a view, or the floor's empty programs) and
//! bpftrace, each started until attached and stopped with SIGINT; and what tfo-trace's
//! closing line says ([`closing_line`], the one place that reads it).
use std::fs;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde_json::Value;

use super::config::{Config, BPFTRACE_MAP_KEYS};
use crate::util::{self, capture};

/// Generous for a TCG guest (`bench --vm`), where bpftrace's LLVM alone takes seconds.
const ATTACH_TIMEOUT: Duration = Duration::from_secs(120);

/// A running tracer and what its start-up looked like.
/// How long a tracer may take to stop after SIGINT: a tracer that prints its maps at exit
/// (bpftrace) took over 10 s once on a loaded 2-core machine, which cost the whole run.
const STOP_LIMIT: Duration = Duration::from_secs(60);

pub(super) struct Tracer {
    child: Child,
    lines: Receiver<String>,
    pub(super) attach_wall_ms: f64,
    pub(super) attach_self_ms: Option<f64>,
    pub(super) attaching_line_ms: Option<f64>,
    early: Vec<String>,
}

/// Sends every line of `r` down a channel with the time it arrived.
fn pump(r: impl std::io::Read + Send + 'static) -> Receiver<(Instant, String)> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(r).lines() {
            let Ok(line) = line else { break };
            if tx.send((Instant::now(), line)).is_err() {
                break;
            }
        }
    });
    rx
}

impl Tracer {
    /// `backend`: `--backend` (None: tfo-trace's own choice, `auto`).
    pub(super) fn tfo_trace(
        bin: &Path,
        cfg: Config,
        ring: Option<u32>,
        backend: Option<&str>,
    ) -> Result<Tracer> {
        let mut args: Vec<String> = match cfg {
            Config::Trace => vec!["trace".into()],
            Config::TraceStateHook => ["trace", "--backend", "tracepoint"].map(String::from).to_vec(),
            Config::Top => ["top", "--batch", "--delay", "1"].map(String::from).to_vec(),
            Config::TopNames => ["top", "--batch", "--delay", "1", "--names"].map(String::from).to_vec(),
            Config::Export => ["export", "--web.listen-address", "127.0.0.1:0"].map(String::from).to_vec(),
            _ => unreachable!("not a tfo-trace configuration"),
        };
        if let Some(b) = backend.filter(|_| cfg != Config::TraceStateHook) {
            args.extend(["--backend".into(), b.to_string()]);
        }
        if let Some(r) = ring {
            args.extend(["--ring-buffer-size".into(), r.to_string()]);
        }
        // The closing summary as data (closing_line), the output itself unchanged.
        args.push("--json-summary".into());
        Self::tfo_trace_args(bin, &args.iter().map(String::as_str).collect::<Vec<_>>())
    }

    /// Empty programs on `backend`'s tracepoints (`tfo-trace floor`).
    pub(super) fn floor(bin: &Path, backend: &str) -> Result<Tracer> {
        let backend = if backend == "raw-tracepoint" { "raw-tracepoint" } else { "tracepoint" };
        Self::tfo_trace_args(bin, &["floor", "--backend", backend])
    }

    /// `tfo-trace ARGS`, until its "programs attached" line.
    pub(super) fn tfo_trace_args(bin: &Path, args: &[&str]) -> Result<Tracer> {
        Self::tfo_trace_to(bin, args, Stdio::null())
    }

    /// [`Tracer::tfo_trace_args`], its stdout to `stdout`.
    pub(super) fn tfo_trace_to(bin: &Path, args: &[&str], stdout: Stdio) -> Result<Tracer> {
        let mut cmd = Command::new(bin);
        cmd.args(args);
        let spawned = Instant::now();
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting {}", util::display(&cmd)))?;
        let rx = pump(child.stderr.take().context("stderr")?);
        let mut early = Vec::new();
        loop {
            match rx.recv_timeout(ATTACH_TIMEOUT) {
                Ok((at, line)) => {
                    let done = line.contains("programs attached");
                    let self_ms = line
                        .split(" in ")
                        .nth(1)
                        .and_then(|rest| rest.split_whitespace().next())
                        .and_then(|n| n.parse::<f64>().ok());
                    early.push(line);
                    if done {
                        let (tx, lines) = mpsc::channel();
                        std::thread::spawn(move || {
                            for (_, l) in rx {
                                if tx.send(l).is_err() {
                                    break;
                                }
                            }
                        });
                        return Ok(Tracer {
                            child,
                            lines,
                            attach_wall_ms: ms(at - spawned),
                            attach_self_ms: self_ms,
                            attaching_line_ms: None,
                            early,
                        });
                    }
                }
                Err(e) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    let why = if e == RecvTimeoutError::Timeout { "timed out" } else { "exited" };
                    bail!("{} {why} before attaching:\n{}", util::display(&cmd), early.join("\n"));
                }
            }
        }
    }

    /// Waits for a stderr line containing `needle`.
    pub(super) fn wait_line(&mut self, needle: &str, timeout: Duration) -> Result<String> {
        if let Some(l) = self.early.iter().find(|l| l.contains(needle)) {
            return Ok(l.clone());
        }
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self.lines.recv_timeout(left).with_context(|| format!("no line with {needle:?}"))?;
            self.early.push(line.clone());
            if line.contains(needle) {
                return Ok(line);
            }
        }
    }

    /// Stops it and returns the backend its attach line named.
    pub(super) fn stop_backend(self) -> Result<String> {
        let lines = self.stop()?;
        lines
            .iter()
            .find_map(|l| l.split("with the ").nth(1)?.split(" backend").next().map(str::to_string))
            .context("no backend named in tfo-trace's attach line")
    }

    /// bpftrace prints "Attaching N probes..." before it loads anything, and its BEGIN
    /// probe fires before the other probes attach (bpftrace 0.17, BPFtrace::run): neither
    /// says "attached". The kernel does: `bpftool perf list` shows a tracepoint once its
    /// program is attached, with the owner's pid.
    pub(super) fn bpftrace(scratch: &Path, text: &str, probes: usize) -> Result<Tracer> {
        let script = scratch.join("tfo.bt");
        fs::write(&script, text).context("writing the bpftrace script")?;
        let spawned = Instant::now();
        let mut child = Command::new("bpftrace")
            .arg(&script)
            .env("BPFTRACE_MAP_KEYS_MAX", BPFTRACE_MAP_KEYS)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .context("starting bpftrace")?;
        let out = pump(child.stdout.take().context("stdout")?);
        let err = pump(child.stderr.take().context("stderr")?);
        let pid = child.id();
        let mut attaching_line_ms = None;
        let mut early = Vec::new();
        let attached_at = loop {
            while let Ok((at, line)) = out.try_recv() {
                if line.starts_with("Attaching") && attaching_line_ms.is_none() {
                    attaching_line_ms = Some(ms(at - spawned));
                }
                early.push(line);
            }
            let listed = capture(Command::new("bpftool").args(["perf", "list", "-j"])).unwrap_or_default();
            let now = Instant::now();
            let mine = serde_json::from_str::<Value>(&listed)
                .ok()
                .and_then(|v| v.as_array().cloned())
                .unwrap_or_default()
                .into_iter()
                .filter(|e| e.get("pid").and_then(Value::as_u64) == Some(u64::from(pid)))
                .count();
            if mine >= probes {
                break now;
            }
            if child.try_wait()?.is_some() || now - spawned > ATTACH_TIMEOUT {
                let _ = child.kill();
                let _ = child.wait();
                let errs: Vec<String> = err.try_iter().map(|(_, l)| l).collect();
                bail!("bpftrace did not attach:\n{}\n{}", early.join("\n"), errs.join("\n"));
            }
            std::thread::sleep(Duration::from_millis(2));
        };
        // Keep draining stdout (the maps at exit) so bpftrace never blocks on a full pipe.
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for (_, l) in err {
                let _ = tx.send(l);
            }
        });
        std::thread::spawn(move || for _ in out {});
        Ok(Tracer {
            child,
            lines,
            attach_wall_ms: ms(attached_at - spawned),
            attach_self_ms: None,
            attaching_line_ms,
            early,
        })
    }

    pub(super) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGINT (as Ctrl-C), then the stderr lines it printed; SIGKILL after [`STOP_LIMIT`].
    pub(super) fn stop(self) -> Result<Vec<String>> {
        match self.stop_with("-INT", STOP_LIMIT)? {
            (lines, false) => Ok(lines),
            (_, true) => bail!("the tracer did not stop within {STOP_LIMIT:?} of SIGINT"),
        }
    }

    /// `kill SIGNAL`, then the stderr lines it printed, and whether it had to be killed
    /// (SIGKILL after `limit`).
    pub(super) fn stop_with(mut self, signal: &str, limit: Duration) -> Result<(Vec<String>, bool)> {
        let _ = Command::new("kill").args([signal, &self.pid().to_string()]).status();
        let deadline = Instant::now() + limit;
        let mut killed = false;
        while self.child.try_wait()?.is_none() {
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                killed = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let mut lines = std::mem::take(&mut self.early);
        // The pump ends with the pipe: everything is there once the child has exited.
        while let Ok(l) = self.lines.recv_timeout(Duration::from_secs(2)) {
            lines.push(l);
        }
        Ok((lines, killed))
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// What tfo-trace's closing summary says.
#[derive(Default, Debug, PartialEq)]
pub(super) struct ExitLine {
    pub(super) events: Option<u64>,
    pub(super) lost: Option<u64>,
    pub(super) counted: Option<u64>,
}

/// tfo-trace's closing summary under `--json-summary`: the last stderr line that is a JSON
/// object with `"tfo_trace_closing": 1` (tfo-trace/src/live/closing.rs), its `events`,
/// `events_lost` and `counted`.
pub(super) fn closing_line(lines: &[String]) -> ExitLine {
    let closing = lines
        .iter()
        .rev()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["tfo_trace_closing"] == 1);
    let Some(v) = closing else { return ExitLine::default() };
    ExitLine { events: v["events"].as_u64(), lost: v["events_lost"].as_u64(), counted: v["counted"].as_u64() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn closing_lines_of_every_view() {
        let l = |s: &str| vec!["tfo-trace: 3 programs attached".to_string(), s.to_string()];
        assert_eq!(
            closing_line(&l(r#"{"tfo_trace_closing":1,"events":120,"events_lost":7,"counted":127}"#)),
            ExitLine { events: Some(120), lost: Some(7), counted: Some(127) }
        );
        assert_eq!(
            closing_line(&l(r#"{"tfo_trace_closing":1,"events":9,"events_lost":1,"counted":null}"#)),
            ExitLine { events: Some(9), lost: Some(1), counted: None }
        );
        assert_eq!(closing_line(&l("tfo-trace: 9 events, 1 lost")), ExitLine::default(), "a sentence");
        assert_eq!(closing_line(&l(r#"{"events":1}"#)), ExitLine::default(), "not a closing summary");
    }
}
