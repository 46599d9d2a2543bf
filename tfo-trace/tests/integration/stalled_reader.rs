//! Counts that survive a stalled reader: the exporter is stopped (SIGSTOP) while the lab
//! makes hundreds of TFO connections through a ring buffer far too small for them. Its
//! events are lost, and say so; its counts must not be: after SIGCONT every series must
//! equal the kernel's own counters (nstat, per namespace).
use crate::common;

use std::net::SocketAddr;

use common::{http_get, metric_sum, netns_inode, Deltas, Tracer};
use tfo_trace::lab::{traffic::ClientArgs, Lab, LabConfig, Side};

const PORT: u16 = 8080;

fn export_counts_stay_exact_while_the_reader_is_stopped() {
    require_kernel!();
    let lab = Lab::create(LabConfig::default()).unwrap();
    let _server = lab.start_server(common::exe(), 0, PORT, 1024, false).unwrap();
    let dst = SocketAddr::new(lab.server_addr(0, false).unwrap(), PORT);
    let args = |count| ClientArgs { count, payload_bytes: 100, ..ClientArgs::new(dst) };
    assert_eq!(lab.run_client(common::exe(), &args(1)).unwrap().ok_count(), 1, "cookie fetched");
    let (cli_ns, srv_ns) = (netns_inode(&lab, Side::Client), netns_inode(&lab, Side::Server));
    let before = Deltas::since(&lab);

    // Per-destination series on, so events flow at all; a one-page ring buffer, so they
    // cannot all fit while nobody reads them.
    let (c, s) = (cli_ns.to_string(), srv_ns.to_string());
    let mut tracer = Tracer::start_command(&[
        "export",
        "--web.listen-address",
        "127.0.0.1:0",
        "--top-destinations",
        "5",
        "--ring-buffer-size",
        "4096",
        "--netns",
        &c,
        "--netns",
        &s,
        "--json-summary",
    ]);
    let line = tracer.wait_stderr("serving metrics on http://");
    let addr: SocketAddr = line
        .split("http://")
        .nth(1)
        .and_then(|r| r.split('/').next())
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("no address in {line:?}"));

    tracer.signal(libc::SIGSTOP);
    let n = 300;
    let run = lab.run_client(common::exe(), &args(n)).unwrap();
    tracer.signal(libc::SIGCONT);
    assert_eq!(run.ok_count(), n as usize, "lab connections failed");

    let (dc, ds) = before.both();
    assert_eq!(dc.get("TcpExtTCPFastOpenActive"), u64::from(n), "client counters: {dc:?}");
    // A scrape reads the kernel's counts then (the events lost among them): every count
    // equals the kernel's, whatever the reader has read of the events.
    let (status, text) = http_get(addr, "/metrics").unwrap();
    assert_eq!(status, 200);
    let accepted = |role| metric_sum(&text, "tfo_trace_connections_total", &[role, r#"outcome="accepted""#]);
    assert_eq!(accepted(r#"role="client""#) as u64, dc.get("TcpExtTCPFastOpenActive"), "{text}");
    assert_eq!(accepted(r#"role="server""#) as u64, ds.get("TcpExtTCPFastOpenPassive"), "{text}");
    let bytes = metric_sum(&text, "tfo_trace_syn_data_bytes_total", &[r#"role="client""#]) as u64;
    assert_eq!(bytes, 100 * u64::from(n), "every SYN carried 100 bytes: {text}");
    let handshakes = metric_sum(&text, "tfo_trace_handshake_seconds_count", &[r#"role="client""#]) as u64;
    assert_eq!(handshakes, u64::from(n), "{text}");
    // The detail events could not all wait in one page: lost, and counted.
    let lost = metric_sum(&text, "tfo_trace_events_lost_total", &[]) as u64;
    assert!(lost > 0, "a stopped reader with a 4 KiB ring buffer must lose events: {text}");
    // The other ways the kernel's totals can fall short are served too, from 0; these two
    // cannot happen with 300 connections (one map entry each, one namespace).
    let health = |name: &str| {
        let sample = text.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' '));
        sample.and_then(|v| v.parse::<u64>().ok()).unwrap_or_else(|| panic!("no {name} sample: {text}"))
    };
    health("tfo_trace_hook_runs_missed_total");
    assert_eq!(health("tfo_trace_connects_unfollowed_total"), 0, "{text}");
    assert_eq!(health("tfo_trace_outcomes_uncounted_total"), 0, "{text}");
    let (_, stderr) = tracer.stop_lines();
    // And the closing summary says the same: events lost, none of the counts.
    let closing = common::closing(&stderr).unwrap_or_else(|| panic!("no closing summary: {stderr:?}"));
    assert_eq!(closing["events_lost"], lost, "{closing}");
}

module_tests!(export_counts_stay_exact_while_the_reader_is_stopped);
