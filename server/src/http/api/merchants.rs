//! Merchants and their delivery breakers: read by any token; created, edited
//! and reset by admin tokens, with the same engine operations and audit
//! actions as the web application.

use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use sluice_engine::delivery::merchant_breaker::MerchantBreaker;
use sluice_engine::delivery::model::{Merchant, MerchantId, MerchantIn as EngineMerchantIn, SigningScheme};
use sluice_engine::delivery::ops::{self, Actor, OpsError};
use sluice_engine::delivery::StoreError;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::auth::{AdminCaller, Caller};
use super::error::{ApiError, ErrorOut, Json, Path, ValidationErrorOut};
use crate::state::AppState;
use sluice_engine::tokens::ApiScope;

/// How long the previous secret keeps signing after a rotation, unless the
/// caller says otherwise.
const DEFAULT_OVERLAP_HOURS: u64 = 24;
/// The longest overlap accepted: a week.
const MAX_OVERLAP_HOURS: u64 = 24 * 7;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_merchants, create_merchant))
        .routes(routes!(update_merchant))
        .routes(routes!(rotate_merchant_secret))
        .routes(routes!(reset_breaker))
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"name": "Acme Shop", "url": "https://acme.example/webhooks", "scheme": "sluice"}))]
pub struct MerchantIn {
    pub name: String,
    /// The webhook endpoint: https (plain http only where the deployment
    /// turned `delivery_require_https` off); private addresses are refused.
    pub url: String,
    /// `sluice` (default) or `standard_webhooks`.
    pub scheme: Option<String>,
    /// The signing secret; generated when absent (`whsec_…` for Standard Webhooks).
    pub secret: Option<String>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"url": "https://acme.example/webhooks/v2"}))]
pub struct MerchantPatch {
    /// A new webhook endpoint.
    pub url: String,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"overlap_hours": 24}))]
pub struct SecretIn {
    /// The new secret; generated when absent.
    pub secret: Option<String>,
    /// Hours the previous secret keeps signing too (default 24, at most 168).
    pub overlap_hours: Option<u64>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct MerchantOut {
    #[schema(value_type = Object)]
    pub merchant: Merchant,
    #[schema(value_type = Object)]
    pub breaker: MerchantBreaker,
    /// The URL is plain http while the deployment requires https: its
    /// deliveries are held (neither sent nor failed) until the URL is fixed.
    pub deliveries_held: bool,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct MerchantsOut {
    pub merchants: Vec<MerchantOut>,
}

/// A merchant with its signing secret: the answer to a create or a rotation,
/// the only times the secret is shown.
#[derive(Debug, Serialize, ToSchema)]
pub struct MerchantSecretOut {
    #[schema(value_type = Object)]
    pub merchant: Merchant,
    pub secret: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct BreakerOut {
    #[schema(value_type = Object)]
    pub breaker: MerchantBreaker,
}

fn ops_error(e: OpsError) -> ApiError {
    match e {
        OpsError::Store(StoreError::UnknownMerchant(id)) => ApiError::not_found(format!("no merchant with id '{id}'")),
        OpsError::Url(e) => ApiError::invalid_field("invalid_url", "url", e.to_string()),
        OpsError::Secret(e) => ApiError::invalid_field("invalid_secret", "secret", e.to_string()),
        OpsError::EmptyName => ApiError::invalid_field("invalid_input", "name", "must not be empty"),
        e => ApiError::internal("changing a merchant", &e),
    }
}

fn merchant_id(id: &str) -> Result<MerchantId, ApiError> {
    MerchantId::parse(id).map_err(|_| ApiError::not_found(format!("no merchant with id '{}'", id.chars().take(80).collect::<String>())))
}

#[utoipa::path(get, path = "/api/v1/merchants", tag = "webhooks", security(("bearer" = [])),
    responses((status = 200, description = "Every merchant with its breaker (secrets never shown)", body = MerchantsOut)))]
pub async fn list_merchants(State(state): State<AppState>, caller: Caller) -> Result<Json<MerchantsOut>, ApiError> {
    caller.require(ApiScope::Worker)?;
    let (_, breaker_cfg) = crate::startup::delivery_timing(&state.settings);
    let all = state
        .deliveries
        .list_merchants(state.clock.now(), &breaker_cfg)
        .await
        .map_err(|e| ApiError::internal("listing merchants", &e))?;
    let ssrf = &state.app_context.ssrf;
    let merchants = all
        .into_iter()
        .map(|m| MerchantOut { deliveries_held: ssrf.holds(&m.merchant.url), merchant: m.merchant, breaker: m.breaker })
        .collect();
    Ok(Json(MerchantsOut { merchants }))
}

#[utoipa::path(post, path = "/api/v1/merchants", tag = "webhooks", request_body = MerchantIn, security(("bearer" = [])),
    responses((status = 201, description = "Created; the secret is shown only here", body = MerchantSecretOut),
        (status = 422, description = "Invalid name, URL, scheme or secret", body = ValidationErrorOut),
        (status = 403, description = "Needs an admin token", body = ErrorOut)))]
