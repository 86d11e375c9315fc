//! The audit log: every mutation made through the UI or the API, with who,
//! when, what and the record before and after; read back newest first with
//! keyset pagination, and shown as a field-by-field diff.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;
use serde_json::Value;
use sqlx::Row;

use crate::clock::Timestamp;
use crate::db::Db;

/// Every action the audit log records, one home for their names. The string
/// forms are what the `action` column holds (rows written before this enum
/// read back unchanged); the UI and the API write the same one for the same
/// operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AuditAction {
    LimitCreate,
    LimitUpdate,
    LimitDelete,
    /// A scope's retry profile set (created or replaced).
    RetryProfileSet,
    /// A scope's retry profile removed (it falls back to `*`'s or the default).
    RetryProfileDelete,
    MerchantCreate,
    MerchantUpdateUrl,
    MerchantRotateSecret,
    /// A merchant's delivery breaker closed by hand.
    MerchantBreakerReset,
    /// An upstream (per account and scope) breaker closed by hand.
    UpstreamBreakerReset,
    DeliveryRedeliver,
    DeliveryRetryNow,
    DeliveryBulkRetry,
    UserCreate,
    UserPassword,
    UserRole,
    UserDelete,
    /// A sign-in refused for a wrong username or password (the actor is
    /// the client's address; the password is never recorded).
    UserLoginFailed,
    /// An API token issued (its secret is never recorded).
    TokenCreate,
    TokenRevoke,
}

impl AuditAction {
    pub const ALL: [AuditAction; 20] = [
        AuditAction::LimitCreate,
        AuditAction::LimitUpdate,
        AuditAction::LimitDelete,
        AuditAction::RetryProfileSet,
        AuditAction::RetryProfileDelete,
        AuditAction::MerchantCreate,
        AuditAction::MerchantUpdateUrl,
        AuditAction::MerchantRotateSecret,
        AuditAction::MerchantBreakerReset,
        AuditAction::UpstreamBreakerReset,
        AuditAction::DeliveryRedeliver,
        AuditAction::DeliveryRetryNow,
        AuditAction::DeliveryBulkRetry,
        AuditAction::UserCreate,
        AuditAction::UserPassword,
        AuditAction::UserRole,
        AuditAction::UserDelete,
        AuditAction::UserLoginFailed,
        AuditAction::TokenCreate,
        AuditAction::TokenRevoke,
    ];

    /// The name stored in `audit_log.action`.
    pub const fn as_str(self) -> &'static str {
        match self {
            AuditAction::LimitCreate => "limit.create",
            AuditAction::LimitUpdate => "limit.update",
            AuditAction::LimitDelete => "limit.delete",
            AuditAction::RetryProfileSet => "retry_profile.set",
            AuditAction::RetryProfileDelete => "retry_profile.delete",
            AuditAction::MerchantCreate => "merchant.create",
            AuditAction::MerchantUpdateUrl => "merchant.update_url",
            AuditAction::MerchantRotateSecret => "merchant.rotate_secret",
            AuditAction::MerchantBreakerReset => "breaker.reset",
            AuditAction::UpstreamBreakerReset => "upstream_breaker.reset",
            AuditAction::DeliveryRedeliver => "delivery.redeliver",
            AuditAction::DeliveryRetryNow => "delivery.retry_now",
            AuditAction::DeliveryBulkRetry => "delivery.bulk_retry",
            AuditAction::UserCreate => "user.create",
            AuditAction::UserPassword => "user.password",
            AuditAction::UserRole => "user.role",
            AuditAction::UserDelete => "user.delete",
            AuditAction::UserLoginFailed => "login.failed",
            AuditAction::TokenCreate => "token.create",
            AuditAction::TokenRevoke => "token.revoke",
        }
    }

    /// The action a stored name stands for; `None` for names no code writes.
    pub fn parse(name: &str) -> Option<AuditAction> {
        AuditAction::ALL.into_iter().find(|a| a.as_str() == name)
    }
}

impl std::fmt::Display for AuditAction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One change to record.
#[derive(Debug)]
pub struct AuditEntry<'a, T: Serialize> {
    pub actor: &'a str,
    pub action: AuditAction,
    /// The id of what changed.
    pub target: &'a str,
    pub before: Option<&'a T>,
    pub after: Option<&'a T>,
    /// Why, when the person gave a reason (breaker resets ask for one).
    pub reason: Option<&'a str>,
}

