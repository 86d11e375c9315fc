//! The outbox's hot paths in batches: intake of many events, the worker's
//! read of what it claimed, and the write-back of many attempts, each in a
//! fixed number of round trips whatever the batch size.
//!
//! One statement per table carries every row of the batch (multi-row
//! `VALUES`, and `WITH v (…) AS (VALUES …) UPDATE … FROM v` for per-row
//! updates), the same SQL on PostgreSQL and SQLite. A delivery still gets
//! its own attempt row and its own ladder step; only the round trips are
//! shared.

use std::collections::{HashMap, HashSet};

use sqlx::{AnyConnection, Row};

use super::ladder::Decision;
use super::merchant_breaker::MerchantBreaker;
use super::model::*;
use super::money::{event_status, is_money_event};
use super::row::{self, ATTEMPT_COLS, BREAKER_COLS, DELIVERY_COLS, MERCHANT_COLS};
use super::store::{AnyQuery, AttemptRecord, DeliveryStore, Job, StoreError};
use crate::clock::Timestamp;
use crate::db::{placeholder_list, value_rows, Backend};

/// The PostgreSQL channel intake notifies when it stored new deliveries.
pub const NEW_WORK_CHANNEL: &str = "sluice_new_deliveries";

/// New deliveries an intake transaction stores claimed for its own
/// instance's steps: up to `places` of them, leased to `owner` until `until`.
#[derive(Debug, Clone, Copy)]
pub struct ClaimAtIntake<'a> {
    pub owner: &'a str,
    pub until: Timestamp,
    pub places: usize,
}

/// One event of a batch, checked and ready to store.
struct Prepared<'a> {
    input: &'a EventIn,
    event_id: EventId,
    delivery_id: DeliveryId,
    status: Option<String>,
    money: bool,
    payload: String,
}

impl DeliveryStore {
    /// Accept an event: store it and its delivery in one transaction, or,
    /// when `(merchant_id, idempotency_key)` was seen before, return what
    /// the first call stored.
    pub async fn accept_event(&self, e: &EventIn, now: Timestamp) -> Result<Accepted, StoreError> {
        let mut answers = self.accept_events(std::slice::from_ref(e), now).await?;
        answers.pop().unwrap_or(Err(StoreError::Db(sqlx::Error::RowNotFound)))
    }

    /// Accept many events in one transaction, one answer per event in input
    /// order: stored, a duplicate of an earlier call (or of an earlier event
    /// of this batch) with the first call's ids, or refused (invalid,
    /// unknown merchant). The outer error is for the batch as a whole (the
    /// database is unreachable): then nothing was stored.
    pub async fn accept_events(&self, events: &[EventIn], now: Timestamp) -> Result<Vec<Result<Accepted, StoreError>>, StoreError> {
        Ok(self.accept_events_claiming(events, now, None).await?.0)
    }

    /// [`DeliveryStore::accept_events`], storing up to `claim.places` of the
    /// new deliveries already claimed (DELIVERING, leased to `claim.owner`
    /// until `claim.until`) for the caller's own steps
    /// ([`super::handoff`]); the rest are stored PENDING. Returns the
    /// answers and the ids stored claimed.
    pub async fn accept_events_claiming(
        &self,
        events: &[EventIn],
        now: Timestamp,
        claim: Option<ClaimAtIntake<'_>>,
    ) -> Result<(Vec<Result<Accepted, StoreError>>, Vec<DeliveryId>), StoreError> {
        self.accept_events_on(None, events, now, claim).await
    }

