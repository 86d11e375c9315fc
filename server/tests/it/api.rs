//! The worker HTTP API: tokens and scopes, permits and refusals, penalties,
//! leases, idempotent events, and a JSON error for every kind of bad input.

use std::sync::Arc;

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use sluice_engine::tokens::{create_token, revoke_token, ApiScope};
use sluice_engine::clock::{SharedClock, SystemClock, Timestamp};
use sluice_engine::delivery::merchant_breaker::MerchantBreakerConfig;
use sluice_engine::delivery::model::{MerchantIn, SigningScheme};
use sluice_engine::delivery::ops::create_merchant;
use sluice_engine::delivery::ssrf::SsrfPolicy;
use sluice_engine::delivery::DeliveryStore;

use crate::helpers::{closed_port, spawn_app_with_clock, Mode, Role, TestApp};

const NOW: Timestamp = Timestamp::from_millis(1_700_000_000_000);

pub(crate) struct Api {
    pub(crate) app: TestApp,
    pub(crate) worker: String,
    pub(crate) admin: String,
}

pub(crate) async fn spawn_api(mode: Mode) -> Api {
    spawn_api_with(mode, &[]).await
}

pub(crate) async fn spawn_api_with(mode: Mode, extra: &[(&str, &str)]) -> Api {
    spawn_api_on(mode, extra, Arc::new(SystemClock)).await
}

/// An API whose clock is `clock` (a `ManualClock` fixes "now" for dates).
pub(crate) async fn spawn_api_on(mode: Mode, extra: &[(&str, &str)], clock: SharedClock) -> Api {
    // No delivery worker: events stay PENDING and nothing is sent anywhere.
    let mut settings = vec![("SLUICE_DELIVERY_WORKER", "false")];
    settings.extend_from_slice(extra);
    let app = spawn_app_with_clock(mode, &settings, clock).await;
    let db = app.db.db();
    let (_, worker) = create_token(&db, "worker-1", ApiScope::Worker, NOW).await.expect("worker token");
    let (_, admin) = create_token(&db, "admin-1", ApiScope::Admin, NOW).await.expect("admin token");
    Api { app, worker: worker.expose().to_owned(), admin: admin.expose().to_owned() }
}

impl Api {
    pub(crate) async fn call(&self, method: Method, path: &str, token: Option<&str>, body: Option<Value>) -> (StatusCode, reqwest::header::HeaderMap, Value) {
        let mut req = self.app.client.request(method, self.app.url(path));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        if let Some(b) = body {
            req = req.json(&b);
        }
        let res = req.send().await.expect("request");
        let status = res.status();
        let headers = res.headers().clone();
        let text = res.text().await.expect("body");
        let value = if text.is_empty() { Value::Null } else { serde_json::from_str(&text).unwrap_or(Value::String(text)) };
        (status, headers, value)
    }

    pub(crate) async fn post(&self, path: &str, body: Value) -> (StatusCode, reqwest::header::HeaderMap, Value) {
        self.call(Method::POST, path, Some(&self.worker), Some(body)).await
    }

    pub(crate) async fn raw_post(&self, path: &str, content_type: &str, body: impl Into<reqwest::Body>) -> (StatusCode, Value) {
        let res = self
            .app
            .client
            .post(self.app.url(path))
            .bearer_auth(&self.worker)
            .header("content-type", content_type)
            .body(body)
            .send()
            .await
            .expect("request");
        let status = res.status();
        (status, res.json().await.expect("a JSON error body"))
    }
}

pub(crate) fn assert_error(status: StatusCode, body: &Value, want_status: StatusCode, want_code: &str) {
    assert_eq!(status, want_status, "{body}");
    assert_eq!(body["code"], want_code, "{body}");
    assert!(body["message"].as_str().is_some_and(|m| !m.is_empty()), "{body}");
}

/// `wb_feeds` (a preset) allows one request per minute per account.
pub(crate) fn feed_permit(account: &str) -> Value {
    json!({"account": account, "scope": "wb_feeds", "method": "GET", "path": "/feeds/1"})
}

#[tokio::test]
async fn a_request_without_a_token_is_401_with_a_json_error() {
    let api = spawn_api(Mode::Embedded).await;
    let (status, _, body) = api.call(Method::POST, "/api/v1/permits", None, Some(feed_permit("a"))).await;
    assert_error(status, &body, StatusCode::UNAUTHORIZED, "unauthorized");
}

