//! The middleware against a real local HTTP server (axum on 127.0.0.1:0) and
//! a raw TCP listener that resets connections. Pauses run on a manual clock;
//! only the client's own timeout (100 ms) runs on real time.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap as AxumHeaders, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use rand::rngs::StdRng;
use rand::SeedableRng;
use reqwest_middleware::{ClientBuilder, ClientWithMiddleware};
use sluice_engine::clock::{ManualClock, SharedClock};
use sluice_engine::retry::middleware::{Account, MiddlewareRetryError, RetryMiddleware, SafeToRepeat, ACCOUNT_HEADER};
use sluice_engine::retry::policy::draw_jitter;
use sluice_engine::retry::{GiveUpReason, LastAttempt, NetworkFailure, QuotaGate, RetryExecutor, RetryPolicy, TransportError};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use super::fake_gate::FakeGate;

#[derive(Clone, Default)]
pub(super) struct Hits(Arc<AtomicU32>);

impl Hits {
    fn next(&self) -> u32 {
        self.0.fetch_add(1, Ordering::SeqCst) + 1
    }
    pub(super) fn get(&self) -> u32 {
        self.0.load(Ordering::SeqCst)
    }
}

const PROBLEM: &str = r#"{"type":"about:blank","title":"Too Many Requests","status":429,"detail":"Limited by global limiter"}"#;

fn problem_429(retry_after: Option<&'static str>) -> Response {
    let mut headers = AxumHeaders::new();
    headers.insert("content-type", "application/problem+json".parse().expect("header"));
    if let Some(v) = retry_after {
        headers.insert("retry-after", v.parse().expect("header"));
    }
    (StatusCode::TOO_MANY_REQUESTS, headers, PROBLEM).into_response()
}

/// A marketplace that misbehaves in one way per route. Returns its base URL
/// and the hit counter.
pub(super) async fn spawn_marketplace() -> (String, Hits) {
    let hits = Hits::default();
    let app = Router::new()
        .route(
            "/rl/retry-after",
            get(|State(h): State<Hits>| async move {
                if h.next() == 1 { problem_429(Some("1")) } else { "ok".into_response() }
            }),
        )
        .route(
            "/rl/plain",
            get(|State(h): State<Hits>| async move {
                if h.next() == 1 { problem_429(None) } else { "ok".into_response() }
            }),
        )
        .route(
            "/5xx",
            get(|State(h): State<Hits>| async move {
                if h.next() <= 2 {
                    StatusCode::SERVICE_UNAVAILABLE.into_response()
                } else {
                    ([("x-ratelimit-remaining", "7")], "ok").into_response()
                }
            }),
        )
        .route(
            "/slow",
            get(|State(h): State<Hits>| async move {
                h.next();
                std::future::pending::<()>().await;
            })
            .post(|State(h): State<Hits>| async move {
                h.next();
                std::future::pending::<()>().await;
            }),
        )
        .route(
            "/rl/an-hour",
            get(|State(h): State<Hits>| async move {
                h.next();
                problem_429(Some("3600"))
            }),
        )
        .route("/always-503", get(|State(h): State<Hits>| async move {
            h.next();
            StatusCode::SERVICE_UNAVAILABLE
        }))
        .route(
            "/remaining-zero",
            get(|| async { ([("x-ratelimit-remaining", "0"), ("x-ratelimit-reset", "30")], "ok") }),
        )
        .route("/missing", get(|State(h): State<Hits>| async move {
            h.next();
            StatusCode::NOT_FOUND
        }))
        .route(
            "/echo-account",
            get(|headers: AxumHeaders| async move {
                if headers.contains_key(ACCOUNT_HEADER) { "leaked" } else { "clean" }
            }),
        )
        .with_state(hits.clone());
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, app).await.expect("serve") });
    (format!("http://{addr}"), hits)
}

/// A listener that resets the first `resets` connections, then answers 200.
async fn spawn_resetting(resets: u32) -> (String, Hits) {
    let hits = Hits::default();
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let counter = hits.clone();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let n = counter.next();
            let mut buf = [0u8; 4096];
            let _ = socket.read(&mut buf).await;
            if n <= resets {
                let _ = socket.set_zero_linger();
                drop(socket);
            } else {
                let _ = socket.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok").await;
            }
        }
    });
    (format!("http://{addr}"), hits)
}

struct Worker {
    client: ClientWithMiddleware,
    clock: Arc<ManualClock>,
    gate: Arc<FakeGate>,
}

fn worker() -> Worker {
    let clock = Arc::new(ManualClock::at_test_epoch());
    let gate = Arc::new(FakeGate::new(Duration::from_millis(25), Duration::from_secs(30)));
    let executor = RetryExecutor::new(gate.clone() as Arc<dyn QuotaGate>, clock.clone() as SharedClock)
        .with_policy(RetryPolicy::default())
        .with_rng(StdRng::seed_from_u64(7));
    Worker { client: client_with(executor), clock, gate }
}

/// A worker's client: requests to 127.0.0.1 are in scope `marketplace`.
pub(super) fn client_with(executor: RetryExecutor) -> ClientWithMiddleware {
    let http = reqwest::Client::builder().timeout(Duration::from_millis(100)).build().expect("client");
    ClientBuilder::new(http)
        .with(RetryMiddleware::new(Arc::new(executor)).scope_for_host("127.0.0.1", "marketplace"))
        .build()
}

