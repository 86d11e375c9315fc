//! Operations support staff and admins run: create and edit merchants, rotate
//! secrets, redeliver, retry now, bulk retry, reset a merchant's breaker.
//! This is the one home of these mutations and their audit actions: the
//! web pages and the HTTP API both call these functions with the actor's
//! name, and each writes its audit row in the same database transaction as
//! the change, so a change that commits always has its row and a failed
//! audit write leaves nothing changed.
//!
//! Every write is one conditional UPDATE on the row's current status, so an
//! operation racing a worker or another operator either applies once or
//! reports the status it found; no delivery is ever copied or dropped (a
//! redelivery reuses the same row and the same `X-Webhook-Id`). Inside a
//! transaction the write comes before any read (SQLite refuses to upgrade a
//! reading transaction another connection wrote past); the record "before"
//! is read just ahead of it.

use std::time::Duration;

use serde::Serialize;
use sqlx::{AnyConnection, Row};

use super::merchant_breaker::{self, MerchantBreaker, MerchantBreakerConfig};
use super::model::*;
use super::row::{push_filter, Arg, Sql};
use super::signing::{self, SigningError};
use super::ssrf::{SsrfError, SsrfPolicy};
use super::store::{DeliveryStore, StoreError};
use crate::audit::{self, AuditAction, AuditEntry, AuditError};
use crate::clock::Timestamp;

/// Bulk retry never touches more rows than this in one call.
pub const BULK_RETRY_MAX: u32 = 1000;

