//! Redis breaker store: one hash per breaker at `{prefix}:br:{<account>}:<scope>`
//! (hash-tagged by account, so every script touches one slot and runs on
//! Redis Cluster), with a TTL.
//!
//! Two scripts: `load.lua` reads the hash together with Redis `TIME`, which is
//! the clock every instance shares; `cas.lua` writes a new state only if the
//! version is still the one loaded. The transition itself is computed in Rust
//! by [`super::UpstreamBreaker`], so this adapter holds no decision logic.
//!
//! Listing never scans the keyspace (`SCAN` sees one node of a cluster and
//! walks every key of a big single node): every write also puts the
//! breaker's key into a sorted set, `{prefix}:br-index`, scored by the time
//! of the write. The set forgets a member when the breaker's own key would
//! have expired (same TTL), and expires itself when no breaker is written.

use std::collections::HashMap;
use std::future::Future;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use redis::{RedisError, Script, Value};

use super::{BreakerError, BreakerKey, BreakerState, BreakerStore, Loaded, Phase};
use crate::clock::{SharedClock, Timestamp};
use crate::redis_conn::{RedisConn, RedisSettings};

const LOAD: &str = include_str!("lua/load.lua");
const CAS: &str = include_str!("lua/cas.lua");

/// Index members live this much longer than the breaker keys they name, so
/// a member never disappears before its key (the two times come from
/// different calls).
const INDEX_SLACK: Duration = Duration::from_secs(60);
/// Breaker hashes read at once when listing.
const LIST_CONCURRENCY: usize = 32;

/// Upstream breakers in Redis (one node or a cluster).
#[derive(Clone)]
pub struct RedisBreakerStore {
    conn: RedisConn,
    prefix: String,
    timeout: Duration,
    clock: Option<SharedClock>,
    load: Script,
    cas: Script,
}

impl std::fmt::Debug for RedisBreakerStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisBreakerStore").field("prefix", &self.prefix).field("timeout", &self.timeout).finish()
    }
}

impl RedisBreakerStore {
    /// Store calls give up after this long unless the settings say otherwise.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(500);

    /// A store over an existing connection (tests; a single node).
    pub fn new(conn: impl Into<RedisConn>, prefix: impl Into<String>) -> Self {
        RedisBreakerStore {
            conn: conn.into(),
            prefix: prefix.into(),
            timeout: Self::DEFAULT_TIMEOUT,
            clock: None,
            load: Script::new(LOAD),
            cas: Script::new(CAS),
        }
    }

    /// Connect as `settings` say (one node or a cluster, within the timeout);
    /// calls then time out after `settings.timeout`.
    pub async fn connect(settings: &RedisSettings) -> Result<Self, BreakerError> {
        let conn = RedisConn::connect(settings).await.map_err(|e| BreakerError::Store(Box::new(e)))?;
        Ok(RedisBreakerStore::new(conn, settings.prefix.clone()).with_timeout(settings.timeout))
    }

    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Read `now` from `clock` instead of Redis `TIME`. For tests that travel
    /// in time (a manual clock); production keeps Redis's clock.
    pub fn with_clock(mut self, clock: SharedClock) -> Self {
        self.clock = Some(clock);
        self
    }

    fn key(&self, key: &BreakerKey) -> String {
        format!("{}:br:{{{}}}:{}", self.prefix, key.account(), key.scope())
    }

    fn index_key(&self) -> String {
        format!("{}:br-index", self.prefix)
    }

    /// `now` from a Redis `TIME` reply, unless a test clock overrides it.
    fn now(&self, secs: i64, micros: i64) -> Timestamp {
        match &self.clock {
            Some(clock) => clock.now(),
            None => Timestamp::from_micros(secs.saturating_mul(1_000_000).saturating_add(micros)),
        }
    }

    async fn timed<T>(&self, op: impl Future<Output = Result<T, RedisError>>) -> Result<T, BreakerError> {
        match tokio::time::timeout(self.timeout, op).await {
            Ok(result) => result.map_err(|e| BreakerError::Store(Box::new(e))),
            Err(elapsed) => Err(BreakerError::Store(Box::new(elapsed))),
        }
    }

    /// Record that `redis_key` was written at `now`, and forget members
    /// whose keys have expired.
    async fn index(&self, redis_key: &str, now: Timestamp, ttl: Duration) -> Result<(), BreakerError> {
        let keep = ttl + INDEX_SLACK;
        let keep_ms = i64::try_from(keep.as_millis()).unwrap_or(i64::MAX);
        let mut pipe = redis::pipe();
        pipe.zadd(self.index_key(), redis_key, now.as_millis()).ignore();
        pipe.zrembyscore(self.index_key(), "-inf", now.as_millis().saturating_sub(keep_ms)).ignore();
        pipe.pexpire(self.index_key(), keep_ms).ignore();
        let mut conn = self.conn.clone();
        self.timed(pipe.query_async::<()>(&mut conn)).await
    }

    async fn read(&self, redis_key: String) -> Result<(String, HashMap<String, String>), BreakerError> {
        let mut conn = self.conn.clone();
        let fields = self.timed(redis::cmd("HGETALL").arg(&redis_key).query_async(&mut conn)).await?;
        Ok((redis_key, fields))
    }
}

