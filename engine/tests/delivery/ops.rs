//! Intake, operations and read queries; the SSRF guard in the worker.

use std::time::Duration;

use sluice_engine::delivery::ops::{bulk_retry, redeliver, retry_now, rotate_secret, OpsError};
use sluice_engine::delivery::signing::verify;
use sluice_engine::delivery::ssrf::SsrfPolicy;
use sluice_engine::delivery::*;

use crate::receiver::Reply;
use crate::{contract, test_config, Harness, NowTs};

contract!(
    the_same_idempotency_key_twice_stores_one_event_and_one_delivery,
    a_batch_refuses_only_unknown_merchants_and_a_merchant_with_events_stays,
    a_redelivered_failed_delivery_keeps_its_id_and_starts_the_ladders_again,
    retry_now_and_bulk_retry_change_each_matching_row_once,
    the_delivery_list_filters_and_pages_by_keyset_without_gaps_or_repeats,
    during_a_secret_rotation_both_signatures_are_sent,
    the_ssrf_guard_refuses_loopback_without_the_allow_list,
    the_run_loop_delivers_and_stops_when_told,
    concurrent_intake_keeps_every_event_once,
    an_operation_and_its_audit_row_commit_together_or_not_at_all,
    the_overview_counts_attempts_by_outcome_per_period_and_ages_the_oldest_pending_delivery,
);

/// The audit row is written in the change's own transaction: with the audit
/// table unwritable, a redelivery, a breaker reset and a merchant edit all
/// fail and change nothing; once it is back, each commits with its row.
async fn an_operation_and_its_audit_row_commit_together_or_not_at_all(db: sluice_engine::db::testing::TestDb) {
    use sluice_engine::audit::{self, AuditAction};
    use sluice_engine::delivery::ops::{reset_breaker, update_merchant_url, Actor};
    let h = Harness::new(db, Reply::Status(410)).await;
    let id = h.event("refund.rejected", "rejected").await;
    h.step().await;
    assert_eq!(h.delivery(&id).await.status, DeliveryStatus::Failed);
    let pool = h.store.db().pool().clone();
    let actions = [AuditAction::DeliveryRedeliver, AuditAction::MerchantBreakerReset, AuditAction::MerchantUpdateUrl];
    let url_before = h.store.merchant(&h.merchant.id).await.expect("merchant").url;
    let breaker_before = h.store.breaker(&h.merchant.id).await.expect("breaker");

    sqlx::query("ALTER TABLE audit_log RENAME TO audit_log_away").execute(&pool).await.expect("hide the audit table");
    let ssrf = h.worker.config().ssrf.clone();
    let by = Actor::named("ops");
    assert!(matches!(redeliver(&h.store, &id, by, h.clock.now_ts()).await, Err(OpsError::Audit(_))));
    assert!(matches!(reset_breaker(&h.store, &h.merchant.id, &h.worker.config().breaker, by, h.clock.now_ts()).await, Err(OpsError::Audit(_))));
    let moved = "http://127.0.0.1:9/moved";
    assert!(matches!(update_merchant_url(&h.store, &h.merchant.id, moved, &ssrf, by, h.clock.now_ts()).await, Err(OpsError::Audit(_))));
    assert_eq!(h.delivery(&id).await.status, DeliveryStatus::Failed, "the redelivery rolled back with its audit row");
    assert_eq!(h.store.breaker(&h.merchant.id).await.expect("breaker").version, breaker_before.version, "the reset rolled back");
    assert_eq!(h.store.merchant(&h.merchant.id).await.expect("merchant").url, url_before, "the URL change rolled back");
    sqlx::query("ALTER TABLE audit_log_away RENAME TO audit_log").execute(&pool).await.expect("restore the audit table");
    assert!(audit::recent(h.store.db(), &actions, 10).await.expect("audit").is_empty());

    redeliver(&h.store, &id, by, h.clock.now_ts()).await.expect("redeliver");
    reset_breaker(&h.store, &h.merchant.id, &h.worker.config().breaker, by, h.clock.now_ts()).await.expect("reset");
    update_merchant_url(&h.store, &h.merchant.id, moved, &ssrf, by, h.clock.now_ts()).await.expect("url");
    assert_eq!(h.delivery(&id).await.status, DeliveryStatus::Pending);
    let rows = audit::recent(h.store.db(), &actions, 10).await.expect("audit");
    let mut got: Vec<(&str, &str, &str)> = rows.iter().map(|r| (r.action.as_str(), r.actor.as_str(), r.target.as_str())).collect();
    got.sort();
    let mut want = vec![
        ("breaker.reset", "ops", h.merchant.id.as_str()),
        ("delivery.redeliver", "ops", id.as_str()),
        ("merchant.update_url", "ops", h.merchant.id.as_str()),
    ];
    want.sort();
    assert_eq!(got, want);
}

