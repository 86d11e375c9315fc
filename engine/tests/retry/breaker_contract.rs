//! One behavioural suite for the upstream breaker, run against every store:
//! in memory, real Redis (`SLUICE_TEST_REDIS_URL`, each test under its own
//! key prefix) and a three-node Redis Cluster of the test's own. All run on a
//! manual clock, so "30 s later" takes no time.

use std::sync::Arc;
use std::time::Duration;

use sluice_engine::clock::{Clock, ManualClock, SharedClock, Timestamp};
use sluice_engine::redis_conn::testing::OwnCluster;
use sluice_engine::redis_conn::RedisSettings;
use sluice_engine::upstream_breaker::memory::MemoryBreakerStore;
use sluice_engine::upstream_breaker::redis::RedisBreakerStore;
use sluice_engine::upstream_breaker::{BreakerKey, Phase, UpstreamAdmission, UpstreamBreaker, UpstreamBreakerConfig};

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

async fn accounts_in_every_slot_are_listed(b: UpstreamBreaker, _clock: Arc<ManualClock>) {
    // Sixteen accounts land on every node of a three-node cluster: listing
    // must find them all (SCAN on one node would not).
    let keys: Vec<BreakerKey> =
        (0..16).map(|i| BreakerKey::new(Some(&format!("seller-{i:02}")), "orders").expect("key")).collect();
    for k in &keys {
        b.record(k, true).await.expect("record");
    }
    let listed: Vec<String> = b.list().await.expect("list").into_iter().map(|v| v.account).collect();
    let expected: Vec<String> = keys.iter().map(|k| k.account().to_owned()).collect();
    assert_eq!(listed, expected);
}

async fn a_reset_breaker_is_no_longer_listed_and_others_stay(b: UpstreamBreaker, _clock: Arc<ManualClock>) {
    let other = BreakerKey::new(Some("seller-2"), "marketplace").expect("key");
    fail(&b, &key(), 5).await;
    fail(&b, &other, 1).await;
    b.reset(&key()).await.expect("reset");
    let listed: Vec<String> = b.list().await.expect("list").into_iter().map(|v| v.account).collect();
    assert_eq!(listed, vec!["seller-2".to_owned()]);
    // A reset breaker that fails again is listed again.
    fail(&b, &key(), 1).await;
    assert_eq!(b.list().await.expect("list").len(), 2);
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

        /// Every case on one cluster of our own (starting one per case would
        /// cost seconds each), each case under its own prefix.
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn the_contract_suite_holds_on_a_three_node_redis_cluster() {
            let cluster = OwnCluster::start(3);
            let settings = |prefix: String| RedisSettings {
                urls: cluster.urls(),
                cluster: true,
                timeout: Duration::from_secs(2),
                ..RedisSettings::single("", &prefix)
            };
            $(
                let clock = Arc::new(ManualClock::at_test_epoch());
                let store = RedisBreakerStore::connect(&settings(test_prefix()))
                    .await
                    .expect("connect to the cluster")
                    .with_clock(clock.clone() as SharedClock);
                $name(UpstreamBreaker::new(Arc::new(store), UpstreamBreakerConfig::default()), clock).await;
            )*
            drop(cluster);
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
    accounts_in_every_slot_are_listed,
    a_reset_breaker_is_no_longer_listed_and_others_stay,
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
    // Every key the store wrote (the breaker and the index) expires.
    let keys: Vec<String> = redis::cmd("KEYS").arg(format!("{prefix}:*")).query_async(&mut conn).await.expect("keys");
    let mut keys_sorted = keys.clone();
    keys_sorted.sort();
    assert_eq!(keys_sorted, vec![format!("{prefix}:br-index"), format!("{prefix}:br:{{seller-1}}:marketplace")]);
    for k in keys {
        let ttl: i64 = redis::cmd("PTTL").arg(&k).query_async(&mut conn).await.expect("pttl");
        assert!(ttl > 0 && ttl <= 86_400_000 + 60_000, "{k}: ttl {ttl}");
    }
}

#[tokio::test]
async fn the_index_forgets_breakers_whose_keys_expired() {
    let prefix = test_prefix();
    let mut conn = redis_conn().await;
    let clock = Arc::new(ManualClock::at_test_epoch());
    let store = RedisBreakerStore::new(conn.clone(), prefix.clone()).with_clock(clock.clone() as SharedClock);
    let b = UpstreamBreaker::new(Arc::new(store), UpstreamBreakerConfig::default());
    let old = BreakerKey::new(Some("gone"), "orders").expect("key");
    b.record(&old, true).await.expect("record");
    // A day and more later (on the index's clock) another breaker is written:
    // the first one's member is trimmed with its key's lifetime.
    clock.advance(SECS(86_400 + 120));
    b.record(&key(), true).await.expect("record");
    let members: Vec<String> =
        redis::cmd("ZRANGE").arg(format!("{prefix}:br-index")).arg(0).arg(-1).query_async(&mut conn).await.expect("zrange");
    assert_eq!(members, vec![format!("{prefix}:br:{{seller-1}}:marketplace")]);
}

#[tokio::test]
async fn the_memory_store_forgets_expired_breakers_without_being_listed() {
    let clock = Arc::new(ManualClock::at_test_epoch());
    let store = Arc::new(MemoryBreakerStore::new(clock.clone() as SharedClock));
    let b = UpstreamBreaker::new(store.clone(), UpstreamBreakerConfig::default());
    for i in 0..1000 {
        b.record(&BreakerKey::new(Some(&format!("old-{i}")), "orders").expect("key"), true).await.expect("record");
    }
    clock.advance(SECS(86_400));
    for i in 0..1100 {
        b.record(&BreakerKey::new(Some(&format!("new-{i}")), "orders").expect("key"), true).await.expect("record");
    }
    assert!(store.held() <= 1100, "expired breakers are swept: {} held", store.held());
}
