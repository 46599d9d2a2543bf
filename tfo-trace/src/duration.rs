//! Durations as users type them on the command line (`30s`, `5m`, `250ms`): the flags of
//! `cli` and of the lab's helper commands take them.
use std::time::Duration;

/// `30s`, `5m`, `1h`, `250ms`, or plain seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let value: f64 = num.parse().map_err(|_| format!("`{s}` is not a duration like 30s or 5m"))?;
    let secs = match unit {
        "" | "s" => value,
        "ms" => value / 1000.0,
        "m" => value * 60.0,
        "h" => value * 3600.0,
        _ => return Err(format!("unknown unit `{unit}` in `{s}` (use ms, s, m or h)")),
    };
    // Below 1 ms a duration rounds to nothing, and a zero period makes tokio's interval panic.
    if !secs.is_finite() || secs < 0.001 || secs > 366.0 * 86400.0 {
        return Err(format!("`{s}` is out of range (1ms to 366 days)"));
    }
    Ok(Duration::from_secs_f64(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30s").unwrap(), Duration::from_secs(30));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("7").unwrap(), Duration::from_secs(7));
        assert!(parse_duration("0").is_err());
        assert!(parse_duration("0.0000000001").is_err(), "rounds to zero");
        assert_eq!(parse_duration("1ms").unwrap(), Duration::from_millis(1));
        assert!(parse_duration("5 parsecs").is_err());
        assert!(parse_duration("").is_err());
    }
}
