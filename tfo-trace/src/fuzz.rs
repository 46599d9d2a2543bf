//! The bodies of the fuzz targets in `fuzz/` (cargo fuzz, nightly) and of the unit test
//! that replays their seeds and every input that ever crashed them (`fuzz/seeds/`,
//! `fuzz/regressions/`, on stable). Each takes any bytes and must not panic; the asserts
//! are what has to hold for every input, so the fuzzer reports a broken one as a crash.
use std::{
    io::BufReader,
    path::{Path, PathBuf},
};

use crate::{
    aggregation::{
        report::{grouping::GroupBy, Built, Facts, GroupOptions, ReportBuilder},
        top,
    },
    cli::{ReportFormat, Sort},
    events::{record, Clock, Event, Interner},
    views::{
        report::{recording_source, render, Rendered, Source},
        top::rows::{rows, View},
    },
};

/// A realtime-minus-monotonic offset as on a real host (2025, booted an hour ago), fixed
/// so that a crash replays exactly.
const CLOCK_OFFSET_NS: i128 = 1_764_490_000_000_000_000;

/// A fuzz target: any bytes in, a panic for an input that breaks what must hold.
pub type Target = fn(&[u8]);

/// The fuzz targets, by the name of their directory under `fuzz/seeds/` and
/// `fuzz/regressions/`.
pub const TARGETS: [(&str, Target); 4] = [
    ("recording", recording),
    ("event_decoder", event_decoder),
    ("replay", replay),
    ("dns_answer", dns_answer),
];

/// `report --from` / `top --from` on any file: the whole-file reader and the streaming one
/// (fed through a tiny buffer, so lines are split across reads) agree, every error is one
/// line, and every event read back would be written again as the same line.
pub fn recording(data: &[u8]) {
    let path = Path::new("fuzz.jsonl");
    let whole = record::read_from(data, path);
    let chunked = record::read_from(BufReader::with_capacity(7, data), path);
    match (&whole, &chunked) {
        (Ok(a), Ok(b)) => assert_eq!(a, b, "buffering changed what was read"),
        (Err(a), Err(b)) => assert_eq!(format!("{a:#}"), format!("{b:#}"), "buffering changed the error"),
        _ => panic!("buffering changed the outcome: {whole:?} vs {chunked:?}"),
    }
    match whole {
        Err(e) => assert_one_line(&format!("{e:#}")),
        Ok((_, events, bad)) => {
            if let Some(summary) = bad.summary() {
                assert_one_line(&summary);
            }
            assert!(bad.first.len() <= record::BadLines::NAMED && bad.first.len() as u64 <= bad.count);
            let lines = data.split(|&b| b == b'\n').count();
            assert!(events.len() < lines, "{} events from {lines} lines", events.len());
            for e in &events {
                round_trips(e);
            }
        }
    }
}

/// The report as every format says it (each verdict in words); its JSON must parse.
fn said_every_way(built: &Built, source: &Source) {
    let r = Rendered { source, sources: &[], built };
    for format in [ReportFormat::Text, ReportFormat::Markdown, ReportFormat::Json] {
        let mut out = Vec::new();
        render(&mut out, format, &r, &[]).expect("a report always renders");
        if format == ReportFormat::Json {
            serde_json::from_slice::<serde_json::Value>(&out).expect("a report's JSON always parses");
        }
    }
}

/// What `report --from` and `top --from` do with the events of any file: the report's
/// verdicts (in every format) and top's tables, every view and sort.
pub fn replay(data: &[u8]) {
    let Ok((header, events, _)) = record::read_from(data, Path::new("fuzz.jsonl")) else { return };
    let facts = Facts { backend: Some(header.backend.clone()), ..Default::default() };
    let source = recording_source(Path::new("fuzz.jsonl"), header);
    let mut whole = ReportBuilder::new(GroupOptions::default(), false);
    let host = whole.host("");
    events.iter().for_each(|e| whole.add(e, host));
    said_every_way(&whole.finish(facts.clone(), None), &source);
    // Every grouping, a short top, and the events split between two hosts (a merge): the
    // rows shown and the rest always add up to the summary.
    for by in [
        GroupBy::Destination,
        GroupBy::Name,
        GroupBy::Prefix,
        GroupBy::Port,
        GroupBy::Process,
        GroupBy::Container,
    ] {
        let mut b = ReportBuilder::new(GroupOptions { by, prefix_v4: 20, prefix_v6: 40 }, true);
        let hosts = [b.host("a"), b.host("b")];
        for (i, e) in events.iter().enumerate() {
            b.add(e, hosts[i % 2]);
        }
        let built = b.finish(facts.clone(), Some(3));
        said_every_way(&built, &source);
        let r = built.materialize();
        let shown: u64 = r.destinations.iter().map(|d| d.connections).sum();
        let rest = r.rest.as_ref().map(|x| x.connections).unwrap_or(0);
        assert_eq!(shown.saturating_add(rest), r.summary.connections, "rows and rest sum to the summary");
    }
    let snapshot = top::model_of(&events).snapshot();
    for view in View::ALL {
        for sort in Sort::ALL {
            rows(&snapshot, view, sort, "");
        }
    }
}

