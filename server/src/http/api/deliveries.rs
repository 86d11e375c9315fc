//! Reads for the webhook outbox: deliveries by filter (keyset pages), one
//! delivery with its attempts; breakers.

use std::collections::BTreeMap;

use axum::extract::State;
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use sluice_engine::clock::Timestamp;
use sluice_engine::delivery::model::{Attempt, Cursor, Delivery, DeliveryFilter, DeliveryId, MerchantId};
use sluice_engine::delivery::queries::MAX_PAGE;
use sluice_engine::delivery::merchant_breaker::MerchantBreaker;
use sluice_engine::delivery::StoreError;
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::auth::Caller;
use super::error::{ApiError, ErrorOut, Json, Path, Query};
use crate::state::AppState;
use sluice_engine::tokens::ApiScope;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(list_deliveries)).routes(routes!(get_delivery)).routes(routes!(list_breakers))
}

#[derive(Debug, Serialize, ToSchema)]
pub struct DeliveryOut {
    #[schema(value_type = Object)]
    pub delivery: Delivery,
    /// Oldest first.
    pub attempts: Vec<AttemptOut>,
}

/// One attempt: what was sent and what the merchant answered.
#[derive(Debug, Serialize, ToSchema)]
pub struct AttemptOut {
    /// The attempt (`att_…`).
    pub id: String,
    /// The delivery (`msg_…`, its `X-Webhook-Id`).
    pub delivery_id: String,
    /// The merchant (`mer_…`).
    pub merchant_id: String,
    /// When it was sent, in Unix microseconds (like the delivery's instants).
    pub at: i64,
    /// The ladder that scheduled it: `fast` or `slow`.
    pub ladder: String,
    /// `success`, `client_error`, `rate_limited`, `server_error`, `network` or `timeout`.
    pub outcome: String,
    /// The answer's HTTP status; absent when no answer came back.
    pub status_code: Option<u16>,
    /// From sending to the end of the (bounded) answer, in milliseconds.
    pub latency_ms: i64,
    /// Why it did not succeed: the transport error, or `HTTP <status>`.
    pub error: Option<String>,
    /// What the merchant answered: at most 4 KiB of the body as text (lossy
    /// UTF-8, cut on a character boundary), signing secrets and
    /// `Bearer`/`Basic` credentials replaced by `[redacted]`.
    pub response_body: Option<String>,
    /// The body went on past `response_body`.
    pub response_truncated: bool,
    /// The request's headers as sent (lower-case names), signature headers
    /// included; never the signing secret. Absent when no request went out
    /// or the attempt predates their recording.
    pub request_headers: Option<BTreeMap<String, String>>,
    /// The answer's headers (lower-case names, repeats joined by `, `),
    /// credential headers (`authorization`, cookies, tokens) redacted.
    pub response_headers: Option<BTreeMap<String, String>>,
    /// The trial request of a half-open merchant breaker.
    pub probe: bool,
}

impl From<Attempt> for AttemptOut {
    fn from(a: Attempt) -> Self {
        AttemptOut {
            id: a.id.as_str().to_owned(),
            delivery_id: a.delivery_id.as_str().to_owned(),
            merchant_id: a.merchant_id.as_str().to_owned(),
            at: a.at.as_micros(),
            ladder: a.ladder.as_str().to_owned(),
            outcome: a.outcome.as_str().to_owned(),
            status_code: a.status_code,
            latency_ms: a.latency_ms,
            error: a.error,
            response_body: a.response_body,
            response_truncated: a.response_truncated,
            request_headers: a.request_headers,
            response_headers: a.response_headers,
            probe: a.probe,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct BreakersOut {
    /// Merchant breakers that are not closed.
    #[schema(value_type = Vec<Object>)]
    pub breakers: Vec<MerchantBreaker>,
}

#[utoipa::path(get, path = "/api/v1/deliveries/{id}", tag = "webhooks",
    params(("id" = String, Path, description = "Delivery id (`msg_…`)")),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The delivery and its attempts", body = DeliveryOut),
        (status = 404, description = "No such delivery", body = ErrorOut),
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
    Ok(Json(DeliveryOut { delivery, attempts: attempts.into_iter().map(AttemptOut::from).collect() }))
}

#[utoipa::path(get, path = "/api/v1/breakers", tag = "webhooks",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Breakers that are open or probing", body = BreakersOut),
    ))]
pub async fn list_breakers(State(state): State<AppState>, caller: Caller) -> Result<Json<BreakersOut>, ApiError> {
    caller.require(ApiScope::Worker)?;
    let breakers = state.deliveries.open_breakers().await.map_err(|e| ApiError::internal("reading breakers", &e))?;
    Ok(Json(BreakersOut { breakers }))
}

