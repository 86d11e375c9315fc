//! What the API promises its generated clients beyond single routes: the
//! penalties endpoint reads `Retry-After` exactly like the engine (one table
//! drives both), and a 422 names every invalid field with the messages the
//! Limits page shows.

use std::sync::Arc;
use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use sluice_engine::clock::{ManualClock, SharedClock};
use sluice_engine::quota::{RuleDraft, RuleId};
use sluice_engine::retry::retry_after_cases::{CASES, NOW};

use crate::api::{assert_error, spawn_api, spawn_api_on};
use crate::helpers::Mode;

/// The fields of a 422 as (field, message) pairs, in the order given.
fn fields(body: &Value) -> Vec<(String, String)> {
    body["fields"]
        .as_array()
        .unwrap_or_else(|| panic!("a 422 carries fields: {body}"))
        .iter()
        .map(|f| (f["field"].as_str().expect("field").to_owned(), f["message"].as_str().expect("message").to_owned()))
        .collect()
}

async fn penalties_read_retry_after_like_the_engine(mode: Mode) {
    let clock: SharedClock = Arc::new(ManualClock::new(NOW));
    let api = spawn_api_on(mode, &[], clock).await;
    // One token's refill is 1 µs, so the penalty is the Retry-After itself
    // (rounded up to the next millisecond when it is zero).
    let rule = json!({"scope": "retry_after_table", "tokens": 1000, "interval_ms": 1});
    let (status, _, body) = api.call(Method::POST, "/api/v1/limits", Some(&api.admin), Some(rule)).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    for (i, case) in CASES.iter().enumerate() {
        let penalty = json!({"account": format!("a{i}"), "scope": "retry_after_table", "path": "/x", "retry_after": case.value});
        let (status, _, body) = api.post("/api/v1/penalties", penalty).await;
        match case.wait_secs {
            Some(secs) => {
                assert_eq!(status, StatusCode::OK, "{:?}: {body}", case.value);
                assert_eq!(body["blocked_ms"], (secs * 1000).max(1), "{:?}: {body}", case.value);
            }
            None => {
                assert_error(status, &body, StatusCode::UNPROCESSABLE_ENTITY, "invalid_input");
                assert_eq!(fields(&body).len(), 1, "{body}");
                assert_eq!(fields(&body)[0].0, "retry_after", "{:?}: {body}", case.value);
            }
        }
    }
}

#[tokio::test]
async fn penalties_read_retry_after_like_the_engine_embedded() {
    penalties_read_retry_after_like_the_engine(Mode::Embedded).await;
}

#[tokio::test]
async fn penalties_read_retry_after_like_the_engine_distributed() {
    penalties_read_retry_after_like_the_engine(Mode::Distributed).await;
}

#[tokio::test]
async fn json_numbers_are_read_as_their_text_so_fractions_are_refused_too() {
    let api = spawn_api(Mode::Embedded).await;
    let target = json!({"account": "n", "scope": "vtex_pricing", "method": "PUT", "path": "/p"});
    for (value, ok) in [(json!(30), true), (json!(1.5), false), (json!(1e3), false), (json!(-1), false)] {
        let mut penalty = target.clone();
        penalty["retry_after"] = value.clone();
        let (status, _, body) = api.post("/api/v1/penalties", penalty).await;
        let want = if ok { StatusCode::OK } else { StatusCode::UNPROCESSABLE_ENTITY };
        assert_eq!(status, want, "{value}: {body}");
    }
}

#[tokio::test]
async fn an_invalid_rule_names_each_field_with_the_limits_page_message() {
    let api = spawn_api(Mode::Embedded).await;
    let bad = json!({"scope": "bad scope!", "tokens": 0, "interval_ms": 0, "max_wait_ms": 7_200_000, "concurrency": 0});
    let (status, _, body) = api.call(Method::POST, "/api/v1/limits", Some(&api.admin), Some(bad)).await;
    assert_error(status, &body, StatusCode::UNPROCESSABLE_ENTITY, "invalid_rule");
    // The engine's errors for the same draft, as the Limits page shows them.
    let draft = RuleDraft {
        scope: "bad scope!".into(),
        method: None,
        path: None,
        algorithm: None,
        tokens: 0,
        interval: Duration::ZERO,
        burst: None,
        concurrency: Some(0),
        max_wait: Some(Duration::from_secs(7200)),
        min_penalty: None,
        shadow: false,
        enabled: true,
        note: String::new(),
    };
    let engine = draft.into_rule(RuleId("r".into())).expect_err("invalid draft");
    let api_name = |f: &str| if matches!(f, "interval" | "max_wait") { format!("{f}_ms") } else { f.to_owned() };
    let want: Vec<(String, String)> = engine.iter().map(|e| (api_name(e.field()), e.message())).collect();
    assert_eq!(fields(&body), want, "{body}");
    let names: Vec<String> = want.iter().map(|(f, _)| f.clone()).collect();
    assert_eq!(names, ["scope", "tokens", "interval_ms", "concurrency", "max_wait_ms"]);
    assert!(want.iter().all(|(f, m)| !m.starts_with(&format!("{f}:"))), "messages do not repeat the field: {want:?}");
    // The one-line message still says it all, for logs.
    let message = body["message"].as_str().expect("message");
    assert!(want.iter().all(|(f, m)| message.contains(&format!("{f}: {m}"))), "{message}");
}

