//! Step 4's replays of a million destinations: a generated recording (format 1) read by
//! `top --from` (its bounded tables' peak RSS) and by `report --from` (text and JSON: peak
//! RSS and wall time against the report's targets), also alone as `cargo xtask
//! bench-report` (no root). [`peak_of`] runs one and keeps its peak RSS.
use std::fs;
use std::io::{BufReader, BufWriter, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde_json::Value;

use super::{
    cost::status_kib,
    env::{release_bin, Env},
};
use crate::util::{self, run, workspace_root};

pub(super) const MILLION: u64 = 1_000_000;

impl Env {
    /// Writes a recording of 1,000,000 events with distinct destinations and measures
    /// `top --from` on it.
    pub(super) fn million_destinations(&self) -> Result<Million> {
        let path = self.scratch.join("million.jsonl");
        write_million(&path, Mix::Accepted)?;
        let size = fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        let run = peak_of(&self.bin, &["top", "--batch", "--from"], &path);
        let _ = fs::remove_file(&path);
        let run = run?;
        let evicted = run.stdout.split_whitespace().find_map(|w| w.strip_prefix("evicted=")?.parse().ok());
        let rows = run.stdout.lines().count();
        Ok(Million {
            vm_hwm_kib: run.vm_hwm_kib,
            evicted,
            seconds: run.seconds,
            file_bytes: size,
            output_lines: rows,
        })
    }
}

/// A run of `tfo-trace ARGS PATH` to its end: its peak RSS, wall time and stdout.
pub(super) struct Peak {
    pub(super) vm_hwm_kib: u64,
    pub(super) seconds: f64,
    pub(super) stdout: String,
}

/// Runs `bin args... path`, polling VmHWM (it only grows: the last value read before exit
/// is the peak, to within the poll interval); fails when it fails or takes over 300 s.
pub(super) fn peak_of(bin: &Path, args: &[&str], path: &Path) -> Result<Peak> {
    let what = format!("tfo-trace {}", args.join(" "));
    let start = Instant::now();
    let mut child = Command::new(bin)
        .args(args)
        .arg(path)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {what}"))?;
    let pid = child.id();
    let stdout = child.stdout.take().context("stdout")?;
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut BufReader::new(stdout), &mut s);
        s
    });
    let mut hwm = 0;
    let deadline = Instant::now() + Duration::from_secs(300);
    while child.try_wait()?.is_none() {
        if let Some(v) = status_kib(pid, "VmHWM") {
            hwm = hwm.max(v);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            bail!("{what} did not finish in 300 s");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let status = child.wait()?;
    let seconds = start.elapsed().as_secs_f64();
    let out = reader.join().unwrap_or_default();
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut e, &mut err);
    }
    if !status.success() {
        bail!("{what} failed ({status}): {}", err.trim());
    }
    Ok(Peak { vm_hwm_kib: hwm, seconds, stdout: out })
}

/// `report --from` a recording of 1,000,000 client connections, each to its own
/// destination, with problems mixed in: what the report's targets are measured on.
pub struct ReportScale {
    pub file_bytes: u64,
    /// (format, peak RSS in KiB, seconds, output bytes) for text and JSON.
    pub runs: Vec<(&'static str, u64, f64, usize)>,
    /// The summary's counts, read back from the JSON: connections, destinations, verdicts.
    pub connections: u64,
    pub destinations: u64,
    pub dropped_rows: u64,
}

pub const REPORT_MAX_MIB: f64 = 200.0;
pub const REPORT_MAX_S: f64 = 10.0;

impl ReportScale {
    pub fn met(&self) -> bool {
        self.runs.iter().all(|(_, kib, s, _)| *kib as f64 / 1024.0 <= REPORT_MAX_MIB && *s <= REPORT_MAX_S)
    }

    /// `text 120.3 MiB 4.1 s; json 121.0 MiB 4.3 s`.
    pub fn figures(&self) -> String {
        self.runs
            .iter()
            .map(|(f, kib, s, _)| format!("{f} {:.1} MiB {s:.1} s", *kib as f64 / 1024.0))
            .collect::<Vec<_>>()
            .join("; ")
    }
}

/// Generates the recording in `scratch`, runs `report --from` on it (text, then JSON) and
/// checks the JSON's totals against what was written.
pub fn report_scale(bin: &Path, scratch: &Path) -> Result<ReportScale> {
    let path = scratch.join("report-million.jsonl");
    write_million(&path, Mix::Problems)?;
    let file_bytes = fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    let mut runs = Vec::new();
    let mut json = String::new();
    let result = (|| -> Result<()> {
        for (format, args) in [
            ("text", ["report", "--format", "text", "--from"]),
            ("json", ["report", "--format", "json", "--from"]),
        ] {
            let p = peak_of(bin, &args, &path)?;
            runs.push((format, p.vm_hwm_kib, p.seconds, p.stdout.len()));
            if format == "json" {
                json = p.stdout;
            }
        }
        Ok(())
    })();
    let _ = fs::remove_file(&path);
    result?;
    let v: Value = serde_json::from_str(&json).context("report JSON")?;
    let n = |k: &str| v["summary"][k].as_u64().unwrap_or(0);
    let scale = ReportScale {
        file_bytes,
        runs,
        connections: n("connections"),
        destinations: n("destinations"),
        dropped_rows: v["summary"]["verdicts"]["syn_data_dropped"].as_u64().unwrap_or(0),
    };
    if scale.connections != MILLION
        || scale.destinations != MILLION
        || scale.dropped_rows != MILLION / DROP_EVERY
    {
        bail!(
            "report --from counted {} connections, {} destinations, {} syn_data_dropped rows; wrote {MILLION},              {MILLION}, {}",
            scale.connections,
            scale.destinations,
            scale.dropped_rows,
            MILLION / DROP_EVERY
        );
    }
    Ok(scale)
}

/// `cargo xtask bench-report`: [`report_scale`] alone (no root, no kernel): release build,
/// the figures, and whether the targets are met.
pub fn bench_report() -> Result<()> {
    let mut build = util::cargo();
    build.current_dir(workspace_root()).args(["build", "--release", "-p", "tfo-trace"]);
    run(&mut build)?;
    let scratch = std::env::temp_dir().join(format!("tfobench-report-{}", std::process::id()));
    fs::create_dir_all(&scratch).with_context(|| format!("creating {}", scratch.display()))?;
    let r = report_scale(&release_bin(), &scratch);
    let _ = fs::remove_dir_all(&scratch);
    let r = r?;
    println!(
        "bench-report: report --from {} events to {} destinations ({:.0} MiB of JSON lines): {}; target <= {REPORT_MAX_MIB:.0} MiB and <= {REPORT_MAX_S:.0} s: {}",
        r.connections,
        r.destinations,
        r.file_bytes as f64 / (1024.0 * 1024.0),
        r.figures(),
        if r.met() { "met" } else { "NOT met" }
    );
    if !r.met() {
        bail!("report --from over its target");
    }
    Ok(())
}

/// What the generated recording's connections did.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Mix {
    /// Every one accepted.
    Accepted,
    /// One in [`DROP_EVERY`] SYN-data dropped (a 1 s stall), one in [`NOT_ACKED_EVERY`] data
    /// not acknowledged, the rest accepted.
    Problems,
}