    /// [`DeliveryStore::accept_events_claiming`]; on PostgreSQL through
    /// `conn` when given (a connection the caller keeps between batches),
    /// else through one from the pool. SQLite always takes a pooled
    /// connection for its transaction.
    pub(crate) async fn accept_events_on(
        &self,
        conn: Option<&mut AnyConnection>,
        events: &[EventIn],
        now: Timestamp,
        claim: Option<ClaimAtIntake<'_>>,
    ) -> Result<(Vec<Result<Accepted, StoreError>>, Vec<DeliveryId>), StoreError> {
        let mut claimed = Vec::new();
        let mut answers: Vec<Option<Result<Accepted, StoreError>>> = Vec::with_capacity(events.len());
        let mut ready = Vec::with_capacity(events.len());
        for (i, e) in events.iter().enumerate() {
            match prepare(e) {
                Ok(p) => {
                    answers.push(None);
                    ready.push((i, p));
                }
                Err(err) => answers.push(Some(Err(err))),
            }
        }
        // Rows in key order: concurrent batches then take the unique index's
        // locks in one order and cannot deadlock on shared keys. The sort is
        // stable, so within a batch the first of two equal keys wins.
        ready.sort_by(|(_, a), (_, b)| {
            (a.input.merchant_id.as_str(), &a.input.idempotency_key).cmp(&(b.input.merchant_id.as_str(), &b.input.idempotency_key))
        });
        if !ready.is_empty() {
            // On PostgreSQL the batch is one statement (`insert_events_pg`),
            // so it commits on its own: no BEGIN and COMMIT round trips.
            let (found, stored_claimed) = match self.db().backend() {
                Backend::Postgres => match conn {
                    Some(conn) => insert_events_pg(conn, &ready, now, claim).await?,
                    None => insert_events_pg(&mut *self.db().pool().acquire().await?, &ready, now, claim).await?,
                },
                Backend::Sqlite => {
                    let mut tx = self.db().pool().begin().await?;
                    let stored = insert_events_sqlite(&mut tx, &ready, now, claim).await?;
                    tx.commit().await?;
                    stored
                }
            };
            claimed = stored_claimed;
            // Neither stored nor stored before: the statements store only
            // events whose merchant exists, so the merchant is unknown.
            let unanswered: Vec<&str> = ready.iter().zip(&found).filter(|(_, a)| a.is_none()).map(|((_, p), _)| p.input.merchant_id.as_str()).collect();
            let known = if unanswered.is_empty() { HashSet::new() } else { self.known_merchants(&unanswered).await? };
            for ((i, p), answer) in ready.iter().zip(found) {
                answers[*i] = Some(match answer {
                    Some(accepted) => Ok(accepted),
                    None if !known.contains(p.input.merchant_id.as_str()) => Err(StoreError::UnknownMerchant(p.input.merchant_id.clone())),
                    // Its merchant exists, yet it was neither stored nor
                    // found stored: not ours to explain (SQL run by hand?).
                    None => Err(StoreError::Db(sqlx::Error::RowNotFound)),
                });
            }
        }
        // Every event was answered above: stored, refused, or the batch failed.
        Ok((answers.into_iter().map(|a| a.unwrap_or(Err(StoreError::Db(sqlx::Error::RowNotFound)))).collect(), claimed))
    }

    /// Which of `ids` name a merchant.
    async fn known_merchants(&self, ids: &[&str]) -> Result<HashSet<String>, StoreError> {
        let sql = format!("SELECT id FROM merchants WHERE id IN ({})", placeholder_list(ids.len(), 1));
        let mut q = sqlx::query(&sql);
        for id in ids {
            q = q.bind(*id);
        }
        let rows = q.fetch_all(self.db().pool()).await?;
        Ok(rows.iter().map(|r| r.try_get::<String, _>("id")).collect::<Result<_, _>>()?)
    }

    /// Claimed deliveries with their merchants, payloads and the merchants'
    /// breakers as they are now: one round trip for the batch. Ids that name
    /// no delivery are left out.
    pub async fn jobs(&self, ids: &[DeliveryId]) -> Result<Vec<(Job, MerchantBreaker)>, StoreError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let sql = format!(
            "SELECT {}, {}, {}, e.payload AS payload FROM deliveries d \
             JOIN merchants m ON m.id = d.merchant_id JOIN events e ON e.id = d.event_id \
             JOIN merchant_breakers b ON b.merchant_id = d.merchant_id WHERE d.id IN ({})",
            row::aliased(DELIVERY_COLS, "d", ""),
            row::aliased(MERCHANT_COLS, "m", "m_"),
            row::aliased(BREAKER_COLS, "b", "b_"),
            placeholder_list(ids.len(), 1),
        );
        let mut q = sqlx::query(&sql);
        for id in ids {
            q = q.bind(id.as_str());
        }
        let rows = q.fetch_all(self.db().pool()).await?;
        rows.iter()
            .map(|r| {
                let job = Job { delivery: row::delivery(r)?, merchant: row::merchant_prefixed(r, "m_")?, payload: r.try_get("payload")? };
                Ok((job, row::breaker_prefixed(r, "b_")?))
            })
            .collect()
    }

    /// One claimed delivery: [`DeliveryStore::jobs`] of one.
    pub async fn job(&self, id: &DeliveryId) -> Result<(Job, MerchantBreaker), StoreError> {
        self.jobs(std::slice::from_ref(id)).await?.pop().ok_or_else(|| StoreError::UnknownDelivery(id.clone()))
    }

    /// Record an attempt and write the ladder decision: [`DeliveryStore::finish_attempts`] of one.
    pub async fn finish_attempt(&self, rec: &AttemptRecord, owner: &str, now: Timestamp) -> Result<bool, StoreError> {
        Ok(self.finish_attempts(std::slice::from_ref(rec), owner, now).await?.first().copied().unwrap_or(false))
    }

    /// Record attempts and write their ladder decisions: one statement on
    /// PostgreSQL ([`finish_attempts_pg`]), a transaction of two on SQLite
    /// ([`finish_attempts_sqlite`]). Every attempt is kept (it happened); a
    /// delivery is updated only if `owner` still holds its lease. Returns,
    /// per record, whether it did.
    pub async fn finish_attempts(&self, recs: &[AttemptRecord], owner: &str, now: Timestamp) -> Result<Vec<bool>, StoreError> {
        if recs.is_empty() {
            return Ok(Vec::new());
        }
        let ours = match self.db().backend() {
            Backend::Postgres => finish_attempts_pg(&mut *self.db().pool().acquire().await?, recs, owner, now).await?,
            Backend::Sqlite => {
                let mut tx = self.db().pool().begin().await?;
                let ours = finish_attempts_sqlite(&mut tx, recs, owner, now).await?;
                tx.commit().await?;
                ours
            }
        };
        Ok(recs.iter().map(|r| ours.contains(r.attempt.delivery_id.as_str())).collect())
    }
}

