//! The store-down policy around a shared store (Redis).
//!
//! - [`StorePolicy::FailClosed`]: while the shared store is unreachable every
//!   decision is [`StoreError::Unavailable`], which the limiter reports as a
//!   refusal with reason `store_unavailable`.
//! - [`StorePolicy::LocalFallback`]: decisions come from an in-process
//!   [`MemoryStore`] with a strictly smaller rule, [`local_share`]: this
//!   instance's part of the quota (`tokens / expected instances`). The limiter
//!   reports [`StoreHealth::Degraded`].
//!
//! After a failure the shared store is tried again at most every
//! `retry_every` (so a dead Redis does not cost a timeout per call), and the
//! first success switches back: recovery needs no restart. Local bookings are
//! not copied to Redis on recovery; the shared bucket simply continues.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::clock::SharedClock;

use super::decision::Usage;
use super::lane::Priority;
use super::memory::MemoryStore;
use super::rule::{Algorithm, Limit};
use super::stats::{BucketKey, BucketStats, RefusalReason};
use super::store::{DecideArgs, QuotaStore, StoreDecision, StoreError, StoreHealth, StoreResult};

/// What to do while the shared store is down. Chosen per deployment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case", tag = "policy")]
pub enum StorePolicy {
    FailClosed,
    LocalFallback { expected_instances: u32 },
}

/// This instance's share of `limit` when `instances` share it without
/// coordination: `tokens / instances` per interval (or one token per
/// `ceil(instances / tokens)` intervals when there are fewer tokens than
/// instances), and `burst / instances` (at least 1). The sum over all
/// instances never exceeds the rate; the burst can only exceed the original
/// when `burst < instances` (each instance keeps a burst of 1).
pub fn local_share(limit: &Limit, instances: u32) -> Limit {
    let n = instances.max(1);
    let (tokens, interval) = if limit.tokens >= n {
        (limit.tokens / n, limit.interval)
    } else {
        (1, limit.interval * n.div_ceil(limit.tokens.max(1)))
    };
    let burst = match limit.algorithm {
        Algorithm::TokenBucket => (limit.burst / n).max(1),
        Algorithm::FixedWindow | Algorithm::SlidingLog => tokens,
    };
    Limit { algorithm: limit.algorithm, tokens, interval, burst }
}

#[derive(Debug)]
struct Health {
    down: bool,
    last_try: Option<Instant>,
}

/// A shared store with a store-down policy.
#[derive(Debug)]
pub struct FallbackStore {
    shared: Arc<dyn QuotaStore>,
    local: MemoryStore,
    policy: StorePolicy,
    retry_every: Duration,
    health: Mutex<Health>,
}

impl FallbackStore {
    /// `clock` drives the local share; `retry_every` bounds how often a
    /// down shared store is tried again (e.g. 500 ms; zero = every call).
    pub fn new(shared: Arc<dyn QuotaStore>, policy: StorePolicy, clock: SharedClock, retry_every: Duration) -> Self {
        FallbackStore {
            shared,
            local: MemoryStore::new(clock),
            policy,
            retry_every,
            health: Mutex::new(Health { down: false, last_try: None }),
        }
    }

    /// Keep the local share's idle buckets' statistics this long (see
    /// [`MemoryStore::with_idle_retention`]).
    pub fn with_idle_retention(mut self, idle_retention: Duration, clock: SharedClock) -> Self {
        self.local = MemoryStore::with_idle_retention(clock, idle_retention);
        self
    }

    fn should_try_shared(&self) -> bool {
        let mut h = self.health.lock().unwrap_or_else(|p| p.into_inner());
        if !h.down || h.last_try.is_none_or(|t| t.elapsed() >= self.retry_every) {
            h.last_try = Some(Instant::now());
            true
        } else {
            false
        }
    }

    fn mark(&self, down: bool) {
        let mut h = self.health.lock().unwrap_or_else(|p| p.into_inner());
        if h.down != down {
            if down {
                tracing::warn!(policy = ?self.policy, "quota store unavailable; applying the store-down policy");
            } else {
                tracing::info!("quota store reachable again");
            }
        }
        h.down = down;
    }

    /// Run `op` on the shared store; on an outage, `local` under
    /// `LocalFallback` or the outage error under `FailClosed`.
    async fn with_policy<'a, T>(
        &'a self,
        shared: StoreResult<'a, T>,
        local: impl FnOnce(&'a MemoryStore, u32) -> StoreResult<'a, T>,
    ) -> Result<T, StoreError> {
        let error = if self.should_try_shared() {
            match shared.await {
                Ok(v) => {
                    self.mark(false);
                    return Ok(v);
                }
                Err(StoreError::Unavailable(e)) => {
                    self.mark(true);
                    StoreError::Unavailable(e)
                }
                Err(e) => return Err(e),
            }
        } else {
            StoreError::Unavailable("quota store marked down; next retry pending".into())
        };
        match self.policy {
            StorePolicy::FailClosed => Err(error),
            StorePolicy::LocalFallback { expected_instances } => local(&self.local, expected_instances).await,
        }
    }
}