#[tokio::test]
async fn a_wrong_or_revoked_token_is_401() {
    let api = spawn_api(Mode::Embedded).await;
    let (status, _, body) = api.call(Method::POST, "/api/v1/permits", Some("slk_wrong"), Some(feed_permit("a"))).await;
    assert_error(status, &body, StatusCode::UNAUTHORIZED, "unauthorized");
    assert!(revoke_token(&api.app.db.db(), "worker-1", NOW).await.expect("revoke"));
    let (status, _, body) = api.post("/api/v1/permits", feed_permit("a")).await;
    assert_error(status, &body, StatusCode::UNAUTHORIZED, "unauthorized");
}

#[tokio::test]
async fn a_token_revoked_on_the_users_page_stops_at_once_although_tokens_are_cached() {
    let api = spawn_api(Mode::Embedded).await;
    let (status, _, body) = api.post("/api/v1/permits", feed_permit("a")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let admin = api.app.signed_in(Role::Admin).await;
    let resp = api.app.call(&admin, "/ui/tokens/revoke", &[("name", "worker-1")]).await;
    assert!(resp.status().is_success(), "{}", resp.status());
    let (status, _, body) = api.post("/api/v1/permits", feed_permit("b")).await;
    assert_error(status, &body, StatusCode::UNAUTHORIZED, "unauthorized");
}

#[tokio::test]
async fn a_token_revoked_elsewhere_works_for_at_most_the_cache_time() {
    // Cached: a revocation by another process is seen once the entry is
    // older than the cache time (the engine's test drives that clock; here
    // the longest allowed time keeps a slow machine from expiring it).
    let api = spawn_api_with(Mode::Embedded, &[("SLUICE_API_TOKEN_CACHE_SECS", "300")]).await;
    assert_eq!(api.post("/api/v1/permits", feed_permit("a")).await.0, StatusCode::OK);
    assert!(revoke_token(&api.app.db.db(), "worker-1", NOW).await.expect("revoke"));
    assert_eq!(api.post("/api/v1/permits", feed_permit("b")).await.0, StatusCode::OK, "still trusted from the cache");
    // Without the cache every request reads the database.
    let api = spawn_api_with(Mode::Embedded, &[("SLUICE_API_TOKEN_CACHE_SECS", "0")]).await;
    assert_eq!(api.post("/api/v1/permits", feed_permit("a")).await.0, StatusCode::OK);
    assert!(revoke_token(&api.app.db.db(), "worker-1", NOW).await.expect("revoke"));
    let (status, _, body) = api.post("/api/v1/permits", feed_permit("b")).await;
    assert_error(status, &body, StatusCode::UNAUTHORIZED, "unauthorized");
}

#[tokio::test]
async fn a_worker_token_cannot_write_limits() {
    let api = spawn_api(Mode::Embedded).await;
    let rule = json!({"scope": "s", "path": "/x", "algorithm": "token_bucket", "tokens": 5, "interval_ms": 1000});
    let (status, _, body) = api.post("/api/v1/limits", rule).await;
    assert_error(status, &body, StatusCode::FORBIDDEN, "forbidden");
    // The scope is checked before the body is read.
    let (status, _, body) = api.post("/api/v1/limits", json!({})).await;
    assert_error(status, &body, StatusCode::FORBIDDEN, "forbidden");
    let (status, _, body) = api.call(Method::DELETE, "/api/v1/limits/wb_feeds", Some(&api.worker), None).await;
    assert_error(status, &body, StatusCode::FORBIDDEN, "forbidden");
}

async fn permits_are_granted_then_refused_with_a_rounded_up_retry_after(mode: Mode) {
    let api = spawn_api(mode).await;
    let account = format!("acct{}", ulid::Ulid::new());
    let (status, _, body) = api.post("/api/v1/permits", feed_permit(&account)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["granted"], true);
    assert_eq!(body["wait_ms"], 0);
    assert_eq!(body["lease_id"], Value::Null);
    // One per minute in windows aligned to the minute; the wait ceiling for a
    // 1-token rule is 2 × 60 s + 5 s: later requests book waits until one
    // would land beyond the ceiling and is refused.
    let mut refused = None;
    for _ in 0..4 {
        let (status, headers, body) = api.post("/api/v1/permits", feed_permit(&account)).await;
        if status == StatusCode::OK {
            assert!(body["wait_ms"].as_u64().expect("wait_ms") > 0, "{body}");
        } else {
            refused = Some((status, headers, body));
            break;
        }
    }
    let (status, headers, body) = refused.expect("refused within four requests");
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    assert_eq!(body["granted"], false);
    assert_eq!(body["reason"], "wait_ceiling_exceeded");
    let retry_ms = body["retry_after_ms"].as_u64().expect("retry_after_ms");
    let header: u64 = headers["retry-after"].to_str().expect("ascii").parse().expect("whole seconds");
    assert_eq!(header, retry_ms.div_ceil(1000), "Retry-After is rounded up, never down");
    assert!(header > 60, "{header}");
}

#[tokio::test]
async fn permits_are_granted_then_refused_with_a_rounded_up_retry_after_embedded() {
    permits_are_granted_then_refused_with_a_rounded_up_retry_after(Mode::Embedded).await;
}

#[tokio::test]
async fn permits_are_granted_then_refused_with_a_rounded_up_retry_after_distributed() {
    permits_are_granted_then_refused_with_a_rounded_up_retry_after(Mode::Distributed).await;
}

#[tokio::test]
async fn a_held_permit_reports_the_time_held_not_a_wait() {
    let api = spawn_api(Mode::Embedded).await;
    let permit = json!({"account": "h", "scope": "vtex_pricing", "method": "PUT", "path": "/api/pricing/prices/1", "hold": true});
    let (status, _, body) = api.post("/api/v1/permits", permit).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["wait_ms"], 0);
    assert_eq!(body["held_ms"], 0);
}

