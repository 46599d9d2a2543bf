//! `tfo-trace report`: per destination and per listener, the counts by outcome, the time TFO
//! cost, and a verdict with its evidence; live over a window or from a recording.
//!
//! The verdicts are computed in `aggregation::verdict` (pure); this file gathers the kernel's
//! facts for a live run (tcp_metrics, counter deltas per namespace, listener queue sizes,
//! keys) and renders text, JSON or Markdown. A recording replayed here has no kernel facts:
//! they describe the machine now, not the one it was recorded on.
use std::{
    collections::BTreeMap,
    io::{self, Write},
    path::Path,
};

use anyhow::{Context as _, Result};
use serde::Serialize;

use crate::{
    aggregation::verdict::{self, human_us, DestinationReport, Facts, ListenerFact, Report, Verdict},
    cli::{ReportArgs, ReportFormat},
    events::{reader::EventSource, record, Event, Role},
    kernel::{
        listeners,
        netstat::Netstat,
        sysctl::{self, TfoNamespace},
        tcp_metrics,
    },
    views::{stop::Stop, trace},
};

/// Where the events came from.
#[derive(Clone, Debug, Serialize)]
pub struct Source {
    /// "recording" or "live".
    pub kind: &'static str,
    pub path: Option<String>,
    pub host: Option<String>,
    pub kernel: Option<String>,
    pub backend: Option<String>,
    pub start: Option<String>,
    pub events: usize,
    /// Events the kernel could not deliver (ring buffer full); live only.
    pub events_lost: Option<u64>,
    /// Seconds traced; live only.
    pub window_s: Option<f64>,
}

#[derive(Serialize)]
struct JsonReport<'a> {
    source: &'a Source,
    #[serde(flatten)]
    report: &'a Report,
    /// The first bad line of a recording (everything before it is in the report).
    replay_error: Option<String>,
}

pub fn run(args: ReportArgs) -> Result<()> {
    let (source, report, replay_error) = match &args.from {
        Some(path) => from_recording(path)?,
        None => {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            let (s, r) = rt.block_on(live(&args))?;
            (s, r, None)
        }
    };
    let mut out = io::stdout().lock();
    let written =
        render(&mut out, args.format, &source, &report, replay_error.as_ref().map(|e| e.to_string()));
    match written {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => {}
        r => r.context("writing to stdout")?,
    }
    match replay_error {
        // Everything the good lines give is printed; the bad line is the one error.
        Some(e) => Err(e.into()),
        None => Ok(()),
    }
}

fn from_recording(path: &Path) -> Result<(Source, Report, Option<record::ReplayError>)> {
    let (header, events, err) = record::read_recording(path)?;
    let facts = Facts { backend: Some(header.backend.clone()), ..Default::default() };
    let report = verdict::report(&events, &facts);
    let source = Source {
        kind: "recording",
        path: Some(path.display().to_string()),
        host: Some(header.host),
        kernel: Some(header.kernel),
        backend: Some(header.backend),
        start: Some(header.start),
        events: events.len(),
        events_lost: None,
        window_s: None,
    };
    Ok((source, report, err))
}

async fn live(args: &ReportArgs) -> Result<(Source, Report)> {
    let load = args.probe.load_options();
    let mut tracer = trace::start(&load)?;
    let mut source = EventSource::new(&mut tracer.ebpf)?;
    let namespaces = sysctl::tfo_namespaces();
    let before = Netstat::per_namespace(&namespaces);
    let started = std::time::Instant::now();
    let start = record::Header::now(tracer.backend.name()).start;
    let mut stop = Stop::new(args.duration)?;
    let mut events: Vec<Event> = Vec::new();
    loop {
        tokio::select! {
            r = source.next_batch(&mut events) => r?,
            _ = stop.requested() => break,
        }
    }
    source.drain(&mut events);
    let window_s = started.elapsed().as_secs_f64();
    // Namespaces created during the window (a lab, a container) are read too.
    let namespaces = sysctl::tfo_namespaces();
    let after = Netstat::per_namespace(&namespaces);
    let facts = gather_facts(&events, &namespaces, &before, &after, tracer.backend.name());
    let report = verdict::report(&events, &facts);
    let (host, kernel) = {
        let h = record::Header::now("");
        (h.host, h.kernel)
    };
    let src = Source {
        kind: "live",
        path: None,
        host: Some(host),
        kernel: Some(kernel),
        backend: Some(tracer.backend.name().to_string()),
        start: Some(start),
        events: events.len(),
        events_lost: Some(source.lost()),
        window_s: Some(window_s),
    };
    Ok((src, report))
}