#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    #[error("cannot serialise the audited record")]
    Json(#[from] serde_json::Error),
    #[error("database error")]
    Db(#[from] sqlx::Error),
}

/// The newest `limit` rows whose action is one of `actions`, newest first.
pub async fn recent(db: &Db, actions: &[AuditAction], limit: u32) -> Result<Vec<AuditRecord>, AuditError> {
    let placeholders: Vec<String> = (1..=actions.len()).map(|i| format!("${i}")).collect();
    let sql = format!(
        "SELECT id, at, actor, action, target, before_json, after_json, reason FROM audit_log \
         WHERE action IN ({}) ORDER BY at DESC, id DESC LIMIT {}",
        placeholders.join(", "),
        limit.min(1000)
    );
    let mut q = sqlx::query(&sql);
    for a in actions {
        q = q.bind(a.as_str());
    }
    let rows = q.fetch_all(db.pool()).await?;
    Ok(rows.iter().map(record_from_row).collect::<Result<Vec<_>, sqlx::Error>>()?)
}

/// Write one audit row on its own. A change to the database should use
/// [`record_in`] with the change's own transaction instead.
pub async fn record<T: Serialize>(db: &Db, entry: AuditEntry<'_, T>, now: Timestamp) -> Result<(), AuditError> {
    let mut conn = db.pool().acquire().await?;
    record_in(&mut conn, entry, now).await
}

/// Write one audit row on `conn`: inside the transaction of the change it
/// records, so the change and its row commit (or roll back) together.
pub async fn record_in<T: Serialize>(conn: &mut sqlx::AnyConnection, entry: AuditEntry<'_, T>, now: Timestamp) -> Result<(), AuditError> {
    let before = entry.before.map(serde_json::to_string).transpose()?;
    let after = entry.after.map(serde_json::to_string).transpose()?;
    sqlx::query(
        "INSERT INTO audit_log (id, at, actor, action, target, before_json, after_json, reason) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
    )
    .bind(format!("aud_{}", ulid::Ulid::new().to_string().to_lowercase()))
    .bind(now.as_millis())
    .bind(entry.actor)
    .bind(entry.action.as_str())
    .bind(entry.target)
    .bind(before)
    .bind(after)
    .bind(entry.reason)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// One row of the audit log, as read back.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AuditRecord {
    pub id: String,
    pub at_ms: i64,
    pub actor: String,
    pub action: String,
    pub target: String,
    /// The record before and after; unreadable JSON is kept as a string.
    pub before: Option<Value>,
    pub after: Option<Value>,
    pub reason: Option<String>,
}

/// Which rows to list. Empty fields match everything; `action` matches the
/// exact name (`limit.update`) or, without a dot, a whole area (`limit`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AuditFilter {
    pub actor: Option<String>,
    pub action: Option<String>,
    pub target: Option<String>,
}

/// A position in the newest-first order: the last row of a page. The next
/// page starts strictly after it, so rows written meanwhile never shift it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuditCursor {
    pub at_ms: i64,
    pub id: String,
}

impl AuditCursor {
    /// `<at_ms>.<id>`, for URLs.
    pub fn token(&self) -> String {
        format!("{}.{}", self.at_ms, self.id)
    }

