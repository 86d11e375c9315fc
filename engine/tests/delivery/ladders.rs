//! The ladders end to end: real requests, real database, manual time.

use std::time::Duration;

use sluice_engine::delivery::*;

use crate::receiver::{start_resetting, Reply};
use crate::{contract, test_config, Harness, NowTs};

contract!(
    a_failing_endpoint_gets_ten_attempts_with_doubling_pauses_then_the_delivery_fails,
    a_money_event_answered_4xx_climbs_the_slow_ladder_then_fails,
    a_non_money_event_answered_4xx_fails_at_once,
    redirects_are_not_followed_and_count_as_client_errors,
    the_two_ladders_spend_separate_budgets,
    an_old_delivery_still_gets_the_whole_slow_ladder_but_nothing_after_thirty_days,
    a_2xx_delivers_and_the_request_is_signed,
    timeouts_and_dropped_connections_spend_fast_attempts,
    the_slow_ladder_ceiling_fails_a_delivery_whose_next_step_would_pass_it,
);

async fn a_failing_endpoint_gets_ten_attempts_with_doubling_pauses_then_the_delivery_fails(db: sluice_engine::db::testing::TestDb) {
    let h = Harness::new(db, Reply::Status(503)).await;
    let id = h.event("payment.status_changed", "paid").await;
    let pauses = h.run_to_end(&id).await;
    assert_eq!(pauses, [1, 2, 4, 8, 16, 32, 64, 128, 256]);
    let d = h.delivery(&id).await;
    assert_eq!((d.status, d.failed_reason, d.fast_attempts, d.slow_steps), (DeliveryStatus::Failed, Some(FailedReason::FastLadderExhausted), 10, 0));
    assert_eq!(d.last_status_code, Some(503));
    let detail = h.detail(&id).await;
    assert_eq!(detail.attempts.len(), 10);
    assert!(detail.attempts.iter().all(|a| a.outcome == AttemptOutcome::ServerError && a.ladder == Ladder::Fast));
    assert_eq!(detail.attempts[0].response_body.as_deref(), Some("answer 503"));
    let sent = detail.attempts[0].request_headers.as_ref().expect("the headers sent are kept");
    assert_eq!(sent.get("x-webhook-id").map(String::as_str), Some(id.as_str()));
    assert_eq!(sent.get("x-webhook-signature").map(String::len), Some(64), "one hex HMAC");
    assert!(!detail.attempts[0].response_truncated);
    assert!(detail.attempts[0].response_headers.as_ref().is_some_and(|h| h.contains_key("content-length")));
    assert!(detail.timeline.upcoming.is_empty());
}

async fn a_money_event_answered_4xx_climbs_the_slow_ladder_then_fails(db: sluice_engine::db::testing::TestDb) {
    let h = Harness::new(db, Reply::Status(400)).await;
    let id = h.event("withdrawal.status_changed", "completed").await;
    h.step().await;
    // After the first 4xx the detail page shows the rest of the slow ladder.
    let tl = h.detail(&id).await.timeline;
    let first = h.clock.now_ts();
    assert_eq!(tl.slow_ceiling_at, Some(first + Duration::from_secs(48 * 3600)));
    assert_eq!(tl.upcoming.len(), 5);
    assert_eq!(tl.upcoming[0].at, first + Duration::from_secs(900));
    let pauses = h.run_to_end(&id).await;
    assert_eq!(pauses, [900, 3600, 4 * 3600, 12 * 3600, 24 * 3600]);
    let d = h.delivery(&id).await;
    assert_eq!((d.status, d.failed_reason, d.fast_attempts, d.slow_steps), (DeliveryStatus::Failed, Some(FailedReason::SlowLadderExhausted), 0, 6));
    assert_eq!(d.slow_started_at, Some(first));
}

async fn a_non_money_event_answered_4xx_fails_at_once(db: sluice_engine::db::testing::TestDb) {
    let h = Harness::new(db, Reply::Status(404)).await;
    let id = h.event("payment.status_changed", "expired").await;
    assert_eq!(h.step().await.failed, 1);
    let d = h.delivery(&id).await;
    assert_eq!((d.status, d.failed_reason, d.is_money), (DeliveryStatus::Failed, Some(FailedReason::NonMoneyClientError), false));
}

async fn redirects_are_not_followed_and_count_as_client_errors(db: sluice_engine::db::testing::TestDb) {
    let h = Harness::new(db, Reply::Redirect).await;
    let non_money = h.event("refund.failed", "failed").await;
    let money = h.event("refund.completed", "completed").await;
    h.step().await;
    assert_eq!(h.receiver.followed_redirects(), 0);
    assert_eq!(h.delivery(&non_money).await.status, DeliveryStatus::Failed);
    let m = h.delivery(&money).await;
    assert_eq!((m.status, m.ladder, m.slow_steps, m.last_status_code), (DeliveryStatus::Pending, Ladder::Slow, 1, Some(302)));
}

async fn the_two_ladders_spend_separate_budgets(db: sluice_engine::db::testing::TestDb) {
    let h = Harness::new(db, Reply::Status(500)).await;
    let id = h.event("payment.status_changed", "settled").await;
    for _ in 0..3 {
        h.jump_to_next(&id).await;
        h.step().await;
    }
    h.receiver.set(Reply::Status(422));
    h.jump_to_next(&id).await;
    h.step().await;
    let d = h.delivery(&id).await;
    assert_eq!((d.fast_attempts, d.slow_steps, d.ladder), (3, 1, Ladder::Slow));
    // Back to 5xx: the fast ladder carries on from attempt 4 (pause 8 s).
    h.receiver.set(Reply::Status(502));
    h.jump_to_next(&id).await;
    let at = h.clock.now_ts();
    h.step().await;
    let d = h.delivery(&id).await;
    assert_eq!((d.fast_attempts, d.slow_steps, d.ladder), (4, 1, Ladder::Fast));
    assert_eq!(d.next_attempt_at, at + Duration::from_secs(8));
    h.receiver.set(Reply::Status(200));
    h.jump_to_next(&id).await;
    assert_eq!(h.step().await.delivered, 1);
    assert_eq!(h.delivery(&id).await.status, DeliveryStatus::Delivered);
}

