//! `tfo-trace trace`: one line (or one JSON object) per TFO event, as it happens.
use std::{
    io::{self, Write},
    net::IpAddr,
    ops::ControlFlow,
};

use anyhow::{Context as _, Result};

use crate::{
    cli::LinesOptions,
    events::{Event, EventRef, Timestamp},
    live::session::Session,
};

/// Width of the SOURCE and DESTINATION columns: every IPv4 address:port fits
/// (`255.255.255.255:65535` is 21); a wider one (IPv6, or a destination with its name)
/// widens its column ([`TextLines`]).
const ADDR_WIDTH: usize = 22;

/// The widest a named destination widens its column to: a longer one is printed whole,
/// pushing the rest of its line right, rather than making every line that wide.
const MAX_DESTINATION_WIDTH: usize = 64;

/// The header line over a SOURCE column `source_width` wide and a DESTINATION column
/// `destination_width` wide.
pub fn header(source_width: usize, destination_width: usize) -> String {
    format!(
        "{:<24} {:<6} {:<18} {:<7} {:<16} {:<sw$} {:<dw$} {:<11} {:>4} {:>3} {:>9} {:>9} {:>9}  CONTAINER",
        "TIME",
        "ROLE",
        "OUTCOME",
        "PID",
        "COMM",
        "SOURCE",
        "DESTINATION",
        "NETNS",
        "DATA",
        "RTX",
        "HANDSHAKE",
        "STALL",
        "SAVED",
        sw = source_width,
        dw = destination_width
    )
}

/// `trace`'s text lines, in columns under their header. An address wider than its column
/// (a long IPv6 one, a destination with its name: `--names`) widens the column for the rest
/// of the run, and the header is printed again above the line that needed it: every column
/// stays under its title.
pub struct TextLines {
    source_width: usize,
    destination_width: usize,
    /// Where a named or IPv6 destination is measured before its line is written.
    scratch: Vec<u8>,
}

impl Default for TextLines {
    fn default() -> Self {
        TextLines { source_width: ADDR_WIDTH, destination_width: ADDR_WIDTH, scratch: Vec::new() }
    }
}

impl TextLines {
    pub fn header(&self) -> String {
        header(self.source_width, self.destination_width)
    }

    /// Appends `e`'s line (after the header again, if its addresses widen the columns).
    pub fn write(&mut self, buf: &mut Vec<u8>, ts: &Timestamp, e: &EventRef<'_>) {
        // An unnamed IPv4 address always fits: only the others are measured.
        let source = match e.saddr {
            IpAddr::V4(_) => 0,
            IpAddr::V6(_) => self.measure(e.saddr, e.sport, None),
        };
        let destination = match (e.daddr, e.dname) {
            (IpAddr::V4(_), None) => 0,
            (ip, name) => self.measure(ip, e.dport, name.map(|n| &**n)).min(MAX_DESTINATION_WIDTH),
        };
        if source > self.source_width || destination > self.destination_width {
            self.source_width = self.source_width.max(source);
            self.destination_width = self.destination_width.max(destination);
            buf.extend_from_slice(self.header().as_bytes());
            buf.push(b'\n');
        }
        write_text_line(buf, ts, e, self.source_width, self.destination_width);
    }

    /// Terminal columns of a destination (or, unnamed, any address) as the line prints it.
    fn measure(&mut self, ip: IpAddr, port: u16, name: Option<&str>) -> usize {
        self.scratch.clear();
        crate::units::write_destination(&mut self.scratch, ip, port, name, None);
        columns(std::str::from_utf8(&self.scratch).expect("an address and a str"))
    }
}

