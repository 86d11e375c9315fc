//! `sluice demo`: its sign-in and its delivery timings. (The mock upstream
//! and merchants are tested next to their code, as real loopback servers.)

use sluice::demo::timing::demo_timing;
use sluice::demo::{ensure_demo_login, DEMO_USER};
use sluice_engine::clock::{Clock, SystemClock};
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
    users::set_role(&db, DEMO_USER, Role::Viewer).await.expect("demote");
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