async fn the_overview_counts_attempts_by_outcome_per_period_and_ages_the_oldest_pending_delivery(
    db: sluice_engine::db::testing::TestDb,
) {
    let h = Harness::new(db, Reply::Status(503)).await;
    let t0 = h.clock.now_ts();
    assert_eq!(h.store.oldest_pending_created_at().await.expect("oldest"), None);
    let id = h.event("payment.status_changed", "paid").await;
    h.step().await;
    assert_eq!(h.delivery(&id).await.status, DeliveryStatus::Pending);
    assert_eq!(h.store.oldest_pending_created_at().await.expect("oldest"), Some(t0));
    h.clock.advance(Duration::from_secs(120));
    h.receiver.set(Reply::Status(200));
    assert_eq!(h.step().await.delivered, 1);
    assert_eq!(h.store.oldest_pending_created_at().await.expect("oldest"), None);

    let minute = |t: sluice_engine::clock::Timestamp| t.as_millis().div_euclid(60_000) * 60_000;
    let counts = h.store.attempt_outcomes_since(t0 - Duration::from_secs(1), Duration::from_secs(60)).await.expect("counts");
    assert_eq!(
        counts,
        vec![(minute(t0), AttemptOutcome::ServerError, 1), (minute(h.clock.now_ts()), AttemptOutcome::Success, 1)]
    );
    // Only attempts after `since` count.
    let later = h.store.attempt_outcomes_since(t0 + Duration::from_secs(60), Duration::from_secs(60)).await.expect("later");
    assert_eq!(later, vec![(minute(h.clock.now_ts()), AttemptOutcome::Success, 1)]);
}

async fn the_same_idempotency_key_twice_stores_one_event_and_one_delivery(db: sluice_engine::db::testing::TestDb) {
    let h = Harness::new(db, Reply::Status(200)).await;
    let e = EventIn {
        merchant_id: h.merchant.id.clone(),
        event_type: "payment.status_changed".into(),
        status: None,
        payload: serde_json::json!({"status": "paid"}),
        idempotency_key: "order-42-paid".into(),
    };
    let first = h.store.accept_event(&e, h.clock.now_ts()).await.expect("first");
    let again = h.store.accept_event(&e, h.clock.now_ts()).await.expect("again");
    assert!(!first.duplicate && again.duplicate);
    assert_eq!((first.event_id.clone(), first.delivery_ids.clone()), (again.event_id, again.delivery_ids));
    let page = h.store.list_deliveries(&DeliveryFilter::default(), None, 10).await.expect("list");
    assert_eq!(page.items.len(), 1);
    assert!(page.items[0].is_money);
    let blank = EventIn { idempotency_key: String::new(), ..e.clone() };
    assert!(matches!(h.store.accept_event(&blank, h.clock.now_ts()).await, Err(StoreError::Invalid(_))));
    let unknown = EventIn { merchant_id: MerchantId::generate(), ..e };
    assert!(matches!(h.store.accept_event(&unknown, h.clock.now_ts()).await, Err(StoreError::UnknownMerchant(_))));
}

