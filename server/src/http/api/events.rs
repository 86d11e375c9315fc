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
use super::error::{ApiError, FieldError, Json, ValidationErrorOut};
use crate::state::AppState;
use sluice_engine::tokens::ApiScope;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(create_event))
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({
    "merchant_id": "mer_01jbz7s0m5k3w8x9y2c4d6f8gh", "event_type": "payment.status_changed", "status": "paid",
    "payload": {"payment_id": "pay_1001", "status": "paid", "amount": "25.00", "currency": "EUR"},
    "idempotency_key": "pay_1001:paid"
}))]
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
        (status = 422, description = "Unknown merchant or invalid event", body = ValidationErrorOut),
    ))]
pub async fn create_event(
    State(state): State<AppState>,
    caller: Caller,
    Json(input): Json<EventIn>,
) -> Result<(StatusCode, Json<EventOut>), ApiError> {
    caller.require(ApiScope::Worker)?;
    // A malformed merchant id names no merchant: the same code as an unknown one.
    let Ok(merchant_id) = MerchantId::parse(&input.merchant_id) else {
        return Err(ApiError::invalid_field("unknown_merchant", "merchant_id", "no merchant has this id (mer_…)"));
    };
    let event = EngineEventIn {
        merchant_id,
        event_type: input.event_type,
        status: input.status,
        payload: input.payload,
        idempotency_key: input.idempotency_key,
    };
    let invalid = event.invalid_fields();
    if !invalid.is_empty() {
        let fields = invalid.into_iter().map(|(field, message)| FieldError::new(field, message)).collect();
        return Err(ApiError::invalid_fields("invalid_input", fields));
    }
    let accepted = state.deliveries.accept_event(&event, state.clock.now()).await.map_err(|e| match e {
        StoreError::UnknownMerchant(id) => ApiError::invalid_field("unknown_merchant", "merchant_id", format!("merchant {id} does not exist")),
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
