//! `tfo-trace export` against a real Prometheus: the lab makes accepted and stalled TFO
//! connections while a Prometheus server (Debian's `prometheus` package, on loopback, with
//! its own config and data directory) scrapes the exporter every second; the values
//! Prometheus then returns from its HTTP API must equal the kernel's counter deltas in the
//! lab's namespaces. `promtool check metrics` must pass on the exposition and on the
//! textfile. Beside it, `prometheus_rules` checks the shipped alerting rules
//! (deploy/prometheus) with promtool: their syntax, and their unit tests; and
//! `alerts_reach_alertmanager` runs them end to end: the lab's middlebox, the exporter, a
//! real Prometheus evaluating the rules and a real Alertmanager notifying a webhook in the
//! test. The two kernel tests count only their own lab's namespaces (`--netns`), so they
//! may run at once. The Grafana dashboard's tests are in export/dashboard.rs (same lab,
//! same Prometheus, run beside these); `default_port_is_the_same_everywhere` checks that
//! what ships and what the docs say listen where the binary does.
mod dashboard;

use crate::common;

use std::{
    io::{BufRead as _, BufReader, Read as _, Write as _},
    net::{SocketAddr, TcpListener},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, Mutex,
    },
    thread::JoinHandle,
    time::Duration,
};

use common::{
    free_port, http_get, netns_inode,
    prometheus::{self, now_unix, Prometheus},
    wire::WireStalls,
    Deltas, HookRun, TempDir, Tracer,
};
use serde_json::Value;
use tfo_trace::{
    events::Outcome,
    lab::{traffic::ClientArgs, Lab, LabConfig, Side},
};

const PORT: u16 = 8080;
const PAYLOAD: usize = 100;

