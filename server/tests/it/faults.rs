//! The stores fail under delivery load, for real. A PostgreSQL (or Redis) of
//! the test's own is restarted while producers post events and the worker
//! delivers them to a real loopback receiver. While the database is down,
//! intake answers 503 with `Retry-After` and a JSON `code` (never 500) and
//! `/readyz` reports it; an event is either stored (2xx) or refused
//! (non-2xx), never both; nothing accepted is lost; a webhook arrives twice
//! only under the same id; and service comes back by itself.
//!
//! The deadlines below only bound how long a broken build may hang; the
//! time to full rate after a restart is measured by `scripts/bench-faults.sh`.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::HeaderMap;
use reqwest::StatusCode;
use serde_json::{json, Value};
use sluice_engine::clock::Timestamp;
use sluice_engine::db::testing::OwnPostgres;
use sluice_engine::db::{Db, PoolSettings};
use sluice_engine::delivery::merchant_breaker::MerchantBreakerConfig;
use sluice_engine::delivery::model::{MerchantIn, SigningScheme};
use sluice_engine::delivery::ops::{create_merchant, Actor};
use sluice_engine::delivery::ssrf::SsrfPolicy;
use sluice_engine::delivery::DeliveryStore;
use sluice_engine::redis_conn::testing::OwnRedis;
use sluice_engine::tokens::{create_token, ApiScope};

use crate::helpers::{spawn_app_with, Mode, TestApp};

const NOW: Timestamp = Timestamp::from_millis(1_700_000_000_000);
/// Upper bound for anything the test waits for; a pass takes a few seconds.
const PATIENCE: Duration = Duration::from_secs(60);

/// A merchant endpoint on loopback: answers 200 and counts each webhook id.
#[derive(Clone, Default)]
struct Receiver {
    seen: Arc<Mutex<HashMap<String, u32>>>,
}

