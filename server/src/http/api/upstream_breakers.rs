//! The upstream circuit breakers over HTTP, so workers in any language share
//! them with the Rust executor: ask before calling an upstream (`admit`),
//! report how the call went (`report`), list them, and (admin tokens) reset
//! one with a reason, audited like the Breakers page's reset. The contract
//! is written down in docs/retry.md ("Upstream breaker over HTTP").

use axum::extract::State;
use axum::http::header::RETRY_AFTER;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use sluice_engine::upstream_breaker::admin::{UpstreamBreakerAdminError, MAX_REASON_CHARS};
use sluice_engine::upstream_breaker::{BreakerError, BreakerKey, BreakerView, Phase, UpstreamAdmission};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::auth::{AdminCaller, Caller};
use super::error::{ApiError, ErrorOut, FieldError, Json, ValidationErrorOut};
use super::permits::ceil_millis;
use crate::state::AppState;
use sluice_engine::tokens::ApiScope;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_upstream_breakers))
        .routes(routes!(admit_upstream_call))
        .routes(routes!(report_upstream_outcome))
        .routes(routes!(reset_upstream_breaker))
}

/// Which breaker: an account's calls to one API scope.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"account": "acct42", "scope": "vtex_pricing"}))]
pub struct AdmitIn {
    /// Upstream account (1–128 characters, no braces); without it `_global`.
    pub account: Option<String>,
    /// API scope, the same as in permits (1–128 characters, no braces).
    pub scope: String,
    /// Accepted and ignored: a breaker admits every lane alike.
    #[schema(schema_with = super::quota_input::priority_schema)]
    pub priority: Option<String>,
}

/// A breaker's phase.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum BreakerStateOut {
    Closed,
    Open,
    HalfOpen,
}

impl From<Phase> for BreakerStateOut {
    fn from(p: Phase) -> Self {
        match p {
            Phase::Closed => BreakerStateOut::Closed,
            Phase::Open => BreakerStateOut::Open,
            Phase::HalfOpen => BreakerStateOut::HalfOpen,
        }
    }
}

/// One upstream breaker.
#[derive(Debug, Serialize, ToSchema)]
pub struct UpstreamBreakerOut {
    pub account: String,
    pub scope: String,
    pub state: BreakerStateOut,
    /// Failures in a row while closed (5 open it).
    pub consecutive_failures: u32,
    /// Successful probes since it went half-open (3 close it).
    pub probe_successes: u32,
    /// How many times it has opened.
    pub trips: u64,
    /// When it last opened (Unix milliseconds).
    pub opened_at_ms: Option<i64>,
    /// When an open breaker lets the next probe through (Unix milliseconds).
    pub next_probe_at_ms: Option<i64>,
}

