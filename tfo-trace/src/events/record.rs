//! Recordings: `--record FILE` writes JSON lines, `report --from FILE` reads them back.
//!
//! The format, version 1:
//!
//! ```text
//! {"tfo_trace_recording":1,"host":"web-1","kernel":"6.18.44","backend":"tracepoint","start":"2026-11-30T08:14:42.549000000Z","version":"0.1.0"}
//! {"ts":"2026-11-30T08:14:42.549123456Z","role":"client","outcome":"accepted",...}
//! ```
//!
//! The first line is the [`Header`]; every following line is one [`Event`] in the JSON of
//! `trace --json`. The file is created mode 0600 (it names hosts, ports and processes) and
//! flushed after every batch, so a crash loses at most the batch being written. Reading
//! skips a bad line and reads on ([`BadLines`] counts them and keeps the first few); a
//! header after line 1 (recordings joined with `cat a b`) starts a new segment.
use std::{
    fs::{File, OpenOptions},
    io::{self, BufRead, BufReader, Write},
    os::unix::fs::{OpenOptionsExt, PermissionsExt},
    path::{Path, PathBuf},
};

use anyhow::{bail, Context as _, Result};
use serde::{Deserialize, Serialize};

use super::Event;

/// The value of `tfo_trace_recording` this build writes and reads.
pub const FORMAT_VERSION: u32 = 1;

/// A recording's lines are short (an event is under 1 KiB); a longer one is corrupt, and
/// is refused after this many bytes rather than read into memory whole.
pub const MAX_LINE_BYTES: usize = 64 * 1024;

/// The first line of a recording.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Header {
    /// Format version ([`FORMAT_VERSION`]).
    pub tfo_trace_recording: u32,
    /// Host name (uname nodename) where it was recorded. Empty in a recording that has
    /// none: `report` then names the host after the file.
    #[serde(default)]
    pub host: String,
    /// Kernel release where it was recorded.
    pub kernel: String,
    /// The backend that produced the events: what it could not see is not in the file.
    pub backend: String,
    /// RFC 3339 time the recording started.
    pub start: String,
    /// tfo-trace version that wrote it.
    pub version: String,
}

impl Header {
    /// A header for a recording starting now on this host.
    pub fn now(backend: &str) -> Header {
        let u = crate::kernel::uname::uname().unwrap_or_default();
        let (host, kernel) = (u.nodename, u.release);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        Header {
            tfo_trace_recording: FORMAT_VERSION,
            host,
            kernel,
            backend: backend.to_string(),
            start: super::rfc3339(now),
            version: env!("CARGO_PKG_VERSION").to_string(),
        }
    }
}

/// Where `--record` writes, and whether an existing file may be replaced (`--force`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordTo {
    pub path: PathBuf,
    pub replace: bool,
}

/// A usage error about recordings, the user's to fix (exit 2): why `--record` refused its
/// file, or a replay's `--netns` name that no recorded event carries.
#[derive(Debug)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// Writes a recording: each [`Recorder::write_batch`] is one write(2) of whole lines. Where
/// one fails (a full disk), the file is cut back to the last whole line and recording stops
/// there: tracing goes on, and the recorder counts what the file lacks ([`Recorder::lacks`]).
pub struct Recorder {
    out: File,
    /// A batch's lines, made before the one write.
    buf: Vec<u8>,
    path: PathBuf,
    /// This recorder made the file (removed again by [`Recorder::discard`]).
    created: bool,
    /// Events written so far.
    pub events: u64,
    /// Bytes of whole lines in the file.
    written: u64,
    /// Why writing stopped, once it did.
    failed: Option<String>,
    /// Events delivered since (the failed batch's included): not in the recording.
    lacks: u64,
}

/// Writing a recording failed: recording stopped there, tracing goes on.
#[derive(Debug)]
pub struct RecordingStopped {
    pub path: PathBuf,
    pub why: String,
}

impl std::fmt::Display for RecordingStopped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "writing to the recording {}: {}", self.path.display(), self.why)
    }
}

impl std::error::Error for RecordingStopped {}

impl Recorder {
    /// Creates (or truncates) `path` with mode 0600 and writes the header line.
    pub fn create(path: &Path, header: &Header) -> Result<Recorder> {
        let mut r = Recorder::open(&RecordTo { path: path.to_path_buf(), replace: true })?;
        r.write_header(header)?;
        Ok(r)
    }