#[tokio::test]
async fn every_kind_of_bad_permit_input_gets_a_4xx_json_error() {
    let api = spawn_api(Mode::Embedded).await;
    let pricing = |extra: Value| {
        let mut v = json!({"scope": "vtex_pricing", "method": "PUT", "path": "/p"});
        v.as_object_mut().expect("object").extend(extra.as_object().expect("object").clone());
        v
    };
    let cases = [
        (pricing(json!({"cost": 0})), StatusCode::UNPROCESSABLE_ENTITY, "invalid_cost"),
        (pricing(json!({"cost": 5000})), StatusCode::UNPROCESSABLE_ENTITY, "invalid_cost"),
        (pricing(json!({"cost": -1})), StatusCode::UNPROCESSABLE_ENTITY, "invalid_body"),
        (pricing(json!({"cost": "one"})), StatusCode::UNPROCESSABLE_ENTITY, "invalid_body"),
        (pricing(json!({"max_wait_ms": 99_999_999})), StatusCode::UNPROCESSABLE_ENTITY, "invalid_input"),
        (pricing(json!({"account": "a:b"})), StatusCode::UNPROCESSABLE_ENTITY, "invalid_account"),
        (pricing(json!({"colour": "red"})), StatusCode::UNPROCESSABLE_ENTITY, "invalid_body"),
        (json!({"scope": "vtex_pricing", "method": "PUT"}), StatusCode::UNPROCESSABLE_ENTITY, "invalid_body"),
        (json!({"scope": "nobody_knows", "method": "GET", "path": "/x"}), StatusCode::UNPROCESSABLE_ENTITY, "no_rule"),
        (json!({"scope": "vtex_pricing", "method": "PUT", "path": "relative"}), StatusCode::UNPROCESSABLE_ENTITY, "invalid_input"),
        (json!([1, 2]), StatusCode::UNPROCESSABLE_ENTITY, "invalid_body"),
    ];
    for (body, want_status, want_code) in cases {
        let (status, _, out) = api.post("/api/v1/permits", body.clone()).await;
        assert_error(status, &out, want_status, want_code);
    }
    let (status, body) = api.raw_post("/api/v1/permits", "application/json", "{not json").await;
    assert_error(status, &body, StatusCode::BAD_REQUEST, "invalid_json");
    let (status, body) = api.raw_post("/api/v1/permits", "text/plain", "{}").await;
    assert_error(status, &body, StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type");
    let huge = format!("{{\"scope\": \"{}\"}}", "x".repeat(sluice::http::api::BODY_LIMIT_BYTES + 1));
    let (status, body) = api.raw_post("/api/v1/permits", "application/json", huge).await;
    assert_error(status, &body, StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large");
}

async fn a_penalty_blocks_the_bucket_until_its_retry_after(mode: Mode) {
    let api = spawn_api(mode).await;
    let account = format!("acct{}", ulid::Ulid::new());
    let target = json!({"account": account, "scope": "vtex_pricing", "method": "PUT", "path": "/api/pricing/prices/1"});
    let mut penalty = target.clone();
    penalty["retry_after"] = json!("600");
    let (status, _, body) = api.post("/api/v1/penalties", penalty).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body["blocked_ms"].as_u64().expect("blocked_ms") >= 599_000, "{body}");
    let (status, headers, body) = api.post("/api/v1/permits", target.clone()).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    assert!(headers["retry-after"].to_str().expect("ascii").parse::<u64>().expect("secs") >= 599);
    let mut nothing = target;
    nothing["retry_after"] = json!("soon");
    let (status, _, body) = api.post("/api/v1/penalties", nothing).await;
    assert_error(status, &body, StatusCode::UNPROCESSABLE_ENTITY, "invalid_input");
}

#[tokio::test]
async fn a_penalty_blocks_the_bucket_until_its_retry_after_embedded() {
    a_penalty_blocks_the_bucket_until_its_retry_after(Mode::Embedded).await;
}

#[tokio::test]
async fn a_penalty_blocks_the_bucket_until_its_retry_after_distributed() {
    a_penalty_blocks_the_bucket_until_its_retry_after(Mode::Distributed).await;
}

#[tokio::test]
async fn rate_limit_headers_with_nothing_remaining_block_the_bucket() {
    let api = spawn_api(Mode::Embedded).await;
    let target = json!({"account": "obs", "scope": "vtex_pricing", "method": "PUT", "path": "/p",
        "rate_limit_remaining": "0", "rate_limit_reset": 300});
    let (status, _, body) = api.post("/api/v1/penalties", target).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["observed"], true);
    let (status, _, body) =
        api.post("/api/v1/permits", json!({"account": "obs", "scope": "vtex_pricing", "method": "PUT", "path": "/p"})).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
}