    pub fn parse(token: &str) -> Option<AuditCursor> {
        let (at, id) = token.split_once('.')?;
        let ok_id = !id.is_empty() && id.len() <= 64 && id.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        Some(AuditCursor { at_ms: at.parse().ok()?, id: id.to_owned() }).filter(|_| ok_id)
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct AuditPage {
    pub records: Vec<AuditRecord>,
    /// Where the next (older) page starts; `None` on the last page.
    pub next: Option<AuditCursor>,
}

/// A page of the log, newest first, starting after `after` (keyset
/// pagination on the `(at, id)` index: as fast on page 1000 as on page 1).
pub async fn list(db: &Db, filter: &AuditFilter, after: Option<&AuditCursor>, limit: u32) -> Result<AuditPage, AuditError> {
    let limit = limit.clamp(1, 500);
    let given = |v: &Option<String>| v.as_deref().map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned);
    // (condition with `{}` for its placeholder, value), bound in order.
    let mut text_filters: Vec<(String, String)> = Vec::new();
    if let Some(actor) = given(&filter.actor) {
        text_filters.push(("actor = {}".to_owned(), actor));
    }
    if let Some(target) = given(&filter.target) {
        text_filters.push(("target = {}".to_owned(), target));
    }
    if let Some(action) = given(&filter.action) {
        if action.contains('.') {
            text_filters.push(("action = {}".to_owned(), action));
        } else {
            // A whole area: `limit` matches `limit.create`, `limit.update`, …
            // (substr, not LIKE: `_` in names must not be a wildcard).
            let prefix = format!("{action}.");
            text_filters.push((format!("substr(action, 1, {}) = {{}}", prefix.chars().count()), prefix));
        }
    }
    let mut conditions: Vec<String> =
        text_filters.iter().enumerate().map(|(i, (sql, _))| sql.replace("{}", &format!("${}", i + 1))).collect();
    let n = text_filters.len();
    if after.is_some() {
        conditions.push(format!("(at < ${a} OR (at = ${a} AND id < ${b}))", a = n + 1, b = n + 2));
    }
    let where_sql = if conditions.is_empty() { String::new() } else { format!("WHERE {}", conditions.join(" AND ")) };
    let sql = format!(
        "SELECT id, at, actor, action, target, before_json, after_json, reason FROM audit_log {where_sql} \
         ORDER BY at DESC, id DESC LIMIT {}",
        limit + 1
    );
    let mut query = sqlx::query(&sql);
    for (_, value) in &text_filters {
        query = query.bind(value.as_str());
    }
    if let Some(c) = after {
        query = query.bind(c.at_ms).bind(c.id.as_str());
    }
    let rows = query.fetch_all(db.pool()).await?;
    let mut records = rows.iter().map(record_from_row).collect::<Result<Vec<_>, sqlx::Error>>()?;
    let next = if records.len() > limit as usize {
        records.truncate(limit as usize);
        records.last().map(|r| AuditCursor { at_ms: r.at_ms, id: r.id.clone() })
    } else {
        None
    };
    Ok(AuditPage { records, next })
}

fn record_from_row(row: &sqlx::any::AnyRow) -> Result<AuditRecord, sqlx::Error> {
    let json = |col: &str| -> Result<Option<Value>, sqlx::Error> {
        Ok(row
            .try_get::<Option<String>, _>(col)?
            .map(|text| serde_json::from_str(&text).unwrap_or(Value::String(text))))
    };
    Ok(AuditRecord {
        id: row.try_get("id")?,
        at_ms: row.try_get("at")?,
        actor: row.try_get("actor")?,
        action: row.try_get("action")?,
        target: row.try_get("target")?,
        before: json("before_json")?,
        after: json("after_json")?,
        reason: row.try_get("reason")?,
    })
}

/// One field that differs between the record before and after a change.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FieldChange {
    /// Dotted path into the record (`limit.tokens` style for nested objects).
    pub field: String,
    /// The value before (`None`: the field did not exist).
    pub before: Option<String>,
    pub after: Option<String>,
}

/// The fields that differ between two JSON records, in field order: a
/// readable diff for the audit page. Nested objects are flattened to dotted
/// paths; arrays and scalars compare as a whole. A created record lists every
/// field with no `before`; a deleted one every field with no `after`.
pub fn diff(before: Option<&Value>, after: Option<&Value>) -> Vec<FieldChange> {
    let mut old = BTreeMap::new();
    let mut new = BTreeMap::new();
    if let Some(v) = before {
        flatten("", v, &mut old);
    }
    if let Some(v) = after {
        flatten("", v, &mut new);
    }
    let fields: BTreeSet<&String> = old.keys().chain(new.keys()).collect();
    fields
        .into_iter()
        .filter_map(|f| {
            let (b, a) = (old.get(f), new.get(f));
            (b != a).then(|| FieldChange { field: f.clone(), before: b.cloned(), after: a.cloned() })
        })
        .collect()
}

fn flatten(prefix: &str, value: &Value, out: &mut BTreeMap<String, String>) {
    match value {
        Value::Object(map) if !map.is_empty() => {
            for (k, v) in map {
                let key = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
                flatten(&key, v, out);
            }
        }
        Value::String(s) => {
            out.insert(field_name(prefix), s.clone());
        }
        other => {
            out.insert(field_name(prefix), other.to_string());
        }
    }
}

