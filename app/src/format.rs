//! How the pages write values: instants, durations, counts, rates, and
//! percent-encoded URL parts. One home, so the same value reads the same on
//! every page (and the browser and the server render it alike).
//!
//! Instants are UTC: there is no timezone database in wasm, and UTC is what
//! the audit log and the server logs use too.

use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};

/// "2026-12-02 14:03 UTC" from Unix milliseconds.
pub fn date_time(ms: i64) -> String {
    let (y, m, d, secs_of_day) = civil(ms);
    format!("{y:04}-{m:02}-{d:02} {:02}:{:02} UTC", secs_of_day / 3600, secs_of_day % 3600 / 60)
}

/// "2026-12-02 14:03:07 UTC": with seconds, which matter on a delivery
/// ladder whose first pauses are 1, 2 and 4 s.
pub fn date_time_seconds(ms: i64) -> String {
    let (y, m, d, s) = civil(ms);
    format!("{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC", s / 3600, s % 3600 / 60, s % 60)
}

/// (year, month, day, seconds of the day) of Unix milliseconds, by Howard
/// Hinnant's civil-from-days algorithm.
fn civil(ms: i64) -> (i64, i64, i64, i64) {
    let secs = ms.div_euclid(1000);
    let days = secs.div_euclid(86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d, secs.rem_euclid(86_400))
}

/// "1 h 5 min", "42 s": a span of time in the largest units that matter
/// (pauses, ages, ceilings). Negative spans read as zero.
pub fn duration(ms: i64) -> String {
    let s = ms.max(0) / 1000;
    match s {
        0..=59 => format!("{s} s"),
        60..=3599 if s % 60 == 0 => format!("{} min", s / 60),
        60..=3599 => format!("{} min {} s", s / 60, s % 60),
        _ if s % 3600 == 0 => format!("{} h", s / 3600),
        _ => format!("{} h {} min", s / 3600, s % 3600 / 60),
    }
}

/// "12 ms", "1.5 s", "2.0 min", or "—" when there is nothing to show: a
/// short, measured span (waits, latencies), with sub-second precision.
pub fn duration_fine(ms: Option<u64>) -> String {
    match ms {
        None => "—".to_owned(),
        Some(ms) if ms < 1_000 => format!("{ms} ms"),
        Some(ms) if ms < 60_000 => format!("{:.1} s", ms as f64 / 1000.0),
        Some(ms) => format!("{:.1} min", ms as f64 / 60_000.0),
    }
}

/// "500ms", "10s", "2m", "1h", or "90s" when nothing rounder fits: a
/// duration as people type it in a form; [`parse_duration_input`] reads it back.
pub fn duration_input(ms: u64) -> String {
    match ms {
        0 => "0s".to_owned(),
        ms if ms % 3_600_000 == 0 => format!("{}h", ms / 3_600_000),
        ms if ms % 60_000 == 0 => format!("{}m", ms / 60_000),
        ms if ms % 1000 == 0 => format!("{}s", ms / 1000),
        ms => format!("{ms}ms"),
    }
}

/// A duration as people type it: `500ms`, `10s`, `1.5m`, `1h`; a bare
/// number means seconds. The error is the message shown next to the field.
pub fn parse_duration_input(text: &str) -> Result<u64, String> {
    let t = text.trim().to_ascii_lowercase();
    let (number, factor) = if let Some(n) = t.strip_suffix("ms") {
        (n, 1.0)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1000.0)
    } else if let Some(n) = t.strip_suffix('m') {
        (n, 60_000.0)
    } else if let Some(n) = t.strip_suffix('h') {
        (n, 3_600_000.0)
    } else {
        (t.as_str(), 1000.0)
    };
    let bad = || format!("'{}' is not a duration; write e.g. 500ms, 10s, 1m or 1h", text.trim());
    let value: f64 = number.trim().parse().map_err(|_| bad())?;
    if !value.is_finite() || value < 0.0 || value * factor > 1e15 {
        return Err(bad());
    }
    Ok((value * factor).round() as u64)
}

/// A count, or "—" when unknown.
pub fn count(n: Option<u64>) -> String {
    n.map_or_else(|| "—".to_owned(), |n| n.to_string())
}

/// A rate: whole numbers from 100 up (and zero), one decimal below; "—" when unknown.
pub fn rate(r: Option<f64>) -> String {
    match r {
        None => "—".to_owned(),
        Some(r) if r >= 100.0 || r == 0.0 => format!("{r:.0}"),
        Some(r) => format!("{r:.1}"),
    }
}

/// Everything but RFC 3986's unreserved characters is encoded.
const COMPONENT: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'_').remove(b'.').remove(b'~');

/// Percent-encode a value for a URL path segment or a query value.
pub fn percent_encode(s: &str) -> String {
    utf8_percent_encode(s, COMPONENT).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instants_are_written_in_utc_with_or_without_seconds() {
        assert_eq!(date_time(0), "1970-01-01 00:00 UTC");
        assert_eq!(date_time(1_796_220_180_000), "2026-12-02 14:03 UTC");
        assert_eq!(date_time(951_782_400_000), "2000-02-29 00:00 UTC");
        assert_eq!(date_time_seconds(1_796_220_187_000), "2026-12-02 14:03:07 UTC");
        assert_eq!(date_time_seconds(-1000), "1969-12-31 23:59:59 UTC");
    }

    #[test]
    fn spans_use_the_largest_units_that_matter() {
        assert_eq!(duration(42_000), "42 s");
        assert_eq!(duration(300_000), "5 min");
        assert_eq!(duration(310_000), "5 min 10 s");
        assert_eq!(duration(3_900_000), "1 h 5 min");
        assert_eq!(duration(48 * 3_600_000), "48 h");
        assert_eq!(duration(-5), "0 s");
    }

    #[test]
    fn measured_spans_keep_sub_second_precision() {
        assert_eq!(duration_fine(None), "—");
        assert_eq!(duration_fine(Some(12)), "12 ms");
        assert_eq!(duration_fine(Some(1_500)), "1.5 s");
        assert_eq!(duration_fine(Some(120_000)), "2.0 min");
    }

    #[test]
    fn form_durations_round_trip() {
        for ms in [0, 500, 1_000, 90_000, 60_000, 3_600_000, 1_500] {
            assert_eq!(parse_duration_input(&duration_input(ms)), Ok(ms), "{ms} ms");
        }
        assert_eq!(parse_duration_input("1.5m"), Ok(90_000));
        assert_eq!(parse_duration_input(" 10 "), Ok(10_000));
        assert!(parse_duration_input("soon").is_err());
        assert!(parse_duration_input("-1s").is_err());
        assert!(parse_duration_input("NaNs").is_err());
    }

    #[test]
    fn counts_and_rates_say_when_unknown() {
        assert_eq!(count(None), "—");
        assert_eq!(count(Some(7)), "7");
        assert_eq!(rate(None), "—");
        assert_eq!(rate(Some(0.0)), "0");
        assert_eq!(rate(Some(2.345)), "2.3");
        assert_eq!(rate(Some(150.4)), "150");
    }

    #[test]
    fn only_unreserved_characters_stay_unencoded() {
        assert_eq!(percent_encode("acct-1_a.b~c"), "acct-1_a.b~c");
        assert_eq!(percent_encode("a b/c:d&e=f"), "a%20b%2Fc%3Ad%26e%3Df");
        assert_eq!(percent_encode("ä"), "%C3%A4");
    }
}
