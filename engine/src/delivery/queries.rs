//! Read queries for the UI and the HTTP API: the filtered delivery list with
//! keyset pagination, delivery detail with its ladder timeline, merchants,
//! breakers, counts. Every list query is served by an index of
//! `migrations/*/0003_delivery.sql`; nothing scans the table for a page.

use serde::Serialize;
use sqlx::Row;

use super::merchant_breaker::{MerchantBreaker, MerchantBreakerConfig, Window};
use super::ladder::{self, LadderConfig, PlannedAttempt};
use super::model::*;
use super::row::{self, push_filter, Arg, Sql, ATTEMPT_COLS, BREAKER_COLS, DELIVERY_COLS, MERCHANT_COLS};
use super::store::{DeliveryStore, StoreError};
use super::worker::ladder_state;
use crate::clock::Timestamp;

/// Page sizes are clamped to this.
pub const MAX_PAGE: u32 = 500;

/// A delivery with its attempts and the ladder timeline (detail page).
#[derive(Debug, Clone, Serialize)]
pub struct DeliveryDetail {
    pub delivery: Delivery,
    pub payload: String,
    pub attempts: Vec<Attempt>,
    pub timeline: Timeline,
}

/// Where a delivery stands on its ladders.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Timeline {
    pub fast_attempts_used: u32,
    pub fast_attempts_budget: u32,
    pub slow_steps_used: u32,
    pub slow_steps_budget: u32,
    /// Attempts still to come if each fails like the last (empty once finished).
    pub upcoming: Vec<PlannedAttempt>,
    /// 48 h after the slow ladder's first step, once it has started.
    pub slow_ceiling_at: Option<Timestamp>,
    /// 30 days after the cycle started.
    pub age_ceiling_at: Timestamp,
    /// Times the merchant breaker held this delivery back (no attempt spent).
    pub breaker_deferrals: u32,
    pub last_deferred_at: Option<Timestamp>,
    /// The merchant breaker right now.
    pub breaker_status: BreakerStatus,
    pub breaker_next_probe_at: Option<Timestamp>,
}

/// The timeline of `d`, given its merchant's breaker. Pure.
pub fn timeline(d: &Delivery, breaker: &MerchantBreaker, cfg: &LadderConfig) -> Timeline {
    let state = ladder_state(d);
    let (slow_ceiling_at, age_ceiling_at) = ladder::ceilings(&state, cfg);
    let upcoming = match d.status {
        DeliveryStatus::Pending | DeliveryStatus::Delivering => ladder::plan(&state, d.ladder, d.next_attempt_at, cfg),
        DeliveryStatus::Delivered | DeliveryStatus::Failed => Vec::new(),
    };
    Timeline {
        fast_attempts_used: d.fast_attempts,
        fast_attempts_budget: cfg.fast_attempts,
        slow_steps_used: d.slow_steps,
        slow_steps_budget: cfg.slow_pauses.len() as u32,
        upcoming,
        slow_ceiling_at,
        age_ceiling_at,
        breaker_deferrals: d.deferrals,
        last_deferred_at: d.last_deferred_at,
        breaker_status: breaker.status,
        breaker_next_probe_at: breaker.next_probe_at,
    }
}

/// A merchant with its breaker, for the Merchants and Breakers pages.
#[derive(Debug, Clone, Serialize)]
pub struct MerchantOverview {
    pub merchant: Merchant,
    pub breaker: MerchantBreaker,
    /// The breaker's sliding window right now (failure ratio).
    pub window: Window,
}

/// Deliveries per unfinished or failed status, for the Overview. DELIVERED
/// is left out on purpose: it grows without bound and counting it means
/// walking most of the table (use `count_deliveries` where it is really needed).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct StatusCounts {
    pub pending: u64,
    pub delivering: u64,
    pub failed: u64,
}

impl DeliveryStore {
    /// Deliveries matching `filter`, newest first, `limit` (≤ 500) after `after`.
    pub async fn list_deliveries(&self, filter: &DeliveryFilter, after: Option<&Cursor>, limit: u32) -> Result<DeliveryPage, StoreError> {
        let limit = limit.clamp(1, MAX_PAGE);
        let sql = listing(filter, after.map(|c| ("<", c)), "DESC", i64::from(limit) + 1);
        let rows = sql.query().fetch_all(self.db().pool()).await?;
        let mut items = rows.iter().map(row::delivery).collect::<Result<Vec<_>, _>>()?;
        let next = if items.len() > limit as usize {
            items.truncate(limit as usize);
            items.last().map(|d| Cursor { created_at: d.created_at, id: d.id.clone() })
        } else {
            None
        };
        Ok(DeliveryPage { items, next })
    }