/// Intake stores only events whose merchant exists and refuses the others
/// one by one within a batch; a merchant that events refer to can be
/// neither deleted nor given another id, nor can one that only a delivery
/// refers to (a foreign key on SQLite, a trigger on PostgreSQL: migration
/// 0017), while one without either can be deleted and one with events can
/// still be renamed.
async fn a_batch_refuses_only_unknown_merchants_and_a_merchant_with_events_stays(db: sluice_engine::db::testing::TestDb) {
    use sluice_engine::delivery::ops::{create_merchant, Actor};
    let h = Harness::new(db, Reply::Status(200)).await;
    let stranger = EventIn { merchant_id: MerchantId::generate(), ..h.order("b") };
    let batch = [h.order("a"), stranger, h.order("c"), h.order("a")];
    let answers = h.store.accept_events(&batch, h.clock.now_ts()).await.expect("batch");
    assert!(matches!(answers[1], Err(StoreError::UnknownMerchant(_))), "{:?}", answers[1]);
    let (a, c, again) = (answers[0].as_ref().expect("a"), answers[2].as_ref().expect("c"), answers[3].as_ref().expect("a again"));
    assert!(!a.duplicate && !c.duplicate && again.duplicate, "{answers:?}");
    assert_eq!((&again.event_id, &again.delivery_ids), (&a.event_id, &a.delivery_ids));
    let page = h.store.list_deliveries(&DeliveryFilter::default(), None, 10).await.expect("list");
    assert_eq!(page.items.len(), 2, "the known merchant's two events were stored");

    let pool = h.store.db().pool().clone();
    let id = h.merchant.id.as_str();
    sqlx::query("DELETE FROM merchant_breakers WHERE merchant_id = $1").bind(id).execute(&pool).await.expect("breaker row");
    for sql in ["DELETE FROM merchants WHERE id = $1", "UPDATE merchants SET id = 'mer_renamed' WHERE id = $1"] {
        let err = sqlx::query(sql).bind(id).execute(&pool).await.expect_err(sql);
        assert!(err.as_database_error().is_some_and(|e| e.is_foreign_key_violation()), "{sql}: {err}");
    }
    let renamed = sqlx::query("UPDATE merchants SET name = 'Renamed' WHERE id = $1").bind(id).execute(&pool).await.expect("rename");
    assert_eq!(renamed.rows_affected(), 1);

    let cfg = h.worker.config();
    let other = |name: &str| MerchantIn { name: name.into(), url: h.receiver.url(), scheme: SigningScheme::Sluice, secret: None };
    let idle = create_merchant(&h.store, other("Idle"), &cfg.ssrf, &cfg.breaker, Actor::named("test"), h.clock.now_ts()).await.expect("merchant");
    // A delivery to another merchant than its event's, as a fan-out would
    // store: that merchant has no events, only the delivery, and stays too.
    let fanned = create_merchant(&h.store, other("Fan-out"), &cfg.ssrf, &cfg.breaker, Actor::named("test"), h.clock.now_ts()).await.expect("merchant");
    sqlx::query(
        "INSERT INTO deliveries (id, event_id, merchant_id, event_type, is_money, status, ladder, fast_attempts, \
         slow_steps, cycle_started_at, next_attempt_at, deferred, deferrals, created_at, updated_at) \
         VALUES ($1, $2, $3, 'order.created', FALSE, 'PENDING', 'fast', 0, 0, 0, 0, FALSE, 0, 0, 0)",
    )
    .bind(DeliveryId::generate().as_str())
    .bind(a.event_id.as_str())
    .bind(fanned.id.as_str())
    .execute(&pool)
    .await
    .expect("fan-out delivery");
    for m in [&idle, &fanned] {
        sqlx::query("DELETE FROM merchant_breakers WHERE merchant_id = $1").bind(m.id.as_str()).execute(&pool).await.expect("breaker row");
    }
    let err = sqlx::query("DELETE FROM merchants WHERE id = $1").bind(fanned.id.as_str()).execute(&pool).await.expect_err("its delivery");
    assert!(err.as_database_error().is_some_and(|e| e.is_foreign_key_violation()), "{err}");
    let gone = sqlx::query("DELETE FROM merchants WHERE id = $1").bind(idle.id.as_str()).execute(&pool).await.expect("no events, no guard");
    assert_eq!(gone.rows_affected(), 1);
}

