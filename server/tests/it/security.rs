//! The console's defences as a browser and a client see them: security
//! headers and caching, sessions, sign-in throttles, secrets kept out of
//! logs, audit rows and pages.

use std::sync::Arc;

use reqwest::header::HeaderMap;
use sluice_engine::audit::{self, AuditFilter};
use sluice_engine::clock::{Clock, ManualClock, SystemClock};

use crate::api::spawn_api;
use crate::helpers::{spawn_app, spawn_app_with, spawn_app_with_clock, users, Mode, Role, TestApp};

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).map(|v| v.to_str().expect("ascii header"))
}

/// The nonce a `Content-Security-Policy` allows scripts by.
fn policy_nonce(headers: &HeaderMap) -> String {
    let csp = header(headers, "content-security-policy").expect("a Content-Security-Policy");
    let start = csp.find("'nonce-").expect("a nonce in the policy") + "'nonce-".len();
    csp[start..].split('\'').next().expect("nonce").to_owned()
}

/// Every header that every answer carries, whatever it is.
fn assert_common_headers(headers: &HeaderMap, what: &str) {
    let csp = header(headers, "content-security-policy").unwrap_or_else(|| panic!("{what}: no CSP"));
    for directive in [
        "script-src 'nonce-",
        "'wasm-unsafe-eval'",
        "object-src 'none'",
        "base-uri 'none'",
        "frame-ancestors 'none'",
        "connect-src 'self'",
        "default-src 'self'",
    ] {
        assert!(csp.contains(directive), "{what}: {directive} missing from {csp}");
    }
    assert!(!csp.contains("unsafe-inline"), "{what}: {csp}");
    assert_eq!(header(headers, "x-frame-options"), Some("DENY"), "{what}");
    assert_eq!(header(headers, "x-content-type-options"), Some("nosniff"), "{what}");
    assert_eq!(header(headers, "referrer-policy"), Some("same-origin"), "{what}");
    let permissions = header(headers, "permissions-policy").unwrap_or_else(|| panic!("{what}: no Permissions-Policy"));
    assert!(permissions.contains("camera=()") && permissions.contains("geolocation=()"), "{what}: {permissions}");
}

#[tokio::test]
async fn every_answer_carries_the_security_headers_and_pages_put_the_policys_nonce_on_every_script() {
    let app = spawn_app(Mode::Embedded).await;
    let login = app.get("/login").await;
    assert_eq!(login.status(), 200);
    let headers = login.headers().clone();
    assert_common_headers(&headers, "GET /login");
    assert_eq!(header(&headers, "cache-control"), Some("no-store"));
    // Plain HTTP by default (session_secure_cookie off): no HSTS.
    assert!(header(&headers, "strict-transport-security").is_none());
    let nonce = policy_nonce(&headers);
    let html = login.text().await.expect("html");
    // Every script and the module preload carry the nonce (the policy
    // allows nothing else), and there is at least the hydration script.
    let scripts = html.matches("<script").count();
    assert!(scripts >= 1, "{html}");
    assert_eq!(html.matches(&format!("nonce=\"{nonce}\"")).count(), scripts + 1, "{html}");
    let preload = html.split("<link").find(|tag| tag.contains("modulepreload")).expect("a module preload");
    assert!(preload[..preload.find('>').expect("tag end")].contains(&format!("nonce=\"{nonce}\"")), "{html}");
    // A new nonce for every answer.
    assert_ne!(policy_nonce(app.get("/login").await.headers()), nonce);

    // A signed-in page full of data (the Breakers page, whose reset button
    // must not be framed): the same headers, never stored.
    let breakers = app.get_as(Role::Support, "/breakers").await;
    assert_eq!(breakers.status(), 200);
    assert_common_headers(breakers.headers(), "GET /breakers");
    assert_eq!(header(breakers.headers(), "cache-control"), Some("no-store"));
    let nonce = policy_nonce(breakers.headers());
    let html = breakers.text().await.expect("html");
    assert_eq!(html.matches(&format!("nonce=\"{nonce}\"")).count(), html.matches("<script").count() + 1, "{html}");

    // The redirect to the login page and the health check too.
    let redirect = app.get("/deliveries").await;
    assert_eq!(redirect.status(), 303);
    assert_common_headers(redirect.headers(), "redirect");
    assert_common_headers(app.get("/healthz").await.headers(), "GET /healthz");
}

#[tokio::test]
async fn api_answers_with_data_are_never_stored() {
    let api = spawn_api(Mode::Embedded).await;
    let resp = api.app.client.get(api.app.url("/api/v1/limits")).bearer_auth(&api.admin).send().await.expect("limits");
    assert_eq!(resp.status(), 200);
    assert_common_headers(resp.headers(), "GET /api/v1/limits");
    assert_eq!(header(resp.headers(), "cache-control"), Some("no-store"));
    // A refusal too: it names what exists.
    let resp = api.app.client.get(api.app.url("/api/v1/limits")).send().await.expect("limits");
    assert_eq!(resp.status(), 401);
    assert_eq!(header(resp.headers(), "cache-control"), Some("no-store"));
}

