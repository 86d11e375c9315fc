//! `POST /api/v1/events` and `POST /api/v1/events/batch`: idempotent event
//! intake into the webhook outbox. Single calls that arrive together are
//! committed together (`delivery::Intake`); a batch is one transaction.

use axum::extract::{DefaultBodyLimit, State};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use sluice_engine::delivery::model::{Accepted, EventIn as EngineEventIn, MerchantId};
use sluice_engine::delivery::StoreError;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::auth::Caller;
use super::error::{ApiError, FieldError, Json, ValidationErrorOut};
use crate::state::AppState;
use sluice_engine::tokens::ApiScope;

/// Most events one batch call may carry.
pub const MAX_BATCH_EVENTS: usize = 1000;
/// Largest batch body: the single-event limit covers one webhook payload; a
/// batch carries many small ones.
pub const BATCH_BODY_LIMIT_BYTES: usize = 8 * 1024 * 1024;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(create_event))
        .merge(OpenApiRouter::new().routes(routes!(create_events_batch)).layer(DefaultBodyLimit::max(BATCH_BODY_LIMIT_BYTES)))
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
    let event = engine_event(input).map_err(|fields| match fields.as_slice() {
        [f] if f.field == "merchant_id" => ApiError::invalid_fields("unknown_merchant", fields),
        _ => ApiError::invalid_fields("invalid_input", fields),
    })?;
    let accepted = state.intake.accept(event, state.clock.now()).await.map_err(refusal)?;
    let status = if accepted.duplicate { StatusCode::OK } else { StatusCode::CREATED };
    crate::telemetry::record_events_accepted(u64::from(!accepted.duplicate));
    Ok((status, Json(EventOut::from(&accepted))))
}

impl From<&Accepted> for EventOut {
    fn from(a: &Accepted) -> EventOut {
        EventOut {
            event_id: a.event_id.as_str().to_owned(),
            delivery_ids: a.delivery_ids.iter().map(|d| d.as_str().to_owned()).collect(),
            duplicate: a.duplicate,
        }
    }
}

/// The engine's event, or every field that is wrong with it (a malformed
/// merchant id names no merchant: it is reported like an unknown one).
fn engine_event(input: EventIn) -> Result<EngineEventIn, Vec<FieldError>> {
    let Ok(merchant_id) = MerchantId::parse(&input.merchant_id) else {
        return Err(vec![FieldError::new("merchant_id", "no merchant has this id (mer_…)")]);
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
        return Err(invalid.into_iter().map(|(field, message)| FieldError::new(field, message)).collect());
    }
    Ok(event)
}

/// Why the store did not take an event, as the API says it.
fn refusal(e: StoreError) -> ApiError {
    match e {
        StoreError::UnknownMerchant(id) => ApiError::invalid_field("unknown_merchant", "merchant_id", format!("merchant {id} does not exist")),
        StoreError::Invalid(e) => ApiError::invalid("invalid_input", e.to_string()),
        e => ApiError::internal("accepting an event", &e),
    }
}

/// One event's result in a batch.
#[derive(Debug, Serialize, ToSchema)]
pub struct BatchItemOut {
    /// What `POST /api/v1/events` would have answered for this event alone:
    /// 201 stored, 200 already stored under its key, 422 refused.
    pub status: u16,
    /// Present when stored or already stored.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event: Option<EventOut>,
    /// Present when refused: the same body a single call's 422 carries.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<ValidationErrorOut>,
}

/// The answer to a batch: one result per event, in the order sent.
#[derive(Debug, Serialize, ToSchema)]
pub struct BatchOut {
    pub results: Vec<BatchItemOut>,
}

fn refused(code: &'static str, fields: Vec<FieldError>) -> BatchItemOut {
    let message = fields.iter().map(|f| format!("{}: {}", f.field, f.message)).collect::<Vec<_>>().join("; ");
    BatchItemOut { status: 422, event: None, error: Some(ValidationErrorOut { code, message, fields }) }
}

#[utoipa::path(post, path = "/api/v1/events/batch", tag = "webhooks", request_body(content = Vec<EventIn>,
        example = json!([
            {"merchant_id": "mer_01jbz7s0m5k3w8x9y2c4d6f8gh", "event_type": "payment.status_changed", "status": "paid",
             "payload": {"payment_id": "pay_1001", "status": "paid"}, "idempotency_key": "pay_1001:paid"},
            {"merchant_id": "mer_01jbz7s0m5k3w8x9y2c4d6f8gh", "event_type": "order.created",
             "payload": {"order_id": "ord_77"}, "idempotency_key": "ord_77:created"}
        ])),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "One result per event, in order: each stored (201), already stored (200) or refused (422) on its own. \
            Stored in one transaction: when the database is unreachable the whole call answers 503 and none is stored.", body = BatchOut),
        (status = 422, description = "Not 1 to 1000 events (`invalid_batch`)", body = ValidationErrorOut),
    ))]
pub async fn create_events_batch(
    State(state): State<AppState>,
    caller: Caller,
    Json(input): Json<Vec<EventIn>>,
) -> Result<Json<BatchOut>, ApiError> {
    caller.require(ApiScope::Worker)?;
    if input.is_empty() || input.len() > MAX_BATCH_EVENTS {
        return Err(ApiError::invalid("invalid_batch", format!("send 1 to {MAX_BATCH_EVENTS} events, not {}", input.len())));
    }
    let mut results: Vec<Option<BatchItemOut>> = Vec::with_capacity(input.len());
    let mut valid = Vec::with_capacity(input.len());
    let mut positions = Vec::with_capacity(input.len());
    for (i, item) in input.into_iter().enumerate() {
        match engine_event(item) {
            Ok(e) => {
                results.push(None);
                valid.push(e);
                positions.push(i);
            }
            Err(fields) => {
                let code = if matches!(fields.as_slice(), [f] if f.field == "merchant_id") { "unknown_merchant" } else { "invalid_input" };
                results.push(Some(refused(code, fields)));
            }
        }
    }
    if !valid.is_empty() {
        let answers = state.intake.accept_many(&valid, state.clock.now()).await.map_err(refusal)?;
        let mut stored = 0;
        for (i, answer) in positions.into_iter().zip(answers) {
            results[i] = Some(match answer {
                Ok(a) => {
                    stored += u64::from(!a.duplicate);
                    BatchItemOut { status: if a.duplicate { 200 } else { 201 }, event: Some(EventOut::from(&a)), error: None }
                }
                Err(StoreError::UnknownMerchant(id)) => {
                    refused("unknown_merchant", vec![FieldError::new("merchant_id", format!("merchant {id} does not exist"))])
                }
                Err(StoreError::Invalid(e)) => refused("invalid_input", vec![FieldError::new("", e.to_string())]),
                Err(e) => return Err(ApiError::internal("accepting an event batch", &e)),
            });
        }
        crate::telemetry::record_events_accepted(stored);
    }
    Ok(Json(BatchOut { results: results.into_iter().flatten().collect() }))
}
