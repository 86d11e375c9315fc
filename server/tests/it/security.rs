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
