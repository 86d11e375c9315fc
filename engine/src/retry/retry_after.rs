//! `Retry-After` (RFC 9110 §10.2.3): either delay-seconds or an HTTP-date.
//!
//! HTTP dates are parsed by the `httpdate` crate, which accepts all three forms
//! RFC 9110 §5.6.7 requires recipients to accept (IMF-fixdate, RFC 850 and
//! asctime) and checks that the weekday matches the date. One gap is covered
//! here: for the two-digit year of the RFC 850 form, `httpdate` uses a fixed
//! pivot (`< 70` means 20xx) while RFC 9110 says a year that appears to be more
//! than 50 years in the future means the most recent past year with the same
//! last two digits. We rewrite RFC 850 dates to IMF-fixdate with the century
//! RFC 9110 picks, relative to `now`, before handing them to `httpdate`.
//!
//! Invalid values yield `None` (the caller falls back to its policy delay);
//! dates in the past yield zero; delay-seconds too large for a `u64` saturate,
//! and the caller caps every value by its wait ceiling.

use std::time::{Duration, SystemTime};

use crate::clock::Timestamp;

/// The header's name, lower-case as `http` spells it.
pub const RETRY_AFTER: &str = "retry-after";

/// How long the upstream asks us to wait, measured from `now`.
///
/// `None` for a value that is neither delay-seconds nor a valid HTTP-date.
pub fn parse_retry_after(value: &str, now: Timestamp) -> Option<Duration> {
    let value = value.trim_matches(|c| c == ' ' || c == '\t');
    if value.is_empty() {
        return None;
    }
    if value.bytes().all(|b| b.is_ascii_digit()) {
        // delay-seconds = 1*DIGIT; anything longer than u64 is "very long".
        let secs = value.parse::<u64>().unwrap_or(u64::MAX);
        return Some(Duration::from_secs(secs));
    }
    let at = parse_http_date(value, now)?;
    Some(Timestamp::from_system_time(at).saturating_duration_since(now))
}

/// `Retry-After` read from a header map; absent, non-UTF-8 or invalid values
/// give `None`.
pub fn retry_after_from_headers(headers: &http::HeaderMap, now: Timestamp) -> Option<Duration> {
    let value = headers.get(RETRY_AFTER)?.to_str().ok()?;
    parse_retry_after(value, now)
}

fn parse_http_date(value: &str, now: Timestamp) -> Option<SystemTime> {
    match rfc850_as_imf_fixdate(value, now) {
        Some(rewritten) => httpdate::parse_http_date(&rewritten).ok(),
        None => httpdate::parse_http_date(value).ok(),
    }
}

const WEEKDAYS: [(&str, &str); 7] = [
    ("Monday", "Mon"),
    ("Tuesday", "Tue"),
    ("Wednesday", "Wed"),
    ("Thursday", "Thu"),
    ("Friday", "Fri"),
    ("Saturday", "Sat"),
    ("Sunday", "Sun"),
];

/// `Sunday, 06-Nov-94 08:49:37 GMT` → `Sun, 06 Nov 1994 08:49:37 GMT`, with the
/// century chosen by RFC 9110's 50-year rule. `None` if `value` is not in the
/// RFC 850 shape (other forms go to `httpdate` unchanged).
fn rfc850_as_imf_fixdate(value: &str, now: Timestamp) -> Option<String> {
    let (day_name, rest) = value.split_once(", ")?;
    let short = WEEKDAYS.iter().find(|(long, _)| *long == day_name).map(|(_, s)| *s)?;
    // rest = "06-Nov-94 08:49:37 GMT"
    let (date, time) = rest.split_once(' ')?;
    let mut parts = date.split('-');
    let (day, month, yy) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || yy.len() != 2 || !yy.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let yy: i64 = yy.parse().ok()?;
    let year = rfc9110_year(yy, civil_year(now));
    Some(format!("{short}, {day} {month} {year} {time}"))
}

/// The most recent year ending in `yy` that is not more than 50 years after
/// `current_year`.
fn rfc9110_year(yy: i64, current_year: i64) -> i64 {
    let century = current_year - current_year.rem_euclid(100);
    let candidate = century + yy;
    if candidate > current_year + 50 {
        candidate - 100
    } else {
        candidate
    }
}

