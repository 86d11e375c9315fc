//! Whole retry sequences on a manual clock: every pause is recorded, none is
//! slept.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{HeaderMap, HeaderValue, Method, StatusCode};
use rand::rngs::StdRng;
use rand::SeedableRng;
use sluice_engine::upstream_breaker::memory::MemoryBreakerStore;
use sluice_engine::upstream_breaker::{UpstreamBreaker, UpstreamBreakerConfig, BreakerError, BreakerKey, Phase};
use sluice_engine::clock::{Clock, ManualClock, SharedClock};
use sluice_engine::retry::policy::{draw_jitter, draw_unit};
use sluice_engine::retry::profiles::ProfileSet;
use sluice_engine::retry::{
    Call, CallTarget, GateRefusal, GiveUpReason, LastAttempt, NetworkFailure, RetryExecutor, RetryPolicy,
    RetryProfile, RetryProfiles, TransportError, UpstreamResponse,
};

use super::fake_gate::FakeGate;

const MS: fn(u64) -> Duration = Duration::from_millis;
const SEED: u64 = 42;

#[derive(Debug)]
struct FakeResponse {
    status: StatusCode,
    headers: HeaderMap,
}

impl UpstreamResponse for FakeResponse {
    fn status(&self) -> StatusCode {
        self.status
    }
    fn headers(&self) -> &HeaderMap {
        &self.headers
    }
}

#[derive(Debug, thiserror::Error)]
#[error("network failure {0:?}")]
struct FakeNet(NetworkFailure);

impl TransportError for FakeNet {
    fn failure(&self) -> NetworkFailure {
        self.0
    }
}

type Script = Arc<Mutex<VecDeque<Result<FakeResponse, FakeNet>>>>;

fn status(code: u16) -> Result<FakeResponse, FakeNet> {
    Ok(FakeResponse { status: StatusCode::from_u16(code).expect("status"), headers: HeaderMap::new() })
}

fn with_header(code: u16, name: &'static str, value: &'static str) -> Result<FakeResponse, FakeNet> {
    let mut headers = HeaderMap::new();
    headers.insert(name, HeaderValue::from_static(value));
    Ok(FakeResponse { status: StatusCode::from_u16(code).expect("status"), headers })
}

/// An upstream that answers from a script and counts what it was sent.
fn upstream(script: Vec<Result<FakeResponse, FakeNet>>) -> (Script, impl FnMut(u32) -> futures::future::Ready<Result<FakeResponse, FakeNet>> + Send) {
    let script: Script = Arc::new(Mutex::new(script.into()));
    let queue = script.clone();
    let send = move |_attempt: u32| {
        let next = queue.lock().expect("lock").pop_front().unwrap_or_else(|| status(200));
        futures::future::ready(next)
    };
    (script, send)
}

struct Setup {
    clock: Arc<ManualClock>,
    gate: Arc<FakeGate>,
    executor: RetryExecutor,
}

fn setup(gate: FakeGate, policy: RetryPolicy) -> Setup {
    let clock = Arc::new(ManualClock::at_test_epoch());
    let gate = Arc::new(gate);
    let executor = RetryExecutor::new(gate.clone(), clock.clone() as SharedClock)
        .with_policy(policy)
        .with_rng(StdRng::seed_from_u64(SEED));
    Setup { clock, gate, executor }
}

fn get() -> Call {
    Call::new(CallTarget::new(Some("seller-1"), "marketplace", Method::GET, "/api/v3/orders"))
}

fn post() -> Call {
    Call::new(CallTarget::new(Some("seller-1"), "marketplace", Method::POST, "/api/v3/orders"))
}

/// The jitters the executor will draw, in order, from the same seed.
fn jitters(n: usize) -> Vec<Duration> {
    let mut rng = StdRng::seed_from_u64(SEED);
    (0..n).map(|_| draw_jitter(&mut rng, MS(500))).collect()
}

fn vtex_pricing_gate() -> FakeGate {
    FakeGate::new(MS(25), Duration::from_secs(30))
}

