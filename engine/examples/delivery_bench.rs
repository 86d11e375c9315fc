//! Load benchmark for the delivery engine: deliveries per second from the
//! PostgreSQL outbox to a fast local receiver.
//!
//! ```text
//! CARGO_TARGET_DIR=/work/target-delivery cargo run -p sluice-engine --example delivery_bench -- 20000 2
//! ```
//! Arguments: number of events (default 20000), worker instances (default 2).
//! Uses a fresh database on `SLUICE_TEST_POSTGRES_URL` (see docs/architecture.md)
//! and an axum receiver on 127.0.0.1 that answers 200 at once. Results are
//! recorded in docs/benchmarks.md ("Delivery").

use std::sync::Arc;
use std::time::Instant;

use axum::routing::post;
use axum::Router;
use sluice_engine::clock::{SharedClock, SystemClock};
use sluice_engine::db::testing::TestDb;
use sluice_engine::db::{Db, PoolSettings};
use sluice_engine::delivery::merchant_breaker::MerchantBreakerConfig;
use sluice_engine::delivery::ops::create_merchant;
use sluice_engine::delivery::ssrf::SsrfPolicy;
use sluice_engine::delivery::*;

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let events: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(20_000);
    let instances: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(2);

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind receiver");
    let addr = listener.local_addr().expect("receiver address");
    tokio::spawn(async move {
        let app = Router::new().route("/hook", post(|| async { "ok" }));
        let _ = axum::serve(listener, app).await;
    });

    let test_db = TestDb::postgres().await;
    // A pool sized for the load (the test pool is small): 2 workers × 32 in flight.
    let db = Db::connect(&test_db.url, &PoolSettings { max_connections: 48, ..PoolSettings::default() }).await.expect("connect");
    let store = DeliveryStore::new(db);
    let ssrf = SsrfPolicy::allowing(&["127.0.0.0/8"]).expect("allow-list").plain_http_allowed();
    let clock: SharedClock = Arc::new(SystemClock);
    let input = MerchantIn { name: "bench".into(), url: format!("http://{addr}/hook"), scheme: SigningScheme::Sluice, secret: None };
    let merchant = create_merchant(&store, input, &ssrf, &MerchantBreakerConfig::default(), sluice_engine::delivery::ops::Actor::named("test"), clock.now()).await.expect("merchant");

    // Intake: 16 concurrent producers.
    let started = Instant::now();
    let producers = (0..16).map(|p| {
        let store = store.clone();
        let merchant = merchant.id.clone();
        let clock = clock.clone();
        tokio::spawn(async move {
            for i in (p..events).step_by(16) {
                let e = EventIn {
                    merchant_id: merchant.clone(),
                    event_type: "payment.status_changed".into(),
                    status: None,
                    payload: serde_json::json!({"status": "paid", "payment_id": i}),
                    idempotency_key: format!("bench-{i}"),
                };
                store.accept_event(&e, clock.now()).await.expect("accept");
            }
        })
    });
    for p in futures::future::join_all(producers).await {
        p.expect("producer");
    }
    let intake = started.elapsed();

    // Delivery: `instances` workers sharing the outbox.
    let started = Instant::now();
    let workers = (0..instances).map(|n| {
        let config = WorkerConfig { instance_id: format!("bench-{n}"), ssrf: ssrf.clone(), ..WorkerConfig::default() };
        let worker = Worker::new(store.clone(), clock.clone(), config).expect("worker");
        tokio::spawn(async move {
            let mut delivered = 0;
            loop {
                let r = worker.run_once().await.expect("step");
                delivered += r.delivered;
                if r.claimed == 0 {
                    return delivered;
                }
            }
        })
    });
    let delivered: usize = futures::future::join_all(workers).await.into_iter().map(|r| r.expect("worker")).sum();
    let sending = started.elapsed();

    println!("events accepted:  {events} in {:.2} s = {:.0} events/s (16 producers)", intake.as_secs_f64(), events as f64 / intake.as_secs_f64());
    println!(
        "deliveries:       {delivered} in {:.2} s = {:.0} deliveries/s ({instances} workers, batch 64, 32 in flight each)",
        sending.as_secs_f64(),
        delivered as f64 / sending.as_secs_f64()
    );
    assert_eq!(delivered, events, "every event delivered exactly once");
}
