//! The shared-quota [`Limiter`] as the retry executor's [`QuotaGate`].
//!
//! The rule is resolved once per call here to learn what the delay function
//! needs (one token's refill or the rule's minimum penalty, and its wait
//! ceiling); the limiter resolves it again for the decision. A rule edit
//! landing between the two only changes the numbers of one pause.

use std::time::Duration;

use http::HeaderMap;

use super::gate::{CallTarget, GateError, GatePermit, GateRefusal, QuotaGate};
use crate::quota::limiter::{bucket_key, QuotaError, QuotaRequest, RateLimitHeaders};
use crate::quota::outcome::{Lease, Outcome};
use crate::quota::stats::{RefusalReason, GLOBAL_ACCOUNT};
use crate::quota::Limiter;

fn request(target: &CallTarget, max_wait: Option<Duration>) -> QuotaRequest {
    let mut req = QuotaRequest::new(target.scope.as_str(), target.method.as_str(), target.path.as_str()).cost(target.cost).priority(target.priority);
    if let Some(account) = &target.account {
        req = req.account(account.as_str());
    }
    if let Some(max_wait) = max_wait {
        req = req.max_wait(max_wait);
    }
    req
}

fn feedback(e: QuotaError) -> GateError {
    GateError(Box::new(e))
}

#[async_trait::async_trait]
impl QuotaGate for Limiter {
    async fn acquire(&self, target: &CallTarget, max_wait: Option<Duration>) -> Result<GatePermit, GateRefusal> {
        let req = request(target, max_wait);
        let rule = self.resolve(&req.scope, &req.method, &req.path);
        match Limiter::acquire(self, &req).await {
            Ok(Outcome::Granted(permit)) => {
                let (refill_one_token, wait_ceiling) = match &rule {
                    Some(rule) => (rule.penalty_floor(), rule.wait_ceiling(max_wait)),
                    // The rule vanished between resolve and acquire: no floor.
                    None => (Duration::ZERO, max_wait.unwrap_or(Duration::from_secs(30))),
                };
                Ok(GatePermit {
                    waited: permit.wait,
                    refill_one_token,
                    wait_ceiling,
                    lease: permit.lease.map(|lease| lease.id),
                })
            }
            Ok(Outcome::Refused(refusal)) => Err(match refusal.reason {
                RefusalReason::WaitCeilingExceeded => GateRefusal::WaitCeiling { retry_after: refusal.retry_after },
                RefusalReason::ConcurrencyLimit => GateRefusal::ConcurrencyLimit { retry_after: refusal.retry_after },
                RefusalReason::NoRule => GateRefusal::NoRule,
                RefusalReason::StoreUnavailable | RefusalReason::BreakerOpen => {
                    GateRefusal::StoreUnavailable(format!("limiter refused: {}", refusal.reason.as_str()).into())
                }
            }),
            Err(QuotaError::Store(e)) => Err(GateRefusal::StoreUnavailable(Box::new(e))),
            Err(e) => Err(GateRefusal::Invalid(Box::new(e))),
        }
    }

    async fn release(&self, target: &CallTarget, permit: &GatePermit) -> Result<(), GateError> {
        let (Some(id), Some(rule)) = (&permit.lease, self.resolve(&target.scope, target.method.as_str(), &target.path))
        else {
            return Ok(());
        };
        let account = target.account.clone().unwrap_or_else(|| GLOBAL_ACCOUNT.to_owned());
        let lease = Lease { bucket: bucket_key(account, &rule), id: id.clone() };
        Limiter::release(self, &lease).await.map_err(feedback)
    }

    async fn penalize(&self, target: &CallTarget, retry_after: Option<Duration>) -> Result<(), GateError> {
        Limiter::penalize(self, &request(target, None), retry_after).await.map(|_| ()).map_err(feedback)
    }

    async fn observe(&self, target: &CallTarget, headers: &HeaderMap) -> Result<(), GateError> {
        let get = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
        let parsed = RateLimitHeaders::parse(get("x-ratelimit-remaining"), get("x-ratelimit-reset"), self.clock().now());
        if parsed.remaining.is_none() {
            return Ok(());
        }
        Limiter::observe(self, &request(target, None), parsed).await.map_err(feedback)
    }

    async fn record_breaker_refusal(&self, target: &CallTarget) -> Result<(), GateError> {
        Limiter::record_refusal(self, &request(target, None), RefusalReason::BreakerOpen).await.map_err(feedback)
    }
}
