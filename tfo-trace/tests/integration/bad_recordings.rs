//! Recordings of every shape through the real CLI, `report --from FILE` and `top --from
//! FILE --batch`: bad lines are skipped and the replay reads on; exit 1 and one error line
//! counting them and naming the first few, never a panic; and what is shown is exactly
//! what the good lines alone give. Recordings joined (`cat a b`) are read whole, each
//! header starting a new segment (the same host) or a new source (another host).
//! The good lines are real ones, recorded from the lab (the fuzz seed corpus keeps them).
use crate::common;

use std::process::Command;

use common::TempFile;

const LAB_RECORDING: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../fuzz/seeds/recording/lab.jsonl");

/// The lab recording's lines, without their newlines: the header, then events.
fn lab_lines() -> Vec<Vec<u8>> {
    let text = std::fs::read(LAB_RECORDING).expect("the lab recording in fuzz/seeds");
    let lines: Vec<Vec<u8>> =
        text.split(|&b| b == b'\n').filter(|l| !l.is_empty()).map(<[u8]>::to_vec).collect();
    assert!(lines.len() >= 6, "the lab recording has a header and at least 5 events");
    lines
}

fn join(lines: &[Vec<u8>]) -> Vec<u8> {
    lines.iter().flat_map(|l| l.iter().copied().chain([b'\n'])).collect()
}

struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// `tfo-trace <args> FILE`, with the file's path replaced by `FILE` in what it printed, so
/// the output of two files can be compared.
fn run(args: &[&str], file: &TempFile) -> Run {
    let out = Command::new(common::exe()).args(args).arg(&file.0).output().expect("running tfo-trace");
    let text = |b: &[u8]| {
        let t = String::from_utf8_lossy(b).replace(file.path(), "FILE");
        // top's title line says when it was drawn: not part of what the file gives.
        t.lines()
            .map(|l| match l.strip_prefix("tfo-trace top ") {
                Some(rest) => format!("tfo-trace top TIME{}", &rest[rest.find(' ').unwrap_or(rest.len())..]),
                None => l.to_string(),
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    Run { code: out.status.code(), stdout: text(&out.stdout), stderr: text(&out.stderr) }
}

const COMMANDS: [&[&str]; 3] =
    [&["report", "--from"], &["report", "--format", "json", "--from"], &["top", "--batch", "--from"]];

/// The one error line of a failed run: exit 1, no panic, and (for `top`, which also
/// counts the events it replayed) exactly one line that is an error.
fn error_line(args: &[&str], r: &Run) -> String {
    assert_eq!(r.code, Some(1), "{args:?}: {}", r.stderr);
    assert!(!r.stderr.contains("panicked"), "{args:?}: {}", r.stderr);
    let errors: Vec<&str> = r.stderr.lines().filter(|l| l.starts_with("tfo-trace: error:")).collect();
    assert_eq!(errors.len(), 1, "{args:?}: one error line: {:?}", r.stderr);
    let others: Vec<&str> = r.stderr.lines().filter(|l| !l.starts_with("tfo-trace: error:")).collect();
    let allowed =
        |l: &&str| args[0] == "top" && l.starts_with("tfo-trace: ") && l.ends_with(" events from FILE");
    assert!(others.iter().all(allowed), "{args:?}: stderr beyond the error line: {others:?}");
    assert!(errors[0].len() < 400, "{args:?}: a {}-byte error line", errors[0].len());
    errors[0].to_string()
}

/// Good lines, then `bad` as line `good_events + 2`, then the other good lines: every
/// command shows what the good lines alone show, and names the bad line.
fn good_lines_then(name: &str, bad: &[u8], reason: &str) {
    good_lines_then_bad(name, bad, reason, true)
}

/// The good lines of the file as its own recording, and the file with `bad` inserted after
/// its fourth line (its third event); without `more_after` the file ends there.
fn with_bad_lines(name: &str, bad: &[u8], more_after: bool) -> (TempFile, TempFile) {
    let lines = lab_lines();
    let good_events = 3;
    let end = if more_after { lines.len() } else { good_events + 1 };
    let good = TempFile::new(&format!("{name}-good"));
    std::fs::write(&good.0, join(&lines[..end])).unwrap();
    let file = TempFile::new(name);
    let mut data = join(&lines[..=good_events]);
    data.extend_from_slice(bad);
    data.extend_from_slice(&join(&lines[good_events + 1..end]));
    std::fs::write(&file.0, data).unwrap();
    (good, file)
}

/// Every command on `file` shows what it shows on `good`, exits 1, and its error line
/// has each of `expected` in it; the JSON report carries that line and the count.
fn shows_the_good_lines(name: &str, good: &TempFile, file: &TempFile, bad_lines: u64, expected: &[String]) {
    for args in COMMANDS {
        let expected_run = run(args, good);
        assert_eq!(expected_run.code, Some(0), "{args:?} on the good lines: {}", expected_run.stderr);
        assert!(!expected_run.stdout.is_empty(), "{args:?} shows the good lines");
        let r = run(args, file);
        let err = error_line(args, &r);
        for e in expected {
            assert!(err.contains(e.as_str()), "{name}: {args:?}: {e:?} not in {err}");
        }
        let mut shown = r.stdout.clone();
        if args.contains(&"json") {
            // The JSON report also carries the error; the rest must be the good lines' report.
            let mut v: serde_json::Value = serde_json::from_str(&shown).unwrap();
            let replay_error = v["replay_error"].take();
            assert!(replay_error.as_str().is_some_and(|e| err.ends_with(e)), "{replay_error} vs {err}");
            // One error per recording in a merged report: here the one recording's.
            let replay_errors = v["replay_errors"].take();
            assert_eq!(replay_errors, serde_json::json!([replay_error]), "{name}: {args:?}");
            assert_eq!(v["source"]["bad_lines"].take(), bad_lines, "{name}: {args:?}");
            assert_eq!(v["sources"][0]["bad_lines"].take(), bad_lines, "{name}: {args:?}");
            shown = serde_json::to_string_pretty(&v).unwrap();
            let mut e: serde_json::Value = serde_json::from_str(&expected_run.stdout).unwrap();
            e["replay_error"].take();
            assert_eq!(e["replay_errors"].take(), serde_json::json!([]), "{name}: {args:?}: the good lines");
            assert_eq!(e["source"]["bad_lines"].take(), 0);
            e["sources"][0]["bad_lines"].take();
            assert_eq!(shown, serde_json::to_string_pretty(&e).unwrap(), "{name}: {args:?}");
        } else {
            assert_eq!(shown, expected_run.stdout, "{name}: {args:?}: the report of the good lines");
        }
    }
}

fn good_lines_then_bad(name: &str, bad: &[u8], reason: &str, more_after: bool) {
    let (good, file) = with_bad_lines(name, bad, more_after);
    let expected = ["FILE: 1 bad line skipped".to_string(), format!("line 5: {reason}")];
    shows_the_good_lines(name, &good, &file, 1, &expected);
}

/// Two junk lines after line 4: both skipped, counted and named, every good line after
/// them read (issue 31, item 6: the report stopped at the first).
fn junk_lines_are_skipped_and_the_rest_read() {
    let (good, file) = with_bad_lines("junk-2", b"junk\n{\"half\":\n", true);
    let expected =
        ["FILE: 2 bad lines skipped", "line 5: corrupt event", "line 6: corrupt event"].map(String::from);
    shows_the_good_lines("junk-2", &good, &file, 2, &expected);
    // Many: the first few named, the rest counted.
    let (good, file) = with_bad_lines("junk-9", "junk\n".repeat(9).as_bytes(), true);
    let expected = ["FILE: 9 bad lines skipped", "line 5: ", "line 7: ", "and 6 more"].map(String::from);
    shows_the_good_lines("junk-9", &good, &file, 9, &expected);
}

/// `cat a b`: two recordings in one file, read whole. Of one host, one source in two
/// segments, as if recorded in one go; of two hosts, two sources, the same report as
/// `--from a --from b`. The same recording twice in one file is named (its events count
/// twice).
fn joined_recordings_are_read_whole() {
    let lines = lab_lines();
    let header = |host: &str, start: &str| {
        let mut h: serde_json::Value = serde_json::from_slice(&lines[0]).unwrap();
        h["host"] = host.into();
        h["start"] = start.into();
        serde_json::to_vec(&h).unwrap()
    };
    let recording = |host: &str, start: &str| [&[header(host, start)][..], &lines[1..]].concat();
    let a = recording("web-1", "2026-11-30T22:40:40.000000000Z");
    let b_same = recording("web-1", "2026-11-30T23:00:00.000000000Z");
    let b_other = recording("web-2", "2026-11-30T23:00:00.000000000Z");
    let write = |name: &str, parts: &[&Vec<Vec<u8>>]| {
        let f = TempFile::new(name);
        std::fs::write(&f.0, parts.iter().map(|p| join(p)).collect::<Vec<Vec<u8>>>().concat()).unwrap();
        f
    };
    let report = |files: &[&TempFile]| -> (serde_json::Value, String) {
        let mut cmd = Command::new(common::exe());
        cmd.args(["report", "--format", "json"]);
        for f in files {
            cmd.arg("--from").arg(&f.0);
        }
        let out = cmd.output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(0), "{err}");
        (serde_json::from_slice(&out.stdout).unwrap(), err)
    };
    // One host: as one recording of both segments' events.
    let joined = write("joined-same", &[&a, &b_same]);
    let one_go = write("one-go", &[&[&a[..], &lines[1..]].concat()]);
    let (j, _) = report(&[&joined]);
    let (o, _) = report(&[&one_go]);
    assert_eq!(j["summary"], o["summary"], "one host, two segments");
    assert_eq!(j["destinations"], o["destinations"]);
    assert_eq!(j["source"]["segments"], 2, "{}", j["source"]);
    assert_eq!(j["sources"].as_array().unwrap().len(), 1);
    assert_eq!(j["source"]["events"], 2 * (lines.len() - 1));
    // Two hosts: as two recordings.
    let joined = write("joined-other", &[&a, &b_other]);
    let (fa, fb) = (write("a", &[&a]), write("b", &[&b_other]));
    let (j, _) = report(&[&joined]);
    let (m, _) = report(&[&fa, &fb]);
    assert_eq!(j["summary"], m["summary"], "two hosts, a fleet");
    assert_eq!(j["destinations"], m["destinations"]);
    let hosts: Vec<&serde_json::Value> =
        j["sources"].as_array().unwrap().iter().map(|s| &s["host"]).collect();
    assert_eq!(hosts, ["web-1", "web-2"]);
    // The same recording twice: read, and said.
    let twice = write("twice", &[&a, &a]);
    let (_, err) = report(&[&twice]);
    assert!(err.contains("appears twice") && err.contains("web-1"), "{err}");
    let out = Command::new(common::exe())
        .args(["top", "--batch", "--json", "--from"])
        .arg(&joined.0)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let snap: serde_json::Value =
        serde_json::from_slice(out.stdout.split(|&c| c == b'\n').next().unwrap()).unwrap();
    assert_eq!(snap["events"], 2 * (lines.len() - 1), "top reads both");
}

/// A file that is bad from line 1: one error line, nothing shown.
fn bad_from_the_start(name: &str, data: &[u8], reason: &str) {
    let file = TempFile::new(name);
    std::fs::write(&file.0, data).unwrap();
    for args in COMMANDS {
        let r = run(args, &file);
        let err = error_line(args, &r);
        assert!(err.contains(&format!("FILE: line 1: {reason}")), "{name}: {args:?}: {err}");
        assert!(r.stdout.is_empty(), "{name}: {args:?}: nothing to show: {}", r.stdout);
    }
}

/// `{"ts":"aaaa…"}` with `n` bytes of filler in the time, the rest a real event.
fn event_with_huge_time(n: usize) -> Vec<u8> {
    let lines = lab_lines();
    let mut v: serde_json::Value = serde_json::from_slice(&lines[1]).unwrap();
    v["ts"] = "2".repeat(n).into();
    serde_json::to_vec(&v).unwrap()
}

fn garbage() {
    bad_from_the_start("garbage", b"hello, world\n\x01\x02\x03\n", "not a tfo-trace recording");
    good_lines_then("garbage-mid", b"hello, world\n", "corrupt event");
}

fn a_50_mb_line() {
    let filler = vec![b'x'; 50 << 20];
    bad_from_the_start("50mb-first", &[&filler[..], b"\n"].concat(), "line longer than");
    good_lines_then("50mb-mid", &[&filler[..], b"\n"].concat(), "line longer than");
    // Valid JSON with a 50 MB field is refused the same way, before it is parsed.
    good_lines_then(
        "50mb-time",
        &[event_with_huge_time(50 << 20), b"\n".to_vec()].concat(),
        "line longer than",
    );
}

fn a_future_format_version() {
    let lines = lab_lines();
    let mut header: serde_json::Value = serde_json::from_slice(&lines[0]).unwrap();
    header["tfo_trace_recording"] = 2.into();
    let mut data = serde_json::to_vec(&header).unwrap();
    data.push(b'\n');
    data.extend_from_slice(&join(&lines[1..]));
    bad_from_the_start("future", &data, "recording format 2, this tfo-trace reads format 1");
}

fn an_empty_file() {
    bad_from_the_start("empty", b"", "empty file");
    bad_from_the_start("blank", b"\n\n", "not a tfo-trace recording");
}

fn json_of_the_wrong_shape() {
    let lines = lab_lines();
    for (i, bad) in [&b"[1,2,3]"[..], b"null", b"\"tfo\"", b"{\"ts\":5}", b"{}"].iter().enumerate() {
        good_lines_then(&format!("shape-{i}"), &[bad, &b"\n"[..]].concat(), "corrupt event");
    }
    // An event whose field has the wrong type, and one with an unknown outcome whose name
    // holds a newline: the error stays on one line.
    let mut v: serde_json::Value = serde_json::from_slice(&lines[1]).unwrap();
    v["sport"] = "eighty".into();
    good_lines_then(
        "shape-type",
        &[serde_json::to_vec(&v).unwrap(), b"\n".to_vec()].concat(),
        "corrupt event",
    );
    v = serde_json::from_slice(&lines[1]).unwrap();
    v["outcome"] = "accepted\nline 2 looks fine".into();
    good_lines_then(
        "shape-variant",
        &[serde_json::to_vec(&v).unwrap(), b"\n".to_vec()].concat(),
        "corrupt event",
    );
    for (i, header) in
        [&b"[1]"[..], b"{\"tfo_trace_recording\":\"1\"}", b"{\"tfo_trace_recording\":1}"].iter().enumerate()
    {
        let data = [header, &b"\n"[..], &join(&lines[1..])].concat();
        bad_from_the_start(&format!("shape-header-{i}"), &data, "");
    }
}

fn a_truncated_last_line() {
    let next = &lab_lines()[5];
    good_lines_then_bad("truncated", &next[..next.len() / 2], "truncated", false);
}

fn nul_bytes() {
    bad_from_the_start("nul-file", &[0u8; 4096], "not a tfo-trace recording");
    good_lines_then("nul-line", b"\0\0\0\0\n", "corrupt event");
    let mut line = lab_lines()[1].clone();
    let mid = line.len() / 2;
    line[mid] = 0;
    line.push(b'\n');
    good_lines_then("nul-inside", &line, "corrupt event");
}

fn invalid_utf8() {
    bad_from_the_start(
        "utf8-header",
        b"{\"tfo_trace_recording\":1,\"host\":\"\xff\xfe\"}\n",
        "not a tfo-trace recording",
    );
    let mut line = lab_lines()[1].clone();
    let at = line.windows(8).position(|w| w == b"\"comm\":\"").expect("a comm field") + 8;
    line[at] = 0xff;
    line.push(b'\n');
    good_lines_then("utf8-comm", &line, "not UTF-8");
}

/// Well-formed events with every number at its largest and times at the calendar's ends:
/// not what a kernel gives, but a file may say anything. Shown, not a panic.
fn extreme_values() {
    let lines = lab_lines();
    let mut data = join(&lines[..1]);
    for (i, line) in lines[1..].iter().enumerate() {
        let mut v: serde_json::Value = serde_json::from_slice(line).unwrap();
        for key in ["stall_us", "handshake_us"] {
            v[key] = u64::MAX.into();
        }
        for key in ["retransmits", "syn_data_bytes", "queue_len", "queue_max", "pid", "netns"] {
            v[key] = u32::MAX.into();
        }
        v["cookie_len"] = u8::MAX.into();
        v["ts"] = ["1970-01-01T00:00:00Z", "9999-12-31T23:59:60.999999999Z"][i % 2].into();
        for _ in 0..3 {
            data.extend_from_slice(&serde_json::to_vec(&v).unwrap());
            data.push(b'\n');
        }
    }
    let file = TempFile::new("extreme");
    std::fs::write(&file.0, data).unwrap();
    for args in COMMANDS {
        let r = run(args, &file);
        assert_eq!(r.code, Some(0), "{args:?}: {}", r.stderr);
        assert!(!r.stdout.is_empty(), "{args:?}");
    }
}

/// A flight recorder's directory after crashes: a segment whose last line was cut short,
/// one holding only part of its header (made as the crash came). Those are what a
/// `kill -9` or a power cut leaves: skipped, counted and said in a note, exit 0, every
/// whole line read, in `report`, `stalls`, `trace` and `top` alike. The same cut line in a
/// file (`--record`) stays a bad line (exit 1), and a corrupt line in the middle of a
/// segment is one too, named with its segment.
fn a_flight_recorders_torn_segments_are_notes_not_errors() {
    let lines = lab_lines();
    let dir = common::TempDir::new("torn-recorder");
    std::fs::write(dir.0.join(".tfo-trace-flight-recorder"), "tfo-trace flight recorder\n").unwrap();
    let segment = |n: u32| dir.0.join(format!("{n:010}-20261130T22404{n}Z.jsonl"));
    let second_header = String::from_utf8(lines[0].clone()).unwrap().replace("22:40:40.", "22:41:40.");
    let third_header = String::from_utf8(lines[0].clone()).unwrap().replace("22:40:40.", "22:42:40.");
    let cut = &lines[4][..lines[4].len() / 2];
    std::fs::write(segment(1), [join(&lines[..4]), cut.to_vec()].concat()).unwrap();
    std::fs::write(segment(2), &second_header.as_bytes()[..40]).unwrap();
    std::fs::write(segment(3), [third_header.as_bytes(), b"\n", &join(&lines[4..6])].concat()).unwrap();
    let whole_events = 3 + 2;
    let run_dir = |args: &[&str]| Command::new(common::exe()).args(args).arg(&dir.0).output().unwrap();

    let out = run_dir(&["report", "--format", "json", "--from"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["source"]["kind"], "flight_recorder");
    assert_eq!(r["source"]["events"], whole_events, "{r:#}");
    assert_eq!((r["source"]["torn_lines"].as_u64(), r["source"]["bad_lines"].as_u64()), (Some(2), Some(0)));
    assert_eq!(r["source"]["segments"], 2, "the two with a header");
    let notes: Vec<&str> = stderr.lines().collect();
    assert_eq!(notes.len(), 1, "{stderr}");
    assert!(notes[0].contains("2 torn last lines skipped") && notes[0].contains("kill -9"), "{stderr}");
    for args in [&["stalls", "--from"][..], &["trace", "--json", "--from"], &["top", "--batch", "--from"]] {
        let out = run_dir(args);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    let traced = run_dir(&["trace", "--json", "--from"]);
    assert_eq!(String::from_utf8_lossy(&traced.stdout).lines().count(), whole_events);

    // The same cut line in a file: a bad line, as ever.
    let file = TempFile::new("torn-file");
    std::fs::copy(segment(1), &file.0).unwrap();
    let r = run(&["report", "--from"], &file);
    assert!(error_line(&["report"], &r).contains("line 5: truncated"), "{}", r.stderr);

    // A corrupt line in the middle of a segment: an error naming the segment.
    std::fs::write(segment(3), [third_header.as_bytes(), b"\n{\"ts\": 7}\n", &join(&lines[4..6])].concat())
        .unwrap();
    let out = run_dir(&["report", "--from"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains(&format!("{}: 1 bad line skipped", segment(3).display())), "{stderr}");
}

module_tests!(
    a_flight_recorders_torn_segments_are_notes_not_errors,
    junk_lines_are_skipped_and_the_rest_read,
    joined_recordings_are_read_whole,
    garbage,
    a_50_mb_line,
    a_future_format_version,
    an_empty_file,
    json_of_the_wrong_shape,
    a_truncated_last_line,
    nul_bytes,
    invalid_utf8,
    extreme_values,
);
