//! Quota history: what the Quotas pages chart and the Overview sums up.
//!
//! The limiter's counters ([`BucketStats`]) are cumulative and live in the
//! quota store. A sampler ([`QuotaHistory::sample`], run by every instance
//! every [`HistoryConfig::every`]) turns them into per-slot *deltas* in the
//! database:
//!
//! - `quota_history_slots`: one row per sampling slot (its start, aligned to
//!   multiples of `every` since the epoch). Inserting it is the claim: of
//!   several instances only the one whose insert succeeds samples that slot,
//!   so nothing is counted twice. It also holds the slot's totals over all
//!   buckets (grants, penalties, refusals, wait histogram) for the Overview.
//! - `quota_history`: per (account, rule, slot) deltas, only for buckets that
//!   changed in the slot, kept for [`HistoryConfig::retention`] (24 h).
//! - `quota_history_latest`: the cumulative counters last seen per bucket,
//!   which the next delta is computed against. A counter that went down (a
//!   restarted memory store, an expired Redis stats key) counts from zero.
//!   A row outlives its bucket's statistics in the store (the idle
//!   retention) by an hour and is then dropped.
//!
//! The very first pass of a deployment only records a baseline, so counters
//! older than the history are not charged to one slot.
//!
//! Cost per pass grows with the buckets *used since the previous pass*, not
//! with the buckets the store holds or ever held: the store lists only those
//! ([`Limiter::list_buckets_since`]; the baseline pass lists all), at most
//! [`HistoryConfig::max_buckets`] of them (the listing never holds more),
//! then one stats read per listed bucket (16 in flight), their rows of the
//! latest table (by account, in batches) and batched writes for the buckets
//! that changed.

use std::collections::HashMap;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use sqlx::Row;

use crate::clock::Timestamp;
use crate::db::{placeholder_list, value_rows, Db};

use super::limiter::{Limiter, QuotaError};
use super::rule::RuleId;
use super::stats::{BucketKey, BucketStats, WAIT_BUCKETS};

/// Rows per multi-row INSERT (well under both databases' bind limits).
/// Those statements, and the `IN (…)` reads of as many accounts, are not
/// kept prepared (`persistent(false)`): a 200-row INSERT prepared in SQLite
/// holds about 200 KB, each connection would keep one per length it has
/// seen, and they run once a minute (or per page view).
const INSERT_BATCH: usize = 200;
/// Stats reads in flight during a pass.
const READS_IN_FLIGHT: usize = 16;
/// How much longer than the store's statistics a bucket's latest counters
/// are kept. Dropped too early, a bucket whose statistics still exist would
/// have its whole count charged to one slot when it is next used.
const LATEST_MARGIN: Duration = Duration::from_secs(3600);

/// How often and how much the sampler records.
#[derive(Clone, Debug)]
pub struct HistoryConfig {
    /// Sampling interval; slots are aligned to multiples of it.
    pub every: Duration,
    /// How long per-bucket and per-slot rows are kept.
    pub retention: Duration,
    /// The most buckets one pass reads (the rest are left out and counted).
    pub max_buckets: usize,
    /// How long the quota store keeps an idle bucket's statistics (the
    /// limiter's idle retention); the latest counters are kept a little longer.
    pub idle_retention: Duration,
}

