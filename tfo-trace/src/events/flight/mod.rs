//! The flight recorder's directory (`export --flight-recorder DIR`): one recording kept as
//! numbered segments, each a recording of its own (a header, then events: the format of
//! `--record`, `events::record`), the oldest removed first to keep within a size and an
//! age. The writer is [`writer::FlightRecorder`]; reading a directory back is a replay
//! like any other (`events::replay`: its segments in order, one recording).
//!
//! ```text
//! DIR/.tfo-trace-flight-recorder          the marker: this directory is a recorder's
//! DIR/0000000001-20261203T031200Z.jsonl   segment 1, started 03:12:00 UTC
//! DIR/0000000002-20261203T045012Z.jsonl   ...
//! ```
//!
//! The recorder runs privileged and removes files: it writes only where it is safe to, and
//! removes only what it made. A directory that is a symbolic link, belongs to another user,
//! is writable by others, or holds anything but the marker and segments is refused
//! ([`open_for_writing`]), as `--record` refuses a link.
pub(crate) mod writer;

use std::{
    fs,
    io::{self, Write as _},
    os::unix::fs::{DirBuilderExt as _, MetadataExt as _, OpenOptionsExt as _, PermissionsExt as _},
    path::{Path, PathBuf},
    time::SystemTime,
};

use anyhow::{Context as _, Result};

use super::record::UsageError;

/// The file that makes a directory a flight recorder's.
pub(crate) const MARKER: &str = ".tfo-trace-flight-recorder";
const MARKER_TEXT: &str = "tfo-trace flight recorder: every NNNNNNNNNN-YYYYMMDDTHHMMSSZ.jsonl here is one \
     segment of one recording, oldest first (`tfo-trace report --from` this directory)\n";
/// What a filesystem may hold at its root beside the recorder's files (a volume mounted
/// at DIR).
const LOST_FOUND: &str = "lost+found";

/// One segment on disk.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Segment {
    pub path: PathBuf,
    /// Its number: segments are read in this order.
    pub seq: u64,
    /// When it was started (from its name), seconds since the epoch.
    pub started_s: i64,
    /// Its length in bytes.
    pub bytes: u64,
    /// When it was last written: none of its events is later (an event is written after it
    /// happened).
    pub modified: SystemTime,
}

/// `0000000042-20261203T031200Z.jsonl`.
pub(crate) fn segment_name(seq: u64, started_s: i64) -> String {
    let start = jiff::Timestamp::from_second(started_s).unwrap_or(jiff::Timestamp::UNIX_EPOCH);
    format!("{seq:010}-{}.jsonl", start.strftime("%Y%m%dT%H%M%SZ"))
}

/// The number and start of a segment's file name, None for any other name.
fn parse_segment_name(name: &str) -> Option<(u64, i64)> {
    let stem = name.strip_suffix(".jsonl")?;
    let (seq, start) = stem.split_once('-')?;
    if seq.len() < 10 || !seq.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let civil = jiff::civil::DateTime::strptime("%Y%m%dT%H%M%SZ", start).ok()?;
    let started = jiff::tz::Offset::UTC.to_timestamp(civil).ok()?.as_second();
    Some((seq.parse().ok()?, started))
}

/// Whether `dir` is a flight recorder's directory (a directory holding the marker).
pub(crate) fn is_recorder_dir(dir: &Path) -> bool {
    dir.is_dir() && fs::symlink_metadata(dir.join(MARKER)).is_ok_and(|m| m.is_file())
}

/// The segments of a recorder's directory, oldest first; other names are passed over.
pub(crate) fn segments(dir: &Path) -> Result<Vec<Segment>> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir).with_context(|| format!("reading the folder {}", dir.display()))? {
        let entry = entry.with_context(|| format!("reading the folder {}", dir.display()))?;
        let name = entry.file_name();
        let Some((seq, started_s)) = name.to_str().and_then(parse_segment_name) else { continue };
        // Gone since listed: removed as the oldest.
        let Ok(meta) = entry.metadata() else { continue };
        if !meta.is_file() {
            continue;
        }
        out.push(Segment {
            path: entry.path(),
            seq,
            started_s,
            bytes: meta.len(),
            modified: meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
        });
    }
    out.sort_by_key(|s| s.seq);
    Ok(out)
}

