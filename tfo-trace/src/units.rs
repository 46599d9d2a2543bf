//! Units in one place: how every figure a person reads is printed, one form per kind of
//! figure, and how the durations users type are read. Every view prints through here
//! (docs/units.md shows the forms with examples):
//!
//! | figure | form | examples |
//! |---|---|---|
//! | a duration measured (time lost, handshake, a window traced, an age) | [`duration_us`]: three significant digits in `us`, `ms` or `s`, no trailing zero, no space; `0` for none | `0`, `70us`, `1.5ms`, `35ms`, `615ms`, `1s`, `1.02s`, `61.2s`, `3600s` |
//! | time lost per second of real time | [`duration_per_s`]: a duration | `1.02s`, `615ms`, `0`; `-` not measured |
//! | a period set or spanned (a refresh interval, a graph's span) | [`period`]: as the duration flags take it | `500ms`, `1s`, `2.5s`, `1m30s`, `2h` |
//! | events per second | [`rate`]: at most three significant digits, `k` beyond 99,999 | `0`, `0.50`, `12.5`, `1234`, `123.5k`; `-` not measured |
//! | a count in a sentence | [`count`], [`plural`]: digits grouped by thousands | `1,234,567`, `1 stalled connection` |
//! | a client's destination | [`write_destination`], [`destination`]: `name (address:port)` where `--names` named it, else `address:port` | `198.18.0.2:8080`, `[fd00::2]:8080`, `example.com (198.18.0.2:443)` |
//! | a network namespace | [`netns`]: its `ip netns` name where known, else its inode | `lab-srv`, `4026532246` |
//! | text in a column of a given width | [`cut`] to that many terminal columns ([`width`]), the cut marked `~`; [`pad`] to it | `a-very-long-s~`, `データ~` |
//!
//! A count in a table cell is plain digits (a column is read by its width and cut by
//! scripts), and lines made for scripts (`top --batch`'s `key=value` line, JSON) carry raw
//! numbers in base units (`_us`, `_s`, `_per_s`), never these forms.
//!
//! A printed duration of 1 ms or more reads back as input: `--duration 1.02s` is
//! [`parse_duration`]'s too. Durations as users type them on the command line (`30s`, `5m`,
//! `250ms`, `1h 30m`, `2d`, `PT5M`): the flags of `cli` and of the lab's helper commands
//! take them. jiff parses the units (its "friendly" and ISO 8601 formats), a day being 24
//! hours; a bare number is seconds, as `sleep` takes it.
use std::{net::IpAddr, time::Duration};

use jiff::{Span, SpanRelativeTo};

/// Below 1 ms a duration rounds to nothing, and a zero period makes tokio's interval panic;
/// above a year it is a typo.
const SHORTEST: Duration = Duration::from_millis(1);
const LONGEST: Duration = Duration::from_secs(366 * 86400);

/// What a refused value is told it should look like.
const LIKE: &str = "a duration like 30s, 5m, 1h30m, 2d or 250ms, or plain seconds like 7 or 0.5";

/// `30s`, `5m`, `1h`, `250ms`, `1m30s`, `2 minutes`, `2d`, `1w`, `PT5M`, or plain seconds
/// (`7`, `0.5`: digits, a point, digits; no sign or exponent).
pub(crate) fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let plain_seconds =
        !s.is_empty() && s.split_once('.').map_or(digits(s), |(whole, frac)| digits(whole) && digits(frac));
    let duration = if plain_seconds {
        let secs: f64 = s.parse().map_err(|_| format!("`{s}` is not {LIKE}"))?;
        if secs > LONGEST.as_secs_f64() {
            return Err(out_of_range(s));
        }
        Duration::from_secs_f64(secs)
    } else {
        let span: Span = s.parse().map_err(|_| format!("`{s}` is not {LIKE}"))?;
        if span.get_months() != 0 || span.get_years() != 0 {
            return Err(format!("`{s}`: months and years differ in length; say it in days, like 30d"));
        }
        let signed = span.to_duration(SpanRelativeTo::days_are_24_hours()).map_err(|_| out_of_range(s))?;
        Duration::try_from(signed).map_err(|_| out_of_range(s))?
    };
    if !(SHORTEST..=LONGEST).contains(&duration) {
        return Err(out_of_range(s));
    }
    Ok(duration)
}

