//! `spawn_app()`: a real `Application` per test, on a free port, with its
//! own database (SQLite file or a fresh PostgreSQL database) and, when asked,
//! Redis under a key prefix of its own.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use sluice::config::Settings;
use sluice::startup::Application;
use sluice_engine::clock::{Clock, SharedClock, SystemClock};
use sluice_engine::db::testing::TestDb;
pub use sluice_engine::users::{self, Role};
use tokio::sync::oneshot;

pub const TEST_REDIS_URL_DEFAULT: &str = "redis://127.0.0.1:6379";

pub fn test_redis_url() -> String {
    std::env::var("SLUICE_TEST_REDIS_URL").unwrap_or_else(|_| TEST_REDIS_URL_DEFAULT.to_owned())
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// SQLite and in-process stores.
    Embedded,
    /// PostgreSQL and Redis.
    Distributed,
}

pub struct TestApp {
    pub address: SocketAddr,
    pub client: reqwest::Client,
    /// The test's own database; held so it lives as long as the app.
    #[allow(dead_code)]
    pub db: TestDb,
    stop: Option<oneshot::Sender<()>>,
}

impl Drop for TestApp {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

impl TestApp {
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.address, path)
    }

    pub async fn get(&self, path: &str) -> reqwest::Response {
        self.client.get(self.url(path)).send().await.expect("request failed")
    }

    /// A client signed in as a new user with `role` (cookies kept; redirects
    /// not followed; `Origin` set like a browser on our own pages).
    pub async fn signed_in(&self, role: Role) -> reqwest::Client {
        let username = format!("{}-{}", role.as_str(), ulid::Ulid::new().to_string().to_lowercase());
        let password = "a test password";
        users::create_user(&self.db.db(), &username, password, role, SystemClock.now()).await.expect("create user");
        self.signed_in_as(&username, password).await
    }

    /// A client signed in as an existing user (cookies kept; redirects not
    /// followed; `Origin` set like a browser on our own pages).
    pub async fn signed_in_as(&self, username: &str, password: &str) -> reqwest::Client {
        let mut headers = reqwest::header::HeaderMap::new();
        headers.insert(reqwest::header::ORIGIN, self.url("").parse().expect("origin header"));
        let client = reqwest::Client::builder()
            .cookie_store(true)
            .default_headers(headers)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .expect("client");
        let resp = client
            .post(self.url("/ui/login"))
            .form(&[("username", username), ("password", password)])
            .send()
            .await
            .expect("login request");
        assert!(resp.status().is_success() || resp.status().is_redirection(), "login failed: {}", resp.status());
        client
    }

    /// GET `path` as a freshly signed-in user with `role`.
    pub async fn get_as(&self, role: Role, path: &str) -> reqwest::Response {
        self.signed_in(role).await.get(self.url(path)).send().await.expect("request failed")
    }

    /// POST a server function (form-encoded arguments) with `client`.
    pub async fn call(&self, client: &reqwest::Client, endpoint: &str, form: &[(&str, &str)]) -> reqwest::Response {
        client.post(self.url(endpoint)).form(form).send().await.expect("server function request")
    }
}

/// Page HTML without the markers Leptos puts between text nodes (`<!>` and
/// `<!--…-->` comments), so a test can look for what a reader sees:
/// `class="current">6 h</a>` rather than `class="current">6 h<!></a>`.
pub fn without_markers(html: &str) -> String {
    let mut text = String::with_capacity(html.len());
    let mut rest = html;
    while let Some(i) = rest.find("<!") {
        text.push_str(&rest[..i]);
        rest = &rest[i..];
        let end = if rest.starts_with("<!--") { rest.find("-->").map(|j| j + 3) } else { rest.find('>').map(|j| j + 1) };
        match end {
            // A doctype is markup a reader needs; keep it.
            Some(j) if !rest[..j].to_ascii_lowercase().starts_with("<!doctype") => rest = &rest[j..],
            Some(j) => {
                text.push_str(&rest[..j]);
                rest = &rest[j..];
            }
            None => break,
        }
    }
    text.push_str(rest);
    text
}

pub fn site_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/site")
}

pub async fn spawn_app(mode: Mode) -> TestApp {
    spawn_app_with(mode, &[]).await
}

/// Spawn with extra environment-style settings (e.g. `("REDIS_URL", …)`).
pub async fn spawn_app_with(mode: Mode, extra: &[(&str, &str)]) -> TestApp {
    spawn_app_with_clock(mode, extra, Arc::new(SystemClock)).await
}

/// [`spawn_app_with`] on the given clock (a `ManualClock` to fix "now").
pub async fn spawn_app_with_clock(mode: Mode, extra: &[(&str, &str)], clock: SharedClock) -> TestApp {
    let db = match mode {
        Mode::Embedded => TestDb::sqlite().await,
        Mode::Distributed => TestDb::postgres().await,
    };
    // One prefix per test, not per process: tests in this binary run in parallel
    // and must not share Redis buckets.
    let prefix = format!("t:{}", ulid::Ulid::new());
    let mut env: Vec<(String, String)> = vec![
        ("SLUICE_LISTEN".into(), "127.0.0.1:0".into()),
        ("DATABASE_URL".into(), db.url.clone()),
        ("SLUICE_SITE_ROOT".into(), site_root().display().to_string()),
        ("SLUICE_REDIS_PREFIX".into(), prefix),
        // Tests run many apps at once on two cores: a Redis call may queue far
        // longer than the production default allows without Redis being down.
        ("SLUICE_REDIS_TIMEOUT_MS".into(), "5000".into()),
        // The tests' receivers listen on loopback without TLS; the tests of
        // the https requirement turn it back on.
        ("SLUICE_DELIVERY_REQUIRE_HTTPS".into(), "false".into()),
    ];
    if mode == Mode::Distributed {
        env.push(("REDIS_URL".into(), test_redis_url()));
    }
    env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    // Settings by the names operators use in the environment (`SLUICE_LISTEN`,
    // `DATABASE_URL`), given to this instance alone: tests run many at once.
    let overrides = env.into_iter().map(|(k, v)| (k.strip_prefix("SLUICE_").unwrap_or(&k).to_ascii_lowercase(), v));
    let settings = Settings::load_with(None, overrides).expect("test settings are valid");
    let app = Application::build_with_clock(settings, clock).await.expect("application builds");
    let address = app.address();
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(app.run_until_stopped(async move {
        let _ = stopped.await;
    }));
    let client = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().expect("client");
    TestApp { address, client, db, stop: Some(stop) }
}

/// A loopback port with nothing listening on it.
pub fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("addr").port()
}

/// The value of the first sample of metric `name` in Prometheus text whose
/// labels include every one of `labels` (`kind="allocated"`; none: any).
pub fn sample(text: &str, name: &str, labels: &[&str]) -> Option<f64> {
    text.lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
        .find(|l| labels.iter().all(|lab| l.contains(lab)))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}