#[tokio::test]
async fn server_errors_are_retried_with_exponential_backoff_and_seeded_jitter() {
    let s = setup(vtex_pricing_gate(), RetryPolicy::default());
    let (_, send) = upstream(vec![status(503), status(500), status(200)]);
    let done = s.executor.run(&get(), send).await.expect("third attempt succeeds");
    assert_eq!(done.attempts, 3);
    let j = jitters(2);
    assert_eq!(s.clock.sleeps(), vec![MS(500) + j[0], MS(1_000) + j[1]]);
    assert_eq!(s.gate.count("acquire"), 3, "every attempt takes a permit");
    assert_eq!(s.gate.count("observe"), 1, "the success's headers are observed");
}

#[tokio::test]
async fn retries_spend_the_same_quota_as_first_attempts() {
    let s = setup(vtex_pricing_gate(), RetryPolicy::default());
    let (_, send) = upstream(vec![status(429), Err(FakeNet(NetworkFailure::Connect)), status(200)]);
    s.executor.run(&get(), send).await.expect("succeeds");
    let log = s.gate.log();
    let acquires: Vec<usize> = log.iter().enumerate().filter(|(_, l)| *l == "acquire").map(|(i, _)| i).collect();
    assert_eq!(acquires.len(), 3);
    assert_eq!(log, ["acquire", "penalize", "acquire", "acquire", "observe"]);
}

#[tokio::test]
async fn a_429_penalizes_the_bucket_and_waits_at_least_one_refill() {
    // WB feed: 1 token a minute, no Retry-After (WB sends none).
    let s = setup(FakeGate::new(Duration::from_secs(60), Duration::from_secs(125)), RetryPolicy::default());
    let (_, send) = upstream(vec![status(429), status(200)]);
    s.executor.run(&get(), send).await.expect("succeeds");
    assert_eq!(s.gate.penalties(), vec![None]);
    assert_eq!(s.clock.sleeps(), vec![Duration::from_secs(60)]);
}

#[tokio::test]
async fn a_429_honours_retry_after_when_it_is_the_longest_wait() {
    let s = setup(vtex_pricing_gate(), RetryPolicy::default());
    let (_, send) = upstream(vec![with_header(429, "retry-after", "7"), status(200)]);
    s.executor.run(&get(), send).await.expect("succeeds");
    assert_eq!(s.gate.penalties(), vec![Some(Duration::from_secs(7))]);
    assert_eq!(s.clock.sleeps(), vec![Duration::from_secs(7)]);
}

#[tokio::test]
async fn a_huge_retry_after_is_capped_by_the_wait_ceiling() {
    let s = setup(vtex_pricing_gate(), RetryPolicy::default());
    let (_, send) = upstream(vec![with_header(429, "retry-after", "99999999999999999999"), status(200)]);
    s.executor.run(&get(), send).await.expect("succeeds");
    assert_eq!(s.clock.sleeps(), vec![Duration::from_secs(30)]);
}

#[tokio::test]
async fn an_invalid_retry_after_falls_back_to_the_policy_delay() {
    let s = setup(vtex_pricing_gate(), RetryPolicy::default());
    let (_, send) = upstream(vec![with_header(429, "retry-after", "soon"), status(200)]);
    s.executor.run(&get(), send).await.expect("succeeds");
    assert_eq!(s.gate.penalties(), vec![None]);
    assert_eq!(s.clock.sleeps(), vec![MS(500) + jitters(1)[0]]);
}

#[tokio::test]
async fn giving_up_after_the_last_attempt_says_attempts_exhausted_and_keeps_the_response() {
    let s = setup(vtex_pricing_gate(), RetryPolicy::default());
    let (_, send) = upstream(vec![status(502), status(502), status(502), status(200)]);
    let err = s.executor.run(&get(), send).await.expect_err("gives up");
    assert!(matches!(err.reason, GiveUpReason::AttemptsExhausted), "{err:?}");
    assert_eq!(err.attempts, 3);
    assert!(matches!(err.last, Some(LastAttempt::Response(ref r)) if r.status == StatusCode::BAD_GATEWAY));
    assert_eq!(s.clock.sleeps().len(), 2, "no pause after the last attempt");
    assert_eq!(err.to_string(), "gave up after 3 attempt(s): attempts exhausted");
}

