//! The retry policy (validated data) and the delay function (pure).
//!
//! Delay after failed attempt `n` (1-based):
//! - 5xx or network failure: `base × 2^(n−1) + jitter`, jitter in `[0, base)`;
//! - 429: `min(max(Retry-After, one token's refill, backoff), ceiling)`, where
//!   backoff is the same expression as above and the ceiling is the rule's
//!   wait ceiling (or the policy's own, when it sets one).
//!
//! The jitter is drawn by the caller from an injected RNG ([`draw_jitter`]) and
//! passed in, so [`RetryPolicy::delay_after`] stays a pure function.

use std::time::Duration;

use rand::{Rng, RngCore};
use serde::{Deserialize, Serialize};

use super::outcome::Outcome;

/// How often and how patiently a call is retried. Build it with
/// [`RetryPolicy::new`] or deserialize it; both validate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "RetryPolicyConfig", into = "RetryPolicyConfig")]
pub struct RetryPolicy {
    max_attempts: u32,
    base_delay: Duration,
    wait_ceiling: Option<Duration>,
    total_budget: Duration,
}

/// The serialized shape of a [`RetryPolicy`]; durations in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetryPolicyConfig {
    /// Attempts in all, the first one included (3 = 1 + 2 retries).
    pub max_attempts: u32,
    pub base_delay_ms: u64,
    /// Overrides the rule's wait ceiling when set.
    pub wait_ceiling_ms: Option<u64>,
    /// Wall time one call may take, all attempts and pauses included.
    pub total_budget_ms: u64,
}

impl Default for RetryPolicyConfig {
    fn default() -> Self {
        RetryPolicy::default().into()
    }
}

/// Why a policy was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    #[error("max_attempts must be between 1 and {max}, got {got}", max = RetryPolicy::MAX_ATTEMPTS)]
    Attempts { got: u32 },
    #[error("base delay must be between 1 ms and 1 hour, got {got:?}")]
    BaseDelay { got: Duration },
    #[error("wait ceiling must be between 1 ms and 1 day, got {got:?}")]
    WaitCeiling { got: Duration },
    #[error("total budget must be between 1 ms and 1 day, got {got:?}")]
    Budget { got: Duration },
}

impl RetryPolicy {
    pub const DEFAULT_ATTEMPTS: u32 = 3;
    pub const DEFAULT_BASE_DELAY: Duration = Duration::from_millis(500);
    /// Long enough for one full wait on a 1-request-per-minute rule (ceiling
    /// 2 × 60 s + 5 s) plus its retries.
    pub const DEFAULT_BUDGET: Duration = Duration::from_secs(180);
    /// More attempts than this is a configuration mistake, not a policy.
    pub const MAX_ATTEMPTS: u32 = 20;
    const DAY: Duration = Duration::from_secs(86_400);
    /// No single backoff is longer than the longest allowed budget.
    pub const MAX_BACKOFF: Duration = Self::DAY;

    pub fn new(max_attempts: u32, base_delay: Duration, total_budget: Duration) -> Result<Self, PolicyError> {
        if !(1..=Self::MAX_ATTEMPTS).contains(&max_attempts) {
            return Err(PolicyError::Attempts { got: max_attempts });
        }
        if base_delay < Duration::from_millis(1) || base_delay > Duration::from_secs(3_600) {
            return Err(PolicyError::BaseDelay { got: base_delay });
        }
        if total_budget < Duration::from_millis(1) || total_budget > Self::DAY {
            return Err(PolicyError::Budget { got: total_budget });
        }
        Ok(RetryPolicy { max_attempts, base_delay, wait_ceiling: None, total_budget })
    }

    /// Use `ceiling` instead of the rule's wait ceiling.
    pub fn with_wait_ceiling(mut self, ceiling: Duration) -> Result<Self, PolicyError> {
        if ceiling < Duration::from_millis(1) || ceiling > Self::DAY {
            return Err(PolicyError::WaitCeiling { got: ceiling });
        }
        self.wait_ceiling = Some(ceiling);
        Ok(self)
    }

    pub fn max_attempts(&self) -> u32 {
        self.max_attempts
    }

    pub fn base_delay(&self) -> Duration {
        self.base_delay
    }

    pub fn total_budget(&self) -> Duration {
        self.total_budget
    }

    /// The policy's own wait ceiling, if it overrides the rule's.
    pub fn own_wait_ceiling(&self) -> Option<Duration> {
        self.wait_ceiling
    }

    /// The ceiling for waits on this call: the policy's own if it has one,
    /// else the rule's.
    pub fn wait_ceiling(&self, rule_ceiling: Duration) -> Duration {
        self.wait_ceiling.unwrap_or(rule_ceiling)
    }