#[derive(Debug, thiserror::Error)]
pub enum OpsError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("delivery {id} is {status}, the operation needs {needed}")]
    WrongStatus { id: DeliveryId, status: DeliveryStatus, needed: DeliveryStatus },
    #[error("merchant URL refused")]
    Url(#[from] SsrfError),
    #[error("merchant secret refused")]
    Secret(#[from] SigningError),
    #[error("merchant name must not be empty")]
    EmptyName,
    #[error("writing the audit log")]
    Audit(#[from] AuditError),
}

impl From<sqlx::Error> for OpsError {
    fn from(e: sqlx::Error) -> Self {
        OpsError::Store(StoreError::Db(e))
    }
}

/// Who asked for an operation, and why when they said: the audit row's
/// actor and reason.
#[derive(Debug, Clone, Copy)]
pub struct Actor<'a> {
    pub name: &'a str,
    pub reason: Option<&'a str>,
}

impl<'a> Actor<'a> {
    pub fn named(name: &'a str) -> Actor<'a> {
        Actor { name, reason: None }
    }

    pub fn with_reason(name: &'a str, reason: &'a str) -> Actor<'a> {
        Actor { name, reason: Some(reason) }
    }
}

/// Write the audit row of `action` on the change's own connection.
async fn audited<T: Serialize>(
    conn: &mut AnyConnection,
    by: Actor<'_>,
    action: AuditAction,
    target: &str,
    before: Option<&T>,
    after: Option<&T>,
    now: Timestamp,
) -> Result<(), OpsError> {
    let entry = AuditEntry { actor: by.name, action, target, before, after, reason: by.reason };
    Ok(audit::record_in(conn, entry, now).await?)
}

/// Register a merchant with a closed breaker. The URL is checked now
/// (scheme, literal addresses) and again at every connect.
pub async fn create_merchant(
    store: &DeliveryStore,
    input: MerchantIn,
    ssrf: &SsrfPolicy,
    cfg: &MerchantBreakerConfig,
    by: Actor<'_>,
    now: Timestamp,
) -> Result<Merchant, OpsError> {
    if input.name.trim().is_empty() {
        return Err(OpsError::EmptyName);
    }
    ssrf.check_url(&input.url)?;
    let secret = input.secret.unwrap_or_else(|| signing::generate_secret(input.scheme));
    signing::validate_secret(input.scheme, &secret)?;
    let m = Merchant {
        id: MerchantId::generate(),
        name: input.name.trim().to_owned(),
        url: input.url,
        scheme: input.scheme,
        secret,
        previous_secret: None,
        previous_secret_expires_at: None,
        created_at: now,
        updated_at: now,
    };
    let mut tx = store.db().pool().begin().await?;
    DeliveryStore::insert_merchant(&mut tx, &m, &MerchantBreaker::closed(m.id.clone(), now, cfg)).await?;
    audited(&mut tx, by, AuditAction::MerchantCreate, m.id.as_str(), None, Some(&m), now).await?;
    tx.commit().await?;
    Ok(m)
}

/// Point a merchant at a new URL.
pub async fn update_merchant_url(
    store: &DeliveryStore,
    id: &MerchantId,
    url: &str,
    ssrf: &SsrfPolicy,
    by: Actor<'_>,
    now: Timestamp,
) -> Result<Change<Merchant>, OpsError> {
    ssrf.check_url(url)?;
    let before = store.merchant(id).await?;
    let after = Merchant { url: url.to_owned(), updated_at: now, ..before.clone() };
    write_merchant(store, by, AuditAction::MerchantUpdateUrl, Change { before, after }, now).await
}

/// Write a changed merchant and its audit row in one transaction.
async fn write_merchant(store: &DeliveryStore, by: Actor<'_>, action: AuditAction, change: Change<Merchant>, now: Timestamp) -> Result<Change<Merchant>, OpsError> {
    let mut tx = store.db().pool().begin().await?;
    DeliveryStore::update_merchant(&mut tx, &change.after).await?;
    audited(&mut tx, by, action, change.after.id.as_str(), Some(&change.before), Some(&change.after), now).await?;
    tx.commit().await?;
    Ok(change)
}

/// Start signing with `new_secret` (generated when `None`); the old secret
/// keeps signing too, for `overlap`, so receivers can switch without a gap.
pub async fn rotate_secret(
    store: &DeliveryStore,
    id: &MerchantId,
    new_secret: Option<String>,
    overlap: Duration,
    by: Actor<'_>,
    now: Timestamp,
) -> Result<Change<Merchant>, OpsError> {
    let before = store.merchant(id).await?;
    let secret = new_secret.unwrap_or_else(|| signing::generate_secret(before.scheme));
    signing::validate_secret(before.scheme, &secret)?;
    let after = Merchant {
        previous_secret: Some(before.secret.clone()),
        previous_secret_expires_at: Some(now + overlap),
        secret,
        updated_at: now,
        ..before.clone()
    };
    write_merchant(store, by, AuditAction::MerchantRotateSecret, Change { before, after }, now).await
}

/// Send a FAILED delivery again from the start of both ladders, as the same
/// row with the same `X-Webhook-Id`. The 30-day ceiling restarts with it.
pub async fn redeliver(store: &DeliveryStore, id: &DeliveryId, by: Actor<'_>, now: Timestamp) -> Result<Change<Delivery>, OpsError> {
    one_delivery(store, id, DeliveryOp::Redeliver, by, now).await
}

/// Make a PENDING delivery due now (its ladders are untouched; an open
/// breaker still defers it).
pub async fn retry_now(store: &DeliveryStore, id: &DeliveryId, by: Actor<'_>, now: Timestamp) -> Result<Change<Delivery>, OpsError> {
    one_delivery(store, id, DeliveryOp::RetryNow, by, now).await
}

/// The operations on one delivery, each with the status it needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeliveryOp {
    Redeliver,
    RetryNow,
}

impl DeliveryOp {
    pub fn needs(self) -> DeliveryStatus {
        match self {
            DeliveryOp::Redeliver => DeliveryStatus::Failed,
            DeliveryOp::RetryNow => DeliveryStatus::Pending,
        }
    }

    pub fn action(self) -> AuditAction {
        match self {
            DeliveryOp::Redeliver => AuditAction::DeliveryRedeliver,
            DeliveryOp::RetryNow => AuditAction::DeliveryRetryNow,
        }
    }

    /// Past participle for messages: "only a FAILED one can be redelivered".
    pub fn done(self) -> &'static str {
        match self {
            DeliveryOp::Redeliver => "redelivered",
            DeliveryOp::RetryNow => "retried now",
        }
    }

    async fn apply(self, conn: &mut AnyConnection, id: &DeliveryId, now: Timestamp) -> Result<bool, StoreError> {
        match self {
            DeliveryOp::Redeliver => redeliver_row(conn, id, now).await,
            DeliveryOp::RetryNow => retry_now_row(conn, id, now).await,
        }
    }
}