#[tokio::test]
async fn non_retryable_statuses_are_returned_after_one_attempt() {
    for code in [401, 403, 404, 422] {
        let s = setup(vtex_pricing_gate(), RetryPolicy::default());
        let (_, send) = upstream(vec![status(code)]);
        let err = s.executor.run(&get(), send).await.expect_err("gives up");
        assert!(matches!(err.reason, GiveUpReason::NonRetryableStatus(st) if st.as_u16() == code));
        assert_eq!((err.attempts, s.clock.sleeps().len()), (1, 0));
    }
}

#[tokio::test]
async fn a_timeout_on_a_post_is_not_retried_unless_marked_safe() {
    let s = setup(vtex_pricing_gate(), RetryPolicy::default());
    let (_, send) = upstream(vec![Err(FakeNet(NetworkFailure::Timeout)), status(201)]);
    let err = s.executor.run(&post(), send).await.expect_err("not retried");
    assert!(matches!(err.reason, GiveUpReason::UnsafeToRepeat), "{err:?}");
    assert_eq!(err.attempts, 1);

    let (_, send) = upstream(vec![Err(FakeNet(NetworkFailure::Timeout)), status(201)]);
    let done = s.executor.run(&post().safe_to_repeat(), send).await.expect("retried when marked safe");
    assert_eq!(done.attempts, 2);

    // A GET is idempotent: retried without being marked.
    let (_, send) = upstream(vec![Err(FakeNet(NetworkFailure::Timeout)), status(200)]);
    assert_eq!(s.executor.run(&get(), send).await.expect("retried").attempts, 2);
}

#[tokio::test]
async fn a_refused_connection_is_retried_even_for_a_post() {
    let s = setup(vtex_pricing_gate(), RetryPolicy::default());
    let (_, send) = upstream(vec![Err(FakeNet(NetworkFailure::Connect)), status(201)]);
    assert_eq!(s.executor.run(&post(), send).await.expect("retried").attempts, 2);
}

#[tokio::test]
async fn the_budget_stops_a_retry_whose_pause_would_not_fit() {
    let policy = RetryPolicy::new(5, MS(500), MS(1_200)).expect("valid");
    let s = setup(vtex_pricing_gate(), policy);
    let (_, send) = upstream(vec![status(503), status(503), status(503), status(200)]);
    let err = s.executor.run(&get(), send).await.expect_err("out of budget");
    assert!(matches!(err.reason, GiveUpReason::BudgetExhausted), "{err:?}");
    // 500 ms + jitter fits in 1.2 s; the next 1 s + jitter does not.
    assert_eq!((err.attempts, s.clock.sleeps().len()), (2, 1));
}

#[tokio::test]
async fn a_refused_permit_gives_up_with_the_limiters_reason() {
    let gate = vtex_pricing_gate().refusing_at(2, || GateRefusal::WaitCeiling { retry_after: Some(MS(40_000)) });
    let s = setup(gate, RetryPolicy::default());
    let (_, send) = upstream(vec![status(429), status(200)]);
    let err = s.executor.run(&get(), send).await.expect_err("refused");
    assert!(matches!(err.reason, GiveUpReason::WaitCeiling { retry_after: Some(d) } if d == MS(40_000)));
    assert_eq!(err.attempts, 1);

    let gate = vtex_pricing_gate()
        .refusing_at(1, || GateRefusal::StoreUnavailable(Box::new(std::io::Error::other("redis down"))));
    let s = setup(gate, RetryPolicy::default());
    let (script, send) = upstream(vec![status(200)]);
    let err = s.executor.run(&get(), send).await.expect_err("fails closed");
    assert_eq!((err.reason.code(), err.attempts), ("store_unavailable", 0));
    assert_eq!(script.lock().expect("lock").len(), 1, "nothing was sent");
    assert!(std::error::Error::source(&err).is_some(), "the store error is kept as the source");
}

