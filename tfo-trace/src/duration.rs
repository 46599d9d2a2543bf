//! Durations as users type them on the command line (`30s`, `5m`, `250ms`, `1h 30m`, `2d`,
//! `PT5M`): the flags of `cli` and of the lab's helper commands take them. jiff parses the
//! units (its "friendly" and ISO 8601 formats), a day being 24 hours; a bare number is
//! seconds, as `sleep` takes it.
use std::time::Duration;

use jiff::{Span, SpanRelativeTo};

/// Below 1 ms a duration rounds to nothing, and a zero period makes tokio's interval panic;
/// above a year it is a typo.
const SHORTEST: Duration = Duration::from_millis(1);
const LONGEST: Duration = Duration::from_secs(366 * 86400);

/// What a refused value is told it should look like.
const LIKE: &str = "a duration like 30s, 5m, 1h30m, 2d or 250ms, or plain seconds like 7 or 0.5";

/// `30s`, `5m`, `1h`, `250ms`, `1m30s`, `2 minutes`, `2d`, `1w`, `PT5M`, or plain seconds
/// (`7`, `0.5`: digits, a point, digits; no sign or exponent).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
