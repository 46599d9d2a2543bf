//! Reading recordings back (`report --from`, `stalls --from`, `trace --from`, `top --from`,
//! the exporter's `/recording`): every line read, bad ones skipped and counted
//! ([`BadLines`]), a header in the middle (recordings joined with `cat a b`, or the next
//! segment of a flight recorder's directory) passed on as the start of a new segment, and
//! the caller's selection applied (the filter flags, as the kernel applies them live:
//! `EventFilter::selects`; the time window of `--since` and `--until`): one reader for
//! every view that replays.
//!
//! A recording is a file, or a flight recorder's directory (`events::flight`): its
//! segments read in order as one recording, those wholly outside the window passed over
//! unread. A segment's last line cut short by a crash (`Line::Torn`) is what a recorder
//! leaves when it is killed or the power goes: counted apart ([`Replay::torn`]), not an
//! error; in a file it is a bad line, as every other.
use std::{
    collections::VecDeque,
    fs::File,
    io::{BufReader, Read as _},
    path::{Path, PathBuf},
};

use anyhow::{bail, Result};

use super::{
    flight,
    record::{BadLines, Events, Header, Line, ReplayError},
    Event,
};

/// Which events a replay hands on (the rest are read and passed over).
pub(crate) type Select = Box<dyn Fn(&Event) -> bool>;

/// `--since` and `--until`: the events whose time is in `[since, until)` (ns since the
/// epoch; None: unbounded).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Window {
    pub since_ns: Option<u128>,
    pub until_ns: Option<u128>,
}

impl Window {
    pub fn contains(&self, ts_ns: u128) -> bool {
        self.since_ns.is_none_or(|s| ts_ns >= s) && self.until_ns.is_none_or(|u| ts_ns < u)
    }

    /// Whether a recorder's segment may hold events of the window: none of its events
    /// happened after it was last written, nor long before it started (an event is
    /// written within a second or so of happening; a minute is left for a clock's jump).
    fn may_hold(&self, segment: &flight::Segment) -> bool {
        const MARGIN_NS: u128 = 60 * 1_000_000_000;
        let written_ns =
            segment.modified.duration_since(std::time::UNIX_EPOCH).map_or(u128::MAX, |d| d.as_nanos());
        let started_ns = u128::try_from(segment.started_s).unwrap_or(0) * 1_000_000_000;
        self.since_ns.is_none_or(|s| written_ns.saturating_add(MARGIN_NS) >= s)
            && self.until_ns.is_none_or(|u| started_ns < u.saturating_add(MARGIN_NS))
    }
}

/// What a replay hands on: the events the filter selects, and the headers after line 1.
// Nearly every line is an event: boxing it would allocate once per event for the sake
// of the rare header.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Replayed {
    Event(Event),
    Header(Header),
}

pub(crate) struct Replay {
    lines: Events<BufReader<File>>,
    /// A recorder's segments still to read, in order.
    segments: VecDeque<PathBuf>,
    /// The recording is a recorder's directory.
    recorder: bool,
    select: Select,
    window: Window,
    /// The bad lines skipped so far.
    pub bad: BadLines,
    /// A recorder's segments cut short by a crash: their last line (or a segment that holds
    /// no whole header), skipped.
    pub torn: u64,
    /// The segments of a recorder's directory read (0 for a file).
    pub segments_read: u32,
    /// The namespace names of every event read so far, selected or not.
    pub netns_names: RecordedNetnsNames,
}

