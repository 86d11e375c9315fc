//! Operations support staff and admins run: create and edit merchants, rotate
//! secrets, redeliver, retry now, bulk retry, reset a breaker. Each returns
//! what it changed (before/after) for the caller to write to the audit log.
//!
//! Every write is one conditional UPDATE on the row's current status, so an
//! operation racing a worker or another operator either applies once or
//! reports the status it found; no delivery is ever copied or dropped (a
//! redelivery reuses the same row and the same `X-Webhook-Id`).

use std::time::Duration;

use serde::Serialize;
use sqlx::Row;

use super::merchant_breaker::{self, MerchantBreaker, MerchantBreakerConfig};
use super::model::*;
use super::row::{push_filter, Arg, Sql};
use super::signing::{self, SigningError};
use super::ssrf::{SsrfError, SsrfPolicy};
use super::store::{DeliveryStore, StoreError};
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
}

/// Register a merchant with a closed breaker. The URL is checked now
/// (scheme, literal addresses) and again at every connect.
pub async fn create_merchant(store: &DeliveryStore, input: MerchantIn, ssrf: &SsrfPolicy, cfg: &MerchantBreakerConfig, now: Timestamp) -> Result<Merchant, OpsError> {
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
    store.insert_merchant(&m, &MerchantBreaker::closed(m.id.clone(), now, cfg)).await?;
    Ok(m)
}

/// Point a merchant at a new URL.
pub async fn update_merchant_url(store: &DeliveryStore, id: &MerchantId, url: &str, ssrf: &SsrfPolicy, now: Timestamp) -> Result<Change<Merchant>, OpsError> {
    ssrf.check_url(url)?;
    let before = store.merchant(id).await?;
    let after = Merchant { url: url.to_owned(), updated_at: now, ..before.clone() };
    store.update_merchant(&after).await?;
    Ok(Change { before, after })
}

/// Start signing with `new_secret` (generated when `None`); the old secret
/// keeps signing too, for `overlap`, so receivers can switch without a gap.
pub async fn rotate_secret(
    store: &DeliveryStore,
    id: &MerchantId,
    new_secret: Option<String>,
    overlap: Duration,
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
    store.update_merchant(&after).await?;
    Ok(Change { before, after })
}

/// Send a FAILED delivery again from the start of both ladders, as the same
/// row with the same `X-Webhook-Id`. The 30-day ceiling restarts with it.
pub async fn redeliver(store: &DeliveryStore, id: &DeliveryId, now: Timestamp) -> Result<Change<Delivery>, OpsError> {
    let before = store.delivery(id).await?;
    if !redeliver_row(store, id, now).await? {
        let status = store.delivery(id).await?.status;
        return Err(OpsError::WrongStatus { id: id.clone(), status, needed: DeliveryStatus::Failed });
    }
    Ok(Change { before, after: store.delivery(id).await? })
}

/// Make a PENDING delivery due now (its ladders are untouched; an open
/// breaker still defers it).
pub async fn retry_now(store: &DeliveryStore, id: &DeliveryId, now: Timestamp) -> Result<Change<Delivery>, OpsError> {
    let before = store.delivery(id).await?;
    if !retry_now_row(store, id, now).await? {
        let status = store.delivery(id).await?.status;
        return Err(OpsError::WrongStatus { id: id.clone(), status, needed: DeliveryStatus::Pending });
    }
    Ok(Change { before, after: store.delivery(id).await? })
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
pub async fn bulk_retry(store: &DeliveryStore, filter: &DeliveryFilter, cap: u32, now: Timestamp) -> Result<BulkRetry, OpsError> {
    Ok(bulk_retry_after(store, filter, None, cap, now).await?.done)
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
/// would meet them again.
pub async fn bulk_retry_after(
    store: &DeliveryStore,
    filter: &DeliveryFilter,
    after: Option<&Cursor>,
    cap: u32,
    now: Timestamp,
) -> Result<BulkBatch, OpsError> {
    let cap = cap.clamp(1, BULK_RETRY_MAX);
    let mut sql = Sql::new("SELECT id, status, created_at FROM deliveries");
    push_filter(&mut sql, filter);
    sql.raw(" AND status IN ('FAILED', 'PENDING')");
    if let Some(c) = after {
        sql.push(" AND (created_at, id) < (", Arg::Int(c.created_at.as_millis()), "");
        sql.push(", ", Arg::Text(c.id.as_str().into()), ")");
    }
    sql.push(" ORDER BY created_at DESC, id DESC LIMIT ", Arg::Int(i64::from(cap)), "");
    let rows = sql.query().fetch_all(store.db().pool()).await.map_err(StoreError::from)?;
    let mut out = BulkBatch::default();
    for r in &rows {
        let id = DeliveryId::from_db(r.try_get("id").map_err(StoreError::from)?);
        let status: String = r.try_get("status").map_err(StoreError::from)?;
        let created_at: i64 = r.try_get("created_at").map_err(StoreError::from)?;
        out.examined += 1;
        if status == DeliveryStatus::Failed.as_str() {
            if redeliver_row(store, &id, now).await? {
                out.done.redelivered.push(id.clone());
            }
        } else if retry_now_row(store, &id, now).await? {
            out.done.retried.push(id.clone());
        }
        if rows.len() == cap as usize {
            out.next = Some(Cursor { created_at: Timestamp::from_millis(created_at), id });
        }
    }
    Ok(out)
}

/// Close a merchant's breaker by hand and let its deferred queue drain.
pub async fn reset_breaker(store: &DeliveryStore, merchant: &MerchantId, cfg: &MerchantBreakerConfig, now: Timestamp) -> Result<Change<MerchantBreaker>, OpsError> {
    loop {
        let before = store.breaker(merchant).await?;
        let after = merchant_breaker::reset(&before, now, cfg);
        if store.cas_breaker(&after).await? {
            store.drain_deferred(merchant, now).await?;
            return Ok(Change { before, after });
        }
    }
}

async fn redeliver_row(store: &DeliveryStore, id: &DeliveryId, now: Timestamp) -> Result<bool, StoreError> {
    let done = sqlx::query(
        "UPDATE deliveries SET status = 'PENDING', ladder = 'fast', fast_attempts = 0, slow_steps = 0, \
         slow_started_at = NULL, cycle_started_at = $2, next_attempt_at = $2, deferred = FALSE, failed_reason = NULL, \
         finished_at = NULL, updated_at = $2 WHERE id = $1 AND status = 'FAILED'",
    )
    .bind(id.as_str())
    .bind(now.as_millis())
    .execute(store.db().pool())
    .await?;
    Ok(done.rows_affected() == 1)
}

async fn retry_now_row(store: &DeliveryStore, id: &DeliveryId, now: Timestamp) -> Result<bool, StoreError> {
    let done = sqlx::query(
        "UPDATE deliveries SET next_attempt_at = $2, deferred = FALSE, updated_at = $2 WHERE id = $1 AND status = 'PENDING'",
    )
    .bind(id.as_str())
    .bind(now.as_millis())
    .execute(store.db().pool())
    .await?;
    Ok(done.rows_affected() == 1)
}