/// What [`open_for_writing`] found: the segments a previous run left (kept, oldest first),
/// or why the directory cannot be written now (a fault the recorder counts and retries,
/// never a reason to stop the exporter).
pub(crate) enum Found {
    Usable(Vec<Segment>),
    Unwritable(io::Error),
}

/// Checks `dir` for the recorder before anything is traced, making it (mode 0700, its
/// parent must exist) and its marker where missing. A refusal is a [`UsageError`]: a
/// symbolic link, not a directory, another user's, writable by group or others, or
/// holding what is not the recorder's (so the recorder never removes a file it did not
/// make). A directory that cannot be made or written for want of space or permission is
/// [`Found::Unwritable`].
pub(crate) fn open_for_writing(dir: &Path) -> Result<Found> {
    let refused =
        |why: String| anyhow::Error::new(UsageError(format!("--flight-recorder {}: {why}", dir.display())));
    let meta = match fs::symlink_metadata(dir) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let parent = dir.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
            if !parent.is_dir() {
                return Err(refused(format!("its parent directory {} does not exist", parent.display())));
            }
            match fs::DirBuilder::new().mode(0o700).create(dir) {
                Ok(()) => fs::symlink_metadata(dir).with_context(|| format!("stat {}", dir.display()))?,
                Err(e) => return Ok(Found::Unwritable(e)),
            }
        }
        Err(e) => return Err(e).with_context(|| format!("--flight-recorder {}", dir.display())),
    };
    if meta.file_type().is_symlink() {
        return Err(refused(
            "is a symbolic link; refused (a recorder run as root must not write or remove files where a link points)"
                .into(),
        ));
    }
    if !meta.is_dir() {
        return Err(refused("is not a directory".into()));
    }
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    if meta.uid() != me {
        return Err(refused(format!(
            "belongs to uid {}, not to this process's uid {me}; refused (it would remove files in another user's directory)",
            meta.uid()
        )));
    }
    if meta.permissions().mode() & 0o022 != 0 {
        return Err(refused(format!(
            "is writable by {} (mode {:o}); refused (others could put files where the recorder writes and removes): chmod go-w",
            if meta.permissions().mode() & 0o020 != 0 { "its group" } else { "others" },
            meta.permissions().mode() & 0o777
        )));
    }
    let mut foreign = Vec::new();
    let mut marker = false;
    let mut any_segment = false;
    for entry in
        fs::read_dir(dir).with_context(|| format!("--flight-recorder {}: reading it", dir.display()))?
    {
        let entry = entry.with_context(|| format!("--flight-recorder {}: reading it", dir.display()))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let kind = entry.file_type().with_context(|| format!("stat {}", entry.path().display()))?;
        match name.as_str() {
            MARKER if kind.is_file() => marker = true,
            LOST_FOUND if kind.is_dir() => {}
            n if kind.is_file() && parse_segment_name(n).is_some() => any_segment = true,
            _ => foreign.push(name),
        }
    }
    if any_segment && !marker {
        foreign.push(format!("segments without the marker {MARKER}"));
    }
    if !foreign.is_empty() {
        foreign.sort();
        let more = foreign.len().saturating_sub(3);
        let mut named = foreign.into_iter().take(3).collect::<Vec<_>>().join(", ");
        if more > 0 {
            named.push_str(&format!(" and {more} more"));
        }
        return Err(refused(format!(
            "holds files that are not a flight recorder's ({named}); refused (the recorder removes old files): \
             give it an empty or new directory"
        )));
    }
    if !marker {
        let made = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(dir.join(MARKER))
            .and_then(|mut f| f.write_all(MARKER_TEXT.as_bytes()));
        if let Err(e) = made {
            return Ok(Found::Unwritable(e));
        }
    }
    Ok(Found::Usable(segments(dir)?))
}