pub(crate) async fn merchant(api: &Api) -> String {
    let input = MerchantIn { name: "Shop".into(), url: "https://merchant.example/hook".into(), scheme: SigningScheme::Sluice, secret: None };
    let store = DeliveryStore::new(api.app.db.db());
    let m = create_merchant(&store, input, &SsrfPolicy::strict(), &MerchantBreakerConfig::default(), sluice_engine::delivery::ops::Actor::named("test"), NOW).await.expect("merchant");
    m.id.as_str().to_owned()
}

async fn the_same_event_key_twice_stores_one_event(mode: Mode) {
    let api = spawn_api(mode).await;
    let merchant_id = merchant(&api).await;
    let event = json!({"merchant_id": merchant_id, "event_type": "payment.status_changed", "status": "paid",
        "payload": {"id": "pay_1", "status": "paid"}, "idempotency_key": "pay_1:paid"});
    let (status, _, first) = api.post("/api/v1/events", event.clone()).await;
    assert_eq!(status, StatusCode::CREATED, "{first}");
    assert_eq!(first["duplicate"], false);
    let (status, _, second) = api.post("/api/v1/events", event).await;
    assert_eq!(status, StatusCode::OK, "{second}");
    assert_eq!(second["duplicate"], true);
    assert_eq!(first["event_id"], second["event_id"]);
    assert_eq!(first["delivery_ids"], second["delivery_ids"]);

    let id = first["delivery_ids"][0].as_str().expect("a delivery id");
    let (status, _, body) = api.call(Method::GET, &format!("/api/v1/deliveries/{id}"), Some(&api.worker), None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["delivery"]["status"], "PENDING");
    assert_eq!(body["attempts"], json!([]));
}

#[tokio::test]
async fn the_same_event_key_twice_stores_one_event_embedded() {
    the_same_event_key_twice_stores_one_event(Mode::Embedded).await;
}

