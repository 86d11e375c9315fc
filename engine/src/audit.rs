//! The audit log: every mutation made through the UI or the API, with who,
//! when, what and the record before and after.

use serde::Serialize;
use crate::clock::Timestamp;
use crate::db::Db;

/// One change to record.
#[derive(Debug)]
pub struct AuditEntry<'a, T: Serialize> {
    pub actor: &'a str,
    /// e.g. `limit.create`.
    pub action: &'a str,
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

/// One stored audit row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AuditRecord {
    pub id: String,
    pub at: Timestamp,
    pub actor: String,
    pub action: String,
    pub target: String,
    pub before_json: Option<String>,
    pub after_json: Option<String>,
    pub reason: Option<String>,
}

/// The newest `limit` rows whose action is one of `actions`, newest first.
pub async fn recent(db: &Db, actions: &[&str], limit: u32) -> Result<Vec<AuditRecord>, AuditError> {
    use sqlx::Row;
    let placeholders: Vec<String> = (1..=actions.len()).map(|i| format!("${i}")).collect();
    let sql = format!(
        "SELECT id, at, actor, action, target, before_json, after_json, reason FROM audit_log \
         WHERE action IN ({}) ORDER BY at DESC, id DESC LIMIT {}",
        placeholders.join(", "),
        limit.min(1000)
    );
    let mut q = sqlx::query(&sql);
    for a in actions {
        q = q.bind(*a);
    }
    let rows = q.fetch_all(db.pool()).await?;
    rows.iter()
        .map(|r| {
            Ok(AuditRecord {
                id: r.try_get("id")?,
                at: Timestamp::from_millis(r.try_get("at")?),
                actor: r.try_get("actor")?,
                action: r.try_get("action")?,
                target: r.try_get("target")?,
                before_json: r.try_get("before_json")?,
                after_json: r.try_get("after_json")?,
                reason: r.try_get("reason")?,
            })
        })
        .collect::<Result<_, sqlx::Error>>()
        .map_err(AuditError::from)
}

pub async fn record<T: Serialize>(db: &Db, entry: AuditEntry<'_, T>, now: Timestamp) -> Result<(), AuditError> {
    let before = entry.before.map(serde_json::to_string).transpose()?;
    let after = entry.after.map(serde_json::to_string).transpose()?;
    sqlx::query(
        "INSERT INTO audit_log (id, at, actor, action, target, before_json, after_json, reason) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
    )
    .bind(format!("aud_{}", ulid::Ulid::new().to_string().to_lowercase()))
    .bind(now.as_millis())
    .bind(entry.actor)
    .bind(entry.action)
    .bind(entry.target)
    .bind(before)
    .bind(after)
    .bind(entry.reason)
    .execute(db.pool())
    .await?;
    Ok(())
}
