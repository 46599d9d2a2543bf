//! The events' time: the kernel's monotonic clock to the wall clock, and the RFC 3339
//! text that the JSON and the recordings carry, written and read back.
use serde::{Deserialize, Serialize};

/// Converts CLOCK_MONOTONIC (what bpf_ktime_get_ns returns) to wall-clock time.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    realtime_minus_monotonic_ns: i128,
}

fn clock_ns(id: libc::clockid_t) -> i128 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes into a valid timespec; both clocks always exist.
    unsafe { libc::clock_gettime(id, &mut ts) };
    ts.tv_sec as i128 * 1_000_000_000 + ts.tv_nsec as i128
}

/// CLOCK_MONOTONIC now, in ns: the clock of the events' `ts_ns`.
pub(crate) fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC) as u64
}

impl Clock {
    pub fn now() -> Self {
        let mono = clock_ns(libc::CLOCK_MONOTONIC);
        let real = clock_ns(libc::CLOCK_REALTIME);
        Clock { realtime_minus_monotonic_ns: real - mono }
    }

    /// A fixed offset, for tests and fuzzing: the same input decodes the same way.
    pub fn fixed(offset_ns: i128) -> Self {
        Clock { realtime_minus_monotonic_ns: offset_ns }
    }

    pub fn to_unix_ns(self, monotonic_ns: u64) -> u128 {
        (monotonic_ns as i128 + self.realtime_minus_monotonic_ns).max(0) as u128
    }
}

/// When an event happened (ns since the epoch), printed as RFC 3339 in UTC with
/// nanoseconds: `ts` in the JSON, e.g. `2026-11-30T08:00:00.123456789Z`. Events come by
/// the hundred thousand a second and most views never print their time, so the text is
/// made when printed, not stored.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Timestamp {
    unix_ns: u128,
    /// A recording's text where it is not what this type prints for `unix_ns` (fewer
    /// digits, a leap second): printed back as it was written.
    written: Option<Box<str>>,
}

impl Timestamp {
    pub fn from_unix_ns(unix_ns: u128) -> Self {
        Timestamp { unix_ns, written: None }
    }

    /// Text as [`parse_rfc3339`] reads it; None for anything else.
    pub fn parse(text: &str) -> Option<Self> {
        let mut ts = Timestamp::from_unix_ns(parse_rfc3339(text)?);
        if ts.to_string() != text {
            ts.written = Some(text.into());
        }
        Some(ts)
    }

    pub fn unix_ns(&self) -> u128 {
        self.unix_ns
    }

    /// Appends `2026-11-30 08:00:00.123`: the time to the millisecond, as the text views
    /// print it.
    pub fn write_millis(&self, out: &mut Vec<u8>) {
        self.with_text(|to_second, rest| {
            let start = out.len();
            out.extend_from_slice(to_second.as_bytes());
            out.extend_from_slice(rest.as_bytes());
            let text = &mut out[start..];
            if let Some(t) = text.iter().position(|&b| b == b'T') {
                text[t] = b' ';
            }
            let millis = text.len().min("2026-11-30T08:00:00.123".len());
            out.truncate(start + millis);
        })
    }

    /// [`Timestamp::write_millis`] as a String.
    pub fn millis(&self) -> String {
        let mut text = Vec::new();
        self.write_millis(&mut text);
        String::from_utf8_lossy(&text).into_owned()
    }

    /// Hands `f` the text in two parts: up to the second, and the rest (`.123456789Z`). The
    /// calendar part is made once per second (jiff); the rest is digits.
    fn with_text<R>(&self, f: impl FnOnce(&str, &str) -> R) -> R {
        thread_local! {
            static SECOND: std::cell::RefCell<(i64, String)> = const { std::cell::RefCell::new((i64::MIN, String::new())) };
        }
        if let Some(text) = &self.written {
            return f(text, "");
        }
        let secs = i64::try_from(self.unix_ns / 1_000_000_000).unwrap_or(i64::MAX);
        let mut nanos = (self.unix_ns % 1_000_000_000) as u32;
        let mut rest = *b".000000000Z";
        for digit in rest[1..10].iter_mut().rev() {
            *digit = b'0' + (nanos % 10) as u8;
            nanos /= 10;
        }
        let rest = std::str::from_utf8(&rest).expect("ASCII digits");
        SECOND.with(|cell| {
            let mut cached = cell.borrow_mut();
            if cached.0 != secs {
                let day_and_time = jiff::Timestamp::from_second(secs)
                    .unwrap_or(jiff::Timestamp::MAX)
                    .strftime("%Y-%m-%dT%H:%M:%S")
                    .to_string();
                *cached = (secs, day_and_time);
            }
            f(&cached.1, rest)
        })
    }
}

