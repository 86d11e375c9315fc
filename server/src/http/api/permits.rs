//! `POST /api/v1/permits`: ask the upstream breaker and the limiter for a
//! permit (see `sluice_engine::upstream_breaker::permits` for the order).

use std::time::Duration;

use axum::extract::State;
use axum::http::header::RETRY_AFTER;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use sluice_engine::quota::{Outcome, QuotaError, Refusal, RefusalReason};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::auth::Caller;
use super::error::{ApiError, FieldError, Json, ValidationErrorOut};
use super::leases::encode_lease_id;
use super::quota_input::{no_rule, reject, TargetIn};
use crate::state::AppState;
use sluice_engine::tokens::ApiScope;

/// The longest wait a caller may ask for (rules allow at most one hour too).
const MAX_WAIT_MS: u64 = 3_600_000;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(create_permit))
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({
    "account": "seller-42", "scope": "vtex_pricing", "method": "PUT", "path": "/api/pricing/prices/42", "cost": 1, "max_wait_ms": 5000,
    "priority": "high"
}))]
pub struct PermitIn {
    #[schema(schema_with = super::quota_input::account_schema)]
    pub account: Option<String>,
    /// API domain, e.g. `vtex_pricing`.
    pub scope: String,
    /// HTTP method of the upstream call; without it only rules for any method match.
    pub method: Option<String>,
    /// Concrete path of the upstream call.
    pub path: String,
    /// Tokens to spend (default 1; at most the rule's capacity).
    pub cost: Option<u32>,
    /// The longest acceptable wait; the rule's floor (interval + 5 s) still applies.
    pub max_wait_ms: Option<u64>,
    /// Hold the HTTP request for the booked wait instead of returning it.
    #[serde(default)]
    pub hold: bool,
    #[schema(schema_with = super::quota_input::priority_schema)]
    pub priority: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct PermitOut {
    /// Always true.
    pub granted: bool,
    /// Milliseconds to wait before sending (0 when the server held the request).
    pub wait_ms: u64,
    /// Milliseconds the server held the request (`hold: true`).
    pub held_ms: u64,
    /// For concurrency rules: give it back with `DELETE /api/v1/leases/{id}`.
    pub lease_id: Option<String>,
    /// The rule is in shadow mode (never blocks).
    pub shadow: bool,
    /// The longest wait this request could have been given (the rule's wait
    /// ceiling, or `max_wait_ms` within the rule's floor): retry helpers cap
    /// their pauses after a 429 by it, as the Rust executor does.
    pub wait_ceiling_ms: u64,
    /// The upstream breaker of this account and scope is half-open and this
    /// call is its probe: report the outcome to `POST /api/v1/upstream-breakers/report`
    /// (`"error": "not_sent"` if the call is not made).
    pub probe: bool,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct RefusalOut {
    /// Always false.
    pub granted: bool,
    /// `wait_ceiling_exceeded`, `concurrency_limit`, `store_unavailable`, `breaker_open`.
    pub reason: String,
    /// When a slot would be free; also sent as `Retry-After` in whole seconds, rounded up.
    pub retry_after_ms: Option<u64>,
}

/// Round a duration up to whole milliseconds (never understate a wait).
pub fn ceil_millis(d: Duration) -> u64 {
    d.as_micros().div_ceil(1000) as u64
}

#[utoipa::path(post, path = "/api/v1/permits", tag = "quota", request_body = PermitIn,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Granted", body = PermitOut),
        (status = 429, description = "Refused (`wait_ceiling_exceeded`, `concurrency_limit`, or `breaker_open`: \
            the upstream breaker of this account and scope is open); see Retry-After", body = RefusalOut,
            headers(("Retry-After" = u64, description = "Seconds until a permit may be granted, rounded up"))),
        (status = 503, description = "Quota store unavailable (reason `store_unavailable`)", body = RefusalOut),
        (status = 422, description = "No rule (`no_rule`), bad cost (`invalid_cost`), account (`invalid_account`) or other field (`invalid_input`, e.g. a `priority` other than high, normal, low)", body = ValidationErrorOut),
    ))]
pub async fn create_permit(State(state): State<AppState>, caller: Caller, Json(input): Json<PermitIn>) -> Result<Response, ApiError> {
    caller.require(ApiScope::Worker)?;
    let (account, scope, method, path, priority) = (input.account, input.scope, input.method, input.path, input.priority);
    let target = TargetIn { account, scope, method, path, priority };
    let mut problems = target.problems();
    if input.max_wait_ms.is_some_and(|ms| ms > MAX_WAIT_MS) {
        problems.push(FieldError::new("max_wait_ms", format!("must be at most {MAX_WAIT_MS}")));
    }
    reject(problems)?;
    let mut req = target.request().cost(input.cost.unwrap_or(1));
    if let Some(ms) = input.max_wait_ms {
        req = req.max_wait(Duration::from_millis(ms));
    }
    let decided = state.permits.permit(&req, input.hold).await;
    let gated = match decided {
        Ok(gated) => gated,
        // A store error is the same answer as the fail-closed policy's refusal,
        // so a 503 from this route always has one body.
        Err(QuotaError::Store(e)) => {
            tracing::error!(error = %e, "quota store unavailable");
            let refusal = Refusal { reason: RefusalReason::StoreUnavailable, retry_after: None, rule: None };
            sluice_engine::upstream_breaker::permits::GatedOutcome { outcome: Outcome::Refused(refusal), probe: false }
        }
        Err(e) => return Err(e.into()),
    };
    match gated.outcome {
        Outcome::Granted(permit) => {
            let waited = ceil_millis(permit.wait);
            crate::telemetry::record_permit(waited);
            let out = PermitOut {
                granted: true,
                wait_ms: if input.hold { 0 } else { waited },
                held_ms: if input.hold { waited } else { 0 },
                lease_id: permit.lease.as_ref().map(encode_lease_id),
                shadow: permit.shadow,
                wait_ceiling_ms: state
                    .limiter
                    .resolve(&req.scope, &req.method, &req.path)
                    .map_or(0, |rule| ceil_millis(rule.wait_ceiling(input.max_wait_ms.map(Duration::from_millis)))),
                probe: gated.probe,
            };
            Ok(Json(out).into_response())
        }
        Outcome::Refused(refusal) => {
            crate::telemetry::record_refusal(refusal.reason.as_str());
            if refusal.reason == RefusalReason::NoRule {
                return Err(no_rule(&target));
            }
            let status = if refusal.reason == RefusalReason::StoreUnavailable {
                StatusCode::SERVICE_UNAVAILABLE
            } else {
                StatusCode::TOO_MANY_REQUESTS
            };
            let out = RefusalOut {
                granted: false,
                reason: refusal.reason.as_str().to_owned(),
                retry_after_ms: refusal.retry_after.map(ceil_millis),
            };
            let mut response = (status, Json(out)).into_response();
            if let Some(secs) = refusal.retry_after_secs() {
                response.headers_mut().insert(RETRY_AFTER, HeaderValue::from(secs));
            }
            Ok(response)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_are_rounded_up_to_whole_milliseconds() {
        assert_eq!(ceil_millis(Duration::from_micros(1)), 1);
        assert_eq!(ceil_millis(Duration::from_micros(1000)), 1);
        assert_eq!(ceil_millis(Duration::from_micros(1001)), 2);
        assert_eq!(ceil_millis(Duration::ZERO), 0);
    }
}
