//! One behavioural suite for the upstream breaker, run against every store:
//! in memory and real Redis (`SLUICE_TEST_REDIS_URL`, each test under its own
//! key prefix). Both run on a manual clock, so "30 s later" takes no time.

use std::sync::Arc;
use std::time::Duration;

use sluice_engine::upstream_breaker::memory::MemoryBreakerStore;
use sluice_engine::upstream_breaker::redis::RedisBreakerStore;
use sluice_engine::upstream_breaker::{UpstreamAdmission, UpstreamBreaker, UpstreamBreakerConfig, BreakerKey, Phase};
use sluice_engine::clock::{Clock, ManualClock, SharedClock, Timestamp};

const SECS: fn(u64) -> Duration = Duration::from_secs;

pub fn redis_url() -> String {
    std::env::var("SLUICE_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned())
}

pub async fn redis_conn() -> redis::aio::ConnectionManager {
    let client = redis::Client::open(redis_url()).expect("redis url");
    client.get_connection_manager().await.expect("redis is up (scripts/test.sh starts it)")
}

pub fn test_prefix() -> String {
    format!("t:{}", ulid::Ulid::new())
}

fn key() -> BreakerKey {
    BreakerKey::new(Some("seller-1"), "marketplace").expect("key")
}

async fn fail(b: &UpstreamBreaker, key: &BreakerKey, n: usize) {
    for _ in 0..n {
        b.record(key, true).await.expect("record");
    }
}

async fn five_consecutive_failures_open_the_breaker(b: UpstreamBreaker, clock: Arc<ManualClock>) {
    let k = key();
    fail(&b, &k, 4).await;
    assert_eq!(b.admit(&k).await.expect("admit"), UpstreamAdmission::Allowed);
    b.record(&k, false).await.expect("record");
    fail(&b, &k, 4).await;
    assert_eq!(b.admit(&k).await.expect("admit"), UpstreamAdmission::Allowed, "a success reset the count");
    fail(&b, &k, 1).await;
    let opened = clock.now();
    assert_eq!(b.admit(&k).await.expect("admit"), UpstreamAdmission::Rejected { retry_at: opened + SECS(30) });
}

async fn an_open_breaker_lets_one_probe_through_after_thirty_seconds(b: UpstreamBreaker, clock: Arc<ManualClock>) {
    let k = key();
    fail(&b, &k, 5).await;
    clock.advance(SECS(29));
    assert!(!b.admit(&k).await.expect("admit").is_allowed());
    clock.advance(SECS(1));
    assert_eq!(b.admit(&k).await.expect("admit"), UpstreamAdmission::Probe);
    assert!(!b.admit(&k).await.expect("admit").is_allowed(), "one probe at a time");
}

async fn three_successful_probes_close_the_breaker(b: UpstreamBreaker, clock: Arc<ManualClock>) {
    let k = key();
    fail(&b, &k, 5).await;
    clock.advance(SECS(30));
    for _ in 0..3 {
        assert_eq!(b.admit(&k).await.expect("admit"), UpstreamAdmission::Probe);
        b.record(&k, false).await.expect("record");
    }
    assert_eq!(b.admit(&k).await.expect("admit"), UpstreamAdmission::Allowed);
    let view = &b.list().await.expect("list")[0];
    assert_eq!((view.phase, view.consecutive_failures, view.trips), (Phase::Closed, 0, 1));
}

async fn a_failed_probe_opens_the_breaker_again(b: UpstreamBreaker, clock: Arc<ManualClock>) {
    let k = key();
    fail(&b, &k, 5).await;
    clock.advance(SECS(30));
    assert_eq!(b.admit(&k).await.expect("admit"), UpstreamAdmission::Probe);
    b.record(&k, false).await.expect("record");
    assert_eq!(b.admit(&k).await.expect("admit"), UpstreamAdmission::Probe);
    b.record(&k, true).await.expect("record");
    let reopened = clock.now();
    assert_eq!(b.admit(&k).await.expect("admit"), UpstreamAdmission::Rejected { retry_at: reopened + SECS(30) });
    let view = &b.list().await.expect("list")[0];
    assert_eq!((view.phase, view.trips, view.next_probe_at), (Phase::Open, 2, Some(reopened + SECS(30))));
}

async fn breakers_are_listed_with_what_the_ui_shows(b: UpstreamBreaker, clock: Arc<ManualClock>) {
    let wb = BreakerKey::new(Some("seller-2"), "content").expect("key");
    let global = BreakerKey::new(None, "pricing").expect("key");
    fail(&b, &key(), 5).await;
    let opened = clock.now();
    fail(&b, &wb, 2).await;
    b.record(&global, true).await.expect("record");
    let views = b.list().await.expect("list");
    let summary: Vec<_> =
        views.iter().map(|v| (v.account.as_str(), v.scope.as_str(), v.phase, v.consecutive_failures)).collect();
    assert_eq!(
        summary,
        vec![
            ("_global", "pricing", Phase::Closed, 1),
            ("seller-1", "marketplace", Phase::Open, 5),
            ("seller-2", "content", Phase::Closed, 2),
        ]
    );
    assert_eq!((views[1].opened_at, views[1].next_probe_at, views[1].trips), (Some(opened), Some(opened + SECS(30)), 1));
}

async fn a_reset_closes_the_breaker(b: UpstreamBreaker, _clock: Arc<ManualClock>) {
    let k = key();
    fail(&b, &k, 5).await;
    b.reset(&k).await.expect("reset");
    assert_eq!(b.admit(&k).await.expect("admit"), UpstreamAdmission::Allowed);
    assert!(b.list().await.expect("list").is_empty());
}

async fn concurrent_reports_are_all_counted(b: UpstreamBreaker, _clock: Arc<ManualClock>) {
    let config = UpstreamBreakerConfig { failure_threshold: 1_000, ..UpstreamBreakerConfig::default() };
    let b = UpstreamBreaker::new_like(&b, config);
    let k = key();
    let tasks: Vec<_> = (0..20)
        .map(|_| {
            let (b, k) = (b.clone(), k.clone());
            tokio::spawn(async move { b.record(&k, true).await.expect("record") })
        })
        .collect();
    for t in tasks {
        t.await.expect("task");
    }
    assert_eq!(b.list().await.expect("list")[0].consecutive_failures, 20);
}

macro_rules! contract {
    ($($name:ident),* $(,)?) => {
        mod memory {
            use super::*;
            $(
                #[tokio::test]
                async fn $name() {
                    let clock = Arc::new(ManualClock::at_test_epoch());
                    let store = MemoryBreakerStore::new(clock.clone() as SharedClock);
                    super::$name(UpstreamBreaker::new(Arc::new(store), UpstreamBreakerConfig::default()), clock).await;
                }
            )*
        }
        mod redis_store {
            use super::*;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let clock = Arc::new(ManualClock::at_test_epoch());
                    let store = RedisBreakerStore::new(redis_conn().await, test_prefix())
                        .with_clock(clock.clone() as SharedClock);
                    super::$name(UpstreamBreaker::new(Arc::new(store), UpstreamBreakerConfig::default()), clock).await;
                }
            )*
        }
    };
}