#[tokio::test]
async fn a_permit_asks_in_its_lane_and_the_other_quota_endpoints_accept_and_ignore_it() {
    let api = spawn_api(Mode::Embedded).await;
    let account = format!("lanes-{}", ulid::Ulid::new());
    // One a minute as a token bucket (no window edge to land on): ceiling 2 min 5 s.
    let scope = format!("lanes{}", ulid::Ulid::new()).to_lowercase();
    let rule = json!({"scope": scope, "tokens": 1, "interval_ms": 60_000, "algorithm": "token_bucket", "burst": 1});
    let (status, _, body) = api.call(Method::POST, "/api/v1/limits", Some(&api.admin), Some(rule)).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let ask = |priority: &str| json!({"account": account, "scope": scope, "method": "GET", "path": "/x", "priority": priority});
    let wait = |body: &Value| body["wait_ms"].as_u64();
    let (status, _, body) = api.post("/api/v1/permits", ask("low")).await;
    assert_eq!((status, wait(&body)), (StatusCode::OK, Some(0)), "{body}");
    let (status, _, body) = api.post("/api/v1/permits", ask("low")).await;
    assert_eq!((status, body["reason"].as_str()), (StatusCode::TOO_MANY_REQUESTS, Some("wait_ceiling_exceeded")), "low books nothing ahead: {body}");
    for _ in 0..2 {
        assert_eq!(api.post("/api/v1/permits", ask("normal")).await.0, StatusCode::OK);
    }
    assert_eq!(api.post("/api/v1/permits", ask("normal")).await.0, StatusCode::TOO_MANY_REQUESTS);
    let (status, _, body) = api.post("/api/v1/permits", ask("high")).await;
    assert_eq!(status, StatusCode::OK, "high books one slot beyond normal: {body}");
    assert!(wait(&body).is_some_and(|ms| (179_000..=180_000).contains(&ms)), "{body}");
    // Penalties and breaker calls take the field and ignore it; a bad value is still named.
    let mut penalty = ask("high");
    penalty["status_429"] = json!(true);
    let (status, _, body) = api.post("/api/v1/penalties", penalty.clone()).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    penalty["priority"] = json!("urgent");
    let (status, _, body) = api.post("/api/v1/penalties", penalty).await;
    assert_error(status, &body, StatusCode::UNPROCESSABLE_ENTITY, "invalid_input");
    assert_eq!(fields(&body)[0].0, "priority", "{body}");
    let admit = json!({"account": account, "scope": scope, "priority": "low"});
    assert_eq!(api.post("/api/v1/upstream-breakers/admit", admit).await.0, StatusCode::OK);
    let report = json!({"account": account, "scope": scope, "status": 200, "priority": "nope"});
    let (status, _, body) = api.post("/api/v1/upstream-breakers/report", report).await;
    assert_error(status, &body, StatusCode::UNPROCESSABLE_ENTITY, "invalid_input");
    assert_eq!(fields(&body)[0].0, "priority", "{body}");
}

#[tokio::test]
async fn a_bad_permit_names_every_invalid_field_at_once() {
    let api = spawn_api(Mode::Embedded).await;
    let bad = json!({"scope": "", "path": "relative", "max_wait_ms": 99_999_999, "priority": "urgent"});
    let (status, _, body) = api.post("/api/v1/permits", bad).await;
    assert_error(status, &body, StatusCode::UNPROCESSABLE_ENTITY, "invalid_input");
    let names: Vec<String> = fields(&body).into_iter().map(|(f, _)| f).collect();
    assert_eq!(names, ["scope", "path", "priority", "max_wait_ms"], "{body}");

    let (status, _, body) = api.post("/api/v1/permits", json!({"scope": "vtex_pricing", "path": "/p", "cost": "one"})).await;
    assert_error(status, &body, StatusCode::UNPROCESSABLE_ENTITY, "invalid_body");
    assert_eq!(fields(&body)[0].0, "cost", "{body}");
    let (status, _, body) = api.post("/api/v1/permits", json!({"scope": "vtex_pricing"})).await;
    assert_eq!(fields(&body), [("path".to_owned(), "missing field `path`".to_owned())], "{status} {body}");
    let (status, _, body) =
        api.post("/api/v1/permits", json!({"scope": "vtex_pricing", "method": "PUT", "path": "/p", "account": "a:b"})).await;
    assert_error(status, &body, StatusCode::UNPROCESSABLE_ENTITY, "invalid_account");
    assert_eq!(fields(&body)[0].0, "account", "{body}");
}

#[tokio::test]
async fn errors_other_than_422_carry_no_fields() {
    let api = spawn_api(Mode::Embedded).await;
    let (status, body) = api.raw_post("/api/v1/permits", "application/json", "{not json").await;
    assert_error(status, &body, StatusCode::BAD_REQUEST, "invalid_json");
    assert!(body.get("fields").is_none(), "{body}");
    let (status, _, body) = api.call(Method::POST, "/api/v1/permits", None, Some(json!({}))).await;
    assert_error(status, &body, StatusCode::UNAUTHORIZED, "unauthorized");
    assert!(body.get("fields").is_none(), "{body}");
}
