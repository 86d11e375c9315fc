//! Retry profiles: the retry policy per scope. Read by any token (workers
//! fetch their scope's profile and retry by it, docs/retry.md "Retry
//! profiles"); set and removed by admin tokens through the engine's
//! `ProfileAdmin` (the Limits page's write path too): validated field by
//! field, audited (`retry_profile.set`, `retry_profile.delete`) and applied
//! to this instance at once (others follow within the reloader's second).

use axum::extract::State;
use axum::http::StatusCode;
use serde::Serialize;
use sluice_engine::retry::profiles::{self, ProfileSource, Resolved, RetryProfile};
use sluice_engine::retry::profiles_repo::{validate_scope, ProfileAdmin, ProfileAdminError, ProfileDraft};
use sluice_engine::retry::{RetryPolicy, RetryPolicyConfig};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::auth::{AdminCaller, Caller};
use super::error::{ApiError, ErrorOut, FieldError, Json, Path, ValidationErrorOut};
use crate::state::AppState;
use sluice_engine::tokens::ApiScope;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_retry_profiles))
        .routes(routes!(get_retry_profile, put_retry_profile, delete_retry_profile))
}

/// A retry policy. Durations in milliseconds.
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({
    "max_attempts": 6, "base_delay_ms": 1000, "max_delay_ms": 60000, "jitter": "equal",
    "retry_on": ["429", "503"], "retry_after": "honour", "wait_ceiling_ms": null, "total_budget_ms": 180000
}))]
pub struct PolicyOut {
    /// Attempts in all, the first included.
    pub max_attempts: u32,
    pub base_delay_ms: u64,
    /// The longest single pause; `null`: no cap.
    pub max_delay_ms: Option<u64>,
    /// `additive` (base·2^(n−1) + U[0, base)), `none`, `full`, `equal` or `decorrelated` (docs/retry.md).
    pub jitter: String,
    /// Retried outcomes: statuses (`"429"`, `"503"`), `"5xx"`, `"network"`.
    pub retry_on: Vec<String>,
    /// On a 429: `honour` (wait at least Retry-After), `cap` (at most `max_delay_ms` of it) or `ignore`.
    pub retry_after: String,
    /// Overrides the limit rule's wait ceiling; `null`: the rule's.
    pub wait_ceiling_ms: Option<u64>,
    /// Wall time of one call, every attempt and pause included.
    pub total_budget_ms: u64,
}

impl From<RetryPolicy> for PolicyOut {
    fn from(p: RetryPolicy) -> Self {
        let c = RetryPolicyConfig::from(p);
        PolicyOut {
            max_attempts: c.max_attempts,
            base_delay_ms: c.base_delay_ms,
            max_delay_ms: c.max_delay_ms,
            jitter: c.jitter.as_str().to_owned(),
            retry_on: c.retry_on,
            retry_after: c.retry_after.as_str().to_owned(),
            wait_ceiling_ms: c.wait_ceiling_ms,
            total_budget_ms: c.total_budget_ms,
        }
    }
}

/// The profile a scope's calls are retried by.
#[derive(Debug, Serialize, ToSchema)]
pub struct ProfileOut {
    pub scope: String,
    /// The preset it was set from (`default`, `wb`, `vtex`) or `custom`.
    pub name: String,
    /// `scope`: stored for this scope; `global`: stored for `*`; `default`: nothing stored.
    pub source: String,
    pub policy: PolicyOut,
    pub updated_by: Option<String>,
    pub updated_at_ms: Option<i64>,
}

fn stored(p: &RetryProfile) -> ProfileOut {
    ProfileOut {
        scope: p.scope.clone(),
        name: p.name.clone(),
        source: "scope".to_owned(),
        policy: p.policy.into(),
        updated_by: Some(p.updated_by.clone()),
        updated_at_ms: Some(p.updated_at.as_millis()),
    }
}

fn resolved(scope: &str, r: Resolved, stored: Option<&RetryProfile>) -> ProfileOut {
    let source = match r.source {
        ProfileSource::Scope => "scope",
        ProfileSource::Global => "global",
        ProfileSource::Default => "default",
    };
    ProfileOut {
        scope: scope.to_owned(),
        name: r.name,
        source: source.to_owned(),
        policy: r.policy.into(),
        updated_by: stored.map(|p| p.updated_by.clone()),
        updated_at_ms: stored.map(|p| p.updated_at.as_millis()),
    }
}