async fn an_old_delivery_still_gets_the_whole_slow_ladder_but_nothing_after_thirty_days(db: sluice_engine::db::testing::TestDb) {
    let h = Harness::new(db, Reply::Status(400)).await;
    let old = h.event("payment.status_changed", "refunded").await;
    // Ten days pass before the first attempt (say the endpoint had no URL, or
    // a breaker held it): the 48 h ceiling counts from the first 4xx, so the
    // delivery still gets every slow step.
    let created = h.clock.now_ts();
    h.clock.set(created + Duration::from_secs(10 * 24 * 3600));
    let first = h.clock.now_ts();
    h.step().await;
    let pauses = h.run_to_end(&old).await;
    assert_eq!(pauses, [900, 3600, 4 * 3600, 12 * 3600, 24 * 3600]);
    let d = h.delivery(&old).await;
    assert_eq!((d.failed_reason, d.slow_started_at), (Some(FailedReason::SlowLadderExhausted), Some(first)));

    // A delivery not sent before it is 30 days old fails unsent.
    let late = h.event("payment.status_changed", "paid").await;
    let created = h.clock.now_ts();
    h.clock.set(created + Duration::from_secs(30 * 24 * 3600 + 1));
    h.receiver.set(Reply::Status(200));
    let before = h.receiver.received().len();
    assert_eq!(h.step().await.failed, 1);
    let d = h.delivery(&late).await;
    assert_eq!((d.status, d.failed_reason), (DeliveryStatus::Failed, Some(FailedReason::AgeCeiling)));
    assert_eq!(h.receiver.received().len(), before, "nothing is sent past the 30-day ceiling");
}

async fn a_2xx_delivers_and_the_request_is_signed(db: sluice_engine::db::testing::TestDb) {
    use sluice_engine::delivery::signing::verify;
    for scheme in [SigningScheme::Sluice, SigningScheme::StandardWebhooks] {
        let h = Harness::with(db_again(&db).await, Reply::Status(204), test_config("w1"), scheme).await;
        let id = h.event("kyc.status_changed", "approved").await;
        assert_eq!(h.step().await.delivered, 1);
        let got = h.receiver.received();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].id, id.as_str());
        let now = h.clock.now_ts().as_secs();
        verify(scheme, &[&h.merchant.secret], &got[0].headers, &got[0].body, now, 300).expect("signature verifies");
        let d = h.delivery(&id).await;
        assert_eq!((d.status, d.finished_at), (DeliveryStatus::Delivered, Some(h.clock.now_ts())));
    }
}

/// A second database of the same backend as `db`.
async fn db_again(db: &sluice_engine::db::testing::TestDb) -> sluice_engine::db::testing::TestDb {
    match db.backend() {
        sluice_engine::db::Backend::Postgres => sluice_engine::db::testing::TestDb::postgres().await,
        sluice_engine::db::Backend::Sqlite => sluice_engine::db::testing::TestDb::sqlite().await,
    }
}

async fn timeouts_and_dropped_connections_spend_fast_attempts(db: sluice_engine::db::testing::TestDb) {
    // The 10 s production timeout, shrunk so the test takes a moment.
    let config = WorkerConfig { request_timeout: Duration::from_millis(300), ..test_config("w1") };
    let h = Harness::with(db, Reply::Hang, config, SigningScheme::Sluice).await;
    let id = h.event("payment.status_changed", "paid").await;
    h.step().await;
    let d = h.delivery(&id).await;
    assert_eq!((d.status, d.fast_attempts), (DeliveryStatus::Pending, 1));
    assert_eq!(h.detail(&id).await.attempts[0].outcome, AttemptOutcome::Timeout);

    let addr = start_resetting().await;
    let change = sluice_engine::delivery::ops::update_merchant_url(&h.store, &h.merchant.id, &format!("http://{addr}/hook"), &h.worker.config().ssrf, sluice_engine::delivery::ops::Actor::named("test"), h.clock.now_ts())
        .await
        .expect("new url");
    assert_ne!(change.before.url, change.after.url);
    h.jump_to_next(&id).await;
    h.step().await;
    let detail = h.detail(&id).await;
    assert_eq!(detail.attempts[1].outcome, AttemptOutcome::Network);
    assert_eq!(detail.delivery.fast_attempts, 2);
}

async fn the_slow_ladder_ceiling_fails_a_delivery_whose_next_step_would_pass_it(db: sluice_engine::db::testing::TestDb) {
    // The 48 h ceiling shrunk to 20 minutes: step 1 (15 min) fits, step 2 (1 h) does not.
    let mut config = test_config("w1");
    config.ladder.slow_ceiling = Duration::from_secs(20 * 60);
    let h = Harness::with(db, Reply::Status(409), config, SigningScheme::Sluice).await;
    let id = h.event("exchange.status_changed", "completed").await;
    h.step().await;
    assert_eq!(h.delivery(&id).await.slow_steps, 1);
    h.jump_to_next(&id).await;
    assert_eq!(h.step().await.failed, 1);
    let d = h.delivery(&id).await;
    assert_eq!((d.status, d.failed_reason, d.slow_steps), (DeliveryStatus::Failed, Some(FailedReason::SlowLadderCeiling), 2));
}