#[tokio::test]
async fn the_same_event_key_twice_stores_one_event_distributed() {
    the_same_event_key_twice_stores_one_event(Mode::Distributed).await;
}

async fn a_batch_answers_each_event_on_its_own_like_single_calls(mode: Mode) {
    let api = spawn_api(mode).await;
    let merchant_id = merchant(&api).await;
    let event = |key: &str| json!({"merchant_id": merchant_id, "event_type": "order.created", "payload": {"key": key}, "idempotency_key": key});
    // Stored before by a single call: the batch finds it.
    let (status, _, earlier) = api.post("/api/v1/events", event("k0")).await;
    assert_eq!(status, StatusCode::CREATED, "{earlier}");
    let batch = json!([
        event("k1"),
        event("k1"),
        event("k0"),
        {"merchant_id": "mer_01hzzzzzzzzzzzzzzzzzzzzzzz", "event_type": "x", "payload": {}, "idempotency_key": "k2"},
        {"merchant_id": merchant_id, "event_type": "x", "payload": [1], "idempotency_key": "k3"},
        event("k4"),
    ]);
    let (status, _, body) = api.post("/api/v1/events/batch", batch).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let results = body["results"].as_array().expect("results");
    let statuses: Vec<u64> = results.iter().map(|r| r["status"].as_u64().expect("status")).collect();
    assert_eq!(statuses, [201, 200, 200, 422, 422, 201], "{body}");
    assert_eq!(results[1]["event"]["event_id"], results[0]["event"]["event_id"], "the same key twice in one batch stores one event");
    assert_eq!(results[1]["event"]["delivery_ids"], results[0]["event"]["delivery_ids"]);
    assert_eq!(results[1]["event"]["duplicate"], true);
    assert_eq!(results[2]["event"]["event_id"], earlier["event_id"]);
    assert_eq!(results[3]["error"]["code"], "unknown_merchant");
    assert_eq!(results[3]["error"]["fields"][0]["field"], "merchant_id");
    assert_eq!(results[4]["error"]["code"], "invalid_input");
    assert_ne!(results[5]["event"]["event_id"], results[0]["event"]["event_id"]);
    // Exactly three events stored: k0, k1, k4.
    let stored: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM events").fetch_one(api.app.db.pool()).await.expect("count");
    assert_eq!(stored, 3);

    for bad in [json!([]), json!((0..1001).map(|i| event(&format!("m{i}"))).collect::<Vec<_>>())] {
        let (status, _, body) = api.post("/api/v1/events/batch", bad).await;
        assert_error(status, &body, StatusCode::UNPROCESSABLE_ENTITY, "invalid_batch");
    }
}

#[tokio::test]
async fn a_batch_answers_each_event_on_its_own_like_single_calls_embedded() {
    a_batch_answers_each_event_on_its_own_like_single_calls(Mode::Embedded).await;
}

#[tokio::test]
async fn a_batch_answers_each_event_on_its_own_like_single_calls_distributed() {
    a_batch_answers_each_event_on_its_own_like_single_calls(Mode::Distributed).await;
}

async fn concurrent_single_calls_committed_together_each_get_their_own_answer(mode: Mode) {
    let api = spawn_api(mode).await;
    let merchant_id = merchant(&api).await;
    // 40 calls at once, keys 0..20 each twice: the group commit must store
    // 20 events and answer each pair with the same ids, once 201 and once 200.
    let calls = (0..40).map(|i| {
        let event = json!({"merchant_id": merchant_id, "event_type": "order.created", "payload": {"i": i % 20}, "idempotency_key": format!("g{}", i % 20)});
        let api = &api;
        async move { (i % 20, api.post("/api/v1/events", event).await) }
    });
    let answers = futures::future::join_all(calls).await;
    let mut by_key: std::collections::HashMap<i32, Vec<(StatusCode, Value)>> = std::collections::HashMap::new();
    for (key, (status, _, body)) in answers {
        by_key.entry(key).or_default().push((status, body));
    }
    for (key, pair) in &by_key {
        let mut codes: Vec<u16> = pair.iter().map(|(s, _)| s.as_u16()).collect();
        codes.sort();
        assert_eq!(codes, [200, 201], "key g{key}: {pair:?}");
        assert_eq!(pair[0].1["event_id"], pair[1].1["event_id"], "key g{key}");
        assert_eq!(pair[0].1["delivery_ids"], pair[1].1["delivery_ids"], "key g{key}");
    }
    let stored: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM deliveries").fetch_one(api.app.db.pool()).await.expect("count");
    assert_eq!(stored, 20);
}