/// Syncs `dir` itself, so that a file just made in it survives a power cut.
fn sync_dir(dir: &Path) -> io::Result<()> {
    fs::File::open(dir)?.sync_all()
}

/// Keeps the permissions a recorder's files must have (they name hosts, ports, processes).
fn private(file: &fs::File) -> io::Result<()> {
    file.set_permissions(fs::Permissions::from_mode(0o600))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("tfo-flight-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn segment_names_read_back() {
        let name = segment_name(42, 1_764_731_520);
        assert_eq!(name, "0000000042-20251203T031200Z.jsonl");
        assert_eq!(parse_segment_name(&name), Some((42, 1_764_731_520)));
        for other in [
            "42-20251203T031200Z.jsonl",
            "0000000042-20251203T031200Z.json",
            "x.jsonl",
            "0000000042-2025.jsonl",
        ] {
            assert_eq!(parse_segment_name(other), None, "{other}");
        }
    }

    #[test]
    fn a_new_directory_is_made_private_and_marked() {
        let d = tmp("new");
        let Found::Usable(segs) = open_for_writing(&d).unwrap() else { panic!("writable") };
        assert!(segs.is_empty());
        assert!(is_recorder_dir(&d));
        assert_eq!(fs::metadata(&d).unwrap().permissions().mode() & 0o777, 0o700);
        // Again: the marker is there, and a segment of a previous run is kept.
        fs::write(d.join(segment_name(3, 1_764_731_520)), "x\n").unwrap();
        let Found::Usable(segs) = open_for_writing(&d).unwrap() else { panic!("writable") };
        assert_eq!(segs.iter().map(|s| s.seq).collect::<Vec<_>>(), vec![3]);
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn links_foreign_files_and_open_directories_are_refused() {
        let d = tmp("refused");
        fs::create_dir_all(&d).unwrap();
        let refusal = |p: &Path| {
            let e = open_for_writing(p).err().expect("refused");
            assert!(e.is::<UsageError>(), "{e:#}");
            e.to_string()
        };
        let link = d.with_extension("link");
        let _ = fs::remove_file(&link);
        std::os::unix::fs::symlink(&d, &link).unwrap();
        assert!(refusal(&link).contains("is a symbolic link"));
        fs::write(d.join("notes.txt"), "mine").unwrap();
        let e = refusal(&d);
        assert!(e.contains("holds files that are not a flight recorder's (notes.txt)"), "{e}");
        assert_eq!(fs::read_to_string(d.join("notes.txt")).unwrap(), "mine", "left alone");
        fs::remove_file(d.join("notes.txt")).unwrap();
        fs::write(d.join(segment_name(1, 0)), "x\n").unwrap();
        assert!(refusal(&d).contains("segments without the marker"), "someone else's segments");
        fs::remove_file(d.join(segment_name(1, 0))).unwrap();
        fs::set_permissions(&d, fs::Permissions::from_mode(0o777)).unwrap();
        assert!(refusal(&d).contains("is writable by its group"));
        fs::set_permissions(&d, fs::Permissions::from_mode(0o703)).unwrap();
        assert!(refusal(&d).contains("is writable by others"));
        fs::set_permissions(&d, fs::Permissions::from_mode(0o700)).unwrap();
        assert!(matches!(open_for_writing(&d).unwrap(), Found::Usable(_)));
        let e = refusal(&d.join("no/such"));
        assert!(e.contains("parent directory") && e.contains("does not exist"), "{e}");
        let file = d.join(MARKER);
        assert!(refusal(&file).contains("is not a directory"));
        fs::remove_file(&link).unwrap();
        fs::remove_dir_all(&d).unwrap();
    }
}