/// Appends one event's text line (with its newline) to `buf`, the event seen as
/// [`Event::view`] sees it and its time `ts`, its source and destination in columns
/// `source_width` and `destination_width` wide (a client's destination with its name where
/// it has one: [`crate::units::write_destination`]). `trace` prints every event of a busy
/// host: columns are padded and integers written by hand into one buffer per batch, because
/// core::fmt's padding and a String per field were most of its CPU; and the line is made
/// from the view of the ring-buffer record (no [`Event`] made and dropped per line).
pub fn write_text_line(
    buf: &mut Vec<u8>,
    ts: &Timestamp,
    e: &EventRef<'_>,
    source_width: usize,
    destination_width: usize,
) {
    let start = buf.len();
    let mut line = Columns { buf, start };
    line.left_time(ts, 24);
    line.left(e.role.name(), 6);
    line.left(e.outcome.name(), 18);
    line.left_int(e.pid, 7);
    line.left_process(e.comm, e.thread.map(|t| &**t), 16);
    line.left_destination(e.saddr, e.sport, None, source_width);
    line.left_destination(e.daddr, e.dport, e.dname.map(|n| &**n), destination_width);
    line.left_int(e.netns, 11);
    line.right_int(e.syn_data_bytes, 4);
    line.right_int(e.retransmits, 3);
    match e.handshake_us {
        Some(us) => line.right_duration(us, 9),
        None => line.right("-", 9),
    }
    line.right_duration(e.stall_us, 9);
    // The round trip an accepted SYN-data saved; `-` on other outcomes and where unknown.
    match e.saved_us {
        Some(us) => line.right_duration(us, 9),
        None => line.right("-", 9),
    }
    line.buf.extend_from_slice(b"  ");
    line.buf.extend_from_slice(e.container.unwrap_or("-").as_bytes());
    // A refused SYN-data says why, after the columns (every other line is unchanged).
    if let Some(cause) = e.cause {
        line.buf.extend_from_slice(b"  cause=");
        line.buf.extend_from_slice(cause.name().as_bytes());
    }
    // A failed connect says how it ended.
    if let Some(error) = e.error {
        line.buf.extend_from_slice(format!("  error={error}").as_bytes());
    }
    line.buf.push(b'\n');
}

/// Fixed-width columns of one line, separated by one space; a value wider than its column
/// pushes the rest right, as `{:<width$}` does.
struct Columns<'a> {
    buf: &'a mut Vec<u8>,
    start: usize,
}

impl Columns<'_> {
    fn separate(&mut self) {
        if self.buf.len() > self.start {
            self.buf.push(b' ');
        }
    }

    fn pad(&mut self, used: usize, width: usize) {
        self.buf.resize(self.buf.len() + width.saturating_sub(used), b' ');
    }

    fn left(&mut self, text: &str, width: usize) {
        self.separate();
        self.buf.extend_from_slice(text.as_bytes());
        self.pad(columns(text), width);
    }

    fn right(&mut self, text: &str, width: usize) {
        self.separate();
        self.pad(columns(text), width);
        self.buf.extend_from_slice(text.as_bytes());
    }

    /// Integers are ASCII: their width is their length.
    fn left_int(&mut self, n: impl itoa::Integer, width: usize) {
        self.separate();
        let mut digits = itoa::Buffer::new();
        let digits = digits.format(n);
        self.buf.extend_from_slice(digits.as_bytes());
        self.pad(digits.len(), width);
    }

    fn right_int(&mut self, n: impl itoa::Integer, width: usize) {
        self.separate();
        let mut digits = itoa::Buffer::new();
        let digits = digits.format(n);
        self.pad(digits.len(), width);
        self.buf.extend_from_slice(digits.as_bytes());
    }

    /// `2026-12-01 01:38:48.937`.
    fn left_time(&mut self, ts: &Timestamp, width: usize) {
        self.separate();
        let before = self.buf.len();
        ts.write_millis(self.buf);
        let used = self.buf.len() - before;
        self.pad(used, width);
    }

    /// The process's name, its thread's beside it ([`crate::units::write_process`], whole:
    /// a wider one pushes the rest right).
    fn left_process(&mut self, comm: &str, thread: Option<&str>, width: usize) {
        self.separate();
        let before = self.buf.len();
        crate::units::write_process(self.buf, comm, thread);
        let used = columns(std::str::from_utf8(&self.buf[before..]).unwrap_or(""));
        self.pad(used, width);
    }

    /// An address, or a destination with its name ([`crate::units::write_destination`],
    /// whole: a wider one pushes the rest right).
    fn left_destination(&mut self, ip: IpAddr, port: u16, name: Option<&str>, width: usize) {
        self.separate();
        let before = self.buf.len();
        crate::units::write_destination(self.buf, ip, port, name, None);
        let written = &self.buf[before..];
        let used = if written.is_ascii() {
            written.len()
        } else {
            columns(std::str::from_utf8(written).expect("an address and a str"))
        };
        self.pad(used, width);
    }

    /// A duration as every view prints one ([`crate::units::duration_us`]): `1.02s`.
    fn right_duration(&mut self, us: u64, width: usize) {
        self.separate();
        let text = crate::units::DurationText::of(us);
        self.pad(text.as_str().len(), width);
        self.buf.extend_from_slice(text.as_str().as_bytes());
    }
}