#[tokio::test]
async fn concurrent_single_calls_committed_together_each_get_their_own_answer_embedded() {
    concurrent_single_calls_committed_together_each_get_their_own_answer(Mode::Embedded).await;
}

#[tokio::test]
async fn concurrent_single_calls_committed_together_each_get_their_own_answer_distributed() {
    concurrent_single_calls_committed_together_each_get_their_own_answer(Mode::Distributed).await;
}

#[tokio::test]
async fn bad_events_and_unknown_deliveries_are_4xx() {
    let api = spawn_api(Mode::Embedded).await;
    let merchant_id = merchant(&api).await;
    let unknown = json!({"merchant_id": "mer_01hzzzzzzzzzzzzzzzzzzzzzzz", "event_type": "x", "payload": {}, "idempotency_key": "k"});
    let (status, _, body) = api.post("/api/v1/events", unknown).await;
    assert_error(status, &body, StatusCode::UNPROCESSABLE_ENTITY, "unknown_merchant");
    let not_object = json!({"merchant_id": merchant_id, "event_type": "x", "payload": [1], "idempotency_key": "k"});
    let (status, _, body) = api.post("/api/v1/events", not_object).await;
    assert_error(status, &body, StatusCode::UNPROCESSABLE_ENTITY, "invalid_input");
    for id in ["msg_01hzzzzzzzzzzzzzzzzzzzzzzz", "nonsense"] {
        let (status, _, body) = api.call(Method::GET, &format!("/api/v1/deliveries/{id}"), Some(&api.worker), None).await;
        assert_error(status, &body, StatusCode::NOT_FOUND, "not_found");
    }
}

#[tokio::test]
async fn a_bogus_lease_id_is_404() {
    let api = spawn_api(Mode::Embedded).await;
    let (status, _, body) = api.call(Method::DELETE, "/api/v1/leases/lse_zz", Some(&api.worker), None).await;
    assert_error(status, &body, StatusCode::NOT_FOUND, "not_found");
}

async fn create_rule(api: &Api, rule: Value) -> Value {
    let (status, _, body) = api.call(Method::POST, "/api/v1/limits", Some(&api.admin), Some(rule)).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    body
}