#[tokio::test]
async fn an_open_breaker_stops_calls_before_they_spend_quota_and_probes_close_it() {
    let clock = Arc::new(ManualClock::at_test_epoch());
    let gate = Arc::new(vtex_pricing_gate());
    let breaker = UpstreamBreaker::new(Arc::new(MemoryBreakerStore::new(clock.clone())), UpstreamBreakerConfig::default());
    let one_shot = RetryPolicy::new(1, MS(500), Duration::from_secs(60)).expect("valid");
    let executor = RetryExecutor::new(gate.clone(), clock.clone() as SharedClock)
        .with_policy(one_shot)
        .with_breaker(breaker.clone())
        .with_rng(StdRng::seed_from_u64(SEED));
    for _ in 0..5 {
        let (_, send) = upstream(vec![status(503)]);
        let err = executor.run(&get(), send).await.expect_err("503");
        assert!(matches!(err.reason, GiveUpReason::AttemptsExhausted));
    }
    let key = BreakerKey::new(Some("seller-1"), "marketplace").expect("key");
    let (script, send) = upstream(vec![status(200)]);
    let err = executor.run(&get(), send).await.expect_err("breaker open");
    let opened = clock.now();
    assert!(matches!(err.reason, GiveUpReason::BreakerOpen { retry_at } if retry_at == opened + Duration::from_secs(30)));
    assert_eq!(gate.count("acquire"), 5, "the refused call took no permit");
    assert_eq!(gate.count("breaker_refusal"), 1);
    assert_eq!(script.lock().expect("lock").len(), 1, "nothing was sent");

    clock.advance(Duration::from_secs(30));
    for _ in 0..3 {
        let (_, send) = upstream(vec![status(200)]);
        executor.run(&get(), send).await.expect("probe succeeds");
    }
    let views = breaker.list().await.expect("list");
    assert_eq!(views.len(), 1);
    assert_eq!((views[0].phase, views[0].trips, &views[0].scope), (Phase::Closed, 1, &"marketplace".to_owned()));
    assert_eq!(key.account(), views[0].account);
}

#[tokio::test]
async fn rate_limits_and_client_errors_do_not_count_against_the_breaker() {
    let clock = Arc::new(ManualClock::at_test_epoch());
    let breaker = UpstreamBreaker::new(Arc::new(MemoryBreakerStore::new(clock.clone())), UpstreamBreakerConfig::default());
    let one_shot = RetryPolicy::new(1, MS(500), Duration::from_secs(60)).expect("valid");
    let executor = RetryExecutor::new(Arc::new(vtex_pricing_gate()), clock.clone() as SharedClock)
        .with_policy(one_shot)
        .with_breaker(breaker.clone());
    // Nine answers, six of them failures, never five failures in a row.
    for code in [503, 503, 503, 503, 429, 503, 404, 503, 403] {
        let (_, send) = upstream(vec![status(code)]);
        let _ = executor.run(&get(), send).await;
    }
    let views = breaker.list().await.expect("list");
    assert_eq!(views.len(), 1);
    assert_eq!((views[0].phase, views[0].consecutive_failures, views[0].trips), (Phase::Closed, 0, 0));
}

#[tokio::test]
async fn a_probe_that_gets_no_permit_does_not_block_the_next_probe() {
    let clock = Arc::new(ManualClock::at_test_epoch());
    let gate = Arc::new(vtex_pricing_gate().refusing_at(6, || GateRefusal::ConcurrencyLimit { retry_after: None }));
    let breaker = UpstreamBreaker::new(Arc::new(MemoryBreakerStore::new(clock.clone())), UpstreamBreakerConfig::default());
    let one_shot = RetryPolicy::new(1, MS(500), Duration::from_secs(60)).expect("valid");
    let executor = RetryExecutor::new(gate.clone(), clock.clone() as SharedClock)
        .with_policy(one_shot)
        .with_breaker(breaker);
    for _ in 0..5 {
        let (_, send) = upstream(vec![status(503)]);
        let _ = executor.run(&get(), send).await;
    }
    clock.advance(Duration::from_secs(30));
    let (_, send) = upstream(vec![status(200)]);
    let err = executor.run(&get(), send).await.expect_err("the probe got no permit");
    assert!(matches!(err.reason, GiveUpReason::ConcurrencyLimit { .. }), "{err:?}");
    let (_, send) = upstream(vec![status(200)]);
    assert_eq!(executor.run(&get(), send).await.expect("probes at once").attempts, 1);
}