impl Replay {
    /// Opens a recording (a file, or a recorder's directory): its first header, and the
    /// replay of the rest.
    pub(crate) fn open(path: &Path, select: Select, window: Window) -> Result<(Header, Replay)> {
        let (bad, netns_names) = (BadLines::default(), RecordedNetnsNames::default());
        if !flight::is_recorder_dir(path) {
            let (header, lines) = Events::open(path)?;
            let segments = VecDeque::new();
            let replay = Replay {
                lines,
                segments,
                recorder: false,
                select,
                window,
                bad,
                torn: 0,
                segments_read: 0,
                netns_names,
            };
            return Ok((header, replay));
        }
        let all = flight::segments(path)?;
        let mut segments: VecDeque<PathBuf> =
            all.iter().filter(|s| window.may_hold(s)).map(|s| s.path.clone()).collect();
        // A window no segment holds still names the host: the nearest segment is read, and
        // none of its events selected.
        if segments.is_empty() {
            let nearest = match window.since_ns {
                Some(_) => all.last(),
                None => all.first(),
            };
            segments.extend(nearest.map(|s| s.path.clone()));
        }
        let mut torn = 0;
        while let Some(first) = segments.pop_front() {
            match Events::open(&first) {
                Ok((header, lines)) => {
                    let replay = Replay {
                        lines,
                        segments,
                        recorder: true,
                        select,
                        window,
                        bad,
                        torn,
                        segments_read: 1,
                        netns_names,
                    };
                    return Ok((header, replay));
                }
                Err(_) if holds_no_whole_line(&first) => torn += 1,
                Err(e) => return Err(e),
            }
        }
        bail!("{}: the flight recorder holds no recording yet (no segment with a header)", path.display())
    }

    /// The selected events alone (headers passed over), for views that merge segments.
    pub(crate) fn events(&mut self) -> impl Iterator<Item = Event> + '_ {
        self.filter_map(|r| match r {
            Replayed::Event(e) => Some(e),
            Replayed::Header(_) => None,
        })
    }

    /// The next segment of a recorder's directory, its header; None at the end.
    fn next_segment(&mut self) -> Option<Header> {
        while let Some(path) = self.segments.pop_front() {
            match Events::open(&path) {
                Ok((header, lines)) => {
                    self.lines = lines;
                    self.segments_read += 1;
                    return Some(header);
                }
                // Removed as the oldest since listed: the recorder is writing as we read.
                Err(_) if !path.exists() => {}
                Err(_) if holds_no_whole_line(&path) => self.torn += 1,
                Err(e) => self.bad.add(ReplayError::new(&path, 1, &format!("{e:#}"))),
            }
        }
        None
    }
}

/// What [`replay_each`] read: the events it handed on, the torn last lines of recorders'
/// segments per recording, each recording's error line for its bad lines, and the
/// namespace names recorded (for `EventFilter::netns_name_unrecorded`).
#[derive(Default)]
pub(crate) struct ReplayedAll {
    pub events: u64,
    pub torn: Vec<(PathBuf, u64)>,
    pub errors: Vec<String>,
    pub netns_names: RecordedNetnsNames,
}

/// Hands every selected event of the recordings `paths` names (files, recorders'
/// directories, folders of them: `record::recordings_named`) to `each`, one recording after
/// another, until `each` breaks. A file in a folder that is not a recording is passed over
/// with a note; one named on its own is an error.
pub(crate) fn replay_each(
    paths: &[PathBuf],
    filter: &crate::filter::EventFilter,
    window: Window,
    mut each: impl FnMut(&Event) -> Result<std::ops::ControlFlow<()>>,
) -> Result<ReplayedAll> {
    let mut all = ReplayedAll::default();
    for (path, in_folder) in super::record::recordings_named(paths)? {
        let mut replay = match Replay::open(&path, filter.clone().into_select(), window) {
            Ok((_, replay)) => replay,
            Err(e) if in_folder => {
                crate::note!("note: skipping {}: {e:#}", path.display())?;
                continue;
            }
            Err(e) => return Err(e),
        };
        let mut stopped = false;
        for e in replay.events() {
            all.events += 1;
            if each(&e)?.is_break() {
                stopped = true;
                break;
            }
        }
        if replay.torn > 0 {
            all.torn.push((path.clone(), replay.torn));
        }
        all.errors.extend(replay.bad.summary());
        all.netns_names.extend(&replay.netns_names);
        if stopped {
            break;
        }
    }
    Ok(all)
}

