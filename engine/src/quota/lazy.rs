//! A Redis store that connects on first use and keeps trying while Redis is
//! down, so an instance can start during a Redis outage: until the first
//! connection succeeds every call fails as `Unavailable`, and the
//! [`super::FallbackStore`] around it applies the deployment's store-down
//! policy. Once connected, [`super::RedisStore`]'s connection manager handles
//! reconnects itself.

use std::future::Future;
use std::time::Duration;

use crate::lazy_connect::{ConnectRedis, LazyRedis, NotConnected};

use super::decision::Usage;
use super::redis::{RedisSettings, RedisStore};
use super::lane::Priority;
use super::rule::Limit;
use super::stats::{BucketKey, BucketStats, RefusalReason};
use super::store::{DecideArgs, QuotaStore, StoreDecision, StoreError, StoreResult};

#[derive(Debug)]
pub struct LazyRedisStore {
    store: LazyRedis<RedisStore>,
}

impl ConnectRedis for RedisStore {
    type Error = StoreError;
    const NAME: &'static str = "quota store";

    fn connect(settings: &RedisSettings) -> impl Future<Output = Result<Self, StoreError>> + Send {
        RedisStore::connect(settings)
    }

    fn not_connected(e: NotConnected) -> StoreError {
        StoreError::Unavailable(Box::new(e))
    }
}

impl LazyRedisStore {
    pub fn new(settings: RedisSettings) -> Self {
        LazyRedisStore { store: LazyRedis::new(settings) }
    }

    async fn get(&self) -> Result<&RedisStore, StoreError> {
        self.store.get().await
    }
}

impl QuotaStore for LazyRedisStore {
    fn decide<'a>(&'a self, args: &'a DecideArgs) -> StoreResult<'a, StoreDecision> {
        Box::pin(async move { self.get().await?.decide(args).await })
    }

    fn penalize<'a>(
        &'a self,
        key: &'a BucketKey,
        limit: &'a Limit,
        floor: Duration,
        retry_after: Option<Duration>,
    ) -> StoreResult<'a, Duration> {
        Box::pin(async move { self.get().await?.penalize(key, limit, floor, retry_after).await })
    }

    fn observe<'a>(
        &'a self,
        key: &'a BucketKey,
        limit: &'a Limit,
        remaining: u64,
        reset_in: Option<Duration>,
    ) -> StoreResult<'a, ()> {
        Box::pin(async move { self.get().await?.observe(key, limit, remaining, reset_in).await })
    }

    fn peek<'a>(&'a self, key: &'a BucketKey, limit: &'a Limit) -> StoreResult<'a, Usage> {
        Box::pin(async move { self.get().await?.peek(key, limit).await })
    }

    fn release<'a>(&'a self, key: &'a BucketKey, lease: &'a str) -> StoreResult<'a, ()> {
        Box::pin(async move { self.get().await?.release(key, lease).await })
    }

    fn record_refusal<'a>(&'a self, key: &'a BucketKey, reason: RefusalReason, lane: Priority) -> StoreResult<'a, ()> {
        Box::pin(async move { self.get().await?.record_refusal(key, reason, lane).await })
    }

    fn stats<'a>(&'a self, key: &'a BucketKey) -> StoreResult<'a, BucketStats> {
        Box::pin(async move { self.get().await?.stats(key).await })
    }

    fn list_buckets_since(&self, since_ms: i64, limit: usize) -> StoreResult<'_, Vec<BucketKey>> {
        Box::pin(async move { self.get().await?.list_buckets_since(since_ms, limit).await })
    }

    fn forget_idle(&self) -> usize {
        self.store.connected().map_or(0, QuotaStore::forget_idle)
    }

    fn live_buckets(&self) -> StoreResult<'_, Vec<(&'static str, u64)>> {
        Box::pin(async move { self.get().await?.live_buckets().await })
    }
}