    /// The page just newer than `before` (the "previous" page), newest
    /// first, and whether still newer rows exist. Walks the same indexes as
    /// [`DeliveryStore::list_deliveries`], in the other direction.
    pub async fn list_deliveries_before(&self, filter: &DeliveryFilter, before: &Cursor, limit: u32) -> Result<(Vec<Delivery>, bool), StoreError> {
        let limit = limit.clamp(1, MAX_PAGE);
        let sql = listing(filter, Some((">", before)), "ASC", i64::from(limit) + 1);
        let rows = sql.query().fetch_all(self.db().pool()).await?;
        let mut items = rows.iter().map(row::delivery).collect::<Result<Vec<_>, _>>()?;
        let newer = items.len() > limit as usize;
        items.truncate(limit as usize);
        items.reverse();
        Ok((items, newer))
    }

    /// (id, name) of every merchant, by name: the filter's choices.
    pub async fn merchant_names(&self) -> Result<Vec<(MerchantId, String)>, StoreError> {
        let rows = sqlx::query("SELECT id, name FROM merchants ORDER BY name, id").fetch_all(self.db().pool()).await?;
        Ok(rows
            .iter()
            .map(|r| Ok((MerchantId::from_db(r.try_get("id")?), r.try_get("name")?)))
            .collect::<Result<_, sqlx::Error>>()?)
    }

    pub async fn attempts(&self, id: &DeliveryId) -> Result<Vec<Attempt>, StoreError> {
        let rows = sqlx::query(&format!("SELECT {ATTEMPT_COLS} FROM attempts WHERE delivery_id = $1 ORDER BY at, id"))
            .bind(id.as_str())
            .fetch_all(self.db().pool())
            .await?;
        Ok(rows.iter().map(row::attempt).collect::<Result<_, _>>()?)
    }

    /// A delivery, its payload, attempts and timeline.
    pub async fn delivery_detail(&self, id: &DeliveryId, cfg: &LadderConfig) -> Result<DeliveryDetail, StoreError> {
        let delivery = self.delivery(id).await?;
        let attempts = self.attempts(id).await?;
        let breaker = self.breaker(&delivery.merchant_id).await?;
        let row = sqlx::query("SELECT payload FROM events WHERE id = $1").bind(delivery.event_id.as_str()).fetch_one(self.db().pool()).await?;
        let timeline = timeline(&delivery, &breaker, cfg);
        Ok(DeliveryDetail { payload: row.try_get("payload")?, delivery, attempts, timeline })
    }

    /// Every merchant with its breaker and current window, by name.
    pub async fn list_merchants(&self, now: Timestamp, cfg: &MerchantBreakerConfig) -> Result<Vec<MerchantOverview>, StoreError> {
        let rows = sqlx::query(&format!("SELECT {MERCHANT_COLS} FROM merchants ORDER BY name, id")).fetch_all(self.db().pool()).await?;
        let mut out = Vec::with_capacity(rows.len());
        for r in &rows {
            let merchant = row::merchant(r)?;
            let breaker = self.breaker(&merchant.id).await?;
            let window = self.window(&merchant.id, breaker.window_start(now, cfg)).await?;
            out.push(MerchantOverview { merchant, breaker, window });
        }
        Ok(out)
    }

    /// Breakers that are not closed (open or probing), for the Overview and Breakers pages.
    pub async fn open_breakers(&self) -> Result<Vec<MerchantBreaker>, StoreError> {
        let rows = sqlx::query(&format!("SELECT {BREAKER_COLS} FROM merchant_breakers WHERE state <> 'closed' ORDER BY merchant_id"))
            .fetch_all(self.db().pool())
            .await?;
        Ok(rows.iter().map(row::breaker).collect::<Result<_, _>>()?)
    }

    /// PENDING, DELIVERING and FAILED counts, each an index-only count on
    /// its own index (measured on PostgreSQL with a million rows: tens of
    /// milliseconds per hundred thousand counted rows).
    pub async fn status_counts(&self) -> Result<StatusCounts, StoreError> {
        let mut n = [0_u64; 3];
        for (slot, status) in n.iter_mut().zip([DeliveryStatus::Pending, DeliveryStatus::Delivering, DeliveryStatus::Failed]) {
            let filter = DeliveryFilter { status: Some(status), ..DeliveryFilter::default() };
            *slot = self.count_deliveries(&filter).await?;
        }
        Ok(StatusCounts { pending: n[0], delivering: n[1], failed: n[2] })
    }

