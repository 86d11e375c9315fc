//! The in-process store: the embedded default, and the local share behind
//! `local_fallback`. Buckets live in a sharded map of mutexes; each operation
//! locks one shard, reads the time once from the injected clock and runs the
//! pure decision code.
//!
//! A decision costs about what `governor`'s keyed limiter's does
//! (docs/benchmarks.md), though it keeps per-bucket statistics and a
//! three-part key. What that takes: each bucket is one 128-byte `Slot`
//! holding its key inline (compared word by word, not with `memcmp`), its
//! state and the counters a grant without a wait updates; everything else
//! (leases, refusals, the histogram of waits) is boxed and made on first use.
//!
//! Idle buckets are forgotten ([`MemoryStore::forget_idle`], run by a
//! background task) once forgetting them cannot change a decision: the
//! bucket reads as full again (see [`decision::relevant_until`]), it holds no
//! live lease, and its statistics have been kept for the idle retention
//! after its last decision (long enough for the quota history to have
//! sampled them). That is `governor`'s `retain_recent`, plus the retention.
//! The sweep locks one shard at a time, so decisions on the other shards go
//! on, and it gives emptied tables' memory back.

use std::collections::{BinaryHeap, HashMap, HashSet};
use std::hash::BuildHasher;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use hashbrown::HashTable;
use smallvec::SmallVec;

use crate::clock::{duration_micros, SharedClock, Timestamp};

use super::decision::{self, BucketState, Decision, Usage};
use super::lane::Priority;
use super::rule::{Algorithm, Limit, RuleId};
use super::stats::{BucketKey, BucketStats, RefusalReason};
use super::store::{DecideArgs, QuotaStore, StoreDecision, StoreError, StoreResult};

const SHARDS: usize = 32;

/// Account and scope bytes kept in the slot itself; longer ones spill to the
/// heap. The rule id is not among them: it is shared (see [`PackedKey`]).
const INLINE_KEY: usize = 24;

/// How long an idle bucket's statistics are kept after its last decision
/// when the caller does not say ([`MemoryStore::with_idle_retention`]).
pub const DEFAULT_IDLE_RETENTION: Duration = Duration::from_secs(3600);

/// One bucket: its key, its state and the counters every decision touches,
/// in one compact slot (two cache lines). With thousands of buckets
/// the decision's cost is mostly fetching the slot, so everything a plain
/// grant does not need lives behind `cold`: leases, refusals, penalties and
/// the histogram of grants that waited.
#[derive(Debug)]
#[repr(C, align(64))]
struct Slot {
    /// The low half of the key's hash: rejects a probe's near misses without
    /// comparing strings. (Resizing the table hashes the key again.)
    hash: u32,
    /// Whole seconds since the epoch from which the window algorithms' state,
    /// and any penalty or header block, reads as a full bucket: the latest
    /// [`decision::relevant_until`] of the writes that needed it. The token
    /// bucket's `tat` says it by itself, so its grants never write this.
    full_from_s: u32,
    key: PackedKey,
    cold: Option<Box<Cold>>,
    state: BucketState,
    /// Grants that waited under 1 ms, and their summed waits (µs): the wait
    /// histogram's first bucket, which is where nearly every grant lands.
    quick_grants: u64,
    quick_wait_sum_us: u64,
    /// Last decision, microseconds since the epoch (milliseconds in stats).
    last_at_us: i64,
}

// The point of the layout: keep it from growing unnoticed.
const _: () = assert!(std::mem::size_of::<Slot>() == 128);

#[derive(Debug, Default)]
struct Cold {
    /// Lease id → expiry (µs).
    leases: HashMap<String, i64>,
    /// Everything but the quick grants and the time of the last decision.
    stats: BucketStats,
}

impl Slot {
    fn new(hash: u64, key: &BucketKey, rule: Arc<RuleId>) -> Slot {
        Slot {
            hash: hash as u32,
            full_from_s: 0,
            key: PackedKey::new(key, rule),
            state: BucketState::default(),
            quick_grants: 0,
            quick_wait_sum_us: 0,
            last_at_us: 0,
            cold: None,
        }
    }

    /// After a write under `limit`: remember when the state will read as full.
    fn note_relevance(&mut self, limit: &Limit) {
        let until_us = decision::relevant_until(&self.state, limit).max(0);
        let secs = u32::try_from((until_us + 999_999) / 1_000_000).unwrap_or(u32::MAX);
        self.full_from_s = self.full_from_s.max(secs);
    }