impl Receiver {
    async fn spawn() -> (Receiver, String) {
        let receiver = Receiver::default();
        let seen = receiver.seen.clone();
        let app = axum::Router::new().route(
            "/hook",
            axum::routing::post(move |headers: HeaderMap| {
                let seen = seen.clone();
                async move {
                    let id = headers.get("x-webhook-id").and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
                    *seen.lock().unwrap().entry(id).or_default() += 1;
                    axum::http::StatusCode::OK
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind receiver");
        let url = format!("http://{}/hook", listener.local_addr().expect("receiver address"));
        tokio::spawn(async move { axum::serve(listener, app).await });
        (receiver, url)
    }

    fn ids(&self) -> HashMap<String, u32> {
        self.seen.lock().unwrap().clone()
    }

    async fn wait_for(&self, what: &str, done: impl Fn(&HashMap<String, u32>) -> bool) {
        let deadline = Instant::now() + PATIENCE;
        while !done(&self.ids()) {
            assert!(Instant::now() < deadline, "receiver: {what} did not happen within {PATIENCE:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// One intake call's answer.
struct Answer {
    key: String,
    status: StatusCode,
    retry_after: Option<String>,
    body: Value,
}

async fn post_event(app: &TestApp, token: &str, merchant: &str, key: &str) -> Answer {
    let res = app
        .client
        .post(app.url("/api/v1/events"))
        .bearer_auth(token)
        .json(&json!({"merchant_id": merchant, "event_type": "order.created", "payload": {"key": key}, "idempotency_key": key}))
        .send()
        .await
        .expect("the server answers even while a store is down");
    let status = res.status();
    let retry_after = res.headers().get("retry-after").and_then(|v| v.to_str().ok()).map(str::to_owned);
    Answer { key: key.to_owned(), status, retry_after, body: res.json().await.unwrap_or(Value::Null) }
}

/// A producer posting events one after another (new key each time) until
/// stopped; a refused key is never retried, so what the store holds can be
/// compared with what was answered.
struct Producer {
    stop: Arc<AtomicBool>,
    accepted: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<Vec<Answer>>,
}

impl Producer {
    fn start(app: Arc<TestApp>, token: String, merchant: String) -> Producer {
        let stop = Arc::new(AtomicBool::new(false));
        let accepted = Arc::new(AtomicUsize::new(0));
        let (stop2, accepted2) = (stop.clone(), accepted.clone());
        let task = tokio::spawn(async move {
            let mut answers = Vec::new();
            // Bounded: a test that never stops it still ends.
            for n in 0..5_000 {
                if stop2.load(Ordering::Relaxed) {
                    break;
                }
                let a = post_event(&app, &token, &merchant, &format!("load-{n}")).await;
                if a.status.is_success() {
                    accepted2.fetch_add(1, Ordering::Relaxed);
                } else {
                    // What a producer does with a 503: wait a little.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                answers.push(a);
            }
            answers
        });
        Producer { stop, accepted, task }
    }

    async fn wait_accepted(&self, at_least: usize) {
        let deadline = Instant::now() + PATIENCE;
        while self.accepted.load(Ordering::Relaxed) < at_least {
            assert!(Instant::now() < deadline, "intake did not accept {at_least} events within {PATIENCE:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn finish(self) -> Vec<Answer> {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.expect("producer")
    }
}

/// A worker token and a merchant pointing at `hook`, written straight to `db`.
async fn fixtures(db: &Db, hook: &str) -> (String, String) {
    let (_, token) = create_token(db, "worker-1", ApiScope::Worker, NOW).await.expect("worker token");
    let input = MerchantIn { name: "Shop".into(), url: hook.into(), scheme: SigningScheme::Sluice, secret: None };
    // The receiver is plain http on loopback.
    let loopback = SsrfPolicy { allow: vec!["127.0.0.0/8".parse().expect("cidr")], require_https: false };
    let merchant = create_merchant(&DeliveryStore::new(db.clone()), input, &loopback, &MerchantBreakerConfig::default(), Actor::named("test"), NOW)
        .await
        .expect("merchant");
    (token.expose().to_owned(), merchant.id.as_str().to_owned())
}

/// What must hold once the load is over: every refusal a 503 with a code and
/// `Retry-After`; the store holds exactly the accepted events, each
/// delivered; the receiver saw only accepted deliveries' ids.
async fn check_nothing_lost(db: &Db, receiver: &Receiver, answers: &[Answer]) {
    let mut accepted = BTreeSet::new();
    let mut delivery_ids = BTreeSet::new();
    for a in answers {
        if a.status.is_success() {
            accepted.insert(a.key.clone());
            for id in a.body["delivery_ids"].as_array().expect("delivery_ids") {
                delivery_ids.insert(id.as_str().expect("id").to_owned());
            }
        } else {
            assert_eq!(a.status, StatusCode::SERVICE_UNAVAILABLE, "{}: {}", a.key, a.body);
            assert!(a.body["code"].is_string(), "a refusal carries a JSON code: {}", a.body);
            assert!(a.retry_after.is_some(), "a 503 says when to come back: {}", a.body);
        }
    }
    receiver.wait_for("every accepted event delivered", |seen| delivery_ids.iter().all(|id| seen.contains_key(id))).await;
    let seen = receiver.ids();
    let strangers: Vec<_> = seen.keys().filter(|id| !delivery_ids.contains(*id)).collect();
    assert!(strangers.is_empty(), "webhooks for events whose intake was refused: {strangers:?}");
    let stored: BTreeSet<String> =
        sqlx::query_scalar("SELECT idempotency_key FROM events").fetch_all(db.pool()).await.expect("events").into_iter().collect();
    assert_eq!(stored, accepted, "the store holds exactly the accepted events");
    // The receiver counts a webhook when it arrives; the worker writes the
    // answer back a moment later.
    let deadline = Instant::now() + PATIENCE;
    loop {
        let pending: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM deliveries WHERE status <> 'DELIVERED'")
            .fetch_one(db.pool())
            .await
            .expect("count");
        if pending == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "{pending} deliveries not DELIVERED within {PATIENCE:?} of their webhook arriving");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_restarted_under_delivery_load_refuses_with_503_loses_nothing_and_recovers_by_itself() {
    let pg = tokio::task::spawn_blocking(OwnPostgres::start).await.expect("own PostgreSQL");
    let url = pg.url();
    let app = Arc::new(
        spawn_app_with(Mode::Embedded, &[("DATABASE_URL", url.as_str()), ("SLUICE_DELIVERY_ALLOW_NETWORKS", "127.0.0.0/8")]).await,
    );
    let db = Db::connect(&url, &PoolSettings::default()).await.expect("connect to own PostgreSQL");
    let (receiver, hook) = Receiver::spawn().await;
    let (token, merchant) = fixtures(&db, &hook).await;

    let producer = Producer::start(app.clone(), token.clone(), merchant.clone());
    receiver.wait_for("20 deliveries before the restart", |seen| seen.len() >= 20).await;

    let pg = tokio::task::spawn_blocking(move || {
        pg.stop();
        pg
    })
    .await
    .expect("stop PostgreSQL");
    let down = post_event(&app, &token, &merchant, "while-down").await;
    assert_eq!(down.status, StatusCode::SERVICE_UNAVAILABLE, "{}", down.body);
    assert_eq!(down.body["code"], "database_unavailable", "{}", down.body);
    assert_eq!(down.retry_after.as_deref(), Some("1"), "a 503 says when to come back");
    let ready = app.get("/readyz").await;
    assert_eq!(ready.status(), StatusCode::SERVICE_UNAVAILABLE, "/readyz reports the outage");

    let pg = tokio::task::spawn_blocking(move || {
        pg.start_again();
        pg
    })
    .await
    .expect("start PostgreSQL again");
    // Service comes back by itself: intake accepts, the worker delivers.
    let before = producer.accepted.load(Ordering::Relaxed);
    producer.wait_accepted(before + 20).await;
    assert_eq!(app.get("/readyz").await.status(), StatusCode::OK);
    let answers = producer.finish().await;
    let mut all = answers;
    all.push(down);
    check_nothing_lost(&db, &receiver, &all).await;
    drop(pg);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_restarted_under_delivery_load_loses_nothing_and_recovers_by_itself() {
    let mut redis = tokio::task::spawn_blocking(|| OwnRedis::start(&[])).await.expect("own Redis");
    let redis_url = redis.url();
    let app = Arc::new(
        spawn_app_with(Mode::Distributed, &[("REDIS_URL", redis_url.as_str()), ("SLUICE_DELIVERY_ALLOW_NETWORKS", "127.0.0.0/8")]).await,
    );
    let db = app.db.db();
    let (receiver, hook) = Receiver::spawn().await;
    let (token, merchant) = fixtures(&db, &hook).await;

    let producer = Producer::start(app.clone(), token.clone(), merchant.clone());
    receiver.wait_for("20 deliveries before the restart", |seen| seen.len() >= 20).await;

    redis = tokio::task::spawn_blocking(move || {
        redis.stop();
        redis
    })
    .await
    .expect("stop Redis");
    let ready = app.get("/readyz").await;
    assert_eq!(ready.status(), StatusCode::SERVICE_UNAVAILABLE, "/readyz reports the outage");
    // Deliveries live in the database: they go on while Redis is down.
    let during = receiver.ids().len();
    receiver.wait_for("deliveries while Redis is down", |seen| seen.len() >= during + 20).await;

    let redis = tokio::task::spawn_blocking(move || {
        redis.restart();
        redis
    })
    .await
    .expect("start Redis again");
    let deadline = Instant::now() + PATIENCE;
    while app.get("/readyz").await.status() != StatusCode::OK {
        assert!(Instant::now() < deadline, "/readyz still failing {PATIENCE:?} after Redis came back");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let before = producer.accepted.load(Ordering::Relaxed);
    producer.wait_accepted(before + 20).await;
    let answers = producer.finish().await;
    check_nothing_lost(&db, &receiver, &answers).await;
    drop(redis);
}