fn digits(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

fn out_of_range(s: &str) -> String {
    format!("`{s}` is out of range (1ms to 366 days)")
}

/// `256MiB`, `1GiB`, `512K`, `100MB`, or plain bytes: a size users type (`--flight-recorder-size`).
/// `K`, `M`, `G`, `T` and `KiB`..`TiB` are powers of 1024, as `ls -h` and systemd read
/// them; `kB`, `MB`, `GB`, `TB` powers of 1000.
pub(crate) fn parse_size(s: &str) -> Result<u64, String> {
    const LIKE_SIZE: &str = "a size like 256MiB, 1GiB, 512K or plain bytes";
    let s = s.trim();
    let digits_end = s.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(s.len());
    let (number, unit) = s.split_at(digits_end);
    let number: f64 = number.parse().map_err(|_| format!("`{s}` is not {LIKE_SIZE}"))?;
    let scale: u64 = match unit.trim() {
        "" | "B" => 1,
        "K" | "KiB" => 1 << 10,
        "M" | "MiB" => 1 << 20,
        "G" | "GiB" => 1 << 30,
        "T" | "TiB" => 1 << 40,
        "kB" | "KB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        "TB" => 1_000_000_000_000,
        _ => return Err(format!("`{s}` is not {LIKE_SIZE}")),
    };
    let bytes = number * scale as f64;
    if !bytes.is_finite() || bytes >= u64::MAX as f64 {
        return Err(format!("`{s}` is too large"));
    }
    Ok(bytes as u64)
}

/// A size as [`parse_size`] reads it back, in the largest binary unit that keeps it whole
/// (`256MiB`, `64KiB`, `1000B`): what help texts and notes print.
pub(crate) fn size(bytes: u64) -> String {
    for (unit, scale) in [("TiB", 1u64 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)] {
        if bytes >= scale && bytes.is_multiple_of(scale) {
            return format!("{}{unit}", bytes / scale);
        }
    }
    format!("{bytes}B")
}

/// What a moment users type is told it should look like.
const LIKE_MOMENT: &str = "a time like 2026-12-03T03:12:00Z, 2026-12-03 03:12 or 03:12 (UTC), \
     or a duration back from now like 1h or 30m";

/// A moment in time as users type it for a window (`--since`, `--until`, `/recording?since=`),
/// as ns since the epoch: a duration back from `now_ns` ([`parse_duration`]: `1h`, `30m`),
/// an RFC 3339 time with its offset (`2026-12-03T03:12:00Z`, `...+01:00`), a date and time
/// without one (`2026-12-03 03:12`, `2026-12-03T03:12:05`: UTC, as every time tfo-trace
/// prints), or a time of day alone (`03:12`: its last occurrence in UTC, today's or
/// yesterday's).
pub(crate) fn parse_moment(s: &str, now_ns: u128) -> Result<u128, String> {
    let s = s.trim();
    let ns_of =
        |t: jiff::Timestamp| u128::try_from(t.as_nanosecond()).map_err(|_| format!("`{s}`: before 1970"));
    if let Ok(t) = s.parse::<jiff::Timestamp>() {
        return ns_of(t);
    }
    if let Ok(civil) = s.parse::<jiff::civil::DateTime>() {
        return jiff::tz::Offset::UTC.to_timestamp(civil).map_err(|e| format!("`{s}`: {e}")).and_then(ns_of);
    }
    if let Ok(time) = s.parse::<jiff::civil::Time>() {
        let now = jiff::Timestamp::from_nanosecond(now_ns as i128).map_err(|e| e.to_string())?;
        let today = jiff::tz::Offset::UTC.to_datetime(now).date();
        let at = |d: jiff::civil::Date| jiff::tz::Offset::UTC.to_timestamp(d.to_datetime(time));
        let t = at(today).map_err(|e| e.to_string())?;
        let t = if t > now {
            at(today.yesterday().map_err(|e| e.to_string())?).map_err(|e| e.to_string())?
        } else {
            t
        };
        return ns_of(t);
    }
    match parse_duration(s) {
        Ok(ago) => Ok(now_ns.saturating_sub(ago.as_nanos())),
        Err(_) => Err(format!("`{s}` is not {LIKE_MOMENT}")),
    }
}

/// Now, in ns since the epoch.
pub(crate) fn now_unix_ns() -> u128 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0)
}