    /// `base × 2^(attempt−1) + jitter`, at most [`Self::MAX_BACKOFF`]; `jitter`
    /// is clamped below `base`. `attempt` is the 1-based number of the attempt
    /// that failed. Capping the sum (not the factor) keeps the backoff
    /// non-decreasing in `attempt` whatever the jitter.
    pub fn backoff(&self, attempt: u32, jitter: Duration) -> Duration {
        // 2^40 × the smallest base (1 ms) is already far past the cap.
        let exponent = attempt.saturating_sub(1).min(40);
        let jitter = jitter.min(self.base_delay.saturating_sub(Duration::from_nanos(1)));
        let nanos = (self.base_delay.as_nanos() << exponent) + jitter.as_nanos();
        match u64::try_from(nanos) {
            Ok(n) if nanos < Self::MAX_BACKOFF.as_nanos() => Duration::from_nanos(n),
            _ => Self::MAX_BACKOFF,
        }
    }

    /// The pause before the attempt after failed attempt `attempt`.
    ///
    /// `facts` matter only for a 429; other outcomes use the plain backoff.
    pub fn delay_after(&self, outcome: Outcome, attempt: u32, jitter: Duration, facts: &RateLimitFacts) -> Duration {
        let backoff = self.backoff(attempt, jitter);
        match outcome {
            Outcome::RateLimited => {
                let ceiling = self.wait_ceiling(facts.rule_wait_ceiling);
                let wanted = facts.retry_after.unwrap_or(Duration::ZERO).max(facts.refill_one_token).max(backoff);
                wanted.min(ceiling)
            }
            _ => backoff,
        }
    }
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: Self::DEFAULT_ATTEMPTS,
            base_delay: Self::DEFAULT_BASE_DELAY,
            wait_ceiling: None,
            total_budget: Self::DEFAULT_BUDGET,
        }
    }
}

impl TryFrom<RetryPolicyConfig> for RetryPolicy {
    type Error = PolicyError;

    fn try_from(c: RetryPolicyConfig) -> Result<Self, PolicyError> {
        let policy = RetryPolicy::new(
            c.max_attempts,
            Duration::from_millis(c.base_delay_ms),
            Duration::from_millis(c.total_budget_ms),
        )?;
        match c.wait_ceiling_ms {
            Some(ms) => policy.with_wait_ceiling(Duration::from_millis(ms)),
            None => Ok(policy),
        }
    }
}

impl From<RetryPolicy> for RetryPolicyConfig {
    fn from(p: RetryPolicy) -> Self {
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        RetryPolicyConfig {
            max_attempts: p.max_attempts,
            base_delay_ms: ms(p.base_delay),
            wait_ceiling_ms: p.wait_ceiling.map(ms),
            total_budget_ms: ms(p.total_budget),
        }
    }
}

/// What the 429 delay needs to know besides the policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RateLimitFacts {
    /// The upstream's `Retry-After`, already parsed; `None` if absent or invalid.
    pub retry_after: Option<Duration>,
    /// How long the rule's bucket takes to refill one token.
    pub refill_one_token: Duration,
    /// The rule's wait ceiling.
    pub rule_wait_ceiling: Duration,
}

