//! `tfo-trace lab-soak` (hidden; `cargo xtask soak` runs it and keeps its report): a long
//! run of mixed lab traffic (accepted TFO, plain connections, SYN-data dropped by the
//! middlebox, server key rotations) under `top --batch` and `export`, both children of
//! this process. Every minute the memory and the fds of both are sampled; at the end
//! their counts are compared with the kernel's counters of the lab's namespaces.
//! Bounded: the traffic stops at `--minutes`, every child is stopped by its pid.
use std::{
    io::{BufRead as _, BufReader, Read as _, Write as _},
    net::{SocketAddr, TcpStream},
    path::Path,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{bail, Context as _, Result};
use serde::Serialize;

use super::{
    namespaces::{Lab, LabConfig, Side},
    traffic::ClientArgs,
};
use crate::kernel::netstat::Netstat;

#[derive(Debug, Clone, clap::Args)]
pub struct SoakArgs {
    /// How long the traffic runs.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=1440))]
    pub minutes: u64,
    /// How often tracer memory and fds are sampled.
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(5..=3600))]
    pub(crate) sample_seconds: u64,
}

/// One sample of a tracer process.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Sample {
    pub(crate) minute: f64,
    pub(crate) export_rss_kib: u64,
    pub(crate) export_fds: usize,
    pub(crate) top_rss_kib: u64,
    pub(crate) top_fds: usize,
}

/// What `lab-soak` prints (one JSON object).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct SoakReport {
    pub minutes: f64,
    pub(crate) cycles: u64,
    pub(crate) key_rotations: u64,
    pub(crate) samples: Vec<Sample>,
    /// Kernel counter deltas over the run (client and server namespaces).
    pub(crate) kernel_client_active: u64,
    pub(crate) kernel_server_passive: u64,
    pub(crate) kernel_client_syn_retrans: u64,
    /// What `export` said at the end, for the same.
    pub(crate) export_client_accepted: u64,
    pub(crate) export_server_accepted: u64,
    pub(crate) export_stall_seconds: f64,
    pub(crate) export_events_lost: u64,
    /// `top`'s last totals.
    pub(crate) top_client_accepted: u64,
    pub(crate) top_server_accepted: u64,
    /// The verdicts, as one line each.
    pub checks: Vec<(String, bool)>,
}

fn status_kib(pid: u32, key: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix(key)?.strip_prefix(':')?.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0)
}

fn fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map(|d| d.count()).unwrap_or(0)
}

/// A tracer child: its stderr read on a thread (the "serving" line), stdout kept.
struct Child2 {
    child: Child,
    lines: std::sync::mpsc::Receiver<String>,
    stdout: Option<std::thread::JoinHandle<String>>,
}

fn spawn_tracer(exe: &Path, args: &[&str]) -> Result<Child2> {
    let mut child = Command::new(exe)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting tfo-trace {}", args.join(" ")))?;
    let (tx, lines) = std::sync::mpsc::channel();
    let err = child.stderr.take().context("stderr")?;
    std::thread::spawn(move || {
        for l in BufReader::new(err).lines().map_while(Result::ok) {
            let _ = tx.send(l);
        }
    });
    let mut out = child.stdout.take().context("stdout")?;
    let stdout = Some(std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    }));
    Ok(Child2 { child, lines, stdout })
}

impl Child2 {
    fn wait_line(&self, needle: &str) -> Result<String> {
        let deadline = Instant::now() + Duration::from_secs(240);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let l = self.lines.recv_timeout(left).with_context(|| format!("no line with {needle:?}"))?;
            if l.contains(needle) {
                return Ok(l);
            }
        }
    }

    /// SIGINT, then its stdout (SIGKILL after 60 s).
    fn stop(mut self) -> String {
        // SAFETY: kill on our own child's pid.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.stdout.take().and_then(|h| h.join().ok()).unwrap_or_default()
    }
}