impl Default for HistoryConfig {
    fn default() -> Self {
        HistoryConfig {
            every: Duration::from_secs(60),
            retention: Duration::from_secs(24 * 3600),
            max_buckets: 50_000,
            idle_retention: super::memory::DEFAULT_IDLE_RETENTION,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    #[error("database error")]
    Db(#[from] sqlx::Error),
    #[error("reading quota counters failed")]
    Quota(#[from] QuotaError),
}

/// What one call of [`QuotaHistory::sample`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SampleOutcome {
    /// This instance sampled the slot starting at `at_ms`.
    Sampled { at_ms: i64, buckets: usize, changed: usize, baseline: bool },
    /// Another instance (or an earlier call) already took the slot.
    AlreadyTaken { at_ms: i64 },
}

/// One bucket's activity in one slot.
#[derive(Clone, Debug, PartialEq)]
pub struct HistoryPoint {
    pub rule: RuleId,
    pub scope: String,
    /// Start of the slot (when it was sampled), Unix ms.
    pub at_ms: i64,
    /// Length of the span the deltas cover, ms.
    pub span_ms: i64,
    pub grants: u64,
    pub penalties: u64,
    pub refusals: u64,
}

impl HistoryPoint {
    pub fn per_minute(&self, n: u64) -> f64 {
        n as f64 * 60_000.0 / self.span_ms.max(1) as f64
    }
}

/// Activity of all buckets in one sampling slot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlotTotals {
    /// Start of the slot, Unix ms.
    pub at_ms: i64,
    pub span_ms: i64,
    pub grants: u64,
    pub penalties: u64,
    pub refusals: u64,
}

/// Permits one (account, rule) bucket was granted over a period.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BucketGrants {
    pub account: String,
    pub rule: RuleId,
    pub scope: String,
    pub grants: u64,
}

/// Activity of all buckets over a period (the Overview's last hour).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HistoryTotals {
    pub grants: u64,
    pub penalties: u64,
    pub refusals: u64,
    /// Merged wait histogram of the grants (see [`super::stats`]).
    pub wait_histogram: [u64; WAIT_BUCKETS],
    /// Slots the totals cover (0: no history yet).
    pub slots: u64,
}

impl HistoryTotals {
    /// The `q`-quantile of the period's waits, histogram-bucket upper bound.
    pub fn wait_percentile(&self, q: f64) -> Option<Duration> {
        BucketStats { wait_histogram: self.wait_histogram, ..BucketStats::default() }.wait_percentile(q)
    }
}

/// The cumulative counters the deltas are computed from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Counters {
    grants: u64,
    penalties: u64,
    refusals: u64,
    wait_histogram: [u64; WAIT_BUCKETS],
}

impl Counters {
    fn of(s: &BucketStats) -> Counters {
        Counters {
            grants: s.grants,
            penalties: s.penalties,
            refusals: s.refusals_total(),
            wait_histogram: s.wait_histogram,
        }
    }

    /// `self − prev`; a counter that went down was reset, so it counts from zero.
    fn since(&self, prev: &Counters) -> Counters {
        let d = |now: u64, then: u64| if now >= then { now - then } else { now };
        let reset = self.grants < prev.grants
            || self.wait_histogram.iter().zip(prev.wait_histogram.iter()).any(|(n, p)| n < p);
        let mut wait_histogram = [0; WAIT_BUCKETS];
        for (i, slot) in wait_histogram.iter_mut().enumerate() {
            *slot = if reset { self.wait_histogram[i] } else { self.wait_histogram[i] - prev.wait_histogram[i] };
        }
        Counters {
            grants: d(self.grants, prev.grants),
            penalties: d(self.penalties, prev.penalties),
            refusals: d(self.refusals, prev.refusals),
            wait_histogram,
        }
    }

    fn is_zero(&self) -> bool {
        self.grants == 0 && self.penalties == 0 && self.refusals == 0 && self.wait_histogram.iter().all(|n| *n == 0)
    }
}

fn encode_histogram(h: &[u64; WAIT_BUCKETS]) -> String {
    h.iter().map(u64::to_string).collect::<Vec<_>>().join(",")
}

fn decode_histogram(s: &str) -> [u64; WAIT_BUCKETS] {
    let mut h = [0; WAIT_BUCKETS];
    for (slot, n) in h.iter_mut().zip(s.split(',')) {
        *slot = n.trim().parse().unwrap_or(0);
    }
    h
}

