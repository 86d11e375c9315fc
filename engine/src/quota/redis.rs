//! The Redis store: every operation is one EVALSHA of `lua/quota.lua` (the
//! `redis` crate's `Script` re-loads it on `NOSCRIPT`, e.g. after a Redis
//! restart), using Redis `TIME` as the clock. Works on a single node and on
//! Redis Cluster: the four keys of a bucket share the account's hash tag.
//!
//! Every call has a short deadline (default 250 ms); a miss, a refused
//! connection or a dropped one is [`StoreError::Unavailable`], which the
//! limiter turns into a refusal (fail closed) or [`super::FallbackStore`]
//! into its local share. The connection re-establishes itself.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::hash::BuildHasher;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use redis::{RedisError, Script, Value};

use crate::clock::duration_micros;

use super::decision::Usage;
use super::lane::Priority;
use super::rule::{Limit, RuleId};
use super::stats::{BucketKey, BucketStats, RefusalReason};
use super::store::{DecideArgs, QuotaStore, StoreDecision, StoreError, StoreResult};

const SCRIPT: &str = include_str!("lua/quota.lua");
const INDEX_SCRIPT: &str = include_str!("lua/index.lua");
const INDEX_READ_SCRIPT: &str = include_str!("lua/index_read.lua");

/// How often one process re-writes a bucket's entry in the index: an entry's
/// score may be this much older than the bucket's last decision.
const INDEX_REFRESH: Duration = Duration::from_secs(60);
/// Stale index entries dropped by one index write at most (a few ms of Redis
/// time; index writes come at least as often as buckets go idle).
const INDEX_TRIM_BATCH: u32 = 500;

pub use crate::redis_conn::RedisSettings;
use crate::redis_conn::RedisConn;

/// Buckets in Redis, shared by every instance.
pub struct RedisStore {
    conn: RedisConn,
    prefix: String,
    timeout: Duration,
    idle_retention: Duration,
    script: Script,
    index_script: Script,
    index_read_script: Script,
    indexed: Mutex<IndexedRecently>,
}

/// The buckets this process wrote into the index in the current refresh
/// period, as 64-bit hashes of their keys: 8 bytes a bucket, bounded by the
/// buckets used in one period, and dropped in one piece when it ends: by
/// the next decision, or by the forgetting sweep when none comes (without
/// the sweep an idle server held the last busy minute's set until its next
/// permit: docs/benchmarks.md, soak, fifth run). (Two
/// keys with the same hash would share one index write a period; at a
/// million buckets that is a one-in-ten-million chance of an entry a minute
/// late.)
struct IndexedRecently {
    since: Instant,
    seen: HashSet<u64>,
    hasher: foldhash::fast::RandomState,
}

impl IndexedRecently {
    /// Whether `key` is due for an index write now; if so it counts as written.
    fn due(&mut self, key: &BucketKey, now: Instant) -> bool {
        self.expire(now);
        self.seen.insert(self.hasher.hash_one(key))
    }

    /// Drop the set if its period is over.
    fn expire(&mut self, now: Instant) {
        if now.duration_since(self.since) >= INDEX_REFRESH {
            self.since = now;
            self.seen = HashSet::new();
        }
    }

    fn forget(&mut self, key: &BucketKey) {
        let hash = self.hasher.hash_one(key);
        self.seen.remove(&hash);
    }
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore").field("prefix", &self.prefix).finish_non_exhaustive()
    }
}

fn classify(e: RedisError) -> StoreError {
    if e.is_io_error() || e.is_connection_refusal() || e.is_connection_dropped() || e.is_timeout() {
        StoreError::Unavailable(Box::new(e))
    } else {
        StoreError::Protocol(e.to_string())
    }
}

impl RedisStore {
    /// Connect (within the timeout). A Redis that is down at startup is an error.
    pub async fn connect(settings: &RedisSettings) -> Result<RedisStore, StoreError> {
        let conn = RedisConn::connect(settings).await.map_err(classify)?;
        Ok(RedisStore {
            conn,
            prefix: settings.prefix.clone(),
            timeout: settings.timeout,
            idle_retention: settings.idle_retention,
            script: Script::new(SCRIPT),
            index_script: Script::new(INDEX_SCRIPT),
            index_read_script: Script::new(INDEX_READ_SCRIPT),
            indexed: Mutex::new(IndexedRecently {
                since: Instant::now(),
                seen: HashSet::new(),
                hasher: foldhash::fast::RandomState::default(),
            }),
        })
    }

    /// `{prefix}:rl:{account}:{scope}:{rule}`: the account in braces is the hash tag.
    pub fn bucket_key(&self, key: &BucketKey) -> String {
        format!("{}:rl:{{{}}}:{}:{}", self.prefix, key.account, key.scope, key.rule)
    }

    fn index_key(&self) -> String {
        format!("{}:rl-index", self.prefix)
    }