async fn a_redelivered_failed_delivery_keeps_its_id_and_starts_the_ladders_again(db: sluice_engine::db::testing::TestDb) {
    let h = Harness::new(db, Reply::Status(410)).await;
    let id = h.event("refund.rejected", "rejected").await;
    h.step().await;
    assert_eq!(h.delivery(&id).await.status, DeliveryStatus::Failed);
    h.clock.advance(Duration::from_secs(3600));
    let change = redeliver(&h.store, &id, sluice_engine::delivery::ops::Actor::named("test"), h.clock.now_ts()).await.expect("redeliver");
    assert_eq!((change.before.status, change.after.status), (DeliveryStatus::Failed, DeliveryStatus::Pending));
    assert_eq!((change.after.id.clone(), change.after.cycle_started_at, change.after.failed_reason), (id.clone(), h.clock.now_ts(), None));
    assert!(matches!(redeliver(&h.store, &id, sluice_engine::delivery::ops::Actor::named("test"), h.clock.now_ts()).await, Err(OpsError::WrongStatus { status: DeliveryStatus::Pending, .. })));
    h.receiver.set(Reply::Status(200));
    assert_eq!(h.step().await.delivered, 1);
    let got = h.receiver.received();
    assert_eq!(got.len(), 2);
    assert!(got.iter().all(|r| r.id == id.as_str()), "same X-Webhook-Id on redelivery");
    let counts = h.store.status_counts().await.expect("counts");
    assert_eq!((counts.pending, counts.delivering, counts.failed), (0, 0, 0));
    let delivered = DeliveryFilter { status: Some(DeliveryStatus::Delivered), ..DeliveryFilter::default() };
    assert_eq!(h.store.count_deliveries(&delivered).await.expect("count"), 1);
}

async fn retry_now_and_bulk_retry_change_each_matching_row_once(db: sluice_engine::db::testing::TestDb) {
    let h = Harness::new(db, Reply::Status(404)).await;
    let mut failed = Vec::new();
    for _ in 0..3 {
        failed.push(h.event("refund.failed", "failed").await);
    }
    h.step().await;
    h.receiver.set(Reply::Status(503));
    let pending = h.event("payment.status_changed", "paid").await;
    h.step().await;
    let d = h.delivery(&pending).await;
    assert!(d.next_attempt_at > h.clock.now_ts());
    let change = retry_now(&h.store, &pending, sluice_engine::delivery::ops::Actor::named("test"), h.clock.now_ts()).await.expect("retry now");
    assert_eq!(change.after.next_attempt_at, h.clock.now_ts());
    assert_eq!(change.after.fast_attempts, 1, "retry now spends nothing");
    assert!(matches!(retry_now(&h.store, &failed[0], sluice_engine::delivery::ops::Actor::named("test"), h.clock.now_ts()).await, Err(OpsError::WrongStatus { .. })));

    let filter = DeliveryFilter { status: Some(DeliveryStatus::Failed), ..DeliveryFilter::default() };
    assert_eq!(h.store.count_deliveries(&filter).await.expect("count"), 3);
    let capped = bulk_retry(&h.store, &filter, 2, sluice_engine::delivery::ops::Actor::named("test"), h.clock.now_ts()).await.expect("bulk");
    assert_eq!(capped.count(), 2);
    let rest = bulk_retry(&h.store, &filter, 100, sluice_engine::delivery::ops::Actor::named("test"), h.clock.now_ts()).await.expect("bulk");
    assert_eq!(rest.redelivered.len(), 1, "each row once");
    let all = h.store.list_deliveries(&DeliveryFilter::default(), None, 100).await.expect("list");
    assert_eq!(all.items.len(), 4, "no row copied or lost");
    assert!(all.items.iter().all(|d| d.status == DeliveryStatus::Pending));
}