fn gather_facts(
    events: &[Event],
    namespaces: &[TfoNamespace],
    before: &BTreeMap<u32, Netstat>,
    after: &BTreeMap<u32, Netstat>,
    backend: &str,
) -> Facts {
    let mut facts = Facts { backend: Some(backend.to_string()), ..Default::default() };
    for (inode, a) in after {
        // A namespace born during the window counts from zero.
        let d = Netstat::delta(before.get(inode).unwrap_or(&Netstat::default()), a);
        facts.counters.insert(*inode, d);
    }
    for ns in namespaces {
        let Some(inode) = ns.inode.map(|i| i as u32) else { continue };
        if let Some(n) = &ns.name {
            facts.netns_names.insert(inode, n.clone());
        }
        if let Ok(k) = &ns.key {
            facts.backup_key.insert(inode, k.backup);
        }
    }
    // tcp_metrics of the namespaces the clients ran in: the current one directly, a named
    // one with `ip -n NAME`; a namespace with no name cannot be entered by name: skipped.
    let client_ns: std::collections::BTreeSet<u32> =
        events.iter().filter(|e| e.role == Role::Client).map(|e| e.netns).collect();
    for inode in client_ns {
        let Some(ns) = namespaces.iter().find(|n| n.inode == Some(u64::from(inode))) else { continue };
        match tcp_metrics::read_in(ns) {
            Ok(m) => {
                facts.tcp_metrics.insert(inode, m);
            }
            Err(e) => log::info!("tcp_metrics of {}: {e}", ns.label()),
        }
    }
    for l in listeners::tfo_listeners(namespaces) {
        let Some(inode) = l.netns.map(|i| i as u32) else { continue };
        if let Some(s) = l.somaxconn {
            facts.somaxconn.insert(inode, s);
        }
        facts.listeners.push(ListenerFact { netns: inode, addr: l.addr, max_qlen: l.max_qlen.ok() });
    }
    facts
}

// ---------------------------------------------------------------- rendering

fn outcomes_line(o: &BTreeMap<String, u64>) -> String {
    o.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" ")
}

fn source_line(s: &Source) -> String {
    let mut parts = vec![format!("{} events", s.events)];
    match s.kind {
        "recording" => parts.push(format!("from the recording {}", s.path.as_deref().unwrap_or("?"))),
        _ => parts.push(format!("traced live for {:.1} s", s.window_s.unwrap_or(0.0))),
    }
    if let Some(h) = &s.host {
        parts.push(format!("host {h}"));
    }
    if let Some(k) = &s.kernel {
        parts.push(format!("kernel {k}"));
    }
    if let Some(b) = &s.backend {
        parts.push(format!("{b} backend"));
    }
    if let Some(st) = &s.start {
        parts.push(format!("started {st}"));
    }
    if let Some(l) = s.events_lost.filter(|&l| l > 0) {
        parts.push(format!("{l} events LOST in the kernel (ring buffer full)"));
    }
    parts.join(", ")
}

fn lost_line(d: &DestinationReport) -> String {
    let mut line = match (d.stalled, d.extra_round_trips) {
        (0, 0) => return "no time lost".into(),
        (0, _) => "no time lost to SYN timeouts".to_string(),
        _ => format!(
            "{} lost in total: {} per stalled connection ({}), {} per connection",
            human_us(d.lost_us_total),
            human_us(d.lost_us_per_stalled),
            d.stalled,
            human_us(d.lost_us_per_connection)
        ),
    };
    if d.extra_round_trips > 0 {
        // Not a stall: the data not acked went again after the handshake.
        line.push_str(&format!(
            "; {} extra round trip(s) for data not acked, ~{} estimated",
            d.extra_round_trips,
            human_us(d.extra_round_trip_us)
        ));
    }
    line
}

