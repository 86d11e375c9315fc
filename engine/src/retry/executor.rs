//! The retry executor: acquire → breaker → send → classify → feedback → pause,
//! until success or a reason to give up.
//!
//! Every attempt, retries included, acquires a permit from the limiter, so
//! retries spend the same quota as first attempts. A 429 penalizes the bucket
//! before the pause is computed; a 2xx's rate-limit headers are observed.
//! Pauses go through the [`Clock`](crate::clock::Clock), so on a manual clock a
//! whole sequence runs at once and every pause is recorded.

use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{HeaderMap, StatusCode};
use rand::{RngCore, SeedableRng};

use super::gate::{CallTarget, GatePermit, GateRefusal, QuotaGate};
use super::outcome::{is_idempotent, NetworkFailure, Outcome};
use super::policy::{draw_unit, RateLimitFacts, RetryPolicy};
use super::profiles::RetryProfiles;
use super::retry_after::retry_after_from_headers;
use crate::upstream_breaker::{UpstreamAdmission, UpstreamBreaker, BreakerError, BreakerKey};
use crate::clock::{SharedClock, Timestamp};

/// A response the executor can classify.
pub trait UpstreamResponse: Send {
    fn status(&self) -> StatusCode;
    fn headers(&self) -> &HeaderMap;
}

/// A transport error the executor can classify.
pub trait TransportError: std::error::Error + Send + Sync + 'static {
    fn failure(&self) -> NetworkFailure;
}

/// Sends one attempt. Implemented for closures `FnMut(attempt) -> Future`.
pub trait SendAttempt: Send {
    type Response: UpstreamResponse;
    type Error: TransportError;

    /// `attempt` is 1-based.
    fn send(&mut self, attempt: u32) -> impl Future<Output = Result<Self::Response, Self::Error>> + Send;
}

impl<F, Fut, R, E> SendAttempt for F
where
    F: FnMut(u32) -> Fut + Send,
    Fut: Future<Output = Result<R, E>> + Send,
    R: UpstreamResponse,
    E: TransportError,
{
    type Response = R;
    type Error = E;

    fn send(&mut self, attempt: u32) -> impl Future<Output = Result<R, E>> + Send {
        self(attempt)
    }
}

/// One call as the executor sees it.
#[derive(Debug, Clone)]
pub struct Call {
    pub target: CallTarget,
    /// May a request that might have reached the upstream (timeout, broken
    /// connection) be sent again? Defaults to whether the method is idempotent.
    pub repeat_is_safe: bool,
    /// At most this many attempts, whatever the policy says (1 for a request
    /// whose body cannot be sent twice).
    pub max_attempts: Option<u32>,
}

impl Call {
    pub fn new(target: CallTarget) -> Self {
        let repeat_is_safe = is_idempotent(&target.method);
        Call { target, repeat_is_safe, max_attempts: None }
    }

    /// Never send more than `n` attempts (at least one is always sent).
    pub fn at_most(mut self, n: u32) -> Self {
        self.max_attempts = Some(n.max(1));
        self
    }

    /// Mark a non-idempotent request safe to repeat (e.g. it carries an
    /// idempotency key the upstream honours).
    pub fn safe_to_repeat(mut self) -> Self {
        self.repeat_is_safe = true;
        self
    }
}