impl std::fmt::Display for Timestamp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.with_text(|to_second, rest| {
            f.write_str(to_second)?;
            f.write_str(rest)
        })
    }
}

impl Serialize for Timestamp {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> std::result::Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Timestamp::parse(&text).ok_or_else(|| serde::de::Error::custom(format!("bad time {text:?}")))
    }
}

/// RFC 3339 in UTC with nanoseconds, e.g. `2026-11-30T08:00:00.123456789Z`.
pub(crate) fn rfc3339(unix_ns: u128) -> String {
    Timestamp::from_unix_ns(unix_ns).to_string()
}

/// A recording's time, RFC 3339 in UTC as [`rfc3339`] writes it
/// (`2026-11-30T08:14:42.549123456Z`), to ns since the epoch; None for anything else
/// (another offset, a time before 1970, not a time). jiff's civil time reads the date and
/// the time, calendar and ranges (its `Timestamp` ends at 9999-12-30, a day short of what a
/// recording may hold); after the time only the `Z` may follow, since jiff would read an
/// offset there and drop it. A leap second (`23:59:60`, RFC 3339 section 5.6), which jiff
/// reads as :59, is the second after it.
pub(super) fn parse_rfc3339(s: &str) -> Option<u128> {
    let civil = s.strip_suffix('Z')?;
    let (_, time) = civil.split_once('T')?;
    if !time.bytes().all(|b| b.is_ascii_digit() || b == b':' || b == b'.') {
        return None;
    }
    let leap = if time.get(5..9) == Some(":60.") || time.get(5..) == Some(":60") { 1_000_000_000 } else { 0 };
    let at: jiff::civil::DateTime = civil.parse().ok()?;
    let since_epoch = at.duration_since(jiff::civil::date(1970, 1, 1).at(0, 0, 0, 0));
    u128::try_from(since_epoch.as_nanos()).ok().map(|ns| ns + leap)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_parses_what_it_prints() {
        for ns in [0u128, 1_709_251_199_000_000_001, 951_782_400_123_456_789, 4_102_444_799_999_999_999] {
            assert_eq!(parse_rfc3339(&rfc3339(ns)), Some(ns), "{}", rfc3339(ns));
        }
        assert_eq!(parse_rfc3339("2024-02-29T23:59:59Z"), Some(1_709_251_199_000_000_000));
        assert_eq!(parse_rfc3339("2024-02-29T23:59:59.5Z"), Some(1_709_251_199_500_000_000));
        assert_eq!(parse_rfc3339("2024-13-01T00:00:00Z"), None);
        assert_eq!(parse_rfc3339("2024-02-30T00:00:00Z"), None);
        assert_eq!(parse_rfc3339("2024-02-29 23:59:59Z"), None);
        assert_eq!(parse_rfc3339("2024-02-29T23:59:59"), None);
        assert_eq!(parse_rfc3339("2024-02-29T23:59:59+01:00"), None);
        assert_eq!(parse_rfc3339("2024-02-29T23:59:59+01:00Z"), None);
        assert_eq!(parse_rfc3339("1969-12-31T23:59:59Z"), None);
        // A leap second is the one after :59, also in the last second a recording holds.
        assert_eq!(parse_rfc3339("2016-12-31T23:59:60Z"), Some(1_483_228_800_000_000_000));
        assert_eq!(parse_rfc3339("9999-12-31T23:59:60.999999999Z"), Some(253_402_300_800_999_999_999));
        // Fields of other widths or signs; a 15-digit year overflowed the hand-written
        // day arithmetic this replaced.
        for bad in [
            "999999999999999-01-01T00:00:00Z",
            "+024-02-29T23:59:59Z",
            "2024-2-29T23:59:59Z",
            "2024-02-29T-1:59:59Z",
            "2024-02-29T23:59:59.1234567891Z",
        ] {
            assert_eq!(parse_rfc3339(bad), None, "{bad}");
        }
    }
}