async fn the_delivery_list_filters_and_pages_by_keyset_without_gaps_or_repeats(db: sluice_engine::db::testing::TestDb) {
    let h = Harness::new(db, Reply::Status(200)).await;
    let mut ids = Vec::new();
    for i in 0..7 {
        let (t, s) = if i % 2 == 0 { ("payment.status_changed", "paid") } else { ("kyc.status_changed", "ok") };
        ids.push(h.event(t, s).await);
        if i % 3 != 0 {
            h.clock.advance(Duration::from_secs(1)); // some share a created_at
        }
    }
    let mut seen = Vec::new();
    let mut after = None;
    loop {
        let page = h.store.list_deliveries(&DeliveryFilter::default(), after.as_ref(), 3).await.expect("page");
        seen.extend(page.items.iter().map(|d| d.id.clone()));
        match page.next {
            Some(c) => after = Some(c),
            None => break,
        }
    }
    let mut expected = ids.clone();
    expected.reverse();
    let mut sorted_seen = seen.clone();
    sorted_seen.sort();
    let mut sorted_ids = ids.clone();
    sorted_ids.sort();
    assert_eq!(sorted_seen, sorted_ids, "every row exactly once");
    assert_eq!(seen.len(), 7);
    let money = DeliveryFilter { is_money: Some(true), ..DeliveryFilter::default() };
    assert_eq!(h.store.list_deliveries(&money, None, 100).await.expect("money").items.len(), 4);
    let kyc = DeliveryFilter { event_type: Some("kyc.status_changed".into()), merchant_id: Some(h.merchant.id.clone()), ladder: Some(Ladder::Fast), ..DeliveryFilter::default() };
    assert_eq!(h.store.list_deliveries(&kyc, None, 100).await.expect("kyc").items.len(), 3);
    let t0 = sluice_engine::clock::Timestamp::from_secs(1_767_225_600);
    let window = DeliveryFilter { created_from: Some(t0 + Duration::from_secs(1)), created_to: Some(t0 + Duration::from_secs(3)), ..DeliveryFilter::default() };
    assert_eq!(h.store.list_deliveries(&window, None, 100).await.expect("window").items.len(), 3);
    let overview = h.store.list_merchants(h.clock.now_ts(), &h.worker.config().breaker).await.expect("merchants");
    assert_eq!(overview.len(), 1);
    assert!(h.store.open_breakers().await.expect("breakers").is_empty());
}

async fn during_a_secret_rotation_both_signatures_are_sent(db: sluice_engine::db::testing::TestDb) {
    let h = Harness::with(db, Reply::Status(200), test_config("w1"), SigningScheme::StandardWebhooks).await;
    let change = rotate_secret(&h.store, &h.merchant.id, None, Duration::from_secs(86_400), sluice_engine::delivery::ops::Actor::named("test"), h.clock.now_ts()).await.expect("rotate");
    let (old, new) = (change.before.secret.clone(), change.after.secret.clone());
    h.event("payment.status_changed", "paid").await;
    h.step().await;
    let got = &h.receiver.received()[0];
    let sig = got.headers.get("webhook-signature").and_then(|v| v.to_str().ok()).expect("signature");
    assert_eq!(sig.split(' ').count(), 2);
    let now = h.clock.now_ts().as_secs();
    verify(SigningScheme::StandardWebhooks, &[&old], &got.headers, &got.body, now, 300).expect("old secret verifies");
    verify(SigningScheme::StandardWebhooks, &[&new], &got.headers, &got.body, now, 300).expect("new secret verifies");
    // After the overlap only the new secret signs.
    h.clock.advance(Duration::from_secs(86_401));
    h.event("payment.status_changed", "paid").await;
    h.step().await;
    let got = &h.receiver.received()[1];
    let sig = got.headers.get("webhook-signature").and_then(|v| v.to_str().ok()).expect("signature");
    assert_eq!(sig.split(' ').count(), 1);
}

