//! Limit rules: read by any token, written by admin tokens through the
//! engine's `RuleAdmin` (the Limits page's write path too): validated, audited
//! and applied to this instance at once (others follow within the reloader's
//! period).

use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use sluice_engine::quota::{Rule, RuleAdmin, RuleAdminError, RuleDraft, RuleId};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::auth::{AdminCaller, Caller};
use super::error::{ApiError, ErrorOut, FieldError, Json, Path, ValidationErrorOut};
use crate::state::AppState;
use sluice_engine::tokens::ApiScope;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(list_limits, create_limit)).routes(routes!(update_limit, delete_limit))
}

/// A limit rule as written by an admin.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({
    "scope": "vtex_pricing", "method": "PUT", "path": "/api/pricing/prices/{sku}", "algorithm": "token_bucket",
    "tokens": 40, "interval_ms": 1000, "burst": 1000, "max_wait_ms": 30000, "note": "VTEX Pricing: 40 req/s, burst 1000"
}))]
pub struct LimitIn {
    /// API domain, or `*` for the global default.
    pub scope: String,
    pub method: Option<String>,
    /// Exact path or template (`/prices/{sku}`, `/feeds/*`); none = the scope's default.
    pub path: Option<String>,
    /// `token_bucket` (default), `fixed_window` or `sliding_log`.
    pub algorithm: Option<String>,
    pub tokens: u32,
    pub interval_ms: u64,
    /// Token-bucket capacity; default `tokens`.
    pub burst: Option<u32>,
    /// Max requests in flight (leases).
    pub concurrency: Option<u32>,
    pub max_wait_ms: Option<u64>,
    pub min_penalty_ms: Option<u64>,
    #[serde(default)]
    pub shadow: bool,
    pub enabled: Option<bool>,
    #[serde(default)]
    pub note: String,
}

impl LimitIn {
    /// The same draft the Limits page builds from its form.
    fn into_draft(self) -> RuleDraft {
        RuleDraft {
            scope: self.scope,
            method: self.method,
            path: self.path,
            algorithm: self.algorithm,
            tokens: self.tokens,
            interval: Duration::from_millis(self.interval_ms),
            burst: self.burst,
            concurrency: self.concurrency,
            max_wait: self.max_wait_ms.map(Duration::from_millis),
            min_penalty: self.min_penalty_ms.map(Duration::from_millis),
            shadow: self.shadow,
            enabled: self.enabled.unwrap_or(true),
            note: self.note,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct LimitsOut {
    #[schema(value_type = Vec<Object>)]
    pub limits: Vec<Rule>,
}

/// The request's name for a field the engine names (durations carry their unit here).
fn api_field(engine_field: &'static str) -> &'static str {
    match engine_field {
        "interval" => "interval_ms",
        "max_wait" => "max_wait_ms",
        "min_penalty" => "min_penalty_ms",
        other => other,
    }
}

fn admin_error(e: RuleAdminError) -> ApiError {
    match e {
        RuleAdminError::Invalid(errors) => ApiError::invalid_fields(
            "invalid_rule",
            errors.iter().map(|e| FieldError::new(api_field(e.field()), e.message())).collect(),
        ),
        RuleAdminError::Conflict => ApiError::new(StatusCode::CONFLICT, "conflict", e.to_string()),
        RuleAdminError::NotFound(id) => ApiError::not_found(format!("no limit rule with id '{id}'")),
        e => ApiError::internal("writing a limit rule", &e),
    }
}

fn rule_admin(state: &AppState) -> RuleAdmin {
    RuleAdmin::new(state.rules.clone(), state.limiter.clone())
}

#[utoipa::path(get, path = "/api/v1/limits", tag = "limits", security(("bearer" = [])),
    responses((status = 200, description = "All limit rules", body = LimitsOut)))]
pub async fn list_limits(State(state): State<AppState>, caller: Caller) -> Result<Json<LimitsOut>, ApiError> {
    caller.require(ApiScope::Worker)?;
    let limits = state.rules.list().await.map_err(|e| ApiError::internal("listing limit rules", &e))?;
    Ok(Json(LimitsOut { limits }))
}

#[utoipa::path(post, path = "/api/v1/limits", tag = "limits", request_body = LimitIn, security(("bearer" = [])),
    responses((status = 201, description = "Created", body = Object),
        (status = 409, description = "A rule for this scope, method and path exists", body = ErrorOut),
        (status = 422, description = "Invalid rule", body = ValidationErrorOut),
        (status = 403, description = "Needs an admin token", body = ErrorOut)))]
pub async fn create_limit(State(state): State<AppState>, AdminCaller(caller): AdminCaller, Json(input): Json<LimitIn>) -> Result<(StatusCode, Json<Rule>), ApiError> {
    let created = rule_admin(&state).create(input.into_draft(), &caller.0.name, state.clock.now()).await.map_err(admin_error)?;
    Ok((StatusCode::CREATED, Json(created)))
}

#[utoipa::path(put, path = "/api/v1/limits/{id}", tag = "limits", request_body = LimitIn, security(("bearer" = [])),
    params(("id" = String, Path, description = "Rule id")),
    responses((status = 200, description = "Replaced", body = Object),
        (status = 404, description = "No such rule", body = ErrorOut),
        (status = 409, description = "Another rule has this scope, method and path", body = ErrorOut),
        (status = 422, description = "Invalid rule", body = ValidationErrorOut),
        (status = 403, description = "Needs an admin token", body = ErrorOut)))]
pub async fn update_limit(
    State(state): State<AppState>,
    AdminCaller(caller): AdminCaller,
    Path(id): Path<String>,
    Json(input): Json<LimitIn>,
) -> Result<Json<Rule>, ApiError> {
    let updated =
        rule_admin(&state).update(&RuleId(id), input.into_draft(), &caller.0.name, state.clock.now()).await.map_err(admin_error)?;
    Ok(Json(updated))
}

#[utoipa::path(delete, path = "/api/v1/limits/{id}", tag = "limits", security(("bearer" = [])),
    params(("id" = String, Path, description = "Rule id")),
    responses((status = 204, description = "Deleted"),
        (status = 404, description = "No such rule", body = ErrorOut),
        (status = 403, description = "Needs an admin token", body = ErrorOut)))]
pub async fn delete_limit(State(state): State<AppState>, AdminCaller(caller): AdminCaller, Path(id): Path<String>) -> Result<StatusCode, ApiError> {
    rule_admin(&state).delete(&RuleId(id), &caller.0.name, state.clock.now()).await.map_err(admin_error)?;
    Ok(StatusCode::NO_CONTENT)
}
