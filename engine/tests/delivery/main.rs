//! Delivery engine scenario tests against real PostgreSQL and SQLite (one
//! contract suite, one test per backend) and real local HTTP receivers.
//! Time is a `ManualClock` driven with `Worker::run_once`; nothing sleeps.

mod batching;
mod crash;
mod handoff;
mod https;
mod ladders;
mod ops;
mod retention;
mod pages;
mod receiver;
mod breakers;

use std::sync::Arc;
use std::time::Duration;

use sluice_engine::clock::{ManualClock, SharedClock, Timestamp};
use sluice_engine::db::testing::TestDb;
use sluice_engine::delivery::merchant_breaker::MerchantBreakerConfig;
use sluice_engine::delivery::ops::create_merchant;
use sluice_engine::delivery::queries::DeliveryDetail;
use sluice_engine::delivery::ssrf::SsrfPolicy;
use sluice_engine::delivery::*;

use receiver::{Receiver, Reply};

/// Generates `sqlite::name` and `postgres::name` from `async fn name(TestDb)`.
#[macro_export]
macro_rules! contract {
    ($($name:ident),+ $(,)?) => {
        mod sqlite {
            $( #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
               async fn $name() { super::$name(sluice_engine::db::testing::TestDb::sqlite().await).await } )+
        }
        mod postgres {
            $( #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
               async fn $name() { super::$name(sluice_engine::db::testing::TestDb::postgres().await).await } )+
        }
    };
}

pub struct Harness {
    pub db: TestDb,
    pub store: DeliveryStore,
    pub clock: Arc<ManualClock>,
    pub worker: Worker,
    pub receiver: Receiver,
    pub merchant: Merchant,
}

/// Test worker settings: loopback allowed, and a breaker that never opens
/// unless a test asks for one (ladder tests fail many times in a row).
pub fn test_config(name: &str) -> WorkerConfig {
    WorkerConfig {
        instance_id: name.to_owned(),
        request_timeout: Duration::from_secs(5),
        // The receivers listen on loopback without TLS.
        ssrf: SsrfPolicy::allowing(&["127.0.0.0/8", "::1/128"]).expect("allow-list").plain_http_allowed(),
        breaker: MerchantBreakerConfig { min_attempts: u32::MAX, ..MerchantBreakerConfig::default() },
        ..WorkerConfig::default()
    }
}

impl Harness {
    pub async fn new(db: TestDb, reply: Reply) -> Harness {
        Harness::with(db, reply, test_config("w1"), SigningScheme::Sluice).await
    }

    pub async fn with(db: TestDb, reply: Reply, config: WorkerConfig, scheme: SigningScheme) -> Harness {
        let store = DeliveryStore::new(db.db());
        let clock = Arc::new(ManualClock::at_test_epoch());
        let receiver = Receiver::start(reply).await;
        let input = MerchantIn { name: "Shop".into(), url: receiver.url(), scheme, secret: None };
        let merchant = create_merchant(&store, input, &config.ssrf, &config.breaker, sluice_engine::delivery::ops::Actor::named("test"), clock.now_ts()).await.expect("merchant");
        let shared: SharedClock = clock.clone();
        let worker = Worker::new(store.clone(), shared, config).expect("worker");
        Harness { db, store, clock, worker, receiver, merchant }
    }

    pub async fn event(&self, event_type: &str, status: &str) -> DeliveryId {
        let e = EventIn {
            merchant_id: self.merchant.id.clone(),
            event_type: event_type.into(),
            status: None,
            payload: serde_json::json!({"status": status, "payment_id": "p1"}),
            idempotency_key: ulid::Ulid::new().to_string(),
        };
        let mut acc = self.store.accept_event(&e, self.clock.now_ts()).await.expect("accept");
        acc.delivery_ids.pop().expect("one delivery")
    }

    /// An `order.created` event for the merchant, stored under `key`.
    pub fn order(&self, key: &str) -> EventIn {
        EventIn {
            merchant_id: self.merchant.id.clone(),
            event_type: "order.created".into(),
            status: None,
            payload: serde_json::json!({"key": key}),
            idempotency_key: key.into(),
        }
    }

    pub async fn step(&self) -> StepReport {
        self.worker.run_once().await.expect("run_once")
    }

    pub async fn delivery(&self, id: &DeliveryId) -> Delivery {
        self.store.delivery(id).await.expect("delivery")
    }

    pub async fn detail(&self, id: &DeliveryId) -> DeliveryDetail {
        self.store.delivery_detail(id, &self.worker.config().ladder).await.expect("detail")
    }

    /// Move the clock to the delivery's next attempt.
    pub async fn jump_to_next(&self, id: &DeliveryId) {
        let d = self.delivery(id).await;
        self.clock.set(d.next_attempt_at);
    }

    /// Run the delivery until it is DELIVERED or FAILED, jumping from attempt
    /// to attempt. Returns the pauses between attempts, in seconds.
    pub async fn run_to_end(&self, id: &DeliveryId) -> Vec<i64> {
        let mut times = Vec::new();
        for _ in 0..100 {
            self.jump_to_next(id).await;
            self.step().await;
            let d = self.delivery(id).await;
            times = self.detail(id).await.attempts.iter().map(|a| a.at.as_secs()).collect();
            if matches!(d.status, DeliveryStatus::Delivered | DeliveryStatus::Failed) {
                break;
            }
        }
        times.windows(2).map(|w| w[1] - w[0]).collect()
    }
}

/// `now()` without importing the trait everywhere.
pub trait NowTs {
    fn now_ts(&self) -> Timestamp;
}

impl NowTs for ManualClock {
    fn now_ts(&self) -> Timestamp {
        sluice_engine::clock::Clock::now(self)
    }
}