/// Values one attempt binds in [`attempts_insert`].
fn attempt_values() -> usize {
    ATTEMPT_COLS.split(',').count()
}

/// The attempts' `INSERT` for `n` records, placeholders from `$first`.
fn attempts_insert(n: usize, first: usize) -> String {
    format!("INSERT INTO attempts ({ATTEMPT_COLS}) VALUES {}", value_rows(n, attempt_values(), first))
}

/// The ladder steps' `UPDATE` for `n` records (`$1` the lease owner, `$2`
/// now, the steps' values from `$first`), after the `WITH` items in
/// `with` (empty, or ending in ", "). Returns the ids it updated.
fn steps_update(with: &str, n: usize, first: usize) -> String {
    format!(
        "WITH {with}v (delivery_id, status, ladder, fast_attempts, slow_steps, slow_started_at, next_attempt_at, failed_reason, \
         finished_at, last_status_code, last_error) AS (VALUES {}) \
         UPDATE deliveries SET status = v.status, ladder = COALESCE(v.ladder, deliveries.ladder), \
         fast_attempts = COALESCE(v.fast_attempts, deliveries.fast_attempts), \
         slow_steps = COALESCE(v.slow_steps, deliveries.slow_steps), \
         slow_started_at = COALESCE(v.slow_started_at, deliveries.slow_started_at), \
         next_attempt_at = COALESCE(v.next_attempt_at, deliveries.next_attempt_at), \
         failed_reason = v.failed_reason, finished_at = v.finished_at, last_status_code = v.last_status_code, \
         last_error = v.last_error, lease_owner = NULL, lease_until = NULL, deferred = FALSE, updated_at = $2 \
         FROM v WHERE deliveries.id = v.delivery_id AND deliveries.status = 'DELIVERING' AND deliveries.lease_owner = $1 \
         RETURNING id",
        value_rows(n, STEP_COLS, first)
    )
}

/// Columns of one ladder step in [`steps_update`].
const STEP_COLS: usize = 11;

/// Bind each record's ladder step, in [`steps_update`]'s column order.
fn bind_steps<'q>(mut q: AnyQuery<'q>, recs: &'q [AttemptRecord], now: Timestamp) -> AnyQuery<'q> {
    for rec in recs {
        let a = &rec.attempt;
        let (status, ladder, state, next_at, failed, finished) = match rec.decision {
            Decision::Delivered => (DeliveryStatus::Delivered, None, None, None, None, Some(now)),
            Decision::Retry { at, ladder, state } => (DeliveryStatus::Pending, Some(ladder), Some(state), Some(at), None, None),
            Decision::Failed { reason, state } => (DeliveryStatus::Failed, None, Some(state), None, Some(reason), Some(now)),
        };
        q = q
            .bind(a.delivery_id.as_str())
            .bind(status.as_str())
            .bind(ladder.map(Ladder::as_str))
            .bind(state.map(|s| i64::from(s.fast_attempts)))
            .bind(state.map(|s| i64::from(s.slow_steps)))
            .bind(state.and_then(|s| s.slow_started_at).map(Timestamp::as_millis))
            .bind(next_at.map(Timestamp::as_millis))
            .bind(failed.map(FailedReason::as_str))
            .bind(finished.map(Timestamp::as_millis))
            .bind(a.status_code.map(i64::from))
            .bind(a.error.as_deref());
    }
    q
}

