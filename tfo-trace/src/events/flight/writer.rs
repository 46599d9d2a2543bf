//! The flight recorder's writer: every event the exporter reads, as a recording's lines,
//! into the active segment of the directory; a new segment when the active one holds its
//! share of the size or of the age; the oldest segments removed first, so the directory
//! never holds more than `--flight-recorder-size` bytes nor events older than
//! `--flight-recorder-age` (to within one segment's share of the age).
//!
//! What a crash can cost: each batch is written with one write(2) when the exporter has
//! read it (the kernel has it then: a `kill -9` loses nothing written), and the active
//! segment is synced to the disk every second by the exporter ([`FlightRecorder::tick`]):
//! a power cut loses at most the last second. A batch cut short by a crash leaves a torn
//! last line, which a replay skips and counts (`events::replay`); a restart starts a new
//! segment and keeps the old ones.
//!
//! What a full disk or an unwritable directory costs: the events not written, counted
//! ([`RecorderStats::unwritten`]) and said once when it starts and once when it ends;
//! never an error. A failed write keeps the whole lines the disk took and no part of a
//! line (the segment is cut back to its last whole line, and closed).
use std::{
    collections::VecDeque,
    fs::{self, File},
    io::{self, Write as _},
    os::unix::fs::OpenOptionsExt as _,
    path::{Path, PathBuf},
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use anyhow::Result;

use super::{open_for_writing, private, segment_name, sync_dir, Found, Segment};
use crate::events::{record::Header, Event};

/// How much the recorder may keep.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Bytes in all segments together.
    pub max_bytes: u64,
    /// Age of the oldest event kept.
    pub max_age: Duration,
}

impl Limits {
    /// Segments a full directory holds: the oldest goes whole, so what is kept is between
    /// 15/16 of the limits and all of them.
    const SEGMENTS: u32 = 16;
    /// The smallest `--flight-recorder-size`: a few events per segment.
    pub const MIN_BYTES: u64 = 64 * 1024;
    /// The defaults: what a node can spare without notice, and a day.
    pub const DEFAULT_BYTES: u64 = 256 << 20;
    pub const DEFAULT_AGE: Duration = Duration::from_secs(24 * 3600);

    fn segment_bytes(&self) -> u64 {
        self.max_bytes / u64::from(Self::SEGMENTS)
    }

    fn segment_age(&self) -> Duration {
        self.max_age / Self::SEGMENTS
    }
}

/// What the recorder has done so far (the exporter's `tfo_trace_flight_recorder_*`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecorderStats {
    /// Events written.
    pub written: u64,
    /// Events not written: the disk full, the directory unwritable.
    pub unwritten: u64,
    /// Bytes in the segments now.
    pub bytes: u64,
    /// Segments now.
    pub segments: u64,
    /// When the oldest segment kept started, seconds since the epoch: the window's start.
    pub oldest_s: Option<i64>,
    /// Segments removed to keep within the limits.
    pub removed: u64,
}

/// The segment being written.
struct Active {
    segment: Segment,
    file: File,
    /// Events in it.
    events: u64,
}

pub(crate) struct FlightRecorder {
    dir: PathBuf,
    limits: Limits,
    /// The backend the events come from, for each segment's header.
    backend: String,
    /// Closed segments, oldest first, and their bytes in all.
    kept: VecDeque<Segment>,
    kept_bytes: u64,
    active: Option<Active>,
    next_seq: u64,
    /// The lines of the batch being recorded, not yet written, and their events.
    pending: Vec<u8>,
    pending_events: u64,
    line: Vec<u8>,
    stats: RecorderStats,
    /// Why writing fails, once said; None while it works.
    failing: Option<String>,
    /// Written since the last [`FlightRecorder::tick`].
    unsynced: bool,
}

impl FlightRecorder {
    /// Opens `dir` ([`super::open_for_writing`]: a refusal is a usage error), keeps what a
    /// previous run left within `limits`, and writes nothing until the first event.
    pub(crate) fn open(dir: &Path, limits: Limits) -> Result<FlightRecorder> {
        let mut r = FlightRecorder {
            dir: dir.to_path_buf(),
            limits,
            backend: String::new(),
            kept: VecDeque::new(),
            kept_bytes: 0,
            active: None,
            next_seq: 1,
            pending: Vec::new(),
            pending_events: 0,
            line: Vec::new(),
            stats: RecorderStats::default(),
            failing: None,
            unsynced: false,
        };
        match open_for_writing(dir)? {
            Found::Usable(segments) => {
                r.next_seq = segments.last().map_or(1, |s| s.seq + 1);
                r.kept_bytes = segments.iter().map(|s| s.bytes).sum();
                r.kept = segments.into();
                r.expire(SystemTime::now());
                r.make_room(0);
            }
            Found::Unwritable(e) => r.fault(&e),
        }
        Ok(r)
    }

