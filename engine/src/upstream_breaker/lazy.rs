//! A Redis breaker store that connects on first use and keeps trying while
//! Redis is down, so an instance can start (and show its Breakers page)
//! during a Redis outage: until the first connection succeeds every call
//! fails as [`BreakerError::Store`]. Once connected, the connection manager
//! of [`RedisBreakerStore`] reconnects by itself. The same idea as the quota
//! store's `LazyRedisStore`.

use std::fmt;
use std::time::Duration;

use super::redis::RedisBreakerStore;
use super::{BreakerError, BreakerKey, BreakerState, BreakerStore, Loaded};
use crate::clock::Timestamp;
use crate::lazy_connect::LazyConnection;
use crate::redis_conn::RedisSettings;

pub struct LazyRedisBreakerStore {
    settings: RedisSettings,
    store: LazyConnection<RedisBreakerStore>,
}

impl fmt::Debug for LazyRedisBreakerStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LazyRedisBreakerStore")
            .field("prefix", &self.settings.prefix)
            .field("connected", &self.store.is_connected())
            .finish()
    }
}

#[derive(Debug, thiserror::Error)]
#[error("not connected to Redis yet")]
struct NotConnected;

impl LazyRedisBreakerStore {
    /// Nothing is connected here; the first call tries (one node or a
    /// cluster, as `settings` say).
    pub fn new(settings: RedisSettings) -> Self {
        LazyRedisBreakerStore { settings, store: LazyConnection::new() }
    }

    async fn get(&self) -> Result<&RedisBreakerStore, BreakerError> {
        let connect = || async {
            let store = RedisBreakerStore::connect(&self.settings).await;
            match &store {
                Ok(_) => tracing::info!(prefix = %self.settings.prefix, "breaker store connected to Redis"),
                Err(e) => tracing::warn!(error = %e, "breaker store: Redis not reachable yet"),
            }
            store
        };
        self.store
            .get_or_connect(connect)
            .await
            .map_err(|e| e.unwrap_or_else(|| BreakerError::Store(Box::new(NotConnected))))
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