/// Page size when the caller names none.
const DEFAULT_PAGE: u32 = 50;

/// Filters and cursor of `GET /api/v1/deliveries`.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct DeliveryQuery {
    /// `PENDING`, `DELIVERING`, `DELIVERED` or `FAILED`.
    pub status: Option<String>,
    /// The merchant (`mer_…`).
    pub merchant_id: Option<String>,
    /// e.g. `payment.status_changed`.
    pub event_type: Option<String>,
    /// `true`: money events only; `false`: the rest only.
    pub money: Option<bool>,
    /// `fast` or `slow`: the ladder of the last or next attempt.
    pub ladder: Option<String>,
    /// Created at or after this instant (Unix milliseconds).
    pub created_from_ms: Option<i64>,
    /// Created before this instant (Unix milliseconds).
    pub created_to_ms: Option<i64>,
    /// The `next` of the previous page.
    pub after: Option<String>,
    /// Page size, 1 to 500 (default 50).
    pub limit: Option<u32>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct DeliveriesOut {
    /// Newest first.
    #[schema(value_type = Vec<Object>)]
    pub items: Vec<Delivery>,
    /// Pass as `after` for the next page; absent on the last page.
    pub next: Option<String>,
}

fn bad_query(message: impl Into<String>) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, "invalid_query", message)
}

impl DeliveryQuery {
    fn filter(&self) -> Result<DeliveryFilter, ApiError> {
        let parse_time = |name: &str, ms: Option<i64>| match ms {
            Some(ms) if ms < 0 => Err(bad_query(format!("{name} must be a Unix time in milliseconds, not negative"))),
            Some(ms) => Ok(Some(Timestamp::from_millis(ms))),
            None => Ok(None),
        };
        Ok(DeliveryFilter {
            status: self.status.as_deref().map(str::parse).transpose().map_err(|_| {
                bad_query("status must be one of PENDING, DELIVERING, DELIVERED, FAILED")
            })?,
            merchant_id: self
                .merchant_id
                .as_deref()
                .map(MerchantId::parse)
                .transpose()
                .map_err(|_| bad_query("merchant_id must be a merchant id (mer_…)"))?,
            event_type: self.event_type.clone().filter(|t| !t.is_empty()),
            is_money: self.money,
            ladder: self.ladder.as_deref().map(str::parse).transpose().map_err(|_| bad_query("ladder must be fast or slow"))?,
            created_from: parse_time("created_from_ms", self.created_from_ms)?,
            created_to: parse_time("created_to_ms", self.created_to_ms)?,
        })
    }
}

/// The cursor as clients see it: `<created_at ms>.<delivery id>`. Opaque to
/// them; parsed strictly here.
fn encode_cursor(c: &Cursor) -> String {
    format!("{}.{}", c.created_at.as_millis(), c.id)
}

fn decode_cursor(s: &str) -> Result<Cursor, ApiError> {
    let bad = || bad_query("after must be the `next` value of a previous page");
    let (at, id) = s.split_once('.').ok_or_else(bad)?;
    let at: i64 = at.parse().map_err(|_| bad())?;
    Ok(Cursor { created_at: Timestamp::from_millis(at), id: DeliveryId::parse(id).map_err(|_| bad())? })
}

#[utoipa::path(get, path = "/api/v1/deliveries", tag = "webhooks", params(DeliveryQuery),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "One page of deliveries, newest first", body = DeliveriesOut),
        (status = 400, description = "A filter or the cursor is malformed", body = ErrorOut),
    ))]
pub async fn list_deliveries(State(state): State<AppState>, caller: Caller, Query(query): Query<DeliveryQuery>) -> Result<Json<DeliveriesOut>, ApiError> {
    caller.require(ApiScope::Worker)?;
    let filter = query.filter()?;
    let after = query.after.as_deref().map(decode_cursor).transpose()?;
    let limit = query.limit.unwrap_or(DEFAULT_PAGE);
    if !(1..=MAX_PAGE).contains(&limit) {
        return Err(bad_query(format!("limit must be between 1 and {MAX_PAGE}")));
    }
    let page = state
        .deliveries
        .list_deliveries(&filter, after.as_ref(), limit)
        .await
        .map_err(|e| ApiError::internal("listing deliveries", &e))?;
    Ok(Json(DeliveriesOut { next: page.next.as_ref().map(encode_cursor), items: page.items }))
}