async fn a_released_lease_frees_its_concurrency_slot(mode: Mode) {
    let api = spawn_api(mode).await;
    let scope = format!("lease{}", ulid::Ulid::new()).to_lowercase();
    create_rule(&api, json!({"scope": scope, "tokens": 1000, "interval_ms": 1000, "concurrency": 1})).await;
    let permit = json!({"account": "l", "scope": scope, "method": "GET", "path": "/x"});
    let (status, _, first) = api.post("/api/v1/permits", permit.clone()).await;
    assert_eq!(status, StatusCode::OK, "{first}");
    let lease = first["lease_id"].as_str().expect("a lease for a concurrency rule").to_owned();
    let (status, headers, body) = api.post("/api/v1/permits", permit.clone()).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    assert_eq!(body["reason"], "concurrency_limit");
    assert!(headers.get("retry-after").is_none(), "release times are unknown: no Retry-After");
    let (status, _, body) = api.call(Method::DELETE, &format!("/api/v1/leases/{lease}"), Some(&api.worker), None).await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    let (status, _, body) = api.post("/api/v1/permits", permit).await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

#[tokio::test]
async fn a_released_lease_frees_its_concurrency_slot_embedded() {
    a_released_lease_frees_its_concurrency_slot(Mode::Embedded).await;
}

#[tokio::test]
async fn a_released_lease_frees_its_concurrency_slot_distributed() {
    a_released_lease_frees_its_concurrency_slot(Mode::Distributed).await;
}

#[tokio::test]
async fn admin_limit_writes_take_effect_at_once_and_are_audited() {
    let api = spawn_api(Mode::Embedded).await;
    let rule = create_rule(&api, json!({"scope": "shop", "path": "/orders", "tokens": 1, "interval_ms": 60000})).await;
    let id = rule["id"].as_str().expect("rule id").to_owned();
    let permit = json!({"scope": "shop", "method": "GET", "path": "/orders"});
    let (status, _, body) = api.post("/api/v1/permits", permit.clone()).await;
    assert_eq!(status, StatusCode::OK, "the new rule applies without waiting for the reloader: {body}");

    let (status, _, body) = api.call(Method::GET, "/api/v1/limits", Some(&api.worker), None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body["limits"].as_array().expect("limits").iter().any(|r| r["id"] == id.as_str()));

    let update = json!({"scope": "shop", "path": "/orders", "tokens": 100, "interval_ms": 1000});
    let (status, _, body) = api.call(Method::PUT, &format!("/api/v1/limits/{id}"), Some(&api.admin), Some(update)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let bad = json!({"scope": "shop", "path": "/orders", "tokens": 0, "interval_ms": 1000});
    let (status, _, body) = api.call(Method::PUT, &format!("/api/v1/limits/{id}"), Some(&api.admin), Some(bad)).await;
    assert_error(status, &body, StatusCode::UNPROCESSABLE_ENTITY, "invalid_rule");
    let (status, _, body) = api.call(Method::DELETE, &format!("/api/v1/limits/{id}"), Some(&api.admin), None).await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    let (status, _, body) = api.call(Method::DELETE, &format!("/api/v1/limits/{id}"), Some(&api.admin), None).await;
    assert_error(status, &body, StatusCode::NOT_FOUND, "not_found");
    let (status, _, body) = api.post("/api/v1/permits", permit).await;
    assert_error(status, &body, StatusCode::UNPROCESSABLE_ENTITY, "no_rule");

    let rows: Vec<(String, String, Option<String>, Option<String>)> =
        sqlx::query_as("SELECT actor, action, before_json, after_json FROM audit_log WHERE target = $1 ORDER BY at, action")
            .bind(&id)
            .fetch_all(api.app.db.db().pool())
            .await
            .expect("audit rows");
    let actions: Vec<&str> = rows.iter().map(|r| r.1.as_str()).collect();
    assert_eq!(rows.len(), 3, "{actions:?}");
    assert!(actions.contains(&"limit.create") && actions.contains(&"limit.update") && actions.contains(&"limit.delete"));
    assert!(rows.iter().all(|r| r.0 == "admin-1"));
    let delete = rows.iter().find(|r| r.1 == "limit.delete").expect("delete row");
    assert!(delete.2.is_some() && delete.3.is_none());
}

#[tokio::test]
async fn buckets_show_usage_per_account_and_rule() {
    let api = spawn_api(Mode::Embedded).await;
    let (status, _, _) = api.post("/api/v1/permits", feed_permit("b1")).await;
    assert_eq!(status, StatusCode::OK);
    let (status, _, body) = api.call(Method::GET, "/api/v1/buckets", Some(&api.worker), None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let bucket = body["buckets"].as_array().expect("buckets").iter().find(|b| b["account"] == "b1").cloned().expect("b1's bucket");
    assert_eq!(bucket["rule"], "wb_feeds");
    assert_eq!(bucket["grants"], 1);
    assert_eq!(bucket["remaining"], 0);
    let (status, _, body) = api.call(Method::GET, "/api/v1/breakers", Some(&api.worker), None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

#[tokio::test]
async fn every_documented_route_answers_and_unknown_api_routes_are_json_404s() {
    let api = spawn_api(Mode::Embedded).await;
    let (status, _, doc) = api.call(Method::GET, "/api/openapi.json", None, None).await;
    assert_eq!(status, StatusCode::OK);
    assert!(doc["openapi"].as_str().expect("openapi version").starts_with("3."));
    let paths = doc["paths"].as_object().expect("paths");
    let mut seen = Vec::new();
    for (path, item) in paths {
        for method in item.as_object().expect("path item").keys() {
            let method = match method.as_str() {
                "get" => Method::GET,
                "post" => Method::POST,
                "put" => Method::PUT,
                "patch" => Method::PATCH,
                "delete" => Method::DELETE,
                _ => continue,
            };
            let concrete = path.replace("{id}", "x");
            let body = matches!(method, Method::POST | Method::PUT).then(|| json!({}));
            let (status, _, out) = api.call(method.clone(), &concrete, Some(&api.admin), body).await;
            assert_ne!(status, StatusCode::METHOD_NOT_ALLOWED, "{method} {path}");
            assert_ne!(out["code"], "unknown_route", "{method} {path}");
            assert!(status.is_success() || out["code"].is_string(), "{method} {path}: {status} {out}");
            seen.push(format!("{method} {path}"));
        }
    }
    // The routers register each handler together with its documentation
    // (utoipa_axum::routes!), so this list is what the API serves.
    for route in [
        "POST /api/v1/permits",
        "POST /api/v1/penalties",
        "DELETE /api/v1/leases/{id}",
        "POST /api/v1/events",
        "POST /api/v1/events/batch",
        "GET /api/v1/deliveries/{id}",
        "GET /api/v1/breakers",
        "GET /api/v1/limits",
        "POST /api/v1/limits",
        "PUT /api/v1/limits/{id}",
        "DELETE /api/v1/limits/{id}",
        "GET /api/v1/buckets",
        "GET /api/v1/deliveries",
        "GET /api/v1/merchants",
        "POST /api/v1/merchants",
        "PATCH /api/v1/merchants/{id}",
        "POST /api/v1/merchants/{id}/secret",
        "POST /api/v1/breakers/{id}/reset",
        "GET /api/v1/upstream-breakers",
        "POST /api/v1/upstream-breakers/admit",
        "POST /api/v1/upstream-breakers/report",
        "POST /api/v1/upstream-breakers/reset",
    ] {
        assert!(seen.iter().any(|s| s == route), "{route} is not documented: {seen:?}");
    }
    let (status, _, body) = api.call(Method::GET, "/api/v1/nothing/here", Some(&api.worker), None).await;
    assert_error(status, &body, StatusCode::NOT_FOUND, "unknown_route");
}

#[tokio::test]
async fn metrics_count_api_decisions_penalties_and_events() {
    let api = spawn_api(Mode::Embedded).await;
    api.post("/api/v1/permits", feed_permit("m1")).await;
    let text = api.app.get("/metrics").await.text().await.expect("metrics");
    assert!(text.contains("sluice_api_permit_decisions_total"), "{text}");
    assert!(text.contains("sluice_api_permit_wait_seconds_bucket{le=\"120\"}"), "waits have their own buckets: {text}");
}

#[test]
fn token_add_prints_the_token_once_on_stdout_and_stores_only_its_hash() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let run = |args: &[&str]| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"));
        for (k, _) in std::env::vars() {
            if k.starts_with("SLUICE_") || k == "DATABASE_URL" || k == "REDIS_URL" {
                cmd.env_remove(k);
            }
        }
        cmd.env("SLUICE_DATA_DIR", &data).args(args).output().expect("run sluice")
    };
    let out = run(&["token", "add", "--name", "ci", "--scope", "admin"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8(out.stdout).expect("utf-8");
    let token = stdout.trim();
    assert_eq!(stdout.lines().count(), 1, "{stdout}");
    assert!(token.starts_with("slk_") && token.len() == 68, "{token}");
    let db = std::fs::read(data.join("sluice.db")).expect("database file");
    assert!(!db.windows(token.len()).any(|w| w == token.as_bytes()), "the token itself is not stored");
    let again = run(&["token", "add", "--name", "ci", "--scope", "admin"]);
    assert!(!again.status.success(), "names are unique");
    let bad = run(&["token", "add", "--name", "x", "--scope", "root"]);
    assert_eq!(bad.status.code(), Some(2), "clap rejects an unknown scope");
}

#[tokio::test]
async fn a_quota_store_outage_is_a_503_with_its_reason_when_failing_closed() {
    let redis = format!("redis://127.0.0.1:{}", closed_port());
    let api = spawn_api_with(Mode::Embedded, &[("REDIS_URL", &redis), ("SLUICE_QUOTA_STORE_DOWN", "fail_closed")]).await;
    let (status, headers, body) = api.post("/api/v1/permits", feed_permit("down")).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(body["granted"], false);
    assert_eq!(body["reason"], "store_unavailable");
    assert_eq!(headers["retry-after"], "1");
}
