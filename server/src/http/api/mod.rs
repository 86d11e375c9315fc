//! The HTTP API for workers: JSON under `/api/v1`, bearer tokens,
//! errors as `{"code", "message"}`. One router per resource, merged here.

pub mod auth;
pub mod buckets;
pub mod deliveries;
pub mod error;
pub mod events;
pub mod leases;
pub mod limits;
pub mod merchants;
pub mod openapi;
pub mod penalties;
pub mod permits;
pub mod quota_input;
pub mod retry_profiles;
pub mod upstream_breakers;

use std::sync::Arc;

use axum::extract::DefaultBodyLimit;
use axum::routing::{any, get};
use axum::Router;
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;

use error::ApiError;

use crate::state::AppState;

/// Largest accepted request body. Permits and penalties are tiny; events
/// carry a webhook payload, which merchants should not receive in megabytes.
pub const BODY_LIMIT_BYTES: usize = 256 * 1024;

pub fn router() -> Router<AppState> {
    let (routes, mut doc) = documented_router().split_for_parts();
    openapi::document_common_responses(&mut doc);
    // Rendered once: the document does not change while the process runs.
    let doc: Arc<str> = match doc.to_json() {
        Ok(json) => json.into(),
        Err(e) => {
            tracing::error!(error = %e, "rendering the OpenAPI document");
            "{}".into()
        }
    };
    routes
        .route("/api/openapi.json", get(move || openapi_json(doc.clone())))
        .route("/api/v1/{*rest}", any(unknown_route))
        .layer(DefaultBodyLimit::max(BODY_LIMIT_BYTES))
}

/// Every API route with its OpenAPI description.
pub fn documented_router() -> OpenApiRouter<AppState> {
    OpenApiRouter::with_openapi(openapi::ApiDoc::openapi())
        .merge(permits::router())
        .merge(penalties::router())
        .merge(leases::router())
        .merge(events::router())
        .merge(deliveries::router())
        .merge(limits::router())
        .merge(retry_profiles::router())
        .merge(merchants::router())
        .merge(buckets::router())
        .merge(upstream_breakers::router())
}

async fn openapi_json(doc: Arc<str>) -> impl axum::response::IntoResponse {
    ([(axum::http::header::CONTENT_TYPE, "application/json")], doc.to_string())
}

/// Unknown API paths answer in the API's format, not with the web app's 404 page.
async fn unknown_route() -> ApiError {
    ApiError::new(axum::http::StatusCode::NOT_FOUND, "unknown_route", "no such API route; see /api/openapi.json")
}