    /// The backend each new segment's header names.
    pub(crate) fn set_backend(&mut self, backend: &str) {
        self.backend = backend.to_string();
    }

    /// Records `events` (each a line of the active segment, new segments as the limits
    /// say), written with one write(2) per segment touched. Never fails: what cannot be
    /// written is counted.
    pub(crate) fn record(&mut self, events: &[Event]) {
        // A segment that could not be made is tried once a batch, not once an event.
        let mut open_failed = false;
        for e in events {
            self.line.clear();
            if serde_json::to_writer(&mut self.line, e).is_err() {
                self.stats.unwritten += 1;
                continue;
            }
            self.line.push(b'\n');
            let need = self.line.len() as u64;
            if self.active.as_ref().is_some_and(|a| {
                a.events + self.pending_events > 0
                    && a.segment.bytes + self.pending.len() as u64 + need > self.limits.segment_bytes()
            }) {
                self.close_active();
            }
            if self.active.is_none() {
                if open_failed {
                    self.stats.unwritten += 1;
                    continue;
                }
                if !self.open_segment() {
                    open_failed = true;
                    self.stats.unwritten += 1;
                    continue;
                }
            }
            if !self.make_room(need) {
                self.stats.unwritten += 1;
                continue;
            }
            self.pending.extend_from_slice(&self.line);
            self.pending_events += 1;
        }
        self.write_pending();
    }

    /// Once a second or so: closes the active segment once it holds its share of the age,
    /// removes segments past the age, and gives a handle on the segment written since the
    /// last call, to sync (`File::sync_data`) off the caller's thread.
    pub(crate) fn tick(&mut self, now: SystemTime) -> Option<File> {
        let sync = if std::mem::take(&mut self.unsynced) {
            self.active.as_ref().and_then(|a| a.file.try_clone().ok())
        } else {
            None
        };
        let age_share = self.limits.segment_age();
        if self.active.as_ref().is_some_and(|a| age(a.segment.started_s, now) >= age_share) {
            self.close_active();
        }
        self.expire(now);
        sync
    }

    /// Writes and syncs what is pending (the exporter stops).
    pub(crate) fn finish(&mut self) {
        self.write_pending();
        if let Some(a) = &self.active {
            let _ = a.file.sync_data();
        }
    }

    pub(crate) fn stats(&self) -> RecorderStats {
        let active = self.active.as_ref().map(|a| &a.segment);
        RecorderStats {
            bytes: self.kept_bytes + active.map_or(0, |s| s.bytes),
            segments: self.kept.len() as u64 + u64::from(active.is_some()),
            oldest_s: self.kept.front().or(active).map(|s| s.started_s),
            ..self.stats
        }
    }

