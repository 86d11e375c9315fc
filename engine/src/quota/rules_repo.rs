//! Limit rules in the database (`limit_rules`, migration 0002), their history
//! (`limit_rule_history`), and hot reload.
//!
//! Every change runs in one transaction that writes the rule, a history row
//! with before/after JSON, and bumps `limit_rules_version`. Each instance runs
//! a [`RuleReloader`] that polls the version (every ≤ 1 s) and, when it moved,
//! loads the whole set and swaps it into the [`Limiter`] atomically. Buckets
//! are keyed by rule id, so their state carries over an edit.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use sqlx::any::AnyRow;
use sqlx::Row;

use crate::audit::{self, AuditAction, AuditEntry, AuditError};
use crate::clock::Timestamp;
use crate::db::Db;
use crate::periodic::{Reloader, VersionedSet};

use super::limiter::Limiter;
use super::registry::RuleRegistry;
use super::rule::{Algorithm, Limit, Rule, RuleError, RuleId};

#[derive(Debug, thiserror::Error)]
pub enum RulesRepoError {
    #[error("invalid rule: {0}")]
    Invalid(#[from] RuleError),
    #[error("a rule for this scope, method and path already exists")]
    Conflict,
    #[error("no rule with id {0}")]
    NotFound(RuleId),
    #[error("stored rule {id} is unreadable")]
    Corrupt {
        id: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("database error")]
    Db(#[source] sqlx::Error),
    #[error("writing the audit log")]
    Audit(#[source] AuditError),
}

impl From<sqlx::Error> for RulesRepoError {
    fn from(e: sqlx::Error) -> Self {
        match &e {
            sqlx::Error::Database(d) if d.is_unique_violation() => RulesRepoError::Conflict,
            _ => RulesRepoError::Db(e),
        }
    }
}

/// A change, for the audit log: the rule before and after.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RuleChange {
    pub before: Option<Rule>,
    pub after: Option<Rule>,
}

/// One row of a rule's history.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RuleHistoryEntry {
    pub rule_id: RuleId,
    pub at_ms: i64,
    pub actor: String,
    /// `create`, `update` or `delete`.
    pub action: String,
    pub before: Option<Rule>,
    pub after: Option<Rule>,
}

const COLUMNS: &str = "id, scope, method, path, algorithm, tokens, interval_ms, burst, concurrency, \
     max_wait_ms, min_penalty_ms, shadow, enabled, note, updated_by, updated_at";

/// The same columns for reading. The Any driver cannot decode SQLite
/// booleans, so flags are read as BIGINT 0/1 on both backends.
const SELECT: &str = "id, scope, method, path, algorithm, tokens, interval_ms, burst, concurrency, \
     max_wait_ms, min_penalty_ms, CAST(CASE WHEN shadow THEN 1 ELSE 0 END AS BIGINT) AS shadow, \
     CAST(CASE WHEN enabled THEN 1 ELSE 0 END AS BIGINT) AS enabled, note, updated_by, updated_at";

/// The rules table.
#[derive(Clone, Debug)]
pub struct RulesRepo {
    db: Db,
}

impl RulesRepo {
    pub fn new(db: Db) -> RulesRepo {
        RulesRepo { db }
    }

    pub async fn list(&self) -> Result<Vec<Rule>, RulesRepoError> {
        let rows = sqlx::query(&format!("SELECT {SELECT} FROM limit_rules ORDER BY scope, id"))
            .fetch_all(self.db.pool())
            .await?;
        rows.iter().map(rule_from_row).collect()
    }

    pub async fn get(&self, id: &RuleId) -> Result<Option<Rule>, RulesRepoError> {
        let row = sqlx::query(&format!("SELECT {SELECT} FROM limit_rules WHERE id = $1"))
            .bind(id.as_str())
            .fetch_optional(self.db.pool())
            .await?;
        row.as_ref().map(rule_from_row).transpose()
    }

    /// The version counter, bumped by every change.
    pub async fn version(&self) -> Result<i64, RulesRepoError> {
        Ok(sqlx::query("SELECT version FROM limit_rules_version WHERE id = 1")
            .fetch_one(self.db.pool())
            .await?
            .try_get::<i64, _>(0)?)
    }

    /// The whole set, tagged with the version read *before* it (a change in
    /// between makes the next poll load again, never miss it).
    pub async fn load(&self) -> Result<RuleRegistry, RulesRepoError> {
        let version = self.version().await?;
        Ok(RuleRegistry::new(self.list().await?).with_version(version))
    }

