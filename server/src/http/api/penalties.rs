//! `POST /api/v1/penalties`: report an upstream 429 and/or its rate-limit headers.

use std::time::{Duration, UNIX_EPOCH};

use axum::extract::State;
use serde::{Deserialize, Serialize};
use sluice_engine::clock::Timestamp;
use sluice_engine::quota::RateLimitHeaders;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::auth::Caller;
use super::error::{ApiError, ErrorOut, Json};
use super::permits::ceil_millis;
use super::quota_input::{no_rule, TargetIn};
use crate::state::AppState;
use sluice_engine::tokens::ApiScope;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(create_penalty))
}

/// A header value as the upstream sent it: a string, or a number for convenience.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum HeaderIn {
    Number(f64),
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
pub struct PenaltyIn {
    pub account: Option<String>,
    pub scope: String,
    pub method: Option<String>,
    pub path: String,
    /// True when the upstream answered 429.
    #[serde(default)]
    pub status_429: bool,
    /// The upstream's `Retry-After`: seconds, or an HTTP date.
    #[schema(value_type = Option<String>)]
    pub retry_after: Option<HeaderIn>,
    /// The upstream's `X-RateLimit-Remaining`.
    #[schema(value_type = Option<String>)]
    pub rate_limit_remaining: Option<HeaderIn>,
    /// The upstream's `X-RateLimit-Reset` (seconds from now, or Unix seconds).
    #[schema(value_type = Option<String>)]
    pub rate_limit_reset: Option<HeaderIn>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct PenaltyOut {
    /// How long the bucket is now blocked (after a 429).
    pub blocked_ms: Option<u64>,
    /// Whether rate-limit headers lowered the bucket.
    pub observed: bool,
}

/// The longest `Retry-After` believed: a week. Longer (a date in 2099) is a
/// broken upstream or a typo, and would silence the bucket for decades.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(7 * 86_400);

/// `Retry-After` as seconds or an HTTP date; `None` when it is neither or beyond a week.
fn parse_retry_after(value: &str, now: Timestamp) -> Option<Duration> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<f64>() {
        return (secs.is_finite() && (0.0..=MAX_RETRY_AFTER.as_secs_f64()).contains(&secs)).then(|| Duration::from_secs_f64(secs));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    let at_ms = i64::try_from(at.duration_since(UNIX_EPOCH).ok()?.as_millis()).ok()?;
    let wait = Duration::from_millis(at_ms.saturating_sub(now.as_millis()).max(0) as u64);
    (wait <= MAX_RETRY_AFTER).then_some(wait)
}

#[utoipa::path(post, path = "/api/v1/penalties", tag = "quota", request_body = PenaltyIn,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Recorded", body = PenaltyOut),
        (status = 422, description = "No rule, nothing to report, or unreadable header values", body = ErrorOut),
        (status = 401, description = "Missing or wrong token", body = ErrorOut),
    ))]
pub async fn create_penalty(State(state): State<AppState>, caller: Caller, Json(input): Json<PenaltyIn>) -> Result<Json<PenaltyOut>, ApiError> {
    caller.require(ApiScope::Worker)?;
    let now = state.clock.now();
    let target = TargetIn { account: input.account, scope: input.scope, method: input.method, path: input.path };
    let req = target.to_request()?;
    let Some(rule) = state.limiter.resolve(&req.scope, &req.method, &req.path) else {
        return Err(no_rule(&target));
    };
    let retry_after = match &input.retry_after {
        None => None,
        Some(v) => Some(parse_retry_after(&v.text(), now).ok_or_else(|| {
            ApiError::invalid("invalid_input", "retry_after must be seconds or an HTTP date, at most 7 days ahead")
        })?),
    };
    let remaining = input.rate_limit_remaining.as_ref().map(HeaderIn::text);
    let reset = input.rate_limit_reset.as_ref().map(HeaderIn::text);
    let headers = RateLimitHeaders::parse(remaining.as_deref(), reset.as_deref(), now);
    if remaining.is_some() && headers.remaining.is_none() {
        return Err(ApiError::invalid("invalid_input", "rate_limit_remaining must be a whole number"));
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_reads_seconds_and_http_dates() {
        let now = Timestamp::from_millis(1_445_412_480_000); // Wed, 21 Oct 2015 07:28:00 GMT
        assert_eq!(parse_retry_after("120", now), Some(Duration::from_secs(120)));
        assert_eq!(parse_retry_after("Wed, 21 Oct 2015 07:29:00 GMT", now), Some(Duration::from_secs(60)));
        assert_eq!(parse_retry_after("Wed, 21 Oct 2015 07:27:00 GMT", now), Some(Duration::ZERO));
        assert_eq!(parse_retry_after("-1", now), None);
        assert_eq!(parse_retry_after("Wed, 21 Oct 2099 07:28:00 GMT", now), None);
        assert_eq!(parse_retry_after("soon", now), None);
    }
}
