//! `tfo-trace export --flight-recorder DIR` with the real exporter on a lab with a stalling
//! destination (the lab's middlebox drops SYN-data toward one server address), checked
//! against the kernel's counters as `nstat` reads them (`common::nstat`, the test's own
//! parser): after `kill -9` the directory's report has every stall and acceptance the
//! kernel counted; a restart on the same directory adds to it; `--since` and `--until`
//! select the window; a burst of thousands of connections stays within a small size;
//! `/recording` over TLS with basic auth gives a recording `report` reads; a full disk
//! (a tmpfs the test mounts), twice, keeps `/metrics` answering and counts what
//! was not written; refused directories are one line before anything is loaded. Each
//! exporter counts only its own lab's namespaces (`--netns`).
use crate::common;

use std::{
    net::SocketAddr,
    os::unix::fs::{MetadataExt as _, PermissionsExt as _},
    path::{Path, PathBuf},
    process::Command,
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc,
    },
    time::Duration,
};

use common::{
    free_port, http_get, netns_inode,
    nstat::{Deltas, Nstat},
    prometheus::{curl_get, web_config_files, Tls},
    HookRun, TempDir, Tracer,
};
use serde_json::Value;
use tfo_trace::lab::{traffic::ClientArgs, ClientRun, Lab, LabConfig, ServerHandle, Side};

const PORT: u16 = 8080;

/// A lab with two server addresses, a TFO server on each, a cookie cached for both: `clean`,
/// and `blocked`, behind the middlebox (every SYN-data toward it dropped: a 1 s stall).
struct StallingLab {
    lab: Lab,
    clean: SocketAddr,
    blocked: SocketAddr,
    _servers: [ServerHandle; 2],
}

impl StallingLab {
    fn create() -> StallingLab {
        let lab = Lab::create(LabConfig { server_addrs: 2, ..LabConfig::default() }).unwrap();
        let address = |i| SocketAddr::new(lab.server_addr(i, false).unwrap(), PORT);
        let (clean, blocked) = (address(0), address(1));
        let server = |i| lab.start_server(common::exe(), i, PORT, 16, false).unwrap();
        let _servers = [server(0), server(1)];
        for dst in [clean, blocked] {
            assert_eq!(connect(&lab, dst, 1).ok_count(), 1, "cookie from {dst}");
        }
        lab.middlebox_drop_syn_data(Some(blocked.ip())).unwrap();
        StallingLab { lab, clean, blocked, _servers }
    }
}

/// `n` TFO connections to `dst`, one after another; each must succeed.
fn connect(lab: &Lab, dst: SocketAddr, n: u32) -> ClientRun {
    let run = lab.run_client(common::exe(), &ClientArgs { count: n, ..ClientArgs::new(dst) }).unwrap();
    assert_eq!(run.ok_count(), n as usize, "connections to {dst}: {run:?}");
    run
}

/// A running `tfo-trace export --flight-recorder DIR` on a free loopback port, counting only
/// `lab`'s namespaces, with `extra` flags.
struct Exporter {
    tracer: Tracer,
    addr: SocketAddr,
    /// How to reach it over TLS (with `--web.config.file`).
    tls: Option<Tls>,
}

impl Exporter {
    fn start(lab: &Lab, dir: &Path, extra: &[&str]) -> Exporter {
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let (listen, cli, srv) = (
            addr.to_string(),
            netns_inode(lab, Side::Client).to_string(),
            netns_inode(lab, Side::Server).to_string(),
        );
        let dir = dir.to_str().unwrap();
        let mut args = vec!["export", "--web.listen-address", &listen, "--netns", &cli, "--netns", &srv];
        args.extend(["--flight-recorder", dir]);
        args.extend_from_slice(extra);
        let mut tracer = Tracer::start_command(&args);
        tracer.wait_stderr("keeping a flight recording in");
        Exporter { tracer, addr, tls: None }
    }

