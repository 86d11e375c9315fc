//! The merchant breaker end to end, shared through the database row.

use std::time::Duration;

use sluice_engine::delivery::merchant_breaker::MerchantBreakerConfig;
use sluice_engine::delivery::ops::reset_breaker;
use sluice_engine::delivery::*;

use crate::receiver::Reply;
use crate::{contract, test_config, Harness, NowTs};

contract!(
    the_breaker_opens_defers_without_spending_attempts_probes_doubles_and_closes,
    client_errors_and_rate_limits_never_open_the_breaker,
    a_manual_reset_closes_the_breaker_and_drains_the_queue,
    the_worked_timeline_in_docs_delivery_md_holds,
);

fn breaker_config() -> WorkerConfig {
    WorkerConfig { breaker: MerchantBreakerConfig::default(), ..test_config("w1") }
}

async fn five_failures(h: &Harness) -> Vec<DeliveryId> {
    let mut ids = Vec::new();
    for _ in 0..5 {
        ids.push(h.event("payment.status_changed", "paid").await);
    }
    assert_eq!(h.step().await.retrying, 5);
    ids
}

async fn breaker(h: &Harness) -> merchant_breaker::MerchantBreaker {
    h.store.breaker(&h.merchant.id).await.expect("breaker")
}

async fn the_breaker_opens_defers_without_spending_attempts_probes_doubles_and_closes(db: sluice_engine::db::testing::TestDb) {
    let h = Harness::with(db, Reply::Status(503), breaker_config(), SigningScheme::Sluice).await;
    let t0 = h.clock.now_ts();
    let ids = five_failures(&h).await;
    let b = breaker(&h).await;
    assert_eq!((b.status, b.next_probe_at), (BreakerStatus::Open, Some(t0 + Duration::from_secs(300))));

    // While open, due deliveries are deferred ~30 s and spend nothing.
    h.clock.set(t0 + Duration::from_secs(1));
    assert_eq!(h.step().await.deferred, 5);
    for id in &ids {
        let d = h.delivery(id).await;
        assert_eq!((d.fast_attempts, d.deferrals, d.next_attempt_at), (1, 1, t0 + Duration::from_secs(31)));
    }
    let sent = h.receiver.received().len();
    for s in (31..300).step_by(30) {
        h.clock.set(t0 + Duration::from_secs(s));
        h.step().await;
    }
    assert_eq!(h.receiver.received().len(), sent, "nothing sent while the breaker is open");

    // Each failed probe doubles the pause, up to 30 minutes; one probe at a time.
    let mut pauses = Vec::new();
    for _ in 0..4 {
        let b = breaker(&h).await;
        h.clock.set(b.next_probe_at.expect("open"));
        let before = h.receiver.received().len();
        let r = h.step().await;
        assert_eq!(h.receiver.received().len(), before + 1, "exactly one probe: {r:?}");
        pauses.push(breaker(&h).await.pause.as_secs() / 60);
    }
    assert_eq!(pauses, [10, 20, 30, 30]);
    let deferred_only: Vec<_> = {
        let mut v = Vec::new();
        for id in &ids {
            v.push(h.delivery(id).await.fast_attempts);
        }
        v
    };
    assert_eq!(deferred_only.iter().sum::<u32>(), 5 + 4, "only the probes spent attempts: {deferred_only:?}");

    // The endpoint recovers: the probe closes the breaker and the queue drains.
    h.receiver.set(Reply::Status(200));
    let b = breaker(&h).await;
    let probe_at = b.next_probe_at.expect("open");
    h.clock.set(probe_at);
    h.step().await;
    let b = breaker(&h).await;
    assert_eq!((b.status, b.failed_probes, b.counters_since), (BreakerStatus::Closed, 0, probe_at));
    // The rest drains at the same instant (some may already have been sent
    // in the closing step, once they saw the breaker closed).
    let r = h.step().await;
    assert_eq!(r.deferred, 0, "{r:?}");
    for id in &ids {
        assert_eq!(h.delivery(id).await.status, DeliveryStatus::Delivered);
    }
}

