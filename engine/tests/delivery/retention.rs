//! Retention with a manual clock: what a pass removes and what stays, the
//! batching, and the lease that lets one instance run it at a time.

use std::time::Duration;

use sluice_engine::clock::{SharedClock, Timestamp};
use sluice_engine::db::testing::TestDb;
use sluice_engine::db::Db;
use sluice_engine::delivery::*;
use sluice_engine::retention::{Retention, RetentionConfig};

use crate::receiver::Reply;
use crate::{contract, Harness, NowTs};

contract!(
    old_finished_deliveries_go_with_their_attempts_and_events_and_everything_else_stays,
    deleting_goes_in_bounded_batches_and_resumes_at_the_next_pass,
    one_instance_runs_retention_at_a_time_and_another_takes_over_an_expired_lease,
);

const DAY: Duration = Duration::from_secs(86_400);

async fn count(db: &Db, sql: &str, id: &str) -> i64 {
    sqlx::query_scalar::<_, i64>(sql).bind(id).fetch_one(db.pool()).await.expect("count")
}

async fn exists(db: &Db, table: &str, id: &str) -> bool {
    count(db, &format!("SELECT CAST(COUNT(*) AS BIGINT) FROM {table} WHERE id = $1"), id).await == 1
}

async fn attempts_of(db: &Db, id: &DeliveryId) -> i64 {
    count(db, "SELECT CAST(COUNT(*) AS BIGINT) FROM attempts WHERE delivery_id = $1", id.as_str()).await
}

async fn audit_rows(db: &Db) -> i64 {
    count(db, "SELECT CAST(COUNT(*) AS BIGINT) FROM audit_log WHERE id <> $1", "").await
}

fn retention(h: &Harness, instance: &str, config: RetentionConfig) -> Retention {
    let clock: SharedClock = h.clock.clone();
    Retention::new(h.db.db(), clock, config, instance)
}

/// Another merchant, created (and audited) now.
async fn merchant(h: &Harness, name: &str) -> Merchant {
    ops::create_merchant(
        &h.store,
        MerchantIn { name: name.into(), url: "http://127.0.0.1:9/x".into(), scheme: SigningScheme::Sluice, secret: None },
        &h.worker.config().ssrf,
        &h.worker.config().breaker,
        ops::Actor::named("test"),
        h.clock.now_ts(),
    )
    .await
    .expect("merchant")
}

/// A second PENDING delivery of `event` (to another merchant), as a fan-out
/// would make: the event's payload must outlive the first delivery.
async fn second_pending_delivery(h: &Harness, event: &EventId) -> DeliveryId {
    let other = merchant(h, "Other").await;
    let id = DeliveryId::generate();
    let now = h.clock.now_ts().as_millis();
    sqlx::query(
        "INSERT INTO deliveries (id, event_id, merchant_id, event_type, is_money, status, ladder, fast_attempts, \
         slow_steps, cycle_started_at, next_attempt_at, deferred, deferrals, created_at, updated_at) \
         VALUES ($1, $2, $3, 'order.created', FALSE, 'PENDING', 'fast', 0, 0, $4, $5, FALSE, 0, $4, $4)",
    )
    .bind(id.as_str())
    .bind(event.as_str())
    .bind(other.id.as_str())
    .bind(now)
    // Not due for a year: the test's steps never send it.
    .bind(now + 365 * 86_400_000)
    .execute(h.db.db().pool())
    .await
    .expect("second delivery");
    id
}

