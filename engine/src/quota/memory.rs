//! The in-process store: the embedded default, and the local share behind
//! `local_fallback`. Buckets live in a sharded map of mutexes; each operation
//! locks one shard, reads the time once from the injected clock and runs the
//! pure decision code.
//!
//! Idle buckets are kept (there is no TTL sweep): an embedded node sees few
//! enough (account, rule) pairs that memory is not a concern, and keeping
//! them keeps their stats for the dashboards.

use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use crate::clock::{duration_micros, SharedClock, Timestamp};

use super::decision::{self, BucketState, Decision, Usage};
use super::rule::Limit;
use super::stats::{BucketKey, BucketStats, RefusalReason};
use super::store::{DecideArgs, QuotaStore, StoreDecision, StoreError, StoreResult};

const SHARDS: usize = 32;

#[derive(Debug, Default)]
struct Entry {
    state: BucketState,
    /// Lease id → expiry (µs).
    leases: HashMap<String, i64>,
    stats: BucketStats,
}

/// Buckets in this process's memory.
#[derive(Debug)]
pub struct MemoryStore {
    clock: SharedClock,
    shards: Vec<Mutex<HashMap<BucketKey, Entry>>>,
}

impl MemoryStore {
    pub fn new(clock: SharedClock) -> MemoryStore {
        MemoryStore { clock, shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect() }
    }

    fn shard(&self, key: &BucketKey) -> MutexGuard<'_, HashMap<BucketKey, Entry>> {
        let mut h = DefaultHasher::new();
        key.hash(&mut h);
        let shard = &self.shards[(h.finish() as usize) % SHARDS];
        // A panic while holding the lock cannot leave a bucket half-written
        // (every update is a plain assignment), so a poisoned lock is usable.
        shard.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Run `f` on the bucket's entry, creating it (a full bucket) if needed.
    fn with_entry<T>(&self, key: &BucketKey, f: impl FnOnce(&mut Entry, Timestamp) -> T) -> T {
        let now = self.clock.now();
        let mut shard = self.shard(key);
        let entry = match shard.get_mut(key) {
            Some(e) => e,
            None => shard.entry(key.clone()).or_default(),
        };
        entry.stats.last_at_ms = now.as_millis();
        f(entry, now)
    }

    /// The synchronous decision, shared with the fallback store.
    pub fn decide_now(&self, args: &DecideArgs) -> StoreDecision {
        self.with_entry(&args.key, |e, now| decide_entry(e, now, args))
    }
}

fn decide_entry(e: &mut Entry, now: Timestamp, args: &DecideArgs) -> StoreDecision {
    let now_us = now.as_micros();
    let mut over_concurrency = false;
    if let Some(lease) = &args.lease {
        e.leases.retain(|_, exp| *exp > now_us);
        over_concurrency = !e.leases.contains_key(&lease.id) && e.leases.len() >= lease.max_in_flight as usize;
    }
    if over_concurrency {
        e.stats.add_refusal(RefusalReason::ConcurrencyLimit);
        e.stats.shadow_blocks += u64::from(args.shadow);
        return StoreDecision::Refused { reason: RefusalReason::ConcurrencyLimit, retry_after: None };
    }
    match decision::decide(&mut e.state, now, &args.limit, args.cost, args.ceiling) {
        Decision::Granted { wait } => {
            e.stats.add_grant(wait);
            e.stats.shadow_blocks += u64::from(args.shadow && wait >= Duration::from_millis(1));
            let lease = args.lease.as_ref().map(|l| {
                e.leases.insert(l.id.clone(), now_us + duration_micros(wait) + duration_micros(l.ttl));
                l.id.clone()
            });
            StoreDecision::Granted { wait, lease }
        }
        Decision::Refused { retry_after } => {
            e.stats.add_refusal(RefusalReason::WaitCeilingExceeded);
            e.stats.shadow_blocks += u64::from(args.shadow);
            StoreDecision::Refused { reason: RefusalReason::WaitCeilingExceeded, retry_after: Some(retry_after) }
        }
    }
}

fn ready<'a, T: Send + 'a>(v: T) -> StoreResult<'a, T> {
    Box::pin(std::future::ready(Ok::<T, StoreError>(v)))
}

impl QuotaStore for MemoryStore {
    fn decide<'a>(&'a self, args: &'a DecideArgs) -> StoreResult<'a, StoreDecision> {
        ready(self.decide_now(args))
    }

    fn penalize<'a>(
        &'a self,
        key: &'a BucketKey,
        limit: &'a Limit,
        floor: Duration,
        retry_after: Option<Duration>,
    ) -> StoreResult<'a, Duration> {
        ready(self.with_entry(key, |e, now| {
            e.stats.penalties += 1;
            decision::penalize(&mut e.state, now, limit, floor, retry_after).saturating_duration_since(now)
        }))
    }

    fn observe<'a>(
        &'a self,
        key: &'a BucketKey,
        limit: &'a Limit,
        remaining: u64,
        reset_in: Option<Duration>,
    ) -> StoreResult<'a, ()> {
        self.with_entry(key, |e, now| {
            e.stats.observations += 1;
            decision::observe(&mut e.state, now, limit, remaining, reset_in);
        });
        ready(())
    }

    fn peek<'a>(&'a self, key: &'a BucketKey, limit: &'a Limit) -> StoreResult<'a, Usage> {
        let now = self.clock.now();
        let mut shard = self.shard(key);
        let usage = match shard.get_mut(key) {
            Some(e) => decision::peek(&mut e.state, now, limit),
            None => decision::peek(&mut BucketState::default(), now, limit),
        };
        ready(usage)
    }

    fn release<'a>(&'a self, key: &'a BucketKey, lease: &'a str) -> StoreResult<'a, ()> {
        if let Some(e) = self.shard(key).get_mut(key) {
            e.leases.remove(lease);
        }
        ready(())
    }

    fn record_refusal<'a>(&'a self, key: &'a BucketKey, reason: RefusalReason) -> StoreResult<'a, ()> {
        self.with_entry(key, |e, _| e.stats.add_refusal(reason));
        ready(())
    }

    fn stats<'a>(&'a self, key: &'a BucketKey) -> StoreResult<'a, BucketStats> {
        ready(self.shard(key).get(key).map(|e| e.stats.clone()).unwrap_or_default())
    }

    fn list_buckets(&self) -> StoreResult<'_, Vec<BucketKey>> {
        let mut keys: Vec<BucketKey> = Vec::new();
        for shard in &self.shards {
            keys.extend(shard.lock().unwrap_or_else(|p| p.into_inner()).keys().cloned());
        }
        keys.sort();
        ready(keys)
    }
}
