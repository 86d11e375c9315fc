//! Decoding delivery tables from `sqlx::any` rows, and the small dynamic-SQL
//! helper the filtered queries use. Kept apart so the store and the queries
//! share one mapping of every column.

use std::time::Duration;

use sqlx::any::AnyRow;
use sqlx::Row;

use super::merchant_breaker::MerchantBreaker;
use super::model::*;
use crate::clock::Timestamp;

pub(crate) const MERCHANT_COLS: &str =
    "id, name, url, scheme, secret, previous_secret, previous_secret_expires_at, created_at, updated_at";

pub(crate) const DELIVERY_COLS: &str = "id, event_id, merchant_id, event_type, is_money, status, ladder, fast_attempts, \
     slow_steps, slow_started_at, cycle_started_at, next_attempt_at, lease_owner, lease_until, deferred, deferrals, \
     last_deferred_at, last_status_code, last_error, failed_reason, created_at, updated_at, finished_at";

pub(crate) const ATTEMPT_COLS: &str =
    "id, delivery_id, merchant_id, at, ladder, outcome, status_code, latency_ms, error, response_body, probe, \
     request_headers, response_headers, response_truncated";

pub(crate) const BREAKER_COLS: &str = "merchant_id, state, version, pause_ms, failed_probes, opened_at, next_probe_at, \
     probe_delivery_id, probe_started_at, counters_since, updated_at";

fn ts(row: &AnyRow, col: &str) -> Result<Timestamp, sqlx::Error> {
    Ok(Timestamp::from_millis(row.try_get::<i64, _>(col)?))
}

fn ts_opt(row: &AnyRow, col: &str) -> Result<Option<Timestamp>, sqlx::Error> {
    Ok(row.try_get::<Option<i64>, _>(col)?.map(Timestamp::from_millis))
}

fn count(row: &AnyRow, col: &str) -> Result<u32, sqlx::Error> {
    Ok(u32::try_from(row.try_get::<i64, _>(col)?).unwrap_or(u32::MAX))
}

/// BOOLEAN reads back as a bool on PostgreSQL and as an integer on SQLite.
fn flag(row: &AnyRow, col: &str) -> Result<bool, sqlx::Error> {
    match row.try_get::<bool, _>(col) {
        Ok(b) => Ok(b),
        Err(_) => Ok(row.try_get::<i64, _>(col)? != 0),
    }
}

fn parsed<T: std::str::FromStr<Err = ModelError>>(row: &AnyRow, col: &str) -> Result<T, sqlx::Error> {
    let text: String = row.try_get(col)?;
    text.parse().map_err(|e: ModelError| sqlx::Error::ColumnDecode { index: col.to_owned(), source: Box::new(e) })
}

fn parsed_opt<T: std::str::FromStr<Err = ModelError>>(row: &AnyRow, col: &str) -> Result<Option<T>, sqlx::Error> {
    match row.try_get::<Option<String>, _>(col)? {
        None => Ok(None),
        Some(text) => text.parse().map(Some).map_err(|e: ModelError| sqlx::Error::ColumnDecode { index: col.to_owned(), source: Box::new(e) }),
    }
}

fn status_code(row: &AnyRow, col: &str) -> Result<Option<u16>, sqlx::Error> {
    Ok(row.try_get::<Option<i64>, _>(col)?.and_then(|c| u16::try_from(c).ok()))
}

pub(crate) fn merchant(row: &AnyRow) -> Result<Merchant, sqlx::Error> {
    merchant_prefixed(row, "")
}

/// A merchant whose columns were selected as `{prefix}{column}` (see [`aliased`]).
pub(crate) fn merchant_prefixed(row: &AnyRow, p: &str) -> Result<Merchant, sqlx::Error> {
    let c = |name: &str| format!("{p}{name}");
    Ok(Merchant {
        id: MerchantId::from_db(row.try_get(c("id").as_str())?),
        name: row.try_get(c("name").as_str())?,
        url: row.try_get(c("url").as_str())?,
        scheme: parsed(row, &c("scheme"))?,
        secret: row.try_get(c("secret").as_str())?,
        previous_secret: row.try_get(c("previous_secret").as_str())?,
        previous_secret_expires_at: ts_opt(row, &c("previous_secret_expires_at"))?,
        created_at: ts(row, &c("created_at"))?,
        updated_at: ts(row, &c("updated_at"))?,
    })
}

