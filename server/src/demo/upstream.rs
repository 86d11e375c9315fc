//! A mock marketplace API: per-account fixed windows aligned to the Unix
//! epoch, 429 with a problem+json body and no `Retry-After` when a window is
//! spent, `X-RateLimit-Remaining` / `X-RateLimit-Reset` on success.
//!
//! Routes: `GET|POST /api/{account}/{*rest}`. The account is part of the
//! path because that is how the mock tells callers apart; real marketplaces
//! use the caller's token.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use axum::Router;
use tokio::sync::oneshot;

#[derive(Default)]
struct Counters {
    /// account → (window index, requests in it)
    windows: HashMap<String, (u64, u32)>,
}

/// Another client on the same accounts, outside Sluice (a second
/// integration of the seller, a colleague's script): in every `every`-th
/// window it has already used `requests` of each account's allowance.
#[derive(Clone, Copy, Debug)]
pub struct ForeignUse {
    pub every: u64,
    pub requests: u32,
}

#[derive(Clone)]
struct Upstream {
    limit: u32,
    window_ms: u64,
    foreign: Option<ForeignUse>,
    counters: Arc<Mutex<Counters>>,
    served: Arc<AtomicU64>,
    rejected: Arc<AtomicU64>,
}

/// A running mock upstream.
pub struct MockUpstream {
    address: SocketAddr,
    served: Arc<AtomicU64>,
    rejected: Arc<AtomicU64>,
    stop: Option<oneshot::Sender<()>>,
}

impl MockUpstream {
    /// Serve on a free loopback port: `limit` requests per account per `window`.
    pub async fn start(limit: u32, window: Duration) -> std::io::Result<MockUpstream> {
        Self::start_with(limit, window, None).await
    }

    /// As [`MockUpstream::start`], with part of some windows used by a
    /// client Sluice does not see: the demo's "429 now and then".
    pub async fn start_with(limit: u32, window: Duration, foreign: Option<ForeignUse>) -> std::io::Result<MockUpstream> {
        let state = Upstream {
            limit,
            window_ms: u64::try_from(window.as_millis()).unwrap_or(u64::MAX).max(1),
            foreign: foreign.map(|f| ForeignUse { every: f.every.max(1), ..f }),
            counters: Arc::default(),
            served: Arc::default(),
            rejected: Arc::default(),
        };
        let (served, rejected) = (state.served.clone(), state.rejected.clone());
        let router = Router::new().route("/api/{account}/{*rest}", any(handle)).with_state(state);
        let (address, stop) = super::serve_on_loopback(router).await?;
        Ok(MockUpstream { address, served, rejected, stop: Some(stop) })
    }

    pub fn base_url(&self) -> String {
        format!("http://{}", self.address)
    }

    /// Requests answered 2xx so far.
    pub fn served(&self) -> u64 {
        self.served.load(Ordering::Relaxed)
    }

    /// Requests answered 429 so far.
    pub fn rejected(&self) -> u64 {
        self.rejected.load(Ordering::Relaxed)
    }

    pub fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

async fn handle(State(up): State<Upstream>, Path((account, rest)): Path<(String, String)>) -> Response {
    let now_ms = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0);
    let window = now_ms / up.window_ms;
    let reset_secs = ((window + 1) * up.window_ms).div_ceil(1000);
    let used = {
        let mut counters = up.counters.lock().unwrap_or_else(|p| p.into_inner());
        let foreign = up.foreign.filter(|f| window % f.every == 0).map_or(0, |f| f.requests);
        let entry = counters.windows.entry(account.clone()).or_insert((window, foreign));
        if entry.0 != window {
            *entry = (window, foreign);
        }
        entry.1 += 1;
        entry.1
    };
    if used > up.limit {
        up.rejected.fetch_add(1, Ordering::Relaxed);
        let body = serde_json::json!({
            "type": "https://example.invalid/problems/too-many-requests",
            "title": "Too Many Requests",
            "status": 429,
            "detail": format!("account {account} exceeded {} requests per window", up.limit),
        });
        let mut headers = HeaderMap::new();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/problem+json"));
        return (StatusCode::TOO_MANY_REQUESTS, headers, body.to_string()).into_response();
    }
    up.served.fetch_add(1, Ordering::Relaxed);
    let mut headers = HeaderMap::new();
    headers.insert("x-ratelimit-remaining", HeaderValue::from(up.limit.saturating_sub(used)));
    headers.insert("x-ratelimit-reset", HeaderValue::from(reset_secs));
    let body = serde_json::json!({ "account": account, "resource": rest, "items": [] });
    (StatusCode::OK, headers, axum::Json(body)).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_mock_upstream_enforces_its_per_account_window_with_problem_json() {
        // A window of an hour: the test cannot straddle a boundary by accident.
        let up = MockUpstream::start(2, Duration::from_secs(3600)).await.expect("start");
        let client = reqwest::Client::new();
        let url = |acct: &str| format!("{}/api/{acct}/orders", up.base_url());
        for expected in ["1", "0"] {
            let resp = client.get(url("a")).send().await.expect("send");
            assert_eq!(resp.status(), 200);
            assert_eq!(resp.headers()["x-ratelimit-remaining"], expected);
        }
        let resp = client.get(url("a")).send().await.expect("send");
        assert_eq!(resp.status(), 429);
        assert!(resp.headers().get("retry-after").is_none());
        assert_eq!(resp.headers()["content-type"], "application/problem+json");
        // Another account has its own window.
        assert_eq!(client.get(url("b")).send().await.expect("send").status(), 200);
        assert_eq!((up.served(), up.rejected()), (3, 1));
        up.stop();
    }

    #[tokio::test]
    async fn a_foreign_client_uses_part_of_the_window_before_sluice_sees_it() {
        // Every window (every = 1): 3 of the 4 requests are already used.
        let up = MockUpstream::start_with(4, Duration::from_secs(3600), Some(ForeignUse { every: 1, requests: 3 }))
            .await
            .expect("start");
        let client = reqwest::Client::new();
        let url = format!("{}/api/a/orders", up.base_url());
        let first = client.get(&url).send().await.expect("send");
        assert_eq!((first.status().as_u16(), &first.headers()["x-ratelimit-remaining"]), (200, &HeaderValue::from(0)));
        assert_eq!(client.get(&url).send().await.expect("send").status(), 429);
        assert_eq!((up.served(), up.rejected()), (1, 1));
        up.stop();
    }
}