/// The ids a steps' `UPDATE` returned.
fn updated_ids(rows: &[sqlx::any::AnyRow]) -> Result<HashSet<String>, StoreError> {
    Ok(rows.iter().map(|r| r.try_get::<String, _>("id")).collect::<Result<_, _>>()?)
}

/// A write-back on PostgreSQL: the attempts' `INSERT` a data-modifying
/// `WITH` of the steps' `UPDATE`, one statement that commits by itself
/// (no `BEGIN` and `COMMIT` round trips).
async fn finish_attempts_pg(conn: &mut AnyConnection, recs: &[AttemptRecord], owner: &str, now: Timestamp) -> Result<HashSet<String>, StoreError> {
    let n = recs.len();
    let sql = steps_update(&format!("a AS ({}), ", attempts_insert(n, 3)), n, 3 + n * attempt_values());
    let mut q = sqlx::query(&sql).bind(owner).bind(now.as_millis());
    for rec in recs {
        q = super::store::bind_attempt(q, &rec.attempt)?;
    }
    updated_ids(&bind_steps(q, recs, now).fetch_all(&mut *conn).await?)
}

/// A write-back on SQLite, inside the caller's transaction: the attempts'
/// `INSERT`, then the steps' `UPDATE` (PostgreSQL: [`finish_attempts_pg`]).
async fn finish_attempts_sqlite(conn: &mut AnyConnection, recs: &[AttemptRecord], owner: &str, now: Timestamp) -> Result<HashSet<String>, StoreError> {
    let insert = attempts_insert(recs.len(), 1);
    let mut q = sqlx::query(&insert);
    for rec in recs {
        q = super::store::bind_attempt(q, &rec.attempt)?;
    }
    q.execute(&mut *conn).await?;
    let sql = steps_update("", recs.len(), 3);
    let q = sqlx::query(&sql).bind(owner).bind(now.as_millis());
    updated_ids(&bind_steps(q, recs, now).fetch_all(&mut *conn).await?)
}

fn prepare(e: &EventIn) -> Result<Prepared<'_>, StoreError> {
    e.validate()?;
    let status = event_status(e.status.as_deref(), &e.payload).map(str::to_owned);
    let money = is_money_event(&e.event_type, status.as_deref());
    Ok(Prepared { input: e, event_id: EventId::generate(), delivery_id: DeliveryId::generate(), status, money, payload: serde_json::to_string(&e.payload)? })
}

