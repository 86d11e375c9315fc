//! Limit rules: read by any token, written by admin tokens. Every write is
//! audited and applied to this instance at once (others follow within the
//! reloader's period).

use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use sluice_engine::quota::{Algorithm, Limit, Rule, RuleChange, RuleId, RuleReloader, RulesRepoError};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::auth::{AdminCaller, Caller};
use super::error::{ApiError, ErrorOut, Json, Path};
use sluice_engine::audit::{record, AuditEntry};
use crate::state::AppState;
use sluice_engine::tokens::ApiScope;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(list_limits, create_limit)).routes(routes!(update_limit, delete_limit))
}

/// A limit rule as written by an admin.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
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
    fn into_rule(self, id: RuleId) -> Result<Rule, ApiError> {
        let algorithm: Algorithm = self.algorithm.as_deref().unwrap_or("token_bucket").parse().map_err(invalid_rule)?;
        let limit = Limit {
            algorithm,
            tokens: self.tokens,
            interval: Duration::from_millis(self.interval_ms),
            burst: self.burst.unwrap_or(self.tokens),
        };
        let mut rule = Rule::new(&self.scope, self.method.as_deref(), self.path.as_deref(), limit);
        rule.id = id;
        rule.concurrency = self.concurrency;
        rule.max_wait = self.max_wait_ms.map(Duration::from_millis);
        rule.min_penalty = self.min_penalty_ms.map(Duration::from_millis);
        rule.shadow = self.shadow;
        rule.enabled = self.enabled.unwrap_or(true);
        rule.note = self.note;
        Ok(rule)
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct LimitsOut {
    #[schema(value_type = Vec<Object>)]
    pub limits: Vec<Rule>,
}

fn invalid_rule(e: impl std::fmt::Display) -> ApiError {
    ApiError::invalid("invalid_rule", e.to_string())
}

fn repo_error(e: RulesRepoError) -> ApiError {
    match e {
        RulesRepoError::Invalid(e) => invalid_rule(e),
        RulesRepoError::Conflict => ApiError::new(StatusCode::CONFLICT, "conflict", e.to_string()),
        RulesRepoError::NotFound(id) => ApiError::not_found(format!("no limit rule with id '{id}'")),
        e => ApiError::internal("writing a limit rule", &e),
    }
}

/// Audit the change and apply it here now. The audit row is written after
/// the rule (RulesRepo owns its transaction); a failed audit write is an
/// error the admin sees.
async fn after_change(state: &AppState, caller: &Caller, action: &str, target: &RuleId, change: &RuleChange) -> Result<(), ApiError> {
    let entry = AuditEntry {
        actor: &caller.0.name,
        action,
        target: target.as_str(),
        before: change.before.as_ref(),
        after: change.after.as_ref(),
        reason: None,
    };
    record(&state.db, entry, state.clock.now()).await.map_err(|e| ApiError::internal("writing the audit log", &e))?;
    if let Err(e) = RuleReloader::new(state.rules.clone(), state.limiter.clone()).run_once().await {
        // The background reloader retries within a second; the write stands.
        tracing::warn!(error = %e, "reloading rules after an API write");
    }
    Ok(())
}

#[utoipa::path(get, path = "/api/v1/limits", tag = "limits", security(("bearer" = [])),
    responses((status = 200, description = "All limit rules", body = LimitsOut),
        (status = 401, description = "Missing or wrong token", body = ErrorOut)))]
pub async fn list_limits(State(state): State<AppState>, caller: Caller) -> Result<Json<LimitsOut>, ApiError> {
    caller.require(ApiScope::Worker)?;
    let limits = state.rules.list().await.map_err(|e| ApiError::internal("listing limit rules", &e))?;
    Ok(Json(LimitsOut { limits }))
}

#[utoipa::path(post, path = "/api/v1/limits", tag = "limits", request_body = LimitIn, security(("bearer" = [])),
    responses((status = 201, description = "Created", body = Object),
        (status = 409, description = "A rule for this scope, method and path exists", body = ErrorOut),
        (status = 422, description = "Invalid rule", body = ErrorOut),
        (status = 403, description = "Needs an admin token", body = ErrorOut)))]
pub async fn create_limit(State(state): State<AppState>, AdminCaller(caller): AdminCaller, Json(input): Json<LimitIn>) -> Result<(StatusCode, Json<Rule>), ApiError> {
    let rule = input.into_rule(RuleId::generate())?;
    let id = rule.id.clone();
    let change = state.rules.create(rule, &caller.0.name, state.clock.now()).await.map_err(repo_error)?;
    after_change(&state, &caller, "limit.create", &id, &change).await?;
    let created = change.after.ok_or_else(|| ApiError::not_found("the rule vanished"))?;
    Ok((StatusCode::CREATED, Json(created)))
}

#[utoipa::path(put, path = "/api/v1/limits/{id}", tag = "limits", request_body = LimitIn, security(("bearer" = [])),
    params(("id" = String, Path, description = "Rule id")),
    responses((status = 200, description = "Replaced", body = Object),
        (status = 404, description = "No such rule", body = ErrorOut),
        (status = 422, description = "Invalid rule", body = ErrorOut),
        (status = 403, description = "Needs an admin token", body = ErrorOut)))]
pub async fn update_limit(
    State(state): State<AppState>,
    AdminCaller(caller): AdminCaller,
    Path(id): Path<String>,
    Json(input): Json<LimitIn>,
) -> Result<Json<Rule>, ApiError> {
    let id = RuleId(id);
    let rule = input.into_rule(id.clone())?;
    let change = state.rules.update(rule, &caller.0.name, state.clock.now()).await.map_err(repo_error)?;
    after_change(&state, &caller, "limit.update", &id, &change).await?;
    let updated = change.after.ok_or_else(|| ApiError::not_found("the rule vanished"))?;
    Ok(Json(updated))
}

#[utoipa::path(delete, path = "/api/v1/limits/{id}", tag = "limits", security(("bearer" = [])),
    params(("id" = String, Path, description = "Rule id")),
    responses((status = 204, description = "Deleted"),
        (status = 404, description = "No such rule", body = ErrorOut),
        (status = 403, description = "Needs an admin token", body = ErrorOut)))]
pub async fn delete_limit(State(state): State<AppState>, AdminCaller(caller): AdminCaller, Path(id): Path<String>) -> Result<StatusCode, ApiError> {
    let id = RuleId(id);
    let change = state.rules.delete(&id, &caller.0.name, state.clock.now()).await.map_err(repo_error)?;
    after_change(&state, &caller, "limit.delete", &id, &change).await?;
    Ok(StatusCode::NO_CONTENT)
}