fn write_verdict_text(w: &mut impl Write, v: &Verdict) -> io::Result<()> {
    writeln!(w, "  verdict: {}", v.sentence)?;
    for e in &v.evidence {
        writeln!(w, "    - {e}")?;
    }
    Ok(())
}

pub fn render(
    w: &mut impl Write,
    format: ReportFormat,
    source: &Source,
    r: &Report,
    replay_error: Option<String>,
) -> io::Result<()> {
    match format {
        ReportFormat::Json => {
            serde_json::to_writer_pretty(&mut *w, &JsonReport { source, report: r, replay_error })?;
            writeln!(w)?;
        }
        ReportFormat::Text => render_text(w, source, r)?,
        ReportFormat::Markdown => render_markdown(w, source, r)?,
    }
    w.flush()
}

fn render_text(w: &mut impl Write, s: &Source, r: &Report) -> io::Result<()> {
    writeln!(w, "tfo-trace report: {}", source_line(s))?;
    if r.destinations.is_empty() && r.listeners.is_empty() && r.namespaces.is_empty() {
        writeln!(w, "\nno TFO connections seen")?;
    }
    if !r.destinations.is_empty() {
        writeln!(w, "\nDestinations (client side)")?;
    }
    for d in &r.destinations {
        writeln!(w, "{} (netns {})", d.destination, d.netns)?;
        writeln!(w, "  connections: {}  {}", d.connections, outcomes_line(&d.outcomes))?;
        writeln!(w, "  added latency: {}", lost_line(d))?;
        write_verdict_text(w, &d.verdict)?;
    }
    if !r.listeners.is_empty() {
        writeln!(w, "\nListeners (server side)")?;
    }
    for l in &r.listeners {
        let q = l.max_qlen.map(|q| format!("  max_qlen {q}")).unwrap_or_default();
        writeln!(w, "{} (netns {}){q}", l.listener, l.netns)?;
        writeln!(w, "  outcomes: {}", outcomes_line(&l.outcomes))?;
        write_verdict_text(w, &l.verdict)?;
    }
    if !r.namespaces.is_empty() {
        writeln!(w, "\nFrom the kernel's counters (not visible as events)")?;
    }
    for n in &r.namespaces {
        writeln!(w, "netns {}", n.netns)?;
        write_verdict_text(w, &n.verdict)?;
    }
    Ok(())
}

/// `|` would end a table cell.
fn md(s: &str) -> String {
    s.replace('|', "\\|")
}

