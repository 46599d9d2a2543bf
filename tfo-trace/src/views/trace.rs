//! `tfo-trace trace`: one line (or one JSON object) per TFO event, as it happens.
use std::{
    io::{self, Write},
    net::IpAddr,
    ops::ControlFlow,
    time::Duration,
};

use anyhow::{Context as _, Result};

use crate::{
    events::{Event, EventRef, Timestamp},
    probes::LoadOptions,
    views::session::Session,
};

pub struct TraceOptions {
    pub load: LoadOptions,
    pub json: bool,
    /// The closing summary as one JSON object on stderr.
    pub json_summary: bool,
    /// Stop by itself after this long (scripts, tests); None = until Ctrl-C.
    pub duration: Option<Duration>,
    /// `--record FILE`: every event also goes there (see `events::record`).
    pub record: Option<crate::events::record::RecordTo>,
}

/// Width of the SOURCE and DESTINATION columns: every IPv4 address:port fits
/// (`255.255.255.255:65535` is 21); a wider (IPv6) one widens them ([`TextLines`]).
const ADDR_WIDTH: usize = 22;

/// The header line over columns of addresses `addr_width` wide.
pub fn header(addr_width: usize) -> String {
    format!(
        "{:<24} {:<6} {:<18} {:<7} {:<16} {:<w$} {:<w$} {:<11} {:>4} {:>3} {:>9} {:>9} {:>9}  CONTAINER",
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
        w = addr_width
    )
}

/// `trace`'s text lines, in columns under their header. An address wider than its column
/// (a long IPv6 one) widens the column for the rest of the run, and the header is printed
/// again above the line that needed it: every column stays under its title.
pub struct TextLines {
    addr_width: usize,
}

impl Default for TextLines {
    fn default() -> Self {
        TextLines { addr_width: ADDR_WIDTH }
    }
}

impl TextLines {
    pub fn header(&self) -> String {
        header(self.addr_width)
    }

    /// Appends `e`'s line (after the header again, if its addresses widen the columns).
    pub fn write(&mut self, buf: &mut Vec<u8>, ts: &Timestamp, e: &EventRef<'_>) {
        // IPv4 always fits: only an IPv6 address is measured.
        let width = |ip: IpAddr, port: u16| match ip {
            IpAddr::V4(_) => 0,
            IpAddr::V6(_) => std::net::SocketAddr::new(ip, port).to_string().len(),
        };
        let needed = width(e.saddr, e.sport).max(width(e.daddr, e.dport));
        if needed > self.addr_width {
            self.addr_width = needed;
            buf.extend_from_slice(self.header().as_bytes());
            buf.push(b'\n');
        }
        write_text_line(buf, ts, e, self.addr_width);
    }
}

/// Appends one event's text line (with its newline) to `buf`, the event seen as
/// [`Event::view`] sees it and its time `ts`, its addresses in columns `addr_width` wide.
/// `trace` prints every event of a busy host: columns are padded and integers written by
/// hand into one buffer per batch, because core::fmt's padding and a String per field were
/// most of its CPU; and the line is made from the view of the ring-buffer record (no
/// [`Event`] made and dropped per line).
pub fn write_text_line(buf: &mut Vec<u8>, ts: &Timestamp, e: &EventRef<'_>, addr_width: usize) {
    let start = buf.len();
    let mut line = Columns { buf, start };
    line.left_time(ts, 24);
    line.left(e.role.name(), 6);
    line.left(e.outcome.name(), 18);
    line.left_int(e.pid, 7);
    line.left(if e.comm.is_empty() { "-" } else { e.comm }, 16);
    line.left_addr(e.saddr, e.sport, addr_width);
    line.left_addr(e.daddr, e.dport, addr_width);
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
        self.pad(chars(text), width);
    }

    fn right(&mut self, text: &str, width: usize) {
        self.separate();
        self.pad(chars(text), width);
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

    /// `198.18.0.2:8080`, `[fd00::2]:8080`.
    fn left_addr(&mut self, ip: IpAddr, port: u16, width: usize) {
        self.separate();
        let before = self.buf.len();
        match ip {
            IpAddr::V4(v4) => {
                for (i, octet) in v4.octets().into_iter().enumerate() {
                    if i > 0 {
                        self.buf.push(b'.');
                    }
                    push_octet(self.buf, octet);
                }
            }
            // Rare on the hot path: std's formatting (the :: compression) is worth its cost.
            IpAddr::V6(v6) => write!(self.buf, "[{v6}]").expect("writing to a Vec"),
        }
        self.buf.push(b':');
        self.buf.extend_from_slice(itoa::Buffer::new().format(port).as_bytes());
        let used = self.buf.len() - before;
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

/// One IPv4 octet in decimal, without itoa's buffer for one to three digits.
fn push_octet(buf: &mut Vec<u8>, octet: u8) {
    if octet >= 100 {
        buf.push(b'0' + octet / 100);
    }
    if octet >= 10 {
        buf.push(b'0' + octet / 10 % 10);
    }
    buf.push(b'0' + octet % 10);
}

/// Characters in `text`, as `{:<width$}` counts them (bytes where ASCII, the usual case).
fn chars(text: &str) -> usize {
    if text.is_ascii() {
        text.len()
    } else {
        text.chars().count()
    }
}

/// [`write_text_line`] as a String, without the newline.
pub fn text_line(e: &Event) -> String {
    let mut line = Vec::with_capacity(200);
    write_text_line(&mut line, &e.ts, &e.view(), ADDR_WIDTH);
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

pub async fn run(opts: TraceOptions) -> Result<()> {
    let mut session = Session::start(&opts.load, opts.record.as_ref())?;
    // One write per batch: the batch's lines go to stdout at once, which its line
    // buffering passes through whole (no syscall per line, no copy).
    let mut stdout = io::stdout().lock();
    // A reader that went away (`| head`) ends the trace, quietly.
    let flow = |written: io::Result<()>| match written {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(ControlFlow::Break(())),
        r => r.context("writing to stdout").map(ControlFlow::Continue),
    };
    if opts.json {
        session.run(opts.duration, |batch| flow(write_json_events(&mut stdout, batch))).await?;
    } else {
        let mut text = TextLines::default();
        crate::views::output::stdout_written(writeln!(stdout, "{}", text.header()))?;
        let mut lines = Vec::new();
        session
            .on_each_wakeup(opts.duration, |session| {
                lines.clear();
                session.drain_each(|e| text.write(&mut lines, &Timestamp::from_unix_ns(e.unix_ns), &e))?;
                if lines.is_empty() {
                    return Ok(ControlFlow::Continue(()));
                }
                flow(write_batch(&mut stdout, &lines))
            })
            .await?;
    }
    session.say_closing(opts.json_summary)?;
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
            if e.comm.is_empty() { "-" } else { &e.comm },
            e.source(),
            e.destination(),
            e.netns,
            e.syn_data_bytes,
            e.retransmits,
            e.handshake_us.map(millis).unwrap_or_else(|| "-".into()),
            millis(e.stall_us),
            e.saved_us.map(millis).unwrap_or_else(|| "-".into()),
            e.container_name().unwrap_or_else(|| "-".into()),
        )
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
        let mut lines = TextLines::default();
        let mut out = Vec::new();
        out.extend_from_slice(lines.header().as_bytes());
        out.push(b'\n');
        for e in &events {
            lines.write(&mut out, &e.ts, &e.view());
        }
        let text = String::from_utf8(out).unwrap();
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
            header(ADDR_WIDTH),
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
        ];
        for e in &events {
            assert_eq!(text_line(e), built_per_field(e));
        }
    }
}