#[tokio::test]
async fn hsts_is_sent_only_when_users_come_over_https() {
    let app = spawn_app_with(Mode::Embedded, &[("SLUICE_SESSION_SECURE_COOKIE", "true")]).await;
    let resp = app.get("/login").await;
    assert_eq!(header(resp.headers(), "strict-transport-security"), Some("max-age=31536000"));
    assert_common_headers(resp.headers(), "GET /login over HTTPS");
}

/// One sign-in attempt as form posts arrive (no JavaScript), from `from`
/// when the app trusts loopback proxies: (status, body).
async fn attempt(app: &TestApp, username: &str, password: &str, from: Option<&str>) -> (u16, String) {
    let mut req = app.client.post(app.url("/ui/login")).form(&[("username", username), ("password", password)]);
    if let Some(ip) = from {
        req = req.header("x-forwarded-for", ip);
    }
    let resp = req.send().await.expect("login");
    (resp.status().as_u16(), resp.text().await.expect("body"))
}

const BEHIND_PROXY: [(&str, &str); 1] = [("SLUICE_TRUSTED_PROXIES", "127.0.0.0/8, ::1/128")];

/// An embedded app whose clock stands still: no token refills while a test
/// makes its attempts, however slowly they run. (No delivery worker: its
/// pauses between polls would move a manual clock.)
async fn app_at_a_fixed_time(extra: &[(&str, &str)]) -> TestApp {
    let mut settings = vec![("SLUICE_DELIVERY_WORKER", "false")];
    settings.extend_from_slice(extra);
    spawn_app_with_clock(Mode::Embedded, &settings, Arc::new(ManualClock::at_test_epoch())).await
}

#[tokio::test]
async fn sign_in_is_throttled_per_client_address_whatever_the_username_and_ipv6_by_its_64() {
    let app = app_at_a_fixed_time(&BEHIND_PROXY).await;
    users::create_user(&app.db.db(), "ana", "the right password", Role::Viewer, SystemClock.now()).await.expect("user");
    for n in 0..20 {
        let (status, _) = attempt(&app, &format!("guess{n}"), "guess guess guess", Some("203.0.113.1")).await;
        assert_eq!(status, 401, "attempt {n}");
    }
    // One password against every username is slowed down: the address is
    // over its budget, the right password included.
    assert_eq!(attempt(&app, "ana", "the right password", Some("203.0.113.1")).await.0, 429);
    assert!(attempt(&app, "ana", "the right password", Some("203.0.113.2")).await.0 < 400);

    // IPv6: one /64 is one client, however many addresses it walks through.
    for n in 0..20 {
        let from = format!("2001:db8:1:2::{:x}", n + 1);
        assert_eq!(attempt(&app, &format!("v6guess{n}"), "guess guess guess", Some(&from)).await.0, 401, "attempt {n}");
    }
    assert_eq!(attempt(&app, "ana", "the right password", Some("2001:db8:1:2:ffff::9")).await.0, 429);
    assert!(attempt(&app, "ana", "the right password", Some("2001:db8:1:3::1")).await.0 < 400);
}

#[tokio::test]
async fn x_forwarded_for_is_ignored_unless_the_peer_is_a_trusted_proxy() {
    let app = app_at_a_fixed_time(&[]).await;
    for n in 0..20 {
        let from = format!("203.0.113.{n}");
        assert_eq!(attempt(&app, &format!("guess{n}"), "guess guess guess", Some(&from)).await.0, 401, "attempt {n}");
    }
    // Every attempt came from 127.0.0.1, whatever the header claimed.
    assert_eq!(attempt(&app, "someone", "guess guess guess", Some("198.51.100.99")).await.0, 429);
}

#[tokio::test]
async fn a_throttled_answer_is_the_same_whether_the_username_exists_or_not() {
    // A fixed clock: the "try again in" seconds are the same for both.
    let app = app_at_a_fixed_time(&BEHIND_PROXY).await;
    users::create_user(&app.db.db(), "ana", "the right password", Role::Viewer, SystemClock.now()).await.expect("user");
    let mut answers = Vec::new();
    for (username, from) in [("ana", "203.0.113.1"), ("ghost", "203.0.113.2")] {
        let wrong: Vec<(u16, String)> =
            futures::future::join_all((0..5).map(|_| attempt(&app, username, "guess guess guess", Some(from)))).await;
        assert!(wrong.iter().all(|w| *w == wrong[0]), "{wrong:?}");
        assert_eq!(wrong[0].0, 401);
        answers.push((wrong[0].clone(), attempt(&app, username, "guess guess guess", Some(from)).await));
    }
    assert_eq!(answers[0], answers[1], "the answers tell an existing username from a missing one");
    assert_eq!(answers[0].1 .0, 429);
    assert!(answers[0].1 .1.contains("too many sign-in attempts"), "{}", answers[0].1 .1);
}

