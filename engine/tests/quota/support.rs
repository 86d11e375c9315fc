//! Test support: limiters over each backend, and redis-server processes of
//! our own (for outage and Cluster tests; the shared Redis on 6379 is never
//! stopped).

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice_engine::clock::{ManualClock, SharedClock, Timestamp};
use sluice_engine::quota::{
    Limiter, LimiterConfig, MemoryStore, QuotaStore, RedisSettings, RedisStore, Rule, RuleRegistry,
};

pub fn test_redis_url() -> String {
    std::env::var("SLUICE_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned())
}

pub fn unique_prefix() -> String {
    format!("t:{}", ulid::Ulid::new().to_string().to_lowercase())
}

/// Which store a contract case runs against.
#[derive(Clone, Debug)]
pub enum Backend {
    Memory,
    Redis { urls: Vec<String>, cluster: bool },
}

impl Backend {
    pub fn redis() -> Backend {
        Backend::Redis { urls: vec![test_redis_url()], cluster: false }
    }
}

/// A limiter under test, and what the test needs to reason about its time.
pub struct Harness {
    pub limiter: Limiter,
    /// The limiter's clock: `acquire` sleeps on it (instantly) for every backend.
    pub clock: Arc<ManualClock>,
    redis: Option<redis::Client>,
    /// How far a booked wait may drift from the expected one: zero for the
    /// memory store (manual clock), the real time a test takes for Redis
    /// (its clock is `TIME`; tests use long intervals so this stays small).
    pub tolerance: Duration,
}

impl Harness {
    pub async fn new(backend: &Backend, rules: Vec<Rule>, config: LimiterConfig) -> Harness {
        let clock = Arc::new(ManualClock::at_test_epoch());
        let shared: SharedClock = clock.clone();
        let (store, redis, tolerance): (Arc<dyn QuotaStore>, _, _) = match backend {
            Backend::Memory => (Arc::new(MemoryStore::new(shared.clone())), None, Duration::ZERO),
            Backend::Redis { urls, cluster } => {
                let settings = RedisSettings {
                    urls: urls.clone(),
                    cluster: *cluster,
                    prefix: unique_prefix(),
                    timeout: Duration::from_secs(2),
                };
                let store = RedisStore::connect(&settings).await.expect("connect to test Redis");
                let client = redis::Client::open(urls[0].as_str()).expect("redis url");
                (Arc::new(store), Some(client), Duration::from_secs(2))
            }
        };
        let limiter = Limiter::new(store, RuleRegistry::new(rules), shared, config);
        Harness { limiter, clock, redis, tolerance }
    }

    /// The store's notion of now: the manual clock, or Redis `TIME`.
    pub async fn store_now(&self) -> Timestamp {
        match &self.redis {
            None => sluice_engine::clock::Clock::now(&*self.clock),
            Some(client) => {
                let mut c = client.get_multiplexed_async_connection().await.expect("redis connection");
                let (s, us): (i64, i64) = redis::cmd("TIME").query_async(&mut c).await.expect("TIME");
                Timestamp::from_micros(s * 1_000_000 + us)
            }
        }
    }
}

/// `actual` is within `tol` below `expected` (real time only ever shortens a
/// booked wait) and never above it.
#[track_caller]
pub fn assert_wait(actual: Duration, expected: Duration, tol: Duration) {
    assert!(
        actual <= expected && actual + tol >= expected,
        "booked wait {actual:?}, expected {expected:?} (tolerance {tol:?})"
    );
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("free port")
}

/// A redis-server of our own on a spare loopback port, killed on drop.
pub struct OwnRedis {
    pub port: u16,
    child: Option<Child>,
    dir: tempfile::TempDir,
    extra: Vec<String>,
}

impl OwnRedis {
    pub fn start(extra: &[&str]) -> OwnRedis {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut r =
            OwnRedis { port: free_port(), child: None, dir, extra: extra.iter().map(|s| s.to_string()).collect() };
        r.restart();
        r
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Start (again) on the same port.
    pub fn restart(&mut self) {
        self.stop();
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(self.dir.path())
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn redis-server");
        self.child = Some(child);
        wait_for_ping(self.port, self.dir.path());
    }

    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for OwnRedis {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Poll (with a deadline) until a spawned redis-server answers PING.
pub fn wait_for_ping(port: u16, _dir: &Path) {
    let deadline = Instant::now() + Duration::from_secs(10);
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}")).expect("url");
    loop {
        if let Ok(mut c) = client.get_connection_with_timeout(Duration::from_millis(200)) {
            if redis::cmd("PING").query::<String>(&mut c).is_ok() {
                return;
            }
        }
        assert!(Instant::now() < deadline, "redis-server on port {port} did not come up");
        std::thread::sleep(Duration::from_millis(20));
    }
}
