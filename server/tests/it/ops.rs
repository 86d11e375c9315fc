//! Liveness, readiness and metrics.

use crate::helpers::{closed_port, sample, spawn_app, spawn_app_with, Mode};

#[tokio::test]
async fn healthz_answers_while_the_process_is_up() {
    let app = spawn_app(Mode::Embedded).await;
    let resp = app.get("/healthz").await;
    assert_eq!(resp.status(), 200);
    let body: serde_json::Value = resp.json().await.expect("json");
    assert_eq!(body["status"], "ok");
}

#[tokio::test]
async fn readyz_is_ready_in_embedded_mode_without_redis() {
    let app = spawn_app(Mode::Embedded).await;
    let resp = app.get("/readyz").await;
    assert_eq!(resp.status(), 200);
    let body: serde_json::Value = resp.json().await.expect("json");
    assert_eq!(body["ready"], true);
    assert_eq!(body["checks"]["database_backend"], "sqlite");
    assert_eq!(body["checks"]["redis"], "NotConfigured");
}

#[tokio::test]
async fn readyz_is_ready_with_postgres_and_redis() {
    let app = spawn_app(Mode::Distributed).await;
    let resp = app.get("/readyz").await;
    let status = resp.status();
    let body: serde_json::Value = resp.json().await.expect("json");
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["checks"]["database_backend"], "postgres");
    assert_eq!(body["checks"]["redis"], "Up");
}

#[tokio::test]
async fn readyz_reports_an_unreachable_redis_as_not_ready() {
    let redis = format!("redis://127.0.0.1:{}", closed_port());
    let app = spawn_app_with(Mode::Embedded, &[("REDIS_URL", &redis)]).await;
    let resp = app.get("/readyz").await;
    assert_eq!(resp.status(), 503);
    let body: serde_json::Value = resp.json().await.expect("json");
    assert_eq!(body["ready"], false);
    assert!(body["checks"]["redis"]["Down"].is_string(), "{body}");
    // The process itself is still alive.
    assert_eq!(app.get("/healthz").await.status(), 200);
}

#[tokio::test]
async fn metrics_count_requests_by_route_in_prometheus_format() {
    let app = spawn_app(Mode::Embedded).await;
    for _ in 0..3 {
        app.get("/healthz").await;
    }
    let resp = app.get("/metrics").await;
    assert_eq!(resp.status(), 200);
    let text = resp.text().await.expect("text");
    let count = sample(&text, "sluice_http_requests_total", &["route=\"/healthz\"", "status=\"200\""])
        .unwrap_or_else(|| panic!("no request counter for /healthz in:\n{text}"));
    // The recorder is process-wide and other tests also hit /healthz.
    assert!(count >= 3.0, "{count}");
    assert!(text.contains("sluice_http_request_duration_seconds_bucket"), "latency histogram missing");
}
