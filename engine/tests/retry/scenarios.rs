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
use sluice_engine::retry::policy::draw_jitter;
use sluice_engine::retry::{
    Call, CallTarget, GateRefusal, GiveUpReason, LastAttempt, NetworkFailure, RetryExecutor, RetryPolicy,
    TransportError, UpstreamResponse,
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
