//! Writing limit rules the one way every entry point must: validate the draft
//! (every invalid field at once), write the rule and its history, audit the
//! change, and apply it on this instance at once. The HTTP API and the Limits
//! page both call [`RuleAdmin`], so their validation, audit action names and
//! reload cannot drift apart. Other instances follow through their
//! [`RuleReloader`] within its period (≤ 1 s).

use crate::audit::{self, AuditEntry, AuditError};
use crate::clock::Timestamp;
use crate::db::Db;

use super::limiter::Limiter;
use super::rule::{Rule, RuleDraft, RuleError, RuleId};
use super::rules_repo::{RuleChange, RuleReloader, RulesRepo, RulesRepoError};

/// Audit action names for limit rules (the API and the UI write the same).
pub const LIMIT_CREATE: &str = "limit.create";
pub const LIMIT_UPDATE: &str = "limit.update";
pub const LIMIT_DELETE: &str = "limit.delete";

#[derive(Debug, thiserror::Error)]
pub enum RuleAdminError {
    /// The draft is invalid; one error per invalid field.
    #[error("invalid rule: {}", join(.0))]
    Invalid(Vec<RuleError>),
    #[error("a rule for this scope, method and path already exists")]
    Conflict,
    #[error("no rule with id {0}")]
    NotFound(RuleId),
    #[error("writing the limit rule")]
    Repo(#[source] RulesRepoError),
    #[error("writing the audit log")]
    Audit(#[source] AuditError),
}

fn join(errors: &[RuleError]) -> String {
    errors.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
}

impl From<RulesRepoError> for RuleAdminError {
    fn from(e: RulesRepoError) -> Self {
        match e {
            RulesRepoError::Invalid(e) => RuleAdminError::Invalid(vec![e]),
            RulesRepoError::Conflict => RuleAdminError::Conflict,
            RulesRepoError::NotFound(id) => RuleAdminError::NotFound(id),
            e => RuleAdminError::Repo(e),
        }
    }
}

/// Audited writes of limit rules, applied to this instance's limiter at once.
#[derive(Clone, Debug)]
pub struct RuleAdmin {
    db: Db,
    repo: RulesRepo,
    limiter: Limiter,
}

impl RuleAdmin {
    pub fn new(db: Db, repo: RulesRepo, limiter: Limiter) -> RuleAdmin {
        RuleAdmin { db, repo, limiter }
    }

    /// Create a rule with a new id.
    pub async fn create(&self, draft: RuleDraft, actor: &str, now: Timestamp) -> Result<Rule, RuleAdminError> {
        let rule = draft.into_rule(RuleId::generate()).map_err(RuleAdminError::Invalid)?;
        let change = self.repo.create(rule, actor, now).await?;
        self.applied(LIMIT_CREATE, actor, change, now).await
    }

    /// Replace rule `id` with the draft.
    pub async fn update(&self, id: &RuleId, draft: RuleDraft, actor: &str, now: Timestamp) -> Result<Rule, RuleAdminError> {
        let rule = draft.into_rule(id.clone()).map_err(RuleAdminError::Invalid)?;
        let change = self.repo.update(rule, actor, now).await?;
        self.applied(LIMIT_UPDATE, actor, change, now).await
    }

    /// Turn shadow mode on or off (an update like any other, audited as one).
    pub async fn set_shadow(&self, id: &RuleId, shadow: bool, actor: &str, now: Timestamp) -> Result<Rule, RuleAdminError> {
        let mut rule = self.repo.get(id).await?.ok_or_else(|| RuleAdminError::NotFound(id.clone()))?;
        rule.shadow = shadow;
        let change = self.repo.update(rule, actor, now).await?;
        self.applied(LIMIT_UPDATE, actor, change, now).await
    }

    /// Delete rule `id`; returns it as it was.
    pub async fn delete(&self, id: &RuleId, actor: &str, now: Timestamp) -> Result<Rule, RuleAdminError> {
        let change = self.repo.delete(id, actor, now).await?;
        self.applied(LIMIT_DELETE, actor, change, now).await
    }

    /// Audit the change and reload this instance's rules. The audit row is
    /// written after the rule (the repository owns its transaction); a failed
    /// audit write is an error the admin sees. A failed reload is not: the
    /// background reloader retries within a second and the write stands.
    async fn applied(&self, action: &str, actor: &str, change: RuleChange, now: Timestamp) -> Result<Rule, RuleAdminError> {
        let target = change.after.as_ref().or(change.before.as_ref()).map(|r| r.id.clone()).unwrap_or(RuleId(String::new()));
        let entry = AuditEntry {
            actor,
            action,
            target: target.as_str(),
            before: change.before.as_ref(),
            after: change.after.as_ref(),
            reason: None,
        };
        audit::record(&self.db, entry, now).await.map_err(RuleAdminError::Audit)?;
        if let Err(e) = RuleReloader::new(self.repo.clone(), self.limiter.clone()).run_once().await {
            tracing::warn!(error = &e as &dyn std::error::Error, "reloading rules after a write; the reloader will retry");
        }
        change.after.or(change.before).ok_or(RuleAdminError::NotFound(target))
    }
}
