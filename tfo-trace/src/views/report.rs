//! `tfo-trace report`: a summary first (connections, destinations, verdicts, time lost, the
//! worst rows), then the client-side rows ranked by time lost (the first `--top` shown, the
//! rest summed in one line), the listeners, and what only the kernel's counters show; live
//! over a window, or from one or several hosts' recordings merged.
//!
//! The model is `aggregation::report` (events in one at a time, nothing kept per event) and
//! the verdicts `aggregation::report::verdict` (pure); this file reads recordings, gathers the
//! kernel's facts for a live run (tcp_metrics, counter deltas per namespace, listener queue
//! sizes, keys) and renders text, JSON or Markdown. A recording replayed here has no kernel
//! facts: they describe the machine now, not the one it was recorded on.
use std::{
    collections::BTreeMap,
    io::{self, Write},
    path::{Path, PathBuf},
};

use anyhow::{bail, Result};
use serde::Serialize;

use crate::{
    aggregation::report::{
        verdict::{CachedDrops, DestinationReport, Kind, ListenerReport, NamespaceFinding, Verdict},
        Built, Facts, GroupOptions, ListenerFact, ReportBuilder, Rest, Summary,
    },
    cli::{ReportArgs, ReportFormat},
    events::{
        record,
        replay::{Replay, Replayed},
    },
    filter::EventFilter,
    kernel::{
        listeners,
        netstat::Netstat,
        sysctl::{self, TfoNamespace},
        tcp_metrics,
    },
    live::session::Session,
    units,
};

/// Where the events came from: one recording, the live kernel, or (the top-level `source`
/// of a merged report) several recordings, each also in `sources`.
#[derive(Clone, Debug, Serialize)]
pub struct Source {
    /// "recording", "live", or "recordings" (several merged).
    pub kind: &'static str,
    pub path: Option<String>,
    /// The host's name: the recording header's, or the file's name for a recording
    /// without one.
    pub host: Option<String>,
    pub kernel: Option<String>,
    pub backend: Option<String>,
    pub start: Option<String>,
    pub events: u64,
    /// Events the kernel could not deliver (ring buffer full); live only.
    pub events_lost: Option<u64>,
    /// Seconds traced; live only.
    pub window_s: Option<f64>,
    /// Headers read in the recording for this host (recordings of it joined in one
    /// file: `cat a b`); recordings only.
    pub segments: Option<u32>,
    /// Lines of the recording that could not be read, skipped (0 live).
    pub bad_lines: u64,
}

#[derive(Serialize)]
struct JsonReport<'a> {
    source: &'a Source,
    /// Every recording merged (one for a single one, none live).
    sources: &'a [Source],
    summary: &'a Summary,
    destinations: Vec<DestinationReport>,
    /// The rows beyond `--top`, summed (null when every row is shown).
    rest: &'a Option<Rest>,
    listeners: &'a [ListenerReport],
    namespaces: &'a [NamespaceFinding],
    /// Destinations the kernel's cache (ip tcp_metrics) remembers losing SYN-data to, with
    /// no connection in the window (live only): not connections, and not in `destinations`.
    kernel_cache: &'a [CachedDrops],
    /// The error line of the first recording with bad lines (how many were skipped, the
    /// first few named; every other line is in the report).
    replay_error: Option<String>,
    /// The error line of each recording with bad lines.
    replay_errors: Vec<String>,
}

/// What a report renders: where from, and the ranked model.
pub struct Rendered<'a> {
    pub source: &'a Source,
    pub sources: &'a [Source],
    pub built: &'a Built,
}

pub fn run(args: ReportArgs) -> Result<()> {
    let group = GroupOptions { by: args.group_by, prefix_v4: args.prefix_v4, prefix_v6: args.prefix_v6 };
    let top = (!args.all).then_some(args.top);
    let (source, sources, built, errors) = if args.from.is_empty() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        let (s, b) = rt.block_on(live(&args, group, top))?;
        (s, Vec::new(), b, Vec::new())
    } else {
        from_recordings(&args.from, &args.probe.filter.event_filter(), group, top)?
    };
    let mut out = io::stdout().lock();
    let r = Rendered { source: &source, sources: &sources, built: &built };
    crate::live::output::stdout_written(render(&mut out, args.format, &r, &errors))?;
    match errors.len() {
        // Everything the good lines give is printed; each bad line is one error line.
        0 => Ok(()),
        1 => bail!("{}", errors[0]),
        _ => {
            for e in &errors[..errors.len() - 1] {
                // A failure stays one, whether or not stderr is there to say so.
                let _ = crate::note!("tfo-trace: error: {e}");
            }
            bail!("{}", errors[errors.len() - 1])
        }
    }
}

/// The name a recording's host goes by: its header's, else the file's name.
pub fn host_name(header: &record::Header, path: &Path) -> String {
    if !header.host.trim().is_empty() {
        return header.host.clone();
    }
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    name.strip_suffix(".jsonl").map(str::to_string).unwrap_or(name)
}

/// A source for the recording `path` from one of its headers.
fn recording_source(path: &Path, header: record::Header) -> Source {
    Source {
        kind: "recording",
        path: Some(path.display().to_string()),
        host: Some(host_name(&header, path)),
        kernel: Some(header.kernel),
        backend: Some(header.backend),
        start: Some(header.start),
        events: 0,
        events_lost: None,
        window_s: None,
        segments: Some(1),
        bad_lines: 0,
    }
}