    /// `/metrics` (200, or the test fails).
    fn metrics(&self) -> String {
        let (status, body) = match &self.tls {
            None => http_get(self.addr, "/metrics").unwrap(),
            Some(tls) => curl_get(self.addr, "/metrics", tls, Some(true)),
        };
        assert_eq!(status, 200, "/metrics: {body}");
        body
    }

    /// Waits until the recorder has handled every event the kernel counted in the lab's
    /// namespaces (written it, or counted it as not written), and returns the exposition:
    /// the events are read (and written) within 100 ms of happening, the kernel's counts
    /// are exact at once.
    fn wait_recorded(&self) -> String {
        common::eventually("the flight recorder has every event the kernel counted", || {
            let m = self.metrics();
            let handled = value(&m, "tfo_trace_flight_recorder_events_total")
                + value(&m, "tfo_trace_flight_recorder_events_unwritten_total")
                + value(&m, "tfo_trace_events_lost_total");
            let counted = hooked_events(&m);
            if handled >= counted && counted > 0.0 {
                Ok(m)
            } else {
                Err(format!("{handled} of {counted}"))
            }
        })
    }
}

/// A metric without labels in an exposition (0 where absent).
fn value(exposition: &str, metric: &str) -> f64 {
    common::metric_sum(exposition, metric, &[])
}

/// Every outcome the hooks counted (`tfo_trace_connections_total` but for the series the
/// namespaces' own counters count, which no event stands for): the events there are.
fn hooked_events(exposition: &str) -> f64 {
    exposition
        .lines()
        .filter(|l| l.starts_with("tfo_trace_connections_total{") && !l.contains("source=\"kernel_counter\""))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum()
}

/// `tfo-trace ARGS`, which must exit 0: its stdout and stderr.
fn run_ok(args: &[&str]) -> (String, String) {
    let out = Command::new(common::exe()).args(args).output().expect("running tfo-trace");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert_eq!(out.status.code(), Some(0), "tfo-trace {args:?}: {stderr}");
    (stdout, stderr)
}

/// `report --format json --from PATH` with `extra` flags.
fn report(path: &Path, extra: &[&str]) -> Value {
    let mut args = vec!["report", "--format", "json", "--all", "--from", path.to_str().unwrap()];
    args.extend_from_slice(extra);
    let (stdout, _) = run_ok(&args);
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("report JSON: {e}: {stdout}"))
}

/// A destination's row of a report (None: no connection there in its window).
fn row(report: &Value, dst: SocketAddr) -> Option<&Value> {
    report["destinations"].as_array().unwrap().iter().find(|d| d["destination"] == dst.to_string())
}

/// A figure of a destination's row (0 where it has none).
fn figure(report: &Value, dst: SocketAddr, key: &str) -> u64 {
    row(report, dst).map_or(0, |d| d[key].as_u64().unwrap_or(0))
}

/// Server TFO connections accepted at every listener of a report.
fn server_accepted(report: &Value) -> u64 {
    report["listeners"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["outcomes"]["accepted"].as_u64().unwrap_or(0))
        .sum()
}

/// The report's figures against the kernel's counters over the same connections: every
/// acceptance (client TcpExtTCPFastOpenActive toward the clean address, server
/// TcpExtTCPFastOpenPassive) and every stall (TcpExtTCPSynRetrans and ActiveFail toward the
/// blocked one).
fn assert_report_is_the_kernels(what: &str, r: &Value, s: &StallingLab, client: &Nstat, server: &Nstat) {
    let why = format!("{what}: client nstat {client:?}, server nstat {server:?}, report {r:#}");
    assert_eq!(figure(r, s.clean, "accepted"), client.get("TcpExtTCPFastOpenActive"), "{why}");
    assert_eq!(server_accepted(r), server.get("TcpExtTCPFastOpenPassive"), "{why}");
    let stalls = figure(r, s.blocked, "syn_data_dropped");
    eprintln!(
        "{what}: report accepted {} (kernel TcpExtTCPFastOpenActive {}), server accepted {} (Passive {}), \
         stalls {} (TcpExtTCPSynRetrans {})",
        figure(r, s.clean, "accepted"),
        client.get("TcpExtTCPFastOpenActive"),
        server_accepted(r),
        server.get("TcpExtTCPFastOpenPassive"),
        stalls,
        client.get("TcpExtTCPSynRetrans")
    );
    assert_eq!(client.get("TcpExtTCPSynRetrans"), client.get("TcpExtTCPFastOpenActiveFail"), "{why}");
    common::assert_hook_count(HookRun::Established, stalls, client.get("TcpExtTCPSynRetrans"), &why);
}

