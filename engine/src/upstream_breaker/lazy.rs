//! A Redis breaker store that connects on first use and keeps trying while
//! Redis is down, so an instance can start (and show its Breakers page)
//! during a Redis outage: until the first connection succeeds every call
//! fails as [`BreakerError::Store`]. Once connected, the connection manager
//! of [`RedisBreakerStore`] reconnects by itself. The connecting part is
//! shared with the quota store (`crate::lazy_connect`).

use std::future::Future;
use std::time::Duration;

use super::redis::RedisBreakerStore;
use super::{BreakerError, BreakerKey, BreakerState, BreakerStore, Loaded};
use crate::clock::Timestamp;
use crate::lazy_connect::{ConnectRedis, LazyRedis, NotConnected};
use crate::redis_conn::RedisSettings;

#[derive(Debug)]
pub struct LazyRedisBreakerStore {
    store: LazyRedis<RedisBreakerStore>,
}

impl ConnectRedis for RedisBreakerStore {
    type Error = BreakerError;
    const NAME: &'static str = "breaker store";

    fn connect(settings: &RedisSettings) -> impl Future<Output = Result<Self, BreakerError>> + Send {
        RedisBreakerStore::connect(settings)
    }

    fn not_connected(e: NotConnected) -> BreakerError {
        BreakerError::Store(Box::new(e))
    }
}

impl LazyRedisBreakerStore {
    /// Nothing is connected here; the first call tries (one node or a
    /// cluster, as `settings` say).
    pub fn new(settings: RedisSettings) -> Self {
        LazyRedisBreakerStore { store: LazyRedis::new(settings) }
    }

    async fn get(&self) -> Result<&RedisBreakerStore, BreakerError> {
        self.store.get().await
    }
}

#[async_trait::async_trait]
impl BreakerStore for LazyRedisBreakerStore {
    async fn load(&self, key: &BreakerKey) -> Result<Loaded, BreakerError> {
        self.get().await?.load(key).await
    }

    async fn compare_and_set(
        &self,
        key: &BreakerKey,
        version: u64,
        state: &BreakerState,
        ttl: Duration,
    ) -> Result<bool, BreakerError> {
        self.get().await?.compare_and_set(key, version, state, ttl).await
    }

    async fn list(&self) -> Result<(Vec<(BreakerKey, BreakerState)>, Timestamp), BreakerError> {
        self.get().await?.list().await
    }

    async fn reset(&self, key: &BreakerKey) -> Result<(), BreakerError> {
        self.get().await?.reset(key).await
    }
}