/// A preset to start a profile from.
#[derive(Debug, Serialize, ToSchema)]
pub struct PresetOut {
    pub name: String,
    pub note: String,
    pub policy: PolicyOut,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ProfilesOut {
    /// Every stored profile, by scope (`*` applies to scopes without one).
    pub profiles: Vec<ProfileOut>,
    pub presets: Vec<PresetOut>,
}

/// A profile as an admin sets it: a preset and any fields to change (absent
/// fields keep the preset's; `max_delay_ms` / `wait_ceiling_ms` may be
/// `null`). Only the body's shape is described here; the engine's
/// `ProfileDraft` reads it.
#[derive(Debug, ToSchema)]
#[allow(dead_code)]
#[schema(example = json!({"preset": "vtex"}))]
pub struct ProfileIn {
    /// `default` (when absent), `wb` or `vtex`.
    pub preset: Option<String>,
    pub max_attempts: Option<u32>,
    pub base_delay_ms: Option<u64>,
    #[schema(nullable)]
    pub max_delay_ms: Option<u64>,
    /// `additive`, `none`, `full`, `equal` or `decorrelated`.
    pub jitter: Option<String>,
    pub retry_on: Option<Vec<String>>,
    /// `honour`, `cap` or `ignore`.
    pub retry_after: Option<String>,
    #[schema(nullable)]
    pub wait_ceiling_ms: Option<u64>,
    pub total_budget_ms: Option<u64>,
}

fn admin_error(e: ProfileAdminError) -> ApiError {
    match e {
        ProfileAdminError::Invalid(errors) => ApiError::invalid_fields(
            "invalid_retry_profile",
            errors.into_iter().map(|e| FieldError::new(e.field, e.message)).collect(),
        ),
        ProfileAdminError::NotFound(scope) => ApiError::not_found(format!("no retry profile stored for scope '{scope}'")),
        e => ApiError::internal("writing a retry profile", &e),
    }
}

fn profile_admin(state: &AppState) -> ProfileAdmin {
    ProfileAdmin::new(state.profiles_repo.clone(), state.retry_profiles.clone())
}

fn checked_scope(scope: &str) -> Result<(), ApiError> {
    validate_scope(scope).map_err(|e| ApiError::invalid_field("invalid_input", "scope", e.to_string()))
}

#[utoipa::path(get, path = "/api/v1/retry-profiles", tag = "retry", security(("bearer" = [])),
    responses((status = 200, description = "Stored profiles and the presets", body = ProfilesOut)))]
pub async fn list_retry_profiles(State(state): State<AppState>, caller: Caller) -> Result<Json<ProfilesOut>, ApiError> {
    caller.require(ApiScope::Worker)?;
    let set = state.retry_profiles.snapshot();
    let presets = profiles::PRESETS
        .iter()
        .filter_map(|name| {
            let policy = profiles::preset(name)?;
            Some(PresetOut { name: (*name).to_owned(), note: profiles::preset_note(name).to_owned(), policy: policy.into() })
        })
        .collect();
    Ok(Json(ProfilesOut { profiles: set.profiles().into_iter().map(stored).collect(), presets }))
}

#[utoipa::path(get, path = "/api/v1/retry-profiles/{scope}", tag = "retry", security(("bearer" = [])),
    params(("scope" = String, Path, description = "API scope (as in limit rules and permits), or `*`")),
    responses((status = 200, description = "The profile the scope's calls are retried by: its own, `*`'s, or the default", body = ProfileOut),
        (status = 422, description = "Not a scope", body = ValidationErrorOut)))]
pub async fn get_retry_profile(State(state): State<AppState>, caller: Caller, Path(scope): Path<String>) -> Result<Json<ProfileOut>, ApiError> {
    caller.require(ApiScope::Worker)?;
    checked_scope(&scope)?;
    let set = state.retry_profiles.snapshot();
    let r = state.retry_profiles.resolve(&scope);
    let source = match r.source {
        ProfileSource::Scope => set.get(&scope),
        ProfileSource::Global => set.get(profiles::GLOBAL_SCOPE),
        ProfileSource::Default => None,
    };
    Ok(Json(resolved(&scope, r, source)))
}

#[utoipa::path(put, path = "/api/v1/retry-profiles/{scope}", tag = "retry", request_body = ProfileIn, security(("bearer" = [])),
    params(("scope" = String, Path, description = "API scope, or `*` for every scope without its own")),
    responses((status = 200, description = "Set; applies to the scope's next call on every instance within a second", body = ProfileOut),
        (status = 422, description = "Invalid scope, preset or field; `fields` names each", body = ValidationErrorOut),
        (status = 403, description = "Needs an admin token", body = ErrorOut)))]
pub async fn put_retry_profile(
    State(state): State<AppState>,
    AdminCaller(caller): AdminCaller,
    Path(scope): Path<String>,
    Json(draft): Json<ProfileDraft>,
) -> Result<Json<ProfileOut>, ApiError> {
    let profile = profile_admin(&state).put(&scope, draft, &caller.0.name, state.clock.now()).await.map_err(admin_error)?;
    Ok(Json(stored(&profile)))
}

#[utoipa::path(delete, path = "/api/v1/retry-profiles/{scope}", tag = "retry", security(("bearer" = [])),
    params(("scope" = String, Path, description = "API scope, or `*`")),
    responses((status = 204, description = "Removed: the scope falls back to `*`'s profile or the default"),
        (status = 404, description = "No profile stored for the scope", body = ErrorOut),
        (status = 422, description = "Not a scope", body = ValidationErrorOut),
        (status = 403, description = "Needs an admin token", body = ErrorOut)))]
pub async fn delete_retry_profile(State(state): State<AppState>, AdminCaller(caller): AdminCaller, Path(scope): Path<String>) -> Result<StatusCode, ApiError> {
    checked_scope(&scope)?;
    profile_admin(&state).delete(&scope, &caller.0.name, state.clock.now()).await.map_err(admin_error)?;
    Ok(StatusCode::NO_CONTENT)
}
