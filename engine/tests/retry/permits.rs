//! Permits behind the upstream breaker (`upstream_breaker::permits`), what
//! the HTTP permit endpoint runs: breaker first, then the limiter, probes
//! handed out one at a time and given back when the limiter refuses. On a
//! manual clock, so the 30 s pause takes no time.

use std::sync::Arc;
use std::time::Duration;

use sluice_engine::clock::{ManualClock, SharedClock};
use sluice_engine::quota::{
    Limit, Limiter, LimiterConfig, MemoryStore, Outcome, QuotaRequest, RefusalReason, Rule, RuleId, RuleRegistry,
    StorePolicy,
};
use sluice_engine::upstream_breaker::memory::MemoryBreakerStore;
use sluice_engine::upstream_breaker::permits::{BreakerGate, PermitGateConfig};
use sluice_engine::upstream_breaker::{BreakerKey, Phase, UpstreamAdmission, UpstreamBreaker, UpstreamBreakerConfig};

const SECS: fn(u64) -> Duration = Duration::from_secs;

struct Fixture {
    clock: Arc<ManualClock>,
    limiter: Limiter,
    breakers: UpstreamBreaker,
}

fn fixture() -> Fixture {
    let clock = Arc::new(ManualClock::at_test_epoch());
    let shared: SharedClock = clock.clone();
    let mut shadow = Rule::new("shadowed", None, None, Limit::token_bucket(10, SECS(1), 10)).with_id("shadowed");
    shadow.shadow = true;
    let rules = RuleRegistry::new([
        Rule::new("pricing", None, None, Limit::token_bucket(10, SECS(1), 10)).with_id("pricing"),
        Rule::new("feeds", None, None, Limit::fixed_window(1, SECS(60))).with_id("feeds"),
        Rule::new("ignored", None, None, Limit::token_bucket(10, SECS(1), 10)).with_id("ignored"),
        shadow,
    ]);
    let limiter = Limiter::new(Arc::new(MemoryStore::new(shared.clone())), rules, shared.clone(), LimiterConfig::default());
    let breakers = UpstreamBreaker::new(Arc::new(MemoryBreakerStore::new(shared)), UpstreamBreakerConfig::default());
    Fixture { clock, limiter, breakers }
}

impl Fixture {
    fn gate(&self) -> BreakerGate {
        let config = PermitGateConfig {
            ignored_rules: [RuleId("ignored".into())].into_iter().collect(),
            ..PermitGateConfig::default()
        };
        BreakerGate::new(self.limiter.clone(), self.breakers.clone(), config)
    }

    async fn open(&self, scope: &str) {
        let key = BreakerKey::new(Some("acct"), scope).expect("key");
        for _ in 0..5 {
            self.breakers.record(&key, true).await.expect("record");
        }
    }
}

fn req(scope: &str) -> QuotaRequest {
    QuotaRequest::new(scope, "GET", "/x").account("acct")
}

fn refusal_reason(outcome: &Outcome) -> Option<RefusalReason> {
    outcome.refusal().map(|r| r.reason)
}

#[tokio::test]
async fn an_open_breaker_refuses_permits_until_its_probe_and_spends_no_quota() {
    let f = fixture();
    let gate = f.gate();
    f.open("pricing").await;
    f.clock.advance(SECS(10));
    let gated = gate.permit(&req("pricing"), false).await.expect("permit");
    let refusal = gated.outcome.refusal().expect("refused").clone();
    assert_eq!((refusal.reason, refusal.retry_after), (RefusalReason::BreakerOpen, Some(SECS(20))));
    assert_eq!(refusal.rule, Some(RuleId("pricing".into())));
    // Nothing was booked; the refusal is counted on the bucket.
    let (bucket, usage) = f.limiter.peek(&req("pricing")).await.expect("peek").expect("rule");
    assert_eq!(usage.remaining, 10);
    let stats = f.limiter.stats(&bucket).await.expect("stats");
    assert_eq!((stats.grants, stats.refusals(RefusalReason::BreakerOpen)), (0, 1));
    // Other accounts and scopes are not held back.
    assert!(gate.permit(&req("pricing").account("other"), false).await.expect("permit").outcome.permit().is_some());
    assert!(gate.permit(&req("feeds"), false).await.expect("permit").outcome.permit().is_some());
}