#[async_trait::async_trait]
impl BreakerStore for RedisBreakerStore {
    async fn load(&self, key: &BreakerKey) -> Result<Loaded, BreakerError> {
        let mut conn = self.conn.clone();
        let redis_key = self.key(key);
        let (secs, micros, fields): (i64, i64, HashMap<String, String>) =
            self.timed(self.load.key(&redis_key).invoke_async(&mut conn)).await?;
        let now = self.now(secs, micros);
        let version = match fields.get("version") {
            None => 0,
            Some(v) => v.parse().map_err(|_| corrupt(&redis_key, "version"))?,
        };
        let state = if fields.is_empty() { BreakerState::default() } else { decode(&redis_key, &fields)? };
        Ok(Loaded { state, version, now })
    }

    async fn compare_and_set(
        &self,
        key: &BreakerKey,
        version: u64,
        state: &BreakerState,
        ttl: Duration,
    ) -> Result<bool, BreakerError> {
        let mut conn = self.conn.clone();
        let redis_key = self.key(key);
        let mut invocation = self.cas.key(&redis_key);
        invocation.arg(version).arg(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1));
        invocation.arg("account").arg(key.account()).arg("scope").arg(key.scope());
        for (field, value) in encode(state) {
            invocation.arg(field).arg(value);
        }
        let written: Vec<i64> = self.timed(invocation.invoke_async(&mut conn)).await?;
        let [1, secs, micros] = written[..] else { return Ok(false) };
        // The state is stored; an index write that fails only hides the
        // breaker from the list until its next write, so it is not an error
        // of the caller's call.
        if let Err(e) = self.index(&redis_key, self.now(secs, micros), ttl).await {
            tracing::warn!(error = %e, breaker = %key, "could not index an upstream breaker");
        }
        Ok(true)
    }

    async fn list(&self) -> Result<(Vec<(BreakerKey, BreakerState)>, Timestamp), BreakerError> {
        let mut conn = self.conn.clone();
        let members: Vec<String> =
            self.timed(redis::cmd("ZRANGE").arg(self.index_key()).arg(0).arg(-1).query_async(&mut conn)).await?;
        let read: Vec<(String, HashMap<String, String>)> = futures::stream::iter(members.into_iter().map(|k| self.read(k)))
            .buffer_unordered(LIST_CONCURRENCY)
            .try_collect()
            .await?;
        let mut all = Vec::with_capacity(read.len());
        for (redis_key, fields) in read {
            // Expired or reset since it was indexed: the member is trimmed by
            // score later. Removing it here could race a write re-creating it.
            let (Some(account), Some(scope)) = (fields.get("account"), fields.get("scope")) else {
                continue;
            };
            let key = BreakerKey::new(Some(account), scope)?;
            all.push((key, decode(&redis_key, &fields)?));
        }
        let (secs, micros): (i64, i64) = self.timed(redis::cmd("TIME").query_async(&mut conn)).await?;
        Ok((all, self.now(secs, micros)))
    }

    async fn reset(&self, key: &BreakerKey) -> Result<(), BreakerError> {
        let mut conn = self.conn.clone();
        let redis_key = self.key(key);
        // Unindex first: a write landing in between re-indexes its key, and
        // the DEL then leaves at most a member that lists as nothing.
        let _: Value = self.timed(redis::cmd("ZREM").arg(self.index_key()).arg(&redis_key).query_async(&mut conn)).await?;
        let _: Value = self.timed(redis::cmd("DEL").arg(&redis_key).query_async(&mut conn)).await?;
        Ok(())
    }
}

fn opt_micros(t: Option<Timestamp>) -> String {
    t.map(|t| t.as_micros().to_string()).unwrap_or_default()
}

fn encode(s: &BreakerState) -> [(&'static str, String); 7] {
    [
        ("phase", s.phase.as_str().to_owned()),
        ("failures", s.consecutive_failures.to_string()),
        ("opened_at", opt_micros(s.opened_at)),
        ("next_probe_at", opt_micros(s.next_probe_at)),
        ("probe_successes", s.probe_successes.to_string()),
        ("probe_until", opt_micros(s.probe_until)),
        ("trips", s.trips.to_string()),
    ]
}

fn corrupt(key: &str, field: &str) -> BreakerError {
    BreakerError::Corrupt { key: key.to_owned(), detail: format!("field {field}") }
}

fn decode(key: &str, f: &HashMap<String, String>) -> Result<BreakerState, BreakerError> {
    fn num<T: std::str::FromStr>(key: &str, f: &HashMap<String, String>, field: &str) -> Result<T, BreakerError> {
        f.get(field).and_then(|v| v.parse().ok()).ok_or_else(|| corrupt(key, field))
    }
    let at = |field: &str| -> Result<Option<Timestamp>, BreakerError> {
        match f.get(field).map(String::as_str) {
            None | Some("") => Ok(None),
            Some(v) => v.parse().map(|m| Some(Timestamp::from_micros(m))).map_err(|_| corrupt(key, field)),
        }
    };
    Ok(BreakerState {
        phase: f.get("phase").and_then(|p| Phase::parse(p)).ok_or_else(|| corrupt(key, "phase"))?,
        consecutive_failures: num(key, f, "failures")?,
        opened_at: at("opened_at")?,
        next_probe_at: at("next_probe_at")?,
        probe_successes: num(key, f, "probe_successes")?,
        probe_until: at("probe_until")?,
        trips: num(key, f, "trips")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_survive_encoding_to_hash_fields() {
        let s = BreakerState {
            phase: Phase::HalfOpen,
            consecutive_failures: 5,
            opened_at: Some(Timestamp::from_secs(10)),
            next_probe_at: Some(Timestamp::from_secs(40)),
            probe_successes: 2,
            probe_until: None,
            trips: 3,
        };
        let fields: HashMap<String, String> = encode(&s).into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
        assert_eq!(decode("k", &fields).expect("decodes"), s);
    }
}