    /// Starts a new segment with its header; false (said, and counted by the caller) where
    /// it cannot be made.
    fn open_segment(&mut self) -> bool {
        let header = Header::now(&self.backend);
        let now = SystemTime::now();
        let started_s = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64);
        let path = self.dir.join(segment_name(self.next_seq, started_s));
        let mut line = serde_json::to_vec(&header).unwrap_or_default();
        line.push(b'\n');
        if !self.make_room(line.len() as u64) {
            return false;
        }
        let made = fs::OpenOptions::new()
            .append(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path);
        let mut file = match made {
            Ok(f) => f,
            Err(e) => {
                self.fault(&e);
                return false;
            }
        };
        if let Err(e) = private(&file).and_then(|()| file.write_all(&line)).and_then(|()| sync_dir(&self.dir))
        {
            drop(file);
            let _ = fs::remove_file(&path);
            self.fault(&e);
            return false;
        }
        self.next_seq += 1;
        let segment =
            Segment { path, seq: self.next_seq - 1, started_s, bytes: line.len() as u64, modified: now };
        self.active = Some(Active { segment, file, events: 0 });
        self.unsynced = true;
        true
    }

    /// Writes the pending lines to the active segment in one write (more only where the
    /// kernel takes less); on failure keeps the whole lines the disk took (a short write
    /// before ENOSPC: a full disk still gets what fits), cuts the segment back to its last
    /// whole line, closes it, and counts the lines not written.
    fn write_pending(&mut self) {
        let n = std::mem::take(&mut self.pending_events);
        if n == 0 {
            return;
        }
        let Some(a) = &mut self.active else {
            self.stats.unwritten += n;
            self.pending.clear();
            return;
        };
        let (wrote, failed) = write_what_fits(&mut a.file, &self.pending);
        let (whole, lines) = match failed {
            None => (wrote, n),
            Some(_) => {
                let whole = self.pending[..wrote].iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
                (whole, self.pending[..whole].iter().filter(|&&b| b == b'\n').count() as u64)
            }
        };
        if lines > 0 {
            a.segment.bytes += whole as u64;
            a.segment.modified = SystemTime::now();
            a.events += lines;
            self.stats.written += lines;
            self.unsynced = true;
        }
        match failed {
            None => {
                if let Some(why) = self.failing.take() {
                    let _ = crate::note!(
                        "tfo-trace: --flight-recorder {}: recording again ({} events were not written: {why})",
                        self.dir.display(),
                        self.stats.unwritten
                    );
                }
            }
            Some(e) => {
                // O_APPEND: the next write goes to the new end.
                let _ = a.file.set_len(a.segment.bytes);
                self.stats.unwritten += n - lines;
                self.fault(&e);
                self.close_active();
            }
        }
        self.pending.clear();
    }

    /// Writes what is pending and moves the active segment to the kept ones.
    fn close_active(&mut self) {
        self.write_pending();
        if let Some(a) = self.active.take() {
            // What is on disk (a failed write may have left a part of a line).
            let bytes = a.file.metadata().map_or(a.segment.bytes, |m| m.len());
            self.kept_bytes += bytes;
            self.kept.push_back(Segment { bytes, ..a.segment });
        }
    }

    /// Removes the oldest segments until `need` more bytes fit; false where they cannot
    /// (the active segment alone is too large, or a segment cannot be removed).
    fn make_room(&mut self, need: u64) -> bool {
        let active = self.active.as_ref().map_or(0, |a| a.segment.bytes) + self.pending.len() as u64;
        while self.kept_bytes + active + need > self.limits.max_bytes {
            if self.kept.is_empty() || !self.remove_oldest() {
                return false;
            }
        }
        true
    }

    /// Removes the segments last written before the age limit (the active one too).
    fn expire(&mut self, now: SystemTime) {
        let max_age = self.limits.max_age;
        let old = move |s: &Segment| now.duration_since(s.modified).is_ok_and(|a| a > max_age);
        if self.active.as_ref().is_some_and(|a| old(&a.segment) && self.pending_events == 0) {
            self.close_active();
        }
        while self.kept.front().is_some_and(old) {
            if !self.remove_oldest() {
                return;
            }
        }
    }

    fn remove_oldest(&mut self) -> bool {
        let Some(oldest) = self.kept.front() else { return false };
        match fs::remove_file(&oldest.path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => {
                self.fault(&e);
                return false;
            }
        }
        if let Some(s) = self.kept.pop_front() {
            self.kept_bytes -= s.bytes;
            self.stats.removed += 1;
        }
        true
    }

    /// Says, once, that writing fails and why.
    fn fault(&mut self, e: &io::Error) {
        if self.failing.is_none() {
            let _ = crate::note!(
                "tfo-trace: warning: --flight-recorder {}: cannot write ({e}): events not written are counted \
                 (tfo_trace_flight_recorder_events_unwritten_total); /metrics and the counts go on",
                self.dir.display()
            );
            self.failing = Some(e.to_string());
        }
    }
}

/// Writes `buf` to `file` whole, or as much of it as the kernel takes: the bytes written,
/// and the error that stopped it (write(2) on a full disk first writes what fits, then
/// fails with ENOSPC).
fn write_what_fits(file: &mut File, buf: &[u8]) -> (usize, Option<io::Error>) {
    let mut done = 0;
    while done < buf.len() {
        match file.write(&buf[done..]) {
            Ok(0) => return (done, Some(io::ErrorKind::WriteZero.into())),
            Ok(k) => done += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return (done, Some(e)),
        }
    }
    (done, None)
}