    pub async fn create(&self, mut rule: Rule, actor: &str, now: Timestamp) -> Result<RuleChange, RulesRepoError> {
        rule.validate()?;
        stamp(&mut rule, actor, now);
        let mut tx = self.db.pool().begin().await?;
        bind_rule(&format!("INSERT INTO limit_rules ({COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)"), &rule)
            .execute(&mut *tx)
            .await?;
        let change = RuleChange { before: None, after: Some(rule) };
        record(&mut tx, &change, actor, now, AuditAction::LimitCreate).await?;
        tx.commit().await?;
        Ok(change)
    }

    /// Replace the rule with the same id.
    pub async fn update(&self, mut rule: Rule, actor: &str, now: Timestamp) -> Result<RuleChange, RulesRepoError> {
        rule.validate()?;
        stamp(&mut rule, actor, now);
        let before = self.get(&rule.id).await?.ok_or_else(|| RulesRepoError::NotFound(rule.id.clone()))?;
        let mut tx = self.db.pool().begin().await?;
        let sql = "UPDATE limit_rules SET scope = $2, method = $3, path = $4, algorithm = $5, tokens = $6, \
                   interval_ms = $7, burst = $8, concurrency = $9, max_wait_ms = $10, min_penalty_ms = $11, \
                   shadow = $12, enabled = $13, note = $14, updated_by = $15, updated_at = $16 WHERE id = $1";
        if bind_rule(sql, &rule).execute(&mut *tx).await?.rows_affected() == 0 {
            return Err(RulesRepoError::NotFound(rule.id));
        }
        let change = RuleChange { before: Some(before), after: Some(rule) };
        record(&mut tx, &change, actor, now, AuditAction::LimitUpdate).await?;
        tx.commit().await?;
        Ok(change)
    }

    pub async fn delete(&self, id: &RuleId, actor: &str, now: Timestamp) -> Result<RuleChange, RulesRepoError> {
        let before = self.get(id).await?.ok_or_else(|| RulesRepoError::NotFound(id.clone()))?;
        let mut tx = self.db.pool().begin().await?;
        if sqlx::query("DELETE FROM limit_rules WHERE id = $1")
            .bind(id.as_str())
            .execute(&mut *tx)
            .await?
            .rows_affected()
            == 0
        {
            return Err(RulesRepoError::NotFound(id.clone()));
        }
        let change = RuleChange { before: Some(before), after: None };
        record(&mut tx, &change, actor, now, AuditAction::LimitDelete).await?;
        tx.commit().await?;
        Ok(change)
    }