/// A uniformly drawn jitter in `[0, base)`.
pub fn draw_jitter(rng: &mut dyn RngCore, base: Duration) -> Duration {
    let micros = u64::try_from(base.as_micros()).unwrap_or(u64::MAX);
    if micros == 0 {
        return Duration::ZERO;
    }
    Duration::from_micros(rng.random_range(0..micros))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::retry::outcome::NetworkFailure;
    use proptest::prelude::*;
    use rand::SeedableRng;

    const MS: fn(u64) -> Duration = Duration::from_millis;

    fn facts(retry_after: Option<u64>, refill: u64, ceiling: u64) -> RateLimitFacts {
        RateLimitFacts { retry_after: retry_after.map(MS), refill_one_token: MS(refill), rule_wait_ceiling: MS(ceiling) }
    }

    #[test]
    fn defaults_are_three_attempts_half_a_second_and_three_minutes() {
        let p = RetryPolicy::default();
        assert_eq!((p.max_attempts(), p.base_delay(), p.total_budget()), (3, MS(500), MS(180_000)));
        assert_eq!(p.wait_ceiling(MS(30_000)), MS(30_000));
    }

    #[test]
    fn server_errors_back_off_exponentially_from_the_base() {
        let p = RetryPolicy::default();
        let f = RateLimitFacts::default();
        assert_eq!(p.delay_after(Outcome::ServerError, 1, MS(0), &f), MS(500));
        assert_eq!(p.delay_after(Outcome::ServerError, 2, MS(123), &f), MS(1_123));
        assert_eq!(p.delay_after(Outcome::Network(NetworkFailure::Connect), 3, MS(499), &f), MS(2_499));
        // A jitter outside [0, base) is clamped rather than trusted.
        assert!(p.delay_after(Outcome::ServerError, 1, MS(10_000), &f) < MS(1_000));
    }

    #[test]
    fn server_errors_ignore_retry_after_and_the_bucket() {
        let p = RetryPolicy::default();
        assert_eq!(p.delay_after(Outcome::ServerError, 1, MS(0), &facts(Some(60_000), 60_000, 125_000)), MS(500));
    }

    #[test]
    fn a_429_waits_for_the_longest_of_retry_after_refill_and_backoff() {
        let p = RetryPolicy::default();
        assert_eq!(p.delay_after(Outcome::RateLimited, 1, MS(0), &facts(Some(3_000), 25, 30_000)), MS(3_000));
        // WB feeds: no Retry-After, 1 token per minute: the refill wins.
        assert_eq!(p.delay_after(Outcome::RateLimited, 1, MS(0), &facts(None, 60_000, 125_000)), MS(60_000));
        // VTEX pricing: 40/s, no header: the backoff wins.
        assert_eq!(p.delay_after(Outcome::RateLimited, 2, MS(7), &facts(None, 25, 30_000)), MS(1_007));
    }

    #[test]
    fn a_429_never_waits_past_the_ceiling() {
        let p = RetryPolicy::default();
        let huge = Some(u64::MAX / 2);
        assert_eq!(p.delay_after(Outcome::RateLimited, 1, MS(0), &facts(huge, 25, 30_000)), MS(30_000));
        let own = p.with_wait_ceiling(MS(5_000)).expect("valid ceiling");
        assert_eq!(own.delay_after(Outcome::RateLimited, 1, MS(0), &facts(Some(10_000), 25, 30_000)), MS(5_000));
    }

    #[test]
    fn invalid_policies_are_refused() {
        assert_eq!(RetryPolicy::new(0, MS(500), MS(1_000)), Err(PolicyError::Attempts { got: 0 }));
        assert_eq!(RetryPolicy::new(21, MS(500), MS(1_000)), Err(PolicyError::Attempts { got: 21 }));
        assert!(matches!(RetryPolicy::new(3, MS(0), MS(1_000)), Err(PolicyError::BaseDelay { .. })));
        assert!(matches!(RetryPolicy::new(3, MS(1), MS(0)), Err(PolicyError::Budget { .. })));
        assert!(matches!(RetryPolicy::default().with_wait_ceiling(MS(0)), Err(PolicyError::WaitCeiling { .. })));
    }

    #[test]
    fn policies_deserialize_with_defaults_and_validation() {
        let p: RetryPolicy = serde_json::from_str(r#"{"max_attempts": 5, "wait_ceiling_ms": 2000}"#).expect("valid");
        assert_eq!((p.max_attempts(), p.base_delay(), p.wait_ceiling(MS(1))), (5, MS(500), MS(2_000)));
        assert!(serde_json::from_str::<RetryPolicy>(r#"{"max_attempts": 0}"#).is_err());
        assert!(serde_json::from_str::<RetryPolicy>(r#"{"attempts": 3}"#).is_err());
        let back: RetryPolicy = serde_json::from_value(serde_json::to_value(p).expect("serializes")).expect("valid");
        assert_eq!(back, p);
    }

    #[test]
    fn jitter_is_reproducible_from_a_seeded_rng() {
        let draw = |seed| {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            (0..5).map(|_| draw_jitter(&mut rng, MS(500))).collect::<Vec<_>>()
        };
        assert_eq!(draw(7), draw(7));
        assert!(draw(7).iter().all(|j| *j < MS(500)));
    }

    proptest! {
        #[test]
        fn backoff_stays_within_its_exponential_band(
            base_ms in 1u64..10_000, attempt in 1u32..12, seed in any::<u64>()
        ) {
            let p = RetryPolicy::new(3, MS(base_ms), MS(60_000)).expect("valid");
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            let jitter = draw_jitter(&mut rng, p.base_delay());
            let floor = MS(base_ms) * (1 << (attempt - 1));
            let d = p.delay_after(Outcome::ServerError, attempt, jitter, &RateLimitFacts::default());
            prop_assert!(d >= floor);
            prop_assert!(d < floor + MS(base_ms));
        }

        #[test]
        fn backoff_never_shrinks_from_one_attempt_to_the_next(
            base_ms in 1u64..10_000, attempt in 1u32..100, j1 in 0u64..10_000, j2 in 0u64..10_000
        ) {
            let p = RetryPolicy::new(3, MS(base_ms), MS(60_000)).expect("valid");
            prop_assert!(p.backoff(attempt + 1, MS(j2)) >= p.backoff(attempt, MS(j1)));
            prop_assert!(p.backoff(attempt, MS(j1)) <= RetryPolicy::MAX_BACKOFF);
        }

        #[test]
        fn a_429_delay_is_capped_by_the_ceiling_and_floored_by_every_hint(
            attempt in 1u32..10, jitter_ms in 0u64..500, retry_after in proptest::option::of(0u64..1_000_000),
            refill in 0u64..200_000, ceiling in 1u64..200_000,
        ) {
            let p = RetryPolicy::default();
            let f = facts(retry_after, refill, ceiling);
            let d = p.delay_after(Outcome::RateLimited, attempt, MS(jitter_ms), &f);
            prop_assert!(d <= MS(ceiling));
            prop_assert!(d >= MS(refill).min(MS(ceiling)));
            prop_assert!(d >= MS(retry_after.unwrap_or(0)).min(MS(ceiling)));
            prop_assert!(d >= p.backoff(attempt, MS(jitter_ms)).min(MS(ceiling)));
        }
    }
}