/// How long ago `started_s` (seconds since the epoch) was at `now`.
fn age(started_s: i64, now: SystemTime) -> Duration {
    let now_s = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64);
    Duration::from_secs(now_s.saturating_sub(started_s).max(0) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::{record::read_recording, sample_event, Outcome, Role};

    fn tmp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("tfo-flight-w-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        d
    }

    fn events(n: u32) -> Vec<Event> {
        (0..n).map(|i| Event { sport: i as u16, ..sample_event(Role::Client, Outcome::Accepted) }).collect()
    }

    fn on_disk(dir: &Path) -> (u64, Vec<Event>) {
        let segs = super::super::segments(dir).unwrap();
        let bytes = segs.iter().map(|s| s.bytes).sum();
        let events = segs.iter().flat_map(|s| read_recording(&s.path).unwrap().1).collect();
        (bytes, events)
    }

    #[test]
    fn the_size_holds_at_every_line_and_the_newest_are_kept() {
        let d = tmp("size");
        let limits = Limits { max_bytes: Limits::MIN_BYTES, max_age: Limits::DEFAULT_AGE };
        let mut r = FlightRecorder::open(&d, limits).unwrap();
        r.set_backend("tracepoint");
        let all = events(2000);
        // One batch far over the limit: the bound holds inside it.
        r.record(&all[..1500]);
        let (bytes, kept) = on_disk(&d);
        assert!(bytes <= limits.max_bytes, "{bytes}");
        assert_eq!(kept.last(), all[..1500].last(), "the newest is kept");
        for chunk in all[1500..].chunks(7) {
            r.record(chunk);
            let (bytes, _) = on_disk(&d);
            assert!(bytes <= limits.max_bytes, "{bytes}");
        }
        let (bytes, kept) = on_disk(&d);
        let s = r.stats();
        assert_eq!((s.written, s.unwritten, s.bytes), (2000, 0, bytes));
        assert!(s.removed > 0 && s.segments <= 17, "{s:?}");
        assert_eq!(kept[..], all[2000 - kept.len()..], "a suffix of what came, in order");
        assert!(bytes > limits.max_bytes * 14 / 16, "{bytes}: nearly the whole size is used");
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_restart_keeps_what_was_there_and_a_smaller_size_is_applied() {
        let d = tmp("restart");
        let limits = Limits { max_bytes: 1 << 20, max_age: Limits::DEFAULT_AGE };
        let mut r = FlightRecorder::open(&d, limits).unwrap();
        r.record(&events(100));
        drop(r); // as a crash: no finish
        let mut r = FlightRecorder::open(&d, limits).unwrap();
        r.record(&events(50));
        r.finish();
        let segs = super::super::segments(&d).unwrap();
        assert_eq!(
            segs.iter().map(|s| s.seq).collect::<Vec<_>>(),
            vec![1, 2],
            "a new segment after a restart"
        );
        assert_eq!(on_disk(&d).1.len(), 150);
        let small = Limits { max_bytes: segs[1].bytes + 10, ..limits };
        let r = FlightRecorder::open(&d, small).unwrap();
        assert_eq!(r.stats().segments, 1, "the oldest removed to fit the smaller size");
        assert_eq!(on_disk(&d).1.len(), 50);
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn segments_past_the_age_go() {
        let d = tmp("age");
        let limits = Limits { max_bytes: 1 << 20, max_age: Duration::from_secs(160) };
        let mut r = FlightRecorder::open(&d, limits).unwrap();
        r.record(&events(10));
        let now = SystemTime::now();
        assert!(r.tick(now).is_some(), "written: to sync");
        assert!(r.tick(now).is_none(), "nothing new");
        // One share of the age (10 s) later the segment is closed; the next event opens
        // another.
        r.tick(now + Duration::from_secs(11));
        assert_eq!(r.stats().segments, 1);
        r.record(&events(1));
        assert_eq!(r.stats().segments, 2);
        // Past the age, both go.
        r.tick(now + Duration::from_secs(200));
        assert_eq!((r.stats().segments, r.stats().bytes), (0, 0));
        assert!(super::super::segments(&d).unwrap().is_empty());
        fs::remove_dir_all(&d).unwrap();
    }
}