/// Run `op` on one delivery and audit it, in one transaction.
pub async fn one_delivery(store: &DeliveryStore, id: &DeliveryId, op: DeliveryOp, by: Actor<'_>, now: Timestamp) -> Result<Change<Delivery>, OpsError> {
    let before = store.delivery(id).await?;
    let mut tx = store.db().pool().begin().await?;
    if !op.apply(&mut tx, id, now).await? {
        drop(tx);
        let status = store.delivery(id).await?.status;
        return Err(OpsError::WrongStatus { id: id.clone(), status, needed: op.needs() });
    }
    let after = DeliveryStore::delivery_on(&mut tx, id).await?;
    audited(&mut tx, by, op.action(), id.as_str(), Some(&before), Some(&after), now).await?;
    tx.commit().await?;
    Ok(Change { before, after })
}

/// What a bulk retry did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct BulkRetry {
    /// FAILED deliveries sent again from the start.
    pub redelivered: Vec<DeliveryId>,
    /// PENDING deliveries made due now.
    pub retried: Vec<DeliveryId>,
}

impl BulkRetry {
    pub fn count(&self) -> usize {
        self.redelivered.len() + self.retried.len()
    }
}

/// Redeliver every FAILED and retry every PENDING delivery matching
/// `filter`, newest first, at most `cap` (itself at most [`BULK_RETRY_MAX`]).
pub async fn bulk_retry(store: &DeliveryStore, filter: &DeliveryFilter, cap: u32, by: Actor<'_>, now: Timestamp) -> Result<BulkRetry, OpsError> {
    Ok(bulk_retry_after(store, filter, None, cap, by, now).await?.done)
}

/// One batch of a bulk retry that walks the whole filtered set.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct BulkBatch {
    pub done: BulkRetry,
    /// FAILED and PENDING rows looked at (some may have changed meanwhile).
    pub examined: u64,
    /// Pass back as `after` for the next batch; `None` when the set is done.
    pub next: Option<Cursor>,
}

/// Like [`bulk_retry`], but only rows older than `after` (keyset order,
/// newest first): calling it again with the returned cursor walks the whole
/// filtered set once, however large, without touching a row twice — the
/// rows a batch changed stay PENDING, so an offset or a re-query by status
/// would meet them again. A batch that changed rows is audited once, as
/// `delivery.bulk_retry` on the filter, in the batch's transaction.
pub async fn bulk_retry_after(
    store: &DeliveryStore,
    filter: &DeliveryFilter,
    after: Option<&Cursor>,
    cap: u32,
    by: Actor<'_>,
    now: Timestamp,
) -> Result<BulkBatch, OpsError> {
    let cap = cap.clamp(1, BULK_RETRY_MAX);
    let mut sql = Sql::new("SELECT id, status, created_at FROM deliveries");
    push_filter(&mut sql, filter);
    // FAILED or PENDING, in the status index's own terms.
    sql.raw(super::row::status_index_terms(DeliveryStatus::Failed));
    if let Some(c) = after {
        sql.push(" AND (created_at, id) < (", Arg::Int(c.created_at.as_millis()), "");
        sql.push(", ", Arg::Text(c.id.as_str().into()), ")");
    }
    sql.push(" ORDER BY created_at DESC, id DESC LIMIT ", Arg::Int(i64::from(cap)), "");
    let rows = sql.query().fetch_all(store.db().pool()).await.map_err(StoreError::from)?;
    let mut out = BulkBatch::default();
    let mut tx = store.db().pool().begin().await?;
    for r in &rows {
        let id = DeliveryId::from_db(r.try_get("id").map_err(StoreError::from)?);
        let status: String = r.try_get("status").map_err(StoreError::from)?;
        let created_at: i64 = r.try_get("created_at").map_err(StoreError::from)?;
        out.examined += 1;
        if status == DeliveryStatus::Failed.as_str() {
            if redeliver_row(&mut tx, &id, now).await? {
                out.done.redelivered.push(id.clone());
            }
        } else if retry_now_row(&mut tx, &id, now).await? {
            out.done.retried.push(id.clone());
        }
        if rows.len() == cap as usize {
            out.next = Some(Cursor { created_at: Timestamp::from_millis(created_at), id });
        }
    }
    if out.done.count() > 0 {
        let record = BulkAudit { filter, redelivered: &out.done.redelivered, retried: &out.done.retried };
        audited(&mut tx, by, AuditAction::DeliveryBulkRetry, &filter_target(filter), None, Some(&record), now).await?;
    }
    tx.commit().await?;
    Ok(out)
}