async fn client_errors_and_rate_limits_never_open_the_breaker(db: sluice_engine::db::testing::TestDb) {
    let h = Harness::with(db, Reply::Status(429), breaker_config(), SigningScheme::Sluice).await;
    for _ in 0..6 {
        h.event("payment.status_changed", "paid").await;
    }
    assert_eq!(h.step().await.retrying, 6);
    assert_eq!(breaker(&h).await.status, BreakerStatus::Closed);
    h.receiver.set(Reply::Status(400));
    h.clock.advance(Duration::from_secs(1));
    h.step().await;
    assert_eq!(breaker(&h).await.status, BreakerStatus::Closed);
}

async fn a_manual_reset_closes_the_breaker_and_drains_the_queue(db: sluice_engine::db::testing::TestDb) {
    let h = Harness::with(db, Reply::Status(500), breaker_config(), SigningScheme::Sluice).await;
    let ids = five_failures(&h).await;
    h.clock.advance(Duration::from_secs(1));
    assert_eq!(h.step().await.deferred, 5);
    let change = reset_breaker(&h.store, &h.merchant.id, &h.worker.config().breaker, sluice_engine::delivery::ops::Actor::named("test"), h.clock.now_ts()).await.expect("reset");
    assert_eq!((change.before.status, change.after.status), (BreakerStatus::Open, BreakerStatus::Closed));
    assert_eq!(change.after.version, change.before.version + 1);
    h.receiver.set(Reply::Status(200));
    assert_eq!(h.step().await.delivered, 5, "deferred deliveries are due at once");
    for id in &ids {
        assert_eq!(h.delivery(id).await.fast_attempts, 1);
    }
}

/// docs/delivery.md, "Worked timeline": a money event, the endpoint answers
/// 503 for the first hour, then 400 until 14:00, then 200. Start = 10:00.
async fn the_worked_timeline_in_docs_delivery_md_holds(db: sluice_engine::db::testing::TestDb) {
    let h = Harness::with(db, Reply::Status(503), breaker_config(), SigningScheme::Sluice).await;
    let start = h.clock.now_ts();
    let id = h.event("payment.status_changed", "paid").await;
    for _ in 0..500 {
        let d = h.delivery(&id).await;
        if d.status == DeliveryStatus::Delivered || d.status == DeliveryStatus::Failed {
            break;
        }
        h.clock.set(d.next_attempt_at);
        let elapsed = h.clock.now_ts().saturating_duration_since(start).as_secs();
        h.receiver.set(Reply::Status(match elapsed {
            0..3600 => 503,
            3600..14400 => 400,
            _ => 200,
        }));
        h.step().await;
    }
    let detail = h.detail(&id).await;
    let times: Vec<u64> = detail.attempts.iter().map(|a| a.at.saturating_duration_since(start).as_secs()).collect();
    // 10:00:00, :01, :03, :07, :15, 10:05:15, 10:15:15, 10:35:15, 11:05:15, 11:20:15, 12:20:15, 16:20:15
    assert_eq!(times, [0, 1, 3, 7, 15, 315, 915, 2115, 3915, 4815, 8415, 22815]);
    let probes: Vec<bool> = detail.attempts.iter().map(|a| a.probe).collect();
    assert_eq!(probes.iter().filter(|p| **p).count(), 4, "attempts 6 to 9 were probes: {probes:?}");
    let d = detail.delivery;
    assert_eq!((d.status, d.fast_attempts, d.slow_steps), (DeliveryStatus::Delivered, 8, 3));
    assert_eq!(d.slow_started_at, Some(start + Duration::from_secs(3915)));
    assert!(d.deferrals >= 10, "breaker deferrals are counted: {}", d.deferrals);
    assert_eq!(breaker(&h).await.status, BreakerStatus::Closed);
}