    /// Attempts after `since`, counted by outcome per `bucket` of time:
    /// (bucket start in Unix ms, outcome, count), oldest first.
    pub async fn attempt_outcomes_since(
        &self,
        since: Timestamp,
        bucket: std::time::Duration,
    ) -> Result<Vec<(i64, AttemptOutcome, u64)>, StoreError> {
        let bucket_ms = i64::try_from(bucket.as_millis()).unwrap_or(i64::MAX).max(1);
        let rows = sqlx::query(
            "SELECT CAST((at / $2) * $2 AS BIGINT) AS slot, outcome, CAST(COUNT(*) AS BIGINT) AS n \
             FROM attempts WHERE at > $1 GROUP BY slot, outcome ORDER BY slot",
        )
        .bind(since.as_millis())
        .bind(bucket_ms)
        .fetch_all(self.db().pool())
        .await?;
        rows.iter()
            .map(|row| {
                let outcome: String = row.try_get("outcome")?;
                Ok((row.try_get("slot")?, outcome.parse::<AttemptOutcome>()?, u64::try_from(row.try_get::<i64, _>("n")?).unwrap_or(0)))
            })
            .collect()
    }

    /// When the oldest PENDING delivery was created (`None`: nothing pending).
    pub async fn oldest_pending_created_at(&self) -> Result<Option<Timestamp>, StoreError> {
        let sql = format!("SELECT MIN(created_at) FROM deliveries WHERE status = 'PENDING'{}", row::status_index_terms(DeliveryStatus::Pending));
        let at: Option<i64> = sqlx::query_scalar(&sql)
            .fetch_one(self.db().pool())
            .await?;
        Ok(at.map(Timestamp::from_millis))
    }

    /// How many deliveries match `filter` (for bulk-retry confirmation).
    /// Without a status, the rows in flight are counted apart (they are in
    /// no listing index: `row::status_index_terms`).
    pub async fn count_deliveries(&self, filter: &DeliveryFilter) -> Result<u64, StoreError> {
        let mut sql = Sql::new("SELECT CAST((SELECT COUNT(*) FROM deliveries");
        push_filter(&mut sql, filter);
        if filter.status.is_none() {
            sql.raw(" AND status <> 'DELIVERING') + (SELECT COUNT(*) FROM deliveries");
            push_filter(&mut sql, filter);
            sql.raw(" AND status = 'DELIVERING'");
        }
        sql.raw(") AS BIGINT) AS n");
        let row = sql.query().fetch_one(self.db().pool()).await?;
        Ok(u64::try_from(row.try_get::<i64, _>("n")?).unwrap_or(0))
    }
}

/// The listing's query: `filter`'s rows on the `keyset` side of a cursor
/// ("<" older, ">" newer), ordered by (created_at, id) in `dir`, at most
/// `limit`. Without a status in the filter it is two index walks, merged:
/// the settled rows through the partial listing indexes and the rows in
/// flight, which those leave out (migrations/*/0015_listing_indexes.sql,
/// ascending since 0016), through their own `deliveries_in_flight`; there
/// are only as many of those as the workers hold.
fn listing(filter: &DeliveryFilter, keyset: Option<(&str, &Cursor)>, dir: &str, limit: i64) -> Sql {
    fn branch(sql: &mut Sql, filter: &DeliveryFilter, part: &str, keyset: Option<(&str, &Cursor)>, dir: &str, limit: i64) {
        sql.raw(&format!("SELECT {DELIVERY_COLS} FROM deliveries"));
        push_filter(sql, filter);
        sql.raw(part);
        if let Some((op, c)) = keyset {
            // Row-value comparison: PostgreSQL and SQLite both seek the
            // (…, created_at, id) indexes with it, in either direction.
            sql.push(&format!(" AND (created_at, id) {op} ("), Arg::Int(c.created_at.as_millis()), "");
            sql.push(", ", Arg::Text(c.id.as_str().into()), ")");
        }
        sql.push(&format!(" ORDER BY created_at {dir}, id {dir} LIMIT "), Arg::Int(limit), "");
    }
    let mut sql = Sql::new("");
    if filter.status.is_some() {
        branch(&mut sql, filter, "", keyset, dir, limit);
    } else {
        sql.raw("SELECT * FROM (");
        branch(&mut sql, filter, " AND status <> 'DELIVERING'", keyset, dir, limit);
        sql.raw(") AS settled UNION ALL SELECT * FROM (");
        branch(&mut sql, filter, " AND status = 'DELIVERING'", keyset, dir, limit);
        sql.push(&format!(") AS in_flight ORDER BY created_at {dir}, id {dir} LIMIT "), Arg::Int(limit), "");
    }
    sql
}