fn to_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn to_u64(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// The quota history in the database. Cheap to clone.
#[derive(Clone, Debug)]
pub struct QuotaHistory {
    db: Db,
    config: HistoryConfig,
}

impl QuotaHistory {
    pub fn new(db: Db, config: HistoryConfig) -> QuotaHistory {
        QuotaHistory { db, config }
    }

    pub fn config(&self) -> &HistoryConfig {
        &self.config
    }

    /// The slot `now` falls in (its start, Unix ms).
    pub fn slot_of(&self, now: Timestamp) -> i64 {
        let every = millis(self.config.every).max(1);
        now.as_millis().div_euclid(every) * every
    }

    /// Sample the limiter's counters into the slot `now` falls in, unless
    /// another instance already did.
    pub async fn sample(&self, limiter: &Limiter, now: Timestamp, instance: &str) -> Result<SampleOutcome, HistoryError> {
        let at_ms = self.slot_of(now);
        let every_ms = millis(self.config.every).max(1);
        let previous: Option<i64> =
            sqlx::query_scalar("SELECT MAX(at) FROM quota_history_slots WHERE at < $1 AND wait_hist <> ''")
                .bind(at_ms)
                .fetch_one(self.db.pool())
                .await?;
        let claimed = sqlx::query(
            "INSERT INTO quota_history_slots (at, span_ms, claimed_by, buckets, grants, penalties, refusals, wait_hist) \
             VALUES ($1, $2, $3, 0, 0, 0, 0, '') ON CONFLICT (at) DO NOTHING",
        )
        .bind(at_ms)
        .bind(previous.map_or(every_ms, |p| (at_ms - p).max(1)))
        .bind(instance)
        .execute(self.db.pool())
        .await?
        .rows_affected();
        if claimed == 0 {
            return Ok(SampleOutcome::AlreadyTaken { at_ms });
        }
        let span_ms = previous.map_or(every_ms, |p| (at_ms - p).max(1));
        // The first pass of a deployment (or after a gap longer than the
        // retention) records a baseline only.
        let baseline = previous.is_none();

        // Only buckets used since the previous pass can have changed. One
        // more than the cap is asked for, to know when the cap cut the list.
        let since = previous.unwrap_or(i64::MIN);
        let mut keys = limiter.list_buckets_since(since, self.config.max_buckets.saturating_add(1)).await?;
        if keys.len() > self.config.max_buckets {
            tracing::warn!(max = self.config.max_buckets, "more buckets were used since the last pass than the quota history samples; it samples the first of them");
            keys.truncate(self.config.max_buckets);
        }
        let current: Vec<(BucketKey, Counters)> = futures::stream::iter(keys)
            .map(|key| async move {
                let stats = limiter.stats(&key).await?;
                Ok::<_, QuotaError>((key, Counters::of(&stats)))
            })
            .buffer_unordered(READS_IN_FLIGHT)
            .try_collect()
            .await?;

        let latest = self.latest_of(current.iter().map(|(k, _)| k)).await?;

        let mut totals = Counters::default();
        let mut changed: Vec<(&BucketKey, &Counters, Counters)> = Vec::new();
        for (key, now_counters) in &current {
            let prev = latest.get(&(key.account.clone(), key.rule.0.clone()));
            if prev == Some(now_counters) {
                continue;
            }
            let delta = match prev {
                Some(p) => now_counters.since(p),
                None => now_counters.clone(),
            };
            totals.grants += delta.grants;
            totals.penalties += delta.penalties;
            totals.refusals += delta.refusals;
            for (t, d) in totals.wait_histogram.iter_mut().zip(delta.wait_histogram.iter()) {
                *t += d;
            }
            changed.push((key, now_counters, delta));
        }

        let mut tx = self.db.pool().begin().await?;
        for chunk in changed.chunks(INSERT_BATCH) {
            if !baseline {
                let deltas: Vec<_> = chunk.iter().filter(|(_, _, d)| !d.is_zero()).collect();
                if !deltas.is_empty() {
                    let mut sql = String::from(
                        "INSERT INTO quota_history (account, rule_id, at, scope, span_ms, grants, penalties, refusals) VALUES ",
                    );
                    sql.push_str(&value_rows(deltas.len(), 8, 1));
                    sql.push_str(" ON CONFLICT (account, rule_id, at) DO NOTHING");
                    let mut q = sqlx::query(&sql).persistent(false);
                    for (key, _, d) in &deltas {
                        q = q
                            .bind(key.account.as_str())
                            .bind(key.rule.0.as_str())
                            .bind(at_ms)
                            .bind(key.scope.as_str())
                            .bind(span_ms)
                            .bind(to_i64(d.grants))
                            .bind(to_i64(d.penalties))
                            .bind(to_i64(d.refusals));
                    }
                    q.execute(&mut *tx).await?;
                }
            }
            let mut sql = String::from(
                "INSERT INTO quota_history_latest (account, rule_id, at, grants, penalties, refusals, wait_hist) VALUES ",
            );
            sql.push_str(&value_rows(chunk.len(), 7, 1));
            sql.push_str(
                " ON CONFLICT (account, rule_id) DO UPDATE SET at = excluded.at, grants = excluded.grants, \
                 penalties = excluded.penalties, refusals = excluded.refusals, wait_hist = excluded.wait_hist",
            );
            let mut q = sqlx::query(&sql).persistent(false);
            for (key, c, _) in chunk {
                q = q
                    .bind(key.account.as_str())
                    .bind(key.rule.0.as_str())
                    .bind(at_ms)
                    .bind(to_i64(c.grants))
                    .bind(to_i64(c.penalties))
                    .bind(to_i64(c.refusals))
                    .bind(encode_histogram(&c.wait_histogram));
            }
            q.execute(&mut *tx).await?;
        }
        let totals = if baseline { Counters::default() } else { totals };
        sqlx::query(
            "UPDATE quota_history_slots SET buckets = $2, grants = $3, penalties = $4, refusals = $5, wait_hist = $6 \
             WHERE at = $1",
        )
        .bind(at_ms)
        .bind(to_i64(current.len() as u64))
        .bind(to_i64(totals.grants))
        .bind(to_i64(totals.penalties))
        .bind(to_i64(totals.refusals))
        .bind(encode_histogram(&totals.wait_histogram))
        .execute(&mut *tx)
        .await?;
        let horizon = (now - self.config.retention).as_millis();
        sqlx::query("DELETE FROM quota_history WHERE at < $1").bind(horizon).execute(&mut *tx).await?;
        sqlx::query("DELETE FROM quota_history_slots WHERE at < $1").bind(horizon).execute(&mut *tx).await?;
        sqlx::query("DELETE FROM quota_history_latest WHERE at < $1")
            .bind((now - self.config.idle_retention - self.config.every - LATEST_MARGIN).as_millis())
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(SampleOutcome::Sampled { at_ms, buckets: current.len(), changed: changed.len(), baseline })
    }

    /// The latest counters of `keys`' accounts, read in batches by account.
    async fn latest_of(
        &self,
        keys: impl Iterator<Item = &BucketKey>,
    ) -> Result<HashMap<(String, String), Counters>, HistoryError> {
        let mut accounts: Vec<&str> = keys.map(|k| k.account.as_str()).collect();
        accounts.sort_unstable();
        accounts.dedup();
        let mut latest = HashMap::new();
        for chunk in accounts.chunks(INSERT_BATCH) {
            let mut sql = String::from(
                "SELECT account, rule_id, grants, penalties, refusals, wait_hist FROM quota_history_latest WHERE account IN (",
            );
            sql.push_str(&placeholder_list(chunk.len(), 1));
            sql.push(')');
            let mut q = sqlx::query(&sql).persistent(false);
            for a in chunk {
                q = q.bind(*a);
            }
            for row in q.fetch_all(self.db.pool()).await? {
                let c = Counters {
                    grants: to_u64(row.try_get("grants")?),
                    penalties: to_u64(row.try_get("penalties")?),
                    refusals: to_u64(row.try_get("refusals")?),
                    wait_histogram: decode_histogram(&row.try_get::<String, _>("wait_hist")?),
                };
                latest.insert((row.try_get("account")?, row.try_get("rule_id")?), c);
            }
        }
        Ok(latest)
    }

    /// Permits per minute of each bucket over the `window` before `now`
    /// (buckets without history are absent).
    pub async fn rates(
        &self,
        keys: &[BucketKey],
        now: Timestamp,
        window: Duration,
    ) -> Result<HashMap<BucketKey, f64>, HistoryError> {
        let mut out = HashMap::new();
        if keys.is_empty() {
            return Ok(out);
        }
        let since = (now - window).as_millis();
        let mut accounts: Vec<&str> = keys.iter().map(|k| k.account.as_str()).collect();
        accounts.sort_unstable();
        accounts.dedup();
        let mut sums: HashMap<(String, String), u64> = HashMap::new();
        for chunk in accounts.chunks(INSERT_BATCH) {
            let mut sql = String::from(
                "SELECT account, rule_id, CAST(SUM(grants) AS BIGINT) AS grants FROM quota_history \
                 WHERE at > $1 AND account IN (",
            );
            sql.push_str(&placeholder_list(chunk.len(), 2));
            sql.push_str(") GROUP BY account, rule_id");
            let mut q = sqlx::query(&sql).persistent(false).bind(since);
            for a in chunk {
                q = q.bind(*a);
            }
            for row in q.fetch_all(self.db.pool()).await? {
                sums.insert((row.try_get("account")?, row.try_get("rule_id")?), to_u64(row.try_get("grants")?));
            }
        }
        let minutes = window.as_secs_f64() / 60.0;
        let have_history = self.has_history_since(since).await?;
        for key in keys {
            match sums.get(&(key.account.clone(), key.rule.0.clone())) {
                Some(n) => {
                    out.insert(key.clone(), *n as f64 / minutes);
                }
                None if have_history => {
                    out.insert(key.clone(), 0.0);
                }
                None => {}
            }
        }
        Ok(out)
    }

    async fn has_history_since(&self, since: i64) -> Result<bool, HistoryError> {
        let n: i64 = sqlx::query_scalar("SELECT CAST(COUNT(*) AS BIGINT) FROM quota_history_slots WHERE at > $1 AND wait_hist <> ''")
            .bind(since)
            .fetch_one(self.db.pool())
            .await?;
        Ok(n > 0)
    }

    /// Every slot with activity of `account` since `since`, oldest first.
    pub async fn series(&self, account: &str, since: Timestamp) -> Result<Vec<HistoryPoint>, HistoryError> {
        let rows = sqlx::query(
            "SELECT rule_id, scope, at, span_ms, grants, penalties, refusals FROM quota_history \
             WHERE account = $1 AND at > $2 ORDER BY at, rule_id",
        )
        .bind(account)
        .bind(since.as_millis())
        .fetch_all(self.db.pool())
        .await?;
        rows.iter()
            .map(|row| {
                Ok(HistoryPoint {
                    rule: RuleId(row.try_get("rule_id")?),
                    scope: row.try_get("scope")?,
                    at_ms: row.try_get("at")?,
                    span_ms: row.try_get("span_ms")?,
                    grants: to_u64(row.try_get("grants")?),
                    penalties: to_u64(row.try_get("penalties")?),
                    refusals: to_u64(row.try_get("refusals")?),
                })
            })
            .collect()
    }

    /// The completed sampling slots after `since`: (start, span) in ms, oldest first.
    pub async fn slots_since(&self, since: Timestamp) -> Result<Vec<(i64, i64)>, HistoryError> {
        Ok(self.slot_totals_since(since).await?.into_iter().map(|s| (s.at_ms, s.span_ms)).collect())
    }

    /// Activity of all buckets in the slots after `since`.
    pub async fn totals_since(&self, since: Timestamp) -> Result<HistoryTotals, HistoryError> {
        let rows = sqlx::query(
            "SELECT grants, penalties, refusals, wait_hist FROM quota_history_slots WHERE at > $1 AND wait_hist <> ''",
        )
        .bind(since.as_millis())
        .fetch_all(self.db.pool())
        .await?;
        let mut t = HistoryTotals::default();
        for row in rows {
            t.slots += 1;
            t.grants += to_u64(row.try_get("grants")?);
            t.penalties += to_u64(row.try_get("penalties")?);
            t.refusals += to_u64(row.try_get("refusals")?);
            for (slot, n) in t.wait_histogram.iter_mut().zip(decode_histogram(&row.try_get::<String, _>("wait_hist")?)) {
                *slot += n;
            }
        }
        Ok(t)
    }

    /// Every completed slot after `since` with the activity of all buckets
    /// in it, oldest first (the Overview's charts).
    pub async fn slot_totals_since(&self, since: Timestamp) -> Result<Vec<SlotTotals>, HistoryError> {
        let rows = sqlx::query(
            "SELECT at, span_ms, grants, penalties, refusals FROM quota_history_slots \
             WHERE at > $1 AND wait_hist <> '' ORDER BY at",
        )
        .bind(since.as_millis())
        .fetch_all(self.db.pool())
        .await?;
        rows.iter()
            .map(|row| {
                Ok(SlotTotals {
                    at_ms: row.try_get("at")?,
                    span_ms: row.try_get("span_ms")?,
                    grants: to_u64(row.try_get("grants")?),
                    penalties: to_u64(row.try_get("penalties")?),
                    refusals: to_u64(row.try_get("refusals")?),
                })
            })
            .collect()
    }

    /// Permits granted per (account, rule) in the slots after `since` (the
    /// Overview's busiest accounts), in no particular order.
    pub async fn grants_by_bucket_since(&self, since: Timestamp) -> Result<Vec<BucketGrants>, HistoryError> {
        let rows = sqlx::query(
            "SELECT account, rule_id, MIN(scope) AS scope, CAST(SUM(grants) AS BIGINT) AS grants \
             FROM quota_history WHERE at > $1 GROUP BY account, rule_id",
        )
        .bind(since.as_millis())
        .fetch_all(self.db.pool())
        .await?;
        rows.iter()
            .map(|row| {
                Ok(BucketGrants {
                    account: row.try_get("account")?,
                    rule: RuleId(row.try_get("rule_id")?),
                    scope: row.try_get("scope")?,
                    grants: to_u64(row.try_get("grants")?),
                })
            })
            .collect()
    }

    /// Sample every `config.every` until `shutdown` resolves (the server's
    /// background task). Errors are logged; the next slot tries again.
    pub async fn run(self, limiter: Limiter, instance: String, shutdown: impl std::future::Future<Output = ()>) {
        crate::periodic::every(self.config.every, shutdown, || async {
            let now = limiter.clock().now();
            match self.sample(&limiter, now, &instance).await {
                Ok(outcome) => {
                    tracing::debug!(?outcome, "quota history sampled");
                    // Once a minute, freed memory goes back to the system: a
                    // pass over many buckets built and dropped tables of them
                    // (with Redis the sampler is the only such pass), and
                    // SQLite's idle connections close and its page caches
                    // go (the pass wrote many rows). Cheap when there is
                    // little to give back.
                    self.db.release_idle_memory().await;
                    let _ = tokio::task::spawn_blocking(crate::freed_memory::release).await;
                }
                Err(e) => tracing::warn!(error = &e as &dyn std::error::Error, "sampling quota history failed"),
            }
        })
        .await
    }
}