/// Every file of a recorder's directory, as bytes.
fn files_of(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .map(|p| (p.clone(), std::fs::read(&p).unwrap()))
        .collect()
}

/// The cookie the client's kernel cached for `dst` (`ip tcp_metrics`, hex).
fn cached_cookie(lab: &Lab, dst: SocketAddr) -> String {
    let metrics = lab.tcp_metrics(Side::Client).unwrap();
    let line = metrics
        .lines()
        .find(|l| l.starts_with(&format!("{} ", dst.ip())))
        .unwrap_or_else(|| panic!("{metrics}"));
    let mut words = line.split_whitespace();
    words.find(|w| *w == "fo_cookie");
    words.next().unwrap_or_else(|| panic!("no cookie cached for {dst}: {line}")).to_string()
}

/// Now, as RFC 3339 (UTC, ns).
fn now_rfc3339() -> String {
    let ns = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    jiff::Timestamp::from_nanosecond(ns as i128).unwrap().to_string()
}

/// The exporter killed with SIGKILL mid-run keeps every stall and acceptance the kernel
/// counted; restarted on the same directory, the old and the new add up; and the restart's
/// moment splits them: `--since` it is the second run alone, `--until` it the first, in
/// `report`, `stalls` and `trace` alike, as a time and as a duration back from now.
fn kill_9_restart_and_windows_agree_with_the_kernel() {
    require_kernel!();
    let s = StallingLab::create();
    let tmp = TempDir::new("flight-kill");
    let dir = tmp.0.join("recorder");
    let (ok, stalled) = (5, 2);

    // First run, ended by SIGKILL once the recorder has every event.
    let first = Deltas::since(&s.lab);
    let exporter = Exporter::start(&s.lab, &dir, &[]);
    connect(&s.lab, s.clean, ok);
    connect(&s.lab, s.blocked, stalled);
    exporter.wait_recorded();
    exporter.tracer.signal(libc::SIGKILL);
    drop(exporter);
    let (c1, s1) = first.both();
    assert_eq!(c1.get("TcpExtTCPSynRetrans"), u64::from(stalled), "the middlebox stalls: {c1:?}");
    let r = report(&dir, &[]);
    assert_eq!(r["source"]["kind"], "flight_recorder", "{r:#}");
    assert_eq!(
        (r["source"]["bad_lines"].as_u64(), r["source"]["torn_lines"].as_u64()),
        (Some(0), Some(0)),
        "{r:#}"
    );
    assert_report_is_the_kernels("after kill -9", &r, &s, &c1, &s1);
    // Private, and no cookie in it: only its length and a keyed hash.
    assert_eq!(std::fs::metadata(&dir).unwrap().mode() & 0o777, 0o700);
    let cookies = [cached_cookie(&s.lab, s.clean), cached_cookie(&s.lab, s.blocked)];
    for (path, bytes) in files_of(&dir) {
        assert_eq!(std::fs::metadata(&path).unwrap().mode() & 0o777, 0o600, "{}", path.display());
        let text = String::from_utf8_lossy(&bytes).to_lowercase();
        for c in &cookies {
            assert!(!text.contains(&c.to_lowercase()), "{}: the cookie {c} was written", path.display());
        }
    }

    // The moment between the runs; then a second run on the same directory, stopped.
    let between = now_rfc3339();
    let second = Deltas::since(&s.lab);
    let exporter = Exporter::start(&s.lab, &dir, &[]);
    connect(&s.lab, s.clean, ok + 2);
    connect(&s.lab, s.blocked, stalled + 1);
    exporter.wait_recorded();
    exporter.tracer.stop_lines();
    let (c2, s2) = second.both();
    let (c12, s12) = first.both();

    let whole = report(&dir, &[]);
    assert!(whole["source"]["segments"].as_u64() >= Some(2), "a segment per run at least: {whole:#}");
    assert_report_is_the_kernels("both runs", &whole, &s, &c12, &s12);
    let since = report(&dir, &["--since", &between]);
    assert_eq!(since["source"]["since"].as_str(), Some(between.as_str()), "{since:#}");
    assert_report_is_the_kernels("--since the restart", &since, &s, &c2, &s2);
    let until = report(&dir, &["--until", &between]);
    assert_report_is_the_kernels("--until the restart", &until, &s, &c1, &s1);
    // As a duration back from now, to the millisecond (never before the restart's moment).
    let ago = jiff::Timestamp::now().duration_since(between.parse::<jiff::Timestamp>().unwrap());
    let ago = format!("{}ms", ago.as_millis());
    assert_report_is_the_kernels("--since a duration", &report(&dir, &["--since", &ago]), &s, &c2, &s2);

    // stalls and trace read the same window: the second run's stalls, its acceptances.
    let (lines, _) = run_ok(&["stalls", "--json", "--from", dir.to_str().unwrap(), "--since", &between]);
    let stall_lines = lines.lines().filter(|l| l.contains("\"cause\":\"syn_data_dropped\"")).count() as u64;
    common::assert_hook_count(
        HookRun::Established,
        stall_lines,
        c2.get("TcpExtTCPSynRetrans"),
        "stalls --since",
    );
    let (events, _) = run_ok(&["trace", "--json", "--from", dir.to_str().unwrap(), "--until", &between]);
    let accepted = events
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| e["role"] == "client" && e["outcome"] == "accepted")
        .count() as u64;
    assert_eq!(accepted, c1.get("TcpExtTCPFastOpenActive"), "trace --until: the first run's");
}

