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