    /// Insert the presets that are not there yet (by id); returns how many.
    pub async fn seed_presets(&self, actor: &str, now: Timestamp) -> Result<usize, RulesRepoError> {
        let mut created = 0;
        for rule in super::rule::presets() {
            if self.get(&rule.id).await?.is_none() {
                match self.create(rule, actor, now).await {
                    Ok(_) => created += 1,
                    Err(RulesRepoError::Conflict) => {}
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(created)
    }

    /// A rule's history, newest first.
    pub async fn history(&self, id: &RuleId, limit: i64) -> Result<Vec<RuleHistoryEntry>, RulesRepoError> {
        let rows = sqlx::query(
            "SELECT rule_id, at, actor, action, before_json, after_json FROM limit_rule_history \
             WHERE rule_id = $1 ORDER BY at DESC, id DESC LIMIT $2",
        )
        .bind(id.as_str())
        .bind(limit)
        .fetch_all(self.db.pool())
        .await?;
        rows.iter()
            .map(|r| {
                let json = |col: &str| -> Result<Option<Rule>, RulesRepoError> {
                    r.try_get::<Option<String>, _>(col)?
                        .map(|j| serde_json::from_str(&j))
                        .transpose()
                        .map_err(|e| RulesRepoError::Corrupt { id: id.to_string(), source: Box::new(e) })
                };
                Ok(RuleHistoryEntry {
                    rule_id: RuleId(r.try_get("rule_id")?),
                    at_ms: r.try_get("at")?,
                    actor: r.try_get("actor")?,
                    action: r.try_get("action")?,
                    before: json("before_json")?,
                    after: json("after_json")?,
                })
            })
            .collect()
    }
}

fn stamp(rule: &mut Rule, actor: &str, now: Timestamp) {
    rule.updated_by = actor.to_owned();
    // Stored in milliseconds; keep the value equal to what a reload reads.
    rule.updated_at = Timestamp::from_millis(now.as_millis());
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

fn bind_rule<'q>(sql: &'q str, r: &'q Rule) -> sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>> {
    sqlx::query(sql)
        .bind(r.id.as_str())
        .bind(r.scope.as_str())
        .bind(r.method.as_deref())
        .bind(r.path.as_deref())
        .bind(r.limit.algorithm.as_str())
        .bind(i64::from(r.limit.tokens))
        .bind(ms(r.limit.interval))
        .bind(i64::from(r.limit.burst))
        .bind(r.concurrency.map(i64::from))
        .bind(r.max_wait.map(ms))
        .bind(r.min_penalty.map(ms))
        .bind(r.shadow)
        .bind(r.enabled)
        .bind(r.note.as_str())
        .bind(r.updated_by.as_str())
        .bind(r.updated_at.as_millis())
}

async fn record(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    change: &RuleChange,
    actor: &str,
    now: Timestamp,
    action: AuditAction,
) -> Result<(), RulesRepoError> {
    let rule_id = change.after.as_ref().or(change.before.as_ref()).map(|r| r.id.to_string()).unwrap_or_default();
    let json = |r: &Option<Rule>| r.as_ref().and_then(|r| serde_json::to_string(r).ok());
    sqlx::query(
        "INSERT INTO limit_rule_history (id, rule_id, at, actor, action, before_json, after_json) \
         VALUES ($1, $2, $3, $4, $5, $6, $7)",
    )
    .bind(format!("rlh_{}", ulid::Ulid::new().to_string().to_lowercase()))
    .bind(rule_id.as_str())
    .bind(now.as_millis())
    .bind(actor)
    .bind(history_action(action))
    .bind(json(&change.before))
    .bind(json(&change.after))
    .execute(&mut **tx)
    .await?;
    sqlx::query("UPDATE limit_rules_version SET version = version + 1 WHERE id = 1").execute(&mut **tx).await?;
    // The audit row commits with the rule or not at all.
    let entry = AuditEntry { actor, action, target: &rule_id, before: change.before.as_ref(), after: change.after.as_ref(), reason: None };
    audit::record_in(tx, entry, now).await.map_err(RulesRepoError::Audit)?;
    Ok(())
}

/// The rule history's own action words (`create`, `update`, `delete`).
fn history_action(action: AuditAction) -> &'static str {
    match action {
        AuditAction::LimitCreate => "create",
        AuditAction::LimitDelete => "delete",
        _ => "update",
    }
}

fn rule_from_row(row: &AnyRow) -> Result<Rule, RulesRepoError> {
    let id: String = row.try_get("id")?;
    let corrupt = |e: Box<dyn std::error::Error + Send + Sync>| RulesRepoError::Corrupt { id: id.clone(), source: e };
    let u32_of = |v: i64| u32::try_from(v).map_err(|e| corrupt(Box::new(e)));
    let dur = |v: i64| Duration::from_millis(u64::try_from(v).unwrap_or(0));
    let algorithm: Algorithm =
        row.try_get::<String, _>("algorithm")?.parse().map_err(|e: RuleError| corrupt(Box::new(e)))?;
    let limit = Limit {
        algorithm,
        tokens: u32_of(row.try_get("tokens")?)?,
        interval: dur(row.try_get("interval_ms")?),
        burst: u32_of(row.try_get("burst")?)?,
    };
    Ok(Rule {
        id: RuleId(id.clone()),
        scope: row.try_get("scope")?,
        method: row.try_get("method")?,
        path: row.try_get("path")?,
        limit,
        concurrency: row.try_get::<Option<i64>, _>("concurrency")?.map(u32_of).transpose()?,
        max_wait: row.try_get::<Option<i64>, _>("max_wait_ms")?.map(dur),
        min_penalty: row.try_get::<Option<i64>, _>("min_penalty_ms")?.map(dur),
        shadow: row.try_get::<i64, _>("shadow")? != 0,
        enabled: row.try_get::<i64, _>("enabled")? != 0,
        note: row.try_get("note")?,
        updated_by: row.try_get("updated_by")?,
        updated_at: Timestamp::from_millis(row.try_get("updated_at")?),
    })
}

/// The default poll interval: an edit is live everywhere within about 1 s
/// (SPEC: within 2 s), for one indexed single-row read per instance per second.
pub const RELOAD_EVERY: Duration = Duration::from_secs(1);

/// The limit rules in the database and the limiter that enforces them.
#[derive(Debug)]
pub struct RulesInForce {
    repo: RulesRepo,
    limiter: Limiter,
}

impl VersionedSet for RulesInForce {
    type Error = RulesRepoError;
    const WHAT: &'static str = "limit rules";

    async fn version(&self) -> Result<i64, RulesRepoError> {
        self.repo.version().await
    }

    async fn install(&self) -> Result<i64, RulesRepoError> {
        let registry = self.repo.load().await?;
        let version = registry.version;
        self.limiter.replace_rules(registry);
        Ok(version)
    }
}

/// Keeps one limiter's rule set in step with the database (poll every
/// [`RELOAD_EVERY`]: edits are live everywhere within 2 s).
pub type RuleReloader = Reloader<RulesInForce>;

impl RuleReloader {
    /// Call [`Reloader::run_once`] (or `run`) to load the first set.
    pub fn new(repo: RulesRepo, limiter: Limiter) -> RuleReloader {
        Reloader::of(RulesInForce { repo, limiter })
    }
}