#[tokio::test]
async fn the_sign_in_throttle_is_shared_by_every_instance() {
    // Two instances of one deployment: one Redis prefix.
    let prefix = format!("t:{}", ulid::Ulid::new());
    let shared = [("SLUICE_REDIS_PREFIX", prefix.as_str())];
    let (a, b) = (spawn_app_with(Mode::Distributed, &shared).await, spawn_app_with(Mode::Distributed, &shared).await);
    for n in 0..5 {
        let app = if n % 2 == 0 { &a } else { &b };
        assert_eq!(attempt(app, "ana", "guess guess guess", None).await.0, 401, "attempt {n}");
    }
    assert_eq!(attempt(&b, "ana", "guess guess guess", None).await.0, 429);
    assert_eq!(attempt(&a, "ana", "guess guess guess", None).await.0, 429);
}

#[tokio::test]
async fn failed_sign_ins_are_audited_with_the_clients_address_and_never_the_password() {
    let app = spawn_app_with(Mode::Embedded, &BEHIND_PROXY).await;
    let db = app.db.db();
    users::create_user(&db, "ana", "the right password", Role::Viewer, SystemClock.now()).await.expect("user");
    assert_eq!(attempt(&app, "ana", "not-her-password", Some("198.51.100.7")).await.0, 401);
    assert_eq!(attempt(&app, "nobody", "nor-this-one", Some("2001:db8::7")).await.0, 401);
    assert!(attempt(&app, "ana", "the right password", Some("198.51.100.7")).await.0 < 400);
    let filter = AuditFilter { action: Some("login.failed".into()), ..AuditFilter::default() };
    let rows = audit::list(&db, &filter, None, 50).await.expect("audit").records;
    let mut seen: Vec<(&str, &str)> = rows.iter().map(|r| (r.actor.as_str(), r.target.as_str())).collect();
    seen.sort();
    assert_eq!(seen, [("198.51.100.7", "ana"), ("2001:db8::7", "nobody")]);
    let ana = rows.iter().find(|r| r.target == "ana").expect("ana's row");
    assert_eq!(ana.after.as_ref().expect("after")["address"], "198.51.100.7");
    let text = serde_json::to_string(&rows).expect("json");
    assert!(!text.contains("not-her-password") && !text.contains("nor-this-one"), "{text}");
}

/// Everything logged, at every level, while a [`LogCapture`] is held.
#[derive(Clone, Default)]
struct CapturedLogs(Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for CapturedLogs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("log buffer").extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for CapturedLogs {
    type Writer = CapturedLogs;
    fn make_writer(&'a self) -> CapturedLogs {
        self.clone()
    }
}

impl CapturedLogs {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().expect("log buffer")).into_owned()
    }
}

static CAPTURING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Capturing is on while this lives.
struct LogCapture(CapturedLogs);