/// A measured duration in microseconds: three significant digits in the largest of `us`,
/// `ms` and `s` that keeps it at least 1, trailing zeros dropped: `0`, `70us`, `1.5ms`,
/// `35ms`, `1.02s`, `61.2s`, `3600s`. At most 7 characters below 10^6 s (11 days), so a 7-wide
/// column holds it.
pub(crate) fn duration_us(us: u64) -> String {
    DurationText::of(us).as_str().to_string()
}

/// A balance of time (saved less lost), signed: `+35ms`, `-1.02s`, `0` ([`duration_us`] of
/// its size).
pub fn net_us(us: i64) -> String {
    match us {
        0 => "0".to_string(),
        n if n > 0 => format!("+{}", duration_us(n.unsigned_abs())),
        n => format!("-{}", duration_us(n.unsigned_abs())),
    }
}

/// [`duration_us`] of a duration in seconds (an age read from the kernel, a window traced).
pub(crate) fn duration_s(seconds: f64) -> String {
    duration_us((seconds.max(0.0) * 1e6).round() as u64)
}

/// [`duration_us`]'s text without an allocation, made with integers: `trace` prints two
/// per event.
pub(crate) struct DurationText {
    buf: [u8; 24],
    len: usize,
}

impl DurationText {
    pub(crate) fn of(us: u64) -> DurationText {
        let mut t = DurationText { buf: [0; 24], len: 0 };
        if us == 0 {
            t.push(b"0");
        } else if us < 1_000 {
            t.push(itoa::Buffer::new().format(us).as_bytes());
            t.push(b"us");
        } else {
            t.three_digits(us);
        }
        t
    }

    pub(crate) fn as_str(&self) -> &str {
        std::str::from_utf8(&self.buf[..self.len]).expect("ASCII digits and units")
    }

    fn push(&mut self, bytes: &[u8]) {
        self.buf[self.len..self.len + bytes.len()].copy_from_slice(bytes);
        self.len += bytes.len();
    }

    /// Three significant digits: hundredths, tenths or whole ms, then s, rounded half up;
    /// the first that needs fewer than four digits (seconds take as many as they need).
    fn three_digits(&mut self, us: u64) {
        for (unit_us, unit) in [(1_000u64, &b"ms"[..]), (1_000_000, &b"s"[..])] {
            for decimals in [2u32, 1, 0] {
                let scale = 10u64.pow(decimals);
                let step = unit_us / scale;
                let steps = us.saturating_add(step / 2) / step;
                if steps < 1_000 || (unit == b"s" && decimals == 0) {
                    self.push(itoa::Buffer::new().format(steps / scale).as_bytes());
                    // The decimals, trailing zeros dropped: `1.02`, `1.5`, `35`.
                    let (mut frac, mut digits) = (steps % scale, decimals);
                    while digits > 0 && frac % 10 == 0 {
                        frac /= 10;
                        digits -= 1;
                    }
                    if digits > 0 {
                        self.push(b".");
                        for d in (0..digits).rev() {
                            self.push(&[b'0' + (frac / 10u64.pow(d) % 10) as u8]);
                        }
                    }
                    return self.push(unit);
                }
            }
        }
    }
}

/// Time lost per second of real time, as a duration per second: `1.02s`, `615ms`; `0` for
/// none, `-` where no rate was measured (before the first refresh, or a replay).
pub(crate) fn duration_per_s(seconds_per_s: Option<f64>) -> String {
    match seconds_per_s {
        None => "-".into(),
        Some(v) if v <= 0.0 => "0".into(),
        Some(v) => duration_us((v * 1e6).round() as u64),
    }
}

/// A period the user set or a span of refreshes, as the duration flags take it: `500ms`,
/// `1s`, `2.5s`, `1m30s`, `2h`.
pub(crate) fn period(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1_000 {
        return format!("{ms}ms");
    }
    let (h, m, s, frac_ms) = (ms / 3_600_000, ms / 60_000 % 60, ms / 1_000 % 60, ms % 1_000);
    let mut out = String::new();
    if h > 0 {
        out.push_str(&format!("{h}h"));
    }
    if m > 0 {
        out.push_str(&format!("{m}m"));
    }
    if s > 0 || frac_ms > 0 {
        out.push_str(&s.to_string());
        if frac_ms > 0 {
            out.push_str(format!(".{frac_ms:03}").trim_end_matches('0'));
        }
        out.push('s');
    }
    out
}

