//! The retry policy (validated data) and the delay function (pure).
//!
//! A policy says which outcomes are retried (`retry_on`), how many attempts
//! a call gets, the backoff (`base`, a per-pause cap and a [`Jitter`] shape),
//! what a 429's `Retry-After` does (`retry_after`) and the total budget.
//! Retry profiles ([`super::profiles`]) are named policies chosen per scope.
//!
//! Pause after failed attempt `n` (1-based):
//! - any retried outcome but 429: the backoff, `jitter(base × 2^(n−1))`
//!   capped by `max_delay` (see [`Jitter`] for each shape);
//! - 429: `min(max(hint, one token's refill, backoff), ceiling)`, where the
//!   ceiling is the rule's wait ceiling (or the policy's own) and `hint` is
//!   `Retry-After` (`honour`), `min(Retry-After, max_delay)` (`cap`) or
//!   nothing (`ignore`).
//!
//! The default policy is `additive` jitter, no cap, 429/5xx/network retried,
//! `Retry-After` honoured: `base × 2^(n−1) + U[0, base)`.
//!
//! The uniform draw is taken by the caller from an injected RNG
//! ([`draw_unit`]) and passed in, so the functions here stay pure.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use http::StatusCode;
use rand::RngCore;
use serde::{Deserialize, Serialize};

pub use super::jitter::{draw_unit, Jitter, MAX_BACKOFF};
use super::outcome::Outcome;

/// Which outcomes a policy retries: single statuses (400–599), every 5xx,
/// network failures. Written as a list of strings: `["429", "5xx", "network"]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RetryOn {
    /// Bit `code − 400` for each listed status.
    statuses: [u128; 2],
    server_errors: bool,
    network: bool,
}

impl RetryOn {
    /// 429, every 5xx and network failures: the default policy's set.
    pub const DEFAULT: RetryOn = RetryOn { statuses: [1 << 29, 0], server_errors: true, network: true };

    /// Nothing at all (build up with [`RetryOn::status`] etc.).
    pub const fn none() -> RetryOn {
        RetryOn { statuses: [0, 0], server_errors: false, network: false }
    }

    /// Also retry `code` (400–599).
    pub fn status(mut self, code: u16) -> Result<RetryOn, PolicyError> {
        if !(400..=599).contains(&code) {
            return Err(PolicyError::RetryOn { entry: code.to_string() });
        }
        let bit = usize::from(code - 400);
        self.statuses[bit / 128] |= 1 << (bit % 128);
        Ok(self)
    }

    /// Also retry every 5xx.
    pub fn server_errors(mut self) -> RetryOn {
        self.server_errors = true;
        self
    }

    /// Also retry network failures (a timeout or broken connection only
    /// when the request is safe to repeat).
    pub fn network(mut self) -> RetryOn {
        self.network = true;
        self
    }

    pub fn retries_network(&self) -> bool {
        self.network
    }

    /// Whether an answer with `status` is retried.
    pub fn retries_status(&self, status: StatusCode) -> bool {
        let code = status.as_u16();
        if !(400..=599).contains(&code) {
            return false;
        }
        let bit = usize::from(code - 400);
        self.statuses[bit / 128] & (1 << (bit % 128)) != 0 || (self.server_errors && status.is_server_error())
    }

    /// Parse one list entry: `"network"`, `"5xx"` or a status `"400"`–`"599"`.
    pub fn with_entry(self, entry: &str) -> Result<RetryOn, PolicyError> {
        match entry.trim() {
            "network" => Ok(self.network()),
            "5xx" => Ok(self.server_errors()),
            e if e.len() == 3 && e.bytes().all(|b| b.is_ascii_digit()) => {
                self.status(e.parse().map_err(|_| PolicyError::RetryOn { entry: entry.to_owned() })?)
                    .map_err(|_| PolicyError::RetryOn { entry: entry.to_owned() })
            }
            _ => Err(PolicyError::RetryOn { entry: entry.to_owned() }),
        }
    }

