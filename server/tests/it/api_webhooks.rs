//! The worker API's webhook side beyond intake: listing deliveries with
//! filters and a keyset cursor, merchant admin writes, breaker reset, and the
//! metrics they feed.

use std::collections::HashSet;
use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use sluice::demo::merchants::MockMerchants;
use sluice_engine::delivery::model::{BreakerStatus, MerchantId};
use sluice_engine::delivery::DeliveryStore;

use crate::api::{assert_error, merchant, spawn_api, spawn_api_with, Api};
use crate::helpers::{sample, Mode};

/// Posts `n` events to `merchant_id`: even ones money (`paid`), odd ones not.
async fn post_events(api: &Api, merchant_id: &str, n: usize) -> Vec<String> {
    let mut ids = Vec::new();
    for i in 0..n {
        let status = if i % 2 == 0 { "paid" } else { "expired" };
        let event = json!({"merchant_id": merchant_id, "event_type": "payment.status_changed", "status": status,
            "payload": {"id": format!("pay_{i}")}, "idempotency_key": format!("pay_{i}")});
        let (code, _, body) = api.post("/api/v1/events", event).await;
        assert_eq!(code, StatusCode::CREATED, "{body}");
        ids.push(body["delivery_ids"][0].as_str().expect("delivery id").to_owned());
    }
    ids
}

async fn list(api: &Api, query: &str) -> (StatusCode, Value) {
    let (status, _, body) = api.call(Method::GET, &format!("/api/v1/deliveries{query}"), Some(&api.worker), None).await;
    (status, body)
}

async fn deliveries_are_listed_newest_first_with_filters_and_a_keyset_cursor(mode: Mode) {
    let api = spawn_api(mode).await;
    let shop = merchant(&api).await;
    let other = merchant(&api).await;
    let created = post_events(&api, &shop, 5).await;
    post_events(&api, &other, 1).await;

    // Every page of two, following `next`, until there is none.
    let mut seen = Vec::new();
    let mut query = format!("?merchant_id={shop}&limit=2");
    loop {
        let (status, body) = list(&api, &query).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let items = body["items"].as_array().expect("items");
        assert!(items.len() <= 2);
        seen.extend(items.iter().map(|d| (d["created_at"].as_i64().expect("created_at"), d["id"].as_str().expect("id").to_owned())));
        match body["next"].as_str() {
            Some(next) => query = format!("?merchant_id={shop}&limit=2&after={next}"),
            None => break,
        }
    }
    assert_eq!(seen.len(), 5, "no delivery twice, none missing: {seen:?}");
    assert_eq!(seen.iter().map(|(_, id)| id).collect::<HashSet<_>>(), created.iter().collect::<HashSet<_>>());
    // Newest first across page boundaries: (created_at, id) descending (two
    // events in the same millisecond are ordered by id).
    assert!(seen.windows(2).all(|w| w[0] > w[1]), "{seen:?}");

    let (_, money) = list(&api, &format!("?merchant_id={shop}&money=true")).await;
    let money = money["items"].as_array().expect("items").clone();
    assert_eq!(money.len(), 3);
    assert!(money.iter().all(|d| d["is_money"] == true));
    let (_, rest) = list(&api, "?money=false&status=PENDING&ladder=fast&event_type=payment.status_changed").await;
    assert_eq!(rest["items"].as_array().expect("items").len(), 2, "shop's two non-money events; the other's one is money: {rest}");
    let (_, none) = list(&api, "?status=FAILED").await;
    assert_eq!(none["items"], json!([]));
    assert_eq!(none["next"], Value::Null);
    let (_, future) = list(&api, "?created_from_ms=4102444800000").await;
    assert_eq!(future["items"], json!([]), "nothing created after 2100");
    let (_, past) = list(&api, "?created_to_ms=4102444800000&limit=500").await;
    assert_eq!(past["items"].as_array().expect("items").len(), 6);
}

#[tokio::test]
async fn deliveries_are_listed_newest_first_with_filters_and_a_keyset_cursor_embedded() {
    deliveries_are_listed_newest_first_with_filters_and_a_keyset_cursor(Mode::Embedded).await;
}

#[tokio::test]
async fn deliveries_are_listed_newest_first_with_filters_and_a_keyset_cursor_distributed() {
    deliveries_are_listed_newest_first_with_filters_and_a_keyset_cursor(Mode::Distributed).await;
}