fn field_name(prefix: &str) -> String {
    if prefix.is_empty() { "(value)".to_owned() } else { prefix.to_owned() }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::db::testing::TestDb;

    #[tokio::test]
    async fn pages_are_newest_first_keyed_on_at_and_id_and_filtered() {
        for db in TestDb::each().await {
            for n in 0..7i64 {
                let action = if n % 2 == 0 { AuditAction::LimitUpdate } else { AuditAction::MerchantBreakerReset };
                let entry = AuditEntry::<Value> { actor: "ana", action, target: &format!("t{n}"), before: None, after: None, reason: None };
                // Pairs share a millisecond: the id breaks the tie.
                record(&db, entry, Timestamp::from_millis(1_000 + n / 2)).await.expect("record");
            }
            let all = AuditFilter::default();
            let first = list(&db, &all, None, 3).await.expect("page 1");
            let second = list(&db, &all, first.next.as_ref(), 3).await.expect("page 2");
            let third = list(&db, &all, second.next.as_ref(), 3).await.expect("page 3");
            assert_eq!((first.records.len(), second.records.len(), third.records.len()), (3, 3, 1));
            assert!(third.next.is_none());
            let keys: Vec<(i64, String)> =
                [first, second, third].into_iter().flat_map(|p| p.records).map(|r| (r.at_ms, r.id)).collect();
            let mut sorted = keys.clone();
            sorted.sort_by(|a, b| b.cmp(a));
            sorted.dedup();
            assert_eq!(keys, sorted);
            assert_eq!(keys.len(), 7);

            let area = AuditFilter { action: Some("limit".into()), ..AuditFilter::default() };
            assert_eq!(list(&db, &area, None, 50).await.expect("area").records.len(), 4);
            let exact = AuditFilter { action: Some("breaker.reset".into()), target: Some("t3".into()), ..AuditFilter::default() };
            let page = list(&db, &exact, None, 50).await.expect("exact");
            assert_eq!(page.records.iter().map(|r| r.target.as_str()).collect::<Vec<_>>(), ["t3"]);
            let nobody = AuditFilter { actor: Some("bo".into()), ..AuditFilter::default() };
            assert!(list(&db, &nobody, None, 50).await.expect("none").records.is_empty());
        }
    }

    #[test]
    fn every_action_keeps_its_stored_name_and_reads_back() {
        let names: Vec<&str> = AuditAction::ALL.iter().map(|a| a.as_str()).collect();
        assert_eq!(
            names,
            [
                "limit.create", "limit.update", "limit.delete", "retry_profile.set", "retry_profile.delete", "merchant.create", "merchant.update_url",
                "merchant.rotate_secret", "breaker.reset", "upstream_breaker.reset", "delivery.redeliver",
                "delivery.retry_now", "delivery.bulk_retry", "user.create", "user.password", "user.role", "user.delete",
                "login.failed", "token.create", "token.revoke",
            ]
        );
        for a in AuditAction::ALL {
            assert_eq!(AuditAction::parse(a.as_str()), Some(a));
        }
        assert_eq!(AuditAction::parse("limit"), None);
    }

    #[test]
    fn cursors_round_trip_and_reject_junk() {
        let c = AuditCursor { at_ms: 1_700_000_000_000, id: "aud_01abc".into() };
        assert_eq!(AuditCursor::parse(&c.token()), Some(c));
        for junk in ["", "12", "x.aud_1", "12.", "12.aud'1", "12.aud 1"] {
            assert_eq!(AuditCursor::parse(junk), None, "{junk}");
        }
    }

    #[test]
    fn the_diff_lists_changed_fields_only() {
        let before = json!({"tokens": 3, "interval": 10000, "note": "x", "nested": {"a": 1, "b": 2}});
        let after = json!({"tokens": 2, "interval": 10000, "note": "y", "nested": {"a": 1, "b": 3}, "shadow": true});
        let changes = diff(Some(&before), Some(&after));
        let view: Vec<(&str, Option<&str>, Option<&str>)> =
            changes.iter().map(|c| (c.field.as_str(), c.before.as_deref(), c.after.as_deref())).collect();
        assert_eq!(
            view,
            [
                ("nested.b", Some("2"), Some("3")),
                ("note", Some("x"), Some("y")),
                ("shadow", None, Some("true")),
                ("tokens", Some("3"), Some("2")),
            ]
        );
        let created = diff(None, Some(&after));
        assert!(created.len() == 6 && created.iter().all(|c| c.before.is_none()));
        assert!(diff(Some(&before), Some(&before)).is_empty());
    }
}