impl Drop for LogCapture {
    fn drop(&mut self) {
        CAPTURING.store(false, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Start capturing every log line of this test binary (other tests' lines
/// too while it is on: more text to search, never less). A global
/// subscriber whose filter is asked at every event, not a thread-local one:
/// tracing caches each call site's interest when some thread first reaches
/// it, and a thread-local subscriber then misses the call sites other tests'
/// threads reached first ("signed in" went missing in a loaded run).
fn capture_logs() -> LogCapture {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::Layer;
    static LOGS: std::sync::OnceLock<CapturedLogs> = std::sync::OnceLock::new();
    let logs = LOGS
        .get_or_init(|| {
            let logs = CapturedLogs::default();
            let layer = tracing_subscriber::fmt::layer()
                .with_ansi(false)
                .with_writer(logs.clone())
                .with_filter(tracing_subscriber::filter::filter_fn(|_| CAPTURING.load(std::sync::atomic::Ordering::SeqCst)));
            tracing::subscriber::set_global_default(tracing_subscriber::registry().with(layer)).expect("the only global subscriber");
            logs
        })
        .clone();
    CAPTURING.store(true, std::sync::atomic::Ordering::SeqCst);
    LogCapture(logs)
}

/// The secret of a one-time display (`{"Ok": {"secret": …}}`).
fn shown_secret(answer: &serde_json::Value) -> String {
    answer["Ok"]["secret"].as_str().unwrap_or_else(|| panic!("a secret shown once in {answer}")).to_owned()
}

#[tokio::test]
async fn secrets_never_reach_logs_audit_rows_pages_or_api_answers_but_their_one_time_display() {
    let capture = capture_logs();
    let settings = [("SLUICE_DELIVERY_WORKER", "false"), ("SLUICE_DELIVERY_ALLOW_NETWORKS", "127.0.0.0/8")];
    let app = spawn_app_with(Mode::Embedded, &settings).await;
    let db = app.db.db();
    let mut secrets: Vec<String> = Vec::new();
    let json = |resp: reqwest::Response| async move {
        assert_eq!(resp.status(), 200, "{}", resp.url());
        resp.json::<serde_json::Value>().await.expect("json")
    };

    // An admin signs in and creates a user with a password and one with a
    // generated password, an API token, and a merchant whose secret it rotates.
    let admin_password = "boss-Secret-pw-0a1b2c3d";
    users::create_user(&db, "boss", admin_password, Role::Admin, SystemClock.now()).await.expect("admin");
    secrets.push(admin_password.into());
    let admin = app.signed_in_as("boss", admin_password).await;
    let user_password = "eve-Secret-pw-4e5f6a7b";
    secrets.push(user_password.into());
    let added = json(app.call(&admin, "/ui/users/add", &[("username", "eve"), ("role", "viewer"), ("password", user_password)]).await).await;
    assert!(added["Ok"]["secret"].is_null(), "a password the admin chose is not shown back: {added}");
    let generated = json(app.call(&admin, "/ui/users/add", &[("username", "fay"), ("role", "viewer"), ("password", "")]).await).await;
    secrets.push(shown_secret(&generated));
    let token = shown_secret(&json(app.call(&admin, "/ui/tokens/add", &[("name", "ci"), ("scope", "admin")]).await).await);
    secrets.push(token.clone());
    let merchant = [("name", "Gamma"), ("url", "http://127.0.0.1:9/hooks"), ("scheme", "standard_webhooks")];
    let created = json(app.call(&admin, "/ui/merchants/create", &merchant).await).await;
    secrets.push(shown_secret(&created));
    let id = created["Ok"]["id"].as_str().expect("merchant id").to_owned();
    secrets.push(shown_secret(&json(app.call(&admin, "/ui/merchants/rotate", &[("id", &id)]).await).await));
    // A merchant over the API: its secret is in the 201, once.
    let resp = app
        .client
        .post(app.url("/api/v1/merchants"))
        .bearer_auth(&token)
        .json(&serde_json::json!({ "name": "Delta", "url": "http://127.0.0.1:9/d", "scheme": "sluice" }))
        .send()
        .await
        .expect("create over the API");
    assert_eq!(resp.status(), 201);
    let api_created: serde_json::Value = resp.json().await.expect("json");
    secrets.push(api_created["secret"].as_str().expect("the secret, once").to_owned());

    // The new user signs in (once with a wrong password) and out.
    let wrong = "eve-Wrong-pw-9c8d7e6f";
    secrets.push(wrong.into());
    assert_eq!(attempt(&app, "eve", wrong, None).await.0, 401);
    let eve = app.signed_in_as("eve", user_password).await;
    assert!(app.call(&eve, "/ui/logout", &[]).await.status().as_u16() < 400);

    // Where the secrets must not be: every page the admin can open, the API's
    // answers, the audit log, the log. (Standard Webhooks secrets are
    // searched for without their well-known prefix.)
    let mut places: Vec<(String, String)> = Vec::new();
    for path in ["/", "/users", "/merchants", "/breakers", "/deliveries", "/audit", "/limits", "/quotas"] {
        let html = admin.get(app.url(path)).send().await.expect("page").text().await.expect("html");
        places.push((format!("page {path}"), html));
    }
    places.push(("server function users/list".into(), app.call(&admin, "/ui/users/list", &[]).await.text().await.expect("body")));
    places.push(("server function merchants/list".into(), app.call(&admin, "/ui/merchants/list", &[]).await.text().await.expect("body")));
    for path in ["/api/v1/merchants", "/api/v1/limits"] {
        let body = app.client.get(app.url(path)).bearer_auth(&token).send().await.expect("api").text().await.expect("body");
        places.push((format!("API {path}"), body));
    }
    let audit_rows = audit::list(&db, &AuditFilter::default(), None, 500).await.expect("audit").records;
    assert!(audit_rows.len() >= 7, "the journey is audited: {audit_rows:?}");
    places.push(("the audit log".into(), serde_json::to_string(&audit_rows).expect("json")));
    let log = capture.0.text();
    assert!(log.contains("signed in"), "the log was captured: {log}");
    places.push(("the log".into(), log));
    for secret in &secrets {
        let needle = secret.trim_start_matches("whsec_");
        for (place, text) in &places {
            assert!(!text.contains(needle), "{place} holds the secret {secret}");
        }
    }
}