#[tokio::test]
async fn every_bad_delivery_list_query_is_a_400_json_error() {
    let api = spawn_api(Mode::Embedded).await;
    for query in [
        "?status=NOPE",
        "?ladder=medium",
        "?merchant_id=shop-1",
        "?money=maybe",
        "?limit=0",
        "?limit=501",
        "?limit=-1",
        "?after=garbage",
        "?after=123.not_an_id",
        "?created_from_ms=-5",
        "?created_to_ms=yesterday",
        "?colour=blue",
    ] {
        let (status, body) = list(&api, query).await;
        assert_error(status, &body, StatusCode::BAD_REQUEST, "invalid_query");
    }
    let (status, _, body) = api.call(Method::GET, "/api/v1/deliveries", None, None).await;
    assert_error(status, &body, StatusCode::UNAUTHORIZED, "unauthorized");
    let (status, _, body) = api.call(Method::GET, "/api/v1/deliveries", Some("slk_wrong"), None).await;
    assert_error(status, &body, StatusCode::UNAUTHORIZED, "unauthorized");
}

async fn audit_actions(api: &Api, target: &str) -> Vec<(String, String, Option<String>, Option<String>)> {
    sqlx::query_as("SELECT actor, action, before_json, after_json FROM audit_log WHERE target = $1 AND actor <> 'test' ORDER BY at, action")
        .bind(target)
        .fetch_all(api.app.db.db().pool())
        .await
        .expect("audit rows")
}

#[tokio::test]
async fn admins_create_edit_and_rotate_merchants_and_every_write_is_audited() {
    let api = spawn_api(Mode::Embedded).await;
    let input = json!({"name": "Shop", "url": "https://shop.example/hooks"});
    let (status, _, created) = api.call(Method::POST, "/api/v1/merchants", Some(&api.admin), Some(input)).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let id = created["merchant"]["id"].as_str().expect("id").to_owned();
    let first_secret = created["secret"].as_str().expect("the secret, shown once").to_owned();
    assert!(!first_secret.is_empty());
    assert_eq!(created["merchant"]["scheme"], "sluice");

    let (status, _, listed) = api.call(Method::GET, "/api/v1/merchants", Some(&api.worker), None).await;
    assert_eq!(status, StatusCode::OK, "{listed}");
    let entry = listed["merchants"].as_array().expect("merchants").iter().find(|m| m["merchant"]["id"] == id.as_str()).cloned();
    let entry = entry.expect("the new merchant is listed");
    assert_eq!(entry["breaker"]["status"], "closed");
    assert!(!listed.to_string().contains(&first_secret), "secrets are never listed");

    let patch = json!({"url": "https://shop.example/v2/hooks"});
    let (status, _, updated) = api.call(Method::PATCH, &format!("/api/v1/merchants/{id}"), Some(&api.admin), Some(patch)).await;
    assert_eq!(status, StatusCode::OK, "{updated}");
    assert_eq!(updated["url"], "https://shop.example/v2/hooks");

    let (status, _, rotated) =
        api.call(Method::POST, &format!("/api/v1/merchants/{id}/secret"), Some(&api.admin), Some(json!({"overlap_hours": 2}))).await;
    assert_eq!(status, StatusCode::OK, "{rotated}");
    let second_secret = rotated["secret"].as_str().expect("new secret");
    assert_ne!(second_secret, first_secret);
    assert!(rotated["merchant"]["previous_secret_expires_at"].is_number(), "{rotated}");

    let rows = audit_actions(&api, &id).await;
    let actions: Vec<&str> = rows.iter().map(|r| r.1.as_str()).collect();
    assert_eq!(actions.len(), 3, "{actions:?}");
    for action in ["merchant.create", "merchant.update_url", "merchant.rotate_secret"] {
        assert!(actions.contains(&action), "{action} missing: {actions:?}");
    }
    assert!(rows.iter().all(|r| r.0 == "admin-1"));
    let all_audit = rows.iter().map(|r| format!("{:?}{:?}", r.2, r.3)).collect::<String>();
    assert!(!all_audit.contains(&first_secret) && !all_audit.contains(second_secret), "no secret in the audit log");
}

