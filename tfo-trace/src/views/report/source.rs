//! Where a report's events come from: recordings read back (one source per recording and
//! host, their bad lines said), or a live run over a window with the kernel's facts gathered
//! at its end (tcp_metrics, counter deltas per namespace, listener queue sizes, keys).
use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
};

use anyhow::{bail, Result};
use serde::Serialize;

use crate::{
    aggregation::report::{Built, Facts, GroupOptions, ListenerFact, ReportBuilder},
    events::{
        flight, record,
        replay::{self, Replay, Replayed, Window},
        Event,
    },
    filter::EventFilter,
    kernel::{
        listeners,
        netstat::Netstat,
        sysctl::{self, TfoNamespace},
        tcp_metrics,
    },
    live::session::Session,
    probes::LoadOptions,
};

/// What a report renders: where from, and the ranked model.
pub struct Rendered<'a> {
    pub source: &'a Source,
    pub sources: &'a [Source],
    pub built: &'a Built,
}

/// Where the events came from: one recording, the live kernel, or (the top-level `source`
/// of a merged report) several recordings, each also in `sources`.
#[derive(Clone, Debug, Serialize)]
pub struct Source {
    /// "recording", "flight_recorder" (a recorder's directory), "live", or "recordings"
    /// (several merged).
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
    /// A flight recorder's segments cut short by a crash: their last lines skipped, which
    /// is no error (0 for a file, where such a line is a bad one).
    pub torn_lines: u64,
    /// The window the events were selected from (`--since`, `--until`), RFC 3339 UTC.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub since: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub until: Option<String>,
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
pub fn recording_source(path: &Path, header: record::Header) -> Source {
    Source {
        kind: if flight::is_recorder_dir(path) { "flight_recorder" } else { "recording" },
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
        torn_lines: 0,
        since: None,
        until: None,
    }
}

/// A window's ends as a source says them.
fn window_ends(window: &Window) -> (Option<String>, Option<String>) {
    let said = |ns: Option<u128>| ns.map(crate::events::rfc3339);
    (said(window.since_ns), said(window.until_ns))
}

/// Every recording named (a file, or a flight recorder's directory), as the filter and the
/// window select their events: one source per recording and host (recordings joined with
/// `cat a b` hold several: a header of the same host starts a new segment of its source,
/// one of another host a new source; a recorder's segments are one host's), and the error
/// line of each recording with bad lines. A recording met twice is read twice and said.
pub(super) fn from_recordings(
    from: &[PathBuf],
    filter: &EventFilter,
    window: Window,
    group: GroupOptions,
    top: Option<usize>,
) -> Result<(Source, Vec<Source>, Built, Vec<String>)> {
    let mut opened = Vec::new();
    let mut hosts = std::collections::BTreeSet::new();
    let mut netns_names = crate::events::replay::RecordedNetnsNames::default();
    for (path, in_folder) in record::recordings_named(from)? {
        match Replay::open(&path, filter.clone().into_select(), window) {
            Ok((header, replay)) => {
                // Several hosts make a fleet (namespace inodes then name nothing), also
                // when joined in one file: its headers are read first.
                hosts.extend(replay::headers_of(&path)?.iter().map(|h| host_name(h, &path)));
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
    let mut names = EventNetnsNames::new(fleet);
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
                    names.add(&e);
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
        source.torn_lines = replay.torn;
        if replay.torn > 0 {
            crate::views::replayed::say_torn(&path, replay.torn)?;
        }
        sources.push(source);
        errors.extend(replay.bad.summary());
        netns_names.extend(&replay.netns_names);
    }
    let (since, until) = window_ends(&window);
    for s in &mut sources {
        (s.since, s.until) = (since.clone(), until.clone());
    }
    if let Some(msg) = filter.netns_name_unrecorded(&netns_names) {
        return Err(crate::events::record::UsageError(msg).into());
    }
    let backends: std::collections::BTreeSet<&str> =
        sources.iter().filter_map(|s| s.backend.as_deref()).collect();
    let facts = Facts {
        backend: (backends.len() == 1).then(|| backends.iter().next().unwrap_or(&"").to_string()),
        netns_names: names.0,
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
            torn_lines: sources.iter().map(|s| s.torn_lines).sum(),
            since,
            until,
        }
    };
    Ok((source, sources, built, errors))
}

pub(super) async fn live(
    load: &LoadOptions,
    duration: Option<std::time::Duration>,
    group: GroupOptions,
    top: Option<usize>,
) -> Result<(Source, Built)> {
    let mut session = Session::start(load, None)?;
    let started = std::time::Instant::now();
    let start = record::Header::now(session.tracer.backend.name()).start;
    let mut b = ReportBuilder::new(group, false);
    let (host, kernel) = {
        let h = record::Header::now("");
        (h.host, h.kernel)
    };
    let host_id = b.host(&host);
    let mut names = EventNetnsNames::new(false);
    session
        .run(duration, |batch| {
            for e in batch.iter() {
                names.add(e);
                b.add(e, host_id);
            }
            Ok(std::ops::ControlFlow::Continue(()))
        })
        .await?;
    let window_s = started.elapsed().as_secs_f64();
    // Every namespace's counters over the window, those created during it (a lab, a
    // container) from their birth, those gone during it up to their last reading.
    let deltas = session.counter_deltas();
    let namespaces = sysctl::tfo_namespaces();
    let mut facts = gather_facts(b.client_namespaces(), &namespaces, deltas, session.tracer.backend.name());
    // A namespace gone by now is still named as its events were.
    for (inode, name) in names.0 {
        facts.netns_names.entry(inode).or_insert(name);
    }
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
        torn_lines: 0,
        since: None,
        until: None,
    };
    Ok((src, built))
}

/// The `ip netns` names the events came with, by inode (the first one wins), so that a
/// report names a namespace as every view does ([`crate::units::netns`]): a recording's
/// events carry them. None across hosts, where an inode names nothing.
struct EventNetnsNames(BTreeMap<u32, String>, bool);

impl EventNetnsNames {
    fn new(fleet: bool) -> Self {
        EventNetnsNames(BTreeMap::new(), fleet)
    }

    fn add(&mut self, e: &Event) {
        if let Some(name) = e.netns_name.as_deref().filter(|_| !self.1) {
            self.0.entry(e.netns).or_insert_with(|| name.to_string());
        }
    }
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
        if let Ok(t) = ns.tcp_fastopen {
            facts.tcp_fastopen.insert(inode, t.value());
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

#[cfg(test)]
mod tests {
    use super::*;

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
