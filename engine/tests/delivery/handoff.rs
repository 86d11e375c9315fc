//! Intake hands the deliveries it stores to this instance's steps, claimed:
//! a step sends them without claiming them from the database, rows that do
//! not fit wait PENDING for any step, a row whose process went away is
//! reclaimed once its lease ran out, and a step that failed half way sends
//! what it took again at once.

use std::time::Duration;

use sluice_engine::db::testing::TestDb;
use sluice_engine::delivery::handoff::Handoff;
use sluice_engine::delivery::intake::Intake;
use sluice_engine::delivery::*;

use crate::receiver::Reply;
use crate::{contract, test_config, Harness, NowTs};

contract!(
    intake_hands_what_fits_to_the_steps_and_stores_the_rest_pending,
    a_handed_over_row_nobody_sends_is_reclaimed_after_its_lease,
    a_step_that_failed_half_way_sends_what_it_took_again_at_once,
    a_hand_off_released_at_shutdown_is_claimed_at_once
);

const LEASE: Duration = Duration::from_secs(60);

async fn accept_all(h: &Harness, intake: &Intake, n: usize) -> Vec<DeliveryId> {
    let calls = (0..n).map(|i| intake.accept(h.order(&format!("k{i}")), h.clock.now_ts()));
    futures::future::join_all(calls).await.into_iter().map(|a| a.expect("accepted").delivery_ids[0].clone()).collect()
}

async fn intake_hands_what_fits_to_the_steps_and_stores_the_rest_pending(db: TestDb) {
    let h = Harness::new(db, Reply::Status(200)).await;
    let handoff = Handoff::new("intake-a".into(), 4, LEASE);
    let intake = Intake::start(h.store.clone(), Wake::default(), 16, 2, Some(handoff.clone()));
    let ids = accept_all(&h, &intake, 6).await;
    let mut by_owner = std::collections::HashMap::new();
    for id in &ids {
        let d = h.delivery(id).await;
        *by_owner.entry((d.status, d.lease_owner)).or_insert(0) += 1;
    }
    assert_eq!(by_owner.get(&(DeliveryStatus::Delivering, Some("intake-a".to_owned()))), Some(&4), "{by_owner:?}");
    assert_eq!(by_owner.get(&(DeliveryStatus::Pending, None)), Some(&2), "{by_owner:?}");
    assert_eq!(handoff.len(), 4);

    // Another step without the hand-off cannot take the claimed rows.
    let other = h.worker.sibling("w-other".into());
    assert_eq!(other.run_once().await.expect("step").claimed, 2, "only the PENDING rows");

    let worker = h.worker.clone().with_handoff(handoff.clone());
    let report = worker.run_once().await.expect("step");
    assert_eq!((report.claimed, report.delivered, report.lost), (4, 4, 0));
    assert!(handoff.is_empty());
    let mut seen: Vec<String> = h.receiver.received().into_iter().map(|r| r.id).collect();
    seen.sort();
    let mut want: Vec<String> = ids.iter().map(|id| id.as_str().to_owned()).collect();
    want.sort();
    assert_eq!(seen, want, "each delivery sent once");
    for id in &ids {
        let d = h.delivery(id).await;
        assert_eq!((d.status, d.lease_owner), (DeliveryStatus::Delivered, None));
        assert_eq!(h.detail(id).await.attempts.len(), 1);
    }
}

async fn a_handed_over_row_nobody_sends_is_reclaimed_after_its_lease(db: TestDb) {
    let h = Harness::new(db, Reply::Status(200)).await;
    // The instance that accepted it is gone with its hand-off.
    let handoff = Handoff::new("intake-gone".into(), 8, test_config("w1").lease);
    let intake = Intake::start(h.store.clone(), Wake::default(), 16, 2, Some(handoff));
    let ids = accept_all(&h, &intake, 1).await;
    assert_eq!(h.step().await.claimed, 0, "leased to the hand-off");
    h.clock.advance(test_config("w1").lease + Duration::from_secs(1));
    let report = h.step().await;
    assert_eq!((report.claimed, report.delivered), (1, 1));
    assert_eq!(h.receiver.received().iter().map(|r| r.id.clone()).collect::<Vec<_>>(), [ids[0].as_str().to_owned()]);
}

async fn a_step_that_failed_half_way_sends_what_it_took_again_at_once(db: TestDb) {
    let h = Harness::new(db, Reply::Status(200)).await;
    let handoff = Handoff::new("intake-a".into(), 8, LEASE);
    let intake = Intake::start(h.store.clone(), Wake::default(), 16, 2, Some(handoff.clone()));
    let ids = accept_all(&h, &intake, 3).await;
    let worker = h.worker.clone().with_handoff(handoff.clone());
    // The write-back fails: the attempts table is away.
    sqlx::query("ALTER TABLE attempts RENAME TO attempts_away").execute(h.db.pool()).await.expect("rename");
    assert!(worker.run_once().await.is_err(), "the write-back failed");
    sqlx::query("ALTER TABLE attempts_away RENAME TO attempts").execute(h.db.pool()).await.expect("rename back");
    assert_eq!(h.receiver.received().len(), 3, "sent once");
    assert_eq!(handoff.len(), 3, "put back for the next step");

    // No lease to wait for: the clock has not moved.
    let report = worker.run_once().await.expect("step");
    assert_eq!((report.claimed, report.delivered), (3, 3));
    for id in &ids {
        assert_eq!(h.delivery(id).await.status, DeliveryStatus::Delivered);
        let sent = h.receiver.received().iter().filter(|r| r.id == id.as_str()).count();
        assert_eq!(sent, 2, "sent again with the same webhook id");
    }
    // Nothing is left over: the hand-off is empty and no row is due.
    assert_eq!(worker.run_once().await.expect("step").claimed, 0);
}

async fn a_hand_off_released_at_shutdown_is_claimed_at_once(db: TestDb) {
    let h = Harness::new(db, Reply::Status(200)).await;
    let handoff = Handoff::new("intake-stopping".into(), 8, LEASE);
    let intake = Intake::start(h.store.clone(), Wake::default(), 16, 2, Some(handoff.clone()));
    let ids = accept_all(&h, &intake, 3).await;
    // A row of another owner, in flight there, is not this hand-off's to release.
    let other = h.event("order.created", "created").await;
    assert_eq!(h.store.claim("w-elsewhere", h.clock.now_ts(), LEASE, 10).await.expect("claim"), [other.clone()]);

    assert_eq!(h.store.release_claims("intake-stopping", h.clock.now_ts()).await.expect("release"), 3);
    // The clock has not moved: no lease ran out, yet another step claims them.
    let report = h.step().await;
    assert_eq!((report.claimed, report.delivered), (3, 3));
    for id in &ids {
        assert_eq!(h.delivery(id).await.status, DeliveryStatus::Delivered);
    }
    let still = h.delivery(&other).await;
    assert_eq!((still.status, still.lease_owner.as_deref()), (DeliveryStatus::Delivering, Some("w-elsewhere")));
}