fn scrape(addr: &str) -> Result<String> {
    let mut s = TcpStream::connect(addr).with_context(|| format!("connecting to {addr}"))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(s, "GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
    let mut raw = String::new();
    s.read_to_string(&mut raw)?;
    Ok(raw.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default())
}

fn metric(text: &str, name: &str, labels: &[&str]) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let (n, rest) = series.split_once('{').unwrap_or((series, ""));
            (n == name && labels.iter().all(|w| rest.contains(w))).then(|| value.parse::<f64>().ok())?
        })
        .sum()
}

/// Server keys for the rotations (32 hex digits each, as the sysctl takes them).
const KEYS: [&str; 2] = ["00000000-00000000-00000000-0000000a", "00000000-00000000-00000000-0000000b"];

pub fn run(args: &SoakArgs) -> Result<()> {
    let exe = std::env::current_exe().context("finding tfo-trace")?;
    let lab = Lab::create(LabConfig { client_fastopen: 0x3, server_fastopen: 0x2, server_addrs: 2 })?;
    let port = 8080;
    let (clean, dropped) = (lab.server_addr(0, false)?, lab.server_addr(1, false)?);
    lab.set_sysctl(Side::Server, "net.ipv4.tcp_fastopen_key", KEYS[0])?;
    let _s1 = lab.start_server(&exe, 0, port, 64, false)?;
    let _s2 = lab.start_server(&exe, 1, port, 64, false)?;
    lab.middlebox_drop_syn_data(Some(dropped))?;
    let (cli, srv) = (lab.netns(Side::Client).to_string(), lab.netns(Side::Server).to_string());
    let export = spawn_tracer(
        &exe,
        &["export", "--web.listen-address", "127.0.0.1:0", "--netns", &cli, "--netns", &srv],
    )?;
    let line = export.wait_line("serving metrics on http://")?;
    let addr = line
        .split("http://")
        .nth(1)
        .and_then(|r| r.split('/').next())
        .context("exporter address")?
        .to_string();
    let top =
        spawn_tracer(&exe, &["top", "--batch", "--json", "--delay", "10", "--netns", &cli, "--netns", &srv])?;
    top.wait_line("programs attached")?;
    let before = (lab.netstat(Side::Client)?, lab.netstat(Side::Server)?);

    let start = Instant::now();
    let end = start + Duration::from_secs(args.minutes * 60);
    let sample_every = Duration::from_secs(args.sample_seconds);
    let mut next_sample = start;
    let mut samples = Vec::new();
    let (mut cycles, mut rotations) = (0u64, 0u64);
    let (epid, tpid) = (export.child.id(), top.child.id());
    while Instant::now() < end {
        if Instant::now() >= next_sample {
            samples.push(Sample {
                minute: start.elapsed().as_secs_f64() / 60.0,
                export_rss_kib: status_kib(epid, "VmRSS"),
                export_fds: fds(epid),
                top_rss_kib: status_kib(tpid, "VmRSS"),
                top_fds: fds(tpid),
            });
            next_sample += sample_every;
        }
        // One cycle (a few seconds): TFO connections that are accepted, one that stalls,
        // and plain ones; every 30 cycles the server's key rotates (the next connect's
        // cookie is invalid, its data not acked).
        cycles += 1;
        if cycles % 30 == 0 {
            rotations += 1;
            lab.set_sysctl(Side::Server, "net.ipv4.tcp_fastopen_key", KEYS[(rotations % 2) as usize])?;
        }
        lab.run_client(&exe, &ClientArgs { count: 20, ..ClientArgs::new(SocketAddr::new(clean, port)) })?;
        lab.run_client(&exe, &ClientArgs { count: 1, ..ClientArgs::new(SocketAddr::new(dropped, port)) })?;
        let plain = Command::new("ip")
            .args(["netns", "exec", &cli])
            .arg(&exe)
            .args(["lab-load", "--plain", "--listen", "127.0.0.1:9099", "--rate", "500", "--duration", "2s"])
            .output()
            .context("running lab-load --plain")?;
        if !plain.status.success() {
            bail!("lab-load --plain failed: {}", String::from_utf8_lossy(&plain.stderr));
        }
    }
    // Let both readers catch up, then the verdicts.
    std::thread::sleep(Duration::from_secs(12));
    let dc = Netstat::delta(&before.0, &lab.netstat(Side::Client)?);
    let ds = Netstat::delta(&before.1, &lab.netstat(Side::Server)?);
    let text = scrape(&addr)?;
    let top_out = top.stop();
    export.stop();
    let last: serde_json::Value =
        top_out.lines().rev().find_map(|l| serde_json::from_str(l).ok()).unwrap_or(serde_json::Value::Null);
    let acc = |role: &str| {
        metric(&text, "tfo_trace_connections_total", &[&format!("role=\"{role}\""), "outcome=\"accepted\""])
            as u64
    };
    let mut report = SoakReport {
        minutes: start.elapsed().as_secs_f64() / 60.0,
        cycles,
        key_rotations: rotations,
        kernel_client_active: dc.get("TcpExtTCPFastOpenActive"),
        kernel_server_passive: ds.get("TcpExtTCPFastOpenPassive"),
        kernel_client_syn_retrans: dc.get("TcpExtTCPSynRetrans"),
        export_client_accepted: acc("client"),
        export_server_accepted: acc("server"),
        export_stall_seconds: metric(&text, "tfo_trace_stall_seconds_total", &[]),
        export_events_lost: metric(&text, "tfo_trace_events_lost_total", &[]) as u64,
        top_client_accepted: last["totals"]["client"]["accepted"].as_u64().unwrap_or(0),
        top_server_accepted: last["totals"]["server"]["accepted"].as_u64().unwrap_or(0),
        samples,
        checks: Vec::new(),
    };
    report.checks = checks(&report);
    let mut out = std::io::stdout().lock();
    serde_json::to_writer(&mut out, &report)?;
    writeln!(out)?;
    Ok(())
}

