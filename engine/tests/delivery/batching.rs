//! The outbox in batches: a write-back of many attempts keeps each attempt
//! and step and respects leases row by row; group-committed intake answers
//! each caller; new work wakes an idle worker at once, within the instance
//! and (PostgreSQL) across instances.

use std::sync::Arc;
use std::time::Duration;

use sluice_engine::clock::{Clock, SharedClock, SystemClock};
use sluice_engine::db::testing::TestDb;
use sluice_engine::db::Backend;
use sluice_engine::delivery::intake::Intake;
use sluice_engine::delivery::ladder::Decision;
use sluice_engine::delivery::store::AttemptRecord;
use sluice_engine::delivery::*;

use crate::receiver::Reply;
use crate::{contract, test_config, Harness, NowTs};

contract!(
    a_batched_write_back_keeps_every_attempt_and_moves_only_rows_still_held,
    one_step_sends_and_writes_back_a_whole_batch,
    intake_wakes_an_idle_worker_at_once,
    concurrent_intake_calls_each_get_their_own_answer,
    intake_that_lost_its_connection_refuses_at_most_briefly_and_stores_again
);

fn delivered(h: &Harness, id: &DeliveryId) -> AttemptRecord {
    AttemptRecord {
        attempt: Attempt {
            id: AttemptId::generate(),
            delivery_id: id.clone(),
            merchant_id: h.merchant.id.clone(),
            at: h.clock.now_ts(),
            ladder: Ladder::Fast,
            outcome: AttemptOutcome::Success,
            status_code: Some(200),
            latency_ms: 3,
            error: None,
            response_body: Some("ok".into()),
            response_truncated: false,
            request_headers: None,
            response_headers: None,
            probe: false,
        },
        decision: Decision::Delivered,
    }
}

async fn a_batched_write_back_keeps_every_attempt_and_moves_only_rows_still_held(db: TestDb) {
    let h = Harness::new(db, Reply::Status(200)).await;
    let mut ids = Vec::new();
    for _ in 0..3 {
        ids.push(h.event("order.created", "created").await);
    }
    let lease = test_config("w1").lease;
    assert_eq!(h.store.claim("w1", h.clock.now_ts(), lease, 10).await.expect("claim").len(), 3);
    // Another instance took the last row over (w1's lease ran out meanwhile).
    sqlx::query("UPDATE deliveries SET lease_owner = 'w2' WHERE id = $1").bind(ids[2].as_str()).execute(h.db.pool()).await.expect("take over");

    let recs: Vec<AttemptRecord> = ids.iter().map(|id| delivered(&h, id)).collect();
    let ours = h.store.finish_attempts(&recs, "w1", h.clock.now_ts()).await.expect("write-back");
    assert_eq!(ours, [true, true, false], "only rows w1 still holds move");
    for id in &ids[..2] {
        assert_eq!(h.delivery(id).await.status, DeliveryStatus::Delivered);
        assert_eq!(h.detail(id).await.attempts.len(), 1, "its own attempt row");
    }
    let taken = h.delivery(&ids[2]).await;
    assert_eq!((taken.status, taken.lease_owner.as_deref()), (DeliveryStatus::Delivering, Some("w2")), "w2's row is left alone");
    assert_eq!(h.detail(&ids[2]).await.attempts.len(), 1, "the attempt happened, so it is kept");
}

async fn one_step_sends_and_writes_back_a_whole_batch(db: TestDb) {
    let h = Harness::new(db, Reply::Status(200)).await;
    let mut ids = Vec::new();
    for _ in 0..20 {
        ids.push(h.event("order.created", "created").await);
    }
    let report = h.step().await;
    assert_eq!((report.claimed, report.delivered, report.lost), (20, 20, 0));
    assert_eq!(h.receiver.received().len(), 20);
    for id in &ids {
        assert_eq!(h.delivery(id).await.status, DeliveryStatus::Delivered);
        assert_eq!(h.detail(id).await.attempts.len(), 1);
    }
}

/// Wall-clock time whose sleeps never end, and which says when someone
/// started one: a worker that sleeps on it is idle until woken.
#[derive(Debug)]
struct ParkedClock {
    parked: Arc<tokio::sync::Notify>,
}

impl Clock for ParkedClock {
    fn now(&self) -> sluice_engine::clock::Timestamp {
        SystemClock.now()
    }

    fn sleep(&self, _: Duration) -> sluice_engine::clock::SleepFuture<'_> {
        self.parked.notify_one();
        Box::pin(std::future::pending())
    }
}

