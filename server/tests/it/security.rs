//! The console's defences as a browser and a client see them: security
//! headers and caching, sessions, sign-in throttles, secrets kept out of
//! logs, audit rows and pages.

use reqwest::header::HeaderMap;

use crate::api::spawn_api;
use crate::helpers::{spawn_app, spawn_app_with, Mode, Role};

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