/// Every recording named, as the filter selects their events: one source per recording
/// and host (recordings joined with `cat a b` hold several: a header of the same host
/// starts a new segment of its source, one of another host a new source), and the error
/// line of each recording with bad lines. A recording met twice is read twice and said.
fn from_recordings(
    from: &[PathBuf],
    filter: &EventFilter,
    group: GroupOptions,
    top: Option<usize>,
) -> Result<(Source, Vec<Source>, Built, Vec<String>)> {
    let mut opened = Vec::new();
    let mut hosts = std::collections::BTreeSet::new();
    let mut netns_names = crate::events::replay::RecordedNetnsNames::default();
    for (path, in_folder) in record::recordings_named(from)? {
        match Replay::open(&path, filter.clone().into_select()) {
            Ok((header, replay)) => {
                // Several hosts make a fleet (namespace inodes then name nothing), also
                // when joined in one file: its headers are read first.
                hosts.extend(record::headers_in(&path)?.iter().map(|h| host_name(h, &path)));
                opened.push((path, header, replay));
            }
            Err(e) if in_folder => crate::note!("note: skipping {}: {e:#}", path.display())?,
            Err(e) => return Err(e),
        }
    }
    if opened.is_empty() {
        bail!(
            "no tfo-trace recordings in {}",
            from.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
        );
    }
    let fleet = opened.len() > 1 || hosts.len() > 1;
    let mut b = ReportBuilder::new(group, fleet);
    let mut sources: Vec<Source> = Vec::new();
    let mut errors = Vec::new();
    // Each segment's header, and where it was first met: the same one again is the same
    // recording read twice.
    let mut segments: BTreeMap<(String, String), String> = BTreeMap::new();
    let mut seen_segment = |path: &Path, h: &record::Header| -> Result<()> {
        let key = (host_name(h, path), h.start.clone());
        let here = path.display().to_string();
        match segments.get(&key) {
            Some(first) => crate::note!(
                "tfo-trace: warning: {here}: the recording of {} started {} appears twice (also in {first}): \
                 its events count twice",
                key.0,
                key.1
            )?,
            None => {
                segments.insert(key, here);
            }
        }
        Ok(())
    };
    for (path, header, mut replay) in opened {
        seen_segment(&path, &header)?;
        let mut source = recording_source(&path, header);
        let mut host = b.host(source.host.as_deref().unwrap_or_default());
        let mut bad_before = 0;
        while let Some(r) = replay.next() {
            match r {
                Replayed::Event(e) => {
                    b.add(&e, host);
                    source.events += 1;
                }
                Replayed::Header(h) => {
                    seen_segment(&path, &h)?;
                    if host_name(&h, &path) == source.host.as_deref().unwrap_or_default() {
                        source.segments = source.segments.map(|n| n + 1);
                        continue;
                    }
                    source.bad_lines = replay.bad.count - bad_before;
                    bad_before = replay.bad.count;
                    sources.push(std::mem::replace(&mut source, recording_source(&path, h)));
                    host = b.host(source.host.as_deref().unwrap_or_default());
                }
            }
        }
        source.bad_lines = replay.bad.count - bad_before;
        sources.push(source);
        errors.extend(replay.bad.summary());
        netns_names.extend(&replay.netns_names);
    }
    if let Some(msg) = filter.netns_name_unrecorded(&netns_names) {
        return Err(crate::events::record::UsageError(msg).into());
    }
    let backends: std::collections::BTreeSet<&str> =
        sources.iter().filter_map(|s| s.backend.as_deref()).collect();
    let facts = Facts {
        backend: (backends.len() == 1).then(|| backends.iter().next().unwrap_or(&"").to_string()),
        ..Default::default()
    };
    let built = b.finish(facts, top);
    let source = if let [one] = sources.as_slice() {
        one.clone()
    } else {
        let same = |f: fn(&Source) -> Option<&String>| {
            let v: std::collections::BTreeSet<&String> = sources.iter().filter_map(f).collect();
            (v.len() == 1).then(|| v.into_iter().next().cloned()).flatten()
        };
        Source {
            kind: "recordings",
            path: None,
            host: None,
            kernel: same(|s| s.kernel.as_ref()),
            backend: same(|s| s.backend.as_ref()),
            start: sources.iter().filter_map(|s| s.start.clone()).min(),
            events: sources.iter().map(|s| s.events).sum(),
            events_lost: None,
            window_s: None,
            segments: None,
            bad_lines: sources.iter().map(|s| s.bad_lines).sum(),
        }
    };
    Ok((source, sources, built, errors))
}

async fn live(args: &ReportArgs, group: GroupOptions, top: Option<usize>) -> Result<(Source, Built)> {
    let load = args.probe.load_options();
    let mut session = Session::start(&load, None)?;
    let started = std::time::Instant::now();
    let start = record::Header::now(session.tracer.backend.name()).start;
    let mut b = ReportBuilder::new(group, false);
    let (host, kernel) = {
        let h = record::Header::now("");
        (h.host, h.kernel)
    };
    let host_id = b.host(&host);
    session
        .run(args.duration, |batch| {
            batch.iter().for_each(|e| b.add(e, host_id));
            Ok(std::ops::ControlFlow::Continue(()))
        })
        .await?;
    let window_s = started.elapsed().as_secs_f64();
    // Every namespace's counters over the window, those created during it (a lab, a
    // container) from their birth, those gone during it up to their last reading.
    let deltas = session.counter_deltas();
    let namespaces = sysctl::tfo_namespaces();
    let facts = gather_facts(b.client_namespaces(), &namespaces, deltas, session.tracer.backend.name());
    let events = b.events();
    let built = b.finish(facts, top);
    let src = Source {
        kind: "live",
        path: None,
        host: Some(host),
        kernel: Some(kernel),
        backend: Some(session.tracer.backend.name().to_string()),
        start: Some(start),
        events,
        events_lost: Some(session.lost()),
        window_s: Some(window_s),
        segments: None,
        bad_lines: 0,
    };
    Ok((src, built))
}

