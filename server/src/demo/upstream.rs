//! A mock marketplace API: per-account fixed windows aligned to the Unix
//! epoch, 429 with a problem+json body and no `Retry-After` when a window is
//! spent, `X-RateLimit-Remaining` / `X-RateLimit-Reset` on success; and, if
//! configured, an outage now and then for some accounts (503, then slow
//! answers while it warms up), so the upstream breaker has something to do.
//!
//! Time comes from a [`Clock`]: the demo runs on the system clock, tests on
//! a manual one (windows, outages and the warm-up's slow answers included).
//!
//! Routes: `GET|POST /api/{account}/{*rest}`. The account is part of the
//! path because that is how the mock tells callers apart; real marketplaces
//! use the caller's token.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use axum::Router;
use sluice_engine::clock::{SharedClock, SystemClock, Timestamp};
use tokio::sync::oneshot;

#[derive(Default)]
struct Counters {
    /// account → (window index, requests in it)
    windows: HashMap<String, (i64, u32)>,
}

/// Another client on the same accounts, outside Sluice (a second
/// integration of the seller, a colleague's script): in every `every`-th
/// window it has already used `requests` of each account's allowance.
#[derive(Clone, Copy, Debug)]
pub struct ForeignUse {
    pub every: u64,
    pub requests: u32,
}

/// The upstream is down for `accounts` now and then: from `first_after` the
/// start, and every `every` after that, for `lasts` it answers 503; for
/// `warm_up` after that it answers normally but `slow` late (a service
/// coming back), so the breaker's probes are visible in the demo.
#[derive(Clone, Debug)]
pub struct Outage {
    pub accounts: Vec<String>,
    pub first_after: Duration,
    pub every: Duration,
    pub lasts: Duration,
    pub warm_up: Duration,
    pub slow: Duration,
}

/// What the upstream is doing for an account at a moment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Health {
    Up,
    Down,
    WarmingUp,
}

impl Outage {
    fn health(&self, account: &str, since_start: Duration) -> Health {
        if !self.accounts.iter().any(|a| a == account) || since_start < self.first_after {
            return Health::Up;
        }
        let every = self.every.max(Duration::from_millis(1));
        let into = Duration::from_nanos(((since_start - self.first_after).as_nanos() % every.as_nanos()) as u64);
        if into < self.lasts {
            Health::Down
        } else if into < self.lasts + self.warm_up {
            Health::WarmingUp
        } else {
            Health::Up
        }
    }
}

/// How a mock upstream behaves.
#[derive(Clone)]
pub struct UpstreamConfig {
    limit: u32,
    window: Duration,
    foreign: Option<ForeignUse>,
    outage: Option<Outage>,
    clock: SharedClock,
}

impl UpstreamConfig {
    /// `limit` requests per account per `window`, on the system clock.
    pub fn new(limit: u32, window: Duration) -> UpstreamConfig {
        UpstreamConfig { limit, window, foreign: None, outage: None, clock: Arc::new(SystemClock) }
    }

    /// Part of some windows is used by a client Sluice does not see: the
    /// demo's "429 now and then".
    pub fn foreign(mut self, foreign: ForeignUse) -> Self {
        self.foreign = Some(ForeignUse { every: foreign.every.max(1), ..foreign });
        self
    }

    pub fn outage(mut self, outage: Outage) -> Self {
        self.outage = Some(outage);
        self
    }

    pub fn clock(mut self, clock: SharedClock) -> Self {
        self.clock = clock;
        self
    }
}

#[derive(Clone)]
struct Upstream {
    limit: u32,
    window_ms: i64,
    foreign: Option<ForeignUse>,
    outage: Option<Outage>,
    clock: SharedClock,
    started: Timestamp,
    counters: Arc<Mutex<Counters>>,
    served: Arc<AtomicU64>,
    rejected: Arc<AtomicU64>,
    failed: Arc<AtomicU64>,
}

/// A running mock upstream.
pub struct MockUpstream {
    address: SocketAddr,
    served: Arc<AtomicU64>,
    rejected: Arc<AtomicU64>,
    failed: Arc<AtomicU64>,
    stop: Option<oneshot::Sender<()>>,
}

impl MockUpstream {
    /// Serve on a free loopback port: `limit` requests per account per `window`.
    pub async fn start(limit: u32, window: Duration) -> std::io::Result<MockUpstream> {
        Self::start_with(UpstreamConfig::new(limit, window)).await
    }