/// The recording of `window` from `path` (a recorder's directory, or a file), as a
/// recording's lines: each segment's header, then its events in the window. Handed to
/// `send` in pieces of about `chunk` bytes, until it says no one takes them any more. A
/// recorder that holds no segment yet gives a header alone (naming `backend`): the answer
/// is always a recording `report` reads.
pub(crate) fn write_window(
    path: &Path,
    window: Window,
    backend: &str,
    chunk: usize,
    mut send: impl FnMut(Vec<u8>) -> bool,
) -> Result<()> {
    fn line(buf: &mut Vec<u8>, value: &impl serde::Serialize) -> Result<()> {
        serde_json::to_writer(&mut *buf, value)?;
        buf.push(b'\n');
        Ok(())
    }
    let mut buf = Vec::with_capacity(chunk + 4096);
    let replay = match Replay::open(path, Box::new(|_| true), window) {
        Ok((header, replay)) => {
            line(&mut buf, &header)?;
            Some(replay)
        }
        Err(_) if flight::is_recorder_dir(path) => {
            line(&mut buf, &Header::now(backend))?;
            None
        }
        Err(e) => return Err(e),
    };
    for r in replay.into_iter().flatten() {
        match r {
            Replayed::Header(h) => line(&mut buf, &h)?,
            Replayed::Event(e) => line(&mut buf, &e)?,
        }
        if buf.len() >= chunk && !send(std::mem::replace(&mut buf, Vec::with_capacity(chunk + 4096))) {
            return Ok(());
        }
    }
    if !buf.is_empty() {
        send(buf);
    }
    Ok(())
}

/// Every header of a recording (a file's, or each segment's of a recorder's directory),
/// read without decoding the events between them: which hosts it holds.
pub(crate) fn headers_of(path: &Path) -> Result<Vec<Header>> {
    if !flight::is_recorder_dir(path) {
        return super::record::headers_in(path);
    }
    let mut headers = Vec::new();
    for s in flight::segments(path)? {
        // A segment gone since listed, or torn at its header: no host to name.
        if let Ok((header, _)) = Events::open(&s.path) {
            headers.push(header);
        }
    }
    Ok(headers)
}

/// Whether `path` holds not one whole line: a segment made as a crash came, its header
/// not (all) written.
fn holds_no_whole_line(path: &Path) -> bool {
    let mut head = Vec::new();
    let read = File::open(path)
        .and_then(|f| f.take(super::record::MAX_LINE_BYTES as u64 + 1).read_to_end(&mut head));
    read.is_ok() && !head.contains(&b'\n')
}

impl Iterator for Replay {
    type Item = Replayed;

    fn next(&mut self) -> Option<Replayed> {
        loop {
            let Some(line) = self.lines.next() else {
                return self.next_segment().map(Replayed::Header);
            };
            match line {
                Line::Event(e) => {
                    self.netns_names.add(e.netns_name.as_ref());
                    if self.window.contains(e.ts.unix_ns()) && (self.select)(&e) {
                        return Some(Replayed::Event(e));
                    }
                }
                Line::Header(h) => return Some(Replayed::Header(h)),
                Line::Bad(bad) => self.bad.add(bad),
                Line::Torn(_) if self.recorder => self.torn += 1,
                Line::Torn(bad) => self.bad.add(bad),
            }
        }
    }
}

/// The `netns_name`s a replay's events were recorded with (before any filter), for
/// `EventFilter::netns_name_unrecorded`: up to [`RecordedNetnsNames::MAX`] of them.
#[derive(Clone, Debug, Default)]
pub(crate) struct RecordedNetnsNames {
    names: std::collections::BTreeSet<std::sync::Arc<str>>,
    /// More names came than are kept.
    full: bool,
}

impl RecordedNetnsNames {
    const MAX: usize = 4096;

    pub(crate) fn add(&mut self, name: Option<&std::sync::Arc<str>>) {
        let Some(name) = name else { return };
        if self.names.contains(name) {
            return;
        }
        if self.names.len() >= Self::MAX {
            self.full = true;
            return;
        }
        self.names.insert(name.clone());
    }

    pub(crate) fn extend(&mut self, other: &RecordedNetnsNames) {
        for n in &other.names {
            self.add(Some(n));
        }
        self.full |= other.full;
    }

    /// Whether an event was recorded with this name.
    pub(crate) fn contains(&self, name: &str) -> bool {
        self.names.contains(name)
    }

    /// Whether more names came than are kept (a name not kept may still have been recorded).
    pub(crate) fn is_full(&self) -> bool {
        self.full
    }

    /// The names kept, in order.
    pub(crate) fn names(&self) -> Vec<&str> {
        self.names.iter().map(|n| &**n).collect()
    }
}
