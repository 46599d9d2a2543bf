//! Durations as users type them on the command line (`30s`, `5m`, `250ms`, `1h 30m`, `PT5M`):
//! the flags of `cli` and of the lab's helper commands take them. jiff parses the units
//! (its "friendly" and ISO 8601 formats); a bare number is seconds, as `sleep` takes it.
use std::time::Duration;

use jiff::SignedDuration;

/// Below 1 ms a duration rounds to nothing, and a zero period makes tokio's interval panic;
/// above a year it is a typo.
const SHORTEST: Duration = Duration::from_millis(1);
const LONGEST: Duration = Duration::from_secs(366 * 86400);

/// `30s`, `5m`, `1h`, `250ms`, `1m30s`, `2 minutes`, `PT5M`, or plain seconds (`7`, `0.5`).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let duration = match s.parse::<f64>() {
        Ok(secs) if secs.is_finite() && (0.0..=LONGEST.as_secs_f64()).contains(&secs) => {
            Duration::from_secs_f64(secs)
        }
        Ok(_) => return Err(out_of_range(s)),
        Err(_) => {
            let signed: SignedDuration =
                s.parse().map_err(|e| format!("`{s}` is not a duration like 30s, 5m or 250ms ({e})"))?;
            Duration::try_from(signed).map_err(|_| out_of_range(s))?
        }
    };
    if !(SHORTEST..=LONGEST).contains(&duration) {
        return Err(out_of_range(s));
    }
    Ok(duration)
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
        for bad in
            ["0", "0s", "0.0000000001", "500us", "-5s", "-1", "367d", "1e400", "NaN", "inf", "5 parsecs", ""]
        {
            assert!(parse_duration(bad).is_err(), "{bad} accepted");
        }
    }
}