fn render_markdown(w: &mut impl Write, s: &Source, r: &Report) -> io::Result<()> {
    writeln!(w, "# tfo-trace report\n\n{}.", md(&source_line(s)))?;
    if !r.destinations.is_empty() {
        writeln!(w, "\n## Destinations\n")?;
        writeln!(w, "| Destination | Netns | Connections | Accepted | SYN-data dropped | Not acked | Time lost | Per stalled connection | Verdict |")?;
        writeln!(w, "|---|---|---:|---:|---:|---:|---:|---:|---|")?;
        for d in &r.destinations {
            writeln!(
                w,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                md(&d.destination),
                d.netns,
                d.connections,
                d.accepted,
                d.syn_data_dropped,
                d.data_not_acked,
                human_us(d.lost_us_total),
                human_us(d.lost_us_per_stalled),
                md(&d.verdict.sentence)
            )?;
        }
        for d in r.destinations.iter().filter(|d| !d.verdict.evidence.is_empty()) {
            writeln!(w, "\n**{}**: {}\n", md(&d.destination), md(&d.verdict.sentence))?;
            for e in &d.verdict.evidence {
                writeln!(w, "- {}", md(e))?;
            }
        }
    }
    if !r.listeners.is_empty() {
        writeln!(w, "\n## Listeners\n")?;
        writeln!(w, "| Listener | Netns | Outcomes | max_qlen | Verdict |")?;
        writeln!(w, "|---|---|---|---:|---|")?;
        for l in &r.listeners {
            writeln!(
                w,
                "| {} | {} | {} | {} | {} |",
                md(&l.listener),
                l.netns,
                md(&outcomes_line(&l.outcomes)),
                l.max_qlen.map(|q| q.to_string()).unwrap_or_else(|| "-".into()),
                md(&l.verdict.sentence)
            )?;
        }
    }
    if !r.namespaces.is_empty() {
        writeln!(w, "\n## From the kernel's counters\n")?;
        for n in &r.namespaces {
            writeln!(w, "- netns {}: {}", n.netns, md(&n.verdict.sentence))?;
            for e in &n.verdict.evidence {
                writeln!(w, "  - {}", md(e))?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> (Source, Report) {
        let events: Vec<Event> = (0..3)
            .map(|i| {
                let mut e: Event = serde_json::from_value(serde_json::json!({
                    "ts": "2026-11-30T08:00:00.000000000Z", "role": "client", "outcome": "syn_retransmitted",
                    "family": 4, "saddr": "198.18.0.1", "sport": 40000 + i, "daddr": "198.18.0.3", "dport": 8080,
                    "netns": 7, "pid": 1, "comm": "c|x", "syn_data_bytes": 64, "cookie_len": null,
                    "exp_option": false, "retransmits": 1, "handshake_us": 1_021_000, "stall_us": 1_020_000,
                }))
                .unwrap();
                e.ts_unix_ns = i as u128;
                e
            })
            .collect();
        let r = verdict::report(&events, &Facts::default());
        let s = Source {
            kind: "recording",
            path: Some("/tmp/r.jsonl".into()),
            host: Some("h".into()),
            kernel: Some("6.18".into()),
            backend: Some("tracepoint".into()),
            start: Some("2026-11-30T08:00:00.000000000Z".into()),
            events: 3,
            events_lost: None,
            window_s: None,
        };
        (s, r)
    }

    #[test]
    fn three_formats() {
        let (s, r) = sample();
        let mut out = Vec::new();
        render(&mut out, ReportFormat::Text, &s, &r, None).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.starts_with("tfo-trace report: 3 events, from the recording /tmp/r.jsonl"), "{text}");
        assert!(text.contains("\n  verdict: SYN-data to 198.18.0.3:8080 was dropped on the path in 3 of 3 connections, +1.02 s each"), "{text}");
        assert!(
            text.contains("added latency: 3.06 s lost in total: 1.02 s per stalled connection (3)"),
            "{text}"
        );

        let mut out = Vec::new();
        render(&mut out, ReportFormat::Json, &s, &r, Some("r: line 5: truncated".into())).unwrap();
        let j: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(j["destinations"][0]["syn_data_dropped"], 3);
        assert_eq!(j["destinations"][0]["verdict"]["kind"], "syn_data_dropped");
        assert_eq!(j["source"]["backend"], "tracepoint");
        assert_eq!(j["replay_error"], "r: line 5: truncated");

        let mut out = Vec::new();
        render(&mut out, ReportFormat::Markdown, &s, &r, None).unwrap();
        let m = String::from_utf8(out).unwrap();
        assert!(m.starts_with("# tfo-trace report\n"), "{m}");
        assert!(m.contains("| 198.18.0.3:8080 | 7 | 3 | 0 | 3 | 0 | 3.06 s | 1.02 s | SYN-data to"), "{m}");
    }

    #[test]
    fn data_not_acked_is_told_apart_from_time_lost() {
        let (s, mut r) = sample();
        let d = &mut r.destinations[0];
        (d.extra_round_trips, d.extra_round_trip_us) = (2, 400);
        let mut out = Vec::new();
        render(&mut out, ReportFormat::Text, &s, &r, None).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.contains(
                "added latency: 3.06 s lost in total: 1.02 s per stalled connection (3), 1.02 s per \
                 connection; 2 extra round trip(s) for data not acked, ~400 us estimated\n"
            ),
            "{text}"
        );
        let d = &mut r.destinations[0];
        (d.stalled, d.lost_us_total) = (0, 0);
        assert_eq!(
            lost_line(d),
            "no time lost to SYN timeouts; 2 extra round trip(s) for data not acked, ~400 us estimated"
        );
        d.extra_round_trips = 0;
        assert_eq!(lost_line(d), "no time lost");
    }

    #[test]
    fn empty_report_says_so() {
        let (s, _) = sample();
        let r = verdict::report(&[], &Facts::default());
        let mut out = Vec::new();
        render(&mut out, ReportFormat::Text, &s, &r, None).unwrap();
        assert!(String::from_utf8(out).unwrap().contains("no TFO connections seen"));
    }
}