    /// Opens `to.path` for a recording, before anything is traced (the header follows
    /// with [`Recorder::write_header`] once the backend is known). A tracer runs as root
    /// and recordings go under /tmp: the last component is never followed if it is a
    /// symbolic link (O_NOFOLLOW), and an existing file is replaced only with
    /// `to.replace`. A FIFO or a terminal (`/dev/stdout`, a link to one included) is written
    /// as it is, never truncated.
    pub fn open(to: &RecordTo) -> Result<Recorder> {
        let path = to.path.as_path();
        let refused =
            |why: String| anyhow::Error::new(UsageError(format!("--record {}: {why}", path.display())));
        let new = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path);
        let (file, created) = match new {
            Ok(f) => (f, true),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => (Self::open_existing(to, &refused)?, false),
            Err(e) => return Err(e).with_context(|| format!("creating the recording {}", path.display())),
        };
        Ok(Recorder {
            out: file,
            buf: Vec::new(),
            path: path.to_path_buf(),
            created,
            events: 0,
            written: 0,
            failed: None,
            lacks: 0,
        })
    }

    /// What is already at `to.path`: a FIFO or character device (directly, or by a link,
    /// as /dev/stdout is one) is written as it is; a regular file only with `to.replace`;
    /// a link to anything else never.
    fn open_existing(to: &RecordTo, refused: &dyn Fn(String) -> anyhow::Error) -> Result<File> {
        use std::os::unix::fs::FileTypeExt as _;
        let path = to.path.as_path();
        let stream = |t: std::fs::FileType| t.is_fifo() || t.is_char_device();
        let link = std::fs::symlink_metadata(path).with_context(|| format!("stat {}", path.display()))?;
        if link.file_type().is_symlink() {
            if !std::fs::metadata(path).is_ok_and(|m| stream(m.file_type())) {
                return Err(refused(
                    "is a symbolic link; refused (a tracer run as root must not write where a link points)"
                        .into(),
                ));
            }
            // Opened without O_CREAT or O_TRUNC: a link switched meanwhile to a file cannot
            // harm it, and is caught by the check of what was opened.
            let file = OpenOptions::new()
                .write(true)
                .open(path)
                .with_context(|| format!("opening {}", path.display()))?;
            let opened = file.metadata().with_context(|| format!("stat {}", path.display()))?;
            if !stream(opened.file_type()) {
                return Err(refused("changed into a link to a file while opened; refused".into()));
            }
            return Ok(file);
        }
        if stream(link.file_type()) {
            return OpenOptions::new()
                .write(true)
                .custom_flags(libc::O_NOFOLLOW)
                .open(path)
                .with_context(|| format!("opening {}", path.display()));
        }
        if !link.is_file() {
            return Err(refused("is not a file".into()));
        }
        if !to.replace {
            return Err(refused("the file exists; --force replaces it".into()));
        }
        let file = OpenOptions::new()
            .write(true)
            .truncate(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path)
            .with_context(|| format!("replacing the recording {}", path.display()))?;
        // `mode` applies only to a file open() creates: a replaced one keeps its old
        // permissions unless we set them (it names hosts, ports and processes).
        file.set_permissions(std::fs::Permissions::from_mode(0o600))
            .with_context(|| format!("chmod 0600 {}", path.display()))?;
        Ok(file)
    }

    /// The header line, first in the file (a failure here is the command's: nothing was
    /// traced yet).
    pub fn write_header(&mut self, header: &Header) -> Result<()> {
        self.buf.clear();
        serde_json::to_writer(&mut self.buf, header)
            .map_err(io::Error::from)
            .and_then(|()| {
                self.buf.push(b'\n');
                self.out.write_all(&self.buf)
            })
            .with_context(|| format!("writing to the recording {}", self.path.display()))?;
        self.written += self.buf.len() as u64;
        Ok(())
    }

    /// Removes the file again if this recorder made it (nothing was traced into it).
    pub fn discard(self) {
        if self.created {
            let _ = std::fs::remove_file(&self.path);
        }
    }

    /// Appends one line per event, in one write. The write that fails (ENOSPC, EIO) is
    /// [`RecordingStopped`], once: the file is cut back to its last whole line, and this
    /// batch and every later one are counted as lacking ([`Recorder::lacks`]), not written.
    pub fn write_batch(&mut self, events: &[Event]) -> Result<(), RecordingStopped> {
        if self.failed.is_some() {
            self.lacks += events.len() as u64;
            return Ok(());
        }
        self.buf.clear();
        let written: io::Result<()> = (|| {
            for e in events {
                serde_json::to_writer(&mut self.buf, e)?;
                self.buf.push(b'\n');
            }
            self.out.write_all(&self.buf)
        })();
        match written {
            Ok(()) => {
                self.events += events.len() as u64;
                self.written += self.buf.len() as u64;
                Ok(())
            }
            Err(e) => {
                // What a replay reads must end with a whole line: the part of this batch
                // that made it goes (not possible on a FIFO, where nothing is kept anyway).
                let _ = self.out.set_len(self.written);
                let why = e.to_string();
                self.failed = Some(why.clone());
                self.lacks += events.len() as u64;
                Err(RecordingStopped { path: self.path.clone(), why })
            }
        }
    }

    /// Events delivered that the recording lacks: those since writing it failed.
    pub fn lacks(&self) -> u64 {
        self.lacks
    }

    /// Why writing the recording stopped, if it did.
    pub fn failed(&self) -> Option<&str> {
        self.failed.as_deref()
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// The recordings `--from` names: files as given (`true`: in a folder), a flight
/// recorder's directory as one recording, a folder's files (not hidden) and the recorders'
/// directories in it (a fleet's, gathered) by name. A file in a folder that is not a
/// recording is skipped with a note by the caller; one named on its own is an error.
pub fn recordings_named(from: &[PathBuf]) -> Result<Vec<(PathBuf, bool)>> {
    let mut out = Vec::new();
    for p in from {
        if super::flight::is_recorder_dir(p) {
            out.push((p.clone(), false));
        } else if p.is_dir() {
            let mut files: Vec<PathBuf> = std::fs::read_dir(p)
                .with_context(|| format!("reading the folder {}", p.display()))?
                .filter_map(|e| e.ok())
                .filter(|e| {
                    e.file_type().is_ok_and(|t| t.is_file()) || super::flight::is_recorder_dir(&e.path())
                })
                .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
                .map(|e| e.path())
                .collect();
            files.sort();
            if files.is_empty() {
                bail!("{}: no recordings in this folder", p.display());
            }
            out.extend(files.into_iter().map(|f| (f, true)));
        } else {
            out.push((p.clone(), false));
        }
    }
    Ok(out)
}

/// The first file named twice (the same file: by a second path, a link, or its folder),
/// as a usage error: its events would count twice.
pub fn given_twice(named: &[(PathBuf, bool)]) -> Option<String> {
    use std::os::unix::fs::MetadataExt as _;
    // A recorder's directory is its segments: one of them named too is named twice.
    let files: Vec<PathBuf> = named
        .iter()
        .flat_map(|(path, _)| match super::flight::is_recorder_dir(path) {
            true => super::flight::segments(path).unwrap_or_default().into_iter().map(|s| s.path).collect(),
            false => vec![path.clone()],
        })
        .collect();
    let mut seen: std::collections::HashMap<(u64, u64), &Path> = std::collections::HashMap::new();
    for path in &files {
        let Ok(m) = std::fs::metadata(path) else { continue };
        if let Some(first) = seen.insert((m.dev(), m.ino()), path) {
            let how = if first == path.as_path() {
                String::new()
            } else {
                format!(" (as {} and {})", first.display(), path.display())
            };
            return Some(format!(
                "the recording {} is given twice{how}: its events would count twice",
                path.display()
            ));
        }
    }
    None
}

/// A bad line of a recording: skipped, counted, and (the first few) named.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplayError {
    pub path: PathBuf,
    /// 1-based line number.
    pub line: usize,
    pub reason: String,
}