    async fn run<T: redis::FromRedisValue>(
        &self,
        key: &BucketKey,
        limit: &Limit,
        op: &str,
        args: &[String],
    ) -> Result<T, StoreError> {
        let base = self.bucket_key(key);
        let mut inv = self.script.prepare_invoke();
        inv.key(&base).key(format!("{base}:log")).key(format!("{base}:leases")).key(format!("{base}:stats"));
        inv.arg(op)
            .arg(limit.algorithm.as_str())
            .arg(limit.tokens)
            .arg(duration_micros(limit.interval))
            .arg(limit.burst)
            .arg(self.idle_retention.as_secs().max(1));
        for a in args {
            inv.arg(a);
        }
        let mut conn = self.conn.clone();
        timed(self.timeout, inv.invoke_async(&mut conn)).await
    }

    /// How long an index entry is kept after its bucket's last use (ms):
    /// older entries belong to buckets whose statistics have expired, are
    /// not listed, and are dropped by index writes.
    fn index_keep_ms(&self) -> i64 {
        millis(self.idle_retention) + millis(INDEX_REFRESH)
    }

    /// Put the bucket into the index at most once per [`INDEX_REFRESH`] per
    /// process, dropping a batch of stale entries on the way. Kept out of the
    /// decision script: the index is one global key, which a Cluster-safe
    /// script may not touch together with a bucket.
    async fn index(&self, key: &BucketKey) {
        if !self.indexed.lock().unwrap_or_else(|p| p.into_inner()).due(key, Instant::now()) {
            return;
        }
        let mut inv = self.index_script.prepare_invoke();
        inv.key(self.index_key())
            .arg(format!("{}:{}:{}", key.account, key.scope, key.rule))
            .arg(self.index_keep_ms())
            .arg(INDEX_TRIM_BATCH)
            // The whole index expires only when no bucket was used for a
            // retention: then every entry in it is stale anyway.
            .arg(millis(self.idle_retention) + millis(INDEX_REFRESH));
        let mut conn = self.conn.clone();
        if timed::<i64>(self.timeout, inv.invoke_async(&mut conn)).await.is_err() {
            // Try again on the next decision.
            self.indexed.lock().unwrap_or_else(|p| p.into_inner()).forget(key);
        }
    }
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

async fn timed<T>(t: Duration, f: impl std::future::Future<Output = Result<T, RedisError>>) -> Result<T, StoreError> {
    match tokio::time::timeout(t, f).await {
        Ok(r) => r.map_err(classify),
        Err(elapsed) => Err(StoreError::Unavailable(Box::new(elapsed))),
    }
}

fn parse<T: redis::FromRedisValue>(v: Value) -> Result<T, StoreError> {
    redis::from_redis_value(v).map_err(|e| StoreError::Protocol(e.to_string()))
}

fn micros(d: Duration) -> String {
    duration_micros(d).to_string()
}

fn from_micros(v: i64) -> Duration {
    Duration::from_micros(u64::try_from(v).unwrap_or(0))
}

impl QuotaStore for RedisStore {
    fn decide<'a>(&'a self, a: &'a DecideArgs) -> StoreResult<'a, StoreDecision> {
        Box::pin(async move {
            let (lmax, lid, lttl) = match &a.lease {
                Some(l) => (l.max_in_flight, l.id.clone(), micros(l.ttl)),
                None => (0, String::new(), "0".into()),
            };
            let args = [
                a.cost.to_string(),
                micros(a.ceiling),
                if a.shadow { "1" } else { "0" }.to_owned(),
                lmax.to_string(),
                lid,
                lttl,
                a.lane.as_str().to_owned(),
            ];
            let (granted, second, third): (i64, Value, Value) = self.run(&a.key, &a.limit, "decide", &args).await?;
            self.index(&a.key).await;
            if granted == 1 {
                let wait: i64 = parse(second)?;
                let lease: String = parse(third)?;
                Ok(StoreDecision::Granted { wait: from_micros(wait), lease: (!lease.is_empty()).then_some(lease) })
            } else {
                let reason: String = parse(second)?;
                let retry: i64 = parse(third)?;
                let reason = reason.parse().map_err(|_| StoreError::Protocol(format!("unknown reason {reason}")))?;
                Ok(StoreDecision::Refused { reason, retry_after: (retry >= 0).then(|| from_micros(retry)) })
            }
        })
    }

