//! `POST /api/v1/penalties`: report an upstream 429 and/or its rate-limit headers.

use axum::extract::State;
use serde::{Deserialize, Serialize};
use sluice_engine::quota::RateLimitHeaders;
use sluice_engine::retry::retry_after::parse_retry_after;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::auth::Caller;
use super::error::{ApiError, ErrorOut, FieldError, Json, ValidationErrorOut};
use super::permits::ceil_millis;
use super::quota_input::{no_rule, reject, TargetIn};
use crate::state::AppState;
use sluice_engine::tokens::ApiScope;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(create_penalty))
}

/// A header value as the upstream sent it: a string, or a JSON number for
/// convenience. Numbers are read as their JSON text, so `1.5` is refused
/// like the header `1.5` would be.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum HeaderIn {
    Number(serde_json::Number),
    Text(String),
}

impl HeaderIn {
    fn text(&self) -> String {
        match self {
            HeaderIn::Number(n) => n.to_string(),
            HeaderIn::Text(s) => s.clone(),
        }
    }
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({
    "account": "seller-42", "scope": "vtex_pricing", "method": "PUT", "path": "/api/pricing/prices/42",
    "status_429": true, "retry_after": "30"
}))]
pub struct PenaltyIn {
    #[schema(schema_with = super::quota_input::account_schema)]
    pub account: Option<String>,
    /// API domain, e.g. `vtex_pricing`.
    pub scope: String,
    /// HTTP method of the upstream call.
    pub method: Option<String>,
    /// Concrete path of the upstream call.
    pub path: String,
    /// True when the upstream answered 429.
    #[serde(default)]
    pub status_429: bool,
    /// The upstream's `Retry-After` as sent: delay-seconds or an HTTP-date
    /// (RFC 9110, all three date forms); capped at 7 days. Implies a 429.
    #[schema(value_type = Option<String>, example = "30")]
    pub retry_after: Option<HeaderIn>,
    /// The upstream's `X-RateLimit-Remaining` (a whole number).
    #[schema(value_type = Option<String>, example = "0")]
    pub rate_limit_remaining: Option<HeaderIn>,
    /// The upstream's `X-RateLimit-Reset`: seconds from now, or Unix seconds (above 10^9).
    #[schema(value_type = Option<String>, example = "12")]
    pub rate_limit_reset: Option<HeaderIn>,
    /// Accepted (so a worker can send its permit's fields) and ignored: a 429 blocks every lane.
    #[schema(schema_with = super::quota_input::priority_schema)]
    pub priority: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct PenaltyOut {
    /// How long the bucket is now blocked (after a 429).
    pub blocked_ms: Option<u64>,
    /// Whether rate-limit headers lowered the bucket.
    pub observed: bool,
}

#[utoipa::path(post, path = "/api/v1/penalties", tag = "quota", request_body = PenaltyIn,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Recorded", body = PenaltyOut),
        (status = 422, description = "No rule (`no_rule`), nothing to report, or unreadable header values (`invalid_input`, naming the fields)", body = ValidationErrorOut),
        (status = 503, description = "Quota store unavailable (`store_unavailable`)", body = ErrorOut),
    ))]
pub async fn create_penalty(State(state): State<AppState>, caller: Caller, Json(input): Json<PenaltyIn>) -> Result<Json<PenaltyOut>, ApiError> {
    caller.require(ApiScope::Worker)?;
    let now = state.clock.now();
    let (account, scope, method, path, priority) = (input.account, input.scope, input.method, input.path, input.priority);
    let target = TargetIn { account, scope, method, path, priority };
    let mut problems = target.problems();
    let retry_after = input.retry_after.as_ref().and_then(|v| match parse_retry_after(&v.text(), now) {
        Ok(wait) => Some(wait),
        Err(e) => {
            problems.push(FieldError::new("retry_after", e.to_string()));
            None
        }
    });
    let remaining = input.rate_limit_remaining.as_ref().map(HeaderIn::text);
    let reset = input.rate_limit_reset.as_ref().map(HeaderIn::text);
    let headers = RateLimitHeaders::parse(remaining.as_deref(), reset.as_deref(), now);
    if remaining.is_some() && headers.remaining.is_none() {
        problems.push(FieldError::new("rate_limit_remaining", "must be a whole number, as X-RateLimit-Remaining"));
    }
    if reset.is_some() && headers.reset_in.is_none() {
        problems.push(FieldError::new("rate_limit_reset", "must be seconds from now, or Unix seconds, as X-RateLimit-Reset"));
    }
    reject(problems)?;
    let req = target.request();
    let Some(rule) = state.limiter.resolve(&req.scope, &req.method, &req.path) else {
        return Err(no_rule(&target));
    };
    let is_429 = input.status_429 || retry_after.is_some();
    if !is_429 && headers.remaining.is_none() {
        return Err(ApiError::invalid(
            "invalid_input",
            "nothing to report: give status_429, retry_after or rate_limit_remaining",
        ));
    }
    let mut out = PenaltyOut { blocked_ms: None, observed: false };
    if is_429 {
        out.blocked_ms = state.limiter.penalize(&req, retry_after).await?.map(ceil_millis);
        // Labelled by the rule's scope: rules are few, request scopes are client input.
        crate::telemetry::record_penalty(&rule.scope);
    }
    if headers.remaining.is_some() {
        state.limiter.observe(&req, headers).await?;
        out.observed = true;
    }
    Ok(Json(out))
}