pub(super) const DROP_EVERY: u64 = 100;
pub(super) const NOT_ACKED_EVERY: u64 = 250;

/// Pods the generated clients run in, in turn: a client event of a live recording on a
/// Kubernetes node carries its cgroup and container and their names.
const PODS: u64 = 8;

/// A recording (events/record.rs, format 1) of 1,000,000 client events, each to its own
/// destination 10.a.b.c:443, each with every field a client event of a live recording
/// carries (`dname` aside: no `--names`): its namespace's `ip netns` name, the round trip
/// an accepted one saved, and the cgroup and Kubernetes container of one of [`PODS`] pods.
pub(super) fn write_million(path: &Path, mix: Mix) -> Result<()> {
    let file = fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let mut w = BufWriter::with_capacity(1 << 20, file);
    let start = "2026-01-01T00:00:00.000000000Z";
    writeln!(
        w,
        r#"{{"tfo_trace_recording":1,"host":"bench","kernel":"synthetic","backend":"tracepoint","start":"{start}","version":"bench"}}"#
    )?;
    for i in 0..MILLION {
        let (a, b, c) = ((i >> 16) & 0xff, (i >> 8) & 0xff, i & 0xff);
        let (sec, ns) = (i / 100_000, (i % 100_000) * 10_000);
        let (outcome, retransmits, handshake_us, stall_us, saved_us) = match mix {
            Mix::Problems if i % DROP_EVERY == 7 => ("syn_retransmitted", 1, 1_000_120, 1_000_000, "null"),
            Mix::Problems if i % NOT_ACKED_EVERY == 3 => ("data_not_acked", 0, 120, 0, "null"),
            _ => ("accepted", 0, 120, 0, "95"),
        };
        let pod = i % PODS;
        let uid = format!("5f0c7a3e-1b2d-4c6e-8f9a-{pod:012x}");
        let id = format!("{:064x}", 0x7e57_c0de_u64 * (pod + 1));
        let cgroup = format!(
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice/cri-containerd-{id}.scope",
            uid.replace('-', "_")
        );
        writeln!(
            w,
            concat!(
                r#"{{"ts":"2026-01-01T00:00:{sec:02}.{ns:09}Z","role":"client","outcome":"{outcome}","family":4,"#,
                r#""saddr":"10.244.1.{pod}","sport":{sport},"daddr":"10.{a}.{b}.{c}","dport":443,"#,
                r#""netns":{netns},"netns_name":"cni-{uid}","pid":{pid},"comm":"bench","syn_data_bytes":64,"#,
                r#""cookie_len":8,"exp_option":false,"retransmits":{retransmits},"handshake_us":{handshake_us},"#,
                r#""stall_us":{stall_us},"saved_us":{saved_us},"cgroup_id":{cgroup_id},"cgroup":"{cgroup}","#,
                r#""container_id":"{id}","container_runtime":"containerd","pod_uid":"{uid}","#,
                r#""container_name":"app","pod":"web-{pod}","pod_namespace":"shop","container":"shop/web-{pod}/app"}}"#
            ),
            sec = sec,
            ns = ns,
            outcome = outcome,
            pod = pod,
            sport = 32768 + (i % 28000),
            a = a,
            b = b,
            c = c,
            netns = 4026532200 + pod,
            uid = uid,
            pid = 4242 + pod,
            retransmits = retransmits,
            handshake_us = handshake_us,
            stall_us = stall_us,
            saved_us = saved_us,
            cgroup_id = 90_000 + pod,
            cgroup = cgroup,
            id = id,
        )?;
    }
    w.flush().with_context(|| format!("writing {}", path.display()))
}

pub(super) struct Million {
    pub(super) vm_hwm_kib: u64,
    pub(super) evicted: Option<u64>,
    pub(super) seconds: f64,
    pub(super) file_bytes: u64,
    pub(super) output_lines: usize,
}
