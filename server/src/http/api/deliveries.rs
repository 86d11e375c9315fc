//! Reads for the webhook outbox: one delivery with its attempts; breakers.

use axum::extract::State;
use serde::Serialize;
use sluice_engine::delivery::model::{Attempt, Delivery, DeliveryId};
use sluice_engine::delivery::breaker::Breaker;
use sluice_engine::delivery::StoreError;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::auth::Caller;
use super::error::{ApiError, ErrorOut, Json, Path};
use crate::state::AppState;
use sluice_engine::tokens::ApiScope;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(get_delivery)).routes(routes!(list_breakers))
}

#[derive(Debug, Serialize, ToSchema)]
pub struct DeliveryOut {
    #[schema(value_type = Object)]
    pub delivery: Delivery,
    /// Oldest first.
    #[schema(value_type = Vec<Object>)]
    pub attempts: Vec<Attempt>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct BreakersOut {
    /// Merchant breakers that are not closed.
    #[schema(value_type = Vec<Object>)]
    pub breakers: Vec<Breaker>,
}

#[utoipa::path(get, path = "/api/v1/deliveries/{id}", tag = "webhooks",
    params(("id" = String, Path, description = "Delivery id (`msg_…`)")),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The delivery and its attempts", body = DeliveryOut),
        (status = 404, description = "No such delivery", body = ErrorOut),
        (status = 401, description = "Missing or wrong token", body = ErrorOut),
    ))]
pub async fn get_delivery(State(state): State<AppState>, caller: Caller, Path(id): Path<String>) -> Result<Json<DeliveryOut>, ApiError> {
    caller.require(ApiScope::Worker)?;
    let not_found = || ApiError::not_found(format!("no delivery with id '{}'", id.chars().take(80).collect::<String>()));
    let delivery_id = DeliveryId::parse(&id).map_err(|_| not_found())?;
    let delivery = match state.deliveries.delivery(&delivery_id).await {
        Ok(d) => d,
        Err(StoreError::UnknownDelivery(_)) => return Err(not_found()),
        Err(e) => return Err(ApiError::internal("reading a delivery", &e)),
    };
    let attempts = state.deliveries.attempts(&delivery_id).await.map_err(|e| ApiError::internal("reading attempts", &e))?;
    Ok(Json(DeliveryOut { delivery, attempts }))
}

#[utoipa::path(get, path = "/api/v1/breakers", tag = "webhooks",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Breakers that are open or probing", body = BreakersOut),
        (status = 401, description = "Missing or wrong token", body = ErrorOut),
    ))]
pub async fn list_breakers(State(state): State<AppState>, caller: Caller) -> Result<Json<BreakersOut>, ApiError> {
    caller.require(ApiScope::Worker)?;
    let breakers = state.deliveries.open_breakers().await.map_err(|e| ApiError::internal("reading breakers", &e))?;
    Ok(Json(BreakersOut { breakers }))
}