/// Why the executor gave up.
#[derive(Debug, thiserror::Error)]
pub enum GiveUpReason {
    #[error("attempts exhausted")]
    AttemptsExhausted,
    #[error("time budget exhausted")]
    BudgetExhausted,
    #[error("wait ceiling exceeded")]
    WaitCeiling { retry_after: Option<Duration> },
    #[error("non-retryable status {0}")]
    NonRetryableStatus(StatusCode),
    /// A network failure the retry profile does not retry (e.g. VTEX's, which
    /// retries only 429 and 503).
    #[error("the retry profile does not retry network failures")]
    NetworkNotRetried,
    #[error("request may have reached the upstream and is not safe to repeat")]
    UnsafeToRepeat,
    #[error("store unavailable")]
    StoreUnavailable(#[source] Box<dyn std::error::Error + Send + Sync>),
    #[error("upstream breaker open until {retry_at}")]
    BreakerOpen { retry_at: Timestamp },
    #[error("concurrency limit reached")]
    ConcurrencyLimit { retry_after: Option<Duration> },
    #[error("no limit rule matches the request")]
    NoRule,
    #[error("invalid request")]
    InvalidRequest(#[source] Box<dyn std::error::Error + Send + Sync>),
}

impl GiveUpReason {
    /// A stable snake_case name for logs, metrics and API error codes.
    pub fn code(&self) -> &'static str {
        match self {
            GiveUpReason::AttemptsExhausted => "attempts_exhausted",
            GiveUpReason::BudgetExhausted => "budget_exhausted",
            GiveUpReason::WaitCeiling { .. } => "wait_ceiling",
            GiveUpReason::NonRetryableStatus(_) => "non_retryable_status",
            GiveUpReason::NetworkNotRetried => "network_not_retried",
            GiveUpReason::UnsafeToRepeat => "unsafe_to_repeat",
            GiveUpReason::StoreUnavailable(_) => "store_unavailable",
            GiveUpReason::BreakerOpen { .. } => "breaker_open",
            GiveUpReason::ConcurrencyLimit { .. } => "concurrency_limit",
            GiveUpReason::NoRule => "no_rule",
            GiveUpReason::InvalidRequest(_) => "invalid_request",
        }
    }
}

impl From<GateRefusal> for GiveUpReason {
    fn from(r: GateRefusal) -> Self {
        match r {
            GateRefusal::WaitCeiling { retry_after } => GiveUpReason::WaitCeiling { retry_after },
            GateRefusal::ConcurrencyLimit { retry_after } => GiveUpReason::ConcurrencyLimit { retry_after },
            GateRefusal::NoRule => GiveUpReason::NoRule,
            GateRefusal::StoreUnavailable(e) => GiveUpReason::StoreUnavailable(e),
            GateRefusal::Invalid(e) => GiveUpReason::InvalidRequest(e),
        }
    }
}

impl From<BreakerError> for GiveUpReason {
    fn from(e: BreakerError) -> Self {
        GiveUpReason::StoreUnavailable(Box::new(e))
    }
}

/// What the last attempt produced, if anything was sent.
#[derive(Debug)]
pub enum LastAttempt<R, E> {
    Response(R),
    Transport(E),
}

/// The executor gave up: why, after how many attempts, and the last result.
pub struct RetryError<R, E> {
    pub reason: GiveUpReason,
    /// Attempts actually sent.
    pub attempts: u32,
    pub last: Option<LastAttempt<R, E>>,
}

impl<R, E: fmt::Debug> fmt::Debug for RetryError<R, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let last = match &self.last {
            None => "none".to_owned(),
            Some(LastAttempt::Response(_)) => "response".to_owned(),
            Some(LastAttempt::Transport(e)) => format!("{e:?}"),
        };
        f.debug_struct("RetryError")
            .field("reason", &self.reason)
            .field("attempts", &self.attempts)
            .field("last", &last)
            .finish()
    }
}

impl<R, E> fmt::Display for RetryError<R, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "gave up after {} attempt(s): {}", self.attempts, self.reason)
    }
}

impl<R, E: std::error::Error + 'static> std::error::Error for RetryError<R, E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match (&self.reason, &self.last) {
            (GiveUpReason::StoreUnavailable(e) | GiveUpReason::InvalidRequest(e), _) => Some(e.as_ref()),
            (_, Some(LastAttempt::Transport(e))) => Some(e),
            _ => None,
        }
    }
}

/// A successful call: the 2xx response and the number of attempts it took.
#[derive(Debug)]
pub struct Completed<R> {
    pub response: R,
    pub attempts: u32,
}

/// Runs calls by a [`RetryPolicy`], through the limiter and (optionally) the
/// upstream breaker. With [`RetryExecutor::with_profiles`], each call is
/// retried by the profile of its scope (read at the call's start, so an
/// edit applies to the next call without a restart).
pub struct RetryExecutor {
    gate: Arc<dyn QuotaGate>,
    breaker: Option<UpstreamBreaker>,
    policy: RetryPolicy,
    profiles: Option<RetryProfiles>,
    clock: SharedClock,
    rng: Mutex<Box<dyn RngCore + Send>>,
}

