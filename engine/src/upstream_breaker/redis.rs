//! Redis breaker store: one hash per breaker at `{prefix}:br:{<account>}:<scope>`
//! (hash-tagged by account, so it runs on Redis Cluster), with a TTL.
//!
//! Two scripts: `load.lua` reads the hash together with Redis `TIME`, which is
//! the clock every instance shares; `cas.lua` writes a new state only if the
//! version is still the one loaded. The transition itself is computed in Rust
//! by [`super::UpstreamBreaker`], so this adapter holds no decision logic.

use std::collections::HashMap;
use std::future::Future;
use std::time::Duration;

use redis::aio::ConnectionManager;
use redis::{RedisError, Script, Value};

use super::{BreakerError, BreakerKey, BreakerState, BreakerStore, Loaded, Phase};
use crate::clock::{SharedClock, Timestamp};

const LOAD: &str = include_str!("lua/load.lua");
const CAS: &str = include_str!("lua/cas.lua");

/// Upstream breakers in Redis.
#[derive(Clone)]
pub struct RedisBreakerStore {
    conn: ConnectionManager,
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
    /// Store calls give up after this long, so an outage is noticed quickly.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(500);

    pub fn new(conn: ConnectionManager, prefix: impl Into<String>) -> Self {
        RedisBreakerStore {
            conn,
            prefix: prefix.into(),
            timeout: Self::DEFAULT_TIMEOUT,
            clock: None,
            load: Script::new(LOAD),
            cas: Script::new(CAS),
        }
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
        let mut invocation = self.cas.key(self.key(key));
        invocation.arg(version).arg(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1));
        invocation.arg("account").arg(key.account()).arg("scope").arg(key.scope());
        for (field, value) in encode(state) {
            invocation.arg(field).arg(value);
        }
        let written: i64 = self.timed(invocation.invoke_async(&mut conn)).await?;
        Ok(written == 1)
    }

    async fn list(&self) -> Result<(Vec<(BreakerKey, BreakerState)>, Timestamp), BreakerError> {
        let mut conn = self.conn.clone();
        let pattern = format!("{}:br:{{*", self.prefix);
        let mut keys = Vec::new();
        let mut cursor = 0u64;
        loop {
            let scan = redis::cmd("SCAN").arg(cursor).arg("MATCH").arg(&pattern).arg("COUNT").arg(500).to_owned();
            let (next, batch): (u64, Vec<String>) = self.timed(scan.query_async(&mut conn)).await?;
            keys.extend(batch);
            if next == 0 {
                break;
            }
            cursor = next;
        }
        let mut all = Vec::with_capacity(keys.len());
        for redis_key in keys {
            let fields: HashMap<String, String> =
                self.timed(redis::cmd("HGETALL").arg(&redis_key).query_async(&mut conn)).await?;
            // Expired between SCAN and HGETALL: gone, skip it.
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
        let _: Value = self.timed(redis::cmd("DEL").arg(self.key(key)).query_async(&mut conn)).await?;
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