    fn penalize<'a>(
        &'a self,
        key: &'a BucketKey,
        limit: &'a Limit,
        floor: Duration,
        retry_after: Option<Duration>,
    ) -> StoreResult<'a, Duration> {
        Box::pin(async move {
            let args = [micros(floor), micros(retry_after.unwrap_or_default())];
            let blocked: i64 = self.run(key, limit, "penalize", &args).await?;
            self.index(key).await;
            Ok(from_micros(blocked))
        })
    }

    fn observe<'a>(
        &'a self,
        key: &'a BucketKey,
        limit: &'a Limit,
        remaining: u64,
        reset_in: Option<Duration>,
    ) -> StoreResult<'a, ()> {
        Box::pin(async move {
            let args = [remaining.to_string(), micros(reset_in.unwrap_or_else(|| limit.refill_one()))];
            let _: i64 = self.run(key, limit, "observe", &args).await?;
            Ok(())
        })
    }

    fn peek<'a>(&'a self, key: &'a BucketKey, limit: &'a Limit) -> StoreResult<'a, Usage> {
        Box::pin(async move {
            let (remaining, capacity, next): (u64, u64, i64) = self.run(key, limit, "peek", &[]).await?;
            Ok(Usage { remaining, capacity, next_in: from_micros(next) })
        })
    }

    fn release<'a>(&'a self, key: &'a BucketKey, lease: &'a str) -> StoreResult<'a, ()> {
        Box::pin(async move {
            let _: i64 =
                self.run(key, &Limit::fixed_window(1, Duration::from_secs(1)), "release", &[lease.to_owned()]).await?;
            Ok(())
        })
    }

    fn record_refusal<'a>(&'a self, key: &'a BucketKey, reason: RefusalReason, lane: Priority) -> StoreResult<'a, ()> {
        Box::pin(async move {
            let limit = Limit::fixed_window(1, Duration::from_secs(1));
            let args = [reason.as_str().to_owned(), lane.as_str().to_owned()];
            let _: i64 = self.run(key, &limit, "refuse", &args).await?;
            self.index(key).await;
            Ok(())
        })
    }

    fn stats<'a>(&'a self, key: &'a BucketKey) -> StoreResult<'a, BucketStats> {
        Box::pin(async move {
            let mut conn = self.conn.clone();
            let cmd = redis::cmd("HGETALL").arg(format!("{}:stats", self.bucket_key(key))).clone();
            let fields: HashMap<String, i64> = timed(self.timeout, cmd.query_async(&mut conn)).await?;
            Ok(BucketStats::from_fields(fields.iter().map(|(k, v)| (k.as_str(), *v))))
        })
    }

    fn list_buckets_since(&self, since_ms: i64, limit: usize) -> StoreResult<'_, Vec<BucketKey>> {
        Box::pin(async move {
            if limit == 0 {
                return Ok(Vec::new());
            }
            let mut conn = self.conn.clone();
            let mut inv = self.index_read_script.prepare_invoke();
            inv.key(self.index_key())
                .arg("list")
                .arg(self.index_keep_ms())
                .arg(since_ms.saturating_sub(millis(INDEX_REFRESH)).max(0))
                // 0: no limit (the script's word for "all").
                .arg(if limit == usize::MAX { 0 } else { limit });
            let members: Vec<String> = timed(self.timeout, inv.invoke_async(&mut conn)).await?;
            let mut keys: Vec<BucketKey> = members.iter().filter_map(|m| parse_member(m)).collect();
            keys.sort();
            Ok(keys)
        })
    }

    /// No bucket lives in this process (Redis expires them); only the
    /// index-write set of a period that is over goes. Returns 0.
    fn forget_idle(&self) -> usize {
        self.indexed.lock().unwrap_or_else(|p| p.into_inner()).expire(Instant::now());
        0
    }

    fn live_buckets(&self) -> StoreResult<'_, Vec<(&'static str, u64)>> {
        Box::pin(async move { Ok(vec![("redis", self.count_indexed().await?)]) })
    }
}

impl RedisStore {
    /// Buckets in the index whose statistics are still kept.
    async fn count_indexed(&self) -> Result<u64, StoreError> {
        let mut conn = self.conn.clone();
        let mut inv = self.index_read_script.prepare_invoke();
        inv.key(self.index_key()).arg("count").arg(self.index_keep_ms()).arg(0);
        timed(self.timeout, inv.invoke_async(&mut conn)).await
    }
}

/// `account:scope:rule` (accounts and scopes never contain ':').
fn parse_member(m: &str) -> Option<BucketKey> {
    let mut parts = m.splitn(3, ':');
    let account = parts.next()?.to_owned();
    let scope = parts.next()?.to_owned();
    let rule = RuleId(parts.next()?.to_owned());
    Some(BucketKey { account, scope, rule })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quota::rule::RuleId;

    #[test]
    fn the_index_write_set_goes_when_its_period_ends_even_without_another_decision() {
        let start = Instant::now();
        let mut set = IndexedRecently {
            since: start,
            seen: HashSet::new(),
            hasher: foldhash::fast::RandomState::default(),
        };
        let keys: Vec<BucketKey> = (0..1000)
            .map(|i| BucketKey { account: format!("acct-{i}"), scope: "feeds".into(), rule: RuleId("r".into()) })
            .collect();
        for key in &keys {
            assert!(set.due(key, start), "first use in a period writes the index");
            assert!(!set.due(key, start + Duration::from_secs(1)), "a second one does not");
        }
        set.expire(start + INDEX_REFRESH - Duration::from_millis(1));
        assert_eq!(set.seen.len(), 1000, "kept until the period is over");
        // The sweep, with no decision in between: the memory goes at once.
        set.expire(start + INDEX_REFRESH);
        assert_eq!(set.seen.capacity(), 0);
        assert!(set.due(&keys[0], start + INDEX_REFRESH), "the next period writes again");
    }
}