    /// Whether forgetting the slot at `now_us` loses nothing but statistics
    /// older than `keep_us`: the state reads as a full bucket (a fresh slot
    /// would decide exactly alike), no lease is live, and the last decision
    /// is at least `keep_us` old.
    fn forgettable(&self, now_us: i64, keep_us: i64) -> bool {
        now_us.saturating_sub(self.last_at_us) >= keep_us
            && self.state.tat <= now_us
            && self.state.blocked_until <= now_us
            && i64::from(self.full_from_s) * 1_000_000 <= now_us
            && self.cold.as_ref().is_none_or(|c| c.leases.values().all(|&expiry| expiry <= now_us))
    }

    fn cold(&mut self) -> &mut Cold {
        self.cold.get_or_insert_with(Box::default)
    }

    /// A refusal, and a shadow rule's would-be block.
    fn add_refusal(&mut self, reason: RefusalReason, shadow: bool, lane: Priority) {
        let stats = &mut self.cold().stats;
        stats.add_refusal(reason);
        stats.shadow_blocks += u64::from(shadow);
        if let Some(lane) = stats.lane_mut(lane) {
            lane.refusals += 1;
        }
    }

    fn add_grant(&mut self, wait: Duration, lane: Priority) {
        if lane != Priority::Normal {
            // Off the hot path: only the exceptions are counted per lane.
            if let Some(lane) = self.cold().stats.lane_mut(lane) {
                lane.add_grant(wait);
            }
        }
        if wait < Duration::from_millis(1) {
            self.quick_grants += 1;
            // Under a millisecond, so the whole wait is its sub-second part.
            self.quick_wait_sum_us += u64::from(wait.subsec_micros());
        } else {
            self.cold().stats.add_grant(wait);
        }
    }

    fn stats(&self) -> BucketStats {
        let mut s = self.cold.as_ref().map(|c| c.stats.clone()).unwrap_or_default();
        s.grants += self.quick_grants;
        s.wait_histogram[0] += self.quick_grants;
        s.wait_sum_us += self.quick_wait_sum_us;
        s.last_at_ms = Timestamp::from_micros(self.last_at_us).as_millis();
        s
    }
}

/// A [`BucketKey`] as `account ‖ scope` in one buffer, inline when it is
/// short, and the rule id shared with every other bucket of the rule: a
/// lookup compares it without fetching three heap strings, and a bucket of
/// a rule whose id is a 26-character ULID does not spill its key to the
/// heap (a million buckets, a million small allocations, each adding to the
/// allocator's bookkeeping long after the buckets are forgotten).
#[derive(Debug)]
struct PackedKey {
    bytes: SmallVec<[u8; INLINE_KEY]>,
    rule: Arc<RuleId>,
    account_len: u32,
}

impl PackedKey {
    /// `rule` is the store's shared copy of `key.rule` ([`MemoryStore::shared_rule_id`]).
    fn new(key: &BucketKey, rule: Arc<RuleId>) -> PackedKey {
        debug_assert_eq!(*rule, key.rule);
        let mut bytes = SmallVec::new();
        bytes.extend_from_slice(key.account.as_bytes());
        bytes.extend_from_slice(key.scope.as_bytes());
        let account_len = u32::try_from(key.account.len()).expect("a key part is far below 4 GiB");
        PackedKey { bytes, rule, account_len }
    }

    fn matches(&self, key: &BucketKey) -> bool {
        let (account, scope, rule) = (key.account.as_bytes(), key.scope.as_bytes(), key.rule.0.as_bytes());
        let own_rule = self.rule.0.as_bytes();
        self.account_len as usize == account.len()
            && self.bytes.len() == account.len() + scope.len()
            && own_rule.len() == rule.len()
            && short_eq(&self.bytes[..account.len()], account)
            && short_eq(&self.bytes[account.len()..], scope)
            && short_eq(own_rule, rule)
    }

    /// The three parts, as the bytes they were copied from.
    fn parts(&self) -> (&[u8], &[u8], &[u8]) {
        let account_end = self.account_len as usize;
        (&self.bytes[..account_end], &self.bytes[account_end..], self.rule.0.as_bytes())
    }