#[tokio::test]
async fn after_thirty_seconds_one_permit_is_the_probe_and_three_good_probes_close_the_breaker() {
    let f = fixture();
    let gate = f.gate();
    let key = BreakerKey::new(Some("acct"), "pricing").expect("key");
    f.open("pricing").await;
    f.clock.advance(SECS(30));
    for _ in 0..3 {
        let probe = gate.permit(&req("pricing"), false).await.expect("permit");
        assert!(probe.probe && probe.outcome.permit().is_some(), "{probe:?}");
        let second = gate.permit(&req("pricing"), false).await.expect("permit");
        assert_eq!(refusal_reason(&second.outcome), Some(RefusalReason::BreakerOpen), "one probe at a time");
        f.breakers.record(&key, false).await.expect("record");
    }
    let after = gate.permit(&req("pricing"), false).await.expect("permit");
    assert!(!after.probe && after.outcome.permit().is_some());
    assert_eq!(f.breakers.view(&key).await.expect("view").phase, Phase::Closed);
}

#[tokio::test]
async fn a_probe_the_limiter_refuses_is_given_back_at_once() {
    let f = fixture();
    let gate = f.gate();
    let key = BreakerKey::new(Some("acct"), "feeds").expect("key");
    // One per minute: the first permit spends the window, the next ones wait
    // until the ceiling (2 × 60 s + 5 s) refuses them.
    while gate.permit(&req("feeds"), false).await.expect("permit").outcome.permit().is_some() {}
    f.open("feeds").await;
    f.clock.advance(SECS(30));
    let refused = gate.permit(&req("feeds").max_wait(Duration::ZERO), false).await.expect("permit");
    assert_eq!(refusal_reason(&refused.outcome), Some(RefusalReason::WaitCeilingExceeded), "{refused:?}");
    assert!(!refused.probe);
    // The probe slot is free for the next caller, not held for its 30 s lease.
    assert_eq!(f.breakers.admit(&key).await.expect("admit"), UpstreamAdmission::Probe);
}

#[tokio::test]
async fn shadow_rules_and_ignored_rules_never_wait_for_the_breaker() {
    let f = fixture();
    let gate = f.gate();
    for scope in ["shadowed", "ignored"] {
        f.open(scope).await;
        let gated = gate.permit(&req(scope), false).await.expect("permit");
        assert!(gated.outcome.permit().is_some() && !gated.probe, "{scope}: {gated:?}");
    }
}

/// A breaker store that is down.
#[derive(Debug)]
struct DownStore;

#[async_trait::async_trait]
impl sluice_engine::upstream_breaker::BreakerStore for DownStore {
    async fn load(&self, _: &BreakerKey) -> Result<sluice_engine::upstream_breaker::Loaded, sluice_engine::upstream_breaker::BreakerError> {
        Err(down())
    }
    async fn compare_and_set(
        &self,
        _: &BreakerKey,
        _: u64,
        _: &sluice_engine::upstream_breaker::BreakerState,
        _: Duration,
    ) -> Result<bool, sluice_engine::upstream_breaker::BreakerError> {
        Err(down())
    }
    async fn list(
        &self,
    ) -> Result<(Vec<(BreakerKey, sluice_engine::upstream_breaker::BreakerState)>, sluice_engine::clock::Timestamp), sluice_engine::upstream_breaker::BreakerError>
    {
        Err(down())
    }
    async fn reset(&self, _: &BreakerKey) -> Result<(), sluice_engine::upstream_breaker::BreakerError> {
        Err(down())
    }
}

fn down() -> sluice_engine::upstream_breaker::BreakerError {
    sluice_engine::upstream_breaker::BreakerError::Store("connection refused".into())
}

#[tokio::test]
async fn a_dead_breaker_store_follows_the_store_down_policy() {
    let f = fixture();
    let breakers = UpstreamBreaker::new(Arc::new(DownStore), UpstreamBreakerConfig::default());
    let closed = BreakerGate::new(f.limiter.clone(), breakers.clone(), PermitGateConfig::default());
    let refused = closed.permit(&req("pricing"), false).await.expect("permit");
    assert_eq!(refused.outcome.refusal().map(|r| (r.reason, r.retry_after)), Some((RefusalReason::StoreUnavailable, Some(SECS(1)))));
    let config = PermitGateConfig { store_down: StorePolicy::LocalFallback { expected_instances: 1 }, ..PermitGateConfig::default() };
    let fallback = BreakerGate::new(f.limiter.clone(), breakers, config);
    assert!(fallback.permit(&req("pricing"), false).await.expect("permit").outcome.permit().is_some());
}