/// An idle worker's pause never ends here: only a wake-up can make it send. In one instance intake wakes it
/// directly; on PostgreSQL a store of another instance (no in-process
/// wake-up) reaches it through LISTEN/NOTIFY.
async fn intake_wakes_an_idle_worker_at_once(db: TestDb) {
    let h = Harness::new(db, Reply::Status(200)).await;
    let parked = Arc::new(tokio::sync::Notify::new());
    let clock: SharedClock = Arc::new(ParkedClock { parked: parked.clone() });
    let config = test_config("w1");
    let wake = Wake::default();
    let worker = Worker::new(h.store.clone(), clock.clone(), config).expect("worker").with_wake(wake.clone());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let mut arrivals = h.receiver.arrivals();
    let run = tokio::spawn(async move {
        worker
            .run(async move {
                let _ = stopped.await;
            })
            .await
    });
    let (stop_listen, listen_stopped) = tokio::sync::oneshot::channel::<()>();
    if h.db.backend() == Backend::Postgres {
        tokio::spawn(sluice_engine::delivery::wake::listen(h.db.url.clone(), wake.clone(), async move {
            let _ = listen_stopped.await;
        }));
    }
    let intake = Intake::start(h.store.clone(), wake.clone(), 16, 2, None);
    let event = |key: &str| h.order(key);
    let patience = Duration::from_secs(30);
    parked.notified().await;
    let local = intake.accept(event("local"), clock.now()).await.expect("accept");
    let got = tokio::time::timeout(patience, arrivals.recv()).await.expect("woken by this instance's intake").expect("arrival");
    assert_eq!(got, local.delivery_ids[0].as_str());
    if h.db.backend() == Backend::Postgres {
        let other = DeliveryStore::new(h.db.db());
        parked.notified().await;
        let remote = other.accept_event(&event("remote"), clock.now()).await.expect("accept");
        let got = tokio::time::timeout(patience, arrivals.recv()).await.expect("woken through NOTIFY").expect("arrival");
        assert_eq!(got, remote.delivery_ids[0].as_str());
    }
    let _ = stop.send(());
    let _ = stop_listen.send(());
    wake.notify();
    run.await.expect("worker stops");
}

async fn concurrent_intake_calls_each_get_their_own_answer(db: TestDb) {
    let h = Harness::new(db, Reply::Status(200)).await;
    let intake = Intake::start(h.store.clone(), Wake::default(), 8, 2, None);
    let event = |key: String| h.order(&key);
    let unknown = EventIn { merchant_id: MerchantId::parse("mer_01hzzzzzzzzzzzzzzzzzzzzzzz").expect("id"), ..event("stranger".into()) };
    let mut calls: Vec<_> = (0..30).map(|i| intake.accept(event(format!("k{}", i % 10)), h.clock.now_ts())).collect();
    calls.push(intake.accept(unknown, h.clock.now_ts()));
    let answers = futures::future::join_all(calls).await;
    assert!(matches!(answers.last(), Some(Err(StoreError::UnknownMerchant(_)))), "{:?}", answers.last());
    for k in 0..10 {
        let same: Vec<&Accepted> = answers.iter().enumerate().filter(|(i, _)| i % 10 == k && *i < 30).map(|(_, a)| a.as_ref().expect("stored")).collect();
        assert_eq!(same.iter().filter(|a| !a.duplicate).count(), 1, "key k{k}: exactly one call stored it");
        assert!(same.iter().all(|a| a.event_id == same[0].event_id && a.delivery_ids == same[0].delivery_ids), "key k{k}: one event's ids for all");
    }
    let stored: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM deliveries").fetch_one(h.db.pool()).await.expect("count");
    assert_eq!(stored, 10);
}

/// Intake with one transaction at a time keeps its connection between
/// groups (PostgreSQL). When the database drops it (here: every connection
/// of the test database terminated, as a restart would), a call is either
/// stored or refused as "database unreachable", never anything else; a
/// refused call stored nothing, and intake takes a fresh connection by
/// itself and goes on storing. On SQLite the same calls are simply stored.
async fn intake_that_lost_its_connection_refuses_at_most_briefly_and_stores_again(db: TestDb) {
    let h = Harness::new(db, Reply::Status(200)).await;
    let intake = Intake::start(h.store.clone(), Wake::default(), 8, 1, None);
    let event = |key: &str| h.order(key);
    let first = intake.accept(event("before"), h.clock.now_ts()).await.expect("stored before the fault");
    assert!(!first.duplicate);
    if h.db.backend() == Backend::Postgres {
        let killed: Vec<bool> = sqlx::query_scalar(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()",
        )
        .fetch_all(h.db.pool())
        .await
        .expect("terminate");
        assert!(killed.iter().any(|k| *k), "intake's connection was among those terminated");
    }
    let mut refused = 0;
    let stored = loop {
        match intake.accept(event("after"), h.clock.now_ts()).await {
            Ok(a) => break a,
            Err(e) => {
                assert!(sluice_engine::db::is_unreachable(&e), "a refusal says the database is unreachable: {e:?}");
                refused += 1;
                assert!(refused < 20, "intake never recovered: {e:?}");
            }
        }
    };
    assert!(!stored.duplicate, "the refused calls stored nothing, so the first success stores the event");
    let again = intake.accept(event("later"), h.clock.now_ts()).await.expect("the next call is stored at once");
    assert!(!again.duplicate);
    let keys: Vec<String> = sqlx::query_scalar("SELECT idempotency_key FROM events ORDER BY idempotency_key").fetch_all(h.db.pool()).await.expect("keys");
    assert_eq!(keys, ["after", "before", "later"]);
}