pub(super) fn retry_error(err: &reqwest_middleware::Error) -> &MiddlewareRetryError {
    match err {
        reqwest_middleware::Error::Middleware(e) => e.downcast_ref::<MiddlewareRetryError>().expect("a RetryError"),
        other => panic!("expected a middleware error, got {other:?}"),
    }
}

#[tokio::test]
async fn a_429_with_retry_after_and_a_problem_body_is_retried_after_the_header() {
    let (base, hits) = spawn_marketplace().await;
    let w = worker();
    let resp = w.client.get(format!("{base}/rl/retry-after")).with_extension(Account::new("seller-1")).send().await;
    assert_eq!(resp.expect("retried").status(), 200);
    assert_eq!(hits.get(), 2);
    assert_eq!(w.gate.penalties(), vec![Some(Duration::from_secs(1))]);
    assert_eq!(w.clock.sleeps(), vec![Duration::from_secs(1)]);
}

#[tokio::test]
async fn a_429_without_retry_after_waits_the_policy_delay() {
    let (base, hits) = spawn_marketplace().await;
    let w = worker();
    let resp = w.client.get(format!("{base}/rl/plain")).send().await.expect("retried");
    assert_eq!((resp.status().as_u16(), hits.get()), (200, 2));
    assert_eq!(w.gate.penalties(), vec![None]);
    let jitter = draw_jitter(&mut StdRng::seed_from_u64(7), Duration::from_millis(500));
    assert_eq!(w.clock.sleeps(), vec![Duration::from_millis(500) + jitter]);
}

#[tokio::test]
async fn server_errors_are_retried_and_the_successes_headers_observed() {
    let (base, hits) = spawn_marketplace().await;
    let w = worker();
    let resp = w.client.get(format!("{base}/5xx")).send().await.expect("retried");
    assert_eq!((resp.status().as_u16(), hits.get()), (200, 3));
    assert_eq!(w.gate.count("acquire"), 3);
    let observed = w.gate.observed.lock().expect("lock").clone();
    assert_eq!(observed.len(), 1);
    assert_eq!(observed[0].get("x-ratelimit-remaining").map(|v| v.as_bytes()), Some(&b"7"[..]));
}

#[tokio::test]
async fn a_slow_get_times_out_and_is_retried_until_attempts_run_out() {
    let (base, hits) = spawn_marketplace().await;
    let w = worker();
    let err = w.client.get(format!("{base}/slow")).send().await.expect_err("times out");
    let err = retry_error(&err);
    assert!(matches!(err.reason, GiveUpReason::AttemptsExhausted), "{err:?}");
    assert!(matches!(&err.last, Some(LastAttempt::Transport(e)) if e.failure() == NetworkFailure::Timeout));
    assert_eq!((err.attempts, hits.get()), (3, 3));
}

#[tokio::test]
async fn a_slow_post_is_not_retried_unless_marked_safe() {
    let (base, hits) = spawn_marketplace().await;
    let w = worker();
    let err = w.client.post(format!("{base}/slow")).send().await.expect_err("times out");
    assert!(matches!(retry_error(&err).reason, GiveUpReason::UnsafeToRepeat));
    assert_eq!(hits.get(), 1);
    let err = w.client.post(format!("{base}/slow")).with_extension(SafeToRepeat).send().await.expect_err("times out");
    assert!(matches!(retry_error(&err).reason, GiveUpReason::AttemptsExhausted));
    assert_eq!(hits.get(), 4);
}

#[tokio::test]
async fn connection_resets_are_retried_for_a_get() {
    let (base, hits) = spawn_resetting(2).await;
    let w = worker();
    let resp = w.client.get(format!("{base}/orders")).send().await.expect("third connection answers");
    assert_eq!((resp.status().as_u16(), hits.get()), (200, 3));
    assert_eq!(w.clock.sleeps().len(), 2);
}

#[tokio::test]
async fn a_404_comes_back_as_the_upstreams_answer_after_one_attempt() {
    let (base, hits) = spawn_marketplace().await;
    let w = worker();
    let resp = w.client.get(format!("{base}/missing")).send().await.expect("a response");
    assert_eq!((resp.status().as_u16(), hits.get()), (404, 1));
    assert!(w.clock.sleeps().is_empty());
}

#[tokio::test]
async fn the_account_header_is_used_and_not_sent_upstream() {
    let (base, _) = spawn_marketplace().await;
    let w = worker();
    let resp = w.client.get(format!("{base}/echo-account")).header(ACCOUNT_HEADER, "seller-9").send().await;
    assert_eq!(resp.expect("ok").text().await.expect("body"), "clean");
}

#[tokio::test]
async fn a_request_to_an_unmapped_host_is_refused_with_a_clear_error() {
    let w = worker();
    let err = w.client.get("http://localhost:9/x").send().await.expect_err("no scope");
    assert!(err.to_string().contains("no scope for host \"localhost\""), "{err}");
    assert_eq!(w.gate.count("acquire"), 0);
}