fn gather_facts(
    client_ns: &std::collections::BTreeSet<u32>,
    namespaces: &[TfoNamespace],
    counters: BTreeMap<u32, Netstat>,
    backend: &str,
) -> Facts {
    let mut facts = Facts { backend: Some(backend.to_string()), counters, ..Default::default() };
    for ns in namespaces {
        let Some(inode) = ns.inode.map(|i| i as u32) else { continue };
        if let Some(n) = &ns.name {
            facts.netns_names.insert(inode, n.clone());
        }
        if let Ok(k) = &ns.key {
            facts.backup_key.insert(inode, k.backup);
        }
        if let Ok(t) = ns.blackhole_timeout_sec {
            facts.blackhole_timeout_s.insert(inode, t);
        }
        if let Ok(c) = ns.syncookies {
            facts.syncookies.insert(inode, c);
        }
    }
    // tcp_metrics of the namespaces the clients ran in: the current one directly, a named
    // one with `ip -n NAME`; a namespace with no name cannot be entered by name: skipped.
    for &inode in client_ns {
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

fn source_line(s: &Source, sources: &[Source]) -> String {
    if sources.len() > 1 {
        let hosts: Vec<String> =
            sources.iter().map(|s| s.host.clone().unwrap_or_else(|| "?".into())).collect();
        let mut distinct = hosts.clone();
        distinct.sort();
        distinct.dedup();
        const NAMED: usize = 5;
        let mut named = distinct.iter().take(NAMED).cloned().collect::<Vec<_>>().join(", ");
        if distinct.len() > NAMED {
            named.push_str(&format!(" and {} more", units::count((distinct.len() - NAMED) as u64)));
        }
        let mut parts = vec![
            units::plural(s.events, "event", "events"),
            format!(
                "from {} of {}: {named}",
                units::plural(sources.len() as u64, "recording", "recordings"),
                units::plural(distinct.len() as u64, "host", "hosts")
            ),
        ];
        if let Some(b) = &s.backend {
            parts.push(format!("{b} backend"));
        }
        return parts.join(", ");
    }
    let mut parts = vec![units::plural(s.events, "event", "events")];
    match s.kind {
        "recording" => parts.push(format!("from the recording {}", s.path.as_deref().unwrap_or("?"))),
        _ => parts.push(format!("traced live for {}", units::duration_s(s.window_s.unwrap_or(0.0)))),
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
            units::duration_us(d.lost_us_total),
            units::duration_us(d.lost_us_per_stalled),
            d.stalled,
            units::duration_us(d.lost_us_per_connection)
        ),
    };
    if d.extra_round_trips > 0 {
        // Not a stall: the data not acked went again after the handshake.
        line.push_str(&format!(
            "; {} extra round trip(s) for data not acked, ~{} estimated",
            d.extra_round_trips,
            units::duration_us(d.extra_round_trip_us)
        ));
    }
    line
}

/// `saved 420ms over 12 of 12 accepted, lost 1.02s: net -600ms over 13 connections`; for a
/// row where nothing was accepted, what it lost is its net (`nothing accepted, net -11.2s
/// over 11 connections`); None where no saving was measured of what was accepted (a
/// recording without `saved_us`), or nothing happened either way.
fn balance_line(
    saved_us: u64,
    measured: u64,
    accepted: Option<u64>,
    net_us: i64,
    connections: u64,
) -> Option<String> {
    if measured == 0 {
        return (accepted == Some(0) && net_us != 0).then(|| {
            format!(
                "nothing accepted, net {} over {}",
                units::net_us(net_us),
                units::plural(connections, "connection", "connections")
            )
        });
    }
    let of = accepted.map(|a| format!(" of {}", units::count(a))).unwrap_or_default();
    Some(format!(
        "saved {} over {}{of} accepted, net {} over {}",
        units::duration_us(saved_us),
        units::count(measured),
        units::net_us(net_us),
        units::plural(connections, "connection", "connections")
    ))
}

/// `strong: 12 of 12 connections, 3 of 37 destinations, 14 of 120 hosts`.
pub fn strength_line(v: &Verdict) -> String {
    let s = &v.support;
    let mut parts = vec![format!(
        "{} of {}",
        units::count(s.connections),
        units::plural(s.of_connections, "connection", "connections")
    )];
    if let (Some(d), Some(of)) = (s.destinations, s.of_destinations) {
        if of > 1 {
            parts.push(format!(
                "{} of {}",
                units::count(d),
                units::plural(of, "destination", "destinations")
            ));
        }
    }
    if s.of_hosts > 1 {
        parts.push(format!("{} of {}", units::count(s.hosts), units::plural(s.of_hosts, "host", "hosts")));
    }
    format!("{}: {}", v.strength.name(), parts.join(", "))
}

fn write_verdict_text(w: &mut impl Write, v: &Verdict) -> io::Result<()> {
    writeln!(w, "  verdict: {}", v.sentence)?;
    writeln!(w, "  evidence ({})", strength_line(v))?;
    for e in &v.evidence {
        writeln!(w, "    - {e}")?;
    }
    Ok(())
}

pub fn render(w: &mut impl Write, format: ReportFormat, r: &Rendered, errors: &[String]) -> io::Result<()> {
    match format {
        ReportFormat::Json => {
            let b = r.built;
            let j = JsonReport {
                source: r.source,
                sources: r.sources,
                summary: &b.summary,
                destinations: b.rows().collect(),
                rest: &b.rest,
                listeners: &b.listeners,
                namespaces: &b.namespaces,
                kernel_cache: &b.kernel_cache,
                replay_error: errors.first().cloned(),
                replay_errors: errors.to_vec(),
            };
            serde_json::to_writer_pretty(&mut *w, &j)?;
            writeln!(w)?;
        }
        ReportFormat::Text => render_text(w, r)?,
        ReportFormat::Markdown => render_markdown(w, r)?,
    }
    w.flush()
}

/// `2 syn_data_dropped, 940 healthy`: the most common first.
fn verdict_counts(v: &BTreeMap<crate::aggregation::report::verdict::Kind, u64>) -> String {
    let mut v: Vec<_> = v.iter().collect();
    v.sort_by(|a, b| b.0.severity().cmp(&a.0.severity()).then(b.1.cmp(a.1)));
    v.iter().map(|(k, n)| format!("{} {}", units::count(**n), k.name())).collect::<Vec<_>>().join(", ")
}

/// The summary's lines, without indentation: what text and Markdown both show.
fn summary_lines(r: &Rendered) -> Vec<String> {
    let s = &r.built.summary;
    let g = s.group_by;
    let mut out = Vec::new();
    let mut first = format!(
        "{} to {}",
        units::plural(s.connections, "client connection", "client connections"),
        units::plural(s.destinations, "destination", "destinations")
    );
    match s.unnamed_groups {
        // By name: the rows that are an address without a name are said apart.
        Some(unnamed) if unnamed > 0 => first.push_str(&format!(
            ", in {} and {} without a name",
            units::plural(s.groups - unnamed.min(s.groups), g.name(), g.rows()),
            units::plural(unnamed, "address", "addresses")
        )),
        _ if g != crate::aggregation::report::grouping::GroupBy::Destination => {
            first.push_str(&format!(", in {}", units::plural(s.groups, g.name(), g.rows())));
        }
        _ => {}
    }
    if s.server_events > 0 {
        first.push_str(&format!(
            "; {} at {}",
            units::plural(s.server_events, "server event", "server events"),
            units::plural(s.listeners, "listener", "listeners")
        ));
    }
    out.push(first);
    // What paused TFO for a whole namespace, or kept its listeners from it, is the answer
    // before any destination's.
    for n in r
        .built
        .namespaces
        .iter()
        .filter(|n| matches!(n.verdict.kind, Kind::ActiveTfoPaused | Kind::Syncookies))
    {
        out.push(n.verdict.sentence.clone());
    }
    if !s.verdicts.is_empty() {
        out.push(format!("verdicts (one per {}): {}", g.name(), verdict_counts(&s.verdicts)));
    }
    let mut lost = if s.stalled == 0 {
        "time lost: none to SYN timeouts".to_string()
    } else {
        let causes: Vec<String> = s
            .stalls_by_cause
            .iter()
            .map(|(c, n)| {
                let lost = s.lost_us_by_cause.get(c).copied().unwrap_or(0);
                format!("{} {}, {}", c.name(), units::count(*n), units::duration_us(lost))
            })
            .collect();
        format!(
            "time lost: {} in {} ({})",
            units::duration_us(s.lost_us_total),
            units::plural(s.stalled, "stalled connection", "stalled connections"),
            causes.join("; ")
        )
    };
    if s.extra_round_trips > 0 {
        lost.push_str(&format!(
            "; {} for data not acked, ~{} estimated",
            units::plural(s.extra_round_trips, "extra round trip", "extra round trips"),
            units::duration_us(s.extra_round_trip_us)
        ));
    }
    out.push(lost);
    out.extend(balance_line(s.saved_us_total, s.saved_measured, None, s.net_us, s.connections));
    let worst: Vec<String> = s
        .worst
        .iter()
        .filter(|w| w.lost_us_total > 0 || w.extra_round_trip_us > 0)
        .map(|w| {
            let t = if w.lost_us_total > 0 {
                units::duration_us(w.lost_us_total)
            } else {
                format!("~{} extra", units::duration_us(w.extra_round_trip_us))
            };
            format!("{} {t} ({}, {})", w.group, w.kind.name(), w.strength.name())
        })
        .collect();
    if !worst.is_empty() {
        out.push(format!("worst: {}", worst.join("; ")));
    }
    if r.built.fleet() {
        let hosts: Vec<String> = s
            .hosts
            .iter()
            .map(|h| {
                let lost = if h.stalled > 0 {
                    format!("{} lost", units::duration_us(h.lost_us_total))
                } else {
                    "no time lost".into()
                };
                format!("{} {} conns, {lost}", h.host, units::count(h.connections))
            })
            .collect();
        const NAMED: usize = 8;
        let mut line = format!("hosts: {}", hosts.iter().take(NAMED).cloned().collect::<Vec<_>>().join("; "));
        if hosts.len() > NAMED {
            line.push_str(&format!("; and {} more", units::count((hosts.len() - NAMED) as u64)));
        }
        out.push(line);
    }
    out
}

/// `api.example, www.example`, `a, b, c +2 more`: the DNS names of a row's addresses; None
/// where it has none, or is the one name's row (its title names it).
fn names_line(d: &DestinationReport) -> Option<String> {
    if d.names.is_empty() || (d.more_names == 0 && d.names.len() == 1 && d.names[0] == d.destination) {
        return None;
    }
    let mut line = d.names.join(", ");
    if d.more_names > 0 {
        line.push_str(&format!(" +{} more", units::count(d.more_names)));
    }
    Some(line)
}

fn row_title(d: &DestinationReport) -> String {
    match (d.netns, d.destinations) {
        (Some(n), _) => format!("{} (netns {n})", d.destination),
        (None, 1) => d.destination.clone(),
        (None, n) => format!("{} ({})", d.destination, units::plural(n, "destination", "destinations")),
    }
}

fn rest_line(rest: &Rest, rows: &str) -> String {
    let lost = if rest.stalled > 0 {
        format!("{} lost in {} stalled", units::duration_us(rest.lost_us_total), units::count(rest.stalled))
    } else {
        "no time lost".into()
    };
    let verdicts = if rest.verdicts.is_empty() {
        String::new()
    } else {
        format!(" ({})", verdict_counts(&rest.verdicts))
    };
    format!(
        "... and {} more {rows}: {}, {lost}{verdicts} (--all shows them)",
        units::count(rest.groups),
        units::plural(rest.connections, "connection", "connections")
    )
}

fn render_text(w: &mut impl Write, r: &Rendered) -> io::Result<()> {
    let b = r.built;
    let s = &b.summary;
    writeln!(w, "tfo-trace report: {}", source_line(r.source, r.sources))?;
    let nothing =
        s.groups == 0 && b.kernel_cache.is_empty() && b.listeners.is_empty() && b.namespaces.is_empty();
    if nothing {
        writeln!(w, "\nno TFO connections seen")?;
        return Ok(());
    }
    writeln!(w, "\nSummary")?;
    for l in summary_lines(r) {
        writeln!(w, "  {l}")?;
    }
    let rows = s.group_by.rows();
    if s.groups > 0 {
        let cap = rows[..1].to_uppercase() + &rows[1..];
        let shown = if b.rest.is_some() {
            format!(", the {} that lost the most time of {}", units::count(s.shown), units::count(s.groups))
        } else {
            String::new()
        };
        writeln!(w, "\n{cap} by time lost (client side{shown})")?;
    }
    for d in b.rows() {
        writeln!(w, "{}", row_title(&d))?;
        if let Some(names) = names_line(&d) {
            writeln!(w, "  names: {names}")?;
        }
        writeln!(w, "  connections: {}  {}", d.connections, outcomes_line(&d.outcomes))?;
        writeln!(w, "  added latency: {}", lost_line(&d))?;
        if let Some(b) =
            balance_line(d.saved_us_total, d.saved_measured, Some(d.accepted), d.net_us, d.connections)
        {
            writeln!(w, "  balance: {b}")?;
        }
        write_verdict_text(w, &d.verdict)?;
    }
    if let Some(rest) = &b.rest {
        writeln!(w, "{}", rest_line(rest, rows))?;
    }
    if !b.listeners.is_empty() {
        writeln!(w, "\nListeners (server side)")?;
    }
    for l in &b.listeners {
        let q = l.max_qlen.map(|q| format!("  max_qlen {q}")).unwrap_or_default();
        let ns = l.netns.map(|n| format!(" ({})", b.netns_label(n))).unwrap_or_default();
        writeln!(w, "{}{ns}{q}", l.listener)?;
        writeln!(w, "  outcomes: {}", outcomes_line(&l.outcomes))?;
        write_verdict_text(w, &l.verdict)?;
    }
    let (paused, counted): (Vec<&NamespaceFinding>, Vec<&NamespaceFinding>) =
        b.namespaces.iter().partition(|n| n.pause.is_some());
    if !paused.is_empty() {
        writeln!(w, "\nActive TFO paused (blackhole detection, per client namespace)")?;
    }
    for n in &paused {
        writeln!(w, "{}", b.netns_label(n.netns))?;
        write_verdict_text(w, &n.verdict)?;
    }
    if !counted.is_empty() {
        writeln!(
            w,
            "\nFrom the kernel's counters (not visible as events: per namespace, no listener or process named)"
        )?;
    }
    // One heading per namespace, its findings under it.
    let mut last = None;
    for n in counted {
        if last != Some(n.netns) {
            writeln!(w, "{}", b.netns_label(n.netns))?;
            last = Some(n.netns);
        }
        write_verdict_text(w, &n.verdict)?;
    }
    if !b.kernel_cache.is_empty() {
        writeln!(w, "\nFrom the kernel's TFO cache (ip tcp_metrics: no connection there in this window)")?;
    }
    for c in &b.kernel_cache {
        writeln!(w, "{} ({})", c.destination, b.netns_label(c.netns))?;
        writeln!(w, "  {}", c.sentence)?;
    }
    Ok(())
}

/// Time lost in a table cell, in the words the text report uses for none.
fn lost_cell(us: u64) -> String {
    if us == 0 {
        "no time lost".into()
    } else {
        units::duration_us(us)
    }
}

/// `|` would end a table cell.
fn md(s: &str) -> String {
    s.replace('|', "\\|")
}

fn opt(n: Option<u32>) -> String {
    n.map(|n| n.to_string()).unwrap_or_else(|| "-".into())
}

fn render_markdown(w: &mut impl Write, r: &Rendered) -> io::Result<()> {
    let b = r.built;
    writeln!(w, "# tfo-trace report\n\n{}.", md(&source_line(r.source, r.sources)))?;
    writeln!(w, "\n## Summary\n")?;
    for l in summary_lines(r) {
        writeln!(w, "- {}", md(&l))?;
    }
    let rows: Vec<DestinationReport> = b.rows().collect();
    if !rows.is_empty() {
        let title = b.summary.group_by.rows();
        writeln!(w, "\n## {}{} by time lost\n", title[..1].to_uppercase(), &title[1..])?;
        writeln!(w, "| Destination | Netns | Connections | Accepted | SYN-data dropped | Not acked | Time lost | Per stalled connection | Saved | Net | Verdict | Evidence |")?;
        writeln!(w, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|")?;
        for d in &rows {
            writeln!(
                w,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                md(&match names_line(d) {
                    Some(names) => format!("{} ({names})", d.destination),
                    None => d.destination.clone(),
                }),
                opt(d.netns),
                d.connections,
                d.accepted,
                d.syn_data_dropped,
                d.data_not_acked,
                lost_cell(d.lost_us_total),
                if d.stalled == 0 { "-".to_string() } else { units::duration_us(d.lost_us_per_stalled) },
                if d.saved_measured == 0 { "-".to_string() } else { units::duration_us(d.saved_us_total) },
                // Nothing accepted: nothing to save, what was lost is the net.
                if d.saved_measured == 0 && d.accepted > 0 {
                    "-".to_string()
                } else {
                    units::net_us(d.net_us)
                },
                md(&d.verdict.sentence),
                md(&strength_line(&d.verdict))
            )?;
        }
        if let Some(rest) = &b.rest {
            writeln!(w, "\n{}", md(&rest_line(rest, title)))?;
        }
        for d in rows.iter().filter(|d| !d.verdict.evidence.is_empty()) {
            writeln!(w, "\n**{}**: {}\n", md(&d.destination), md(&d.verdict.sentence))?;
            for e in &d.verdict.evidence {
                writeln!(w, "- {}", md(e))?;
            }
        }
    }
    if !b.listeners.is_empty() {
        writeln!(w, "\n## Listeners\n")?;
        writeln!(w, "| Listener | Netns | Outcomes | max_qlen | Verdict | Evidence |")?;
        writeln!(w, "|---|---|---|---:|---|---|")?;
        for l in &b.listeners {
            writeln!(
                w,
                "| {} | {} | {} | {} | {} | {} |",
                md(&l.listener),
                opt(l.netns),
                md(&outcomes_line(&l.outcomes)),
                opt(l.max_qlen),
                md(&l.verdict.sentence),
                md(&strength_line(&l.verdict))
            )?;
        }
    }
    let (paused, counted): (Vec<&NamespaceFinding>, Vec<&NamespaceFinding>) =
        b.namespaces.iter().partition(|n| n.pause.is_some());
    for (title, findings) in [
        ("Active TFO paused (blackhole detection, per client namespace)", paused),
        ("From the kernel's counters (per namespace, no listener or process named)", counted),
    ] {
        if !findings.is_empty() {
            writeln!(w, "\n## {title}\n")?;
        }
        for n in findings {
            writeln!(w, "- {}: {}", md(&b.netns_label(n.netns)), md(&n.verdict.sentence))?;
            for e in &n.verdict.evidence {
                writeln!(w, "  - {}", md(e))?;
            }
        }
    }
    if !b.kernel_cache.is_empty() {
        writeln!(w, "\n## From the kernel's TFO cache (ip tcp_metrics)\n")?;
        for c in &b.kernel_cache {
            writeln!(w, "- {} ({}): {}", md(&c.destination), md(&b.netns_label(c.netns)), md(&c.sentence))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        aggregation::report::grouping::GroupBy,
        events::{Event, Outcome, Timestamp},
    };

    fn event(outcome: &str, daddr: &str, sport: u16, data: u32, stall_us: u64) -> Event {
        let mut e: Event = serde_json::from_value(serde_json::json!({
            "ts": "2026-11-30T08:00:00.000000000Z", "role": "client", "outcome": outcome,
            "family": 4, "saddr": "198.18.0.1", "sport": sport, "daddr": daddr, "dport": 8080,
            "netns": 7, "pid": 1, "comm": "c|x", "syn_data_bytes": data, "cookie_len": null,
            "exp_option": false, "retransmits": u32::from(stall_us > 0), "handshake_us": 1_000 + stall_us,
            "stall_us": stall_us,
        }))
        .unwrap();
        e.ts = Timestamp::from_unix_ns(u128::from(sport));
        e
    }

    fn source(events: u64) -> Source {
        Source {
            kind: "recording",
            path: Some("/tmp/r.jsonl".into()),
            host: Some("h".into()),
            kernel: Some("6.18".into()),
            backend: Some("tracepoint".into()),
            start: Some("2026-11-30T08:00:00.000000000Z".into()),
            events,
            events_lost: None,
            window_s: None,
            segments: Some(1),
            bad_lines: 0,
        }
    }

    fn build(events: &[Event], group: GroupBy, top: Option<usize>) -> Built {
        let mut b = ReportBuilder::new(GroupOptions { by: group, ..Default::default() }, false);
        let h = b.host("h");
        events.iter().for_each(|e| b.add(e, h));
        b.finish(Facts::default(), top)
    }

    fn dropped3() -> Vec<Event> {
        (0..3).map(|i| event("syn_retransmitted", "198.18.0.3", 40000 + i, 64, 1_020_000)).collect()
    }

    fn rendered(built: &Built, format: ReportFormat, errors: &[String]) -> String {
        let s = source(built.summary.events);
        let mut out = Vec::new();
        render(&mut out, format, &Rendered { source: &s, sources: std::slice::from_ref(&s), built }, errors)
            .unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn markdown_says_no_time_lost_as_the_text_does() {
        let mut events = dropped3();
        events.push(event("accepted", "198.18.0.2", 41000, 64, 0));
        let b = build(&events, GroupBy::Destination, None);
        let m = rendered(&b, ReportFormat::Markdown, &[]);
        let healthy = m.lines().find(|l| l.starts_with("| 198.18.0.2:8080 ")).unwrap();
        assert!(!healthy.contains("0us"), "{healthy}");
        assert!(healthy.contains("| no time lost | - |"), "{healthy}");
        assert!(rendered(&b, ReportFormat::Text, &[]).contains("added latency: no time lost"));
    }

    #[test]
    fn three_formats() {
        let b = build(&dropped3(), GroupBy::Destination, Some(20));
        let text = rendered(&b, ReportFormat::Text, &[]);
        assert!(text.starts_with("tfo-trace report: 3 events, from the recording /tmp/r.jsonl"), "{text}");
        assert!(text.contains("\n  verdict: SYN-data to 198.18.0.3:8080 was dropped on the path in 3 of 3 connections, +1.02s each"), "{text}");
        assert!(text.contains("\n  evidence (moderate: 3 of 3 connections)\n"), "{text}");
        assert!(
            text.contains("added latency: 3.06s lost in total: 1.02s per stalled connection (3)"),
            "{text}"
        );
        // The summary comes first.
        let summary = text.find("\nSummary\n").unwrap();
        assert!(summary < text.find("198.18.0.3:8080 (netns 7)").unwrap(), "{text}");
        assert!(text.contains("  3 client connections to 1 destination\n"), "{text}");
        assert!(text.contains("  verdicts (one per destination): 1 syn_data_dropped\n"), "{text}");
        assert!(
            text.contains("  time lost: 3.06s in 3 stalled connections (syn_data_dropped 3, 3.06s)\n"),
            "{text}"
        );
        assert!(text.contains("  worst: 198.18.0.3:8080 3.06s (syn_data_dropped, moderate)\n"), "{text}");

        let json = rendered(&b, ReportFormat::Json, &["r: line 5: truncated".into()]);
        let j: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(j["destinations"][0]["syn_data_dropped"], 3);
        assert_eq!(j["destinations"][0]["netns"], 7);
        assert_eq!(j["destinations"][0]["verdict"]["kind"], "syn_data_dropped");
        assert_eq!(j["destinations"][0]["verdict"]["strength"], "moderate");
        assert_eq!(j["destinations"][0]["verdict"]["support"]["connections"], 3);
        assert_eq!(j["source"]["backend"], "tracepoint");
        assert_eq!(j["replay_error"], "r: line 5: truncated");
        assert_eq!(j["summary"]["verdicts"]["syn_data_dropped"], 1);
        assert_eq!(j["summary"]["lost_us_by_cause"]["syn_data_dropped"], 3_060_000);
        assert_eq!(j["rest"], serde_json::Value::Null);

        let m = rendered(&b, ReportFormat::Markdown, &[]);
        assert!(m.starts_with("# tfo-trace report\n"), "{m}");
        assert!(
            m.contains("| 198.18.0.3:8080 | 7 | 3 | 0 | 3 | 0 | 3.06s | 1.02s | - | -3.06s | SYN-data to"),
            "{m}"
        );
        assert!(m.contains("| moderate: 3 of 3 connections |"), "{m}");
    }

    #[test]
    fn top_rows_and_the_rest_in_one_line() {
        let mut events = dropped3();
        for i in 0..5u16 {
            events.push(event("accepted", &format!("198.18.1.{i}"), 41000 + i, 64, 0));
        }
        let b = build(&events, GroupBy::Destination, Some(2));
        let text = rendered(&b, ReportFormat::Text, &[]);
        assert!(
            text.contains("Destinations by time lost (client side, the 2 that lost the most time of 6)"),
            "{text}"
        );
        assert!(
            text.contains(
                "... and 4 more destinations: 4 connections, no time lost (4 healthy) (--all shows them)"
            ),
            "{text}"
        );
        let j: serde_json::Value = serde_json::from_str(&rendered(&b, ReportFormat::Json, &[])).unwrap();
        assert_eq!(j["destinations"].as_array().unwrap().len(), 2);
        assert_eq!(j["destinations"][0]["destination"], "198.18.0.3:8080");
        assert_eq!(j["rest"]["groups"], 4);
        assert_eq!(j["summary"]["groups"], 6);
        let all = build(&events, GroupBy::Destination, None);
        assert!(!rendered(&all, ReportFormat::Text, &[]).contains("more destinations"));

        // By prefix: one row for the /24 with both of its destinations' evidence.
        let b = build(&events, GroupBy::Prefix, None);
        let text = rendered(&b, ReportFormat::Text, &[]);
        assert!(text.contains("\n198.18.1.0/24 (5 destinations)\n"), "{text}");
        assert!(text.contains("Prefixes by time lost"), "{text}");
        assert!(text.contains("in 2 prefixes"), "{text}");
    }

    #[test]
    fn data_not_acked_is_told_apart_from_time_lost() {
        let mut events = dropped3();
        events.push(event("data_not_acked", "198.18.0.3", 40010, 64, 0));
        events.push(event("data_not_acked", "198.18.0.3", 40011, 64, 0));
        let b = build(&events, GroupBy::Destination, None);
        let mut d = b.rows().next().unwrap();
        assert_eq!(
            lost_line(&d),
            "3.06s lost in total: 1.02s per stalled connection (3), 612ms per connection; 2 extra round \
             trip(s) for data not acked, ~2ms estimated"
        );
        (d.stalled, d.lost_us_total) = (0, 0);
        assert_eq!(
            lost_line(&d),
            "no time lost to SYN timeouts; 2 extra round trip(s) for data not acked, ~2ms estimated"
        );
        d.extra_round_trips = 0;
        assert_eq!(lost_line(&d), "no time lost");
        assert_eq!(Outcome::DataNotAcked.name(), "data_not_acked");
    }

    #[test]
    fn names_in_text_json_and_markdown() {
        let named = |mut e: Event, n: &str| {
            e.dname = Some(n.into());
            e
        };
        let mut events: Vec<Event> = dropped3().into_iter().map(|e| named(e, "api.example")).collect();
        events.push(named(event("accepted", "198.18.0.3", 40100, 64, 0), "www.example"));
        events.push(named(event("accepted", "198.18.0.4", 40101, 64, 0), "api.example"));
        events.push(event("accepted", "198.18.0.5", 40102, 64, 0));

        // By destination: each row lists the names of its address.
        let b = build(&events, GroupBy::Destination, None);
        let text = rendered(&b, ReportFormat::Text, &[]);
        assert!(
            text.contains(
                "\n198.18.0.3:8080 (netns 7)\n  names: api.example, www.example\n  connections: 4  "
            ),
            "{text}"
        );
        assert!(
            text.contains("\n198.18.0.5:8080 (netns 7)\n  connections: 1  "),
            "no names, no line: {text}"
        );
        let j: serde_json::Value = serde_json::from_str(&rendered(&b, ReportFormat::Json, &[])).unwrap();
        let d = &j["destinations"][0];
        assert_eq!(d["destination"], "198.18.0.3:8080");
        assert_eq!(d["names"], serde_json::json!(["api.example", "www.example"]));
        assert_eq!(d["more_names"], 0);
        assert!(d.get("addresses").is_none(), "{d}");
        assert_eq!(j["destinations"][2]["names"], serde_json::json!([]));
        assert!(j["summary"].get("unnamed_groups").is_none());
        let m = rendered(&b, ReportFormat::Markdown, &[]);
        assert!(m.contains("| 198.18.0.3:8080 (api.example, www.example) | 7 | 4 |"), "{m}");

        // By name: one row per name, its addresses as evidence; the address without a name
        // keeps its own row.
        let b = build(&events, GroupBy::Name, None);
        let text = rendered(&b, ReportFormat::Text, &[]);
        assert!(text.contains("\nNames by time lost (client side)\n"), "{text}");
        assert!(
            text.contains(
                "  6 client connections to 3 destinations, in 2 names and 1 address without a name\n"
            ),
            "{text}"
        );
        assert!(text.contains("  verdicts (one per name): 1 syn_data_dropped, 2 healthy\n"), "{text}");
        assert!(text.contains("\napi.example (2 destinations)\n  connections: 4  "), "{text}");
        assert!(
            text.contains(
                "\n    - address 198.18.0.3:8080: 3 connections (syn_retransmitted=3), 3.06s lost\n    \
                 - address 198.18.0.4:8080: 1 connection (accepted=1), no time lost\n"
            ),
            "{text}"
        );
        assert!(text.contains("\n198.18.0.5:8080 (netns 7)\n"), "{text}");
        let j: serde_json::Value = serde_json::from_str(&rendered(&b, ReportFormat::Json, &[])).unwrap();
        assert_eq!(j["summary"]["group_by"], "name");
        assert_eq!(
            (j["summary"]["groups"].clone(), j["summary"]["unnamed_groups"].clone()),
            (3.into(), 1.into())
        );
        let api = &j["destinations"][0];
        assert_eq!(
            (api["destination"].clone(), api["group"].clone()),
            ("api.example".into(), "api.example".into())
        );
        assert_eq!(api["names"], serde_json::json!(["api.example"]));
        assert_eq!(api["netns"], serde_json::Value::Null);
        assert_eq!(api["destinations"], 2);
        assert_eq!(api["verdict"]["kind"], "syn_data_dropped");
        let addrs = api["addresses"].as_array().unwrap();
        assert_eq!(addrs.len(), 2);
        assert_eq!(addrs[0]["address"], "198.18.0.3:8080");
        assert_eq!(addrs[0]["netns"], 7);
        assert_eq!(addrs[0]["connections"], 3);
        assert_eq!(addrs[0]["outcomes"], serde_json::json!({"syn_retransmitted": 3}));
        assert_eq!((addrs[0]["showing"].clone(), addrs[0]["of"].clone()), (3.into(), 3.into()));
        assert_eq!(addrs[0]["lost_us_total"], 3_060_000);
        assert_eq!(addrs[1]["outcomes"], serde_json::json!({"accepted": 1}));
        let unnamed =
            j["destinations"].as_array().unwrap().iter().find(|d| d["destination"] == "198.18.0.5:8080");
        assert_eq!(unnamed.unwrap()["names"], serde_json::json!([]));
        let m = rendered(&b, ReportFormat::Markdown, &[]);
        assert!(m.contains("\n| api.example | - | 4 |"), "{m}");
        assert!(m.contains("\n- address 198.18.0.3:8080"), "{m}");
    }

    #[test]
    fn empty_report_says_so() {
        let b = build(&[], GroupBy::Destination, Some(20));
        assert!(rendered(&b, ReportFormat::Text, &[]).contains("no TFO connections seen"));
    }

    #[test]
    fn host_names_fall_back_to_the_file() {
        let mut h = record::Header::now("tracepoint");
        h.host = "web-1".into();
        assert_eq!(host_name(&h, Path::new("/r/x.jsonl")), "web-1");
        h.host = String::new();
        assert_eq!(host_name(&h, Path::new("/r/web-7.jsonl")), "web-7");
        // An old header without a host parses, and names nothing.
        let old: record::Header = serde_json::from_str(
            r#"{"tfo_trace_recording":1,"kernel":"6.1","backend":"kprobe","start":"x","version":"0.1.0"}"#,
        )
        .unwrap();
        assert_eq!(host_name(&old, Path::new("db-3.jsonl")), "db-3");
    }
}