/// One ring-buffer record, as `EventSource` hands it to [`Event::from_bytes`]: any bytes
/// give an event or a one-line error, and a decoded event can be recorded and read back.
pub fn event_decoder(data: &[u8]) {
    match Event::from_bytes(data, Clock::fixed(CLOCK_OFFSET_NS), &mut Interner::default()) {
        Err(e) => assert_one_line(&format!("{e:#}")),
        Ok(e) => round_trips(&e),
    }
}

/// `--names` on any packet a namespace receives from port 53 (what the socket filter
/// passes: anyone on the path can send it): the packet, and the bytes as a DNS message
/// themselves, give names no terminal can be fooled by, or nothing.
pub fn dns_answer(data: &[u8]) {
    use crate::names::{capture, wire};
    let from_packet = match capture::dns_of(data) {
        Some(capture::Dns::Udp(msg)) => wire::answers(msg),
        Some(capture::Dns::Tcp(s)) => wire::answers(s.payload.get(2..).unwrap_or_default()),
        None => Vec::new(),
    };
    for a in from_packet.iter().chain(&wire::answers(data)) {
        assert!(!a.name.is_empty() && !a.name.chars().any(|c| c.is_control() || c.is_uppercase()), "{a:?}");
    }
}

/// What a recorder writes for `e` reads back as `e` (its time to the ns included).
fn round_trips(e: &Event) {
    let line = serde_json::to_string(e).expect("an event always serializes");
    assert!(!line.contains('\n'), "a recording line holds one event: {line}");
    assert_eq!(record::parse_event(&line).as_ref(), Ok(e), "{line}");
}

/// Errors reach users as one line on stderr: short, no control characters.
fn assert_one_line(msg: &str) {
    assert!(!msg.chars().any(char::is_control), "control character in the error: {msg:?}");
    let start: String = msg.chars().take(200).collect();
    assert!(msg.len() <= 1024, "a {}-byte error line: {start:?}...", msg.len());
}

/// Every file under `fuzz/<kind>/<target>/` of the repository, sorted (`fuzz/seeds/replay`
/// is a link to the recording seeds).
pub fn corpus_files(kind: &str, target: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz").join(kind).join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map(|d| d.filter_map(|e| Some(e.ok()?.path())).filter(|p| p.is_file()).collect())
        .unwrap_or_default();
    files.sort();
    files
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The seeds and every crash the fuzzer ever found, through the same bodies as the
    /// fuzz targets: a fixed bug stays fixed without nightly or cargo-fuzz.
    #[test]
    fn seeds_and_past_crashes_replay_cleanly() {
        for (target, body) in TARGETS {
            let seeds = corpus_files("seeds", target);
            assert!(!seeds.is_empty(), "no seed corpus in fuzz/seeds/{target}");
            for file in seeds.iter().chain(&corpus_files("regressions", target)) {
                let data = std::fs::read(file).unwrap();
                if let Err(p) = std::panic::catch_unwind(|| body(&data)) {
                    let msg =
                        p.downcast_ref::<String>().map(String::as_str).or(p.downcast_ref::<&str>().copied());
                    panic!("{target}: {} fails: {}", file.display(), msg.unwrap_or("(panic)"));
                }
            }
        }
    }

    /// The seed corpus holds real input, not only edge cases: a recording with events and
    /// an event record of this build's layout (regenerate it if TfoEvent changes).
    #[test]
    fn seeds_hold_a_recording_and_an_event() {
        let recordings = corpus_files("seeds", "recording");
        let events_read = recordings
            .iter()
            .filter_map(|f| record::read_recording(f).ok())
            .map(|(_, events, _)| events.len())
            .max();
        assert!(events_read >= Some(5), "no seed recording with events: {recordings:?}");
        let decoded = corpus_files("seeds", "event_decoder")
            .iter()
            .filter(|f| {
                Event::from_bytes(&std::fs::read(f).unwrap(), Clock::fixed(0), &mut Interner::default())
                    .is_ok()
            })
            .count();
        assert!(decoded >= 2, "fuzz/seeds/event_decoder has {decoded} valid event records");
    }
}