/// Events per second in at most 7 characters: `0`, `0.50`, `12.5`, `1234`, `12.3k`; `-`
/// where no rate was measured (before the first refresh, or a replay).
pub fn rate(per_s: Option<f64>) -> String {
    match per_s {
        None => "-".into(),
        Some(v) if v <= 0.0 => "0".into(),
        Some(v) if v < 9.995 => format!("{v:.2}"),
        Some(v) if v < 99.95 => format!("{v:.1}"),
        Some(v) if v < 99_999.5 => format!("{v:.0}"),
        Some(v) => format!("{:.1}k", v / 1e3),
    }
}

/// A count in a sentence: `1,234,567`.
pub fn count(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A count and what it counts: `1 stalled connection`, `1,000 stalled connections`.
pub(crate) fn plural(n: u64, one: &str, many: &str) -> String {
    format!("{} {}", count(n), if n == 1 { one } else { many })
}

/// Appends `address:port` as every view prints one: `198.18.0.2:8080`, `[fd00::2]:8080`
/// (what `SocketAddr` displays). IPv4 is written by hand: `trace` prints two per event, and
/// core::fmt was most of a line's cost.
pub(crate) fn write_address(out: &mut Vec<u8>, ip: IpAddr, port: u16) {
    match ip {
        IpAddr::V4(v4) => {
            for (i, octet) in v4.octets().into_iter().enumerate() {
                if i > 0 {
                    out.push(b'.');
                }
                push_octet(out, octet);
            }
        }
        // Rare on the hot path: std's formatting (the :: compression) is worth its cost.
        IpAddr::V6(v6) => {
            use std::io::Write as _;
            write!(out, "[{v6}]").expect("writing to a Vec");
        }
    }
    out.push(b':');
    out.extend_from_slice(itoa::Buffer::new().format(port).as_bytes());
}

/// One IPv4 octet in decimal, without itoa's buffer for one to three digits.
fn push_octet(out: &mut Vec<u8>, octet: u8) {
    if octet >= 100 {
        out.push(b'0' + octet / 100);
    }
    if octet >= 10 {
        out.push(b'0' + octet / 10 % 10);
    }
    out.push(b'0' + octet % 10);
}

/// The one form of a client's destination as a person reads it (`trace`, `stalls` and
/// wherever else a view names one in text): `name (address:port)` where the process
/// resolved `name` to that address (`--names`, `Event::dname`), else `address:port`
/// ([`write_address`]). The name is the recording's or the resolver's text, so a control
/// character in it is written escaped (`\u{1b}`), never sent to the terminal.
///
/// `max_chars`: Some(n) for a fixed-width column of n terminal columns: a name that would
/// make it wider is cut ([`cut`], as `top` cuts a cell) and the address kept whole, for it
/// is what the row is about; None (a line per event) prints it whole.
pub(crate) fn write_destination(
    out: &mut Vec<u8>,
    ip: IpAddr,
    port: u16,
    name: Option<&str>,
    max_chars: Option<usize>,
) {
    let Some(name) = name.filter(|n| !n.is_empty()) else { return write_address(out, ip, port) };
    // The usual case: a plain name, whole, before its address.
    if max_chars.is_none() && !name.chars().any(char::is_control) {
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b" (");
        write_address(out, ip, port);
        out.push(b')');
        return;
    }
    let mut shown = printable(name).into_owned();
    if let Some(max) = max_chars {
        // The room the address, ` (` and `)` leave the name (an address is ASCII).
        let mut address = Vec::with_capacity(48);
        write_address(&mut address, ip, port);
        let room = max.saturating_sub(address.len() + 3);
        shown = cut(&shown, room.max(1)).into_owned();
    }
    out.extend_from_slice(shown.as_bytes());
    out.extend_from_slice(b" (");
    write_address(out, ip, port);
    out.push(b')');
}

