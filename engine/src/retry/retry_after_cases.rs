//! One table of `Retry-After` values and what they mean, read at [`NOW`].
//!
//! The engine's parser tests and the HTTP API's penalties tests both walk it,
//! so the parser and every entry point using it cannot drift apart. Built
//! only for tests (`cfg(test)` or the `testing` feature).

use crate::clock::Timestamp;

/// 1994-11-06T08:47:37Z: two minutes before RFC 9110's example date.
pub const NOW: Timestamp = Timestamp::from_secs(784_111_657);

/// One value and how many seconds of wait it means at [`NOW`]; `None`: the
/// parser rejects it (the executor ignores it, the API answers 422).
#[derive(Debug, Clone, Copy)]
pub struct Case {
    pub value: &'static str,
    pub wait_secs: Option<u64>,
}

const fn case(value: &'static str, wait_secs: Option<u64>) -> Case {
    Case { value, wait_secs }
}

/// A week: [`super::retry_after::MAX_RETRY_AFTER`] in seconds.
const CAP: Option<u64> = Some(7 * 86_400);

pub const CASES: &[Case] = &[
    // RFC 9110's example date in the three forms recipients must accept.
    case("Sun, 06 Nov 1994 08:49:37 GMT", Some(120)),
    case("Sunday, 06-Nov-94 08:49:37 GMT", Some(120)),
    case("Sun Nov  6 08:49:37 1994", Some(120)),
    // delay-seconds = 1*DIGIT, with optional whitespace around the field value.
    case("120", Some(120)),
    case("0", Some(0)),
    case("  120 ", Some(120)),
    case("\t7", Some(7)),
    case("007", Some(7)),
    // Now, or already past: no wait.
    case("Sun, 06 Nov 1994 08:47:37 GMT", Some(0)),
    case("Sun, 06 Nov 1994 07:49:37 GMT", Some(0)),
    case("Sun Nov  6 07:49:37 1994", Some(0)),
    // Capped at a week, however far.
    case("604800", CAP),
    case("604801", CAP),
    case("18446744073709551615", CAP),
    case("99999999999999999999999999", CAP),
    case("Fri, 01 Jan 2100 00:00:00 GMT", CAP),
    // RFC 850's two-digit year: up to 50 years ahead is the future (2044, not
    // 1944). Further ahead is the past: 1945, before 1970, which `httpdate`
    // cannot represent, so it is refused like any unreadable value.
    case("Friday, 01-Jan-44 00:00:00 GMT", CAP),
    case("Monday, 01-Jan-45 00:00:00 GMT", None),
    // Not delay-seconds and not an HTTP-date.
    case("", None),
    case("   ", None),
    case("-1", None),
    case("+5", None),
    case("1.5", None),
    case("1e3", None),
    case("0x10", None),
    case("120s", None),
    case("soon", None),
    case("Mon, 06 Nov 1994 08:49:37 GMT", None), // wrong weekday
    case("Sun, 06 Nov 1994 08:49:37 UTC", None),
    case("Sun, 31 Feb 1994 08:49:37 GMT", None),
    case("Sun, 06 Nov 1994 25:49:37 GMT", None),
    case("Sunday, 06-Nov-1994 08:49:37 GMT", None),
    case("Sunday, 06-Nov-94", None),
];