    pub async fn start_with(config: UpstreamConfig) -> std::io::Result<MockUpstream> {
        let state = Upstream {
            limit: config.limit,
            window_ms: i64::try_from(config.window.as_millis()).unwrap_or(i64::MAX).max(1),
            foreign: config.foreign,
            outage: config.outage,
            started: config.clock.now(),
            clock: config.clock,
            counters: Arc::default(),
            served: Arc::default(),
            rejected: Arc::default(),
            failed: Arc::default(),
        };
        let (served, rejected, failed) = (state.served.clone(), state.rejected.clone(), state.failed.clone());
        let router = Router::new().route("/api/{account}/{*rest}", any(handle)).with_state(state);
        let (address, stop) = super::serve_on_loopback(router).await?;
        Ok(MockUpstream { address, served, rejected, failed, stop: Some(stop) })
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

    /// Requests answered 503 (outages) so far.
    pub fn failed(&self) -> u64 {
        self.failed.load(Ordering::Relaxed)
    }

    pub fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

fn problem(status: StatusCode, title: &str, detail: String) -> Response {
    let body = serde_json::json!({
        "type": format!("https://example.invalid/problems/{}", title.to_lowercase().replace(' ', "-")),
        "title": title,
        "status": status.as_u16(),
        "detail": detail,
    });
    let mut headers = HeaderMap::new();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/problem+json"));
    (status, headers, body.to_string()).into_response()
}

async fn handle(State(up): State<Upstream>, Path((account, rest)): Path<(String, String)>) -> Response {
    let now = up.clock.now();
    let health = up.outage.as_ref().map_or(Health::Up, |o| o.health(&account, now.saturating_duration_since(up.started)));
    match (health, &up.outage) {
        (Health::Down, _) => {
            up.failed.fetch_add(1, Ordering::Relaxed);
            return problem(StatusCode::SERVICE_UNAVAILABLE, "Service Unavailable", format!("the shard of account {account} is down"));
        }
        (Health::WarmingUp, Some(outage)) => up.clock.sleep(outage.slow).await,
        _ => {}
    }
    let now_ms = up.clock.now().as_millis();
    let window = now_ms.div_euclid(up.window_ms);
    let reset_secs = ((window + 1) * up.window_ms + 999).div_euclid(1000);
    let used = {
        let mut counters = up.counters.lock().unwrap_or_else(|p| p.into_inner());
        let foreign = up.foreign.filter(|f| window.rem_euclid(f.every as i64) == 0).map_or(0, |f| f.requests);
        let entry = counters.windows.entry(account.clone()).or_insert((window, foreign));
        if entry.0 != window {
            *entry = (window, foreign);
        }
        entry.1 += 1;
        entry.1
    };
    if used > up.limit {
        up.rejected.fetch_add(1, Ordering::Relaxed);
        return problem(
            StatusCode::TOO_MANY_REQUESTS,
            "Too Many Requests",
            format!("account {account} exceeded {} requests per window", up.limit),
        );
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
        let config = UpstreamConfig::new(4, Duration::from_secs(3600)).foreign(ForeignUse { every: 1, requests: 3 });
        let up = MockUpstream::start_with(config).await.expect("start");
        let client = reqwest::Client::new();
        let url = format!("{}/api/a/orders", up.base_url());
        let first = client.get(&url).send().await.expect("send");
        assert_eq!((first.status().as_u16(), &first.headers()["x-ratelimit-remaining"]), (200, &HeaderValue::from(0)));
        assert_eq!(client.get(&url).send().await.expect("send").status(), 429);
        assert_eq!((up.served(), up.rejected()), (1, 1));
        up.stop();
    }

    #[tokio::test]
    async fn an_outage_answers_503_for_its_accounts_then_warms_up_slowly_then_recovers() {
        use sluice_engine::clock::Clock;
        let clock = Arc::new(sluice_engine::clock::ManualClock::at_test_epoch());
        let outage = Outage {
            accounts: vec!["down".into()],
            first_after: Duration::from_secs(10),
            every: Duration::from_secs(120),
            lasts: Duration::from_secs(10),
            warm_up: Duration::from_secs(20),
            slow: Duration::from_secs(2),
        };
        let config = UpstreamConfig::new(1000, Duration::from_secs(1)).outage(outage).clock(clock.clone());
        let up = MockUpstream::start_with(config).await.expect("start");
        let client = reqwest::Client::new();
        let status = |acct: &'static str| {
            let (client, url) = (client.clone(), format!("{}/api/{acct}/orders", up.base_url()));
            async move { client.get(url).send().await.expect("send").status().as_u16() }
        };
        assert_eq!(status("down").await, 200, "before the first outage");
        clock.advance(Duration::from_secs(10));
        assert_eq!((status("down").await, status("other").await), (503, 200));
        clock.advance(Duration::from_secs(10));
        let before = clock.now();
        assert_eq!(status("down").await, 200, "warming up");
        assert_eq!(clock.now().saturating_duration_since(before), Duration::from_secs(2), "answered slowly (on the clock)");
        clock.set(before + Duration::from_secs(20));
        let before = clock.now();
        assert_eq!(status("down").await, 200);
        assert_eq!(clock.now(), before, "warmed up");
        clock.set(before + Duration::from_secs(90));
        assert_eq!(status("down").await, 503, "the next outage, 120 s after the first");
        assert_eq!(up.failed(), 2);
        up.stop();
    }
}
