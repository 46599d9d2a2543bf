//! The load: `tfo-trace lab-load` (clients and a listener in one process) in the bench's
//! namespace, making plain or TFO connections for a while, and what it printed.
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde_json::Value;

use super::{config::Mode, env::Env};
use crate::util::capture;

pub(super) const LOAD_ADDR: &str = "127.0.0.1:8099";

/// What one generator run printed.
#[derive(Clone, Debug, Default)]
pub(super) struct Load {
    pub(super) connections: u64,
    pub(super) failed: u64,
    pub(super) seconds: f64,
    pub(super) rate: f64,
    pub(super) tfo_active: u64,
    /// The generator's own CPU (user + system) over the run.
    pub(super) cpu_s: f64,
}

impl Env {
    pub(super) fn load_command(&self, mode: Mode, threads: u32, rate: u32, dur: Duration) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.ns])
            .arg(&self.bin)
            .args(["lab-load", "--listen", LOAD_ADDR, "--threads", &threads.to_string()])
            .args(["--rate", &rate.to_string(), "--duration", &format!("{}ms", dur.as_millis())]);
        if mode != Mode::Tfo {
            c.arg("--plain");
        }
        if mode == Mode::PlainFin {
            c.arg("--fin");
        }
        c
    }

    /// One generator run, no tracer.
    pub(super) fn load(&self, mode: Mode, threads: u32, rate: u32, dur: Duration) -> Result<Load> {
        parse_load(&capture(&mut self.load_command(mode, threads, rate, dur))?)
    }
}

/// The generator's threads: the fastest of 1, 2, 4 (within 2 %, fewer wins).
pub(super) fn fastest_threads(env: &Env) -> Result<u32> {
    let mut best = (0u32, 0.0f64);
    for t in [1, 2, 4] {
        let l = env.load(Mode::Tfo, t, 0, Duration::from_secs(2))?;
        println!("bench: generator with {t} thread(s): {:.0} connections/s", l.rate);
        if l.rate > best.1 * 1.02 {
            best = (t, l.rate);
        }
    }
    Ok(best.0)
}

pub(super) fn parse_load(out: &str) -> Result<Load> {
    let v: Value = serde_json::from_str(out.trim()).with_context(|| format!("lab-load printed {out:?}"))?;
    let u = |k: &str| v.get(k).and_then(Value::as_u64).unwrap_or(0);
    let f = |k: &str| v.get(k).and_then(Value::as_f64).unwrap_or(0.0);
    let load = Load {
        connections: u("connections"),
        failed: u("failed"),
        seconds: f("seconds"),
        rate: f("connections_per_s"),
        tfo_active: u("tfo_active"),
        cpu_s: f("cpu_user_s") + f("cpu_sys_s"),
    };
    if load.connections == 0 {
        bail!("lab-load made no connection: {out}");
    }
    Ok(load)
}
