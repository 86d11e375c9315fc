//! Operations endpoints: liveness, readiness, Prometheus metrics.

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Json, Router};

use crate::state::AppState;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/healthz", get(get_healthz))
        .route("/readyz", get(get_readyz))
        .route("/metrics", get(get_metrics))
}

/// The process is up and serving HTTP. Nothing else is checked.
async fn get_healthz() -> impl IntoResponse {
    (StatusCode::OK, Json(serde_json::json!({ "status": "ok" })))
}

/// Ready to take traffic: the database and (when configured) Redis answer.
async fn get_readyz(State(state): State<AppState>) -> impl IntoResponse {
    let report = state.health.report().await;
    let status = if report.is_ready() { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    (status, Json(serde_json::json!({ "ready": report.is_ready(), "checks": report })))
}

async fn get_metrics(State(state): State<AppState>) -> impl IntoResponse {
    crate::telemetry::refresh_gauges(&state.deliveries, &state.limiter).await;
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], state.prometheus.render())
}
