//! `Retry-After` (RFC 9110 §10.2.3): either delay-seconds or an HTTP-date.
//!
//! The one parser of the header in Sluice: the retry executor, the reqwest
//! middleware (through the executor) and the penalties endpoint of the HTTP
//! API all call [`parse_retry_after`], so a Rust worker and a worker in any
//! other language reporting the same 429 get the same penalty.
//!
//! HTTP dates are parsed by the `httpdate` crate, which accepts all three forms
//! RFC 9110 §5.6.7 requires recipients to accept (IMF-fixdate, RFC 850 and
//! asctime) and checks that the weekday matches the date. One gap is covered
//! here: for the two-digit year of the RFC 850 form, `httpdate` uses a fixed
//! pivot (`< 70` means 20xx) while RFC 9110 says a year that appears to be more
//! than 50 years in the future means the most recent past year with the same
//! last two digits (so a year up to 50 years ahead is read as in the future).
//! We rewrite RFC 850 dates to IMF-fixdate with the century RFC 9110 picks,
//! relative to `now`, before handing them to `httpdate`.
//!
//! Invalid values are an error (the executor falls back to its policy delay;
//! the API answers 422); dates in the past mean zero; every value is capped at
//! [`MAX_RETRY_AFTER`].

use std::time::{Duration, SystemTime};

use crate::clock::Timestamp;

/// The header's name, lower-case as `http` spells it.
pub const RETRY_AFTER: &str = "retry-after";

/// The longest `Retry-After` believed: a week. Longer values (a date in 2099,
/// delay-seconds past `u64`) are a broken upstream or a typo; believed whole
/// they would silence a bucket for decades, so they are capped here, once, for
/// every caller. The executor caps its pauses further by the wait ceiling.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(7 * 86_400);

/// A `Retry-After` value that is neither delay-seconds nor an HTTP-date.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "must be delay-seconds (a whole number of seconds, e.g. 120) or an HTTP-date \
     (e.g. Sun, 06 Nov 1994 08:49:37 GMT), as RFC 9110 defines Retry-After"
)]
pub struct InvalidRetryAfter;

/// How long the upstream asks us to wait, measured from `now`, at most
/// [`MAX_RETRY_AFTER`].
pub fn parse_retry_after(value: &str, now: Timestamp) -> Result<Duration, InvalidRetryAfter> {
    let value = value.trim_matches(|c| c == ' ' || c == '\t');
    if value.is_empty() {
        return Err(InvalidRetryAfter);
    }
    let wait = if value.bytes().all(|b| b.is_ascii_digit()) {
        // delay-seconds = 1*DIGIT; anything longer than u64 is "very long".
        Duration::from_secs(value.parse::<u64>().unwrap_or(u64::MAX))
    } else {
        let at = parse_http_date(value, now).ok_or(InvalidRetryAfter)?;
        Timestamp::from_system_time(at).saturating_duration_since(now)
    };
    Ok(wait.min(MAX_RETRY_AFTER))
}

/// `Retry-After` read from a header map; absent, non-UTF-8 or invalid values
/// give `None`.
pub fn retry_after_from_headers(headers: &http::HeaderMap, now: Timestamp) -> Option<Duration> {
    let value = headers.get(RETRY_AFTER)?.to_str().ok()?;
    parse_retry_after(value, now).ok()
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

/// The year ending in `yy` that lies in `(current_year − 50, current_year + 50]`:
/// up to 50 years ahead is read as the future, anything further ahead as the
/// most recent past year with those last two digits (RFC 9110 §5.6.7).
fn rfc9110_year(yy: i64, current_year: i64) -> i64 {
    let century = current_year - current_year.rem_euclid(100);
    let mut year = century + yy;
    if year > current_year + 50 {
        year -= 100;
    } else if year <= current_year - 50 {
        year += 100;
    }
    year
}

/// The Gregorian year of `now` (UTC).
fn civil_year(now: Timestamp) -> i64 {
    time::OffsetDateTime::from_unix_timestamp(now.as_secs())
        .map_or(1970, |t| i64::from(t.year()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::retry::retry_after_cases::{CASES, NOW};

    #[test]
    fn every_value_in_the_shared_table_means_what_the_table_says() {
        for case in CASES {
            let got = parse_retry_after(case.value, NOW).ok();
            assert_eq!(got, case.wait_secs.map(Duration::from_secs), "{:?}", case.value);
        }
    }

    #[test]
    fn no_value_waits_longer_than_the_cap() {
        let now = Timestamp::from_secs(0);
        assert_eq!(parse_retry_after("99999999999999999999999999", now), Ok(MAX_RETRY_AFTER));
        assert_eq!(parse_retry_after("604799", now), Ok(Duration::from_secs(604_799)));
        assert_eq!(parse_retry_after("Fri, 01 Jan 2100 00:00:00 GMT", now), Ok(MAX_RETRY_AFTER));
    }

    #[test]
    fn rfc850_two_digit_years_follow_the_fifty_year_rule_not_a_fixed_pivot() {
        // From 2026: "75" is 2075 (49 years ahead), "77" is 1977 (2077 would be
        // 51 years ahead). httpdate alone would read both as 197x.
        assert_eq!(rfc9110_year(75, 2026), 2075);
        assert_eq!(rfc9110_year(76, 2026), 2076);
        assert_eq!(rfc9110_year(77, 2026), 1977);
        assert_eq!(rfc9110_year(26, 2026), 2026);
        assert_eq!(rfc9110_year(94, 2026), 1994);
        // Late in a century the next one is the near future.
        assert_eq!(rfc9110_year(5, 2060), 2105);
        assert_eq!(rfc9110_year(44, 1994), 2044);
        assert_eq!(rfc9110_year(45, 1994), 1945);
        let now = Timestamp::from_secs(1_767_225_600); // 2026-01-01T00:00:00Z
        // 2026-01-02 was a Friday.
        assert_eq!(parse_retry_after("Friday, 02-Jan-26 00:00:00 GMT", now), Ok(Duration::from_secs(86_400)));
        // "75" is 2075 (a Tuesday), far ahead: capped. A fixed pivot reads 1975, long past.
        assert_eq!(parse_retry_after("Tuesday, 01-Jan-75 00:00:00 GMT", now), Ok(MAX_RETRY_AFTER));
        assert_eq!(parse_retry_after("Wednesday, 01-Jan-75 00:00:00 GMT", now), Err(InvalidRetryAfter));
    }

    #[test]
    fn civil_year_reads_the_calendar_year_of_an_instant() {
        assert_eq!(civil_year(Timestamp::from_secs(0)), 1970);
        assert_eq!(civil_year(Timestamp::from_secs(1_767_225_600)), 2026);
        assert_eq!(civil_year(Timestamp::from_secs(1_767_225_599)), 2025);
        assert_eq!(civil_year(Timestamp::from_secs(951_782_400)), 2000); // 2000-02-29
    }

    #[test]
    fn the_header_is_read_from_a_header_map_and_garbage_is_ignored() {
        let mut headers = http::HeaderMap::new();
        let now = Timestamp::from_secs(0);
        assert_eq!(retry_after_from_headers(&headers, now), None);
        headers.insert(RETRY_AFTER, http::HeaderValue::from_static("7"));
        assert_eq!(retry_after_from_headers(&headers, now), Some(Duration::from_secs(7)));
        headers.insert(RETRY_AFTER, http::HeaderValue::from_static("1.5"));
        assert_eq!(retry_after_from_headers(&headers, now), None);
    }
}