impl fmt::Debug for RetryExecutor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryExecutor")
            .field("gate", &self.gate)
            .field("breaker", &self.breaker)
            .field("policy", &self.policy)
            .field("profiles", &self.profiles.as_ref().map(RetryProfiles::version))
            .finish_non_exhaustive()
    }
}

impl RetryExecutor {
    /// The default policy, no breaker, jitter from an OS-seeded RNG.
    pub fn new(gate: Arc<dyn QuotaGate>, clock: SharedClock) -> Self {
        RetryExecutor {
            gate,
            breaker: None,
            policy: RetryPolicy::default(),
            profiles: None,
            clock,
            rng: Mutex::new(Box::new(rand::rngs::StdRng::from_os_rng())),
        }
    }

    pub fn with_policy(mut self, policy: RetryPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// Retry each call by the profile of its scope (or of scope `*`); a scope
    /// with neither uses this executor's own policy.
    pub fn with_profiles(mut self, profiles: RetryProfiles) -> Self {
        self.profiles = Some(profiles);
        self
    }

    /// The policy a call in `scope` is retried by.
    pub fn policy_for(&self, scope: &str) -> RetryPolicy {
        self.profiles.as_ref().and_then(|p| p.policy_for(scope)).unwrap_or(self.policy)
    }

    pub fn with_breaker(mut self, breaker: UpstreamBreaker) -> Self {
        self.breaker = Some(breaker);
        self
    }

    /// Draw jitter from `rng` (seed it in tests).
    pub fn with_rng(mut self, rng: impl RngCore + Send + 'static) -> Self {
        self.rng = Mutex::new(Box::new(rng));
        self
    }

    pub fn policy(&self) -> &RetryPolicy {
        &self.policy
    }

    pub fn clock(&self) -> &SharedClock {
        &self.clock
    }

    /// One uniform draw per pause, whatever the jitter shape.
    fn draw(&self) -> f64 {
        let mut rng = self.rng.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        draw_unit(rng.as_mut())
    }

    /// Run `call`, sending each attempt with `send`, until a 2xx or a reason to
    /// give up.
    pub async fn run<S: SendAttempt>(
        &self,
        call: &Call,
        mut send: S,
    ) -> Result<Completed<S::Response>, RetryError<S::Response, S::Error>> {
        let target = &call.target;
        let policy = self.policy_for(&target.scope);
        let deadline = self.clock.now() + policy.total_budget();
        let breaker_key = match &self.breaker {
            Some(_) => match BreakerKey::new(target.account.as_deref(), &target.scope) {
                Ok(key) => Some(key),
                Err(e) => return Err(give_up(GiveUpReason::InvalidRequest(Box::new(e)), 0, None)),
            },
            None => None,
        };
        let max_attempts = call.max_attempts.map_or(policy.max_attempts(), |n| n.min(policy.max_attempts()));
        let mut last = None;
        let mut previous_backoff = None;
        for attempt in 1..=max_attempts {
            let sent = attempt - 1;
            let mut probing = false;
            if let (Some(breaker), Some(key)) = (&self.breaker, &breaker_key) {
                match breaker.admit(key).await {
                    Ok(UpstreamAdmission::Rejected { retry_at }) => {
                        if let Err(e) = self.gate.record_breaker_refusal(target).await {
                            tracing::warn!(error = %e, "could not count a breaker refusal");
                        }
                        return Err(give_up(GiveUpReason::BreakerOpen { retry_at }, sent, last));
                    }
                    Ok(admission) => probing = admission == UpstreamAdmission::Probe,
                    Err(e) => return Err(give_up(e.into(), sent, last)),
                }
            }
            let permit = match self.gate.acquire(target, policy.own_wait_ceiling()).await {
                Ok(permit) => permit,
                Err(refusal) => {
                    self.abandon_probe(probing, breaker_key.as_ref()).await;
                    return Err(give_up(refusal.into(), sent, last));
                }
            };
            let Some(remaining) = self.remaining(deadline) else {
                self.release(target, &permit).await;
                self.abandon_probe(probing, breaker_key.as_ref()).await;
                return Err(give_up(GiveUpReason::BudgetExhausted, sent, last));
            };
            // The budget bounds the attempt itself too. Real time here: the
            // attempt is real IO even when the pauses run on a manual clock.
            let result = tokio::time::timeout(remaining, send.send(attempt)).await;
            self.release(target, &permit).await;
            let Ok(result) = result else {
                self.record_breaker(breaker_key.as_ref(), true).await;
                return Err(give_up(GiveUpReason::BudgetExhausted, attempt, None));
            };
            let (outcome, status, retry_after) = match &result {
                Ok(response) => {
                    let outcome = Outcome::from_status(response.status());
                    (outcome, Some(response.status()), retry_after_from_headers(response.headers(), self.clock.now()))
                }
                Err(e) => (Outcome::Network(e.failure()), None, None),
            };
            self.record_breaker(breaker_key.as_ref(), outcome.is_upstream_failure()).await;
            match (outcome, result) {
                (Outcome::Success, Ok(response)) => {
                    self.feedback(self.gate.observe(target, response.headers()).await, "observe");
                    return Ok(Completed { response, attempts: attempt });
                }
                (_, Ok(response)) => last = Some(LastAttempt::Response(response)),
                (_, Err(e)) => last = Some(LastAttempt::Transport(e)),
            }
            if outcome == Outcome::RateLimited {
                // Penalize first: other workers on this bucket must hold back
                // too, not only this call (whether or not it is retried).
                self.feedback(self.gate.penalize(target, retry_after).await, "penalize");
            }
            if !policy.retries(outcome, status) {
                let reason = status.map_or(GiveUpReason::NetworkNotRetried, GiveUpReason::NonRetryableStatus);
                return Err(give_up(reason, attempt, last));
            }
            if outcome.may_have_reached_upstream() && !call.repeat_is_safe {
                return Err(give_up(GiveUpReason::UnsafeToRepeat, attempt, last));
            }
            if attempt == max_attempts {
                break;
            }
            let facts = RateLimitFacts {
                retry_after,
                refill_one_token: permit.refill_one_token,
                rule_wait_ceiling: permit.wait_ceiling,
            };
            let backoff = policy.backoff(attempt, previous_backoff, self.draw());
            previous_backoff = Some(backoff);
            let delay = policy.delay_after(outcome, backoff, &facts);
            match self.remaining(deadline) {
                Some(remaining) if delay < remaining => {}
                _ => return Err(give_up(GiveUpReason::BudgetExhausted, attempt, last)),
            }
            tracing::debug!(attempt, ?outcome, ?delay, scope = %target.scope, "retrying upstream call");
            self.clock.sleep(delay).await;
        }
        Err(give_up(GiveUpReason::AttemptsExhausted, max_attempts, last))
    }

    fn remaining(&self, deadline: Timestamp) -> Option<Duration> {
        Some(deadline.saturating_duration_since(self.clock.now())).filter(|d| !d.is_zero())
    }

    async fn release(&self, target: &CallTarget, permit: &GatePermit) {
        if permit.lease.is_some() {
            self.feedback(self.gate.release(target, permit).await, "release");
        }
    }

    async fn abandon_probe(&self, probing: bool, key: Option<&BreakerKey>) {
        if let (true, Some(breaker), Some(key)) = (probing, &self.breaker, key) {
            if let Err(e) = breaker.abandon_probe(key).await {
                tracing::warn!(error = %e, breaker = %key, "could not free an unsent probe");
            }
        }
    }

    async fn record_breaker(&self, key: Option<&BreakerKey>, failed: bool) {
        if let (Some(breaker), Some(key)) = (&self.breaker, key) {
            // The call itself went through; a breaker store hiccup must not
            // turn its result into an error. The next admit will notice.
            if let Err(e) = breaker.record(key, failed).await {
                tracing::warn!(error = %e, breaker = %key, "could not record a call on the upstream breaker");
            }
        }
    }

    fn feedback<E: std::error::Error>(&self, result: Result<(), E>, what: &'static str) {
        if let Err(e) = result {
            tracing::warn!(error = %e, what, "quota feedback failed");
        }
    }
}

fn give_up<R, E>(reason: GiveUpReason, attempts: u32, last: Option<LastAttempt<R, E>>) -> RetryError<R, E> {
    RetryError { reason, attempts, last }
}
