//! What a quota decision gives back: a [`Permit`] (possibly with a booked
//! wait and a concurrency [`Lease`]) or a [`Refusal`] with its reason. Kept
//! apart from the limiter so that what reads outcomes (metrics, the retry
//! gate) does not depend on the limiter that produces them.

use std::time::Duration;

use super::rule::RuleId;
use super::stats::{BucketKey, RefusalReason};

/// A granted request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Permit {
    pub bucket: BucketKey,
    /// The booked wait: still to sleep after [`super::Limiter::reserve`], already
    /// slept after [`super::Limiter::acquire`]. Zero for shadow rules.
    pub wait: Duration,
    /// Set for rules with a concurrency limit; give it back with [`super::Limiter::release`].
    pub lease: Option<Lease>,
    /// The rule is in shadow mode: this permit was never going to be withheld.
    pub shadow: bool,
}

/// A concurrency lease. It expires by itself (`LimiterConfig::lease_ttl`
/// after its booked start) if the holder dies without releasing it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lease {
    pub bucket: BucketKey,
    pub id: String,
}

/// A request that got no permit. Nothing was booked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub reason: RefusalReason,
    /// When a slot would be free (time until it, from the decision's `now`).
    pub retry_after: Option<Duration>,
    /// The rule that refused; `None` for [`RefusalReason::NoRule`].
    pub rule: Option<RuleId>,
}

impl Refusal {
    /// `retry_after` in whole seconds, rounded up, for a `Retry-After` header.
    pub fn retry_after_secs(&self) -> Option<u64> {
        self.retry_after.map(|d| d.as_micros().div_ceil(1_000_000) as u64)
    }
}

/// The result of [`super::Limiter::reserve`] / [`super::Limiter::acquire`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Granted(Permit),
    Refused(Refusal),
}

impl Outcome {
    pub fn permit(&self) -> Option<&Permit> {
        match self {
            Outcome::Granted(p) => Some(p),
            Outcome::Refused(_) => None,
        }
    }
    pub fn refusal(&self) -> Option<&Refusal> {
        match self {
            Outcome::Granted(_) => None,
            Outcome::Refused(r) => Some(r),
        }
    }
}