async fn old_finished_deliveries_go_with_their_attempts_and_events_and_everything_else_stays(db: TestDb) {
    let h = Harness::new(db, Reply::Status(200)).await;
    let t0 = h.clock.now_ts();
    let delivered = h.event("order.created", "new").await;
    let shared = h.event("order.created", "new").await;
    assert_eq!(h.step().await.delivered, 2);
    h.receiver.set(Reply::Status(404));
    let failed = h.event("order.created", "new").await; // not money: 4xx fails at once
    assert_eq!(h.step().await.failed, 1);
    h.receiver.set(Reply::Status(503));
    let pending = h.event("payment.status_changed", "paid").await;
    assert_eq!(h.step().await.retrying, 1);
    // Not due again within the test (a step at 31 days would fail it on the age ceiling).
    sqlx::query("UPDATE deliveries SET next_attempt_at = $2 WHERE id = $1")
        .bind(pending.as_str())
        .bind((t0 + 400 * DAY).as_millis())
        .execute(h.db.db().pool())
        .await
        .expect("push the retry out");
    let shared_event = h.delivery(&shared).await.event_id;
    let shared_pending = second_pending_delivery(&h, &shared_event).await;
    let (delivered_event, failed_event) = (h.delivery(&delivered).await.event_id, h.delivery(&failed).await.event_id);
    let audit_at_t0 = audit_rows(&h.db.db()).await;
    assert!(audit_at_t0 >= 2, "the merchants' creation is audited");

    // A month later a merchant is created and a fresh delivery is delivered.
    h.clock.set(t0 + 31 * DAY);
    merchant(&h, "Later").await;
    h.receiver.set(Reply::Status(200));
    let recent = h.event("order.created", "new").await;
    h.step().await;
    assert_eq!(h.delivery(&recent).await.status, DeliveryStatus::Delivered);
    // A pending delivery's due time is far away: make sure it stays pending.
    assert_eq!(h.delivery(&pending).await.status, DeliveryStatus::Pending);

    let r = retention(&h, "a", RetentionConfig::default());
    let db = h.db.db();
    let report = r.run_once(t0 + 31 * DAY).await.expect("pass");
    assert!(report.ran);
    assert_eq!((report.deliveries, report.events), (2, 1), "{report:?}");
    assert!(!exists(&db, "deliveries", delivered.as_str()).await, "delivered 31 days ago: gone");
    assert_eq!(attempts_of(&db, &delivered).await, 0, "with its attempts");
    assert!(!exists(&db, "events", delivered_event.as_str()).await, "and its event");
    assert!(!exists(&db, "deliveries", shared.as_str()).await, "the shared event's delivered delivery: gone");
    assert!(exists(&db, "events", shared_event.as_str()).await, "its event stays: a pending delivery needs the payload");
    assert!(exists(&db, "deliveries", shared_pending.as_str()).await);
    assert!(exists(&db, "deliveries", failed.as_str()).await, "FAILED is kept 90 days");
    assert_eq!(attempts_of(&db, &failed).await, 1);
    assert!(exists(&db, "deliveries", pending.as_str()).await, "PENDING is never deleted");
    assert_eq!(attempts_of(&db, &pending).await, 1);
    assert!(exists(&db, "deliveries", recent.as_str()).await, "recent delivered stays");
    assert_eq!(report.audit, 0);
    assert_eq!(audit_rows(&db).await, audit_at_t0 + 1, "audit rows are kept a year");
    // The pages still work for what remains.
    h.detail(&shared_pending).await;

    // Past 90 days the failed one goes too (and the one delivered at 31
    // days, now 60 days old); the pending one still stays.
    let report = r.run_once(t0 + 91 * DAY).await.expect("pass");
    assert_eq!((report.deliveries, report.events), (2, 2), "{report:?}");
    assert!(!exists(&db, "deliveries", failed.as_str()).await);
    assert!(!exists(&db, "events", failed_event.as_str()).await);
    assert_eq!(attempts_of(&db, &failed).await, 0);
    assert!(exists(&db, "deliveries", pending.as_str()).await);
    assert!(!exists(&db, "deliveries", recent.as_str()).await);
    assert!(exists(&db, "deliveries", shared_pending.as_str()).await);
    assert!(exists(&db, "events", shared_event.as_str()).await);

    // After a year the audit rows of t0 go; the one of t0 + 31 days stays.
    let report = r.run_once(t0 + 366 * DAY).await.expect("pass");
    assert_eq!(report.audit as i64, audit_at_t0, "{report:?}");
    assert_eq!(audit_rows(&db).await, 1);
    assert!(exists(&db, "deliveries", pending.as_str()).await, "still pending, still kept");
}

async fn deleting_goes_in_bounded_batches_and_resumes_at_the_next_pass(db: TestDb) {
    let h = Harness::new(db, Reply::Status(200)).await;
    let t0 = h.clock.now_ts();
    let mut ids = Vec::new();
    for _ in 0..7 {
        ids.push(h.event("order.created", "new").await);
    }
    assert_eq!(h.step().await.delivered, 7);
    let config = RetentionConfig { batch: 2, max_batches: 3, ..RetentionConfig::default() };
    let r = retention(&h, "a", config);
    let later: Timestamp = t0 + 31 * DAY;
    h.clock.set(later);
    // Three batches of two: six go, one is left for the next pass.
    let first = r.run_once(later).await.expect("pass");
    assert_eq!((first.deliveries, first.attempts, first.events), (6, 6, 6));
    let second = r.run_once(later).await.expect("pass");
    assert_eq!(second.deliveries, 1);
    for id in &ids {
        assert!(!exists(&h.db.db(), "deliveries", id.as_str()).await);
    }
    assert_eq!(r.run_once(later).await.expect("pass").deliveries, 0);
}

async fn one_instance_runs_retention_at_a_time_and_another_takes_over_an_expired_lease(db: TestDb) {
    let h = Harness::new(db, Reply::Status(200)).await;
    let t0 = h.clock.now_ts();
    let first = h.event("order.created", "new").await;
    let second = h.event("order.created", "new").await;
    h.step().await;
    let config = RetentionConfig { batch: 1, max_batches: 1, ..RetentionConfig::default() };
    let ttl = (config.every * 2).max(Duration::from_secs(300));
    let a = retention(&h, "instance-a", config.clone());
    let b = retention(&h, "instance-b", config);
    let now = t0 + 31 * DAY;
    h.clock.set(now);
    // a takes the lease and deletes one (its pass is one batch of one).
    assert_eq!(a.run_once(now).await.expect("a").deliveries, 1);
    let db = h.db.db();
    assert_eq!(exists(&db, "deliveries", first.as_str()).await as u8 + exists(&db, "deliveries", second.as_str()).await as u8, 1);

    // b may not run while a holds the lease.
    let soon = now + Duration::from_secs(60);
    h.clock.set(soon);
    let report = b.run_once(soon).await.expect("b");
    assert!(!report.ran, "b waits for a's lease");
    assert_eq!(report.deliveries, 0);

    // a dies without renewing: once its lease has expired b takes over.
    let expired = now + ttl + Duration::from_secs(1);
    h.clock.set(expired);
    let report = b.run_once(expired).await.expect("b takes over");
    assert!(report.ran);
    assert_eq!(report.deliveries, 1);
    assert!(!exists(&h.db.db(), "deliveries", first.as_str()).await);
    assert!(!exists(&h.db.db(), "deliveries", second.as_str()).await);
    // And a, back, is refused until b's lease runs out.
    assert!(!a.run_once(expired + Duration::from_secs(1)).await.expect("a is out").ran);
}