/// The terminal columns `text` takes ([`crate::units::width`]; bytes where ASCII, the
/// usual case): a CJK process name takes two per character.
fn columns(text: &str) -> usize {
    if text.is_ascii() {
        text.len()
    } else {
        crate::units::width(text)
    }
}

/// [`write_text_line`] as a String, without the newline.
pub fn text_line(e: &Event) -> String {
    let mut line = Vec::with_capacity(200);
    write_text_line(&mut line, &e.ts, &e.view(), ADDR_WIDTH, ADDR_WIDTH);
    line.pop();
    String::from_utf8(line).expect("every field is UTF-8")
}

/// Writes a batch of events as JSON lines, in one write (text lines are written from the
/// ring buffer's records, in [`run`]).
fn write_json_events(out: &mut impl Write, events: &[Event]) -> io::Result<()> {
    let mut buf = Vec::with_capacity(events.len() * 200);
    for e in events {
        serde_json::to_writer(&mut buf, e)?;
        buf.push(b'\n');
    }
    write_batch(out, &buf)
}

/// One batch's lines, in one write.
fn write_batch(out: &mut impl Write, lines: &[u8]) -> io::Result<()> {
    out.write_all(lines)?;
    out.flush()
}

/// `trace --from`: the recordings' events, as they would have been printed live.
fn run_from(from: &crate::cli::Replaying, json: bool) -> Result<()> {
    let mut stdout = io::BufWriter::with_capacity(64 * 1024, io::stdout().lock());
    let mut text = TextLines::default();
    if !json {
        crate::live::output::stdout_written(writeln!(stdout, "{}", text.header()))?;
    }
    let mut line = Vec::new();
    let replayed = crate::events::replay::replay_each(&from.paths, &from.filter, from.window, |e| {
        line.clear();
        if json {
            serde_json::to_writer(&mut line, e)?;
            line.push(b'\n');
        } else {
            text.write(&mut line, &e.ts, &e.view());
        }
        match stdout.write_all(&line) {
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(ControlFlow::Break(())),
            r => r.context("writing to stdout").map(ControlFlow::Continue),
        }
    })?;
    match stdout.flush() {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => return Ok(()),
        r => r.context("writing to stdout")?,
    }
    super::replayed::said(from, &replayed)
}

