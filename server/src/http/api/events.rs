//! `POST /api/v1/events`: idempotent event intake into the webhook outbox.

use axum::extract::State;
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use sluice_engine::delivery::model::{EventIn as EngineEventIn, MerchantId};
use sluice_engine::delivery::StoreError;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::auth::Caller;
use super::error::{ApiError, ErrorOut, Json};
use crate::state::AppState;
use sluice_engine::tokens::ApiScope;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(create_event))
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EventIn {
    /// The merchant the event is for (`mer_…`).
    pub merchant_id: String,
    /// e.g. `payment.status_changed`.
    pub event_type: String,
    /// Status used to tell money events apart; else the payload's `status`.
    pub status: Option<String>,
    /// The JSON object sent to the merchant.
    #[schema(value_type = Object)]
    pub payload: serde_json::Value,
    /// The same key twice stores one event.
    pub idempotency_key: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct EventOut {
    pub event_id: String,
    pub delivery_ids: Vec<String>,
    /// True when the key was seen before and nothing new was stored (status 200, not 201).
    pub duplicate: bool,
}

#[utoipa::path(post, path = "/api/v1/events", tag = "webhooks", request_body = EventIn,
    security(("bearer" = [])),
    responses(
        (status = 201, description = "Stored", body = EventOut),
        (status = 200, description = "Already stored under this idempotency key", body = EventOut),
        (status = 422, description = "Unknown merchant or invalid event", body = ErrorOut),
        (status = 401, description = "Missing or wrong token", body = ErrorOut),
    ))]
pub async fn create_event(
    State(state): State<AppState>,
    caller: Caller,
    Json(input): Json<EventIn>,
) -> Result<(StatusCode, Json<EventOut>), ApiError> {
    caller.require(ApiScope::Worker)?;
    let merchant_id = MerchantId::parse(&input.merchant_id).map_err(|e| ApiError::invalid("unknown_merchant", e.to_string()))?;
    let event = EngineEventIn {
        merchant_id,
        event_type: input.event_type,
        status: input.status,
        payload: input.payload,
        idempotency_key: input.idempotency_key,
    };
    let accepted = state.deliveries.accept_event(&event, state.clock.now()).await.map_err(|e| match e {
        StoreError::UnknownMerchant(id) => ApiError::invalid("unknown_merchant", format!("merchant {id} does not exist")),
        StoreError::Invalid(e) => ApiError::invalid("invalid_input", e.to_string()),
        e => ApiError::internal("accepting an event", &e),
    })?;
    let status = if accepted.duplicate { StatusCode::OK } else { StatusCode::CREATED };
    if !accepted.duplicate {
        crate::telemetry::record_event_accepted();
    }
    Ok((
        status,
        Json(EventOut {
            event_id: accepted.event_id.as_str().to_owned(),
            delivery_ids: accepted.delivery_ids.iter().map(|d| d.as_str().to_owned()).collect(),
            duplicate: accepted.duplicate,
        }),
    ))
}
