//! Closing an upstream breaker by hand, the one way every entry point must:
//! check the reason, reset the breaker, write the audit row. The Breakers
//! page and the HTTP API both call [`UpstreamBreakerAdmin`], so their
//! validation and audit action cannot drift apart (as
//! [`RuleAdmin`](crate::quota::admin::RuleAdmin) is for limit rules).

use crate::audit::{self, AuditAction, AuditEntry, AuditError};
use crate::clock::Timestamp;
use crate::db::Db;

use super::{BreakerError, BreakerKey, BreakerState, BreakerView, UpstreamBreaker};

/// A reason is this many characters at most (after trimming), at least one.
pub const MAX_REASON_CHARS: usize = 500;

#[derive(Debug, thiserror::Error)]
pub enum UpstreamBreakerAdminError {
    #[error("reason: say why the breaker is reset (1–{MAX_REASON_CHARS} characters)")]
    Reason,
    #[error("resetting the upstream breaker")]
    Breaker(#[source] BreakerError),
    #[error("writing the audit log")]
    Audit(#[source] AuditError),
}

/// A reset, for the caller and the audit log: the breaker before and after.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BreakerReset {
    pub before: BreakerView,
    pub after: BreakerView,
}

/// Audited resets of upstream breakers.
#[derive(Debug, Clone)]
pub struct UpstreamBreakerAdmin {
    db: Db,
    breakers: UpstreamBreaker,
}

impl UpstreamBreakerAdmin {
    pub fn new(db: Db, breakers: UpstreamBreaker) -> UpstreamBreakerAdmin {
        UpstreamBreakerAdmin { db, breakers }
    }

    /// Close the breaker of `key` now; held-back calls may go out again.
    ///
    /// The reset happens before the audit row is written (the breaker lives
    /// in Redis or memory, outside the database's transaction): a failed
    /// audit write is an error the caller sees, and the breaker stays closed.
    pub async fn reset(
        &self,
        key: &BreakerKey,
        actor: &str,
        reason: &str,
        now: Timestamp,
    ) -> Result<BreakerReset, UpstreamBreakerAdminError> {
        let reason = reason.trim();
        if reason.is_empty() || reason.chars().count() > MAX_REASON_CHARS {
            return Err(UpstreamBreakerAdminError::Reason);
        }
        let before = self.breakers.view(key).await.map_err(UpstreamBreakerAdminError::Breaker)?;
        self.breakers.reset(key).await.map_err(UpstreamBreakerAdminError::Breaker)?;
        let after = BreakerView::new(key, &BreakerState::default());
        let entry = AuditEntry {
            actor,
            action: AuditAction::UpstreamBreakerReset,
            target: &key.to_string(),
            before: Some(&before),
            after: Some(&after),
            reason: Some(reason),
        };
        audit::record(&self.db, entry, now).await.map_err(UpstreamBreakerAdminError::Audit)?;
        Ok(BreakerReset { before, after })
    }
}
