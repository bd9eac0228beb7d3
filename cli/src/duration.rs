//! Durations on the command line (`30s`, `500ms`, `2m`, `1.5h`, a bare number
//! is seconds as for flock(1) -w) and durations in what we print.

use std::time::Duration;

/// Parses `500ms`, `30s`, `2m`, `1h`, `1.5s`, or a bare number of seconds.
/// Fractions are allowed; the result is rounded up to a whole millisecond
/// (the module's unit), so a positive duration never becomes 0 ms.
pub fn parse(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let scale_ms = match unit.trim() {
        "ms" => 1.0,
        "" | "s" | "sec" => 1_000.0,
        "m" | "min" => 60_000.0,
        "h" => 3_600_000.0,
        other => {
            return Err(format!(
                "unknown unit '{other}' in '{text}' (use ms, s, m or h, e.g. 500ms, 30s, 2m)"
            ))
        }
    };
    let value: f64 = number
        .parse()
        .map_err(|_| format!("'{text}' is not a duration (e.g. 500ms, 30s, 2m)"))?;
    let ms = (value * scale_ms).ceil();
    // The module takes at most 2^53 - 1 ms (lock_rules::args::MAX_DURATION_MS).
    if !ms.is_finite() || ms > 9_007_199_254_740_991.0 {
        return Err(format!("'{text}' is too long (at most 2^53-1 ms)"));
    }
    Ok(Duration::from_millis(ms as u64))
}

/// A duration that must not be zero (a lease, a grace period).
pub fn parse_positive(text: &str) -> Result<Duration, String> {
    let d = parse(text)?;
    if d.is_zero() {
        return Err(format!("'{text}' must be more than 0"));
    }
    Ok(d)
}

/// Whole milliseconds, at least 1 for a non-zero duration.
pub fn millis(d: Duration) -> u64 {
    let ms = d.as_millis();
    if ms == 0 && !d.is_zero() {
        1
    } else {
        u64::try_from(ms).unwrap_or(u64::MAX)
    }
}

/// A duration of `ms` milliseconds as it would be given on the command
/// line: `500ms`, `1s`, `1.5s`, `2m`, `1h`.
pub fn spec(ms: u64) -> String {
    if ms > 0 && ms.is_multiple_of(3_600_000) {
        format!("{}h", ms / 3_600_000)
    } else if ms > 0 && ms.is_multiple_of(60_000) {
        format!("{}m", ms / 60_000)
    } else if ms.is_multiple_of(1_000) {
        format!("{}s", ms / 1_000)
    } else if ms < 1_000 {
        format!("{ms}ms")
    } else {
        let fraction = format!("{:03}", ms % 1_000);
        format!("{}.{}s", ms / 1_000, fraction.trim_end_matches('0'))
    }
}

/// `850 ms`, `1.2 s`, `59.9 s`, `3 m 20 s`, `2 h 05 m` for milliseconds.
pub fn human_ms(ms: i64) -> String {
    if ms < 0 {
        return "-".into();
    }
    if ms < 1_000 {
        format!("{ms} ms")
    } else if ms < 60_000 {
        format!("{:.1} s", ms as f64 / 1_000.0)
    } else if ms < 3_600_000 {
        format!("{} m {:02} s", ms / 60_000, ms % 60_000 / 1_000)
    } else {
        format!("{} h {:02} m", ms / 3_600_000, ms % 3_600_000 / 60_000)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units() {
        assert_eq!(parse("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse("10"), Ok(Duration::from_secs(10)));
        assert_eq!(parse("0.25"), Ok(Duration::from_millis(250)));
        assert_eq!(parse(" 3 s "), Ok(Duration::from_secs(3)));
        assert_eq!(parse("0"), Ok(Duration::ZERO));
    }

    #[test]
    fn rounds_up_to_a_millisecond() {
        assert_eq!(parse("0.0001s"), Ok(Duration::from_millis(1)));
        assert_eq!(parse("1.5ms"), Ok(Duration::from_millis(2)));
    }

    #[test]
    fn refuses() {
        for bad in [
            "",
            "s",
            "abc",
            "5x",
            "-1s",
            "1..2s",
            "1e3",
            "99999999999999999h",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
        assert!(parse_positive("0s").is_err());
        assert!(parse_positive("1ms").is_ok());
    }

    #[test]
    fn millis_never_rounds_to_zero() {
        assert_eq!(millis(Duration::from_micros(10)), 1);
        assert_eq!(millis(Duration::ZERO), 0);
        assert_eq!(millis(Duration::from_secs(2)), 2000);
    }

    #[test]
    fn as_given() {
        assert_eq!(spec(500), "500ms");
        assert_eq!(spec(1_000), "1s");
        assert_eq!(spec(1_500), "1.5s");
        assert_eq!(spec(1_250), "1.25s");
        assert_eq!(spec(120_000), "2m");
        assert_eq!(spec(7_200_000), "2h");
        assert_eq!(spec(90_000), "90s");
        assert_eq!(spec(0), "0s");
        for text in ["500ms", "1s", "1.5s", "2m", "1h", "1.25s"] {
            let ms = millis(parse(text).unwrap_or_default());
            assert_eq!(spec(ms), text);
        }
    }

    #[test]
    fn human() {
        assert_eq!(human_ms(850), "850 ms");
        assert_eq!(human_ms(1_234), "1.2 s");
        assert_eq!(human_ms(200_000), "3 m 20 s");
        assert_eq!(human_ms(7_500_000), "2 h 05 m");
        assert_eq!(human_ms(-1), "-");
    }
}