impl ReplayError {
    pub(crate) fn new(path: &Path, line: usize, reason: &str) -> Self {
        ReplayError { path: path.to_path_buf(), line, reason: one_line(reason) }
    }
}

/// The bad lines of one recording: how many were skipped, and the first
/// [`BadLines::NAMED`] of them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BadLines {
    pub count: u64,
    pub first: Vec<ReplayError>,
}

impl BadLines {
    /// Bad lines named in the error line; the others are counted.
    pub const NAMED: usize = 3;

    pub fn add(&mut self, bad: ReplayError) {
        self.count += 1;
        if self.first.len() < Self::NAMED {
            self.first.push(bad);
        }
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The error line: `FILE: 2 bad lines skipped, the other lines read: line 5: corrupt
    /// event: ...; line 6: ...` (None without bad lines).
    pub fn summary(&self) -> Option<String> {
        let first = self.first.first()?;
        // A flight recorder's bad lines may be in several of its segments: each named then.
        let one_file = self.first.iter().all(|b| b.path == first.path);
        let named: Vec<String> = self
            .first
            .iter()
            .map(|b| match one_file {
                true => format!("line {}: {}", b.line, b.reason),
                false => format!("{} line {}: {}", b.path.display(), b.line, b.reason),
            })
            .collect();
        let more = self.count.saturating_sub(self.first.len() as u64);
        let more = if more > 0 { format!("; and {more} more") } else { String::new() };
        let lines = if self.count == 1 { "line" } else { "lines" };
        Some(format!(
            "{}: {} bad {lines} skipped, the other lines read: {}{more}",
            first.path.display(),
            self.count,
            named.join("; ")
        ))
    }
}

/// The reason as one short line: it may quote the file (serde names an unknown outcome as
/// written, newlines and all), and it ends up in the one error line on stderr.
fn one_line(text: &str) -> String {
    const MAX_CHARS: usize = 300;
    let mut out = String::new();
    for (i, c) in text.chars().enumerate() {
        if i == MAX_CHARS {
            out.push_str("...");
            break;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// Reads one line into `buf` (cleared first), `\n` included when there is one, but never
/// more than [`MAX_LINE_BYTES`] + 1 bytes. `Ok(None)` at the end of the input,
/// `Ok(Some(false))` for a line longer than the limit (the rest of which is passed over,
/// unread, up to its newline).
fn read_line(reader: &mut impl BufRead, buf: &mut Vec<u8>) -> io::Result<Option<bool>> {
    buf.clear();
    let n = io::Read::take(&mut *reader, MAX_LINE_BYTES as u64 + 1).read_until(b'\n', buf)?;
    let fits = n <= MAX_LINE_BYTES || buf.last() == Some(&b'\n');
    if n > 0 && !fits {
        reader.skip_until(b'\n')?;
    }
    Ok((n > 0).then_some(fits))
}

fn too_long() -> String {
    format!("line longer than {} KiB: not a tfo-trace recording line (corrupt)", MAX_LINE_BYTES / 1024)
}

impl std::fmt::Display for ReplayError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: line {}: {}", self.path.display(), self.line, self.reason)
    }
}

impl std::error::Error for ReplayError {}

/// Reads a recording. `Err` when the file cannot be read or its header (line 1) is not a
/// recording this build understands; otherwise the first header, every event (of every
/// segment), and the bad lines skipped (a truncated last line, a corrupt line, a
/// non-UTF-8 line).
pub fn read_recording(path: &Path) -> Result<(Header, Vec<Event>, BadLines)> {
    let file = File::open(path).with_context(|| format!("opening the recording {}", path.display()))?;
    read_from(BufReader::new(file), path)
}

/// [`read_recording`] on any reader; `path` is only used in messages.
pub fn read_from(reader: impl BufRead, path: &Path) -> Result<(Header, Vec<Event>, BadLines)> {
    let (header, lines) = Events::start(reader, path)?;
    let mut events = Vec::new();
    let mut bad = BadLines::default();
    for line in lines {
        match line {
            Line::Event(e) => events.push(e),
            Line::Header(_) => {}
            Line::Bad(b) | Line::Torn(b) => bad.add(b),
        }
    }
    Ok((header, events, bad))
}

/// Every header of a recording (recordings joined with `cat a b` hold several), read
/// without decoding the events between them.
pub fn headers_in(path: &Path) -> Result<Vec<Header>> {
    let file = File::open(path).with_context(|| format!("opening the recording {}", path.display()))?;
    let mut reader = BufReader::new(file);
    let (mut buf, mut headers) = (Vec::new(), Vec::new());
    while let Some(fits) =
        read_line(&mut reader, &mut buf).with_context(|| format!("reading {}", path.display()))?
    {
        let text = if fits { std::str::from_utf8(&buf).unwrap_or("") } else { "" };
        if text.contains(HEADER_KEY) {
            headers.extend(parse_header(text.as_bytes()).ok());
        }
    }
    Ok(headers)
}

/// What a line of a recording holds.
#[derive(Clone, Debug, PartialEq)]
// Nearly every line is an event: boxing it would allocate once per event for the sake
// of the rare header.
#[allow(clippy::large_enum_variant)]
pub enum Line {
    Event(Event),
    /// A header after the first line: recordings joined (`cat a b`), a new segment.
    Header(Header),
    /// Not readable: skipped, and read on.
    Bad(ReplayError),
    /// The last line, cut short (no newline ends it, and it does not parse): what a crash or
    /// a power cut leaves where a line was being written. Skipped like a bad line; a flight
    /// recorder's segments expect it (`events::replay`).
    Torn(ReplayError),
}

/// The lines of a recording one at a time, so a replay of millions of events needs no
/// more memory than the tables it fills. A bad line is yielded as such and the reading
/// goes on (only a read error of the file itself ends it).
pub struct Events<R> {
    reader: R,
    path: PathBuf,
    line_no: usize,
    buf: Vec<u8>,
    done: bool,
}

impl Events<BufReader<File>> {
    pub fn open(path: &Path) -> Result<(Header, Self)> {
        let file = File::open(path).with_context(|| format!("opening the recording {}", path.display()))?;
        Events::start(BufReader::new(file), path)
    }
}

impl<R: BufRead> Events<R> {
    /// Reads and checks the header line; `path` is only used in messages.
    pub fn start(mut reader: R, path: &Path) -> Result<(Header, Self)> {
        let bad = |reason: String| ReplayError::new(path, 1, &reason);
        let mut buf = Vec::new();
        let line = read_line(&mut reader, &mut buf).with_context(|| format!("reading {}", path.display()))?;
        match line {
            None => bail!(bad("empty file: not a tfo-trace recording".into())),
            Some(false) => bail!(bad(too_long())),
            Some(true) => {}
        }
        let header = parse_header(&buf).map_err(bad)?;
        Ok((header, Events { reader, path: path.to_path_buf(), line_no: 1, buf, done: false }))
    }

    fn bad(&self, reason: String) -> Option<Line> {
        Some(Line::Bad(ReplayError::new(&self.path, self.line_no, &reason)))
    }
}

/// The key only a header has: a line with it that is no event is read as a header.
const HEADER_KEY: &str = "\"tfo_trace_recording\"";

impl<R: BufRead> Iterator for Events<R> {
    type Item = Line;

    fn next(&mut self) -> Option<Line> {
        while !self.done {
            self.line_no += 1;
            match read_line(&mut self.reader, &mut self.buf) {
                Ok(Some(true)) => {}
                Ok(Some(false)) => return self.bad(too_long()),
                Ok(None) => {
                    self.done = true;
                    return None;
                }
                Err(e) => {
                    self.done = true;
                    return self.bad(format!("read error: {e}"));
                }
            }
            let complete = self.buf.last() == Some(&b'\n');
            let text = match std::str::from_utf8(&self.buf) {
                Ok(t) if t.trim().is_empty() => continue,
                Ok(t) => t.trim(),
                Err(_) => return self.bad("not UTF-8 text: corrupt".into()),
            };
            return match parse_event(text) {
                Ok(e) => Some(Line::Event(e)),
                Err(_) if text.contains(HEADER_KEY) => match parse_header(text.as_bytes()) {
                    Ok(h) => Some(Line::Header(h)),
                    Err(reason) => self.bad(reason),
                },
                Err(reason) if complete => self.bad(format!("corrupt event: {reason}")),
                Err(reason) => Some(Line::Torn(ReplayError::new(
                    &self.path,
                    self.line_no,
                    &format!("truncated: the last line ends mid-record ({reason})"),
                ))),
            };
        }
        None
    }
}

fn parse_header(line: &[u8]) -> std::result::Result<Header, String> {
    let v: serde_json::Value = serde_json::from_slice(line)
        .map_err(|e| format!("not a tfo-trace recording (the header line is not JSON: {e})"))?;
    match v.get("tfo_trace_recording").and_then(|v| v.as_u64()) {
        None => return Err("not a tfo-trace recording (no `tfo_trace_recording` header)".into()),
        Some(n) if n != u64::from(FORMAT_VERSION) => {
            return Err(format!(
                "recording format {n}, this tfo-trace reads format {FORMAT_VERSION} (version {})",
                env!("CARGO_PKG_VERSION")
            ))
        }
        Some(_) => {}
    }
    serde_json::from_value(v).map_err(|e| format!("bad header: {e}"))
}

/// One recorded event; IPv4-mapped addresses, as a recording made before events were
/// decoded so holds them, as IPv4 ([`super::unmapped`]), and a refusal without its cause
/// (recorded before causes were kept) as `unknown`.
pub(crate) fn parse_event(text: &str) -> std::result::Result<Event, String> {
    let mut e: Event = serde_json::from_str(text).map_err(|e| e.to_string())?;
    (e.family, e.saddr, e.daddr) = super::unmapped(e.family, e.saddr, e.daddr);
    // A refusal recorded before causes were kept: its cause is unknown.
    if e.cause.is_none() && super::refused_data(e.role, e.outcome) {
        e.cause = Some(super::Cause::Unknown);
    }
    Ok(e)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::{rfc3339, time::parse_rfc3339, Outcome};

    /// Built from JSON, so fields other work adds to Event (as Options) need no edit here.
    fn ev(i: u32) -> Event {
        let ts_unix_ns = 1_764_490_482_549_000_000 + u128::from(i) * 1_000_000;
        let e: Event = serde_json::from_value(serde_json::json!({
            "ts": rfc3339(ts_unix_ns),
            "role": if i.is_multiple_of(2) { "client" } else { "server" },
            "outcome": Outcome::ALL[i as usize % Outcome::ALL.len()].name(),
            "family": if i.is_multiple_of(3) { 6 } else { 4 },
            "saddr": if i.is_multiple_of(3) { "fd00:7f0::1" } else { "198.18.0.1" },
            "sport": 40000 + i,
            "daddr": "198.18.0.3",
            "dport": 8080,
            "netns": 4026532177u32,
            "pid": 1225,
            "comm": "curl \"x\"",
            "syn_data_bytes": 64,
            "cookie_len": if i.is_multiple_of(2) { Some(8) } else { None },
            "cookie_issued": if i == 1 { Some(true) } else { None },
            "exp_option": false,
            "retransmits": i % 2,
            "handshake_us": if i != 3 { Some(1006) } else { None },
            "stall_us": 1_005_900,
        }))
        .unwrap();
        assert_eq!(e.ts.unix_ns(), ts_unix_ns);
        let accepted = e.outcome == Outcome::Accepted;
        // A refusal's cause as every reading gives it (unknown, where none was written).
        let cause = crate::events::refused_data(e.role, e.outcome).then_some(crate::events::Cause::NewCookie);
        Event { saved_us: accepted.then_some(512 + u64::from(i)), cause, ..e }
    }

    /// A refusal recorded before causes were kept reads as `unknown`; one written stays.
    #[test]
    fn a_refusal_without_its_cause_reads_as_unknown() {
        let refused = ev(2);
        assert_eq!(
            (refused.outcome, refused.cause),
            (Outcome::DataNotAcked, Some(crate::events::Cause::NewCookie))
        );
        let mut line = serde_json::to_value(&refused).unwrap();
        assert_eq!(parse_event(&line.to_string()).unwrap().cause, refused.cause);
        line.as_object_mut().unwrap().remove("cause");
        assert_eq!(parse_event(&line.to_string()).unwrap().cause, Some(crate::events::Cause::Unknown));
        assert_eq!(
            parse_event(&serde_json::to_string(&ev(1)).unwrap()).unwrap().cause,
            None,
            "not a refusal"
        );
    }

    /// Issue 30: a recording made before events carried `saved_us` replays it as unknown,
    /// never as a saving of 0; a 0 that was written stays a 0.
    #[test]
    fn saved_us_absent_from_an_old_line_is_unknown_not_zero() {
        let mut line = serde_json::to_value(ev(1)).unwrap();
        assert_eq!(line["saved_us"], 513, "written where known");
        line.as_object_mut().unwrap().remove("saved_us");
        let old: Event = serde_json::from_value(line.clone()).unwrap();
        assert_eq!(old.saved_us, None);
        line["saved_us"] = 0.into();
        let zero: Event = serde_json::from_value(line).unwrap();
        assert_eq!(zero.saved_us, Some(0));
    }

    fn tmp(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("tfo-record-{}-{name}", std::process::id()))
    }

    fn write_sample(path: &Path, n: u32) -> Vec<Event> {
        let events: Vec<Event> = (0..n).map(ev).collect();
        let mut r = Recorder::create(path, &Header::now("tracepoint")).unwrap();
        r.write_batch(&events[..n as usize / 2]).unwrap();
        r.write_batch(&events[n as usize / 2..]).unwrap();
        assert_eq!(r.events, u64::from(n));
        events
    }

    #[test]
    fn round_trip_and_mode() {
        let p = tmp("rt");
        std::fs::write(&p, "old contents\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        let events = write_sample(&p, 10);
        let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        let (h, back, err) = read_recording(&p).unwrap();
        std::fs::remove_file(&p).unwrap();
        assert_eq!(mode, 0o600, "an existing file is made 0600 too");
        assert!(err.is_empty());
        assert_eq!(h.tfo_trace_recording, 1);
        assert_eq!(h.backend, "tracepoint");
        assert!(parse_rfc3339(&h.start).is_some(), "{}", h.start);
        assert_eq!(back, events, "every field, the time to the ns included, survives");

        let fresh = tmp("fresh");
        write_sample(&fresh, 1);
        let mode = std::fs::metadata(&fresh).unwrap().permissions().mode() & 0o777;
        std::fs::remove_file(&fresh).unwrap();
        assert_eq!(mode, 0o600);
    }

    #[test]
    fn links_are_never_followed_and_files_replaced_only_when_asked() {
        let dir = tmp("links");
        std::fs::create_dir_all(&dir).unwrap();
        let target = dir.join("precious");
        std::fs::write(&target, "keep").unwrap();
        let link = dir.join("link.jsonl");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let to = |p: &Path, replace| RecordTo { path: p.to_path_buf(), replace };
        for replace in [false, true] {
            let e = Recorder::open(&to(&link, replace)).err().unwrap();
            assert!(e.is::<UsageError>() && e.to_string().contains("symbolic link"), "{e}");
        }
        let e = Recorder::open(&to(&target, false)).err().unwrap();
        assert!(e.to_string().ends_with("the file exists; --force replaces it"), "{e}");
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep");
        // A link to a terminal or a pipe, as /dev/stdout is, is written through.
        let null = dir.join("null.jsonl");
        std::os::unix::fs::symlink("/dev/null", &null).unwrap();
        let r = Recorder::open(&to(&null, false)).unwrap();
        assert!(!r.created);
        r.discard();
        assert!(Path::new("/dev/null").exists());
        let fresh = Recorder::open(&to(&dir.join("new.jsonl"), false)).unwrap();
        assert!(fresh.created);
        fresh.discard();
        assert!(!dir.join("new.jsonl").exists(), "discarded: made by it, removed by it");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn truncated_last_line_keeps_the_good_ones() {
        let p = tmp("trunc");
        write_sample(&p, 6);
        let full = std::fs::read(&p).unwrap();
        std::fs::write(&p, &full[..full.len() - 20]).unwrap(); // cut inside event 6 (line 7)
        let (_, back, err) = read_recording(&p).unwrap();
        std::fs::remove_file(&p).unwrap();
        assert_eq!(back.len(), 5);
        assert_eq!(err.count, 1, "truncation is reported");
        let err = &err.first[0];
        assert_eq!(err.line, 7);
        assert!(err.to_string().contains("line 7: truncated"), "{err}");
        assert!(!err.to_string().contains('\n'));
    }

    #[test]
    fn corrupt_middle_line_is_skipped_and_the_rest_read() {
        let p = tmp("corrupt");
        write_sample(&p, 6);
        let text = std::fs::read_to_string(&p).unwrap();
        let mut lines: Vec<String> = text.lines().map(String::from).collect();
        lines[3] = lines[3].replace("\"outcome\":", "\"outcome\":7,\"x\":"); // line 4
        std::fs::write(&p, lines.join("\n") + "\n").unwrap();
        let (_, back, err) = read_recording(&p).unwrap();
        std::fs::remove_file(&p).unwrap();
        assert_eq!(back.len(), 5, "lines 2, 3, 5, 6, 7");
        assert_eq!(err.count, 1);
        assert_eq!(err.first[0].line, 4);
        assert!(err.first[0].reason.starts_with("corrupt event"), "{err:?}");
        let summary = err.summary().unwrap();
        assert!(
            summary.contains(": 1 bad line skipped, the other lines read: line 4: corrupt event"),
            "{summary}"
        );
    }

    #[test]
    fn many_bad_lines_name_the_first_few_and_a_second_header_is_a_segment() {
        let h = serde_json::to_string(&Header::now("tracepoint")).unwrap();
        let good = serde_json::to_string(&ev(0)).unwrap();
        let data = format!("{h}\n{good}\n{}{h}\n{good}\n", "junk\n".repeat(5));
        let (_, events, bad) = read_from(data.as_bytes(), Path::new("r")).unwrap();
        assert_eq!(events.len(), 2, "the good line after the second header too");
        assert_eq!((bad.count, bad.first.len()), (5, BadLines::NAMED));
        let summary = bad.summary().unwrap();
        assert!(
            summary.starts_with("r: 5 bad lines skipped, the other lines read: line 3: corrupt"),
            "{summary}"
        );
        assert!(summary.contains("; line 5: ") && summary.ends_with("; and 2 more"), "{summary}");
        let (_, lines) = Events::start(data.as_bytes(), Path::new("r")).unwrap();
        assert_eq!(lines.filter(|l| matches!(l, Line::Header(_))).count(), 1);
        assert_eq!(BadLines::default().summary(), None);
    }

    #[test]
    fn bad_headers_are_errors() {
        let p = Path::new("x.jsonl");
        let e = read_from(&b""[..], p).unwrap_err().to_string();
        assert!(e.contains("line 1: empty file"), "{e}");
        let e = read_from(&b"{\"ts\":1}\n"[..], p).unwrap_err().to_string();
        assert!(e.contains("line 1: not a tfo-trace recording"), "{e}");
        let e = read_from(&b"{\"tfo_trace_recording\":2}\n"[..], p).unwrap_err().to_string();
        assert!(e.contains("recording format 2"), "{e}");
        let e = read_from(&b"\x00\x01garbage\n"[..], p).unwrap_err().to_string();
        assert!(e.contains("line 1"), "{e}");
        assert!(read_recording(Path::new("/nonexistent/rec.jsonl")).is_err());
    }

    #[test]
    fn invalid_utf8_and_bad_time() {
        let h = serde_json::to_string(&Header::now("tracepoint")).unwrap();
        let good = serde_json::to_string(&ev(0)).unwrap();
        let mut data = format!("{h}\n{good}\n").into_bytes();
        data.extend_from_slice(b"\xff\xfe\n");
        let (_, back, err) = read_from(&data[..], Path::new("r")).unwrap();
        assert_eq!(back.len(), 1);
        assert_eq!(err.first[0].line, 3);
        let bad_ts = good.replace("\"ts\":\"20", "\"ts\":\"x0");
        let data = format!("{h}\n{bad_ts}\n");
        let (_, back, err) = read_from(data.as_bytes(), Path::new("r")).unwrap();
        assert!(back.is_empty());
        assert!(err.first[0].reason.contains("bad time"));
    }

    #[test]
    fn long_lines_and_quoted_input_give_one_short_line() {
        let h = serde_json::to_string(&Header::now("tracepoint")).unwrap();
        let good = serde_json::to_string(&ev(0)).unwrap();
        let huge = format!("{h}\n{good}\n{}\n{good}\n", "x".repeat(MAX_LINE_BYTES + 1));
        let (_, back, err) = read_from(huge.as_bytes(), Path::new("r")).unwrap();
        assert_eq!(back.len(), 2, "the line before and the one after, read past the long one");
        assert_eq!(
            err.first[0].to_string(),
            "r: line 3: line longer than 64 KiB: not a tfo-trace recording line (corrupt)"
        );
        let at_limit = format!("{h}\n{}\n", " ".repeat(MAX_LINE_BYTES));
        assert!(
            read_from(at_limit.as_bytes(), Path::new("r")).unwrap().2.is_empty(),
            "a line of the limit is read"
        );
        let e = read_from(format!("{}\n", "y".repeat(MAX_LINE_BYTES + 1)).as_bytes(), Path::new("r"))
            .unwrap_err();
        assert!(e.to_string().contains("line 1: line longer than"), "{e}");

        // serde quotes an unknown outcome as written: its newline must not split the error.
        let odd = good.replace("\"outcome\":\"", "\"outcome\":\"x\\n");
        let (_, _, err) = read_from(format!("{h}\n{odd}\n").as_bytes(), Path::new("r")).unwrap();
        let err = err.summary().unwrap();
        assert!(err.contains("unknown variant `x\\n") && !err.contains('\n'), "{err}");
        let long = good.replace("\"outcome\":\"", &format!("\"outcome\":\"{}", "z".repeat(5000)));
        let (_, _, err) = read_from(format!("{h}\n{long}\n").as_bytes(), Path::new("r")).unwrap();
        assert!(err.first[0].reason.len() < 400);
    }
}
