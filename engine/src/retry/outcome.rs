//! What one attempt at an upstream call came to, and whether it may be tried
//! again.
//!
//! Classification is by status code and transport error only; the body is
//! never read here (a 429 from a marketplace is usually
//! `application/problem+json` without any waiting time in it).

use http::{Method, StatusCode};

/// The class of one attempt's result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// 2xx.
    Success,
    /// 429: the upstream's own counter disagrees with our bucket.
    RateLimited,
    /// 5xx.
    ServerError,
    /// No response: the connection failed, was reset, or the call timed out.
    Network(NetworkFailure),
    /// 401, 403, 404 and every other status that a retry will not fix
    /// (other 4xx, 1xx and 3xx that reached us).
    NonRetryable,
}

/// Why an attempt produced no response.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NetworkFailure {
    /// The connection was never established: the request did not leave, so a
    /// retry is safe for every method.
    Connect,
    /// The call ran out of time; the upstream may or may not have acted on it.
    Timeout,
    /// The connection broke after the request may have been sent (reset,
    /// truncated body). As ambiguous as a timeout.
    Other,
}

impl Outcome {
    /// Classify a received status code.
    pub fn from_status(status: StatusCode) -> Outcome {
        if status.is_success() {
            Outcome::Success
        } else if status == StatusCode::TOO_MANY_REQUESTS {
            Outcome::RateLimited
        } else if status.is_server_error() {
            Outcome::ServerError
        } else {
            Outcome::NonRetryable
        }
    }

    /// Whether this outcome counts against the upstream circuit breaker.
    /// A 429 or a 4xx proves the upstream is up and answering, so only 5xx and
    /// network failures count.
    pub fn is_upstream_failure(self) -> bool {
        matches!(self, Outcome::ServerError | Outcome::Network(_))
    }

    /// Whether the request may have reached the upstream although no answer
    /// came back (a timeout or a broken connection): repeating it is safe
    /// only for idempotent methods or requests marked safe.
    pub fn may_have_reached_upstream(self) -> bool {
        matches!(self, Outcome::Network(NetworkFailure::Timeout | NetworkFailure::Other))
    }

    /// Whether a retry of a request with this outcome is allowed at all.
    ///
    /// A request that may have reached the upstream (timeout, broken
    /// connection) is retried only when repeating it is harmless: the method is
    /// idempotent, or the caller marked the request as safe to repeat.
    pub fn is_retryable(self, repeat_is_safe: bool) -> bool {
        match self {
            Outcome::Success | Outcome::NonRetryable => false,
            Outcome::RateLimited | Outcome::ServerError => true,
            Outcome::Network(NetworkFailure::Connect) => true,
            Outcome::Network(NetworkFailure::Timeout | NetworkFailure::Other) => repeat_is_safe,
        }
    }
}

/// Idempotent methods per RFC 9110 §9.2.2: repeating them has the same effect
/// on the server as sending them once.
pub fn is_idempotent(method: &Method) -> bool {
    matches!(
        *method,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE | Method::PUT | Method::DELETE
    )
}

/// Classify a `reqwest` transport error.
pub fn classify_reqwest_error(err: &reqwest::Error) -> NetworkFailure {
    if err.is_timeout() {
        NetworkFailure::Timeout
    } else if err.is_connect() {
        NetworkFailure::Connect
    } else {
        NetworkFailure::Other
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_fall_into_the_five_classes() {
        let cases = [
            (200, Outcome::Success),
            (204, Outcome::Success),
            (429, Outcome::RateLimited),
            (500, Outcome::ServerError),
            (503, Outcome::ServerError),
            (401, Outcome::NonRetryable),
            (403, Outcome::NonRetryable),
            (404, Outcome::NonRetryable),
            (409, Outcome::NonRetryable),
            (422, Outcome::NonRetryable),
            (304, Outcome::NonRetryable),
        ];
        for (code, want) in cases {
            let status = StatusCode::from_u16(code).expect("valid status");
            assert_eq!(Outcome::from_status(status), want, "status {code}");
        }
    }

    #[test]
    fn a_timeout_is_retried_only_when_repeating_is_safe() {
        let timeout = Outcome::Network(NetworkFailure::Timeout);
        assert!(!timeout.is_retryable(false));
        assert!(timeout.is_retryable(true));
        assert!(Outcome::Network(NetworkFailure::Connect).is_retryable(false));
        assert!(!Outcome::Network(NetworkFailure::Other).is_retryable(false));
        assert!(Outcome::RateLimited.is_retryable(false));
        assert!(Outcome::ServerError.is_retryable(false));
        assert!(!Outcome::NonRetryable.is_retryable(true));
    }

    #[test]
    fn only_server_errors_and_network_failures_count_against_the_breaker() {
        assert!(Outcome::ServerError.is_upstream_failure());
        assert!(Outcome::Network(NetworkFailure::Timeout).is_upstream_failure());
        assert!(!Outcome::RateLimited.is_upstream_failure());
        assert!(!Outcome::NonRetryable.is_upstream_failure());
        assert!(!Outcome::Success.is_upstream_failure());
    }

    #[test]
    fn post_and_patch_are_not_idempotent() {
        assert!(is_idempotent(&Method::GET));
        assert!(is_idempotent(&Method::PUT));
        assert!(is_idempotent(&Method::DELETE));
        assert!(!is_idempotent(&Method::POST));
        assert!(!is_idempotent(&Method::PATCH));
    }
}