/// `a.col AS {prefix}col, …` for every column of `cols`, for joins.
pub(crate) fn aliased(cols: &str, table: &str, prefix: &str) -> String {
    cols.split(',').map(str::trim).map(|c| format!("{table}.{c} AS {prefix}{c}")).collect::<Vec<_>>().join(", ")
}

pub(crate) fn delivery(row: &AnyRow) -> Result<Delivery, sqlx::Error> {
    Ok(Delivery {
        id: DeliveryId::from_db(row.try_get("id")?),
        event_id: EventId::from_db(row.try_get("event_id")?),
        merchant_id: MerchantId::from_db(row.try_get("merchant_id")?),
        event_type: row.try_get("event_type")?,
        is_money: flag(row, "is_money")?,
        status: parsed(row, "status")?,
        ladder: parsed(row, "ladder")?,
        fast_attempts: count(row, "fast_attempts")?,
        slow_steps: count(row, "slow_steps")?,
        slow_started_at: ts_opt(row, "slow_started_at")?,
        cycle_started_at: ts(row, "cycle_started_at")?,
        next_attempt_at: ts(row, "next_attempt_at")?,
        lease_owner: row.try_get("lease_owner")?,
        lease_until: ts_opt(row, "lease_until")?,
        deferred: flag(row, "deferred")?,
        deferrals: count(row, "deferrals")?,
        last_deferred_at: ts_opt(row, "last_deferred_at")?,
        last_status_code: status_code(row, "last_status_code")?,
        last_error: row.try_get("last_error")?,
        failed_reason: parsed_opt(row, "failed_reason")?,
        created_at: ts(row, "created_at")?,
        updated_at: ts(row, "updated_at")?,
        finished_at: ts_opt(row, "finished_at")?,
    })
}

pub(crate) fn attempt(row: &AnyRow) -> Result<Attempt, sqlx::Error> {
    Ok(Attempt {
        id: AttemptId::from_db(row.try_get("id")?),
        delivery_id: DeliveryId::from_db(row.try_get("delivery_id")?),
        merchant_id: MerchantId::from_db(row.try_get("merchant_id")?),
        at: ts(row, "at")?,
        ladder: parsed(row, "ladder")?,
        outcome: parsed(row, "outcome")?,
        status_code: status_code(row, "status_code")?,
        latency_ms: row.try_get("latency_ms")?,
        error: row.try_get("error")?,
        response_body: row.try_get("response_body")?,
        response_truncated: flag(row, "response_truncated")?,
        request_headers: headers(row, "request_headers")?,
        response_headers: headers(row, "response_headers")?,
        probe: flag(row, "probe")?,
    })
}

/// A JSON object of headers, or NULL.
fn headers(row: &AnyRow, col: &str) -> Result<Option<Headers>, sqlx::Error> {
    match row.try_get::<Option<String>, _>(col)? {
        None => Ok(None),
        Some(text) => serde_json::from_str(&text).map(Some).map_err(|e| sqlx::Error::ColumnDecode { index: col.to_owned(), source: Box::new(e) }),
    }
}

pub(crate) fn breaker(row: &AnyRow) -> Result<MerchantBreaker, sqlx::Error> {
    breaker_prefixed(row, "")
}

/// A breaker whose columns were selected as `{prefix}{column}`.
pub(crate) fn breaker_prefixed(row: &AnyRow, p: &str) -> Result<MerchantBreaker, sqlx::Error> {
    let c = |name: &str| format!("{p}{name}");
    Ok(MerchantBreaker {
        merchant_id: MerchantId::from_db(row.try_get(c("merchant_id").as_str())?),
        status: parsed(row, &c("state"))?,
        version: row.try_get(c("version").as_str())?,
        pause: Duration::from_millis(u64::try_from(row.try_get::<i64, _>(c("pause_ms").as_str())?).unwrap_or(0)),
        failed_probes: count(row, &c("failed_probes"))?,
        opened_at: ts_opt(row, &c("opened_at"))?,
        next_probe_at: ts_opt(row, &c("next_probe_at"))?,
        probe_delivery_id: row.try_get::<Option<String>, _>(c("probe_delivery_id").as_str())?.map(DeliveryId::from_db),
        probe_started_at: ts_opt(row, &c("probe_started_at"))?,
        counters_since: ts(row, &c("counters_since"))?,
        updated_at: ts(row, &c("updated_at"))?,
    })
}