impl QuotaStore for FallbackStore {
    fn decide<'a>(&'a self, args: &'a DecideArgs) -> StoreResult<'a, StoreDecision> {
        Box::pin(self.with_policy(self.shared.decide(args), move |local, n| {
            let mut scaled = args.clone();
            scaled.limit = local_share(&args.limit, n);
            if let Some(lease) = &mut scaled.lease {
                lease.max_in_flight = (lease.max_in_flight / n).max(1);
            }
            Box::pin(std::future::ready(Ok(local.decide_now(&scaled))))
        }))
    }

    fn penalize<'a>(
        &'a self,
        key: &'a BucketKey,
        limit: &'a Limit,
        floor: Duration,
        retry_after: Option<Duration>,
    ) -> StoreResult<'a, Duration> {
        Box::pin(self.with_policy(self.shared.penalize(key, limit, floor, retry_after), move |local, n| {
            let scaled = local_share(limit, n);
            Box::pin(async move { local.penalize(key, &scaled, floor, retry_after).await })
        }))
    }

    fn observe<'a>(
        &'a self,
        key: &'a BucketKey,
        limit: &'a Limit,
        remaining: u64,
        reset_in: Option<Duration>,
    ) -> StoreResult<'a, ()> {
        Box::pin(self.with_policy(self.shared.observe(key, limit, remaining, reset_in), move |local, n| {
            let scaled = local_share(limit, n);
            Box::pin(async move { local.observe(key, &scaled, remaining / u64::from(n.max(1)), reset_in).await })
        }))
    }

    fn peek<'a>(&'a self, key: &'a BucketKey, limit: &'a Limit) -> StoreResult<'a, Usage> {
        Box::pin(self.with_policy(self.shared.peek(key, limit), move |local, n| {
            let scaled = local_share(limit, n);
            Box::pin(async move { local.peek(key, &scaled).await })
        }))
    }

    fn release<'a>(&'a self, key: &'a BucketKey, lease: &'a str) -> StoreResult<'a, ()> {
        Box::pin(self.with_policy(self.shared.release(key, lease), move |local, _| local.release(key, lease)))
    }

    fn record_refusal<'a>(&'a self, key: &'a BucketKey, reason: RefusalReason, lane: Priority) -> StoreResult<'a, ()> {
        Box::pin(
            self.with_policy(self.shared.record_refusal(key, reason, lane), move |l, _| {
                l.record_refusal(key, reason, lane)
            }),
        )
    }

    fn stats<'a>(&'a self, key: &'a BucketKey) -> StoreResult<'a, BucketStats> {
        Box::pin(self.with_policy(self.shared.stats(key), move |local, _| local.stats(key)))
    }

    fn list_buckets_since(&self, since_ms: i64, limit: usize) -> StoreResult<'_, Vec<BucketKey>> {
        Box::pin(self.with_policy(self.shared.list_buckets_since(since_ms, limit), move |local, _| {
            local.list_buckets_since(since_ms, limit)
        }))
    }

    fn forget_idle(&self) -> usize {
        self.shared.forget_idle() + self.local.forget_idle()
    }

    /// The shared store's count (when it answers) and the local share's.
    fn live_buckets(&self) -> StoreResult<'_, Vec<(&'static str, u64)>> {
        Box::pin(async move {
            let mut counts = self.shared.live_buckets().await.unwrap_or_default();
            counts.push(("local_fallback", self.local.live_buckets()));
            Ok(counts)
        })
    }

    fn health(&self) -> StoreHealth {
        let down = self.health.lock().unwrap_or_else(|p| p.into_inner()).down;
        match (down, self.policy) {
            (false, _) => StoreHealth::Healthy,
            (true, StorePolicy::FailClosed) => StoreHealth::Unavailable,
            (true, StorePolicy::LocalFallback { .. }) => StoreHealth::Degraded,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_local_share_never_exceeds_the_instances_part_of_the_rate() {
        let s = Duration::from_secs(1);
        assert_eq!(local_share(&Limit::token_bucket(40, s, 1000), 4), Limit::token_bucket(10, s, 250));
        assert_eq!(local_share(&Limit::fixed_window(1, s * 60), 3), Limit::fixed_window(1, s * 180));
        assert_eq!(local_share(&Limit::sliding_log(10, s), 3), Limit::sliding_log(3, s));
    }
}