#[tokio::test]
async fn merchant_and_breaker_writes_need_an_admin_token_and_change_nothing_otherwise() {
    let api = spawn_api(Mode::Embedded).await;
    let id = merchant(&api).await;
    let before = DeliveryStore::new(api.app.db.db()).merchant(&MerchantId::parse(&id).expect("id")).await.expect("merchant");
    let writes = [
        (Method::POST, "/api/v1/merchants".to_owned(), Some(json!({"name": "X", "url": "https://x.example/"}))),
        (Method::PATCH, format!("/api/v1/merchants/{id}"), Some(json!({"url": "https://evil.example/"}))),
        (Method::POST, format!("/api/v1/merchants/{id}/secret"), Some(json!({}))),
        (Method::POST, format!("/api/v1/breakers/{id}/reset"), None),
    ];
    for (method, path, body) in writes {
        let (status, _, out) = api.call(method.clone(), &path, None, body.clone()).await;
        assert_error(status, &out, StatusCode::UNAUTHORIZED, "unauthorized");
        let (status, _, out) = api.call(method.clone(), &path, Some("slk_wrong"), body.clone()).await;
        assert_error(status, &out, StatusCode::UNAUTHORIZED, "unauthorized");
        let (status, _, out) = api.call(method, &path, Some(&api.worker), body).await;
        assert_error(status, &out, StatusCode::FORBIDDEN, "forbidden");
    }
    let after = DeliveryStore::new(api.app.db.db()).merchant(&MerchantId::parse(&id).expect("id")).await.expect("merchant");
    assert_eq!((after.url, after.secret), (before.url, before.secret));
    let (_, _, listed) = api.call(Method::GET, "/api/v1/merchants", Some(&api.worker), None).await;
    assert_eq!(listed["merchants"].as_array().expect("merchants").len(), 1, "nothing was created");
    assert!(audit_actions(&api, &id).await.is_empty());
}