pub async fn run(opts: LinesOptions) -> Result<()> {
    let LinesOptions { live, json, from } = opts;
    if let Some(from) = &from {
        return run_from(from, json);
    }
    let mut session = Session::start(&live.load, live.record.as_ref())?;
    // One write per batch: the batch's lines go to stdout at once, which its line
    // buffering passes through whole (no syscall per line, no copy).
    let mut stdout = io::stdout().lock();
    // A reader that went away (`| head`) ends the trace, quietly.
    let flow = |written: io::Result<()>| match written {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(ControlFlow::Break(())),
        r => r.context("writing to stdout").map(ControlFlow::Continue),
    };
    if json {
        session.run(live.duration, |batch| flow(write_json_events(&mut stdout, batch))).await?;
    } else {
        let mut text = TextLines::default();
        crate::live::output::stdout_written(writeln!(stdout, "{}", text.header()))?;
        let mut lines = Vec::new();
        session
            .on_each_wakeup(live.duration, |session| {
                lines.clear();
                session.drain_each(|e| text.write(&mut lines, &Timestamp::from_unix_ns(e.unix_ns), &e))?;
                if lines.is_empty() {
                    return Ok(ControlFlow::Continue(()));
                }
                flow(write_batch(&mut stdout, &lines))
            })
            .await?;
    }
    session.say_closing(live.json_summary)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::{sample_event, Outcome, Role};

    /// The line as it was built before `write_text_line` (a String per field): the new
    /// writer must print exactly the same bytes.
    fn built_per_field(e: &Event) -> String {
        let millis = crate::units::duration_us;
        let ts = e.ts.to_string();
        let time = ts.get(..23).unwrap_or(&ts).replace('T', " ");
        format!(
            "{time:<24} {:<6} {:<18} {:<7} {:<16} {:<22} {:<22} {:<11} {:>4} {:>3} {:>9} {:>9} {:>9}  {}",
            e.role.name(),
            e.outcome.name(),
            e.pid,
            crate::units::process(&e.comm, e.thread.as_deref()),
            e.source(),
            match &e.dname {
                Some(name) => format!("{name} ({})", e.destination()),
                None => e.destination(),
            },
            e.netns,
            e.syn_data_bytes,
            e.retransmits,
            e.handshake_us.map(millis).unwrap_or_else(|| "-".into()),
            millis(e.stall_us),
            e.saved_us.map(millis).unwrap_or_else(|| "-".into()),
            e.container_name().unwrap_or_else(|| "-".into()),
        ) + &e.cause.map(|c| format!("  cause={}", c.name())).unwrap_or_default()
            + &e.error.map(|x| format!("  error={x}")).unwrap_or_default()
    }

    /// `events` as `trace` prints them: the header, then their lines through [`TextLines`].
    fn lines_of(events: &[Event]) -> String {
        let mut lines = TextLines::default();
        let mut out = Vec::new();
        out.extend_from_slice(lines.header().as_bytes());
        out.push(b'\n');
        for e in events {
            lines.write(&mut out, &e.ts, &e.view());
        }
        String::from_utf8(out).unwrap()
    }

    /// Long IPv6 addresses (issue 31, item 12): every column of every line starts where
    /// its title does in the header line printed above it.
    #[test]
    fn long_addresses_keep_the_columns_under_their_titles() {
        let long = |s: &str| -> IpAddr { s.parse().unwrap() };
        let events = [
            sample_event(Role::Client, Outcome::Accepted),
            Event {
                saddr: long("fd00:7f0:1234:5678:9abc:def0:1234:5678"),
                daddr: long("fd00:7f0:1234:5678:9abc:def0:1234:9999"),
                sport: 65535,
                ..sample_event(Role::Client, Outcome::Accepted)
            },
            sample_event(Role::Server, Outcome::Accepted),
        ];
        let text = lines_of(&events);
        let mut header = "";
        for l in text.lines() {
            if l.starts_with("TIME") {
                header = l;
                continue;
            }
            for title in ["DESTINATION", "NETNS", "DATA", "CONTAINER"] {
                let at = header.find(title).unwrap();
                let before = l.as_bytes()[at - 1];
                assert_eq!(before, b' ', "{title} column of {l:?} under {header:?}");
            }
            let at = header.find("NETNS").unwrap();
            assert!(l[at..].starts_with("1 "), "{title}: {l:?} under {header:?}", title = "NETNS");
        }
        assert_eq!(
            text.lines().filter(|l| l.starts_with("TIME")).count(),
            2,
            "the header again, wider: {text}"
        );
    }

    #[test]
    fn the_header_of_the_usual_width_is_unchanged() {
        assert_eq!(
            header(ADDR_WIDTH, ADDR_WIDTH),
            "TIME                     ROLE   OUTCOME            PID     COMM             SOURCE                 \
             DESTINATION            NETNS       DATA RTX HANDSHAKE     STALL     SAVED  CONTAINER"
        );
    }

    #[test]
    fn lines_are_unchanged_by_writing_by_hand() {
        let v6 = |s: &str| s.parse().unwrap();
        let ts = |s: &str| Timestamp::parse(s).unwrap();
        let events = [
            Event {
                ts: ts("2026-12-01T01:38:48.937123456Z"),
                saved_us: Some(731),
                ..sample_event(Role::Client, Outcome::Accepted)
            },
            Event {
                ts: ts("2026-12-01T01:38:49.967000000Z"),
                handshake_us: Some(1_019_650),
                stall_us: 123_456_789_012,
                retransmits: 3,
                container_id: Some("4f1e6d9a0c2b3a4d5e6f708192a3b4c5".into()),
                ..sample_event(Role::Client, Outcome::SynRetransmitted)
            },
            Event {
                // Shorter than to the millisecond (a recording may say so).
                ts: ts("2026-12-01T01:38:49.5Z"),
                handshake_us: None,
                comm: "".into(),
                pid: u32::MAX,
                netns: u32::MAX,
                syn_data_bytes: 123_456,
                stall_us: 49,
                saddr: v6("fd00:7f0::2"),
                daddr: v6("fd00:7f0:1234:5678:9abc:def0:1234:5678"),
                container_runtime: Some("tfo-server.service".into()),
                ..sample_event(Role::Server, Outcome::QueueOverflow)
            },
            Event { cgroup: Some("/user.slice/a b".into()), ..sample_event(Role::Server, Outcome::Accepted) },
            // Named (`--names`): the name before the address, IPv4 and IPv6.
            Event { dname: Some("api.example.com".into()), ..sample_event(Role::Client, Outcome::Accepted) },
            Event {
                dname: Some("v6.example.com".into()),
                daddr: v6("fd00:7f0::2"),
                ..sample_event(Role::Client, Outcome::Accepted)
            },
        ];
        for e in &events {
            assert_eq!(text_line(e), built_per_field(e));
        }
    }

    /// `--names`: a client's destination is `name (address:port)`, whole on its line; its
    /// column widens for it (up to [`MAX_DESTINATION_WIDTH`]), the header again above it.
    #[test]
    fn named_destinations_print_whole_and_keep_the_columns_under_their_titles() {
        let client = sample_event(Role::Client, Outcome::Accepted);
        let long_name = format!("{}.example.com", "x".repeat(70));
        let events = [
            client.clone(),
            Event { dname: Some("api.example.com".into()), ..client.clone() },
            Event {
                dname: Some("v6.example".into()),
                daddr: "fd00:7f0::2".parse().unwrap(),
                dport: 443,
                ..client.clone()
            },
            client.clone(),
            Event { dname: Some(long_name.as_str().into()), ..client.clone() },
            sample_event(Role::Server, Outcome::Accepted),
        ];
        let text = lines_of(&events);
        let destinations: Vec<&str> = text
            .lines()
            .filter(|l| !l.starts_with("TIME"))
            .map(|l| l.split_whitespace().nth(7).unwrap())
            .collect();
        assert_eq!(
            destinations[..4],
            ["198.18.0.2:8080", "api.example.com", "v6.example", "198.18.0.2:8080"]
        );
        assert!(text.contains(" api.example.com (198.18.0.2:8080) "), "{text}");
        assert!(text.contains(" v6.example ([fd00:7f0::2]:443) "), "{text}");
        assert!(text.contains(&format!(" {long_name} (198.18.0.2:8080) ")), "whole: {text}");
        // The header again for each wider destination, up to the widest a column gets.
        let headers: Vec<&str> = text.lines().filter(|l| l.starts_with("TIME")).collect();
        assert_eq!(headers.len(), 3, "{text}");
        assert_eq!(headers[1], header(ADDR_WIDTH, "api.example.com (198.18.0.2:8080)".len()));
        assert_eq!(headers[2], header(ADDR_WIDTH, MAX_DESTINATION_WIDTH));
        let mut header = "";
        for l in text.lines() {
            if l.starts_with("TIME") {
                header = l;
                continue;
            }
            if l.contains(&long_name) {
                continue; // wider than any column: the rest of its line pushed right
            }
            for title in ["DESTINATION", "NETNS", "DATA", "CONTAINER"] {
                let at = header.find(title).unwrap();
                assert_eq!(l.as_bytes()[at - 1], b' ', "{title} column of {l:?} under {header:?}");
            }
            let at = header.find("NETNS").unwrap();
            assert!(l[at..].starts_with("1 "), "NETNS: {l:?} under {header:?}");
        }
    }

    /// `trace --json` is serde's `Event`: `dname` after `dport` where known, escaped as
    /// JSON escapes every string; absent where not.
    #[test]
    fn json_lines_carry_the_name_escaped() {
        let odd = "a\"b\\c\u{1b}d.example";
        let events = [
            Event { dname: Some(odd.into()), ..sample_event(Role::Client, Outcome::Accepted) },
            sample_event(Role::Client, Outcome::Accepted),
        ];
        let mut out = Vec::new();
        write_json_events(&mut out, &events).unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert!(
            lines[0]
                .contains(r#""daddr":"198.18.0.2","dport":8080,"dname":"a\"b\\c\u001bd.example","netns":1,"#),
            "{}",
            lines[0]
        );
        assert!(!lines[1].contains("dname"), "{}", lines[1]);
        let back: Vec<Event> = lines.iter().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(back, events);
    }
}
