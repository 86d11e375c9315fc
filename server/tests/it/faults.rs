//! The database fails under intake, for real: a PostgreSQL of the test's own
//! is stopped and started again while a worker posts events. While it is
//! down, intake answers 503 with `Retry-After` and a JSON `code` (never 500)
//! and `/readyz` reports it; nothing accepted is lost; and intake works
//! again by itself once the database answers.

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{json, Value};
use sluice_engine::clock::Timestamp;
use sluice_engine::db::testing::OwnPostgres;
use sluice_engine::db::{Db, PoolSettings};
use sluice_engine::delivery::merchant_breaker::MerchantBreakerConfig;
use sluice_engine::delivery::model::{MerchantIn, SigningScheme};
use sluice_engine::delivery::ops::create_merchant;
use sluice_engine::delivery::ssrf::SsrfPolicy;
use sluice_engine::delivery::DeliveryStore;
use sluice_engine::tokens::{create_token, ApiScope};

use crate::helpers::{spawn_app_with, Mode, TestApp};

const NOW: Timestamp = Timestamp::from_millis(1_700_000_000_000);

async fn post_event(app: &TestApp, token: &str, merchant: &str, key: &str) -> (StatusCode, Option<String>, Value) {
    let res = app
        .client
        .post(app.url("/api/v1/events"))
        .bearer_auth(token)
        .json(&json!({"merchant_id": merchant, "event_type": "order.created", "payload": {"key": key}, "idempotency_key": key}))
        .send()
        .await
        .expect("the server answers even while its database is down");
    let status = res.status();
    let retry_after = res.headers().get("retry-after").and_then(|v| v.to_str().ok()).map(str::to_owned);
    (status, retry_after, res.json().await.unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn intake_answers_503_with_retry_after_while_postgres_is_down_and_recovers_by_itself() {
    let pg = tokio::task::spawn_blocking(OwnPostgres::start).await.expect("own PostgreSQL");
    let url = pg.url();
    // The app runs on the test's own PostgreSQL (its migrations run at start).
    let app = spawn_app_with(Mode::Embedded, &[("DATABASE_URL", url.as_str()), ("SLUICE_DELIVERY_WORKER", "false")]).await;
    let db = Db::connect(&url, &PoolSettings::default()).await.expect("connect to own PostgreSQL");
    let (_, token) = create_token(&db, "worker-1", ApiScope::Worker, NOW).await.expect("worker token");
    let token = token.expose().to_owned();
    let input = MerchantIn { name: "Shop".into(), url: "https://merchant.example/hook".into(), scheme: SigningScheme::Sluice, secret: None };
    let merchant = create_merchant(&DeliveryStore::new(db.clone()), input, &SsrfPolicy::strict(), &MerchantBreakerConfig::default(), sluice_engine::delivery::ops::Actor::named("test"), NOW)
        .await
        .expect("merchant")
        .id
        .as_str()
        .to_owned();

    let (status, _, body) = post_event(&app, &token, &merchant, "before").await;
    assert_eq!(status, StatusCode::CREATED, "{body}");

    let pg = tokio::task::spawn_blocking(move || {
        pg.stop();
        pg
    })
    .await
    .expect("stop PostgreSQL");

    for key in ["during-1", "during-2"] {
        let (status, retry_after, body) = post_event(&app, &token, &merchant, key).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
        assert_eq!(body["code"], "database_unavailable", "{body}");
        assert_eq!(retry_after.as_deref(), Some("1"), "a 503 says when to come back");
    }
    let ready = app.get("/readyz").await;
    assert_eq!(ready.status(), StatusCode::SERVICE_UNAVAILABLE, "/readyz reports the outage");

    let pg = tokio::task::spawn_blocking(move || {
        pg.start_again();
        pg
    })
    .await
    .expect("start PostgreSQL again");

    // A client does what the 503 says: waits Retry-After and tries again.
    // Service must come back by itself (no restart of Sluice) within seconds.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (status, retry_after, body) = post_event(&app, &token, &merchant, "after").await;
        if status == StatusCode::CREATED {
            break;
        }
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "only 503 while reconnecting: {body}");
        assert!(Instant::now() < deadline, "intake still refused 20 s after PostgreSQL came back: {body}");
        let secs = retry_after.and_then(|s| s.parse::<u64>().ok()).unwrap_or(1);
        tokio::time::sleep(Duration::from_secs(secs)).await;
    }
    assert_eq!(app.get("/readyz").await.status(), StatusCode::OK);

    // Accepted events are all stored; refused ones are not.
    let mut keys: Vec<String> = sqlx::query_scalar("SELECT idempotency_key FROM events ORDER BY idempotency_key")
        .fetch_all(db.pool())
        .await
        .expect("events");
    keys.sort();
    assert_eq!(keys, ["after", "before"]);
    drop(pg);
}
