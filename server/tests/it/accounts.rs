//! Account ids at the API's edge (one rule for permits, penalties and
//! leases, written in the OpenAPI document), and what `/metrics` says about
//! the memory the quota buckets take.

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use crate::api::{assert_error, feed_permit, spawn_api};
use crate::helpers::{sample, Mode};

#[tokio::test]
async fn accounts_with_control_invisible_or_key_breaking_characters_are_refused_with_a_422() {
    let api = spawn_api(Mode::Embedded).await;
    let cases = [
        ("a\u{0}b", "U+0000"),
        ("line\nbreak", "U+000A"),
        ("tab\tbed", "U+0009"),
        ("two words", "U+0020"),
        ("zero\u{200b}width", "U+200B"),
        ("bidi\u{202e}", "U+202E"),
        ("a{b}", "'{'"),
        ("a:b", "':'"),
    ];
    for (account, named) in cases {
        for (path, body) in [
            ("/api/v1/permits", feed_permit(account)),
            ("/api/v1/penalties", json!({"account": account, "scope": "wb_feeds", "method": "GET", "path": "/feeds/1", "status_429": true})),
        ] {
            let (status, _, out) = api.post(path, body).await;
            assert_error(status, &out, StatusCode::UNPROCESSABLE_ENTITY, "invalid_account");
            let message = out["message"].as_str().unwrap_or_default();
            assert!(message.contains(named), "{path} {account:?}: {message}");
        }
    }
    let (status, _, out) = api.post("/api/v1/permits", feed_permit(&"x".repeat(129))).await;
    assert_error(status, &out, StatusCode::UNPROCESSABLE_ENTITY, "invalid_account");
    // Nothing refused reached the store.
    let (_, _, buckets) = api.call(Method::GET, "/api/v1/buckets", Some(&api.worker), None).await;
    assert_eq!(buckets["buckets"].as_array().map(Vec::len), Some(0), "{buckets}");

    let (status, _, ok) = api.post("/api/v1/permits", feed_permit("продавец-42")).await;
    assert_eq!(status, StatusCode::OK, "letters of any script are fine: {ok}");
}

#[tokio::test]
async fn the_openapi_document_states_the_account_rule() {
    let api = spawn_api(Mode::Embedded).await;
    let (_, _, doc) = api.call(Method::GET, "/api/openapi.json", None, None).await;
    for schema in ["PermitIn", "PenaltyIn"] {
        let description = doc["components"]["schemas"][schema]["properties"]["account"]["description"]
            .as_str()
            .unwrap_or_default();
        assert!(
            description.contains("1–128 bytes") && description.contains("control") && description.contains("'{'"),
            "{schema}: {description:?}"
        );
    }
}

#[tokio::test]
async fn metrics_show_live_buckets_and_resident_memory() {
    let api = spawn_api(Mode::Embedded).await;
    for account in ["m1", "m2", "m3"] {
        let (status, _, body): (StatusCode, _, Value) = api.post("/api/v1/permits", feed_permit(account)).await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }
    let text = api.app.get("/metrics").await.text().await.expect("metrics");
    assert_eq!(sample(&text, "sluice_quota_live_buckets", &["store=\"memory\""]), Some(3.0), "{text}");
    let rss = sample(&text, "process_resident_memory_bytes", &[]).expect("resident memory");
    assert!(rss > 1_000_000.0, "a running server holds more than a megabyte: {rss}");
}
