//! The limiter: what workers, the HTTP API and the retry executor call.
//!
//! [`Limiter`] resolves a request to its rule, computes the wait ceiling and
//! asks the store for one atomic decision. It is cheap to clone (an `Arc`)
//! and its rule set can be swapped at any time ([`Limiter::replace_rules`])
//! without touching bucket state, which is keyed by rule id.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;

use crate::account::{parse_account, InvalidAccount};
use crate::clock::{SharedClock, Timestamp};

use super::decision::Usage;
use super::lane::Priority;
use super::metrics::{record_decision, record_penalty, NO_RULE_SCOPE};
use super::outcome::{Lease, Outcome, Permit, Refusal};
use super::registry::RuleRegistry;
use super::rule::{validate_scope, Rule, RuleId, GLOBAL_SCOPE};
use super::stats::{BucketKey, BucketStats, RefusalReason};
use super::store::{DecideArgs, LeaseArgs, QuotaStore, StoreDecision, StoreError, StoreHealth};

/// One request for quota. Build with [`QuotaRequest::new`] and the setters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QuotaRequest {
    /// The upstream account; `None` = [`GLOBAL_ACCOUNT`].
    pub account: Option<String>,
    pub scope: String,
    pub method: String,
    /// Concrete request path; query strings are ignored.
    pub path: String,
    /// Tokens this request spends (≥ 1, ≤ the rule's capacity).
    pub cost: u32,
    /// The caller's wait ceiling; the rule's, then 30 s, when `None`. The
    /// floor (interval + 5 s, or 2 × interval + 5 s for 1-token rules) applies.
    pub max_wait: Option<Duration>,
    /// The lane: how far ahead this request may book ([`super::lane`]).
    pub priority: Priority,
}

impl QuotaRequest {
    pub fn new(scope: impl Into<String>, method: impl Into<String>, path: impl Into<String>) -> QuotaRequest {
        QuotaRequest {
            account: None,
            scope: scope.into(),
            method: method.into(),
            path: path.into(),
            cost: 1,
            max_wait: None,
            priority: Priority::Normal,
        }
    }
    pub fn account(mut self, account: impl Into<String>) -> Self {
        self.account = Some(account.into());
        self
    }
    pub fn cost(mut self, cost: u32) -> Self {
        self.cost = cost;
        self
    }
    pub fn max_wait(mut self, max_wait: Duration) -> Self {
        self.max_wait = Some(max_wait);
        self
    }
    pub fn priority(mut self, priority: Priority) -> Self {
        self.priority = priority;
        self
    }
}

/// Rate-limit headers of an upstream response, parsed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RateLimitHeaders {
    pub remaining: Option<u64>,
    /// Time until the upstream's window resets.
    pub reset_in: Option<Duration>,
}