/// A burst of thousands of connections (tens of recorder segments' worth in each batch the
/// exporter reads) never takes the directory past `--flight-recorder-size`, measured every
/// few ms while it comes; what is kept is the newest, every event is counted as written.
fn a_small_bound_holds_under_a_burst() {
    require_kernel!();
    let lab = Lab::create(LabConfig::default()).unwrap();
    let dst = SocketAddr::new(lab.server_addr(0, false).unwrap(), PORT);
    let _server = lab.start_server(common::exe(), 0, PORT, 16, false).unwrap();
    connect(&lab, dst, 1);
    let tmp = TempDir::new("flight-burst");
    let dir = tmp.0.join("recorder");
    const BOUND: u64 = 64 * 1024;
    let exporter = Exporter::start(&lab, &dir, &["--flight-recorder-size", "64KiB"]);

    // The directory's size, every 5 ms while the burst comes (bounded: 10 minutes), and
    // its largest file. A sample reads the files one after the other while the writer
    // appends and removes: a file read before its removal plus one written after can count
    // a write twice, at most one segment's bytes (a segment closes when full). So the bound
    // holds "within one segment" (issue 53): seen 65,613 and 67,511 bytes against 65,536.
    let (stop, largest, largest_file) =
        (Arc::new(AtomicBool::new(false)), Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let sampler = {
        let (stop, largest, largest_file, dir) =
            (stop.clone(), largest.clone(), largest_file.clone(), dir.clone());
        std::thread::spawn(move || {
            let mut samples = 0u64;
            while !stop.load(Ordering::Relaxed) && samples < 120_000 {
                let sizes: Vec<u64> = std::fs::read_dir(&dir)
                    .map(|d| d.filter_map(|e| e.ok()?.metadata().ok()).map(|m| m.len()).collect())
                    .unwrap_or_default();
                largest.fetch_max(sizes.iter().sum(), Ordering::Relaxed);
                largest_file.fetch_max(sizes.iter().copied().max().unwrap_or(0), Ordering::Relaxed);
                samples += 1;
                std::thread::sleep(Duration::from_millis(5));
            }
            samples
        })
    };
    let before = Deltas::since(&lab);
    let n = 3000;
    let run = connect(&lab, dst, n);
    let m = exporter.wait_recorded();
    stop.store(true, Ordering::Relaxed);
    let samples = sampler.join().unwrap();
    let (largest, segment) = (largest.load(Ordering::Relaxed), largest_file.load(Ordering::Relaxed));
    let client = before.of(Side::Client);
    eprintln!(
        "{samples} samples of the directory, the largest {largest} bytes, its largest file {segment}; {}",
        client.get("TcpExtTCPFastOpenActive")
    );
    assert_eq!(client.get("TcpExtTCPFastOpenActive"), u64::from(n), "{client:?}");
    assert!(segment < BOUND / 4, "segments are a small share of the bound: {segment}");
    assert!(largest <= BOUND + segment, "the directory held {largest} bytes, over {BOUND} + {segment}");
    assert!(value(&m, "tfo_trace_flight_recorder_bytes") <= BOUND as f64);
    assert_eq!(value(&m, "tfo_trace_flight_recorder_events_unwritten_total"), 0.0);
    assert_eq!(value(&m, "tfo_trace_flight_recorder_events_total"), hooked_events(&m), "every event written");

    // What is kept: the last connections, in order, to the very last.
    let (lines, _) = run_ok(&["trace", "--json", "--role", "client", "--from", dir.to_str().unwrap()]);
    let kept: Vec<u64> =
        lines.lines().map(|l| serde_json::from_str::<Value>(l).unwrap()["sport"].as_u64().unwrap()).collect();
    let made: Vec<u64> = run.results.iter().map(|r| u64::from(r.sport)).collect();
    assert!(kept.len() > 10 && kept.len() < made.len() / 4, "{} of {} kept", kept.len(), made.len());
    assert_eq!(kept[..], made[made.len() - kept.len()..], "the newest connections, in order");
    exporter.tracer.stop_lines();
}

/// `GET /recording` on the exporter's own listener, with its TLS and basic auth: 401
/// without the right credentials, 400 to plain HTTP; with them, a recording `report`
/// reads, with every stall and acceptance the kernel counted; `?since=` a moment after
/// them gives none of them; a bad window is 400.
fn recording_over_https_with_basic_auth() {
    require_kernel!();
    let s = StallingLab::create();
    let web = web_config_files("flight-web");
    let tmp = TempDir::new("flight-http");
    let dir = tmp.0.join("recorder");
    let before = Deltas::since(&s.lab);
    let mut exporter = Exporter::start(&s.lab, &dir, &["--web.config.file", web.file.to_str().unwrap()]);
    exporter.tls = Some(web.tls.clone());
    connect(&s.lab, s.clean, 4);
    connect(&s.lab, s.blocked, 1);
    exporter.wait_recorded();
    let (client, server) = before.both();
    let after = now_rfc3339();

    let wrong = Tls { user: "nobody".into(), ..web.tls.clone() };
    let target = "/recording?since=1h";
    let codes = [
        curl_get(exporter.addr, target, &web.tls, None).0,
        curl_get(exporter.addr, target, &web.tls, Some(false)).0,
        curl_get(exporter.addr, target, &wrong, Some(true)).0,
    ];
    assert_eq!(codes, [401, 401, 401], "without, with a wrong password, an unknown user");
    let (plain, said) = http_get(exporter.addr, target).unwrap();
    assert!(
        plain == 400 && !said.contains("tfo_trace_recording"),
        "plain HTTP to the TLS port: {plain} {said}"
    );
    let (status, body) = curl_get(exporter.addr, target, &web.tls, Some(true));
    assert_eq!(status, 200, "{body}");
    let got = tmp.0.join("recording.jsonl");
    std::fs::write(&got, &body).unwrap();
    let r = report(&got, &[]);
    assert_eq!(r["source"]["kind"], "recording", "{r:#}");
    assert_report_is_the_kernels("/recording?since=1h", &r, &s, &client, &server);

    let since_after = format!("/recording?since={}", after.replace('+', "%2B"));
    let (status, body) = curl_get(exporter.addr, &since_after, &web.tls, Some(true));
    assert_eq!(status, 200, "{body}");
    std::fs::write(&got, &body).unwrap();
    assert_eq!(report(&got, &[])["source"]["events"], 0, "nothing after {after}");
    for bad in ["/recording?since=yesterday", "/recording?from=1h", "/recording?since=1h&until=2h"] {
        assert_eq!(curl_get(exporter.addr, bad, &web.tls, Some(true)).0, 400, "{bad}");
    }
    exporter.tracer.stop_lines();
}

/// A tmpfs the test mounts, unmounted (lazily, by its path) when dropped.
struct Tmpfs(TempDir);

impl Tmpfs {
    fn mount(name: &str, size: &str) -> Tmpfs {
        let dir = TempDir::new(name);
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size},mode=0700"), "tmpfs"])
            .arg(&dir.0)
            .output()
            .unwrap();
        assert!(out.status.success(), "mount: {}", String::from_utf8_lossy(&out.stderr));
        Tmpfs(dir)
    }

    /// Bytes free for a file now.
    fn free(&self) -> u64 {
        let path = std::ffi::CString::new(self.0 .0.to_str().unwrap()).unwrap();
        // SAFETY: statvfs is plain data; all zeros is a valid value of it.
        let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
        // SAFETY: statvfs with a NUL-terminated path and a live struct to fill.
        let filled = unsafe { libc::statvfs(path.as_ptr(), &mut st) };
        assert_eq!(filled, 0);
        st.f_bavail * st.f_frsize
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0 .0).status();
    }
}

