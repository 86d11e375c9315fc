//! The delivery repository over [`Db`]: merchants, intake, the worker's claim
//! and write-back, and the breaker's compare-and-set. Read queries for the UI
//! are in `queries.rs`; operations in `ops.rs`.
//!
//! The same SQL runs on PostgreSQL and SQLite except for the claim, where
//! PostgreSQL locks rows with `FOR UPDATE SKIP LOCKED` so several instances
//! claim disjoint sets, and SQLite (one node) relies on one atomic
//! `UPDATE … RETURNING`.

use std::time::Duration;

use sqlx::{AnyConnection, Row};

use super::merchant_breaker::{MerchantBreaker, Window};
use super::ladder::Decision;
use super::model::*;
use super::row::{self, BREAKER_COLS, DELIVERY_COLS, MERCHANT_COLS};
use crate::clock::Timestamp;
use crate::db::{Backend, Db};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database error")]
    Db(#[from] sqlx::Error),
    #[error("merchant {0} does not exist")]
    UnknownMerchant(MerchantId),
    #[error("delivery {0} does not exist")]
    UnknownDelivery(DeliveryId),
    #[error("the event cannot be stored as JSON")]
    Payload(#[from] serde_json::Error),
    #[error(transparent)]
    Invalid(#[from] ModelError),
    /// A batch this call was stored with failed as a whole (shared by every call in it).
    #[error(transparent)]
    Batch(std::sync::Arc<StoreError>),
}

/// A claimed delivery with everything needed to send it.
#[derive(Debug, Clone)]
pub struct Job {
    pub delivery: Delivery,
    pub merchant: Merchant,
    pub payload: String,
}

/// The attempt to record and the state to write after it.
#[derive(Debug, Clone)]
pub struct AttemptRecord {
    pub attempt: Attempt,
    pub decision: Decision,
}

/// The delivery tables.
#[derive(Debug, Clone)]
pub struct DeliveryStore {
    db: Db,
}

impl DeliveryStore {
    pub fn new(db: Db) -> Self {
        DeliveryStore { db }
    }

    pub fn db(&self) -> &Db {
        &self.db
    }

    /// Insert a merchant and its breaker on `conn` (the caller's transaction).
    pub(crate) async fn insert_merchant(conn: &mut AnyConnection, m: &Merchant, breaker: &MerchantBreaker) -> Result<(), StoreError> {
        bind_merchant(sqlx::query(&format!("INSERT INTO merchants ({MERCHANT_COLS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)")), m)
            .execute(&mut *conn)
            .await?;
        bind_breaker(sqlx::query(&format!("INSERT INTO merchant_breakers ({BREAKER_COLS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)")), breaker)
            .execute(&mut *conn)
            .await?;
        Ok(())
    }

    /// Write a merchant's URL, scheme and secrets on `conn` (the caller's transaction).
    pub(crate) async fn update_merchant(conn: &mut AnyConnection, m: &Merchant) -> Result<(), StoreError> {
        // Same column order as MERCHANT_COLS, so one binder serves insert and update.
        let sql = "UPDATE merchants SET name = $2, url = $3, scheme = $4, secret = $5, previous_secret = $6, \
             previous_secret_expires_at = $7, created_at = $8, updated_at = $9 WHERE id = $1";
        let done = bind_merchant(sqlx::query(sql), m).execute(&mut *conn).await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::UnknownMerchant(m.id.clone()));
        }
        Ok(())
    }

    pub async fn merchant(&self, id: &MerchantId) -> Result<Merchant, StoreError> {
        let row = sqlx::query(&format!("SELECT {MERCHANT_COLS} FROM merchants WHERE id = $1"))
            .bind(id.as_str())
            .fetch_optional(self.db.pool())
            .await?
            .ok_or_else(|| StoreError::UnknownMerchant(id.clone()))?;
        Ok(row::merchant(&row)?)
    }

    /// Claim up to `limit` due deliveries for `owner` until `now + lease`:
    /// first DELIVERING ones whose lease ran out (their worker died
    /// mid-send) or that `owner` itself holds (its last step failed half
    /// way, e.g. while the database restarted), then PENDING ones whose time has come, longest-due first.
    /// Two statements rather than one with `OR`, so each walks its own
    /// partial index in order and stops at `limit` — no sort of a backlog.
    pub async fn claim(&self, owner: &str, now: Timestamp, lease: Duration, limit: u32) -> Result<Vec<DeliveryId>, StoreError> {
        self.claim_taking_back(owner, now, lease, limit, true).await
    }

    /// [`DeliveryStore::claim`]; DELIVERING rows are taken back only when
    /// `take_back`. That statement walks the partial index of rows in
    /// flight, and on PostgreSQL each row that left DELIVERING leaves an
    /// entry there until the table is vacuumed, so its cost grows with the
    /// deliveries finished since: a step loop runs it now and then, not at
    /// every claim (`Worker`, docs/decisions.md "Taking back expired
    /// claims now and then").
    pub(crate) async fn claim_taking_back(&self, owner: &str, now: Timestamp, lease: Duration, limit: u32, take_back: bool) -> Result<Vec<DeliveryId>, StoreError> {
        let lock = match self.db.backend() {
            Backend::Postgres => " FOR UPDATE SKIP LOCKED",
            Backend::Sqlite => "",
        };
        let mut out = Vec::new();
        // A claim of this owner's own is due at once: an owner is one step
        // loop (an instance runs several, each under its own name), which
        // steps one batch at a time, so when it claims, nothing it claimed
        // before is still in flight (a step that failed half way, the
        // database gone, left them). Other owners' claims are due when their
        // lease runs out.
        let reclaim = "status = 'DELIVERING' AND (lease_until <= $3 OR lease_owner = $1)";
        for (due, order, wanted) in [(reclaim, "lease_until", take_back), ("status = 'PENDING' AND next_attempt_at <= $3", "next_attempt_at", true)] {
            if !wanted {
                continue;
            }
            let left = i64::from(limit) - out.len() as i64;
            if left <= 0 {
                break;
            }
            let sql = format!(
                "UPDATE deliveries SET status = 'DELIVERING', lease_owner = $1, lease_until = $2, updated_at = $3 \
                 WHERE id IN (SELECT id FROM deliveries WHERE {due} ORDER BY {order} LIMIT $4{lock}) RETURNING id"
            );
            let rows = sqlx::query(&sql).bind(owner).bind((now + lease).as_millis()).bind(now.as_millis()).bind(left).fetch_all(self.db.pool()).await?;
            for r in &rows {
                out.push(DeliveryId::from_db(r.try_get::<String, _>("id")?));
            }
        }
        Ok(out)
    }

    pub async fn delivery(&self, id: &DeliveryId) -> Result<Delivery, StoreError> {
        Self::delivery_on(&mut *self.db.pool().acquire().await?, id).await
    }

    /// [`DeliveryStore::delivery`] on `conn` (inside the caller's transaction).
    pub(crate) async fn delivery_on(conn: &mut AnyConnection, id: &DeliveryId) -> Result<Delivery, StoreError> {
        let row = sqlx::query(&format!("SELECT {DELIVERY_COLS} FROM deliveries WHERE id = $1"))
            .bind(id.as_str())
            .fetch_optional(&mut *conn)
            .await?
            .ok_or_else(|| StoreError::UnknownDelivery(id.clone()))?;
        Ok(row::delivery(&row)?)
    }

    /// Put a claimed delivery back without an attempt: the breaker is open.
    /// Spends nothing. Returns false if the lease was lost meanwhile.
    ///
    /// If the breaker closed since the caller looked, the delivery is due at
    /// once: otherwise a deferral racing the close (and its queue drain)
    /// would sit out a needless pause. On PostgreSQL a drain that runs
    /// concurrently waits for this row and re-checks it, so one of the two
    /// always makes it due.
    pub async fn defer(&self, id: &DeliveryId, owner: &str, until: Timestamp, now: Timestamp) -> Result<bool, StoreError> {
        let mut tx = self.db.pool().begin().await?;
        if self.db.backend() == Backend::Postgres {
            // Hold the breaker row still while deferring: a close either
            // committed before (the UPDATE below sees it) or waits for us (and
            // its drain then sees this row deferred). SQLite runs one writer
            // at a time, so there the single statement suffices.
            sqlx::query(
                "SELECT state FROM merchant_breakers WHERE merchant_id = (SELECT merchant_id FROM deliveries WHERE id = $1) FOR SHARE",
            )
            .bind(id.as_str())
            .fetch_optional(&mut *tx)
            .await?;
        }
        let done = sqlx::query(
            "UPDATE deliveries SET status = 'PENDING', lease_owner = NULL, lease_until = NULL, \
             next_attempt_at = CASE WHEN EXISTS (SELECT 1 FROM merchant_breakers b \
               WHERE b.merchant_id = deliveries.merchant_id AND b.state = 'closed') THEN $4 ELSE $3 END, \
             deferred = TRUE, deferrals = deferrals + 1, last_deferred_at = $4, updated_at = $4 \
             WHERE id = $1 AND status = 'DELIVERING' AND lease_owner = $2",
        )
        .bind(id.as_str())
        .bind(owner)
        .bind(until.as_millis())
        .bind(now.as_millis())
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(done.rows_affected() == 1)
    }

    /// Put a claimed delivery back unsent until `until`, spending nothing:
    /// no attempt, no deferral, no ladder step (its merchant is held).
    pub async fn hold(&self, id: &DeliveryId, owner: &str, until: Timestamp, now: Timestamp) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "UPDATE deliveries SET status = 'PENDING', lease_owner = NULL, lease_until = NULL, next_attempt_at = $3, \
             updated_at = $4 WHERE id = $1 AND status = 'DELIVERING' AND lease_owner = $2",
        )
        .bind(id.as_str())
        .bind(owner)
        .bind(until.as_millis())
        .bind(now.as_millis())
        .execute(self.db.pool())
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Put every row still claimed under `owner` back to PENDING, due as it
    /// was: an instance's hand-off at shutdown, once its steps have stopped
    /// (so none of those rows is in flight). Other instances claim them at
    /// their next step instead of after the lease. Returns how many.
    pub async fn release_claims(&self, owner: &str, now: Timestamp) -> Result<u64, StoreError> {
        let done = sqlx::query(
            "UPDATE deliveries SET status = 'PENDING', lease_owner = NULL, lease_until = NULL, updated_at = $2 \
             WHERE status = 'DELIVERING' AND lease_owner = $1",
        )
        .bind(owner)
        .bind(now.as_millis())
        .execute(self.db.pool())
        .await?;
        Ok(done.rows_affected())
    }

    /// Fail a claimed delivery without an attempt (a ceiling passed while it waited).
    pub async fn fail_unsent(&self, id: &DeliveryId, owner: &str, reason: FailedReason, now: Timestamp) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "UPDATE deliveries SET status = 'FAILED', failed_reason = $3, lease_owner = NULL, lease_until = NULL, \
             deferred = FALSE, finished_at = $4, updated_at = $4 WHERE id = $1 AND status = 'DELIVERING' AND lease_owner = $2",
        )
        .bind(id.as_str())
        .bind(owner)
        .bind(reason.as_str())
        .bind(now.as_millis())
        .execute(self.db.pool())
        .await?;
        Ok(done.rows_affected() == 1)
    }

    pub async fn breaker(&self, merchant: &MerchantId) -> Result<MerchantBreaker, StoreError> {
        let row = sqlx::query(&format!("SELECT {BREAKER_COLS} FROM merchant_breakers WHERE merchant_id = $1"))
            .bind(merchant.as_str())
            .fetch_optional(self.db.pool())
            .await?
            .ok_or_else(|| StoreError::UnknownMerchant(merchant.clone()))?;
        Ok(row::breaker(&row)?)
    }

    /// Write `next` only if the row is still at `next.version - 1`. False
    /// when another instance moved it first: re-read and decide again.
    pub async fn cas_breaker(&self, next: &MerchantBreaker) -> Result<bool, StoreError> {
        Self::cas_breaker_on(&mut *self.db.pool().acquire().await?, next).await
    }

    /// [`DeliveryStore::cas_breaker`] on `conn` (inside the caller's transaction).
    pub(crate) async fn cas_breaker_on(conn: &mut AnyConnection, next: &MerchantBreaker) -> Result<bool, StoreError> {
        // Same column order as BREAKER_COLS, so one binder serves insert and update.
        let sql = "UPDATE merchant_breakers SET state = $2, version = $3, pause_ms = $4, failed_probes = $5, opened_at = $6, \
             next_probe_at = $7, probe_delivery_id = $8, probe_started_at = $9, counters_since = $10, updated_at = $11 \
             WHERE merchant_id = $1 AND version = $12";
        let done = bind_breaker(sqlx::query(sql), next).bind(next.version - 1).execute(&mut *conn).await?;
        Ok(done.rows_affected() == 1)
    }

    /// The merchant's attempts since `since` (inclusive): total and breaker failures.
    pub async fn window(&self, merchant: &MerchantId, since: Timestamp) -> Result<Window, StoreError> {
        let row = sqlx::query(
            "SELECT CAST(COUNT(*) AS BIGINT) AS n, \
             CAST(COALESCE(SUM(CASE WHEN outcome IN ('server_error', 'network', 'timeout') THEN 1 ELSE 0 END), 0) AS BIGINT) AS f \
             FROM attempts WHERE merchant_id = $1 AND at >= $2",
        )
        .bind(merchant.as_str())
        .bind(since.as_millis())
        .fetch_one(self.db.pool())
        .await?;
        let n: i64 = row.try_get("n")?;
        let f: i64 = row.try_get("f")?;
        Ok(Window { attempts: u32::try_from(n).unwrap_or(u32::MAX), failures: u32::try_from(f).unwrap_or(u32::MAX) })
    }

    /// The breaker closed: every deferred delivery of the merchant is due now.
    pub async fn drain_deferred(&self, merchant: &MerchantId, now: Timestamp) -> Result<u64, StoreError> {
        Self::drain_deferred_on(&mut *self.db.pool().acquire().await?, merchant, now).await
    }

    /// [`DeliveryStore::drain_deferred`] on `conn` (inside the caller's transaction).
    pub(crate) async fn drain_deferred_on(conn: &mut AnyConnection, merchant: &MerchantId, now: Timestamp) -> Result<u64, StoreError> {
        let done = sqlx::query(
            "UPDATE deliveries SET next_attempt_at = $2, deferred = FALSE, updated_at = $2 \
             WHERE merchant_id = $1 AND deferred = TRUE AND status = 'PENDING'",
        )
        .bind(merchant.as_str())
        .bind(now.as_millis())
        .execute(&mut *conn)
        .await?;
        Ok(done.rows_affected())
    }
}