/// The Gregorian year of `now` (UTC).
fn civil_year(now: Timestamp) -> i64 {
    // Days since the epoch to a civil year (H. Hinnant's algorithm).
    let days = now.as_secs().div_euclid(86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    yoe + era * 400 + i64::from(month <= 2)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 1994-11-06T08:47:37Z: two minutes before the RFC 9110 example date.
    fn two_minutes_before_the_example() -> Timestamp {
        Timestamp::from_secs(784_111_657)
    }

    #[test]
    fn rfc9110_examples_parse_in_every_form() {
        let now = two_minutes_before_the_example();
        let table = [
            ("Sun, 06 Nov 1994 08:49:37 GMT", Some(120)),
            ("Sunday, 06-Nov-94 08:49:37 GMT", Some(120)),
            ("Sun Nov  6 08:49:37 1994", Some(120)),
            ("120", Some(120)),
            ("0", Some(0)),
            ("  120 ", Some(120)),
        ];
        for (value, want) in table {
            assert_eq!(parse_retry_after(value, now), want.map(Duration::from_secs), "{value:?}");
        }
    }

    #[test]
    fn garbage_values_are_ignored() {
        let now = two_minutes_before_the_example();
        for value in [
            "-1",
            "1.5",
            "",
            "   ",
            "abc",
            "+5",
            "1e3",
            "0x10",
            "Mon, 06 Nov 1994 08:49:37 GMT", // wrong weekday
            "Sun, 06 Nov 1994 08:49:37 UTC",
            "Sun, 31 Feb 1994 08:49:37 GMT",
            "Sunday, 06-Nov-1994 08:49:37 GMT",
            "Sun, 06 Nov 1994 25:49:37 GMT",
        ] {
            assert_eq!(parse_retry_after(value, now), None, "{value:?}");
        }
    }

    #[test]
    fn huge_delay_seconds_saturate_instead_of_failing() {
        let now = Timestamp::from_secs(0);
        assert_eq!(
            parse_retry_after("99999999999999999999999999", now),
            Some(Duration::from_secs(u64::MAX))
        );
        assert_eq!(
            parse_retry_after("18446744073709551615", now),
            Some(Duration::from_secs(u64::MAX))
        );
        assert_eq!(parse_retry_after("86400000", now), Some(Duration::from_secs(86_400_000)));
    }

    #[test]
    fn dates_in_the_past_mean_no_wait() {
        let now = Timestamp::from_secs(784_111_777 + 3_600);
        assert_eq!(parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", now), Some(Duration::ZERO));
        assert_eq!(parse_retry_after("Sun Nov  6 08:49:37 1994", now), Some(Duration::ZERO));
    }

    #[test]
    fn rfc850_two_digit_years_follow_the_fifty_year_rule_not_a_fixed_pivot() {
        // 2026-01-01: "75" is 2075 (49 years ahead), "77" is 1977 (2077 would be
        // 51 years ahead). httpdate alone would read both as 197x.
        assert_eq!(rfc9110_year(75, 2026), 2075);
        assert_eq!(rfc9110_year(77, 2026), 1977);
        assert_eq!(rfc9110_year(26, 2026), 2026);
        assert_eq!(rfc9110_year(94, 2026), 1994);
        let now = Timestamp::from_secs(1_767_225_600); // 2026-01-01T00:00:00Z
        // 2027-01-01 was a Friday.
        assert_eq!(
            parse_retry_after("Friday, 01-Jan-27 00:00:00 GMT", now),
            Some(Duration::from_secs(365 * 86_400))
        );
    }

    #[test]
    fn civil_year_reads_the_calendar_year_of_an_instant() {
        assert_eq!(civil_year(Timestamp::from_secs(0)), 1970);
        assert_eq!(civil_year(Timestamp::from_secs(1_767_225_600)), 2026);
        assert_eq!(civil_year(Timestamp::from_secs(1_767_225_599)), 2025);
        assert_eq!(civil_year(Timestamp::from_secs(951_782_400)), 2000); // 2000-02-29
    }

    #[test]
    fn the_header_is_read_from_a_header_map() {
        let mut headers = http::HeaderMap::new();
        let now = Timestamp::from_secs(0);
        assert_eq!(retry_after_from_headers(&headers, now), None);
        headers.insert(RETRY_AFTER, http::HeaderValue::from_static("7"));
        assert_eq!(retry_after_from_headers(&headers, now), Some(Duration::from_secs(7)));
    }
}