/// A bind value for dynamically built SQL.
#[derive(Debug, Clone)]
pub(crate) enum Arg {
    Text(String),
    Int(i64),
    Bool(bool),
}

/// SQL text with `$N` placeholders numbered as arguments are pushed.
#[derive(Debug, Default)]
pub(crate) struct Sql {
    pub text: String,
    pub args: Vec<Arg>,
}

impl Sql {
    pub fn new(text: &str) -> Self {
        Sql { text: text.to_owned(), args: Vec::new() }
    }

    /// Append `before`, a placeholder for `arg`, then `after`.
    pub fn push(&mut self, before: &str, arg: Arg, after: &str) -> &mut Self {
        self.args.push(arg);
        self.text.push_str(before);
        self.text.push('$');
        self.text.push_str(&self.args.len().to_string());
        self.text.push_str(after);
        self
    }

    pub fn raw(&mut self, text: &str) -> &mut Self {
        self.text.push_str(text);
        self
    }

    pub fn query(&self) -> sqlx::query::Query<'_, sqlx::Any, sqlx::any::AnyArguments<'_>> {
        let mut q = sqlx::query(&self.text);
        for a in &self.args {
            q = match a {
                Arg::Text(s) => q.bind(s.as_str()),
                Arg::Int(i) => q.bind(*i),
                Arg::Bool(b) => q.bind(*b),
            };
        }
        q
    }
}

/// The terms that let the partial listing indexes serve a query for
/// deliveries in `status` (migrations/*/0015_listing_indexes.sql): only
/// `deliveries_in_flight` holds DELIVERING rows, and the status index holds
/// no DELIVERED ones either. Written out although `status = …` implies
/// them: SQLite uses a partial index only when the query repeats the
/// index's terms, and PostgreSQL cannot see the implication through a
/// bound `status`.
pub(crate) fn status_index_terms(status: DeliveryStatus) -> &'static str {
    match status {
        DeliveryStatus::Pending | DeliveryStatus::Failed => " AND status <> 'DELIVERING' AND status <> 'DELIVERED'",
        DeliveryStatus::Delivered => " AND status <> 'DELIVERING'",
        DeliveryStatus::Delivering => " AND status = 'DELIVERING'",
    }
}

/// `WHERE …` for a delivery filter (always starts with `WHERE 1 = 1` so
/// callers can append `AND …`), with the terms of the partial indexes that
/// may serve it. Without a status the rows in flight are in no listing
/// index: callers that order or count the whole filter ask for them apart
/// ([`DeliveryStore::list_deliveries`](super::store::DeliveryStore)).
pub(crate) fn push_filter(sql: &mut Sql, f: &DeliveryFilter) {
    sql.raw(" WHERE 1 = 1");
    if let Some(s) = f.status {
        sql.push(" AND status = ", Arg::Text(s.as_str().into()), "");
        sql.raw(status_index_terms(s));
    }
    if let Some(m) = &f.merchant_id {
        sql.push(" AND merchant_id = ", Arg::Text(m.as_str().into()), "");
    }
    if let Some(t) = &f.event_type {
        sql.push(" AND event_type = ", Arg::Text(t.clone()), "");
    }
    if let Some(b) = f.is_money {
        sql.push(" AND is_money = ", Arg::Bool(b), "");
    }
    if let Some(l) = f.ladder {
        sql.push(" AND ladder = ", Arg::Text(l.as_str().into()), "");
        if l != Ladder::Fast {
            sql.raw(" AND ladder <> 'fast'");
        }
    }
    if let Some(from) = f.created_from {
        sql.push(" AND created_at >= ", Arg::Int(from.as_millis()), "");
    }
    if let Some(to) = f.created_to {
        sql.push(" AND created_at < ", Arg::Int(to.as_millis()), "");
    }
}