#[tokio::test]
async fn every_bad_merchant_input_is_a_4xx_json_error() {
    let api = spawn_api(Mode::Embedded).await;
    let id = merchant(&api).await;
    let create = |body: Value| (Method::POST, "/api/v1/merchants".to_owned(), body);
    let cases = [
        (create(json!({"name": " ", "url": "https://x.example/"})), StatusCode::UNPROCESSABLE_ENTITY, "invalid_input"),
        (create(json!({"name": "X", "url": "http://127.0.0.1/hook"})), StatusCode::UNPROCESSABLE_ENTITY, "invalid_url"),
        (create(json!({"name": "X", "url": "ftp://x.example/"})), StatusCode::UNPROCESSABLE_ENTITY, "invalid_url"),
        (create(json!({"name": "X", "url": "not a url"})), StatusCode::UNPROCESSABLE_ENTITY, "invalid_url"),
        (create(json!({"name": "X", "url": "https://x.example/", "scheme": "hmac"})), StatusCode::UNPROCESSABLE_ENTITY, "invalid_input"),
        (
            create(json!({"name": "X", "url": "https://x.example/", "scheme": "standard_webhooks", "secret": "plain"})),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_secret",
        ),
        (create(json!({"name": "X"})), StatusCode::UNPROCESSABLE_ENTITY, "invalid_body"),
        (create(json!({"name": "X", "url": "https://x.example/", "colour": "red"})), StatusCode::UNPROCESSABLE_ENTITY, "invalid_body"),
        ((Method::PATCH, format!("/api/v1/merchants/{id}"), json!({"url": "http://10.0.0.1/"})), StatusCode::UNPROCESSABLE_ENTITY, "invalid_url"),
        ((Method::PATCH, "/api/v1/merchants/mer_01hzzzzzzzzzzzzzzzzzzzzzzz".to_owned(), json!({"url": "https://x.example/"})), StatusCode::NOT_FOUND, "not_found"),
        ((Method::PATCH, "/api/v1/merchants/nonsense".to_owned(), json!({"url": "https://x.example/"})), StatusCode::NOT_FOUND, "not_found"),
        ((Method::POST, format!("/api/v1/merchants/{id}/secret"), json!({"overlap_hours": 1000})), StatusCode::UNPROCESSABLE_ENTITY, "invalid_input"),
        ((Method::POST, format!("/api/v1/merchants/{id}/secret"), json!({"secret": ""})), StatusCode::UNPROCESSABLE_ENTITY, "invalid_secret"),
        ((Method::POST, "/api/v1/breakers/mer_01hzzzzzzzzzzzzzzzzzzzzzzz/reset".to_owned(), json!({})), StatusCode::NOT_FOUND, "not_found"),
    ];
    for ((method, path, body), status, code) in cases {
        let (got, _, out) = api.call(method.clone(), &path, Some(&api.admin), Some(body.clone())).await;
        assert_eq!(got, status, "{method} {path} {body}: {out}");
        assert_error(got, &out, status, code);
    }
    let (status, _, listed) = api.call(Method::GET, "/api/v1/merchants", Some(&api.worker), None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(listed["merchants"].as_array().expect("merchants").len(), 1, "no bad input created a merchant");
}

#[tokio::test]
async fn an_admin_resets_an_open_breaker_and_the_reset_is_audited() {
    let api = spawn_api(Mode::Embedded).await;
    let id = merchant(&api).await;
    let merchant_id = MerchantId::parse(&id).expect("id");
    let store = DeliveryStore::new(api.app.db.db());
    let closed = store.breaker(&merchant_id).await.expect("breaker");
    let now = closed.updated_at;
    let open = sluice_engine::delivery::merchant_breaker::MerchantBreaker {
        status: BreakerStatus::Open,
        version: closed.version + 1,
        opened_at: Some(now),
        next_probe_at: Some(now + Duration::from_secs(300)),
        ..closed
    };
    assert!(store.cas_breaker(&open).await.expect("open it"));
    let (_, _, open_list) = api.call(Method::GET, "/api/v1/breakers", Some(&api.worker), None).await;
    assert_eq!(open_list["breakers"].as_array().expect("breakers").len(), 1);

    let (status, _, body) = api.call(Method::POST, &format!("/api/v1/breakers/{id}/reset"), Some(&api.admin), None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["breaker"]["status"], "closed");
    assert_eq!(store.breaker(&merchant_id).await.expect("breaker").status, BreakerStatus::Closed);
    let (_, _, after) = api.call(Method::GET, "/api/v1/breakers", Some(&api.worker), None).await;
    assert_eq!(after["breakers"], json!([]));

    let rows = audit_actions(&api, &id).await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!((rows[0].0.as_str(), rows[0].1.as_str()), ("admin-1", "breaker.reset"));
    assert!(rows[0].2.as_deref().is_some_and(|b| b.contains("\"open\"")), "before shows it open: {rows:?}");
}

#[tokio::test]
async fn metrics_show_decisions_by_reason_waits_penalties_the_queue_and_breakers() {
    let api = spawn_api(Mode::Embedded).await;
    let account = format!("metrics-{}", ulid::Ulid::new());
    let permit = json!({"account": account, "scope": "wb_feeds", "method": "GET", "path": "/feeds/1"});
    let (status, _, _) = api.post("/api/v1/permits", permit.clone()).await;
    assert_eq!(status, StatusCode::OK);
    let no_rule = json!({"scope": "nowhere", "method": "GET", "path": "/x"});
    api.post("/api/v1/permits", no_rule).await;
    let mut low = permit.clone();
    low["priority"] = json!("low");
    api.post("/api/v1/permits", low).await;
    let mut penalty = permit.clone();
    penalty["status_429"] = json!(true);
    let (status, _, body) = api.post("/api/v1/penalties", penalty).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let shop = merchant(&api).await;
    post_events(&api, &shop, 2).await;

    let text = api.app.get("/metrics").await.text().await.expect("metrics");
    let granted = sample(&text, "sluice_quota_decisions_total", &["scope=\"wb_feeds\"", "lane=\"normal\"", "result=\"granted\""]);
    assert!(granted.is_some_and(|n| n >= 1.0), "{text}");
    // One a minute: the first permit took it, so a low request is refused at once.
    let low = sample(&text, "sluice_quota_decisions_total", &["scope=\"wb_feeds\"", "lane=\"low\"", "result=\"refused\""]);
    assert!(low.is_some_and(|n| n >= 1.0), "{text}");
    let refused = sample(&text, "sluice_quota_decisions_total", &["scope=\"_none\"", "reason=\"no_rule\""]);
    assert!(refused.is_some_and(|n| n >= 1.0), "a request no rule governs is counted under _none: {text}");
    assert!(!text.contains("scope=\"nowhere\""), "request text never becomes a label");
    assert!(sample(&text, "sluice_quota_wait_seconds_bucket", &["le=\"300\""]).is_some(), "{text}");
    assert!(sample(&text, "sluice_quota_penalties_total", &["scope=\"wb_feeds\""]).is_some_and(|n| n >= 1.0), "{text}");
    // Gauges are process-wide and tests run in parallel: check they are there, not their values.
    assert!(sample(&text, "sluice_deliveries", &["status=\"PENDING\""]).is_some(), "{text}");
    assert!(sample(&text, "sluice_delivery_queue_depth", &[]).is_some(), "{text}");
    assert!(sample(&text, "sluice_merchant_breakers", &["state=\"open\""]).is_some(), "{text}");
}

#[tokio::test]
async fn metrics_count_deliveries_by_result() {
    let mocks = MockMerchants::start().await.expect("mock merchants");
    let api = spawn_api_with(Mode::Embedded, &[("SLUICE_DELIVERY_WORKER", "true"), ("SLUICE_DELIVERY_ALLOW_NETWORKS", "127.0.0.0/8")]).await;
    let healthy = mocks.endpoints().into_iter().find(|(n, _)| *n == "Healthy Shop").map(|(_, u)| u).expect("healthy");
    let (status, _, created) =
        api.call(Method::POST, "/api/v1/merchants", Some(&api.admin), Some(json!({"name": "Healthy", "url": healthy}))).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let id = created["merchant"]["id"].as_str().expect("id").to_owned();
    let delivery = post_events(&api, &id, 1).await.remove(0);
    // Poll until the worker has delivered it (no sleeping on a guess).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (_, _, body) = api.call(Method::GET, &format!("/api/v1/deliveries/{delivery}"), Some(&api.worker), None).await;
        if body["delivery"]["status"] == "DELIVERED" {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "not delivered in 30 s: {body}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let text = api.app.get("/metrics").await.text().await.expect("metrics");
    let delivered = sample(&text, "sluice_delivery_results_total", &["result=\"delivered\""]);
    assert!(delivered.is_some_and(|n| n >= 1.0), "{text}");
    mocks.stop();
}

#[tokio::test]
async fn with_https_required_plain_http_is_refused_and_existing_http_merchants_are_flagged_as_held() {
    use sluice_engine::delivery::merchant_breaker::MerchantBreakerConfig;
    use sluice_engine::delivery::model::{MerchantIn, SigningScheme};
    use sluice_engine::delivery::ops::{create_merchant, Actor};
    use sluice_engine::delivery::ssrf::SsrfPolicy;

    let api = spawn_api_with(Mode::Embedded, &[("SLUICE_DELIVERY_REQUIRE_HTTPS", "true")]).await;
    let https = merchant(&api).await;
    let create = (Method::POST, "/api/v1/merchants".to_owned(), json!({"name": "Plain", "url": "http://shop.example/hooks"}));
    let edit = (Method::PATCH, format!("/api/v1/merchants/{https}"), json!({"url": "http://shop.example/hooks"}));
    for (method, path, input) in [create, edit] {
        let (status, _, body) = api.call(method, &path, Some(&api.admin), Some(input)).await;
        assert_error(status, &body, StatusCode::UNPROCESSABLE_ENTITY, "invalid_url");
        assert_eq!(body["fields"][0]["field"], "url", "{body}");
        assert!(body["fields"][0]["message"].as_str().is_some_and(|m| m.contains("must use https")), "{body}");
    }

    // A merchant registered while plain http was accepted is flagged, in the API and on its page.
    let input = MerchantIn { name: "Old Plain".into(), url: "http://shop.example/hooks".into(), scheme: SigningScheme::Sluice, secret: None };
    let lax = SsrfPolicy::strict().plain_http_allowed();
    let plain = create_merchant(&DeliveryStore::new(api.app.db.db()), input, &lax, &MerchantBreakerConfig::default(), Actor::named("test"), sluice_engine::clock::Timestamp::from_millis(0))
        .await
        .expect("plain merchant");
    let (status, _, listed) = api.call(Method::GET, "/api/v1/merchants", Some(&api.worker), None).await;
    assert_eq!(status, StatusCode::OK);
    let held: Vec<(String, bool)> = listed["merchants"]
        .as_array()
        .expect("merchants")
        .iter()
        .map(|m| (m["merchant"]["id"].as_str().expect("id").to_owned(), m["deliveries_held"].as_bool().expect("flag")))
        .collect();
    assert!(held.contains(&(plain.id.as_str().to_owned(), true)) && held.contains(&(https.clone(), false)), "{held:?}");
    let admin = api.app.signed_in(crate::helpers::Role::Admin).await;
    let page = admin.get(api.app.url("/merchants")).send().await.expect("page").text().await.expect("html");
    assert_eq!(page.matches("data-testid=\"merchant-held\"").count(), 1, "only the http merchant is flagged");
    // The form says what is wrong with the URL.
    let form = [("name", "Plain"), ("url", "http://shop.example/hooks"), ("scheme", "sluice")];
    let answer: Value = api.app.call(&admin, "/ui/merchants/create", &form).await.json().await.expect("json");
    assert_eq!(answer["Invalid"][0]["field"], "url", "{answer}");
    assert!(answer["Invalid"][0]["message"].as_str().is_some_and(|m| m.contains("must use https")), "{answer}");
}