impl From<BreakerView> for UpstreamBreakerOut {
    fn from(v: BreakerView) -> Self {
        UpstreamBreakerOut {
            account: v.account,
            scope: v.scope,
            state: v.phase.into(),
            consecutive_failures: v.consecutive_failures,
            probe_successes: v.probe_successes,
            trips: v.trips,
            opened_at_ms: v.opened_at.map(|t| t.as_millis()),
            next_probe_at_ms: v.next_probe_at.map(|t| t.as_millis()),
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct UpstreamBreakersOut {
    /// Every breaker that recorded something in the last 24 hours, by account and scope.
    pub breakers: Vec<UpstreamBreakerOut>,
}

/// What the breaker says to a caller about to call the upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum AdmissionDecision {
    /// Closed: call.
    Closed,
    /// Half-open: call; this call is the probe. Report its outcome (or `not_sent`).
    Probe,
    /// Open, or another caller's probe is in flight: do not call before `retry_after_ms`.
    Open,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct AdmissionOut {
    pub decision: AdmissionDecision,
    /// `decision` is `closed` or `probe`.
    pub allowed: bool,
    /// When `open`: milliseconds until a probe may go (also `Retry-After`, whole seconds rounded up).
    pub retry_after_ms: Option<u64>,
    /// The breaker after this admission.
    pub breaker: UpstreamBreakerOut,
}

/// Why a call produced no response, or that it was not made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum CallErrorIn {
    /// The connection could not be established.
    Connect,
    /// The call timed out.
    Timeout,
    /// The connection broke (reset, truncated response).
    Network,
    /// An admitted call (a probe) was never sent: frees the probe at once.
    NotSent,
}

/// How one upstream call went: its HTTP `status`, or an `error`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"account": "acct42", "scope": "vtex_pricing", "status": 503}))]
pub struct ReportIn {
    pub account: Option<String>,
    pub scope: String,
    /// The upstream's HTTP status (100–599). 5xx counts as a failure; every
    /// other status (429 and 4xx included) proves the upstream is up.
    #[schema(minimum = 100, maximum = 599)]
    pub status: Option<u16>,
    /// Instead of `status`, when there was no response. `connect`, `timeout`
    /// and `network` count as failures.
    pub error: Option<CallErrorIn>,
    /// Accepted and ignored: a breaker counts every lane alike.
    #[schema(schema_with = super::quota_input::priority_schema)]
    pub priority: Option<String>,
}

/// How a report was counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum CountedAs {
    Success,
    Failure,
    NotSent,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ReportOut {
    pub counted_as: CountedAs,
    /// The breaker after this report.
    pub breaker: UpstreamBreakerOut,
}

/// Close a breaker by hand.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"account": "acct42", "scope": "vtex_pricing", "reason": "upstream confirmed the incident is over"}))]
pub struct UpstreamResetIn {
    pub account: Option<String>,
    pub scope: String,
    /// Why (1–500 characters); goes to the audit log.
    pub reason: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct UpstreamResetOut {
    pub before: UpstreamBreakerOut,
    pub after: UpstreamBreakerOut,
}

/// A `priority` the endpoint ignores must still be a lane's name.
fn ignored_priority(priority: Option<&str>) -> Result<(), ApiError> {
    super::quota_input::parse_priority(priority)
        .map(drop)
        .map_err(|_| ApiError::invalid_fields("invalid_input", vec![super::quota_input::priority_problem()]))
}

/// The breaker key, or a 422 naming the field.
fn breaker_key(account: Option<&str>, scope: &str) -> Result<BreakerKey, ApiError> {
    BreakerKey::new(account, scope).map_err(|e| match e {
        BreakerError::InvalidKey { what, .. } => {
            ApiError::invalid_field("invalid_input", what, "must be 1–128 visible ASCII characters without braces")
        }
        e => breaker_error(e),
    })
}

fn breaker_error(e: BreakerError) -> ApiError {
    match e {
        BreakerError::InvalidKey { what, .. } => ApiError::invalid_field("invalid_input", what, "invalid"),
        BreakerError::InvalidAccount(why) => super::quota_input::invalid_account(&why),
        BreakerError::Store(_) | BreakerError::Contention { .. } => {
            tracing::warn!(error = &e as &dyn std::error::Error, "upstream breaker store");
            ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "store_unavailable", "the breaker store is unavailable; retry shortly")
                .retry_after(super::error::UNAVAILABLE_RETRY_AFTER_SECS)
        }
        e @ BreakerError::Corrupt { .. } => ApiError::internal("reading an upstream breaker", &e),
    }
}

#[utoipa::path(get, path = "/api/v1/upstream-breakers", tag = "quota", security(("bearer" = [])),
    responses(
        (status = 200, description = "Every upstream breaker, by account and scope", body = UpstreamBreakersOut),
        (status = 401, description = "Missing or wrong token", body = ErrorOut),
        (status = 503, description = "Breaker store (Redis) unavailable", body = ErrorOut),
    ))]
pub async fn list_upstream_breakers(State(state): State<AppState>, caller: Caller) -> Result<Json<UpstreamBreakersOut>, ApiError> {
    caller.require(ApiScope::Worker)?;
    let all = state.upstream_breakers.list().await.map_err(breaker_error)?;
    Ok(Json(UpstreamBreakersOut { breakers: all.into_iter().map(Into::into).collect() }))
}

#[utoipa::path(post, path = "/api/v1/upstream-breakers/admit", tag = "quota", request_body = AdmitIn,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The breaker's answer: `closed` and `probe` may call, `open` may not \
            (then also `Retry-After`). Not needed for calls that take a permit: the permit endpoint admits too.",
            body = AdmissionOut,
            headers(("Retry-After" = u64, description = "With `open`: seconds until a probe may go"))),
        (status = 422, description = "Invalid account or scope", body = ValidationErrorOut),
        (status = 401, description = "Missing or wrong token", body = ErrorOut),
        (status = 503, description = "Breaker store (Redis) unavailable", body = ErrorOut),
    ))]