impl RateLimitHeaders {
    /// Parse `X-RateLimit-Remaining` and `X-RateLimit-Reset`. Reset values above
    /// 10^9 are read as Unix seconds, smaller ones as seconds from now
    /// (upstreams use both). Unparseable values are ignored.
    pub fn parse(remaining: Option<&str>, reset: Option<&str>, now: Timestamp) -> RateLimitHeaders {
        let remaining = remaining.and_then(|v| v.trim().parse::<u64>().ok());
        let reset_in =
            reset.and_then(|v| v.trim().parse::<f64>().ok()).filter(|v| v.is_finite() && *v >= 0.0).map(|v| {
                if v > 1e9 {
                    Timestamp::from_micros((v * 1e6) as i64).saturating_duration_since(now)
                } else {
                    Duration::from_secs_f64(v.min(1e9))
                }
            });
        RateLimitHeaders { remaining, reset_in }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum QuotaError {
    #[error("cost must be between 1 and the rule's capacity {capacity}, got {cost}")]
    InvalidCost { cost: u32, capacity: u32 },
    #[error(transparent)]
    InvalidAccount(#[from] InvalidAccount),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Settings of a limiter that are not per rule.
#[derive(Clone, Debug)]
pub struct LimiterConfig {
    /// How long after its booked start a concurrency lease expires unless released.
    pub lease_ttl: Duration,
}

impl Default for LimiterConfig {
    fn default() -> Self {
        LimiterConfig { lease_ttl: Duration::from_secs(60) }
    }
}

struct Inner {
    store: Arc<dyn QuotaStore>,
    rules: ArcSwap<RuleRegistry>,
    /// The version of the rule set in force, for whoever wants to know when it changes.
    rules_version: tokio::sync::watch::Sender<i64>,
    clock: SharedClock,
    config: LimiterConfig,
}

/// The shared-quota limiter. Clone it freely.
#[derive(Clone)]
pub struct Limiter {
    inner: Arc<Inner>,
}

impl fmt::Debug for Limiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Limiter")
            .field("store", &self.inner.store)
            .field("rules", &self.inner.rules.load().len())
            .finish_non_exhaustive()
    }
}

impl Limiter {
    /// `clock` is used for sleeping in [`Limiter::acquire`] and for header
    /// parsing; the store keeps its own time (Redis: `TIME`).
    pub fn new(store: Arc<dyn QuotaStore>, rules: RuleRegistry, clock: SharedClock, config: LimiterConfig) -> Limiter {
        let (rules_version, _) = tokio::sync::watch::channel(rules.version);
        Limiter { inner: Arc::new(Inner { store, rules: ArcSwap::from_pointee(rules), rules_version, clock, config }) }
    }

    /// Swap the rule set atomically. Buckets carry over (they are keyed by rule id).
    pub fn replace_rules(&self, rules: RuleRegistry) {
        let version = rules.version;
        self.inner.rules.store(Arc::new(rules));
        self.inner.rules_version.send_replace(version);
    }

    /// Notified with the version of every rule set swapped in (live pages,
    /// and tests that must see an edit arrive without sleeping).
    pub fn watch_rules(&self) -> tokio::sync::watch::Receiver<i64> {
        self.inner.rules_version.subscribe()
    }

    pub fn rules(&self) -> Arc<RuleRegistry> {
        self.inner.rules.load_full()
    }

    /// The rule that governs a request (the Limits page's tester).
    pub fn resolve(&self, scope: &str, method: &str, path: &str) -> Option<Arc<Rule>> {
        self.inner.rules.load().resolve(scope, method, path).cloned()
    }

    pub fn clock(&self) -> &SharedClock {
        &self.inner.clock
    }

    pub fn health(&self) -> StoreHealth {
        self.inner.store.health()
    }

    /// Book a slot and return how long to wait before using it, without
    /// sleeping (the HTTP API returns the wait to the client). The caller must
    /// wait `permit.wait` before sending.
    pub async fn reserve(&self, req: &QuotaRequest) -> Result<Outcome, QuotaError> {
        let account = account_of(req)?;
        let Some(rule) = self.resolve(&req.scope, &req.method, &req.path) else {
            let scope = if validate_scope(&req.scope).is_ok() { req.scope.clone() } else { "_invalid".into() };
            let key = BucketKey { account, scope, rule: RuleId("_none".into()) };
            // Recording is best effort: the refusal stands even if the store is down.
            let _ = self.inner.store.record_refusal(&key, RefusalReason::NoRule, req.priority).await;
            let outcome = Outcome::Refused(Refusal { reason: RefusalReason::NoRule, retry_after: None, rule: None });
            record_decision(NO_RULE_SCOPE, req.priority, &outcome);
            return Ok(outcome);
        };
        let capacity = rule.limit.capacity();
        if req.cost == 0 || req.cost > capacity {
            return Err(QuotaError::InvalidCost { cost: req.cost, capacity });
        }
        let args = DecideArgs {
            key: bucket_key(account, &rule),
            limit: rule.limit,
            cost: req.cost,
            ceiling: rule.wait_ceiling(req.max_wait),
            lane: req.priority,
            shadow: rule.shadow,
            lease: rule.concurrency.map(|max_in_flight| LeaseArgs {
                max_in_flight,
                id: format!("lease_{}", ulid::Ulid::new().to_string().to_lowercase()),
                ttl: self.inner.config.lease_ttl,
            }),
        };
        let decision = match self.inner.store.decide(&args).await {
            Ok(d) => d,
            Err(StoreError::Unavailable(_)) => StoreDecision::Refused {
                reason: RefusalReason::StoreUnavailable,
                retry_after: Some(Duration::from_secs(1)),
            },
            Err(e) => return Err(e.into()),
        };
        let outcome = match decision {
            StoreDecision::Granted { wait, lease } => Outcome::Granted(Permit {
                wait: if rule.shadow { Duration::ZERO } else { wait },
                lease: lease.map(|id| Lease { bucket: args.key.clone(), id }),
                shadow: rule.shadow,
                bucket: args.key,
            }),
            StoreDecision::Refused { .. } if rule.shadow => {
                Outcome::Granted(Permit { bucket: args.key, wait: Duration::ZERO, lease: None, shadow: true })
            }
            StoreDecision::Refused { reason, retry_after } => {
                Outcome::Refused(Refusal { reason, retry_after, rule: Some(rule.id.clone()) })
            }
        };
        record_decision(&rule.scope, req.priority, &outcome);
        Ok(outcome)
    }

    /// Book a slot and hold until it comes (sleeping on the limiter's clock),
    /// or refuse at once. Callers are served in booking order. If this future
    /// is dropped mid-wait the booked slot goes unused (it is not given back).
    pub async fn acquire(&self, req: &QuotaRequest) -> Result<Outcome, QuotaError> {
        let outcome = self.reserve(req).await?;
        if let Outcome::Granted(permit) = &outcome {
            if !permit.wait.is_zero() {
                self.inner.clock.sleep(permit.wait).await;
            }
        }
        Ok(outcome)
    }

    /// Report an upstream 429 for the request's bucket: no permit before
    /// max(now + one token's refill (or the rule's `min_penalty`), now +
    /// `retry_after`). Returns how long the bucket is blocked, or `None` when
    /// no rule governs the request.
    pub async fn penalize(
        &self,
        req: &QuotaRequest,
        retry_after: Option<Duration>,
    ) -> Result<Option<Duration>, QuotaError> {
        let account = account_of(req)?;
        let Some(rule) = self.resolve(&req.scope, &req.method, &req.path) else { return Ok(None) };
        let key = bucket_key(account, &rule);
        let blocked = self.inner.store.penalize(&key, &rule.limit, rule.penalty_floor(), retry_after).await?;
        record_penalty(&rule.scope);
        Ok(Some(blocked))
    }

    /// Report upstream rate-limit headers: the bucket is lowered to
    /// `remaining` (never raised); `remaining == 0` blocks until the reset.
    pub async fn observe(&self, req: &QuotaRequest, headers: RateLimitHeaders) -> Result<(), QuotaError> {
        let account = account_of(req)?;
        let Some(remaining) = headers.remaining else { return Ok(()) };
        let Some(rule) = self.resolve(&req.scope, &req.method, &req.path) else { return Ok(()) };
        let key = bucket_key(account, &rule);
        Ok(self.inner.store.observe(&key, &rule.limit, remaining, headers.reset_in).await?)
    }

    /// Usage of the request's bucket without consuming; `None` without a rule.
    pub async fn peek(&self, req: &QuotaRequest) -> Result<Option<(BucketKey, Usage)>, QuotaError> {
        let account = account_of(req)?;
        let Some(rule) = self.resolve(&req.scope, &req.method, &req.path) else { return Ok(None) };
        let key = bucket_key(account, &rule);
        let usage = self.inner.store.peek(&key, &rule.limit).await?;
        Ok(Some((key, usage)))
    }

    /// Usage of a known bucket (dashboards); `None` when its rule is gone.
    pub async fn peek_bucket(&self, key: &BucketKey) -> Result<Option<Usage>, QuotaError> {
        let Some(rule) = self.rules().get(&key.rule).cloned() else { return Ok(None) };
        Ok(Some(self.inner.store.peek(key, &rule.limit).await?))
    }

    /// Give a concurrency lease back.
    pub async fn release(&self, lease: &Lease) -> Result<(), QuotaError> {
        Ok(self.inner.store.release(&lease.bucket, &lease.id).await?)
    }

    /// Count a refusal decided elsewhere (the retry executor's open breaker)
    /// against the request's bucket, so dashboards show it with the rest.
    pub async fn record_refusal(&self, req: &QuotaRequest, reason: RefusalReason) -> Result<(), QuotaError> {
        let account = account_of(req)?;
        let key = match self.resolve(&req.scope, &req.method, &req.path) {
            Some(rule) => bucket_key(account, &rule),
            None => BucketKey { account, scope: req.scope.clone(), rule: RuleId("_none".into()) },
        };
        Ok(self.inner.store.record_refusal(&key, reason, req.priority).await?)
    }

    pub async fn stats(&self, key: &BucketKey) -> Result<BucketStats, QuotaError> {
        Ok(self.inner.store.stats(key).await?)
    }

    /// Every (account, rule) bucket the store knows, sorted.
    pub async fn list_buckets(&self) -> Result<Vec<BucketKey>, QuotaError> {
        Ok(self.inner.store.list_buckets().await?)
    }

    /// The buckets with a decision at or after `since_ms` (Unix ms), sorted,
    /// at most `limit` (see [`QuotaStore::list_buckets_since`]).
    pub async fn list_buckets_since(&self, since_ms: i64, limit: usize) -> Result<Vec<BucketKey>, QuotaError> {
        Ok(self.inner.store.list_buckets_since(since_ms, limit).await?)
    }

    /// How many buckets each backend of the store holds.
    pub async fn live_buckets(&self) -> Result<Vec<(&'static str, u64)>, QuotaError> {
        Ok(self.inner.store.live_buckets().await?)
    }

    /// Forget idle buckets that can no longer change a decision (see
    /// [`QuotaStore::forget_idle`]); blocking CPU work.
    pub fn forget_idle(&self) -> usize {
        self.inner.store.forget_idle()
    }

    /// Run [`Limiter::forget_idle`] every `every` on a blocking thread until
    /// `shutdown` resolves (the server's background task). Once passes have
    /// forgotten [`RELEASE_AFTER_FORGETTING`] buckets the freed memory goes
    /// back to the system ([`crate::freed_memory::release`]): resident memory
    /// follows the buckets held, not the busiest hour.
    pub async fn run_forgetting(self, every: Duration, shutdown: impl std::future::Future<Output = ()>) {
        let unreleased = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        crate::periodic::every(every, shutdown, || async {
            let limiter = self.clone();
            let unreleased = unreleased.clone();
            let forget = move || {
                use std::sync::atomic::Ordering::Relaxed;
                let forgotten = limiter.forget_idle();
                if unreleased.fetch_add(forgotten, Relaxed) + forgotten >= RELEASE_AFTER_FORGETTING {
                    unreleased.store(0, Relaxed);
                    crate::freed_memory::release();
                }
                forgotten
            };
            match tokio::task::spawn_blocking(forget).await {
                Ok(forgotten) if forgotten > 0 => tracing::debug!(forgotten, "idle quota buckets forgotten"),
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "forgetting idle quota buckets failed"),
            }
        })
        .await
    }
}

/// Buckets forgotten (over one or more passes) before their memory is handed
/// back: enough freed to be worth the allocator's walk of its free lists.
const RELEASE_AFTER_FORGETTING: usize = 1_000;

fn account_of(req: &QuotaRequest) -> Result<String, QuotaError> {
    Ok(parse_account(req.account.as_deref())?)
}

/// The bucket of (account, rule). The global default's scope `*` is spelled
/// `_any` in keys.
pub fn bucket_key(account: String, rule: &Rule) -> BucketKey {
    let scope = if rule.scope == GLOBAL_SCOPE { "_any".to_owned() } else { rule.scope.clone() };
    BucketKey { account, scope, rule: rule.id.clone() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quota::stats::GLOBAL_ACCOUNT;

    #[test]
    fn rate_limit_headers_accept_deltas_and_epochs_and_ignore_garbage() {
        let now = Timestamp::from_secs(1_767_225_600);
        let h = RateLimitHeaders::parse(Some(" 7 "), Some("2.5"), now);
        assert_eq!(h, RateLimitHeaders { remaining: Some(7), reset_in: Some(Duration::from_millis(2500)) });
        let h = RateLimitHeaders::parse(Some("0"), Some("1767225630"), now);
        assert_eq!(h.reset_in, Some(Duration::from_secs(30)));
        let h = RateLimitHeaders::parse(Some("-1"), Some("soon"), now);
        assert_eq!(h, RateLimitHeaders::default());
        let past = RateLimitHeaders::parse(None, Some("1767225000"), now);
        assert_eq!(past.reset_in, Some(Duration::ZERO), "a reset in the past means now");
    }

    #[test]
    fn retry_after_is_rounded_up_to_whole_seconds_for_http() {
        let r = Refusal {
            reason: RefusalReason::WaitCeilingExceeded,
            retry_after: Some(Duration::from_millis(65_001)),
            rule: None,
        };
        assert_eq!(r.retry_after_secs(), Some(66));
    }

    #[test]
    fn accounts_that_would_break_the_hash_tag_are_rejected() {
        let req = |a: &str| QuotaRequest::new("s", "GET", "/").account(a);
        assert_eq!(account_of(&QuotaRequest::new("s", "GET", "/")).ok().as_deref(), Some(GLOBAL_ACCOUNT));
        assert_eq!(account_of(&req("acct42")).ok().as_deref(), Some("acct42"));
        for bad in ["a{b", "a}b", "a:b", "a\nb", "a\0b"] {
            assert!(matches!(account_of(&req(bad)), Err(QuotaError::InvalidAccount(_))));
        }
    }
}
