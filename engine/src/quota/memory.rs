//! The in-process store: the embedded default, and the local share behind
//! `local_fallback`. Buckets live in a sharded map of mutexes; each operation
//! locks one shard, reads the time once from the injected clock and runs the
//! pure decision code.
//!
//! Idle buckets are kept (there is no TTL sweep): an embedded node sees few
//! enough (account, rule) pairs that memory is not a concern, and keeping
//! them keeps their stats for the dashboards.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use hashbrown::HashTable;

use crate::clock::{duration_micros, SharedClock, Timestamp};

use super::decision::{self, BucketState, Decision, Usage};
use super::rule::Limit;
use super::stats::{BucketKey, BucketStats, RefusalReason};
use super::store::{DecideArgs, QuotaStore, StoreDecision, StoreError, StoreResult};

const SHARDS: usize = 32;

/// A bucket and its key, stored together so a lookup hashes the key once
/// (for both the shard and the slot).
#[derive(Debug)]
struct Slot {
    key: BucketKey,
    entry: Entry,
}

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
    hasher: foldhash::fast::RandomState,
    shards: Vec<Mutex<HashTable<Slot>>>,
}

impl MemoryStore {
    pub fn new(clock: SharedClock) -> MemoryStore {
        MemoryStore {
            clock,
            hasher: foldhash::fast::RandomState::default(),
            shards: (0..SHARDS).map(|_| Mutex::new(HashTable::new())).collect(),
        }
    }

    /// The key's hash and its locked shard. The shard comes from the middle
    /// bits, so the table inside still sees well-spread low and high bits.
    fn shard(&self, key: &BucketKey) -> (u64, MutexGuard<'_, HashTable<Slot>>) {
        let hash = self.hasher.hash_one(key);
        let shard = &self.shards[((hash >> 32) as usize) % SHARDS];
        // A panic while holding the lock cannot leave a bucket half-written
        // (every update is a plain assignment), so a poisoned lock is usable.
        (hash, shard.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Run `f` on the bucket's entry, creating it (a full bucket) if needed.
    fn with_entry<T>(&self, key: &BucketKey, f: impl FnOnce(&mut Entry, Timestamp) -> T) -> T {
        let now = self.clock.now();
        let (hash, mut shard) = self.shard(key);
        let entry = match shard.find_mut(hash, |s| s.key == *key) {
            Some(slot) => &mut slot.entry,
            None => {
                let slot = Slot { key: key.clone(), entry: Entry::default() };
                &mut shard.insert_unique(hash, slot, |s| self.hasher.hash_one(&s.key)).into_mut().entry
            }
        };
        entry.stats.last_at_ms = now.as_millis();
        f(entry, now)
    }

    /// Run `f` on the bucket's entry if it exists.
    fn with_existing<T>(&self, key: &BucketKey, f: impl FnOnce(&mut Entry) -> T) -> Option<T> {
        let (hash, mut shard) = self.shard(key);
        shard.find_mut(hash, |s| s.key == *key).map(|slot| f(&mut slot.entry))
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
        let usage = self.with_existing(key, |e| decision::peek(&mut e.state, now, limit));
        ready(usage.unwrap_or_else(|| decision::peek(&mut BucketState::default(), now, limit)))
    }

    fn release<'a>(&'a self, key: &'a BucketKey, lease: &'a str) -> StoreResult<'a, ()> {
        self.with_existing(key, |e| e.leases.remove(lease));
        ready(())
    }

    fn record_refusal<'a>(&'a self, key: &'a BucketKey, reason: RefusalReason) -> StoreResult<'a, ()> {
        self.with_entry(key, |e, _| e.stats.add_refusal(reason));
        ready(())
    }

    fn stats<'a>(&'a self, key: &'a BucketKey) -> StoreResult<'a, BucketStats> {
        ready(self.with_existing(key, |e| e.stats.clone()).unwrap_or_default())
    }

    fn list_buckets(&self) -> StoreResult<'_, Vec<BucketKey>> {
        let mut keys: Vec<BucketKey> = Vec::new();
        for shard in &self.shards {
            keys.extend(shard.lock().unwrap_or_else(|p| p.into_inner()).iter().map(|s| s.key.clone()));
        }
        keys.sort();
        ready(keys)
    }
}