/// A full disk, room again, then a full disk again: `/metrics` answers throughout with the
/// kernel's counts, what was not written is counted (`..._unwritten_total`) and said once
/// per episode, what was written reads back whole, and recording goes on once there is room.
fn a_full_disk_keeps_metrics_and_counts_what_was_not_written() {
    require_kernel!();
    let lab = Lab::create(LabConfig::default()).unwrap();
    let dst = SocketAddr::new(lab.server_addr(0, false).unwrap(), PORT);
    let _server = lab.start_server(common::exe(), 0, PORT, 16, false).unwrap();
    connect(&lab, dst, 1);
    let disk = Tmpfs::mount("flight-full", "512k");
    // Room for a few dozen events, no more.
    let filler = disk.0 .0.join("filler");
    std::fs::write(&filler, vec![0u8; (disk.free() - 48 * 1024) as usize]).unwrap();
    let dir = disk.0 .0.join("recorder");
    let before = Deltas::since(&lab);
    let exporter = Exporter::start(&lab, &dir, &[]);

    // Full: written until there is no room, the rest counted.
    connect(&lab, dst, 600);
    let m = exporter.wait_recorded();
    let written = value(&m, "tfo_trace_flight_recorder_events_total");
    let unwritten = value(&m, "tfo_trace_flight_recorder_events_unwritten_total");
    let client = before.of(Side::Client);
    let accepted =
        common::metric_sum(&m, "tfo_trace_connections_total", &[r#"role="client""#, r#"outcome="accepted""#]);
    assert_eq!(accepted, client.get("TcpExtTCPFastOpenActive") as f64, "/metrics counts on: {client:?}");
    eprintln!("full: written {written}, not written {unwritten}, of {} hooked events", hooked_events(&m));
    assert!(written > 0.0 && unwritten > 0.0, "written {written}, not written {unwritten}");
    assert_eq!(written + unwritten, hooked_events(&m), "every event written or counted as not");
    let r = report(&dir, &[]);
    assert_eq!(r["source"]["events"].as_f64(), Some(written), "what was written reads back whole: {r:#}");
    assert_eq!(r["source"]["bad_lines"], 0);
    // What fits is written: the 48 KiB of room (less the marker's page) is mostly used, not
    // lost with a batch that did not fit whole.
    let segment_bytes: u64 = files_of(&dir)
        .iter()
        .filter(|(path, _)| path.extension().is_some_and(|e| e == "jsonl"))
        .map(|(_, bytes)| bytes.len() as u64)
        .sum();
    eprintln!("full: {segment_bytes} bytes of segments in 48 KiB of room");
    assert!(segment_bytes > 32 * 1024, "{segment_bytes} bytes written in 48 KiB of room");

    // Room again: recording goes on.
    std::fs::remove_file(&filler).unwrap();
    connect(&lab, dst, 20);
    let m = exporter.wait_recorded();
    assert_eq!(
        value(&m, "tfo_trace_flight_recorder_events_unwritten_total"),
        unwritten,
        "none lost with room"
    );
    let written_again = value(&m, "tfo_trace_flight_recorder_events_total");
    assert!(written_again >= written + 40.0, "{written} -> {written_again}");

    // Full again, to the last byte: a second episode, counted and said again. (Not a
    // read-only remount: the kernel refuses `remount,ro` with EBUSY while the exporter
    // holds its segment open for writing.)
    std::fs::write(&filler, vec![0u8; disk.free() as usize]).unwrap();
    connect(&lab, dst, 20);
    let m = exporter.wait_recorded();
    let unwritten_again = value(&m, "tfo_trace_flight_recorder_events_unwritten_total");
    // Not all 40 events: the active segment's last tmpfs page still takes a few lines
    // (seen in the 6.12 VM cell: 32 of 40 not written).
    assert!(unwritten_again > unwritten, "{unwritten} -> {unwritten_again}");
    let (_, stderr) = exporter.tracer.stop_lines();
    let said =
        |what: &str| stderr.iter().filter(|l| l.contains("--flight-recorder") && l.contains(what)).count();
    assert_eq!((said("cannot write"), said("recording again")), (2, 1), "once per episode: {stderr:#?}");
}

/// A directory the recorder must not write in is refused at once, one line, exit 2, before
/// anything is loaded, and left as it was: a symbolic link, another user's, one writable
/// by others, one holding other files, one whose parent is missing; a size too small is a
/// usage error too.
fn refused_directories_are_one_line_before_anything_is_loaded() {
    let tmp = TempDir::new("flight-refused");
    let mine = tmp.0.join("mine");
    std::fs::create_dir(&mine).unwrap();
    std::fs::write(mine.join("notes.txt"), "mine").unwrap();
    let link = tmp.0.join("link");
    std::os::unix::fs::symlink(&mine, &link).unwrap();
    let open = tmp.0.join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let mut cases: Vec<(PathBuf, &str)> = vec![
        (link.clone(), "is a symbolic link"),
        (mine.clone(), "holds files that are not a flight recorder's (notes.txt)"),
        (open.clone(), "is writable by its group"),
        (tmp.0.join("no/such"), "does not exist"),
    ];
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        let theirs = tmp.0.join("theirs");
        std::fs::create_dir(&theirs).unwrap();
        std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
        cases.push((theirs, "belongs to uid 65534"));
    } else {
        common::partial_skip("another user's directory: making one needs root");
    }
    for (dir, says) in &cases {
        let out = Command::new(common::exe())
            .args(["export", "--web.listen-address", "127.0.0.1:0", "--flight-recorder"])
            .arg(dir)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{}: {stderr}", dir.display());
        assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
        let prefix = format!("tfo-trace: error: --flight-recorder {}: ", dir.display());
        assert!(stderr.starts_with(&prefix) && stderr.contains(says), "{stderr}");
    }
    assert_eq!(std::fs::read_to_string(mine.join("notes.txt")).unwrap(), "mine");
    assert_eq!(std::fs::read_dir(&mine).unwrap().count(), 1, "nothing added");
    let out = Command::new(common::exe())
        .args(["export", "--flight-recorder", tmp.0.to_str().unwrap(), "--flight-recorder-size", "1KiB"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
}

module_tests!(
    kill_9_restart_and_windows_agree_with_the_kernel,
    a_small_bound_holds_under_a_burst,
    recording_over_https_with_basic_auth,
    a_full_disk_keeps_metrics_and_counts_what_was_not_written,
    refused_directories_are_one_line_before_anything_is_loaded,
);