async fn the_ssrf_guard_refuses_loopback_without_the_allow_list(db: sluice_engine::db::testing::TestDb) {
    let strict = WorkerConfig { ssrf: SsrfPolicy::strict().plain_http_allowed(), ..test_config("w1") };
    let h = Harness::with(db, Reply::Status(200), test_config("setup"), SigningScheme::Sluice).await;
    let worker = Worker::new(h.store.clone(), h.clock.clone(), strict.clone()).expect("worker");
    let literal = h.event("payment.status_changed", "paid").await;
    worker.run_once().await.expect("step");
    let d = h.store.delivery_detail(&literal, &strict.ladder).await.expect("detail");
    assert_eq!(d.attempts[0].outcome, AttemptOutcome::Network);
    assert!(d.attempts[0].error.as_deref().is_some_and(|e| e.contains("not public")), "{:?}", d.attempts[0].error);
    // A hostname that resolves to loopback is refused after resolution.
    let by_name = format!("http://localhost:{}/hook", h.receiver.addr.port());
    ops::update_merchant_url(&h.store, &h.merchant.id, &by_name, &strict.ssrf, sluice_engine::delivery::ops::Actor::named("test"), h.clock.now_ts()).await.expect("hostnames pass the save-time check");
    h.clock.advance(Duration::from_secs(1));
    worker.run_once().await.expect("step");
    let d = h.store.delivery_detail(&literal, &strict.ladder).await.expect("detail");
    assert_eq!(d.attempts[1].outcome, AttemptOutcome::Network);
    assert!(d.attempts[1].error.as_deref().is_some_and(|e| e.contains("not public")), "{:?}", d.attempts[1].error);
    assert!(h.receiver.received().is_empty(), "nothing reached the loopback receiver");
    assert!(matches!(
        ops::update_merchant_url(&h.store, &h.merchant.id, "http://169.254.169.254/", &strict.ssrf, sluice_engine::delivery::ops::Actor::named("test"), h.clock.now_ts()).await,
        Err(OpsError::Url(_))
    ));
}

async fn the_run_loop_delivers_and_stops_when_told(db: sluice_engine::db::testing::TestDb) {
    let h = Harness::new(db, Reply::Status(200)).await;
    let id = h.event("payment.status_changed", "paid").await;
    let mut arrivals = h.receiver.arrivals();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let worker = h.worker.clone();
    let running = tokio::spawn(async move { worker.run(async { let _ = stopped.await; }).await });
    assert_eq!(arrivals.recv().await.as_deref(), Some(id.as_str()));
    // The step in hand is finished before the loop stops.
    stop.send(()).expect("loop still running");
    running.await.expect("loop ends");
    assert_eq!(h.delivery(&id).await.status, DeliveryStatus::Delivered);
}

async fn concurrent_intake_keeps_every_event_once(db: sluice_engine::db::testing::TestDb) {
    let h = Harness::new(db, Reply::Status(200)).await;
    let now = h.clock.now_ts();
    // 8 producers, 20 events each, every event sent twice (a producer retry).
    let tasks = (0..8).map(|p| {
        let store = h.store.clone();
        let merchant = h.merchant.id.clone();
        tokio::spawn(async move {
            for i in 0..40 {
                let e = EventIn {
                    merchant_id: merchant.clone(),
                    event_type: "payment.status_changed".into(),
                    status: Some("paid".into()),
                    payload: serde_json::json!({"n": i / 2}),
                    idempotency_key: format!("p{p}-e{}", i / 2),
                };
                store.accept_event(&e, now).await.expect("accepted");
            }
        })
    });
    for t in futures::future::join_all(tasks).await {
        t.expect("producer");
    }
    assert_eq!(h.store.count_deliveries(&DeliveryFilter::default()).await.expect("count"), 160);
}