/// A breaker store whose backend is down.
#[derive(Debug)]
struct DownStore;

#[async_trait::async_trait]
impl sluice_engine::upstream_breaker::BreakerStore for DownStore {
    async fn load(&self, _key: &BreakerKey) -> Result<sluice_engine::upstream_breaker::Loaded, BreakerError> {
        Err(BreakerError::Store(Box::new(std::io::Error::other("connection refused"))))
    }
    async fn compare_and_set(
        &self,
        _key: &BreakerKey,
        _version: u64,
        _state: &sluice_engine::upstream_breaker::BreakerState,
        _ttl: Duration,
    ) -> Result<bool, BreakerError> {
        Err(BreakerError::Store(Box::new(std::io::Error::other("connection refused"))))
    }
    async fn list(
        &self,
    ) -> Result<(Vec<(BreakerKey, sluice_engine::upstream_breaker::BreakerState)>, sluice_engine::clock::Timestamp), BreakerError>
    {
        Err(BreakerError::Store(Box::new(std::io::Error::other("connection refused"))))
    }
    async fn reset(&self, _key: &BreakerKey) -> Result<(), BreakerError> {
        Err(BreakerError::Store(Box::new(std::io::Error::other("connection refused"))))
    }
}

#[tokio::test]
async fn a_breaker_store_that_is_down_fails_the_call_closed_before_sending() {
    let clock = Arc::new(ManualClock::at_test_epoch());
    let gate = Arc::new(vtex_pricing_gate());
    let executor = RetryExecutor::new(gate.clone(), clock.clone() as SharedClock)
        .with_breaker(UpstreamBreaker::new(Arc::new(DownStore), UpstreamBreakerConfig::default()));
    let (script, send) = upstream(vec![status(200)]);
    let err = executor.run(&get(), send).await.expect_err("fails closed");
    assert_eq!((err.reason.code(), err.attempts), ("store_unavailable", 0));
    assert_eq!((gate.count("acquire"), script.lock().expect("lock").len()), (0, 1), "no permit, nothing sent");
}

// Retry profiles: the executor retries each call by its scope's profile,
// read at the call's start (an edit applies to the next call).

fn vtex() -> RetryPolicy {
    sluice_engine::retry::profiles::preset("vtex").expect("vtex preset")
}

fn with_profiles(profiles: &[(&str, RetryPolicy)]) -> (Setup, RetryProfiles) {
    let live = RetryProfiles::default();
    live.replace(profile_set(profiles, 1));
    let mut s = setup(vtex_pricing_gate(), RetryPolicy::default());
    s.executor = s.executor.with_profiles(live.clone());
    (s, live)
}

fn profile_set(profiles: &[(&str, RetryPolicy)], version: i64) -> ProfileSet {
    let stored = profiles.iter().map(|(scope, policy)| RetryProfile {
        scope: (*scope).to_owned(),
        name: "custom".into(),
        policy: *policy,
        updated_by: "test".into(),
        updated_at: sluice_engine::clock::Timestamp::from_millis(0),
    });
    ProfileSet::new(stored, version)
}

#[tokio::test]
async fn the_vtex_profile_retries_only_429_and_503() {
    let (s, _) = with_profiles(&[("marketplace", vtex())]);
    for code in [500, 502, 504] {
        let (_, send) = upstream(vec![status(code), status(200)]);
        let err = s.executor.run(&get(), send).await.expect_err("not retried");
        assert!(matches!(err.reason, GiveUpReason::NonRetryableStatus(st) if st.as_u16() == code), "{code}: {err:?}");
        assert_eq!(err.attempts, 1);
    }
    let (_, send) = upstream(vec![Err(FakeNet(NetworkFailure::Connect)), status(200)]);
    let err = s.executor.run(&get(), send).await.expect_err("not retried");
    assert_eq!((err.reason.code(), err.attempts), ("network_not_retried", 1));
    let (_, send) = upstream(vec![status(503), status(429), status(200)]);
    assert_eq!(s.executor.run(&get(), send).await.expect("retried").attempts, 3);
    assert_eq!(s.gate.penalties().len(), 1, "the 429 penalized the bucket");
}