pub async fn admit_upstream_call(State(state): State<AppState>, caller: Caller, Json(input): Json<AdmitIn>) -> Result<Response, ApiError> {
    caller.require(ApiScope::Worker)?;
    let key = breaker_key(input.account.as_deref(), &input.scope)?;
    ignored_priority(input.priority.as_deref())?;
    let admitted = state.upstream_breakers.admit_with_state(&key).await.map_err(breaker_error)?;
    let decision = match admitted.admission {
        UpstreamAdmission::Allowed => AdmissionDecision::Closed,
        UpstreamAdmission::Probe => AdmissionDecision::Probe,
        UpstreamAdmission::Rejected { .. } => AdmissionDecision::Open,
    };
    let retry_after = (decision == AdmissionDecision::Open).then(|| admitted.retry_after());
    let out = AdmissionOut {
        decision,
        allowed: decision != AdmissionDecision::Open,
        retry_after_ms: retry_after.map(ceil_millis),
        breaker: BreakerView::new(&key, &admitted.state).into(),
    };
    let mut response = Json(out).into_response();
    if let Some(wait) = retry_after {
        let secs = wait.as_micros().div_ceil(1_000_000) as u64;
        response.headers_mut().insert(RETRY_AFTER, HeaderValue::from(secs));
    }
    Ok(response)
}

#[utoipa::path(post, path = "/api/v1/upstream-breakers/report", tag = "quota", request_body = ReportIn,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Counted; the breaker after it", body = ReportOut),
        (status = 422, description = "Invalid account or scope, or not exactly one of `status` and `error`", body = ValidationErrorOut),
        (status = 401, description = "Missing or wrong token", body = ErrorOut),
        (status = 503, description = "Breaker store (Redis) unavailable", body = ErrorOut),
    ))]
pub async fn report_upstream_outcome(State(state): State<AppState>, caller: Caller, Json(input): Json<ReportIn>) -> Result<Json<ReportOut>, ApiError> {
    caller.require(ApiScope::Worker)?;
    let key = breaker_key(input.account.as_deref(), &input.scope)?;
    ignored_priority(input.priority.as_deref())?;
    let counted_as = match (input.status, input.error) {
        (Some(status), None) if (100..=599).contains(&status) => {
            if status >= 500 { CountedAs::Failure } else { CountedAs::Success }
        }
        (Some(_), None) => return Err(ApiError::invalid_field("invalid_input", "status", "must be an HTTP status from 100 to 599")),
        (None, Some(CallErrorIn::NotSent)) => CountedAs::NotSent,
        (None, Some(_)) => CountedAs::Failure,
        _ => {
            let both = "give exactly one of status and error";
            return Err(ApiError::invalid_fields("invalid_input", vec![FieldError::new("status", both), FieldError::new("error", both)]));
        }
    };
    let breakers = &state.upstream_breakers;
    let view = match counted_as {
        CountedAs::NotSent => {
            breakers.abandon_probe(&key).await.map_err(breaker_error)?;
            breakers.view(&key).await.map_err(breaker_error)?
        }
        CountedAs::Failure | CountedAs::Success => {
            let after = breakers.record(&key, counted_as == CountedAs::Failure).await.map_err(breaker_error)?;
            BreakerView::new(&key, &after)
        }
    };
    Ok(Json(ReportOut { counted_as, breaker: view.into() }))
}

#[utoipa::path(post, path = "/api/v1/upstream-breakers/reset", tag = "quota", request_body = UpstreamResetIn,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Closed (audited as `upstream_breaker.reset` with the reason)", body = UpstreamResetOut),
        (status = 422, description = "Invalid account, scope or reason", body = ValidationErrorOut),
        (status = 401, description = "Missing or wrong token", body = ErrorOut),
        (status = 403, description = "Needs an admin token", body = ErrorOut),
        (status = 503, description = "Breaker store (Redis) unavailable", body = ErrorOut),
    ))]
pub async fn reset_upstream_breaker(
    State(state): State<AppState>,
    AdminCaller(caller): AdminCaller,
    Json(input): Json<UpstreamResetIn>,
) -> Result<Json<UpstreamResetOut>, ApiError> {
    let key = breaker_key(input.account.as_deref(), &input.scope)?;
    match state.upstream_breaker_admin.reset(&key, &caller.actor(), &input.reason, state.clock.now()).await {
        Ok(reset) => Ok(Json(UpstreamResetOut { before: reset.before.into(), after: reset.after.into() })),
        Err(UpstreamBreakerAdminError::Reason) => Err(ApiError::invalid_field(
            "invalid_input",
            "reason",
            format!("say why the breaker is reset (1–{MAX_REASON_CHARS} characters)"),
        )),
        Err(UpstreamBreakerAdminError::Breaker(e)) => Err(breaker_error(e)),
        Err(e @ UpstreamBreakerAdminError::Audit(_)) => Err(ApiError::internal("auditing an upstream breaker reset", &e)),
    }
}