/// `promtool check metrics` on `text`; panics with its output if it complains.
fn promtool_check(promtool: &Path, text: &str, what: &str) {
    let mut child = Command::new(promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running promtool");
    child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(
        out.status.success() && said.trim().is_empty(),
        "promtool check metrics on {what}: {said}\n{text}"
    );
}

/// A lab with two server addresses, a TFO server on each: `clean`, and `blocked` for the
/// tests to put behind the middlebox.
struct TwoDestinations {
    lab: Lab,
    clean: SocketAddr,
    blocked: SocketAddr,
    _servers: [tfo_trace::lab::ServerHandle; 2],
}

impl TwoDestinations {
    fn create() -> TwoDestinations {
        let lab = Lab::create(LabConfig { server_addrs: 2, ..LabConfig::default() }).unwrap();
        let address = |i| SocketAddr::new(lab.server_addr(i, false).unwrap(), PORT);
        let (clean, blocked) = (address(0), address(1));
        let server = |i| lab.start_server(common::exe(), i, PORT, 16, false).unwrap();
        let _servers = [server(0), server(1)];
        TwoDestinations { lab, clean, blocked, _servers }
    }

    /// Both destinations hand out a cookie (a cookie request passes the middlebox), then
    /// the middlebox drops SYN-data toward `blocked`: each connection to it stalls a second.
    fn cookies_then_stall_blocked(&self) {
        for dst in [self.clean, self.blocked] {
            let run = self.lab.run_client(common::exe(), &client(dst, 1, 0)).unwrap();
            assert_eq!(run.ok_count(), 1, "cookie from {dst}");
        }
        self.lab.middlebox_drop_syn_data(Some(self.blocked.ip())).unwrap();
    }
}

/// `count` TFO connections to `dst`, `interval_ms` apart, each with [`PAYLOAD`] bytes.
fn client(dst: SocketAddr, count: u32, interval_ms: u64) -> ClientArgs {
    ClientArgs { count, interval_ms, payload_bytes: PAYLOAD, timeout_ms: 5000, ..ClientArgs::new(dst) }
}

/// Waits until Prometheus holds as many stalls toward `dst` as the middlebox dropped (the
/// series come from the events the exporter reads); short of them, the count it stopped
/// at must be the kernel's skipped hook run.
fn stalls_reach_prometheus(prom: &Prometheus, dst: SocketAddr, dropped: u64) {
    let stalls = format!(
        r#"tfo_trace_connections_total{{role="client",outcome="syn_retransmitted",destination="{dst}"}}"#
    );
    let in_prometheus = common::wait::within(common::HANG_LIMIT, || match prom.query(&stalls) {
        Some(n) if n as u64 == dropped => Ok(n),
        seen => Err(seen.unwrap_or(0.0)),
    })
    .unwrap_or_else(|last| last) as u64;
    common::assert_hook_count(
        HookRun::Established,
        in_prometheus,
        dropped,
        "the middlebox's drops as stalls",
    );
}

/// `tfo-trace export` on a free loopback port with `args`, counting only `lab`'s
/// namespaces: the exporter counts the whole host, and --netns keeps other TFO traffic on
/// this machine (another test, say) out of what the test compares.
fn lab_exporter(lab: &Lab, args: &[&str]) -> (SocketAddr, Tracer) {
    let exporter: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let (listen, cli_ns, srv_ns) = (
        exporter.to_string(),
        netns_inode(lab, Side::Client).to_string(),
        netns_inode(lab, Side::Server).to_string(),
    );
    let mut all = vec!["export", "--web.listen-address", &listen, "--netns", &cli_ns, "--netns", &srv_ns];
    all.extend_from_slice(args);
    (exporter, Tracer::start_command(&all))
}

fn prometheus_scrapes_what_the_kernel_counted() {
    require_kernel!();
    let (prometheus, promtool) = match prometheus::binaries() {
        Ok(b) => b,
        Err(why) => common::skip(why),
    };
    let dir = std::env::temp_dir().join(format!("tfo-trace-export-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();

    // Two destinations: a clean one and one behind a middlebox that drops SYN-data. Both
    // hand out a cookie first (a cookie request passes the middlebox).
    let two = TwoDestinations::create();
    let (lab, clean, blocked) = (&two.lab, two.clean, two.blocked);
    two.cookies_then_stall_blocked();

    // --top-destinations 1: the first destination seen (the clean one, below) gets its own
    // series; the blocked one, seen after the clean one took the place, gets one of its own
    // at its first stall (issue 37: it went to "other", and the alert on stalls named no
    // destination).
    let textfile = dir.join("tfo_trace.prom");
    let (exporter, mut tracer) = lab_exporter(
        lab,
        &["--top-destinations", "1", "--textfile", textfile.to_str().unwrap(), "--interval", "1s"],
    );
    // The backend the tracer says it attached with, whichever this kernel gives.
    let backend = common::backend_of(&[tracer.wait_stderr("programs attached")]);
    let config = format!(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
         scrape_configs:\n  - job_name: tfo-trace\n    static_configs:\n      - targets: ['{exporter}']\n"
    );
    let prom = Prometheus::start(&prometheus, &dir, &config, None);
    prom.wait_for_scrape_after("tfo-trace", now_unix());
    assert_eq!(prom.value(r#"up{job="tfo-trace"}"#), 1.0, "prometheus scrapes the exporter");

    let q = |role: &str, outcome: &str| {
        format!(r#"sum(tfo_trace_connections_total{{role="{role}",outcome="{outcome}"}})"#)
    };
    let queries = [
        q("client", "accepted"),
        q("client", "syn_retransmitted"),
        q("client", "cookie_requested"),
        q("server", "accepted"),
        format!(r#"tfo_trace_connections_total{{role="client",outcome="accepted",destination="{clean}"}}"#),
        format!(
            r#"tfo_trace_connections_total{{role="client",outcome="syn_retransmitted",destination="{blocked}"}}"#
        ),
        r#"tfo_trace_syn_data_bytes_total{role="client"}"#.into(),
        r#"tfo_trace_syn_data_bytes_total{role="server"}"#.into(),
        "sum(tfo_trace_stall_seconds_total)".into(),
        r#"tfo_trace_handshake_seconds_bucket{role="client",le="0.9"}"#.into(),
        r#"tfo_trace_handshake_seconds_bucket{role="client",le="1.5"}"#.into(),
        r#"tfo_trace_handshake_seconds_count{role="client"}"#.into(),
    ];
    // Series that do not exist yet (a destination not seen yet) count as 0.
    let read_all = || queries.iter().map(|q| prom.query(q).unwrap_or(0.0)).collect::<Vec<f64>>();
    let before_prom = read_all();
    let before = Deltas::since(lab);
    let dropped_before = lab.middlebox_dropped().unwrap();
    let wire = lab.capture_syns(Side::Client).unwrap();
    // The per-destination series come from the events, which the exporter reads at its
    // next wakeup (100 ms at most), not from the kernel's counts a scrape reads then.
    let by_destination = || {
        let (_, text) = http_get(exporter, "/metrics").unwrap();
        let series = |dst: &str| {
            let labels = [r#"role="client""#, &format!(r#"destination="{dst}""#)];
            common::metric_sum(&text, "tfo_trace_connections_total", &labels)
        };
        // Not "other": it takes what the kernel counted beyond the events read so far, so
        // it would say every connection arrived before the exporter read one.
        series(&clean.to_string()) + series(&blocked.to_string())
    };
    let by_destination_before = by_destination();
    // A tracer beside the exporter: the hook's events for the same runs, which tell a
    // skipped hook run (both one short) from a series that lost a count.
    let witness = Tracer::start(&["--netns", &netns_inode(lab, Side::Client).to_string()]);

    let n_ok = 6;
    let n_stalled = 2;
    let ok = lab.run_client(common::exe(), &client(clean, n_ok, 0)).unwrap();
    let stalled = lab.run_client(common::exe(), &client(blocked, n_stalled, 0)).unwrap();
    assert_eq!(ok.ok_count() + stalled.ok_count(), (n_ok + n_stalled) as usize, "lab connections failed");
    // Every outcome is counted (and its event written) before the client returns: a scrape
    // reads the kernel's counts then; the events, once the exporter has read them all.
    let (dc, ds) = before.both();
    let connections = (dc.get("TcpExtTCPFastOpenActive") + dc.get("TcpExtTCPFastOpenActiveFail")) as f64;
    common::eventually("every client connection in the exporter's destination series", || {
        let seen = by_destination() - by_destination_before;
        if seen >= connections {
            Ok(())
        } else {
            Err(format!("{seen} of {connections}"))
        }
    });
    let stalled = WireStalls::of(&wire.stop());
    let (witnessed, _) = witness.stop();
    let t_end = now_unix();
    let dropped = lab.middlebox_dropped().unwrap() - dropped_before;
    prom.wait_for_scrape_after("tfo-trace", t_end);
    let after_prom = read_all();
    let d: Vec<f64> = after_prom.iter().zip(&before_prom).map(|(a, b)| a - b).collect();
    fn tfo(n: &common::Nstat) -> Vec<(&str, u64)> {
        n.nonzero().filter(|(k, _)| k.contains("FastOpen") || k.contains("SynRetrans")).collect()
    }
    eprintln!("kernel client: {:?}; server: {:?}", tfo(&dc), tfo(&ds));
    eprintln!("prometheus deltas: {:?}", queries.iter().zip(&d).collect::<Vec<_>>());

    // The kernel agrees with the lab first (else the comparison below proves nothing).
    assert_eq!(dc.get("TcpExtTCPFastOpenActive"), u64::from(n_ok), "client counters: {dc:?}");
    assert_eq!(dc.get("TcpExtTCPSynRetrans"), u64::from(n_stalled), "client counters: {dc:?}");
    assert_eq!(dropped, u64::from(n_stalled), "SYN-data the middlebox dropped");

    // What Prometheus stored equals the kernel's counter deltas.
    let k = |v: u64| v as f64;
    assert_eq!(d[0], k(dc.get("TcpExtTCPFastOpenActive")), "client accepted");
    let stalls = dc.get("TcpExtTCPSynRetrans");
    let witnessed_stalls = witnessed.iter().filter(|e| e.outcome == Outcome::SynRetransmitted).count() as u64;
    common::assert_view_count(
        HookRun::Established,
        d[1] as u64,
        witnessed_stalls,
        stalls,
        "client syn_retransmitted (stalls) in Prometheus",
    );
    assert_eq!(d[1], k(dc.get("TcpExtTCPFastOpenActiveFail")), "stalled SYN-data is ActiveFail too");
    assert_eq!(d[2], k(ds.get("TcpExtTCPFastOpenCookieReqd")), "cookie requests (none: cookies cached)");
    assert_eq!(d[3], k(ds.get("TcpExtTCPFastOpenPassive")), "server accepted");
    // The top-1 destination is the clean one; the blocked one has its own since its stall.
    assert_eq!(d[4], k(dc.get("TcpExtTCPFastOpenActive")), "destination={clean}");
    assert_eq!(d[5], k(dc.get("TcpExtTCPSynRetrans")), "destination={blocked}");
    // Every SYN carried the payload: accepted ones and the ones the middlebox dropped.
    let syns_with_data = dc.get("TcpExtTCPFastOpenActive") + dc.get("TcpExtTCPSynRetrans");
    assert_eq!(d[6], k(syns_with_data * PAYLOAD as u64), "client SYN-data bytes");
    assert_eq!(d[7], k(ds.get("TcpExtTCPFastOpenPassive") * PAYLOAD as u64), "server SYN-data bytes");
    // Each stall lost what the wire shows (tcpdump's gap between its SYN-data and the SYN
    // resent), and its handshake falls in the 0.9-1.5 s buckets.
    stalled.assert_total(stalls, d[8], 0.0, "sum(tfo_trace_stall_seconds_total)");
    assert_eq!(d[10] - d[9], k(stalls), "handshakes between 0.9 s and 1.5 s");
    assert_eq!(d[11], k(syns_with_data), "one handshake observation per client connection");
    let build_info = format!(r#"count(tfo_trace_build_info{{backend="{backend}"}} == 1)"#);
    assert_eq!(prom.value(&build_info), 1.0, "the backend the tracer attached with: {backend}");

    // The exposition, from HTTP and from the textfile, passes promtool's checks.
    let (status, exposition) = http_get(exporter, "/metrics").unwrap();
    assert_eq!(status, 200);
    // A namespace's counter knows no destination: its series carry none.
    for l in exposition.lines().filter(|l| l.contains(r#"source="kernel_counter""#)) {
        assert!(!l.contains("destination="), "{l}");
    }
    promtool_check(&promtool, &exposition, "/metrics");
    assert_eq!(http_get(exporter, "/nope").unwrap().0, 404);
    let (_, stderr) = tracer.stop_lines();
    let text = std::fs::read_to_string(&textfile)
        .unwrap_or_else(|e| panic!("{}: {e}; {stderr:?}", textfile.display()));
    promtool_check(&promtool, &text, "the textfile");
    let accepted_line =
        format!(r#"tfo_trace_connections_total{{role="client",outcome="accepted",destination="{clean}"}} "#);
    let in_file: f64 = text
        .lines()
        .find_map(|l| l.strip_prefix(&accepted_line))
        .unwrap_or_else(|| panic!("no accepted series in the textfile:\n{text}"))
        .parse()
        .unwrap();
    assert_eq!(in_file, after_prom[4], "the final textfile holds what Prometheus scraped last");
    drop(prom);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `tfo_trace_syn_data_refused_total{cause}` says what each refused SYN-data's SYN-ACK
/// said, as the wire shows it: the server's TFO turned off (3 SYN-ACKs without a TFO
/// option), then on again with another key (1 SYN-ACK with another cookie than the SYN's).
/// Every SYN-data of the run is refused (the client's TcpExtTCPFastOpenActiveFail).
fn refused_syn_data_is_exported_by_what_the_synack_said() {
    require_kernel!();
    let lab = Lab::create(LabConfig::default()).unwrap();
    let key = |k| lab.set_sysctl(Side::Server, "net.ipv4.tcp_fastopen_key", k).unwrap();
    key("00000000-00000000-00000000-0000000a");
    let _server = lab.start_server(common::exe(), 0, PORT, 16, false).unwrap();
    let dst = SocketAddr::new(lab.server_addr(0, false).unwrap(), PORT);
    let client =
        |count| ClientArgs { count, payload_bytes: PAYLOAD, timeout_ms: 5000, ..ClientArgs::new(dst) };
    assert_eq!(lab.run_client(common::exe(), &client(1)).unwrap().ok_count(), 1, "cookie cached");

    let (exporter, mut tracer) = lab_exporter(&lab, &[]);
    tracer.wait_stderr("serving metrics");
    let capture = lab.capture_syns(Side::Client).unwrap();
    let before = Deltas::since(&lab);
    let tfo_off: u32 = 3;
    lab.set_sysctl(Side::Server, "net.ipv4.tcp_fastopen", "0").unwrap();
    // One at a time, each refusal counted before the next connects: on the tracepoint
    // backends a refusal's cause is read from the client's cookie cache, and a later
    // SYN-ACK already counted there leaves it `unknown` on a busy machine (a wait the
    // product bounds in time). That race has tests of its own (cookie_changes); here the
    // labels are what is checked.
    // The exporter's page once it counts `n` refused SYN-data.
    let refused_counted = |n: u64| {
        common::eventually("the refusals in the exporter's counts", || {
            let (_, text) = http_get(exporter, "/metrics").unwrap();
            let seen = common::metric_sum(&text, "tfo_trace_syn_data_refused_total", &[]);
            if seen >= n as f64 {
                Ok(text)
            } else {
                Err(format!("{seen} of {n}"))
            }
        })
    };
    for n in 1..=tfo_off {
        assert_eq!(lab.run_client(common::exe(), &client(1)).unwrap().ok_count(), 1);
        refused_counted(u64::from(n));
    }
    let on = LabConfig::default().server_fastopen.to_string();
    lab.set_sysctl(Side::Server, "net.ipv4.tcp_fastopen", &on).unwrap();
    key("00000000-00000000-00000000-0000000b");
    assert_eq!(lab.run_client(common::exe(), &client(1)).unwrap().ok_count(), 1);
    let refused = before.both().0.get("TcpExtTCPFastOpenActiveFail");
    assert_eq!(refused, u64::from(tfo_off) + 1, "every SYN-data refused");

    let by_cause = |text: &str, cause: &str| {
        common::metric_sum(text, "tfo_trace_syn_data_refused_total", &[&format!(r#"cause="{cause}""#)])
    };
    let text = refused_counted(refused);
    let (_, stderr) = tracer.stop_lines();

    // The wire's account: each SYN that carried a cookie and data, and its SYN-ACK.
    let wire = capture.stop();
    let (mut no_option, mut new_cookie) = (0, 0);
    for syn in wire.iter().filter(|s| !s.syn_ack && s.cookie.is_some() && s.payload > 0) {
        let synack = wire
            .iter()
            .find(|s| s.syn_ack && s.dport == syn.sport)
            .unwrap_or_else(|| panic!("no SYN-ACK to {syn:?} on the wire: {wire:?}"));
        match &synack.cookie {
            None if !synack.tfo => no_option += 1,
            Some(c) if Some(c) != syn.cookie.as_ref() => new_cookie += 1,
            _ => panic!("a SYN-ACK the scenario does not make: {synack:?} to {syn:?}"),
        }
    }
    assert_eq!((no_option, new_cookie), (tfo_off, 1), "the wire: {wire:?}");
    let told = (by_cause(&text, "no_tfo_option"), by_cause(&text, "new_cookie"));
    assert_eq!(told, (f64::from(no_option), f64::from(new_cookie)), "{text}\nstderr: {stderr:?}");
    assert_eq!(by_cause(&text, "unknown") + by_cause(&text, "same_cookie"), 0.0, "{text}");
}

/// The shipped rules (deploy/prometheus/tfo-trace.rules.yml): `promtool check rules`
/// passes, their unit tests (`promtool test rules` on tfo-trace.rules.test.yml: every alert
/// fires on its synthetic series with its labels and annotations, and stays silent on a
/// healthy one and on `destination="other"`) pass, every alert has a unit test, and every
/// runbook_url points at a section of docs/alerts.md.
fn prometheus_rules() {
    let promtool = Path::new("/usr/bin/promtool");
    if !promtool.exists() {
        common::skip("promtool is missing: `apt-get install prometheus` (cargo xtask setup installs it)");
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let dir = root.join("deploy/prometheus");
    for args in [["check", "rules", "tfo-trace.rules.yml"], ["test", "rules", "tfo-trace.rules.test.yml"]] {
        let out = Command::new(promtool).args(args).current_dir(&dir).output().expect("running promtool");
        let said =
            format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "promtool {}: {said}", args.join(" "));
    }

    let read =
        |path: &Path| std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let rules = read(&dir.join("tfo-trace.rules.yml"));
    let unit_tests = read(&dir.join("tfo-trace.rules.test.yml"));
    let runbook = read(&root.join("docs/alerts.md"));
    let after = |text: &str, key: &str| -> Vec<String> {
        text.lines()
            .filter_map(|l| l.trim().trim_start_matches("- ").strip_prefix(key))
            .map(|v| v.trim().to_string())
            .collect()
    };
    let alerts = after(&rules, "alert:");
    let tested = after(&unit_tests, "alertname:");
    let sections: Vec<String> = after(&runbook, "## ").iter().map(|h| h.to_lowercase()).collect();
    assert!(alerts.len() >= 9, "{alerts:?}");
    for alert in &alerts {
        assert!(tested.contains(alert), "{alert} has no unit test in tfo-trace.rules.test.yml");
        assert!(sections.contains(&alert.to_lowercase()), "{alert} has no section in docs/alerts.md");
    }
    let runbooks = after(&rules, "runbook_url:");
    assert_eq!(runbooks.len(), alerts.len(), "one runbook_url per alert");
    for (url, alert) in runbooks.iter().zip(&alerts) {
        assert!(url.ends_with(&format!("docs/alerts.md#{}", alert.to_lowercase())), "{alert}: {url}");
    }
}

/// An HTTP server on loopback that takes Alertmanager's webhook POSTs and keeps each JSON
/// body; stopped (its thread joined) when dropped.
struct Webhook {
    addr: SocketAddr,
    received: Arc<Mutex<Vec<Value>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Webhook {
    fn start() -> Webhook {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let (received, stop) = (Arc::new(Mutex::new(Vec::new())), Arc::new(AtomicBool::new(false)));
        let (keep, stopped) = (received.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            while !stopped.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((stream, _)) => {
                        if let Some(body) = Self::take(stream) {
                            keep.lock().unwrap().push(body);
                        }
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(20)),
                }
            }
        });
        Webhook { addr, received, stop, thread: Some(thread) }
    }

    /// One POST: its JSON body, answered 200.
    fn take(stream: std::net::TcpStream) -> Option<Value> {
        stream.set_nonblocking(false).ok()?;
        stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        let mut reader = BufReader::new(stream.try_clone().ok()?);
        let mut length = 0;
        loop {
            let mut line = String::new();
            reader.read_line(&mut line).ok()?;
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            if let Some((name, value)) = line.split_once(':') {
                if name.eq_ignore_ascii_case("content-length") {
                    length = value.trim().parse().ok()?;
                }
            }
        }
        let mut body = vec![0; length];
        reader.read_exact(&mut body).ok()?;
        let _ = (&stream).write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
        serde_json::from_slice(&body).ok()
    }

    /// Every alert notified so far: (status, labels, annotations).
    fn alerts(&self) -> Vec<(String, Value, Value)> {
        let received = self.received.lock().unwrap();
        received
            .iter()
            .flat_map(|n| n["alerts"].as_array().cloned().unwrap_or_default())
            .map(|a| {
                (
                    a["status"].as_str().unwrap_or("").to_string(),
                    a["labels"].clone(),
                    a["annotations"].clone(),
                )
            })
            .collect()
    }

    /// Waits for a notification of `alertname` toward `destination` with `status`.
    fn wait_for(&self, alertname: &str, destination: &str, status: &str) -> (Value, Value) {
        common::eventually(format!("{status} {alertname} toward {destination} at the webhook"), || {
            let alerts = self.alerts();
            alerts
                .iter()
                .find(|(s, l, _)| {
                    s == status && l["alertname"] == alertname && l["destination"] == destination
                })
                .map(|(_, l, a)| (l.clone(), a.clone()))
                .ok_or(alerts)
        })
    }
}

impl Drop for Webhook {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Alertmanager (Debian's prometheus-alertmanager, 0.25) on loopback, alone (no cluster),
/// with its own storage, sending every group to `webhook` at once; killed (by pid, our
/// child) when dropped.
struct Alertmanager(Child);

impl Alertmanager {
    fn start(dir: &Path, webhook: SocketAddr) -> (Alertmanager, SocketAddr) {
        let bin = Path::new("/usr/bin/prometheus-alertmanager");
        if !bin.exists() {
            common::skip(
                "no Alertmanager: `apt-get install prometheus-alertmanager` (cargo xtask setup installs it)",
            );
        }
        let config = dir.join("alertmanager.yml");
        std::fs::write(
            &config,
            format!(
                "route:\n  receiver: webhook\n  group_by: [alertname, instance, destination]\n  \
                 group_wait: 1s\n  group_interval: 1s\n  repeat_interval: 1h\n\
                 receivers:\n  - name: webhook\n    webhook_configs:\n      - url: http://{webhook}/\n        \
                 send_resolved: true\n"
            ),
        )
        .unwrap();
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let child = Command::new(bin)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.path={}", dir.join("am-data").display()))
            .arg(format!("--web.listen-address={addr}"))
            .arg("--cluster.listen-address=")
            .arg("--log.level=warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("alertmanager.log")).unwrap())
            .spawn()
            .expect("starting alertmanager");
        let mut am = Alertmanager(child);
        common::eventually("alertmanager ready", || match http_get(addr, "/-/ready") {
            Ok((200, _)) => Ok(()),
            answer => match am.0.try_wait() {
                Ok(Some(status)) => {
                    panic!("alertmanager exited ({status}): {}", log(dir, "alertmanager.log"))
                }
                _ => Err(format!("{answer:?}")),
            },
        });
        (am, addr)
    }
}

impl Drop for Alertmanager {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn log(dir: &Path, name: &str) -> String {
    std::fs::read_to_string(dir.join(name)).unwrap_or_default()
}

/// The shipped rules with every `for:` at 5 s (the expressions as shipped), for a test
/// that cannot wait 10 minutes.
fn rules_with_short_for(into: &Path) -> PathBuf {
    let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/prometheus/tfo-trace.rules.yml");
    let text = std::fs::read_to_string(&shipped).unwrap();
    let mut shortened = 0;
    let lines: Vec<String> = text
        .lines()
        .map(|l| match l.trim_start().strip_prefix("for: ") {
            Some(_) => {
                shortened += 1;
                format!("{}for: 5s", &l[..l.len() - l.trim_start().len()])
            }
            None => l.to_string(),
        })
        .collect();
    assert!(shortened >= 9, "every alert has a `for:`: {shortened}");
    let path = into.join("tfo-trace.rules.yml");
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    path
}

/// End to end: the lab's middlebox drops SYN-data toward one address; `tfo-trace export`
/// counts it; a real Prometheus scrapes it and evaluates the shipped rules (their `for:`
/// shortened to 5 s); a real Alertmanager notifies a webhook here. TFOSynDataDropped
/// must arrive naming the middlebox's destination (and not TFOCookieRequestsDropped: it had
/// given a cookie), no alert may name the clean destination, and once the middlebox is
/// gone and connections to that address are accepted again, the alert resolves.
fn alerts_reach_alertmanager() {
    require_kernel!();
    let (prometheus, _) = match prometheus::binaries() {
        Ok(b) => b,
        Err(why) => common::skip(why),
    };
    let dir = TempDir::new("alerts");
    let webhook = Webhook::start();
    let (_alertmanager, am) = Alertmanager::start(&dir.0, webhook.addr);

    let two = TwoDestinations::create();
    let (lab, clean, blocked) = (&two.lab, two.clean, two.blocked);
    let (exporter, tracer) = lab_exporter(lab, &["--top-destinations", "2"]);
    let rules = rules_with_short_for(&dir.0);
    let config = format!(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
         rule_files: ['{rules}']\n\
         alerting:\n  alertmanagers:\n    - static_configs:\n        - targets: ['{am}']\n\
         scrape_configs:\n  - job_name: tfo-trace\n    static_configs:\n      - targets: ['{exporter}']\n",
        rules = rules.display(),
    );
    let prom = Prometheus::start(&prometheus, &dir.0, &config, None);
    prom.wait_for_scrape_after("tfo-trace", now_unix());

    // Both destinations hand out a cookie (the exporter counts it), then SYN-data toward
    // one is dropped; the other stays clean.
    two.cookies_then_stall_blocked();
    let stalling = lab.spawn_client(common::exe(), &client(blocked, 15, 0)).unwrap();
    let healthy = lab.spawn_client(common::exe(), &client(clean, 60, 250)).unwrap();
    let (labels, annotations) = webhook.wait_for("TFOSynDataDropped", &blocked.to_string(), "firing");
    eprintln!("firing: {labels} {annotations}");
    assert_eq!(labels["severity"], "critical");
    assert_eq!(labels["instance"], exporter.to_string());
    let summary = annotations["summary"].as_str().unwrap_or_default();
    assert!(summary.contains(&format!("toward {blocked}")), "{summary}");
    let stalled = stalling.wait(common::HANG_LIMIT).unwrap();
    let fine = healthy.wait(common::HANG_LIMIT).unwrap();
    assert_eq!(stalled.ok_count() + fine.ok_count(), 75, "every lab connection completed");
    // What the alert rests on: every SYN-data the middlebox dropped is a stall in Prometheus.
    let dropped = lab.middlebox_dropped().unwrap();
    assert_eq!(dropped, 15, "one SYN-data dropped per connection");
    stalls_reach_prometheus(&prom, blocked, dropped);

    // Removed: connections to that address are accepted again, spread over a few scrapes.
    lab.middlebox_clear().unwrap();
    let recovered = lab.run_client(common::exe(), &client(blocked, 200, 20)).unwrap();
    assert_eq!(recovered.ok_count(), 200);
    let (labels, _) = webhook.wait_for("TFOSynDataDropped", &blocked.to_string(), "resolved");
    eprintln!("resolved: {labels}");

    let alerts = webhook.alerts();
    for (status, labels, annotations) in &alerts {
        eprintln!("notified: {status} {labels} {annotations}");
    }
    let clean_name = clean.to_string();
    for (_, labels, annotations) in &alerts {
        let text = format!("{labels} {annotations}");
        assert!(!text.contains(&clean_name), "an alert about the clean destination: {text}");
        assert_ne!(labels["alertname"], "TFOCookieRequestsDropped", "it had given a cookie: {labels}");
        assert_ne!(labels["destination"], "other", "{labels}");
    }
    drop(prom);
    let _ = tracer.stop_lines();
}

/// The exporter's default port before (CHANGELOG.md): another exporter's default, which
/// nothing may name any more.
const OLD_PORT: &str = "9435";

/// The exporter's default port is the one the systemd unit, the DaemonSet (its container
/// port, its scrape annotation, its listen address) and the man page use, and the old one
/// is left nowhere but in the release notes that say it moved.
fn default_port_is_the_same_everywhere() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let port = tfo_trace::cli::DEFAULT_EXPORT_LISTEN.parse::<SocketAddr>().unwrap().port();
    let read = |rel: &str| std::fs::read_to_string(root.join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"));
    let unit = read("deploy/tfo-trace-exporter.service");
    assert!(
        unit.contains(&format!(
            "ExecStart=/usr/local/bin/tfo-trace export --web.listen-address 127.0.0.1:{port}\n"
        )),
        "{unit}"
    );
    let daemonset = read("deploy/kubernetes/daemonset.yaml");
    for want in [
        format!("prometheus.io/port: \"{port}\""),
        format!("- --web.listen-address=0.0.0.0:{port}"),
        format!("containerPort: {port}"),
    ] {
        assert!(daemonset.contains(&want), "deploy/kubernetes/daemonset.yaml has no `{want}`");
    }
    let man = Command::new(common::exe()).args(["man", "export"]).output().unwrap();
    let man = String::from_utf8_lossy(&man.stdout);
    assert!(
        man.contains(&format!("127.0.0.1:{port}")),
        "man tfo-trace-export names the default port:\n{man}"
    );

    // The old port, anywhere in the repository's text but its release notes (and here).
    let listed = Command::new("git").args(["ls-files"]).current_dir(&root).output();
    let Some(files) = listed.ok().filter(|o| o.status.success()) else {
        common::skip("no git to list the repository's files");
    };
    let text_kinds = ["md", "rs", "yml", "yaml", "service", "json", "toml", "py"];
    let mut left = Vec::new();
    for rel in String::from_utf8_lossy(&files.stdout).lines() {
        let kind = Path::new(rel).extension().and_then(|e| e.to_str()).unwrap_or("");
        if !text_kinds.contains(&kind)
            || rel == "CHANGELOG.md"
            || rel.ends_with("tests/integration/export.rs")
        {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(root.join(rel)) else { continue };
        for (n, line) in text.lines().enumerate() {
            if line.split(|c: char| !c.is_ascii_digit()).any(|w| w == OLD_PORT) {
                left.push(format!("{rel}:{}: {}", n + 1, line.trim()));
            }
        }
    }
    assert!(left.is_empty(), "the old port {OLD_PORT} is still named:\n{}", left.join("\n"));
}

use dashboard::{
    dashboard_has_what_grafana_needs, dashboard_is_what_its_generator_makes,
    every_dashboard_panel_shows_the_lab,
};

/// Issue 55, item 7: after serving 300 outcomes the closing line said "0 events, 0 lost,
/// 300 after the last read". It says what it served: the scrapes, and the outcomes the
/// last one held, which must be what that scrape got (`tfo_trace_connections_total`
/// summed) and what the kernel counted in the lab (nstat: TFO connections at both ends);
/// its events are only refused SYN-data, none here.
fn closing_line_says_what_was_served() {
    require_kernel!();
    let lab = Lab::create(LabConfig::default()).unwrap();
    let _server = lab.start_server(common::exe(), 0, PORT, 16, false).unwrap();
    let dst = SocketAddr::new(lab.server_addr(0, false).unwrap(), PORT);
    assert_eq!(lab.run_client(common::exe(), &ClientArgs::new(dst)).unwrap().ok_count(), 1, "cookie cached");
    let (exporter, mut tracer) = lab_exporter(&lab, &[]);
    tracer.wait_stderr("serving metrics");
    let nstat = common::Deltas::since(&lab);
    let connections = |text: &str| common::metric_sum(text, "tfo_trace_connections_total", &[]);
    let (_, first) = http_get(exporter, "/metrics").unwrap();
    assert_eq!(connections(&first), 0.0, "nothing yet: {first}");
    let n = 150;
    let run = lab.run_client(common::exe(), &ClientArgs { count: n, ..ClientArgs::new(dst) }).unwrap();
    assert_eq!(run.ok_count(), n as usize);
    let (client, server) = nstat.both();
    let counted = client.get("TcpExtTCPFastOpenActive") + server.get("TcpExtTCPFastOpenPassive");
    assert_eq!(counted, 2 * u64::from(n), "{client:?} {server:?}");
    // The last scrape, once the exposition holds every connection the kernel counted.
    let last = common::eventually("every connection in the exposition", || {
        let (_, text) = http_get(exporter, "/metrics").unwrap();
        let seen = connections(&text);
        if seen >= counted as f64 {
            Ok(text)
        } else {
            Err(format!("{seen} of {counted}"))
        }
    });
    let served = connections(&last);
    assert_eq!(served, counted as f64, "{last}");
    let (_, stderr) = tracer.stop_lines();
    let closing =
        stderr.iter().find(|l| l.starts_with("tfo-trace: served ")).unwrap_or_else(|| panic!("{stderr:?}"));
    // `served 3 scrapes` at least: ours, and the eventually's each until it held them all.
    let scrapes: u64 = closing["tfo-trace: served ".len()..].split(' ').next().unwrap().parse().unwrap();
    assert!(scrapes >= 2, "{closing}");
    let want = format!(
        "scrapes of /metrics, the last with {served} outcomes (tfo_trace_connections_total), all there were; \
         0 refused SYN-data events, 0 lost"
    );
    assert!(closing.contains(&want), "{closing}\nwant: {want}");
}

module_tests!(
    closing_line_says_what_was_served,
    prometheus_scrapes_what_the_kernel_counted,
    refused_syn_data_is_exported_by_what_the_synack_said,
    prometheus_rules,
    alerts_reach_alertmanager,
    default_port_is_the_same_everywhere,
    dashboard_has_what_grafana_needs,
    dashboard_is_what_its_generator_makes,
    every_dashboard_panel_shows_the_lab,
);