    /// The list form, statuses first in order, then `5xx`, then `network`.
    pub fn entries(&self) -> Vec<String> {
        let mut out: Vec<String> = (400u16..=599)
            .filter(|c| {
                let bit = usize::from(c - 400);
                self.statuses[bit / 128] & (1 << (bit % 128)) != 0
            })
            .map(|c| c.to_string())
            .collect();
        if self.server_errors {
            out.push("5xx".to_owned());
        }
        if self.network {
            out.push("network".to_owned());
        }
        out
    }

    pub fn from_entries<S: AsRef<str>>(entries: &[S]) -> Result<RetryOn, PolicyError> {
        entries.iter().try_fold(RetryOn::none(), |on, e| on.with_entry(e.as_ref()))
    }
}

/// What the pause after a 429 makes of the upstream's `Retry-After`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RetryAfterMode {
    /// Wait at least as long as it says (up to the wait ceiling).
    Honour,
    /// Wait at least as long as it says, but no longer than `max_delay`.
    Cap,
    /// Do not read it for the pause (the bucket is still penalized by it).
    Ignore,
}

impl RetryAfterMode {
    pub const ALL: [RetryAfterMode; 3] = [RetryAfterMode::Honour, RetryAfterMode::Cap, RetryAfterMode::Ignore];

    pub const fn as_str(self) -> &'static str {
        match self {
            RetryAfterMode::Honour => "honour",
            RetryAfterMode::Cap => "cap",
            RetryAfterMode::Ignore => "ignore",
        }
    }
}

impl fmt::Display for RetryAfterMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for RetryAfterMode {
    type Err = String;

    fn from_str(s: &str) -> Result<RetryAfterMode, String> {
        RetryAfterMode::ALL
            .into_iter()
            .find(|m| m.as_str() == s)
            .ok_or_else(|| format!("'{s}' is not a Retry-After handling; use honour, cap or ignore"))
    }
}

/// How often and how patiently a call is retried. Build it with
/// [`RetryPolicy::new`] or deserialize it; both validate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "RetryPolicyConfig", into = "RetryPolicyConfig")]
pub struct RetryPolicy {
    max_attempts: u32,
    base_delay: Duration,
    max_delay: Option<Duration>,
    jitter: Jitter,
    retry_on: RetryOn,
    retry_after: RetryAfterMode,
    wait_ceiling: Option<Duration>,
    total_budget: Duration,
}

/// The serialized shape of a [`RetryPolicy`]; durations in milliseconds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetryPolicyConfig {
    /// Attempts in all, the first one included (3 = 1 + 2 retries).
    pub max_attempts: u32,
    pub base_delay_ms: u64,
    /// The longest single pause (the backoff's cap); `None`: no cap but the day-long maximum.
    pub max_delay_ms: Option<u64>,
    pub jitter: Jitter,
    /// `"429"`, `"503"` …, `"5xx"`, `"network"`.
    pub retry_on: Vec<String>,
    pub retry_after: RetryAfterMode,
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
    #[error("max delay must be at least the base delay and at most 1 day, got {got:?}")]
    MaxDelay { got: Duration },
    #[error("'{entry}' is not a status from 400 to 599, '5xx' or 'network'")]
    RetryOn { entry: String },
    #[error("retry_on must name at least one status, '5xx' or 'network'")]
    RetryOnEmpty,
    #[error("wait ceiling must be between 1 ms and 1 day, got {got:?}")]
    WaitCeiling { got: Duration },
    #[error("total budget must be between 1 ms and 1 day, got {got:?}")]
    Budget { got: Duration },
}

