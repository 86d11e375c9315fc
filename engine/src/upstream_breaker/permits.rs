//! Permits that respect the upstream breaker: what the permit endpoint does
//! for workers in any language, in the order the Rust executor follows.
//!
//! 1. The request's rule decides whether the breaker applies: every rule
//!    does ("every rule has a breaker": the one of the request's account and
//!    scope, closed until somebody reports failures), except shadow rules
//!    (they never block) and rules the deployment lists as ignored.
//! 2. The breaker of (account, the request's scope) is asked first, so a
//!    refused call spends no quota. Open: refused with `breaker_open` and the
//!    time until the next probe. Half-open: this permit is the probe, one at
//!    a time, exactly as [`UpstreamBreaker::admit`] hands it out.
//! 3. Then the limiter books the slot. If it refuses, an admitted probe is
//!    given back at once, so the next caller may probe.
//!
//! A breaker store that fails follows the deployment's store-down policy:
//! `fail_closed` refuses with `store_unavailable`; `local_fallback` lets the
//! permit through on the limiter's decision alone and does not ask the
//! breaker again for a second (a dead Redis would otherwise cost every
//! permit a timeout).

use std::collections::HashSet;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::clock::Timestamp;
use crate::quota::{Limiter, Outcome, QuotaError, QuotaRequest, RefusalReason, Refusal, RuleId, StorePolicy};

use super::{BreakerKey, UpstreamAdmission, UpstreamBreaker};

/// How long a failed breaker store is not asked again under `local_fallback`.
const SKIP_AFTER_FAILURE: Duration = Duration::from_secs(1);

/// Which permits wait for the upstream breaker.
#[derive(Debug, Clone)]
pub struct PermitGateConfig {
    /// Rules whose permits never wait for the breaker (their breaker is still
    /// fed by reports and shown).
    pub ignored_rules: HashSet<RuleId>,
    /// The deployment's store-down policy, applied to the breaker store too.
    pub store_down: StorePolicy,
}

impl Default for PermitGateConfig {
    fn default() -> Self {
        PermitGateConfig { ignored_rules: HashSet::new(), store_down: StorePolicy::FailClosed }
    }
}

/// A permit decision, and whether the permit is the half-open breaker's probe
/// (the worker must report its outcome, or `not_sent`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatedOutcome {
    pub outcome: Outcome,
    pub probe: bool,
}

/// The limiter behind the upstream breaker. Cheap to clone.
#[derive(Debug, Clone)]
pub struct BreakerGate {
    limiter: Limiter,
    breakers: UpstreamBreaker,
    config: Arc<PermitGateConfig>,
    /// Under `local_fallback`, the breaker is not asked before this instant
    /// (Unix micros) after it failed.
    skip_until: Arc<AtomicI64>,
}

enum Admission {
    Pass,
    Probe(BreakerKey),
    Refuse(Refusal),
}

impl BreakerGate {
    pub fn new(limiter: Limiter, breakers: UpstreamBreaker, config: PermitGateConfig) -> BreakerGate {
        BreakerGate { limiter, breakers, config: Arc::new(config), skip_until: Arc::new(AtomicI64::new(i64::MIN)) }
    }

    pub fn limiter(&self) -> &Limiter {
        &self.limiter
    }

    /// Does the breaker apply to permits of `rule`?
    pub fn applies_to(&self, rule: &crate::quota::Rule) -> bool {
        !rule.shadow && !self.config.ignored_rules.contains(&rule.id)
    }

    /// A permit for `req`: booked and returned at once (`hold == false`, the
    /// caller waits `permit.wait`), or held until the booked slot comes.
    pub async fn permit(&self, req: &QuotaRequest, hold: bool) -> Result<GatedOutcome, QuotaError> {
        let admission = match self.limiter.resolve(&req.scope, &req.method, &req.path) {
            Some(rule) if self.applies_to(&rule) => self.admit(req, &rule.id).await,
            // No rule: the limiter refuses it with its own reason.
            _ => Admission::Pass,
        };
        let probe = match admission {
            Admission::Pass => None,
            Admission::Probe(key) => Some(key),
            Admission::Refuse(refusal) => {
                if refusal.reason == RefusalReason::BreakerOpen {
                    // Counted with the limiter's refusals for the dashboards;
                    // best effort, the refusal stands either way.
                    if let Err(e) = self.limiter.record_refusal(req, RefusalReason::BreakerOpen).await {
                        tracing::debug!(error = %e, "could not count a breaker refusal");
                    }
                }
                return Ok(GatedOutcome { outcome: Outcome::Refused(refusal), probe: false });
            }
        };
        let outcome = if hold { self.limiter.acquire(req).await } else { self.limiter.reserve(req).await };
        let granted = matches!(outcome, Ok(Outcome::Granted(_)));
        if let (Some(key), false) = (&probe, granted) {
            if let Err(e) = self.breakers.abandon_probe(key).await {
                tracing::warn!(error = %e, breaker = %key, "could not free an unused probe");
            }
        }
        Ok(GatedOutcome { outcome: outcome?, probe: probe.is_some() && granted })
    }

    async fn admit(&self, req: &QuotaRequest, rule: &RuleId) -> Admission {
        // An account or scope no breaker can have (the limiter judges the
        // account itself): nobody can have reported on it, so it is closed.
        let Ok(key) = BreakerKey::new(req.account.as_deref(), &req.scope) else { return Admission::Pass };
        let now = self.limiter.clock().now();
        if now.as_micros() < self.skip_until.load(Ordering::Relaxed) {
            return Admission::Pass;
        }
        match self.breakers.admit_with_state(&key).await {
            Ok(a) => match a.admission {
                UpstreamAdmission::Allowed => Admission::Pass,
                UpstreamAdmission::Probe => Admission::Probe(key),
                UpstreamAdmission::Rejected { .. } => Admission::Refuse(Refusal {
                    reason: RefusalReason::BreakerOpen,
                    retry_after: Some(a.retry_after()),
                    rule: Some(rule.clone()),
                }),
            },
            Err(e) => {
                tracing::warn!(error = %e, breaker = %key, "upstream breaker store failed during a permit");
                match self.config.store_down {
                    StorePolicy::FailClosed => Admission::Refuse(Refusal {
                        reason: RefusalReason::StoreUnavailable,
                        retry_after: Some(Duration::from_secs(1)),
                        rule: Some(rule.clone()),
                    }),
                    StorePolicy::LocalFallback { .. } => {
                        let until: Timestamp = now + SKIP_AFTER_FAILURE;
                        self.skip_until.store(until.as_micros(), Ordering::Relaxed);
                        Admission::Pass
                    }
                }
            }
        }
    }
}