/// Store a batch on SQLite, inside the caller's transaction: events, then
/// deliveries for the new ones (PostgreSQL: [`insert_events_pg`]). Write
/// first, read after: a transaction that reads and then writes can fail
/// outright (SQLITE_BUSY on upgrade) when another connection wrote in
/// between. Only events whose merchant exists are stored, as on PostgreSQL.
async fn insert_events_sqlite(
    conn: &mut AnyConnection,
    ready: &[(usize, Prepared<'_>)],
    now: Timestamp,
    claim: Option<ClaimAtIntake<'_>>,
) -> Result<(Vec<Option<Accepted>>, Vec<DeliveryId>), StoreError> {
    const COLS: usize = 8;
    let sql = format!(
        "WITH v (ord, id, merchant_id, event_type, status, is_money, payload, idempotency_key) AS (VALUES {}) \
         INSERT INTO events (id, merchant_id, event_type, status, is_money, payload, idempotency_key, created_at) \
         SELECT id, merchant_id, event_type, status, is_money, payload, idempotency_key, $1 FROM v \
         WHERE EXISTS (SELECT 1 FROM merchants m WHERE m.id = v.merchant_id) ORDER BY ord \
         ON CONFLICT (merchant_id, idempotency_key) DO NOTHING RETURNING id",
        value_rows(ready.len(), COLS, 2)
    );
    let mut q = sqlx::query(&sql).bind(now.as_millis());
    for (i, (_, p)) in ready.iter().enumerate() {
        q = q
            .bind(i as i64)
            .bind(p.event_id.as_str())
            .bind(p.input.merchant_id.as_str())
            .bind(&p.input.event_type)
            .bind(p.status.as_deref())
            .bind(p.money)
            .bind(&p.payload)
            .bind(&p.input.idempotency_key);
    }
    let inserted: HashSet<String> =
        q.fetch_all(&mut *conn).await?.iter().map(|r| r.try_get::<String, _>("id")).collect::<Result<_, _>>()?;
    let fresh: Vec<&Prepared> = ready.iter().map(|(_, p)| p).filter(|p| inserted.contains(p.event_id.as_str())).collect();
    // The first `places` new deliveries are stored claimed.
    let places = claim.map_or(0, |c| c.places).min(fresh.len());
    if !fresh.is_empty() {
        const DELIVERY_COLS_IN: usize = 6;
        let sql = format!(
            "WITH v (id, event_id, merchant_id, event_type, is_money, claimed) AS (VALUES {}) \
             INSERT INTO deliveries (id, event_id, merchant_id, event_type, is_money, status, ladder, fast_attempts, \
             slow_steps, cycle_started_at, next_attempt_at, deferred, deferrals, created_at, updated_at, lease_owner, lease_until) \
             SELECT v.id, v.event_id, v.merchant_id, v.event_type, v.is_money, \
             CASE WHEN v.claimed THEN 'DELIVERING' ELSE 'PENDING' END, 'fast', 0, 0, $1, $1, FALSE, 0, $1, $1, \
             CASE WHEN v.claimed THEN $2 END, CASE WHEN v.claimed THEN $3 END FROM v",
            value_rows(fresh.len(), DELIVERY_COLS_IN, 4)
        );
        let mut q = sqlx::query(&sql).bind(now.as_millis()).bind(claim.map(|c| c.owner)).bind(claim.map(|c| c.until.as_millis()));
        for (i, p) in fresh.iter().enumerate() {
            q = q
                .bind(p.delivery_id.as_str())
                .bind(p.event_id.as_str())
                .bind(p.input.merchant_id.as_str())
                .bind(&p.input.event_type)
                .bind(p.money)
                .bind(i < places);
        }
        q.execute(&mut *conn).await?;
    }
    let claimed = fresh.iter().take(places).map(|p| p.delivery_id.clone()).collect();
    Ok((answer_duplicates(conn, ready, &inserted).await?, claimed))
}

/// The answers of a stored batch, given the ids of the events it
/// inserted: events already stored (by an earlier call, or earlier in this
/// batch) are looked up and answered with the first call's ids; an event
/// neither inserted nor stored before (its merchant is unknown) has none.
async fn answer_duplicates(
    conn: &mut AnyConnection,
    ready: &[(usize, Prepared<'_>)],
    inserted: &HashSet<String>,
) -> Result<Vec<Option<Accepted>>, StoreError> {
    // Events already stored (by an earlier call, or earlier in this batch):
    // the first call's ids.
    let dups: Vec<&Prepared> = ready.iter().map(|(_, p)| p).filter(|p| !inserted.contains(p.event_id.as_str())).collect();
    let mut existing: HashMap<(String, String), (String, Vec<DeliveryId>)> = HashMap::new();
    if !dups.is_empty() {
        let sql = format!(
            "SELECT e.id AS event_id, e.merchant_id AS merchant_id, e.idempotency_key AS idempotency_key, d.id AS delivery_id \
             FROM events e LEFT JOIN deliveries d ON d.event_id = e.id WHERE (e.merchant_id, e.idempotency_key) IN (VALUES {}) \
             ORDER BY d.id",
            value_rows(dups.len(), 2, 1)
        );
        let mut q = sqlx::query(&sql);
        for p in &dups {
            q = q.bind(p.input.merchant_id.as_str()).bind(&p.input.idempotency_key);
        }
        for r in q.fetch_all(&mut *conn).await? {
            let key = (r.try_get::<String, _>("merchant_id")?, r.try_get::<String, _>("idempotency_key")?);
            let entry = existing.entry(key).or_insert((r.try_get("event_id")?, Vec::new()));
            if let Some(d) = r.try_get::<Option<String>, _>("delivery_id")? {
                entry.1.push(DeliveryId::from_db(d));
            }
        }
    }
    let answers = ready
        .iter()
        .map(|(_, p)| {
            if inserted.contains(p.event_id.as_str()) {
                return Some(Accepted { event_id: p.event_id.clone(), delivery_ids: vec![p.delivery_id.clone()], duplicate: false });
            }
            let key = (p.input.merchant_id.as_str().to_owned(), p.input.idempotency_key.clone());
            let (event_id, delivery_ids) = existing.get(&key).cloned()?;
            Some(Accepted { event_id: EventId::from_db(event_id), delivery_ids, duplicate: true })
        })
        .collect();
    Ok(answers)
}

/// A batch on PostgreSQL: events, deliveries and the `NOTIFY` in
/// one statement (data-modifying `WITH`s) that commits by itself, so a
/// batch costs one round trip instead of four (`BEGIN`, events,
/// deliveries, `COMMIT`); the lookup of keys seen before follows only when
/// some were, and reads what is committed. The new deliveries, in batch
/// order, are stored claimed up to `claim.places`; the rest PENDING, and
/// only those `NOTIFY` other instances (rows stored claimed are this
/// instance's to send). Keys in batch order, as on SQLite, so concurrent
/// batches take the unique index's locks in one order. Only events whose
/// merchant exists are stored: a semi-join that reads the merchant and,
/// unlike the foreign keys it replaced, does not lock its row (migration
/// 0017; docs/decisions.md, "Intake checks merchants by reading them").
async fn insert_events_pg(
    conn: &mut AnyConnection,
    ready: &[(usize, Prepared<'_>)],
    now: Timestamp,
    claim: Option<ClaimAtIntake<'_>>,
) -> Result<(Vec<Option<Accepted>>, Vec<DeliveryId>), StoreError> {
    const COLS: usize = 9;
    let places = claim.map_or(0, |c| c.places);
    // `woke` is never read: PostgreSQL runs a plain `SELECT` in a `WITH` only
    // when the query refers to it, and `w` is where the `NOTIFY` is sent.
    let sql = format!(
        "WITH v (ord, event_id, delivery_id, merchant_id, event_type, status, is_money, payload, idempotency_key) AS (VALUES {}), \
         e AS (INSERT INTO events (id, merchant_id, event_type, status, is_money, payload, idempotency_key, created_at) \
           SELECT event_id, merchant_id, event_type, status, is_money, payload, idempotency_key, $1 FROM v \
           WHERE EXISTS (SELECT 1 FROM merchants m WHERE m.id = v.merchant_id) ORDER BY ord \
           ON CONFLICT (merchant_id, idempotency_key) DO NOTHING RETURNING id), \
         f AS (SELECT v.*, row_number() OVER (ORDER BY v.ord) AS n FROM v JOIN e ON e.id = v.event_id), \
         d AS (INSERT INTO deliveries (id, event_id, merchant_id, event_type, is_money, status, ladder, fast_attempts, \
           slow_steps, cycle_started_at, next_attempt_at, deferred, deferrals, created_at, updated_at, lease_owner, lease_until) \
           SELECT delivery_id, event_id, merchant_id, event_type, is_money, \
           CASE WHEN n <= $4 THEN 'DELIVERING' ELSE 'PENDING' END, 'fast', 0, 0, $1, $1, FALSE, 0, $1, $1, \
           CASE WHEN n <= $4 THEN $2 END, CASE WHEN n <= $4 THEN $3 END FROM f RETURNING id, event_id, status), \
         w AS (SELECT pg_notify($5, '') FROM (SELECT 1 FROM d WHERE status = 'PENDING' LIMIT 1) AS pending) \
         SELECT id, event_id, status, (SELECT COUNT(*) FROM w) AS woke FROM d",
        value_rows(ready.len(), COLS, 6)
    );
    let mut q = sqlx::query(&sql)
        .bind(now.as_millis())
        .bind(claim.map(|c| c.owner))
        .bind(claim.map(|c| c.until.as_millis()))
        .bind(places as i64)
        .bind(NEW_WORK_CHANNEL);
    for (i, (_, p)) in ready.iter().enumerate() {
        q = q
            .bind(i as i64)
            .bind(p.event_id.as_str())
            .bind(p.delivery_id.as_str())
            .bind(p.input.merchant_id.as_str())
            .bind(&p.input.event_type)
            .bind(p.status.as_deref())
            .bind(p.money)
            .bind(&p.payload)
            .bind(&p.input.idempotency_key);
    }
    let mut inserted = HashSet::new();
    let mut claimed = Vec::new();
    for r in q.fetch_all(&mut *conn).await? {
        inserted.insert(r.try_get::<String, _>("event_id")?);
        if r.try_get::<String, _>("status")? == DeliveryStatus::Delivering.as_str() {
            claimed.push(DeliveryId::from_db(r.try_get::<String, _>("id")?));
        }
    }
    Ok((answer_duplicates(conn, ready, &inserted).await?, claimed))
}