/// The columns `s` takes on a terminal: two for a wide (CJK) character, none for a
/// combining one, as ratatui and terminals count them (Unicode's East Asian Width). A
/// column's width is this, never its bytes or chars.
pub(crate) fn width(s: &str) -> usize {
    unicode_width::UnicodeWidthStr::width(s)
}

/// `s` in at most `columns` terminal columns ([`width`]): whole if it fits, else cut
/// between two characters, never inside one, the cut marked `~` so that a cut address is
/// never mistaken for a whole one (a wide character that would straddle the edge goes).
/// The one way every view shortens text to a width.
pub(crate) fn cut(s: &str, columns: usize) -> std::borrow::Cow<'_, str> {
    if width(s) <= columns {
        return s.into();
    }
    if columns == 0 {
        return "".into();
    }
    let mut out = String::new();
    let mut used = 0;
    for c in s.chars() {
        let w = unicode_width::UnicodeWidthChar::width(c).unwrap_or(0);
        if used + w > columns - 1 {
            break;
        }
        used += w;
        out.push(c);
    }
    out.push('~');
    out.into()
}

/// `s` padded with spaces to `columns` terminal columns ([`width`]), on the right
/// (`Align::Left`) or the left: `format!("{:<w$}")` counts chars, which a wide character
/// takes two columns of.
pub(crate) fn pad(s: &str, columns: usize, align: Align) -> String {
    let fill = " ".repeat(columns.saturating_sub(width(s)));
    match align {
        Align::Left => format!("{s}{fill}"),
        Align::Right => format!("{fill}{s}"),
    }
}

/// Where [`pad`] puts the text in its column.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Align {
    Left,
    Right,
}

/// A name from outside (a DNS name, a recording's text) as the text views print it: its
/// control characters escaped (`\n`, `\u{1b}`), so that none reaches the terminal.
pub(crate) fn printable(name: &str) -> std::borrow::Cow<'_, str> {
    if !name.chars().any(char::is_control) {
        return name.into();
    }
    let mut shown = String::with_capacity(name.len() + 8);
    for c in name.chars() {
        if c.is_control() {
            shown.extend(c.escape_default());
        } else {
            shown.push(c);
        }
    }
    shown.into()
}

/// A network namespace as every view names it, the one rule: its `ip netns` name where one
/// is known (live, from /run/netns; in a replay, the events' `netns_name`), else its inode.
/// A recording's name is outside text: its control characters come escaped.
pub(crate) fn netns(inode: u32, name: Option<&str>) -> String {
    match name.filter(|n| !n.is_empty()) {
        Some(n) => printable(n).into_owned(),
        None => inode.to_string(),
    }
}

/// [`write_destination`] as a String, whole (a line per event, a sentence).
pub fn destination(ip: IpAddr, port: u16, name: Option<&str>) -> String {
    let mut out = Vec::with_capacity(48);
    write_destination(&mut out, ip, port, name, None);
    String::from_utf8(out).expect("an address and a str")
}

/// The process as `trace` and `stalls` print it (COMM): its name, and where the thread that
/// connected or listened has another, that one after a slash (`python3/connworker`); `-`
/// where neither is known.
pub(crate) fn write_process(out: &mut Vec<u8>, comm: &str, thread: Option<&str>) {
    match (comm, thread) {
        ("", None) => out.push(b'-'),
        (comm, None) => out.extend_from_slice(comm.as_bytes()),
        (comm, Some(thread)) => {
            out.extend_from_slice(if comm.is_empty() { b"-" } else { comm.as_bytes() });
            out.push(b'/');
            out.extend_from_slice(thread.as_bytes());
        }
    }
}

/// [`write_process`] as a String.
pub fn process(comm: &str, thread: Option<&str>) -> String {
    let mut out = Vec::with_capacity(32);
    write_process(&mut out, comm, thread);
    String::from_utf8_lossy(&out).into_owned()
}