    fn to_key(&self) -> BucketKey {
        let part = |range: std::ops::Range<usize>| {
            // Each part was copied whole from a `String`, so it is UTF-8.
            String::from_utf8(self.bytes[range].to_vec()).expect("key parts are copied from strings")
        };
        let account_end = self.account_len as usize;
        BucketKey { account: part(0..account_end), scope: part(account_end..self.bytes.len()), rule: (*self.rule).clone() }
    }
}

/// Equality of two byte strings of the same length, with the short ones
/// (key parts are mostly under 32 bytes) compared in registers: a call into
/// libc's `memcmp` per part cost more than the comparison itself.
#[inline(always)]
fn short_eq(a: &[u8], b: &[u8]) -> bool {
    fn word(s: &[u8], at: usize) -> u64 {
        u64::from_ne_bytes(s[at..at + 8].try_into().expect("8 bytes"))
    }
    fn half(s: &[u8], at: usize) -> u32 {
        u32::from_ne_bytes(s[at..at + 4].try_into().expect("4 bytes"))
    }
    debug_assert_eq!(a.len(), b.len());
    let n = a.len();
    match n {
        0 => true,
        // Positions 0, n/2 and n−1 cover every byte of a 1-, 2- or 3-byte string.
        1..=3 => a[0] == b[0] && a[n / 2] == b[n / 2] && a[n - 1] == b[n - 1],
        // Two overlapping words cover the whole string.
        4..=7 => half(a, 0) == half(b, 0) && half(a, n - 4) == half(b, n - 4),
        8..=16 => word(a, 0) == word(b, 0) && word(a, n - 8) == word(b, n - 8),
        17..=32 => {
            word(a, 0) == word(b, 0)
                && word(a, 8) == word(b, 8)
                && word(a, n - 16) == word(b, n - 16)
                && word(a, n - 8) == word(b, n - 8)
        }
        _ => a == b,
    }
}

/// Buckets in this process's memory.
#[derive(Debug)]
pub struct MemoryStore {
    clock: SharedClock,
    hasher: foldhash::fast::RandomState,
    shards: Vec<Mutex<HashTable<Slot>>>,
    /// One copy of each rule id the buckets use, shared by their keys; an id
    /// no bucket uses any more goes with the forgetting sweep. Locked only
    /// when a bucket is created (inside its shard's lock) and by the sweep.
    rule_ids: Mutex<HashSet<Arc<RuleId>>>,
    /// An idle bucket's statistics are kept this long after its last decision.
    idle_retention: Duration,
}

/// A panic while holding a shard's lock cannot leave a bucket half-written
/// (every update is a plain assignment), nor the rule ids' set a half-made
/// entry, so a poisoned lock is usable.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

impl MemoryStore {
    /// A store keeping idle buckets' statistics for [`DEFAULT_IDLE_RETENTION`].
    pub fn new(clock: SharedClock) -> MemoryStore {
        MemoryStore::with_idle_retention(clock, DEFAULT_IDLE_RETENTION)
    }

    /// A store that forgets an idle bucket (once it can no longer change a
    /// decision) `idle_retention` after its last decision, statistics and all.
    pub fn with_idle_retention(clock: SharedClock, idle_retention: Duration) -> MemoryStore {
        MemoryStore {
            clock,
            hasher: foldhash::fast::RandomState::default(),
            shards: (0..SHARDS).map(|_| Mutex::new(HashTable::new())).collect(),
            rule_ids: Mutex::new(HashSet::new()),
            idle_retention,
        }
    }

    /// The store's shared copy of `rule`.
    fn shared_rule_id(&self, rule: &RuleId) -> Arc<RuleId> {
        let mut ids = lock(&self.rule_ids);
        if let Some(id) = ids.get(rule) {
            return Arc::clone(id);
        }
        let id = Arc::new(rule.clone());
        ids.insert(Arc::clone(&id));
        id
    }

    fn hash_parts(&self, account: &[u8], scope: &[u8], rule: &[u8]) -> u64 {
        self.hasher.hash_one((account, scope, rule))
    }

    fn rehash(&self, slot: &Slot) -> u64 {
        let (account, scope, rule) = slot.key.parts();
        self.hash_parts(account, scope, rule)
    }