pub(crate) type AnyQuery<'q> = sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>>;

/// Bind a merchant row's columns in `MERCHANT_COLS` order.
fn bind_merchant<'q>(q: AnyQuery<'q>, m: &'q Merchant) -> AnyQuery<'q> {
    q.bind(m.id.as_str())
        .bind(m.name.as_str())
        .bind(m.url.as_str())
        .bind(m.scheme.as_str())
        .bind(m.secret.as_str())
        .bind(m.previous_secret.as_deref())
        .bind(m.previous_secret_expires_at.map(Timestamp::as_millis))
        .bind(m.created_at.as_millis())
        .bind(m.updated_at.as_millis())
}

/// Bind an attempt row's columns in `ATTEMPT_COLS` order.
pub(crate) fn bind_attempt<'q>(q: AnyQuery<'q>, a: &'q Attempt) -> Result<AnyQuery<'q>, serde_json::Error> {
    let json = |h: &Option<Headers>| h.as_ref().map(serde_json::to_string).transpose();
    Ok(q.bind(a.id.as_str())
        .bind(a.delivery_id.as_str())
        .bind(a.merchant_id.as_str())
        .bind(a.at.as_millis())
        .bind(a.ladder.as_str())
        .bind(a.outcome.as_str())
        .bind(a.status_code.map(i64::from))
        .bind(a.latency_ms)
        .bind(a.error.as_deref())
        .bind(a.response_body.as_deref())
        .bind(a.probe)
        .bind(json(&a.request_headers)?)
        .bind(json(&a.response_headers)?)
        .bind(a.response_truncated))
}

/// Bind a breaker row's columns in `BREAKER_COLS` order.
fn bind_breaker<'q>(q: AnyQuery<'q>, b: &'q MerchantBreaker) -> AnyQuery<'q> {
    q.bind(b.merchant_id.as_str())
        .bind(b.status.as_str())
        .bind(b.version)
        .bind(millis(b.pause))
        .bind(i64::from(b.failed_probes))
        .bind(b.opened_at.map(Timestamp::as_millis))
        .bind(b.next_probe_at.map(Timestamp::as_millis))
        .bind(b.probe_delivery_id.as_ref().map(DeliveryId::as_str))
        .bind(b.probe_started_at.map(Timestamp::as_millis))
        .bind(b.counters_since.as_millis())
        .bind(b.updated_at.as_millis())
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}