impl PolicyError {
    /// The serialized field the error is about.
    pub fn field(&self) -> &'static str {
        match self {
            PolicyError::Attempts { .. } => "max_attempts",
            PolicyError::BaseDelay { .. } => "base_delay_ms",
            PolicyError::MaxDelay { .. } => "max_delay_ms",
            PolicyError::RetryOn { .. } | PolicyError::RetryOnEmpty => "retry_on",
            PolicyError::WaitCeiling { .. } => "wait_ceiling_ms",
            PolicyError::Budget { .. } => "total_budget_ms",
        }
    }
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
    pub const MAX_BACKOFF: Duration = MAX_BACKOFF;

    /// The default shape (additive jitter, no cap, 429/5xx/network,
    /// `Retry-After` honoured) with these numbers.
    pub fn new(max_attempts: u32, base_delay: Duration, total_budget: Duration) -> Result<Self, PolicyError> {
        check_attempts(max_attempts)?;
        check_base(base_delay)?;
        check_budget(total_budget)?;
        Ok(RetryPolicy { max_attempts, base_delay, total_budget, ..RetryPolicy::default() })
    }

    /// Use `ceiling` instead of the rule's wait ceiling.
    pub fn with_wait_ceiling(mut self, ceiling: Duration) -> Result<Self, PolicyError> {
        check_wait_ceiling(ceiling)?;
        self.wait_ceiling = Some(ceiling);
        Ok(self)
    }

    /// Draw pauses with `jitter`, none longer than `max_delay` (if given).
    pub fn with_backoff(mut self, jitter: Jitter, max_delay: Option<Duration>) -> Result<Self, PolicyError> {
        if let Some(cap) = max_delay {
            check_max_delay(cap, self.base_delay)?;
        }
        self.jitter = jitter;
        self.max_delay = max_delay;
        Ok(self)
    }

    /// Retry exactly these outcomes.
    pub fn with_retry_on(mut self, retry_on: RetryOn) -> Result<Self, PolicyError> {
        check_retry_on(retry_on)?;
        self.retry_on = retry_on;
        Ok(self)
    }

    pub fn with_retry_after(mut self, mode: RetryAfterMode) -> Self {
        self.retry_after = mode;
        self
    }

    pub fn max_attempts(&self) -> u32 {
        self.max_attempts
    }

    pub fn base_delay(&self) -> Duration {
        self.base_delay
    }

    pub fn max_delay(&self) -> Option<Duration> {
        self.max_delay
    }

    pub fn jitter(&self) -> Jitter {
        self.jitter
    }

    pub fn retry_on(&self) -> RetryOn {
        self.retry_on
    }

    pub fn retry_after(&self) -> RetryAfterMode {
        self.retry_after
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

    /// Whether an attempt that came to `outcome` (with `status`, when an
    /// answer came back) is retried by this policy, safety aside.
    pub fn retries(&self, outcome: Outcome, status: Option<StatusCode>) -> bool {
        match (outcome, status) {
            (Outcome::Success, _) => false,
            (Outcome::Network(_), _) => self.retry_on.retries_network(),
            (_, Some(status)) => self.retry_on.retries_status(status),
            (_, None) => false,
        }
    }

    /// The backoff after failed attempt `attempt` (1-based): the jitter
    /// shape around `base × 2^(attempt−1)`, capped by `max_delay`.
    /// `previous` is the backoff before it (for `decorrelated`); `u` the
    /// uniform draw in `[0, 1)`.
    pub fn backoff(&self, attempt: u32, previous: Option<Duration>, u: f64) -> Duration {
        self.jitter.backoff(attempt, self.base_delay, self.max_delay.unwrap_or(MAX_BACKOFF), previous, u)
    }

    /// The pause before the next attempt, given the `backoff` drawn for it.
    /// `facts` matter only for a 429; other outcomes pause the backoff.
    pub fn delay_after(&self, outcome: Outcome, backoff: Duration, facts: &RateLimitFacts) -> Duration {
        match outcome {
            Outcome::RateLimited => {
                let ceiling = self.wait_ceiling(facts.rule_wait_ceiling);
                let retry_after = facts.retry_after.unwrap_or(Duration::ZERO);
                let hint = match self.retry_after {
                    RetryAfterMode::Honour => retry_after,
                    RetryAfterMode::Cap => retry_after.min(self.max_delay.unwrap_or(MAX_BACKOFF)),
                    RetryAfterMode::Ignore => Duration::ZERO,
                };
                hint.max(facts.refill_one_token).max(backoff).min(ceiling)
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
            max_delay: None,
            jitter: Jitter::Additive,
            retry_on: RetryOn::DEFAULT,
            retry_after: RetryAfterMode::Honour,
            wait_ceiling: None,
            total_budget: Self::DEFAULT_BUDGET,
        }
    }
}

impl RetryPolicyConfig {
    /// Validate every field, reporting each bad one (not only the first).
    pub fn validate(&self) -> Result<RetryPolicy, Vec<PolicyError>> {
        let (base, budget) = (ms(self.base_delay_ms), ms(self.total_budget_ms));
        let max_delay = self.max_delay_ms.map(ms);
        let wait_ceiling = self.wait_ceiling_ms.map(ms);
        let mut errors = Vec::new();
        let mut check = |result: Result<(), PolicyError>| {
            if let Err(e) = result {
                errors.push(e);
            }
        };
        check(check_attempts(self.max_attempts));
        check(check_base(base));
        check(max_delay.map_or(Ok(()), |cap| check_max_delay(cap, base)));
        let retry_on = RetryOn::from_entries(&self.retry_on).and_then(|on| check_retry_on(on).map(|()| on));
        check(retry_on.as_ref().map(|_| ()).map_err(Clone::clone));
        check(wait_ceiling.map_or(Ok(()), check_wait_ceiling));
        check(check_budget(budget));
        match retry_on {
            Ok(retry_on) if errors.is_empty() => Ok(RetryPolicy {
                max_attempts: self.max_attempts,
                base_delay: base,
                max_delay,
                jitter: self.jitter,
                retry_on,
                retry_after: self.retry_after,
                wait_ceiling,
                total_budget: budget,
            }),
            _ => Err(errors),
        }
    }
}

const fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn check_attempts(n: u32) -> Result<(), PolicyError> {
    (1..=RetryPolicy::MAX_ATTEMPTS).contains(&n).then_some(()).ok_or(PolicyError::Attempts { got: n })
}

fn check_base(base: Duration) -> Result<(), PolicyError> {
    (ms(1)..=Duration::from_secs(3_600)).contains(&base).then_some(()).ok_or(PolicyError::BaseDelay { got: base })
}

fn check_max_delay(cap: Duration, base: Duration) -> Result<(), PolicyError> {
    (cap >= base && cap <= RetryPolicy::DAY).then_some(()).ok_or(PolicyError::MaxDelay { got: cap })
}

fn check_retry_on(on: RetryOn) -> Result<(), PolicyError> {
    (on != RetryOn::none()).then_some(()).ok_or(PolicyError::RetryOnEmpty)
}

fn check_wait_ceiling(ceiling: Duration) -> Result<(), PolicyError> {
    (ms(1)..=RetryPolicy::DAY).contains(&ceiling).then_some(()).ok_or(PolicyError::WaitCeiling { got: ceiling })
}

fn check_budget(budget: Duration) -> Result<(), PolicyError> {
    (ms(1)..=RetryPolicy::DAY).contains(&budget).then_some(()).ok_or(PolicyError::Budget { got: budget })
}

impl TryFrom<RetryPolicyConfig> for RetryPolicy {
    type Error = PolicyError;

    fn try_from(c: RetryPolicyConfig) -> Result<Self, PolicyError> {
        c.validate().map_err(|mut errors| errors.remove(0))
    }
}

impl From<RetryPolicy> for RetryPolicyConfig {
    fn from(p: RetryPolicy) -> Self {
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        RetryPolicyConfig {
            max_attempts: p.max_attempts,
            base_delay_ms: ms(p.base_delay),
            max_delay_ms: p.max_delay.map(ms),
            jitter: p.jitter,
            retry_on: p.retry_on.entries(),
            retry_after: p.retry_after,
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

/// The additive jitter the default policy adds to its first backoff: `base`
/// times one uniform draw (the same draw the executor takes per pause).
pub fn draw_jitter(rng: &mut dyn RngCore, base: Duration) -> Duration {
    base.mul_f64(draw_unit(rng))
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

    /// The default policy's pause after failed attempt `n` with the additive
    /// jitter `jitter` (a fraction of the base that is exact in binary).
    fn delay(p: &RetryPolicy, outcome: Outcome, n: u32, jitter: f64, f: &RateLimitFacts) -> Duration {
        p.delay_after(outcome, p.backoff(n, None, jitter), f)
    }

    #[test]
    fn defaults_are_three_attempts_half_a_second_and_three_minutes() {
        let p = RetryPolicy::default();
        assert_eq!((p.max_attempts(), p.base_delay(), p.total_budget()), (3, MS(500), MS(180_000)));
        assert_eq!(p.wait_ceiling(MS(30_000)), MS(30_000));
        assert_eq!((p.jitter(), p.max_delay(), p.retry_after()), (Jitter::Additive, None, RetryAfterMode::Honour));
        assert_eq!(p.retry_on().entries(), ["429", "5xx", "network"]);
    }

    #[test]
    fn server_errors_back_off_exponentially_from_the_base() {
        let p = RetryPolicy::default();
        let f = RateLimitFacts::default();
        assert_eq!(delay(&p, Outcome::ServerError, 1, 0.0, &f), MS(500));
        assert_eq!(delay(&p, Outcome::ServerError, 2, 0.25, &f), MS(1_125));
        assert_eq!(delay(&p, Outcome::Network(NetworkFailure::Connect), 3, 0.5, &f), MS(2_250));
        // A draw outside [0, 1) is clamped rather than trusted.
        assert!(delay(&p, Outcome::ServerError, 1, 20.0, &f) < MS(1_000));
    }

    #[test]
    fn server_errors_ignore_retry_after_and_the_bucket() {
        let p = RetryPolicy::default();
        assert_eq!(delay(&p, Outcome::ServerError, 1, 0.0, &facts(Some(60_000), 60_000, 125_000)), MS(500));
    }

    #[test]
    fn a_429_waits_for_the_longest_of_retry_after_refill_and_backoff() {
        let p = RetryPolicy::default();
        assert_eq!(delay(&p, Outcome::RateLimited, 1, 0.0, &facts(Some(3_000), 25, 30_000)), MS(3_000));
        // WB feeds: no Retry-After, 1 token per minute: the refill wins.
        assert_eq!(delay(&p, Outcome::RateLimited, 1, 0.0, &facts(None, 60_000, 125_000)), MS(60_000));
        // VTEX pricing: 40/s, no header: the backoff wins.
        assert_eq!(delay(&p, Outcome::RateLimited, 2, 0.25, &facts(None, 25, 30_000)), MS(1_125));
    }

    #[test]
    fn a_429_never_waits_past_the_ceiling() {
        let p = RetryPolicy::default();
        let huge = Some(u64::MAX / 2);
        assert_eq!(delay(&p, Outcome::RateLimited, 1, 0.0, &facts(huge, 25, 30_000)), MS(30_000));
        let own = p.with_wait_ceiling(MS(5_000)).expect("valid ceiling");
        assert_eq!(delay(&own, Outcome::RateLimited, 1, 0.0, &facts(Some(10_000), 25, 30_000)), MS(5_000));
    }

    /// Retry-After handling on a 429: `honour` takes it whole (VTEX: "use the
    /// greater of Retry-After and the backoff"), `cap` no further than the
    /// cap (the Wildberries ADR's first rule: min(N × 1000, max wait)),
    /// `ignore` leaves the refill and the backoff. The wait ceiling bounds all.
    #[test]
    fn retry_after_takes_precedence_when_honoured_is_capped_or_ignored() {
        let base = RetryPolicy::default().with_backoff(Jitter::None, Some(MS(10_000))).expect("valid");
        let f = facts(Some(45_000), 25, 60_000);
        let pause = |mode| delay(&base.with_retry_after(mode), Outcome::RateLimited, 1, 0.0, &f);
        assert_eq!(pause(RetryAfterMode::Honour), MS(45_000), "longer than the backoff and the cap: it wins");
        assert_eq!(pause(RetryAfterMode::Cap), MS(10_000));
        assert_eq!(pause(RetryAfterMode::Ignore), MS(500));
        let short = facts(Some(200), 25, 60_000);
        assert_eq!(delay(&base, Outcome::RateLimited, 3, 0.0, &short), MS(2_000), "a shorter Retry-After leaves the backoff");
        let beyond = facts(Some(90_000), 25, 60_000);
        assert_eq!(delay(&base, Outcome::RateLimited, 1, 0.0, &beyond), MS(60_000), "the ceiling still holds");
    }

    #[test]
    fn retry_on_names_statuses_classes_and_network_failures() {
        let vtex = RetryOn::from_entries(&["429", "503"]).expect("valid");
        let p = RetryPolicy::default().with_retry_on(vtex).expect("valid");
        let s = |c| Some(StatusCode::from_u16(c).expect("status"));
        assert!(p.retries(Outcome::RateLimited, s(429)));
        assert!(p.retries(Outcome::ServerError, s(503)));
        assert!(!p.retries(Outcome::ServerError, s(500)), "VTEX retries only 429 and 503");
        assert!(!p.retries(Outcome::Network(NetworkFailure::Connect), None));
        let d = RetryPolicy::default();
        for code in [429, 500, 502, 503, 599] {
            assert!(d.retries(Outcome::from_status(StatusCode::from_u16(code).expect("status")), s(code)), "{code}");
        }
        for code in [400, 401, 403, 404, 409, 422] {
            assert!(!d.retries(Outcome::NonRetryable, s(code)), "{code}");
        }
        assert!(d.retries(Outcome::Network(NetworkFailure::Timeout), None));
        assert!(!d.retries(Outcome::Success, s(200)));
        let with_408 = RetryOn::from_entries(&["408", "network"]).expect("valid");
        assert!(RetryPolicy::default().with_retry_on(with_408).expect("valid").retries(Outcome::NonRetryable, s(408)));
        assert_eq!(with_408.entries(), ["408", "network"]);
        for bad in ["200", "302", "600", "4xx", "", "network2"] {
            assert_eq!(RetryOn::none().with_entry(bad), Err(PolicyError::RetryOn { entry: bad.to_owned() }), "{bad}");
        }
        assert_eq!(RetryPolicy::default().with_retry_on(RetryOn::none()), Err(PolicyError::RetryOnEmpty));
    }

    #[test]
    fn invalid_policies_are_refused() {
        assert_eq!(RetryPolicy::new(0, MS(500), MS(1_000)), Err(PolicyError::Attempts { got: 0 }));
        assert_eq!(RetryPolicy::new(21, MS(500), MS(1_000)), Err(PolicyError::Attempts { got: 21 }));
        assert!(matches!(RetryPolicy::new(3, MS(0), MS(1_000)), Err(PolicyError::BaseDelay { .. })));
        assert!(matches!(RetryPolicy::new(3, MS(1), MS(0)), Err(PolicyError::Budget { .. })));
        assert!(matches!(RetryPolicy::default().with_wait_ceiling(MS(0)), Err(PolicyError::WaitCeiling { .. })));
        assert!(matches!(RetryPolicy::default().with_backoff(Jitter::Full, Some(MS(499))), Err(PolicyError::MaxDelay { .. })));
    }

    #[test]
    fn every_bad_field_of_a_config_is_reported_with_its_name() {
        let c = RetryPolicyConfig {
            max_attempts: 0,
            base_delay_ms: 0,
            max_delay_ms: Some(0),
            retry_on: vec!["teapot".into()],
            wait_ceiling_ms: Some(0),
            total_budget_ms: 0,
            ..RetryPolicyConfig::default()
        };
        let fields: Vec<&str> = c.validate().expect_err("all bad").iter().map(PolicyError::field).collect();
        assert_eq!(fields, ["max_attempts", "base_delay_ms", "retry_on", "wait_ceiling_ms", "total_budget_ms"]);
        let cap_below_base = RetryPolicyConfig { base_delay_ms: 1_000, max_delay_ms: Some(500), ..RetryPolicyConfig::default() };
        assert_eq!(cap_below_base.validate().expect_err("bad cap")[0].field(), "max_delay_ms");
    }

    #[test]
    fn policies_deserialize_with_defaults_and_validation() {
        let p: RetryPolicy = serde_json::from_str(r#"{"max_attempts": 5, "wait_ceiling_ms": 2000}"#).expect("valid");
        assert_eq!((p.max_attempts(), p.base_delay(), p.wait_ceiling(MS(1))), (5, MS(500), MS(2_000)));
        assert!(serde_json::from_str::<RetryPolicy>(r#"{"max_attempts": 0}"#).is_err());
        assert!(serde_json::from_str::<RetryPolicy>(r#"{"attempts": 3}"#).is_err());
        let back: RetryPolicy = serde_json::from_value(serde_json::to_value(p).expect("serializes")).expect("valid");
        assert_eq!(back, p);
        let vtex: RetryPolicy = serde_json::from_value(serde_json::json!({
            "max_attempts": 6, "base_delay_ms": 1000, "max_delay_ms": 60000, "jitter": "equal",
            "retry_on": ["429", "503"], "retry_after": "honour"
        }))
        .expect("valid");
        assert_eq!((vtex.jitter(), vtex.max_delay(), vtex.retry_on().entries()), (Jitter::Equal, Some(MS(60_000)), vec!["429".to_owned(), "503".to_owned()]));
        assert!(serde_json::from_str::<RetryPolicy>(r#"{"jitter": "gaussian"}"#).is_err());
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
            let floor = MS(base_ms) * (1 << (attempt - 1));
            let d = p.delay_after(Outcome::ServerError, p.backoff(attempt, None, draw_unit(&mut rng)), &RateLimitFacts::default());
            prop_assert!(d >= floor);
            prop_assert!(d < floor + MS(base_ms));
        }

        #[test]
        fn backoff_never_shrinks_from_one_attempt_to_the_next(
            base_ms in 1u64..10_000, attempt in 1u32..100, u1 in 0.0f64..1.0, u2 in 0.0f64..1.0
        ) {
            let p = RetryPolicy::new(3, MS(base_ms), MS(60_000)).expect("valid");
            prop_assert!(p.backoff(attempt + 1, None, u2) >= p.backoff(attempt, None, u1));
            prop_assert!(p.backoff(attempt, None, u1) <= RetryPolicy::MAX_BACKOFF);
        }

        #[test]
        fn a_429_delay_is_capped_by_the_ceiling_and_floored_by_every_hint(
            attempt in 1u32..10, u in 0.0f64..1.0, retry_after in proptest::option::of(0u64..1_000_000),
            refill in 0u64..200_000, ceiling in 1u64..200_000,
        ) {
            let p = RetryPolicy::default();
            let f = facts(retry_after, refill, ceiling);
            let backoff = p.backoff(attempt, None, u);
            let d = p.delay_after(Outcome::RateLimited, backoff, &f);
            prop_assert!(d <= MS(ceiling));
            prop_assert!(d >= MS(refill).min(MS(ceiling)));
            prop_assert!(d >= MS(retry_after.unwrap_or(0)).min(MS(ceiling)));
            prop_assert!(d >= backoff.min(MS(ceiling)));
        }
    }
}
