//! `sluice demo`: its sign-in, its delivery timings, and its upstream
//! outage driving the upstream breaker. (The mock upstream and merchants are
//! tested next to their code, as real loopback servers.)

use std::sync::Arc;
use std::time::Duration;

use sluice::demo::traffic::{demo_rule, DemoWorkers};
use sluice::demo::upstream::MockUpstream;
use sluice::demo::timing::demo_timing;
use sluice::demo::{demo_upstream, ensure_demo_login, DEMO_ACCOUNTS, DEMO_SCOPE, DEMO_USER, OUTAGE_ACCOUNT, WORKERS_PER_ACCOUNT};
use sluice_engine::clock::{Clock, ManualClock, SharedClock, SystemClock};
use sluice_engine::quota::{Limiter, LimiterConfig, MemoryStore, RuleRegistry};
use sluice_engine::upstream_breaker::memory::MemoryBreakerStore;
use sluice_engine::upstream_breaker::{BreakerKey, Phase, UpstreamBreaker, UpstreamBreakerConfig};
use sluice_engine::db::testing::TestDb;
use sluice_engine::delivery::merchant_breaker::MerchantBreakerConfig;
use sluice_engine::delivery::ladder::LadderConfig;
use sluice_engine::users::{self, Role};

#[tokio::test]
async fn the_demo_login_is_an_admin_with_a_fresh_password_at_every_start() {
    let test_db = TestDb::sqlite().await;
    let db = test_db.db();
    let now = SystemClock.now();
    let first = ensure_demo_login(&db, now).await.expect("first start");
    let second = ensure_demo_login(&db, now).await.expect("second start, the user exists");
    assert_ne!(first, second);
    let user = users::verify_login(&db, DEMO_USER, &second, now).await.expect("verify").expect("the printed password works");
    assert_eq!(user.role, Role::Admin);
    assert!(users::verify_login(&db, DEMO_USER, &first, now).await.expect("verify").is_none(), "the old password is gone");
}

#[tokio::test]
async fn a_demoted_demo_user_is_an_admin_again_at_the_next_start() {
    let test_db = TestDb::sqlite().await;
    let db = test_db.db();
    let now = SystemClock.now();
    users::create_user(&db, "someone", "another password", Role::Admin, now).await.expect("another admin");
    ensure_demo_login(&db, now).await.expect("first start");
    users::set_role(&db, DEMO_USER, Role::Viewer, None).await.expect("demote");
    let password = ensure_demo_login(&db, now).await.expect("second start");
    let user = users::verify_login(&db, DEMO_USER, &password, now).await.expect("verify").expect("login");
    assert_eq!(user.role, Role::Admin);
}

#[test]
fn demo_timings_keep_the_ladders_shape_and_show_every_step_within_minutes() {
    let (ladder, breaker) = demo_timing();
    let (product_ladder, product_breaker) = (LadderConfig::default(), MerchantBreakerConfig::default());
    // Same shape: attempts, fast ladder, number of slow steps, breaker thresholds.
    assert_eq!(ladder.fast_attempts, product_ladder.fast_attempts);
    assert_eq!(ladder.fast_base, product_ladder.fast_base);
    assert_eq!(ladder.slow_pauses.len(), product_ladder.slow_pauses.len());
    assert!(ladder.slow_pauses.windows(2).all(|w| w[0] < w[1]));
    assert_eq!((breaker.window, breaker.min_attempts, breaker.failure_percent), (product_breaker.window, product_breaker.min_attempts, product_breaker.failure_percent));
    // Visible in a demo: the first slow step and the first probe within a minute.
    assert!(ladder.slow_pauses[0].as_secs() <= 60, "{:?}", ladder.slow_pauses);
    assert!(breaker.base_pause.as_secs() <= 60 && breaker.base_pause <= breaker.max_pause);
    assert!(ladder.slow_ceiling > ladder.slow_pauses.iter().sum::<std::time::Duration>(), "the ceiling leaves room for every step");
}

/// The demo's workers and mock marketplace on a manual clock, stepped: one
/// call per worker per step, 100 ms between steps (retry pauses, booked
/// waits and the warm-up's slow answers move the clock too). The outage
/// seller's breaker must open, probe and close, and the other sellers'
/// breakers stay closed, all within the first minute.
#[tokio::test]
async fn the_demo_outage_opens_probes_and_closes_an_upstream_breaker_within_a_minute() {
    let clock = Arc::new(ManualClock::at_test_epoch());
    let shared: SharedClock = clock.clone();
    let limiter = Limiter::new(
        Arc::new(MemoryStore::new(shared.clone())),
        RuleRegistry::new([demo_rule()]),
        shared.clone(),
        LimiterConfig::default(),
    );
    let breakers = UpstreamBreaker::new(Arc::new(MemoryBreakerStore::new(shared.clone())), UpstreamBreakerConfig::default());
    let upstream = MockUpstream::start_with(demo_upstream().clock(shared.clone())).await.expect("mock marketplace");
    let profiles = sluice_engine::retry::RetryProfiles::default();
    let workers = DemoWorkers::new(limiter, breakers.clone(), profiles, shared, upstream.base_url()).expect("workers");
    let mut all: Vec<_> =
        DEMO_ACCOUNTS.iter().flat_map(|a| (0..WORKERS_PER_ACCOUNT).map(move |n| (a, n))).map(|(a, n)| workers.worker(a, n)).collect();
    let key = BreakerKey::new(Some(OUTAGE_ACCOUNT), DEMO_SCOPE).expect("key");
    let start = clock.now();
    // Each phase the breaker passes through, with when it was first seen.
    let mut phases: Vec<(Phase, Duration)> = vec![(Phase::Closed, Duration::ZERO)];
    while clock.now() < start + Duration::from_secs(60) {
        for w in &mut all {
            w.run_once().await;
        }
        clock.advance(Duration::from_millis(100));
        let phase = breakers.view(&key).await.expect("view").phase;
        if phases.last().map(|p| p.0) != Some(phase) {
            phases.push((phase, clock.now().saturating_duration_since(start)));
        }
    }
    let seen: Vec<Phase> = phases.iter().map(|p| p.0).collect();
    assert_eq!(seen, vec![Phase::Closed, Phase::Open, Phase::HalfOpen, Phase::Closed], "{phases:?}");
    let (opened, probing, closed) = (phases[1].1, phases[2].1, phases[3].1);
    assert!(opened >= Duration::from_secs(10) && opened < Duration::from_secs(20), "opened at {opened:?}");
    assert!(probing >= opened + Duration::from_secs(30), "probed at {probing:?}");
    assert!(closed < Duration::from_secs(60), "closed at {closed:?}");
    let listed = breakers.list().await.expect("list");
    assert!(listed.iter().all(|b| b.phase == Phase::Closed), "{listed:?}");
    let trips: Vec<(&str, u64)> = listed.iter().map(|b| (b.account.as_str(), b.trips)).filter(|(_, t)| *t > 0).collect();
    assert_eq!(trips, vec![(OUTAGE_ACCOUNT, 1)], "only the outage seller's breaker opened, once");
    assert!(upstream.failed() >= 5 && upstream.served() > 100, "{} failed, {} served", upstream.failed(), upstream.served());
    upstream.stop();
}
