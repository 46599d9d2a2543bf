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

/// `report --from` a recording of a busy node's day ([`write_day`]: 1,000,000 destinations,
/// 1 to 100 connections each, a long tail, problems mixed in): what the report's targets
/// are measured on.
pub struct ReportScale {
    pub file_bytes: u64,
    /// What was written: client connections, destinations, events in all.
    pub written: Day,
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
    let path = scratch.join("report-day.jsonl");
    let written = write_day(&path)?;
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
        written,
        runs,
        connections: n("connections"),
        destinations: n("destinations"),
        dropped_rows: v["summary"]["verdicts"]["syn_data_dropped"].as_u64().unwrap_or(0),
    };
    if scale.connections != written.connections
        || scale.destinations != written.destinations
        || scale.dropped_rows != written.dropped_destinations
    {
        bail!(
            "report --from counted {} connections, {} destinations, {} syn_data_dropped rows; wrote {}, {}, {}",
            scale.connections,
            scale.destinations,
            scale.dropped_rows,
            written.connections,
            written.destinations,
            written.dropped_destinations
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
        "bench-report: report --from {} events, {} client connections to {} destinations ({:.0} MiB of JSON lines): {}; target <= {REPORT_MAX_MIB:.0} MiB and <= {REPORT_MAX_S:.0} s: {}",
        r.written.events,
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

/// What [`write_day`] wrote.
#[derive(Clone, Copy, Debug)]
pub struct Day {
    /// Events, client and server.
    pub events: u64,
    /// Client connections (each client event ends one).
    pub connections: u64,
    pub destinations: u64,
    /// Destinations whose SYN-data was dropped at least once (a second connection or more).
    pub dropped_destinations: u64,
    /// Destinations with k connections, k = 1..=100.
    pub by_connections: [u64; MOST_CONNECTIONS + 1],
}

/// The most connections one destination of the day gets.
pub(super) const MOST_CONNECTIONS: usize = 100;

/// A busy node's day, as its flight recorder would hold it (events/record.rs, format 1):
/// 1,000,000 destinations, each with between 1 and [`MOST_CONNECTIONS`] connections, P(k) proportional to 1/k^2 (a long tail:
/// 61 % are seen once, 1 % a hundred times; 3.2 on average, as client traffic over a day
/// spreads over a few busy services and many one-off ones). A destination's first
/// connection asks for a cookie (its first contact); after it, one destination in
/// [`DROP_EVERY`] loses every SYN-data (a 1 s stall each), one in [`NOT_ACKED_EVERY`] has it
/// refused (a new cookie), the rest are accepted. The connections come in rounds over the
/// day (every destination's first, then the second of those with two or more, ...), so a
/// destination's connections are spread over the recording, not next to each other; and
/// one server event (an accepted SYN-data at one of 4 listeners) per 10 client events.
/// Every event carries every field a live one of a Kubernetes node does (as
/// [`write_million`]'s).
pub(super) fn write_day(path: &Path) -> Result<Day> {
    let n = MILLION as usize;
    // Destinations per count of connections: n/k^2 of the tail's weight, the rest once.
    let weight: f64 = (1..=MOST_CONNECTIONS).map(|k| 1.0 / (k * k) as f64).sum();
    let mut day = Day {
        events: 0,
        connections: 0,
        destinations: MILLION,
        dropped_destinations: 0,
        by_connections: [0; MOST_CONNECTIONS + 1],
    };
    for k in 2..=MOST_CONNECTIONS {
        day.by_connections[k] = (MILLION as f64 / (k * k) as f64 / weight).round() as u64;
    }
    day.by_connections[1] = MILLION - day.by_connections[2..].iter().sum::<u64>();
    // Destination d's place in that order: a fixed permutation (multiplying by a number
    // prime to n), so busy destinations are spread over the addresses.
    let mut connections = vec![0u8; n];
    let mut place = 0usize;
    for k in (1..=MOST_CONNECTIONS).rev() {
        for _ in 0..day.by_connections[k] {
            connections[(place * 7919) % n] = k as u8;
            place += 1;
        }
    }
    day.connections = connections.iter().map(|&k| u64::from(k)).sum();
    day.dropped_destinations =
        (0..n).filter(|&d| d as u64 % DROP_EVERY == 7 && connections[d] >= 2).count() as u64;

    let file = fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let mut w = BufWriter::with_capacity(1 << 20, file);
    writeln!(
        w,
        r#"{{"tfo_trace_recording":1,"host":"bench","kernel":"synthetic","backend":"tracepoint","start":"2026-01-01T00:00:00.000000000Z","version":"bench"}}"#
    )?;
    // Within the day: one server event after every 9 client ones (below), so at most
    // connections + connections / 9 + 1 events; fewer slots put the last past 24:00.
    let ns_per_event = 86_400_000_000_000 / (day.connections + day.connections / 9 + 2);
    let mut i = 0u64;
    for round in 0..MOST_CONNECTIONS as u8 {
        for (d, _) in connections.iter().enumerate().filter(|(_, &k)| k > round) {
            let d = d as u64;
            let outcome = match d {
                _ if round == 0 => Outcome::CookieRequested,
                _ if d % DROP_EVERY == 7 => Outcome::Dropped,
                _ if d % NOT_ACKED_EVERY == 3 => Outcome::NotAcked,
                _ => Outcome::Accepted,
            };
            write_event(&mut w, i * ns_per_event, i, d, outcome, false)?;
            i += 1;
            if i.is_multiple_of(10) {
                write_event(&mut w, i * ns_per_event, i, i % 4, Outcome::Accepted, true)?;
                i += 1;
            }
        }
    }
    day.events = i;
    w.flush().with_context(|| format!("writing {}", path.display()))?;
    Ok(day)
}

/// What a generated connection did.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Outcome {
    CookieRequested,
    Accepted,
    /// SYN-data dropped: a 1 s stall.
    Dropped,
    /// SYN-data refused: a new cookie came back.
    NotAcked,
}

/// One event of a Kubernetes node's recording at `at_ns` after the day's start: client
/// `i` to destination `d` (10.a.b.c:443), or (`server`) one accepted at listener `d`.
fn write_event(w: &mut impl Write, at_ns: u64, i: u64, d: u64, outcome: Outcome, server: bool) -> Result<()> {
    let (a, b, c) = ((d >> 16) & 0xff, (d >> 8) & 0xff, d & 0xff);
    let (secs, ns) = (at_ns / 1_000_000_000, at_ns % 1_000_000_000);
    let at = format!("2026-01-01T{:02}:{:02}:{:02}.{ns:09}Z", secs / 3600, secs / 60 % 60, secs % 60);
    let (name, data, cookie, retransmits, handshake_us, stall_us, saved_us, cause) = match outcome {
        Outcome::CookieRequested => ("cookie_requested", 0, "null", 0, 120, 0, "null", ""),
        Outcome::Accepted => ("accepted", 64, "8", 0, 120, 0, "95", ""),
        Outcome::Dropped => ("syn_retransmitted", 64, "8", 1, 1_000_120, 1_000_000, "null", ""),
        Outcome::NotAcked => ("data_not_acked", 64, "8", 0, 240, 0, "null", r#""cause":"new_cookie","#),
    };
    // A destination is reached from one pod's namespace (one row of the report each).
    let pod = if server { i % PODS } else { d % PODS };
    let uid = format!("5f0c7a3e-1b2d-4c6e-8f9a-{pod:012x}");
    let id = format!("{:064x}", 0x7e57_c0de_u64 * (pod + 1));
    let cgroup = format!(
        "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice/cri-containerd-{id}.scope",
        uid.replace('-', "_")
    );
    let (role, saddr, sport, daddr, dport) = match server {
        false => ("client", format!("10.244.1.{pod}"), 32768 + i % 28000, format!("10.{a}.{b}.{c}"), 443),
        true => ("server", format!("10.244.1.{}", 100 + d), 8080, format!("10.9.{b}.{c}"), 40000 + i % 20000),
    };
    writeln!(
        w,
        concat!(
            r#"{{"ts":"{at}","role":"{role}","outcome":"{name}","family":4,"#,
            r#""saddr":"{saddr}","sport":{sport},"daddr":"{daddr}","dport":{dport},"#,
            r#""netns":{netns},"netns_name":"cni-{uid}","pid":{pid},"comm":"app","syn_data_bytes":{data},"#,
            r#""cookie_len":{cookie},{cause}"exp_option":false,"retransmits":{retransmits},"handshake_us":{handshake_us},"#,
            r#""stall_us":{stall_us},"saved_us":{saved_us},"cgroup_id":{cgroup_id},"cgroup":"{cgroup}","#,
            r#""container_id":"{id}","container_runtime":"containerd","pod_uid":"{uid}","#,
            r#""container_name":"app","pod":"web-{pod}","pod_namespace":"shop","container":"shop/web-{pod}/app"}}"#
        ),
        at = at,
        role = role,
        name = name,
        saddr = saddr,
        sport = sport,
        daddr = daddr,
        dport = dport,
        netns = 4026532200 + pod,
        uid = uid,
        pid = 4242 + pod,
        data = data,
        cookie = cookie,
        cause = cause,
        retransmits = retransmits,
        handshake_us = handshake_us,
        stall_us = stall_us,
        saved_us = saved_us,
        cgroup_id = 90_000 + pod,
        pod = pod,
        cgroup = cgroup,
        id = id,
    )?;
    Ok(())
}

pub(super) struct Million {
    pub(super) vm_hwm_kib: u64,
    pub(super) evicted: Option<u64>,
    pub(super) seconds: f64,
    pub(super) file_bytes: u64,
    pub(super) output_lines: usize,
}
