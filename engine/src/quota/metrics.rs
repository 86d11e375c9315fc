//! Counters of the limiter's decisions through the `metrics` facade, so every
//! caller (HTTP API, retry middleware, in-process workers) is counted once,
//! per instance. The server installs the Prometheus exporter; without a
//! recorder these calls do nothing.
//!
//! Labels are bounded: `scope` comes from a rule (admins create those), never
//! from the request, which is why a request matching no rule is counted under
//! scope `_none`; `lane` is one of three priority names.

use super::lane::Priority;
use super::outcome::Outcome;

/// Decisions by `scope`, `lane` (`high` / `normal` / `low`), `result`
/// (`granted` / `refused`) and `reason` (empty for grants; a
/// [`super::RefusalReason`] otherwise).
pub const DECISIONS: &str = "sluice_quota_decisions_total";
/// Booked waits of granted permits, seconds, by `scope` and `lane`.
pub const WAIT_SECONDS: &str = "sluice_quota_wait_seconds";
/// Upstream 429s reported (`penalize`), by scope.
pub const PENALTIES: &str = "sluice_quota_penalties_total";

/// The scope label of a request no rule governs.
pub const NO_RULE_SCOPE: &str = "_none";

pub(crate) fn record_decision(scope: &str, lane: Priority, outcome: &Outcome) {
    let lane = lane.as_str();
    match outcome {
        Outcome::Granted(permit) => {
            metrics::counter!(DECISIONS, "scope" => scope.to_owned(), "lane" => lane, "result" => "granted", "reason" => "")
                .increment(1);
            metrics::histogram!(WAIT_SECONDS, "scope" => scope.to_owned(), "lane" => lane).record(permit.wait.as_secs_f64());
        }
        Outcome::Refused(refusal) => {
            let reason = refusal.reason.as_str();
            metrics::counter!(DECISIONS, "scope" => scope.to_owned(), "lane" => lane, "result" => "refused", "reason" => reason)
                .increment(1);
        }
    }
}

pub(crate) fn record_penalty(scope: &str) {
    metrics::counter!(PENALTIES, "scope" => scope.to_owned()).increment(1);
}
