//! Writing limit rules the one way every entry point must: validate the draft
//! (every invalid field at once), write the rule, its history and its audit
//! row in one transaction, and apply it on this instance at once. The HTTP API and the Limits
//! page both call [`RuleAdmin`], so their validation, audit action names and
//! reload cannot drift apart. Other instances follow through their
//! [`RuleReloader`] within its period (≤ 1 s).

use crate::audit::AuditError;
use crate::clock::Timestamp;

use super::limiter::Limiter;
use super::rule::{Rule, RuleDraft, RuleError, RuleId};
use super::rules_repo::{RuleChange, RuleReloader, RulesRepo, RulesRepoError};

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
            RulesRepoError::Audit(e) => RuleAdminError::Audit(e),
            e => RuleAdminError::Repo(e),
        }
    }
}

/// Audited writes of limit rules, applied to this instance's limiter at once.
#[derive(Clone, Debug)]
pub struct RuleAdmin {
    repo: RulesRepo,
    limiter: Limiter,
}

impl RuleAdmin {
    pub fn new(repo: RulesRepo, limiter: Limiter) -> RuleAdmin {
        RuleAdmin { repo, limiter }
    }

    /// Create a rule with a new id.
    pub async fn create(&self, draft: RuleDraft, actor: &str, now: Timestamp) -> Result<Rule, RuleAdminError> {
        let rule = draft.into_rule(RuleId::generate()).map_err(RuleAdminError::Invalid)?;
        let change = self.repo.create(rule, actor, now).await?;
        self.applied(change).await
    }

    /// Replace rule `id` with the draft.
    pub async fn update(&self, id: &RuleId, draft: RuleDraft, actor: &str, now: Timestamp) -> Result<Rule, RuleAdminError> {
        let rule = draft.into_rule(id.clone()).map_err(RuleAdminError::Invalid)?;
        let change = self.repo.update(rule, actor, now).await?;
        self.applied(change).await
    }

    /// Turn shadow mode on or off (an update like any other, audited as one).
    pub async fn set_shadow(&self, id: &RuleId, shadow: bool, actor: &str, now: Timestamp) -> Result<Rule, RuleAdminError> {
        let mut rule = self.repo.get(id).await?.ok_or_else(|| RuleAdminError::NotFound(id.clone()))?;
        rule.shadow = shadow;
        let change = self.repo.update(rule, actor, now).await?;
        self.applied(change).await
    }

    /// Delete rule `id`; returns it as it was.
    pub async fn delete(&self, id: &RuleId, actor: &str, now: Timestamp) -> Result<Rule, RuleAdminError> {
        let change = self.repo.delete(id, actor, now).await?;
        self.applied(change).await
    }

    /// Reload this instance's rules after a write (the repository wrote the
    /// rule, its history and its audit row in one transaction). A failed
    /// reload is not an error: the background reloader retries within a
    /// second and the write stands.
    async fn applied(&self, change: RuleChange) -> Result<Rule, RuleAdminError> {
        let target = change.after.as_ref().or(change.before.as_ref()).map(|r| r.id.clone()).unwrap_or(RuleId(String::new()));
        if let Err(e) = RuleReloader::new(self.repo.clone(), self.limiter.clone()).run_once().await {
            tracing::warn!(error = &e as &dyn std::error::Error, "reloading rules after a write; the reloader will retry");
        }
        change.after.or(change.before).ok_or(RuleAdminError::NotFound(target))
    }
}
