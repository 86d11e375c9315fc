//! Signing in: sessions, roles, the login throttle and the CSRF guard.

use crate::helpers::{spawn_app, users, Mode, Role};
use sluice_engine::clock::{Clock, SystemClock};

#[tokio::test]
async fn pages_without_a_session_redirect_to_login_with_the_way_back() {
    let app = spawn_app(Mode::Embedded).await;
    let resp = app.get("/quotas?account=a1").await;
    assert_eq!(resp.status(), 303);
    assert_eq!(resp.headers()["location"], "/login?next=%2Fquotas%3Faccount%3Da1");
    let login = app.get("/login").await;
    assert_eq!(login.status(), 200);
    assert!(login.text().await.expect("html").contains("Sign in to Sluice"));
    // Health endpoints stay public for load balancers.
    assert_eq!(app.get("/healthz").await.status(), 200);
}

#[tokio::test]
async fn login_sets_a_strict_http_only_cookie_and_logout_ends_the_session() {
    let app = spawn_app(Mode::Distributed).await;
    let db = app.db.db();
    users::create_user(&db, "op", "operator password", Role::Viewer, SystemClock.now()).await.expect("user");
    let client = reqwest::Client::builder()
        .cookie_store(true)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client");
    let resp = client
        .post(app.url("/ui/login"))
        .header("origin", app.url(""))
        .form(&[("username", "op"), ("password", "operator password"), ("next", "/quotas")])
        .send()
        .await
        .expect("login");
    assert!(resp.status().is_redirection() || resp.status().is_success(), "{}", resp.status());
    let cookie = resp.headers()["set-cookie"].to_str().expect("ascii").to_owned();
    assert!(cookie.starts_with("sluice_session="), "{cookie}");
    assert!(cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"), "{cookie}");
    assert_eq!(client.get(app.url("/")).send().await.expect("get").status(), 200);
    // The role travels with the session.
    let me = client.post(app.url("/ui/me")).header("origin", app.url("")).send().await.expect("me");
    assert_eq!(me.status(), 200);
    assert!(me.text().await.expect("body").contains("\"role\":\"viewer\""));
    let out = client.post(app.url("/ui/logout")).header("origin", app.url("")).send().await.expect("logout");
    assert!(out.status().is_redirection() || out.status().is_success(), "{}", out.status());
    assert_eq!(client.get(app.url("/")).send().await.expect("get").status(), 303);
}

#[tokio::test]
async fn wrong_passwords_are_refused_and_then_throttled_per_username() {
    let app = spawn_app(Mode::Distributed).await;
    users::create_user(&app.db.db(), "ana", "the right password", Role::Admin, SystemClock.now()).await.expect("user");
    let attempt = |password: &'static str| {
        let client = app.client.clone();
        let url = app.url("/ui/login");
        async move {
            client.post(url).form(&[("username", "ana"), ("password", password)]).send().await.expect("login").status()
        }
    };
    for _ in 0..5 {
        assert_eq!(attempt("guess guess guess").await, 401);
    }
    // The sixth attempt within the minute is refused before the password is
    // even checked, the right password included.
    assert_eq!(attempt("the right password").await, 429);
}

#[tokio::test]
async fn server_functions_refuse_callers_without_a_session_or_from_other_sites() {
    let app = spawn_app(Mode::Embedded).await;
    assert_eq!(app.client.post(app.url("/ui/health")).send().await.expect("health").status(), 401);
    let viewer = app.signed_in(Role::Viewer).await;
    assert_eq!(app.call(&viewer, "/ui/health", &[]).await.status(), 200);
    let cross = viewer
        .post(app.url("/ui/health"))
        .header("origin", "http://evil.example")
        .send()
        .await
        .expect("cross-site");
    assert_eq!(cross.status(), 403);
}

#[tokio::test]
async fn the_first_start_creates_one_admin() {
    let app = spawn_app(Mode::Embedded).await;
    let db = app.db.db();
    let (name, password) =
        sluice::startup::ensure_first_admin(&db, SystemClock.now()).await.expect("first").expect("created");
    assert_eq!(name, "admin");
    assert!(users::verify_login(&db, "admin", &password, SystemClock.now()).await.expect("verify").is_some());
    assert!(sluice::startup::ensure_first_admin(&db, SystemClock.now()).await.expect("second").is_none());
}
