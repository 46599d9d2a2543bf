//! Step 2, a stalled reader: `export` with per-destination series (so events flow) stopped
//! with SIGSTOP for the whole of a maximum-rate run: events lost (counted), and counts lost,
//! which must be 0 (its series against the generator's TcpExtTCPFastOpenActive).
use std::io::Write;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result};

use super::{config::Mode, env::Env, tracer::Tracer};

/// How long the stalled-reader run keeps the exporter stopped (the whole load).
pub(super) const STALL: Duration = Duration::from_secs(10);

/// What the stalled-reader run saw.
#[derive(Clone, Debug, Default)]
pub(super) struct Stall {
    pub(super) connections: u64,
    /// TcpExtTCPFastOpenActive over the run: the kernel's count of accepted TFO connects.
    pub(super) kernel_accepted: u64,
    /// `tfo_trace_connections_total{role="client",outcome="accepted"}`, summed.
    pub(super) exported_accepted: u64,
    pub(super) events_lost: u64,
}

impl Env {
    /// `export` with per-destination series (events flow) stopped with SIGSTOP for a whole
    /// maximum-rate TFO run: its counts must still equal the kernel's.
    pub(super) fn stalled_reader(&self, threads: u32) -> Result<Stall> {
        let mut t = Tracer::tfo_trace_args(
            &self.bin,
            &["export", "--web.listen-address", "127.0.0.1:0", "--top-destinations", "10"],
        )?;
        let addr = t.wait_line("serving metrics on http://", Duration::from_secs(10))?;
        let addr = addr
            .split("http://")
            .nth(1)
            .and_then(|r| r.split('/').next())
            .context("no address in the exporter's line")?
            .to_string();
        let _ = Command::new("kill").args(["-STOP", &t.pid().to_string()]).status();
        let load = self.load(Mode::Tfo, threads, 0, STALL);
        let _ = Command::new("kill").args(["-CONT", &t.pid().to_string()]).status();
        let load = load?;
        // The reader polls every 100 ms: let it catch up, then scrape.
        std::thread::sleep(Duration::from_secs(1));
        let text = http_get(&addr, "/metrics")?;
        t.stop()?;
        let sum = |name: &str, labels: &[&str]| -> u64 {
            text.lines()
                .filter(|l| !l.starts_with('#'))
                .filter_map(|l| {
                    let (series, value) = l.rsplit_once(' ')?;
                    let (n, rest) = series.split_once('{').unwrap_or((series, ""));
                    (n == name && labels.iter().all(|w| rest.contains(w)))
                        .then(|| value.parse::<f64>().ok())?
                })
                .sum::<f64>() as u64
        };
        Ok(Stall {
            connections: load.connections,
            kernel_accepted: load.tfo_active,
            exported_accepted: sum(
                "tfo_trace_connections_total",
                &[r#"role="client""#, r#"outcome="accepted""#],
            ),
            events_lost: sum("tfo_trace_events_lost_total", &[]),
        })
    }
}

/// HTTP/1.0 GET on loopback: the body.
fn http_get(addr: &str, target: &str) -> Result<String> {
    use std::io::Read as _;
    let mut s = std::net::TcpStream::connect(addr).with_context(|| format!("connecting to {addr}"))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(s, "GET {target} HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
    let mut raw = String::new();
    s.read_to_string(&mut raw)?;
    Ok(raw.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default())
}