    /// The key's hash and its locked shard. The shard comes from the middle
    /// bits, so the table inside still sees well-spread low and high bits.
    fn shard(&self, key: &BucketKey) -> (u64, MutexGuard<'_, HashTable<Slot>>) {
        let hash = self.hash_parts(key.account.as_bytes(), key.scope.as_bytes(), key.rule.0.as_bytes());
        (hash, lock(&self.shards[((hash >> 32) as usize) % SHARDS]))
    }

    /// Run `f` on the bucket's slot, creating it (a full bucket) if needed.
    fn with_slot<T>(&self, key: &BucketKey, f: impl FnOnce(&mut Slot, Timestamp) -> T) -> T {
        let now = self.clock.now();
        let (hash, mut shard) = self.shard(key);
        let slot = match shard.find_mut(hash, |s| s.hash == hash as u32 && s.key.matches(key)) {
            Some(slot) => slot,
            None => {
                let slot = Slot::new(hash, key, self.shared_rule_id(&key.rule));
                shard.insert_unique(hash, slot, |s| self.rehash(s)).into_mut()
            }
        };
        slot.last_at_us = now.as_micros();
        f(slot, now)
    }

    /// Run `f` on the bucket's slot if it exists.
    fn with_existing<T>(&self, key: &BucketKey, f: impl FnOnce(&mut Slot) -> T) -> Option<T> {
        let (hash, mut shard) = self.shard(key);
        shard.find_mut(hash, |s| s.hash == hash as u32 && s.key.matches(key)).map(f)
    }

    /// Forget every bucket that can no longer change a decision and whose
    /// statistics are past the idle retention; returns how many. One shard
    /// is locked at a time (decisions on the others go on), and a table left
    /// mostly empty is shrunk so its memory goes back to the allocator. Plain
    /// CPU work, linear in the buckets held: call it off the async workers.
    pub fn forget_idle(&self) -> usize {
        let keep_us = duration_micros(self.idle_retention);
        let mut forgotten = 0;
        for shard in &self.shards {
            let mut table = lock(shard);
            let now_us = self.clock.now().as_micros();
            let before = table.len();
            table.retain(|s| !s.forgettable(now_us, keep_us));
            forgotten += before - table.len();
            // A quarter full or less: shrink to fit (growing back is amortised
            // like any growth, and this cannot flap on a steady shard).
            let live = table.len();
            if live <= table.capacity() / 4 {
                table.shrink_to(live, |s| self.rehash(s));
            }
        }
        // Rule ids that only this map still holds (their buckets went).
        lock(&self.rule_ids).retain(|id| Arc::strong_count(id) > 1);
        forgotten
    }

    /// Buckets held right now.
    pub fn live_buckets(&self) -> u64 {
        self.shards.iter().map(|shard| lock(shard).len() as u64).sum()
    }

    /// Keys of the buckets with a decision at or after `since_us`, sorted:
    /// the first `limit` of them in key order. The largest key kept is on
    /// top of a heap of at most `limit`, so a listing of a few buckets out
    /// of a million holds a few keys at a time, not a million.
    fn keys_since(&self, since_us: i64, limit: usize) -> Vec<BucketKey> {
        if limit == 0 {
            return Vec::new();
        }
        let mut kept: BinaryHeap<BucketKey> = BinaryHeap::new();
        for shard in &self.shards {
            for slot in lock(shard).iter().filter(|s| s.last_at_us >= since_us) {
                let key = slot.key.to_key();
                if kept.len() < limit {
                    kept.push(key);
                } else if kept.peek().is_some_and(|largest| key < *largest) {
                    kept.pop();
                    kept.push(key);
                }
            }
        }
        kept.into_sorted_vec()
    }

    /// The synchronous decision, shared with the fallback store.
    pub fn decide_now(&self, args: &DecideArgs) -> StoreDecision {
        self.with_slot(&args.key, |s, now| decide_slot(s, now, args))
    }
}

