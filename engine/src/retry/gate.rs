//! The narrow view of the shared-quota limiter the retry executor needs:
//! acquire a permit before every attempt, penalize a bucket on a 429, observe
//! rate-limit headers on success. The real limiter implements it
//! (`quota_gate.rs`); tests may use a fake.

use std::fmt;
use std::time::Duration;

use http::{HeaderMap, Method};

use crate::quota::Priority;

/// What is being called: the limiter resolves the rule from these.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallTarget {
    /// `None` for calls made without an account (`_global`).
    pub account: Option<String>,
    /// The API domain, e.g. `content`, `pricing`, `marketplace`.
    pub scope: String,
    pub method: Method,
    /// The request path (no query), matched against rule templates.
    pub path: String,
    /// Tokens one attempt costs (usually 1).
    pub cost: u32,
    /// The lane every attempt of the call asks in (`docs/limiter.md`): a
    /// retry of an important call stays in its lane.
    pub priority: Priority,
}

impl CallTarget {
    pub fn new(account: Option<&str>, scope: &str, method: Method, path: &str) -> Self {
        CallTarget { account: account.map(str::to_owned), scope: scope.to_owned(), method, path: path.to_owned(), cost: 1, priority: Priority::Normal }
    }

    pub fn with_cost(mut self, cost: u32) -> Self {
        self.cost = cost;
        self
    }

    pub fn with_priority(mut self, priority: Priority) -> Self {
        self.priority = priority;
        self
    }
}

/// A permit for one attempt, with what the delay function needs to know about
/// the rule that granted it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatePermit {
    /// How long the limiter made us wait for it.
    pub waited: Duration,
    /// How long the rule's bucket takes to refill one token.
    pub refill_one_token: Duration,
    /// The rule's effective wait ceiling.
    pub wait_ceiling: Duration,
    /// A concurrency lease to give back after the attempt, if the rule has one.
    pub lease: Option<String>,
}

/// Why the limiter gave no permit.
#[derive(Debug, thiserror::Error)]
pub enum GateRefusal {
    #[error("the wait for a permit would exceed the wait ceiling")]
    WaitCeiling { retry_after: Option<Duration> },
    #[error("all concurrency leases of the rule are held")]
    ConcurrencyLimit { retry_after: Option<Duration> },
    #[error("no limit rule matches the request")]
    NoRule,
    #[error("quota store unavailable")]
    StoreUnavailable(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The limiter rejected the request itself (bad account, cost above the
    /// rule's capacity).
    #[error("the limiter rejected the request")]
    Invalid(#[source] Box<dyn std::error::Error + Send + Sync>),
}

/// A failure to report feedback to the limiter.
#[derive(Debug, thiserror::Error)]
#[error("quota feedback failed")]
pub struct GateError(#[source] pub Box<dyn std::error::Error + Send + Sync>);

/// The limiter, as seen by the retry executor.
#[async_trait::async_trait]
pub trait QuotaGate: Send + Sync + fmt::Debug {
    /// Acquire a permit for one attempt, waiting (through the limiter's clock)
    /// as long as the rule allows. `max_wait` overrides the rule's
    /// configured maximum wait when set.
    async fn acquire(&self, target: &CallTarget, max_wait: Option<Duration>) -> Result<GatePermit, GateRefusal>;

    /// The attempt is over: give back a concurrency lease, if any.
    async fn release(&self, target: &CallTarget, permit: &GatePermit) -> Result<(), GateError>;

    /// The upstream answered 429: no permit for this bucket before one token's
    /// refill (or `retry_after`, if longer).
    async fn penalize(&self, target: &CallTarget, retry_after: Option<Duration>) -> Result<(), GateError>;

    /// A response carried rate-limit headers: lower the bucket to match.
    async fn observe(&self, target: &CallTarget, headers: &HeaderMap) -> Result<(), GateError>;

    /// Count a call refused by the upstream breaker on the quota dashboards.
    async fn record_breaker_refusal(&self, target: &CallTarget) -> Result<(), GateError>;
}
