//! Test support: limiters over each backend, and redis-server processes of
//! our own (for outage and Cluster tests; the shared Redis on 6379 is never
//! stopped).

use std::sync::Arc;
use std::time::Duration;

use sluice_engine::clock::{ManualClock, SharedClock, Timestamp};
use sluice_engine::quota::{
    Limiter, LimiterConfig, MemoryStore, QuotaStore, RedisSettings, RedisStore, Rule, RuleRegistry,
};

pub fn test_redis_url() -> String {
    std::env::var("SLUICE_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned())
}

pub fn unique_prefix() -> String {
    format!("t:{}", ulid::Ulid::new().to_string().to_lowercase())
}

/// Which store a contract case runs against.
#[derive(Clone, Debug)]
pub enum Backend {
    Memory,
    Redis { urls: Vec<String>, cluster: bool },
}

impl Backend {
    pub fn redis() -> Backend {
        Backend::Redis { urls: vec![test_redis_url()], cluster: false }
    }
}

/// A limiter under test, and what the test needs to reason about its time.
pub struct Harness {
    pub limiter: Limiter,
    /// The limiter's clock: `acquire` sleeps on it (instantly) for every backend.
    pub clock: Arc<ManualClock>,
    redis: Option<redis::Client>,
    /// How far a booked wait may drift from the expected one: zero for the
    /// memory store (manual clock), the real time a test takes for Redis
    /// (its clock is `TIME`; tests use long intervals so this stays small).
    pub tolerance: Duration,
}

impl Harness {
    pub async fn new(backend: &Backend, rules: Vec<Rule>, config: LimiterConfig) -> Harness {
        let clock = Arc::new(ManualClock::at_test_epoch());
        let shared: SharedClock = clock.clone();
        let (store, redis, tolerance): (Arc<dyn QuotaStore>, _, _) = match backend {
            Backend::Memory => (Arc::new(MemoryStore::new(shared.clone())), None, Duration::ZERO),
            Backend::Redis { urls, cluster } => {
                let settings = RedisSettings {
                    urls: urls.clone(),
                    cluster: *cluster,
                    prefix: unique_prefix(),
                    timeout: Duration::from_secs(2),
                    idle_retention: Duration::from_secs(3600),
                };
                let store = RedisStore::connect(&settings).await.expect("connect to test Redis");
                let client = redis::Client::open(urls[0].as_str()).expect("redis url");
                (Arc::new(store), Some(client), Duration::from_secs(2))
            }
        };
        let limiter = Limiter::new(store, RuleRegistry::new(rules), shared, config);
        Harness { limiter, clock, redis, tolerance }
    }

    /// The store's notion of now: the manual clock, or Redis `TIME`.
    pub async fn store_now(&self) -> Timestamp {
        match &self.redis {
            None => sluice_engine::clock::Clock::now(&*self.clock),
            Some(client) => {
                let mut c = client.get_multiplexed_async_connection().await.expect("redis connection");
                let (s, us): (i64, i64) = redis::cmd("TIME").query_async(&mut c).await.expect("TIME");
                Timestamp::from_micros(s * 1_000_000 + us)
            }
        }
    }
}

/// `actual` is within `tol` below `expected` (real time only ever shortens a
/// booked wait) and never above it.
#[track_caller]
pub fn assert_wait(actual: Duration, expected: Duration, tol: Duration) {
    assert!(
        actual <= expected && actual + tol >= expected,
        "booked wait {actual:?}, expected {expected:?} (tolerance {tol:?})"
    );
}

pub use sluice_engine::redis_conn::testing::OwnRedis;