/// The soak's verdicts: counts exact, memory and fds flat after the first minutes.
fn checks(r: &SoakReport) -> Vec<(String, bool)> {
    // Warm-up: the first two minutes (a third of a short run), while tables fill.
    let warm_from = (r.minutes / 3.0).min(2.0);
    let warm: Vec<&Sample> = r.samples.iter().filter(|s| s.minute >= warm_from).collect();
    let flat = |f: &dyn Fn(&Sample) -> u64| -> (u64, u64, bool) {
        let (first, last) = (warm.first().map(|s| f(s)), warm.last().map(|s| f(s)));
        match (first, last) {
            // Flat: the last sample within 10 % (and 2 MiB) of the first after warm-up.
            (Some(a), Some(b)) => (a, b, b <= a + a / 10 + 2048),
            _ => (0, 0, false),
        }
    };
    let (e0, e1, e_ok) = flat(&|s| s.export_rss_kib);
    let (t0, t1, t_ok) = flat(&|s| s.top_rss_kib);
    let fds_flat =
        warm.windows(2).all(|w| w[1].export_fds <= w[0].export_fds + 2 && w[1].top_fds <= w[0].top_fds + 2);
    vec![
        (
            format!(
                "export client accepted {} = kernel TcpExtTCPFastOpenActive {}",
                r.export_client_accepted, r.kernel_client_active
            ),
            r.export_client_accepted == r.kernel_client_active,
        ),
        (
            format!(
                "export server accepted {} = kernel TcpExtTCPFastOpenPassive {}",
                r.export_server_accepted, r.kernel_server_passive
            ),
            r.export_server_accepted == r.kernel_server_passive,
        ),
        (
            format!(
                "top client accepted {} = kernel TcpExtTCPFastOpenActive {}",
                r.top_client_accepted, r.kernel_client_active
            ),
            r.top_client_accepted == r.kernel_client_active,
        ),
        (format!("export RSS flat after warm-up: {e0} KiB -> {e1} KiB"), e_ok),
        (format!("top RSS flat after warm-up: {t0} KiB -> {t1} KiB"), t_ok),
        ("fds flat (no sample grew by more than 2)".to_string(), fds_flat),
    ]
}
