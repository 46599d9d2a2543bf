//! `tfo-trace export` against a real Prometheus: the lab makes accepted and stalled TFO
//! connections while a Prometheus server (Debian's `prometheus` package, on loopback, with
//! its own config and data directory) scrapes the exporter every second; the values
//! Prometheus then returns from its HTTP API must equal the kernel's counter deltas in the
//! lab's namespaces. `promtool check metrics` must pass on the exposition and on the
//! textfile. One kernel test only: tests in one binary run in parallel, and that one
//! counts kernel events. Beside it, `prometheus_rules` checks the shipped alerting rules
//! (deploy/prometheus) with promtool: their syntax, and their unit tests.
mod common;

use std::{
    io::Write as _,
    net::SocketAddr,
    path::Path,
    process::{Command, Stdio},
};

use common::{
    free_port, http_get, netns_inode,
    prometheus::{self, now_unix, Prometheus},
    Deltas, Tracer,
};
use tfo_trace::{
    kernel::netstat::Netstat,
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
    let lab = Lab::create(LabConfig { server_addrs: 2, ..LabConfig::default() }).unwrap();
    let clean = SocketAddr::new(lab.server_addr(0, false).unwrap(), PORT);
    let blocked = SocketAddr::new(lab.server_addr(1, false).unwrap(), PORT);
    let _s0 = lab.start_server(common::exe(), 0, PORT, 16, false).unwrap();
    let _s1 = lab.start_server(common::exe(), 1, PORT, 16, false).unwrap();
    let client =
        |dst, count| ClientArgs { count, payload_bytes: PAYLOAD, timeout_ms: 5000, ..ClientArgs::new(dst) };
    for dst in [clean, blocked] {
        assert_eq!(
            lab.run_client(common::exe(), &client(dst, 1)).unwrap().ok_count(),
            1,
            "cookie from {dst}"
        );
    }
    lab.middlebox_drop_syn_data(Some(blocked.ip())).unwrap();
    let (cli_ns, srv_ns) = (netns_inode(&lab, Side::Client), netns_inode(&lab, Side::Server));

    // The exporter counts the whole host; --netns keeps other TFO traffic on this machine
    // (another test run, say) out of the comparison. --top-destinations 1: the first
    // destination seen (the clean one, below) gets its own series, the other goes to "other".
    let exporter: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let textfile = dir.join("tfo_trace.prom");
    let tracer = Tracer::start_command(&[
        "export",
        "--web.listen-address",
        &exporter.to_string(),
        "--netns",
        &cli_ns.to_string(),
        "--netns",
        &srv_ns.to_string(),
        "--top-destinations",
        "1",
        "--textfile",
        textfile.to_str().unwrap(),
        "--interval",
        "1s",
    ]);
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
        r#"tfo_trace_connections_total{role="client",outcome="syn_retransmitted",destination="other"}"#
            .into(),
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
    let before = Deltas::since(&lab);
    let dropped_before = lab.middlebox_dropped().unwrap();
    // The per-destination series come from the events, which the exporter reads at its
    // next wakeup (100 ms at most), not from the kernel's counts a scrape reads then.
    let by_destination = || {
        let (_, text) = http_get(exporter, "/metrics").unwrap();
        let series = |dst: &str| {
            let labels = [r#"role="client""#, &format!(r#"destination="{dst}""#)];
            common::metric_sum(&text, "tfo_trace_connections_total", &labels)
        };
        series(&clean.to_string()) + series("other")
    };
    let by_destination_before = by_destination();

    let n_ok = 6;
    let n_stalled = 2;
    let ok = lab.run_client(common::exe(), &client(clean, n_ok)).unwrap();
    let stalled = lab.run_client(common::exe(), &client(blocked, n_stalled)).unwrap();
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
    let t_end = now_unix();
    let dropped = lab.middlebox_dropped().unwrap() - dropped_before;
    prom.wait_for_scrape_after("tfo-trace", t_end);
    let after_prom = read_all();
    let d: Vec<f64> = after_prom.iter().zip(&before_prom).map(|(a, b)| a - b).collect();
    fn tfo(n: &Netstat) -> Vec<(&str, u64)> {
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
    assert_eq!(d[1], k(dc.get("TcpExtTCPSynRetrans")), "client syn_retransmitted (stalls)");
    assert_eq!(d[1], k(dc.get("TcpExtTCPFastOpenActiveFail")), "stalled SYN-data is ActiveFail too");
    assert_eq!(d[2], k(ds.get("TcpExtTCPFastOpenCookieReqd")), "cookie requests (none: cookies cached)");
    assert_eq!(d[3], k(ds.get("TcpExtTCPFastOpenPassive")), "server accepted");
    // The top-1 destination is the clean one; the blocked one is counted under "other".
    assert_eq!(d[4], k(dc.get("TcpExtTCPFastOpenActive")), "destination={clean}");
    assert_eq!(d[5], k(dc.get("TcpExtTCPSynRetrans")), "destination=other");
    // Every SYN carried the payload: accepted ones and the ones the middlebox dropped.
    let syns_with_data = dc.get("TcpExtTCPFastOpenActive") + dc.get("TcpExtTCPSynRetrans");
    assert_eq!(d[6], k(syns_with_data * PAYLOAD as u64), "client SYN-data bytes");
    assert_eq!(d[7], k(ds.get("TcpExtTCPFastOpenPassive") * PAYLOAD as u64), "server SYN-data bytes");
    // Each stall is the kernel's 1 s initial SYN RTO: 0.9-1.5 s each, in the 0.9-1.5 s buckets.
    let stalls = k(dc.get("TcpExtTCPSynRetrans"));
    assert!(d[8] >= 0.9 * stalls && d[8] <= 1.5 * stalls, "stall seconds {} for {stalls} stalls", d[8]);
    assert_eq!(d[10] - d[9], stalls, "handshakes between 0.9 s and 1.5 s");
    assert_eq!(d[11], k(syns_with_data), "one handshake observation per client connection");
    assert_eq!(prom.value(r#"count(tfo_trace_build_info{backend="tracepoint"} == 1)"#), 1.0);

    // The exposition, from HTTP and from the textfile, passes promtool's checks.
    let (status, exposition) = http_get(exporter, "/metrics").unwrap();
    assert_eq!(status, 200);
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

tests_main!(prometheus_scrapes_what_the_kernel_counted, prometheus_rules);
