//! Data retention: finished deliveries (with their attempts and, once no
//! delivery needs it, their event) and audit rows are deleted when they
//! are older than the configured periods (docs/delivery.md, "Retention").
//!
//! - DELIVERED deliveries: kept [`RetentionConfig::delivered`] (30 days)
//!   after they were delivered; FAILED ones [`RetentionConfig::failed`]
//!   (90 days) after they failed — a redelivery makes one PENDING again and
//!   takes it out of reach. PENDING and DELIVERING rows are never deleted,
//!   and an event stays while any delivery of it remains.
//! - Audit rows: kept [`RetentionConfig::audit`] (365 days).
//! - Sessions and quota history are bounded elsewhere (expired sessions are
//!   swept by the server; quota history keeps 24 hours).
//!
//! One instance at a time runs it, holding the `retention` [`JobLease`].
//! Work goes in batches of [`RetentionConfig::batch`] rows, each batch one
//! short transaction: deliveries are locked with `FOR UPDATE SKIP LOCKED` on
//! PostgreSQL (a row a redelivery holds is skipped, not waited for), SQLite
//! takes its write lock up front (`BEGIN IMMEDIATE`). The outbox's claim
//! never waits on more than one batch. A pass stops after
//! [`RetentionConfig::max_batches`] and resumes at the next.

use std::future::Future;
use std::time::Duration;

use sqlx::{AnyConnection, Row};

use crate::clock::{SharedClock, Timestamp};
use crate::db::{Backend, Db};
use crate::delivery::model::DeliveryStatus;
use crate::delivery::row::status_index_terms;
use crate::job_lease::JobLease;

/// The lease's name in `job_leases`.
pub const LEASE_NAME: &str = "retention";

const DAY: Duration = Duration::from_secs(86_400);

/// How long data is kept and how the deleting is paced.
#[derive(Debug, Clone)]
pub struct RetentionConfig {
    /// DELIVERED deliveries, their attempts and events (30 days).
    pub delivered: Duration,
    /// FAILED deliveries, their attempts and events (90 days).
    pub failed: Duration,
    /// Audit rows (365 days).
    pub audit: Duration,
    /// Rows per statement and transaction.
    pub batch: u32,
    /// Batches of one kind per pass, at most.
    pub max_batches: u32,
    /// Time between passes.
    pub every: Duration,
}

impl Default for RetentionConfig {
    fn default() -> Self {
        RetentionConfig {
            delivered: 30 * DAY,
            failed: 90 * DAY,
            audit: 365 * DAY,
            batch: 1000,
            max_batches: 500,
            every: Duration::from_secs(600),
        }
    }
}

/// What one pass removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RetentionReport {
    /// False when another instance holds the lease (nothing was done).
    pub ran: bool,
    pub deliveries: u64,
    pub attempts: u64,
    pub events: u64,
    pub audit: u64,
}

/// The retention task of one instance.
#[derive(Debug, Clone)]
pub struct Retention {
    db: Db,
    clock: SharedClock,
    config: RetentionConfig,
    lease: JobLease,
}

impl Retention {
    /// `instance` names this instance in the lease.
    pub fn new(db: Db, clock: SharedClock, config: RetentionConfig, instance: &str) -> Self {
        // Long enough to outlive a slow batch; renewed after every batch.
        let ttl = (config.every * 2).max(Duration::from_secs(300));
        let lease = JobLease::new(db.clone(), LEASE_NAME, instance, ttl);
        Retention { db, clock, config, lease }
    }

    pub fn config(&self) -> &RetentionConfig {
        &self.config
    }

    /// One pass with cut-offs computed from `now`: if this instance holds
    /// (or can take) the lease, delete what has outlived its period.
    pub async fn run_once(&self, now: Timestamp) -> Result<RetentionReport, sqlx::Error> {
        let mut report = RetentionReport::default();
        if !self.lease.acquire(now).await? {
            return Ok(report);
        }
        report.ran = true;
        for (status, keep) in [(DeliveryStatus::Delivered, self.config.delivered), (DeliveryStatus::Failed, self.config.failed)] {
            let cutoff = now - keep;
            for _ in 0..self.config.max_batches {
                let (deliveries, attempts, events) = self.delivery_batch(status, cutoff).await?;
                report.deliveries += deliveries;
                report.attempts += attempts;
                report.events += events;
                if deliveries < u64::from(self.config.batch) || !self.renew().await? {
                    break;
                }
            }
        }
        let cutoff = now - self.config.audit;
        for _ in 0..self.config.max_batches {
            let n = self.audit_batch(cutoff).await?;
            report.audit += n;
            if n < u64::from(self.config.batch) || !self.renew().await? {
                break;
            }
        }
        Ok(report)
    }