/// [`write_destination`] as a String at most `max_chars` wide where cutting the name can
/// make it so (a fixed-width column).
pub(crate) fn destination_within(ip: IpAddr, port: u16, name: Option<&str>, max_chars: usize) -> String {
    let mut out = Vec::with_capacity(48);
    write_destination(&mut out, ip, port, name, Some(max_chars));
    String::from_utf8(out).expect("an address and a str")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_namespace_is_named_where_known_else_its_inode() {
        assert_eq!(netns(4026532246, Some("lab-srv")), "lab-srv");
        assert_eq!(netns(4026532246, None), "4026532246");
        assert_eq!(netns(4026532246, Some("")), "4026532246");
        assert_eq!(netns(7, Some("a\u{1b}[2Jb")), "a\\u{1b}[2Jb", "no escape reaches the terminal");
    }

    #[test]
    fn balances_carry_their_sign() {
        assert_eq!(net_us(0), "0");
        assert_eq!(net_us(35_000), "+35ms");
        assert_eq!(net_us(-1_020_000), "-1.02s");
        assert_eq!(net_us(i64::MIN).chars().next(), Some('-'));
    }

    #[test]
    fn measured_durations_have_three_significant_digits() {
        for (us, text) in [
            (0, "0"),
            (1, "1us"),
            (70, "70us"),
            (999, "999us"),
            (1_000, "1ms"),
            (1_500, "1.5ms"),
            (9_994, "9.99ms"),
            (9_995, "10ms"),
            (35_000, "35ms"),
            (99_950, "100ms"),
            (614_500, "615ms"),
            (999_499, "999ms"),
            (999_500, "1s"),
            (1_019_650, "1.02s"),
            (2_028_900, "2.03s"),
            (61_234_000, "61.2s"),
            (99_950_000, "100s"),
            (123_456_789, "123s"),
            (3_600_000_000, "3600s"),
        ] {
            assert_eq!(duration_us(us), text, "{us} us");
        }
        for us in [0, 999, 1_000, 99_999, 999_949, 1_000_000, 99_999_999, 999_999_000_000] {
            assert!(duration_us(us).len() <= 7, "{us}: {}", duration_us(us));
        }
        // What is printed reads back (to its three digits) where it is a flag's duration.
        for us in [1_500, 35_000, 1_019_650, 61_234_000] {
            let back = parse_duration(&duration_us(us)).unwrap().as_micros() as f64;
            assert!((back - us as f64).abs() / us as f64 <= 0.005, "{us}: {}", duration_us(us));
        }
    }

    #[test]
    fn periods_rates_and_counts() {
        for (ms, text) in
            [(500, "500ms"), (1_000, "1s"), (2_500, "2.5s"), (90_000, "1m30s"), (7_200_000, "2h")]
        {
            let d = Duration::from_millis(ms);
            assert_eq!(period(d), text);
            assert_eq!(parse_duration(text).unwrap(), d, "{text} reads back");
        }
        for (v, text) in [
            (None, "-"),
            (Some(0.0), "0"),
            (Some(0.5), "0.50"),
            (Some(1.0 / 1.1), "0.91"),
            (Some(12.46), "12.5"),
            (Some(1234.4), "1234"),
            (Some(123_456.0), "123.5k"),
        ] {
            assert_eq!(rate(v), text);
            assert!(rate(v).len() <= 7);
        }
        assert_eq!(
            [
                duration_per_s(None),
                duration_per_s(Some(0.0)),
                duration_per_s(Some(1.023)),
                duration_per_s(Some(0.25))
            ],
            ["-", "0", "1.02s", "250ms"]
        );
        assert_eq!(
            (count(0), count(999), count(1_000), count(1_234_567)),
            ("0".into(), "999".into(), "1,000".into(), "1,234,567".into())
        );
        assert_eq!(
            (plural(1, "stall", "stalls"), plural(1_000, "stall", "stalls")),
            ("1 stall".into(), "1,000 stalls".into())
        );
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30s").unwrap(), Duration::from_secs(30));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("1m30s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("2 minutes").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("PT5M").unwrap(), Duration::from_secs(300));
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("7").unwrap(), Duration::from_secs(7));
        assert_eq!(parse_duration("0.5").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("1ms").unwrap(), Duration::from_millis(1));
        assert_eq!(parse_duration("1d").unwrap(), Duration::from_secs(86_400));
        assert_eq!(parse_duration("1w").unwrap(), Duration::from_secs(7 * 86_400));
        assert_eq!(parse_duration("366d").unwrap(), LONGEST);
        assert_eq!(parse_duration("1d 2h").unwrap(), Duration::from_secs(26 * 3600));
        for bad in [
            "0",
            "0s",
            "0.0000000001",
            "500us",
            "-5s",
            "-1",
            "+5",
            "367d",
            "1e400",
            "1e3",
            "NaN",
            "inf",
            "5 parsecs",
            "",
            ".5",
            "5.",
            "1mo",
            "1y",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad} accepted");
        }
        let e = parse_duration("soon").unwrap_err();
        assert!(e.contains("2d") && !e.contains("jiff"), "{e}");
        assert!(parse_duration("1mo").unwrap_err().contains("30d"));
        assert!(parse_duration("367d").unwrap_err().contains("1ms to 366 days"));
    }

    fn v4() -> IpAddr {
        IpAddr::V4(std::net::Ipv4Addr::new(198, 18, 0, 2))
    }

    fn v6() -> IpAddr {
        "fd00:7f0::2".parse().unwrap()
    }

    #[test]
    fn destinations_are_named_before_their_address() {
        assert_eq!(destination(v4(), 8080, None), "198.18.0.2:8080");
        assert_eq!(destination(v6(), 443, None), "[fd00:7f0::2]:443");
        assert_eq!(destination(v4(), 443, Some("example.com")), "example.com (198.18.0.2:443)");
        assert_eq!(destination(v6(), 443, Some("example.com")), "example.com ([fd00:7f0::2]:443)");
        assert_eq!(destination(v4(), 443, Some("")), "198.18.0.2:443", "an empty name is none");
        // What SocketAddr prints, for every octet width and a mapped address.
        for (ip, port) in [("0.0.0.0", 0), ("10.99.100.255", 65535), ("::ffff:1.2.3.4", 1)] {
            let ip: IpAddr = ip.parse().unwrap();
            assert_eq!(destination(ip, port, None), std::net::SocketAddr::new(ip, port).to_string());
        }
        // A recording's name may hold anything: nothing of it reaches the terminal raw.
        let odd = "evil\x1b[2J\nname\u{85}.com";
        assert_eq!(destination(v4(), 443, Some(odd)), "evil\\u{1b}[2J\\nname\\u{85}.com (198.18.0.2:443)");
        assert_eq!(
            destination(v4(), 443, Some("\u{e9}t\u{e9}.example")),
            "\u{e9}t\u{e9}.example (198.18.0.2:443)"
        );
    }

    #[test]
    fn a_destination_cut_to_its_column_keeps_its_address() {
        let long = "a-very-long-service-name.eu-west-1.example.com";
        // Fits: whole. Too wide: the name is cut, marked, to exactly the width.
        assert_eq!(destination_within(v4(), 443, Some("api.example"), 28), "api.example (198.18.0.2:443)");
        let cut = destination_within(v4(), 443, Some(long), 28);
        assert_eq!(cut, "a-very-lon~ (198.18.0.2:443)");
        assert_eq!(cut.chars().count(), 28);
        let cut = destination_within(v6(), 443, Some(long), 32);
        assert_eq!(cut, "a-very-long~ ([fd00:7f0::2]:443)");
        // No room at all for the name: its mark, and the address whole, however wide.
        assert_eq!(destination_within(v4(), 443, Some(long), 10), "~ (198.18.0.2:443)");
        // Unnamed: the address, never cut.
        assert_eq!(destination_within(v6(), 443, None, 5), "[fd00:7f0::2]:443");
        // Counted in terminal columns, not bytes: é takes one, a CJK character two.
        let e4 = Some("\u{e9}\u{e9}\u{e9}\u{e9}");
        assert_eq!(destination_within(v4(), 443, e4, 21), "\u{e9}\u{e9}\u{e9}\u{e9} (198.18.0.2:443)");
        assert_eq!(destination_within(v4(), 443, e4, 20), "\u{e9}\u{e9}~ (198.18.0.2:443)");
        let wide = destination_within(v4(), 443, Some("データベース.example"), 28);
        assert_eq!((wide.as_str(), width(&wide)), ("データベー~ (198.18.0.2:443)", 28));
        let wide = destination_within(v4(), 443, Some("データベース.example"), 27);
        assert_eq!(wide, "データベ~ (198.18.0.2:443)", "a wide character never straddles the edge");
        assert_eq!(width(&wide), 26);
    }

    /// Issue 55, item 5: text is cut and padded by the columns it takes, one character
    /// whole or not at all (a multi-byte glyph cut by bytes shows as `�`).
    #[test]
    fn text_is_cut_and_padded_by_terminal_columns() {
        assert_eq!((width("abc"), width("é"), width("データ"), width("·█▁")), (3, 1, 6, 3));
        assert_eq!(cut("[fd00:7f0:1::2]:8080", 10), "[fd00:7f0~");
        assert_eq!(cut("abc", 3), "abc");
        assert_eq!(cut("abc", 0), "");
        assert_eq!(cut("データベース", 6), "デー~");
        assert_eq!(cut("データベース", 7), "データ~");
        assert_eq!(cut("aデータ", 4), "aデ~");
        assert_eq!(cut("██████", 4), "███~");
        for (s, w) in [("データベース", 5), ("aé·█", 3), ("数据库客户", 9), ("x", 1)] {
            let c = cut(s, w);
            assert!(width(&c) <= w && !c.contains('\u{fffd}'), "{s} in {w}: {c}");
            assert!(s.starts_with(c.trim_end_matches('~')), "{s} in {w}: {c}");
        }
        assert_eq!(pad("データ", 8, Align::Left), "データ  ");
        assert_eq!(pad("データ", 8, Align::Right), "  データ");
        assert_eq!(pad("toolong", 3, Align::Right), "toolong");
    }

    /// `--since`/`--until`/`/recording?since=`: a duration back from now, an RFC 3339 time
    /// (any offset), a date and time or a time of day in UTC; anything else one line that
    /// names the input and what a moment looks like.
    #[test]
    fn moments_are_durations_back_from_now_or_times() {
        let ns = |t: &str| t.parse::<jiff::Timestamp>().unwrap().as_nanosecond() as u128;
        let now = ns("2026-12-03T04:00:00Z");
        let at = |s: &str| parse_moment(s, now);
        assert_eq!(at("1h"), Ok(now - 3_600_000_000_000));
        assert_eq!(at(" 1h30m "), Ok(now - 5_400_000_000_000));
        assert_eq!(at("250ms"), Ok(now - 250_000_000));
        assert_eq!(at("2026-12-03T03:12:00Z"), Ok(ns("2026-12-03T03:12:00Z")));
        assert_eq!(at("2026-12-03T04:12:00+01:00"), Ok(ns("2026-12-03T03:12:00Z")), "its offset");
        assert_eq!(at("2026-12-03T03:12:00.5Z"), Ok(ns("2026-12-03T03:12:00Z") + 500_000_000));
        assert_eq!(at("2026-12-03 03:12"), Ok(ns("2026-12-03T03:12:00Z")), "no offset: UTC");
        assert_eq!(at("03:12"), Ok(ns("2026-12-03T03:12:00Z")), "today's");
        assert_eq!(at("05:00"), Ok(ns("2026-12-02T05:00:00Z")), "later than now: yesterday's");
        for bad in ["yesterday", "", "1mo", "25:00", "2026-13-01T00:00:00Z", "-1h", "1h ago"] {
            let e = at(bad).unwrap_err();
            assert!(!e.contains('\n'), "one line: {e}");
            assert!(e.contains(&format!("`{}`", bad.trim())) && e.contains("like"), "{bad}: {e}");
        }
        let e = at("1969-12-31T23:00:00Z").unwrap_err();
        assert_eq!(e, "`1969-12-31T23:00:00Z`: before 1970");
    }

    #[test]
    fn sizes_are_binary_or_decimal_units_or_bytes() {
        assert_eq!(parse_size("256MiB"), Ok(256 << 20));
        assert_eq!(parse_size("512K"), Ok(512 << 10));
        assert_eq!(parse_size("100MB"), Ok(100_000_000));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(size(256 << 20), "256MiB");
        assert_eq!(size(1000), "1000B");
        for bad in ["", "lots", "-1MiB", "1.5.2G"] {
            let e = parse_size(bad).unwrap_err();
            assert!(!e.contains('\n') && e.contains("like"), "{bad}: {e}");
        }
    }
}