contract!(
    five_consecutive_failures_open_the_breaker,
    an_open_breaker_lets_one_probe_through_after_thirty_seconds,
    three_successful_probes_close_the_breaker,
    a_failed_probe_opens_the_breaker_again,
    breakers_are_listed_with_what_the_ui_shows,
    a_reset_closes_the_breaker,
    concurrent_reports_are_all_counted,
);

#[tokio::test]
async fn redis_breakers_use_redis_time_and_hash_tagged_keys_with_a_ttl() {
    let prefix = test_prefix();
    let mut conn = redis_conn().await;
    let b = UpstreamBreaker::new(Arc::new(RedisBreakerStore::new(conn.clone(), prefix.clone())), UpstreamBreakerConfig::default());
    let before = Timestamp::from_system_time(std::time::SystemTime::now());
    fail(&b, &key(), 5).await;
    let view = &b.list().await.expect("list")[0];
    let opened = view.opened_at.expect("open");
    // Redis's clock, not ours: the same machine here, so within a few seconds.
    assert!(opened.saturating_duration_since(before) < SECS(5) && before.saturating_duration_since(opened) < SECS(5));
    let redis_key = format!("{prefix}:br:{{seller-1}}:marketplace");
    let ttl: i64 = redis::cmd("PTTL").arg(&redis_key).query_async(&mut conn).await.expect("pttl");
    assert!(ttl > 0 && ttl <= 86_400_000, "ttl {ttl}");
}