#[tokio::test]
async fn the_vtex_profile_pauses_by_its_formula_and_gives_up_after_five_retries() {
    let (s, _) = with_profiles(&[("marketplace", vtex())]);
    let (_, send) = upstream((0..7).map(|_| status(503)).collect());
    let err = s.executor.run(&get(), send).await.expect_err("gives up");
    assert_eq!((err.reason.code(), err.attempts), ("attempts_exhausted", 6));
    // min(60 s, 1 s × 2^k) × (0.5 + u/2) for k = 0..4, with the executor's draws.
    let mut rng = StdRng::seed_from_u64(SEED);
    let want: Vec<Duration> = (0..5u32)
        .map(|k| Duration::from_secs(1 << k).min(Duration::from_secs(60)).mul_f64(0.5 + draw_unit(&mut rng) / 2.0))
        .collect();
    assert_eq!(s.clock.sleeps(), want);
}

#[tokio::test]
async fn retry_after_takes_precedence_over_the_vtex_backoff_when_longer() {
    let (s, _) = with_profiles(&[("marketplace", vtex())]);
    let (_, send) = upstream(vec![with_header(429, "retry-after", "30"), with_header(429, "retry-after", "0"), status(200)]);
    s.executor.run(&get(), send).await.expect("succeeds");
    let sleeps = s.clock.sleeps();
    assert_eq!(sleeps[0], Duration::from_secs(30), "Retry-After 30 s beats a backoff of at most 1 s");
    assert!(sleeps[1] >= MS(1_000) && sleeps[1] < MS(2_000), "a zero Retry-After leaves the backoff: {:?}", sleeps[1]);
}

#[tokio::test]
async fn a_profiles_budget_stops_retries_whose_pause_would_not_fit() {
    let tight = serde_json::from_value::<RetryPolicy>(serde_json::json!({
        "max_attempts": 6, "base_delay_ms": 1000, "max_delay_ms": 60000, "jitter": "none",
        "retry_on": ["503"], "total_budget_ms": 3500
    }))
    .expect("valid");
    let (s, _) = with_profiles(&[("marketplace", tight)]);
    let (_, send) = upstream((0..6).map(|_| status(503)).collect());
    let err = s.executor.run(&get(), send).await.expect_err("out of budget");
    // 1 s + 2 s fit in 3.5 s; the next 4 s does not.
    assert_eq!((err.reason.code(), err.attempts), ("budget_exhausted", 3));
    assert_eq!(s.clock.sleeps(), vec![MS(1_000), MS(2_000)]);
}

#[tokio::test]
async fn a_new_profile_applies_to_the_next_call_and_other_scopes_keep_theirs() {
    let (s, live) = with_profiles(&[]);
    let (_, send) = upstream(vec![status(500), status(200)]);
    assert_eq!(s.executor.run(&get(), send).await.expect("default retries a 500").attempts, 2);
    live.replace(profile_set(&[("marketplace", vtex())], 2));
    let (_, send) = upstream(vec![status(500), status(200)]);
    assert_eq!(s.executor.run(&get(), send).await.expect_err("vtex does not").attempts, 1);
    let elsewhere = Call::new(CallTarget::new(Some("seller-1"), "elsewhere", Method::GET, "/x"));
    let (_, send) = upstream(vec![status(500), status(200)]);
    assert_eq!(s.executor.run(&elsewhere, send).await.expect("other scopes keep the default").attempts, 2);
    live.replace(profile_set(&[("*", vtex())], 3));
    let (_, send) = upstream(vec![status(500), status(200)]);
    assert_eq!(s.executor.run(&elsewhere, send).await.expect_err("the '*' profile covers them").attempts, 1);
}