/// The audit record of one bulk-retry batch: the filter and the ids changed.
#[derive(Serialize)]
struct BulkAudit<'a> {
    filter: &'a DeliveryFilter,
    redelivered: &'a [DeliveryId],
    retried: &'a [DeliveryId],
}

/// The audit target of a bulk retry: the filter as `field=value` pairs
/// (`all` when nothing narrows it), so the audit page can search it.
fn filter_target(f: &DeliveryFilter) -> String {
    let mut parts = Vec::new();
    if let Some(s) = f.status {
        parts.push(format!("status={}", s.as_str()));
    }
    if let Some(m) = &f.merchant_id {
        parts.push(format!("merchant={m}"));
    }
    if let Some(t) = &f.event_type {
        parts.push(format!("event_type={t}"));
    }
    if let Some(m) = f.is_money {
        parts.push(format!("money={}", if m { "money" } else { "non_money" }));
    }
    if let Some(l) = f.ladder {
        parts.push(format!("ladder={}", l.as_str()));
    }
    if let Some(t) = f.created_from {
        parts.push(format!("from={}", t.as_millis()));
    }
    if let Some(t) = f.created_to {
        parts.push(format!("to={}", t.as_millis()));
    }
    if parts.is_empty() { "all".to_owned() } else { parts.join("&") }
}

/// Close a merchant's breaker by hand and let its deferred queue drain; the
/// reset, the drain and the audit row commit together.
pub async fn reset_breaker(
    store: &DeliveryStore,
    merchant: &MerchantId,
    cfg: &MerchantBreakerConfig,
    by: Actor<'_>,
    now: Timestamp,
) -> Result<Change<MerchantBreaker>, OpsError> {
    loop {
        let before = store.breaker(merchant).await?;
        let after = merchant_breaker::reset(&before, now, cfg);
        let mut tx = store.db().pool().begin().await?;
        if DeliveryStore::cas_breaker_on(&mut tx, &after).await? {
            DeliveryStore::drain_deferred_on(&mut tx, merchant, now).await?;
            audited(&mut tx, by, AuditAction::MerchantBreakerReset, merchant.as_str(), Some(&before), Some(&after), now).await?;
            tx.commit().await?;
            return Ok(Change { before, after });
        }
    }
}

async fn redeliver_row(conn: &mut AnyConnection, id: &DeliveryId, now: Timestamp) -> Result<bool, StoreError> {
    let done = sqlx::query(
        "UPDATE deliveries SET status = 'PENDING', ladder = 'fast', fast_attempts = 0, slow_steps = 0, \
         slow_started_at = NULL, cycle_started_at = $2, next_attempt_at = $2, deferred = FALSE, failed_reason = NULL, \
         finished_at = NULL, updated_at = $2 WHERE id = $1 AND status = 'FAILED'",
    )
    .bind(id.as_str())
    .bind(now.as_millis())
    .execute(&mut *conn)
    .await?;
    Ok(done.rows_affected() == 1)
}

async fn retry_now_row(conn: &mut AnyConnection, id: &DeliveryId, now: Timestamp) -> Result<bool, StoreError> {
    let done = sqlx::query(
        "UPDATE deliveries SET next_attempt_at = $2, deferred = FALSE, updated_at = $2 WHERE id = $1 AND status = 'PENDING'",
    )
    .bind(id.as_str())
    .bind(now.as_millis())
    .execute(&mut *conn)
    .await?;
    Ok(done.rows_affected() == 1)
}