    /// Renew the lease between batches; false if another instance has it now.
    async fn renew(&self) -> Result<bool, sqlx::Error> {
        self.lease.acquire(self.clock.now()).await
    }

    /// Pass every [`RetentionConfig::every`] until `shutdown`; errors are
    /// logged and the next pass tries again. The lease is released at the end.
    pub async fn run(self, shutdown: impl Future<Output = ()>) {
        let this = &self;
        crate::periodic::every(self.config.every, shutdown, move || async move {
            match this.run_once(this.clock.now()).await {
                Ok(r) if r.deliveries + r.audit > 0 => tracing::info!(
                    deliveries = r.deliveries,
                    attempts = r.attempts,
                    events = r.events,
                    audit = r.audit,
                    "retention removed old rows"
                ),
                Ok(_) => {}
                Err(e) => tracing::warn!(error = &e as &dyn std::error::Error, "retention pass failed"),
            }
        })
        .await;
        if let Err(e) = self.lease.release().await {
            tracing::debug!(error = %e, "releasing the retention lease failed");
        }
    }

    /// A transaction that holds the write lock on SQLite from its start, so
    /// reading candidates and deleting them cannot race another writer.
    async fn begin(&self) -> Result<sqlx::Transaction<'static, sqlx::Any>, sqlx::Error> {
        match self.db.backend() {
            Backend::Postgres => self.db.pool().begin().await,
            Backend::Sqlite => self.db.pool().begin_with("BEGIN IMMEDIATE").await,
        }
    }

    /// Delete up to one batch of `status` deliveries finished before
    /// `cutoff`, their attempts, and their events no other delivery needs:
    /// (deliveries, attempts, events) removed.
    async fn delivery_batch(&self, status: DeliveryStatus, cutoff: Timestamp) -> Result<(u64, u64, u64), sqlx::Error> {
        let lock = match self.db.backend() {
            Backend::Postgres => " FOR UPDATE SKIP LOCKED",
            Backend::Sqlite => "",
        };
        let mut tx = self.begin().await?;
        // created_at <= finished_at, so a (…, created_at) listing index
        // narrows the search (the status index for FAILED, the created index
        // for DELIVERED: `status_index_terms`) and finished_at decides.
        let rows = sqlx::query(&format!(
            "SELECT id, event_id FROM deliveries WHERE status = $1{} AND created_at < $2 AND finished_at < $2 \
             ORDER BY created_at LIMIT $3{lock}",
            status_index_terms(status)
        ))
        .bind(status.as_str())
        .bind(cutoff.as_millis())
        .bind(i64::from(self.config.batch))
        .fetch_all(&mut *tx)
        .await?;
        if rows.is_empty() {
            tx.commit().await?;
            return Ok((0, 0, 0));
        }
        let mut ids = Vec::with_capacity(rows.len());
        let mut events = Vec::with_capacity(rows.len());
        for r in &rows {
            ids.push(r.try_get::<String, _>("id")?);
            events.push(r.try_get::<String, _>("event_id")?);
        }
        events.sort();
        events.dedup();
        let attempts = delete_in(&mut tx, "DELETE FROM attempts WHERE delivery_id IN", &ids, "").await?;
        let deliveries = delete_in(&mut tx, "DELETE FROM deliveries WHERE id IN", &ids, "").await?;
        let events = delete_in(
            &mut tx,
            "DELETE FROM events WHERE id IN",
            &events,
            " AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.event_id = events.id)",
        )
        .await?;
        tx.commit().await?;
        Ok((deliveries, attempts, events))
    }

    /// Delete up to one batch of audit rows older than `cutoff`.
    async fn audit_batch(&self, cutoff: Timestamp) -> Result<u64, sqlx::Error> {
        let done = sqlx::query("DELETE FROM audit_log WHERE id IN (SELECT id FROM audit_log WHERE at < $1 ORDER BY at LIMIT $2)")
            .bind(cutoff.as_millis())
            .bind(i64::from(self.config.batch))
            .execute(self.db.pool())
            .await?;
        Ok(done.rows_affected())
    }
}

/// `{head} ($1, …, $n){tail}` over `ids`, on `conn`: rows affected.
async fn delete_in(conn: &mut AnyConnection, head: &str, ids: &[String], tail: &str) -> Result<u64, sqlx::Error> {
    let marks = (1..=ids.len()).map(|i| format!("${i}")).collect::<Vec<_>>().join(", ");
    let sql = format!("{head} ({marks}){tail}");
    // Not kept prepared (see `quota::history`): one statement per batch length.
    let mut q = sqlx::query(&sql).persistent(false);
    for id in ids {
        q = q.bind(id.as_str());
    }
    Ok(q.execute(&mut *conn).await?.rows_affected())
}