pub async fn create_merchant(
    State(state): State<AppState>,
    AdminCaller(caller): AdminCaller,
    Json(input): Json<MerchantIn>,
) -> Result<(StatusCode, Json<MerchantSecretOut>), ApiError> {
    let scheme: SigningScheme = input
        .scheme
        .as_deref()
        .unwrap_or("sluice")
        .parse()
        .map_err(|_| ApiError::invalid_field("invalid_input", "scheme", "must be sluice or standard_webhooks"))?;
    let (_, breaker_cfg) = crate::startup::delivery_timing(&state.settings);
    let engine_in = EngineMerchantIn { name: input.name, url: input.url, scheme, secret: input.secret };
    let merchant = ops::create_merchant(&state.deliveries, engine_in, &state.app_context.ssrf, &breaker_cfg, Actor::named(&caller.0.name), state.clock.now())
        .await
        .map_err(ops_error)?;
    let secret = merchant.secret.clone();
    Ok((StatusCode::CREATED, Json(MerchantSecretOut { merchant, secret })))
}

#[utoipa::path(patch, path = "/api/v1/merchants/{id}", tag = "webhooks", request_body = MerchantPatch, security(("bearer" = [])),
    params(("id" = String, Path, description = "Merchant id (`mer_…`)")),
    responses((status = 200, description = "Updated", body = Object),
        (status = 404, description = "No such merchant", body = ErrorOut),
        (status = 422, description = "Invalid URL", body = ValidationErrorOut),
        (status = 403, description = "Needs an admin token", body = ErrorOut)))]
pub async fn update_merchant(
    State(state): State<AppState>,
    AdminCaller(caller): AdminCaller,
    Path(id): Path<String>,
    Json(input): Json<MerchantPatch>,
) -> Result<Json<Merchant>, ApiError> {
    let id = merchant_id(&id)?;
    let change = ops::update_merchant_url(&state.deliveries, &id, &input.url, &state.app_context.ssrf, Actor::named(&caller.0.name), state.clock.now())
        .await
        .map_err(ops_error)?;
    Ok(Json(change.after))
}

#[utoipa::path(post, path = "/api/v1/merchants/{id}/secret", tag = "webhooks", request_body = SecretIn, security(("bearer" = [])),
    params(("id" = String, Path, description = "Merchant id (`mer_…`)")),
    responses((status = 200, description = "Rotated; the new secret is shown only here", body = MerchantSecretOut),
        (status = 404, description = "No such merchant", body = ErrorOut),
        (status = 422, description = "Invalid secret or overlap", body = ValidationErrorOut),
        (status = 403, description = "Needs an admin token", body = ErrorOut)))]
pub async fn rotate_merchant_secret(
    State(state): State<AppState>,
    AdminCaller(caller): AdminCaller,
    Path(id): Path<String>,
    Json(input): Json<SecretIn>,
) -> Result<Json<MerchantSecretOut>, ApiError> {
    let id = merchant_id(&id)?;
    let hours = input.overlap_hours.unwrap_or(DEFAULT_OVERLAP_HOURS);
    if hours > MAX_OVERLAP_HOURS {
        return Err(ApiError::invalid_field("invalid_input", "overlap_hours", format!("must be at most {MAX_OVERLAP_HOURS}")));
    }
    let overlap = Duration::from_secs(hours * 3600);
    let change = ops::rotate_secret(&state.deliveries, &id, input.secret, overlap, Actor::named(&caller.0.name), state.clock.now())
        .await
        .map_err(ops_error)?;
    let secret = change.after.secret.clone();
    Ok(Json(MerchantSecretOut { merchant: change.after, secret }))
}

#[utoipa::path(post, path = "/api/v1/breakers/{id}/reset", tag = "webhooks", security(("bearer" = [])),
    params(("id" = String, Path, description = "Merchant id (`mer_…`) whose delivery breaker to close")),
    responses((status = 200, description = "Closed; the merchant's deferred deliveries are due now", body = BreakerOut),
        (status = 404, description = "No such merchant", body = ErrorOut),
        (status = 403, description = "Needs an admin token", body = ErrorOut)))]
pub async fn reset_breaker(State(state): State<AppState>, AdminCaller(caller): AdminCaller, Path(id): Path<String>) -> Result<Json<BreakerOut>, ApiError> {
    let id = merchant_id(&id)?;
    let (_, breaker_cfg) = crate::startup::delivery_timing(&state.settings);
    let change = ops::reset_breaker(&state.deliveries, &id, &breaker_cfg, Actor::named(&caller.0.name), state.clock.now())
        .await
        .map_err(ops_error)?;
    Ok(Json(BreakerOut { breaker: change.after }))
}