fn decide_slot(s: &mut Slot, now: Timestamp, args: &DecideArgs) -> StoreDecision {
    let now_us = now.as_micros();
    if let Some(lease) = &args.lease {
        let leases = &mut s.cold().leases;
        leases.retain(|_, exp| *exp > now_us);
        if !leases.contains_key(&lease.id) && leases.len() >= lease.max_in_flight as usize {
            s.add_refusal(RefusalReason::ConcurrencyLimit, args.shadow, args.lane);
            return StoreDecision::Refused { reason: RefusalReason::ConcurrencyLimit, retry_after: None };
        }
    }
    match args.lane.decide(&mut s.state, now, &args.limit, args.cost, args.ceiling) {
        Decision::Granted { wait } => {
            if args.limit.algorithm != Algorithm::TokenBucket {
                s.note_relevance(&args.limit);
            }
            s.add_grant(wait, args.lane);
            if args.shadow && wait >= Duration::from_millis(1) {
                s.cold().stats.shadow_blocks += 1;
            }
            let lease = args.lease.as_ref().map(|l| {
                s.cold().leases.insert(l.id.clone(), now_us + duration_micros(wait) + duration_micros(l.ttl));
                l.id.clone()
            });
            StoreDecision::Granted { wait, lease }
        }
        Decision::Refused { retry_after } => {
            s.add_refusal(RefusalReason::WaitCeilingExceeded, args.shadow, args.lane);
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
        ready(self.with_slot(key, |s, now| {
            s.cold().stats.penalties += 1;
            let until = decision::penalize(&mut s.state, now, limit, floor, retry_after);
            s.note_relevance(limit);
            until.saturating_duration_since(now)
        }))
    }

    fn observe<'a>(
        &'a self,
        key: &'a BucketKey,
        limit: &'a Limit,
        remaining: u64,
        reset_in: Option<Duration>,
    ) -> StoreResult<'a, ()> {
        self.with_slot(key, |s, now| {
            s.cold().stats.observations += 1;
            decision::observe(&mut s.state, now, limit, remaining, reset_in);
            s.note_relevance(limit);
        });
        ready(())
    }

    fn peek<'a>(&'a self, key: &'a BucketKey, limit: &'a Limit) -> StoreResult<'a, Usage> {
        let now = self.clock.now();
        let usage = self.with_existing(key, |s| decision::peek(&mut s.state, now, limit));
        ready(usage.unwrap_or_else(|| decision::peek(&mut BucketState::default(), now, limit)))
    }

    fn release<'a>(&'a self, key: &'a BucketKey, lease: &'a str) -> StoreResult<'a, ()> {
        self.with_existing(key, |s| s.cold.as_mut().and_then(|c| c.leases.remove(lease)));
        ready(())
    }

    fn record_refusal<'a>(&'a self, key: &'a BucketKey, reason: RefusalReason, lane: Priority) -> StoreResult<'a, ()> {
        self.with_slot(key, |s, _| s.add_refusal(reason, false, lane));
        ready(())
    }

    fn stats<'a>(&'a self, key: &'a BucketKey) -> StoreResult<'a, BucketStats> {
        ready(self.with_existing(key, |s| s.stats()).unwrap_or_default())
    }

    fn list_buckets_since(&self, since_ms: i64, limit: usize) -> StoreResult<'_, Vec<BucketKey>> {
        ready(self.keys_since(since_ms.saturating_mul(1000), limit))
    }

    fn forget_idle(&self) -> usize {
        MemoryStore::forget_idle(self)
    }

    fn live_buckets(&self) -> StoreResult<'_, Vec<(&'static str, u64)>> {
        ready(vec![("memory", MemoryStore::live_buckets(self))])
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::clock::{Clock, ManualClock};

    use super::*;

    fn key(account: &str, scope: &str, rule: &str) -> BucketKey {
        BucketKey { account: account.into(), scope: scope.into(), rule: RuleId(rule.into()) }
    }

    fn args(key: BucketKey, limit: Limit) -> DecideArgs {
        DecideArgs { key, limit, cost: 1, ceiling: Duration::from_secs(60), lane: Priority::Normal, shadow: false, lease: None }
    }

    #[test]
    fn short_eq_agrees_with_slice_equality_for_every_length_and_position() {
        for n in 0..=48usize {
            let a: Vec<u8> = (0..n).map(|i| b'a' + (i % 26) as u8).collect();
            assert!(short_eq(&a, &a.clone()), "equal strings of length {n}");
            for at in 0..n {
                let mut b = a.clone();
                b[at] ^= 0x20;
                assert!(!short_eq(&a, &b), "length {n}, differing at {at}");
            }
        }
    }

    #[test]
    fn buckets_share_their_rule_id_and_it_goes_with_the_last_of_them() {
        let clock = Arc::new(ManualClock::at_test_epoch());
        let store = MemoryStore::with_idle_retention(clock.clone(), Duration::from_secs(60));
        let limit = Limit::token_bucket(1, Duration::from_secs(1), 1);
        // Rule ids are ULIDs: with them in the inline bytes every key spilled.
        let rule = "rul_01jbz7s0m5k3w8x9y2c4d6f8gh";
        for n in 0..100 {
            store.decide_now(&args(key(&format!("seller-{n}"), "vtex_pricing", rule), limit));
        }
        let ids = || lock(&store.rule_ids).len();
        assert_eq!(ids(), 1);
        let (mut spilled, mut holders) = (0, 0);
        for shard in &store.shards {
            for slot in lock(shard).iter() {
                spilled += usize::from(slot.key.bytes.spilled());
                holders = holders.max(Arc::strong_count(&slot.key.rule));
                assert_eq!(slot.key.to_key().rule.0, rule);
            }
        }
        assert_eq!(spilled, 0, "account and scope fit the slot; the rule id is not copied into it");
        assert_eq!(holders, 101, "one copy of the rule id, held by the 100 buckets and the store's set");
        clock.advance(Duration::from_secs(120));
        assert_eq!(store.forget_idle(), 100);
        assert_eq!(ids(), 0, "the id goes with the last bucket of its rule");
    }

    #[test]
    fn a_capped_listing_keeps_the_first_keys_in_key_order() {
        let store = MemoryStore::new(Arc::new(ManualClock::at_test_epoch()));
        let limit = Limit::token_bucket(1, Duration::from_secs(10), 1);
        // Inserted out of order, spread over the shards.
        for n in [7, 3, 9, 0, 5, 1, 8, 2, 6, 4] {
            store.decide_now(&args(key(&format!("acct{n}"), "pricing", "r"), limit));
        }
        let accounts = |limit: usize| -> Vec<String> {
            let keys = futures::executor::block_on(store.list_buckets_since(i64::MIN, limit)).expect("memory store");
            keys.into_iter().map(|k| k.account).collect()
        };
        assert_eq!(accounts(3), ["acct0", "acct1", "acct2"]);
        assert_eq!(accounts(10).len(), 10);
        assert_eq!(accounts(usize::MAX).len(), 10);
        assert!(accounts(0).is_empty());
    }

    #[test]
    fn keys_that_concatenate_alike_are_different_buckets() {
        let store = MemoryStore::new(Arc::new(ManualClock::at_test_epoch()));
        let limit = Limit::token_bucket(1, Duration::from_secs(10), 1);
        let long = "an-account-name-well-past-the-inline-key-size";
        let keys = [key("ab", "c", "d"), key("a", "bc", "d"), key("a", "b", "cd"), key(long, "pricing", "r")];
        for k in &keys {
            // Each is a fresh full bucket: its one token is granted at once.
            assert_eq!(
                store.decide_now(&args(k.clone(), limit)),
                StoreDecision::Granted { wait: Duration::ZERO, lease: None }
            );
        }
        let mut listed = futures::executor::block_on(store.list_buckets()).expect("memory store");
        let mut expected = keys.to_vec();
        expected.sort();
        listed.sort();
        assert_eq!(listed, expected);
    }

    #[test]
    fn stats_add_quick_grants_to_those_that_waited() {
        let clock = Arc::new(ManualClock::at_test_epoch());
        let store = MemoryStore::new(clock.clone());
        let k = key("acct", "pricing", "r");
        // Two at once (burst 2), then one booked 500 ms out, then a refusal.
        let limit = Limit::token_bucket(2, Duration::from_secs(1), 2);
        let mut a = args(k.clone(), limit);
        for _ in 0..3 {
            assert!(matches!(store.decide_now(&a), StoreDecision::Granted { .. }));
        }
        a.ceiling = Duration::ZERO;
        assert!(matches!(store.decide_now(&a), StoreDecision::Refused { .. }));

        let stats = futures::executor::block_on(store.stats(&k)).expect("memory store");
        assert_eq!(stats.grants, 3);
        assert_eq!(stats.waited, 1);
        assert_eq!(stats.wait_histogram[0], 2);
        assert_eq!(stats.wait_histogram.iter().sum::<u64>(), 3);
        assert_eq!(stats.wait_sum_us, 500_000);
        assert_eq!(stats.refusals(RefusalReason::WaitCeilingExceeded), 1);
        assert_eq!(stats.last_at_ms, clock.now().as_millis());
    }
}
