//! Web sessions: a new id at sign-in, sign-out ending every session of the
//! user, role and password changes ending the user's other sessions, and the
//! idle and absolute lifetimes on the engine's clock.

use std::sync::Arc;
use std::time::Duration;

use sluice_engine::clock::{Clock, ManualClock, SharedClock, SystemClock};

use crate::helpers::{spawn_app, spawn_app_with_clock, users, Mode, Role, TestApp};

const PASSWORD: &str = "a test password";

async fn user(app: &TestApp, name: &str, role: Role) {
    users::create_user(&app.db.db(), name, PASSWORD, role, SystemClock.now()).await.expect("create user");
}

/// Whether `client`'s session still opens a page (a page without a session
/// redirects to the login).
async fn signed_in(app: &TestApp, client: &reqwest::Client) -> bool {
    let status = client.get(app.url("/")).send().await.expect("page").status();
    assert!(status == 200 || status == 303, "{status}");
    status == 200
}

/// The session cookie's value a response sets.
fn session_cookie(resp: &reqwest::Response) -> String {
    let cookie = resp.headers().get("set-cookie").expect("a session cookie").to_str().expect("ascii");
    let value = cookie.strip_prefix("sluice_session=").expect("the session cookie");
    value.split(';').next().expect("value").to_owned()
}

#[tokio::test]
async fn the_session_id_changes_at_sign_in_and_the_old_one_is_worth_nothing() {
    let app = spawn_app(Mode::Embedded).await;
    user(&app, "ana", Role::Viewer).await;
    let login = |cookie: Option<String>| {
        let mut req = app.client.post(app.url("/ui/login")).form(&[("username", "ana"), ("password", PASSWORD)]);
        if let Some(c) = cookie {
            req = req.header("cookie", format!("sluice_session={c}"));
        }
        async move { req.send().await.expect("login") }
    };
    let first = session_cookie(&login(None).await);
    // Signing in again with that session (or one an attacker planted) gives a new id.
    let second = session_cookie(&login(Some(first.clone())).await);
    assert_ne!(first, second);
    let page = |cookie: String| {
        let req = app.client.get(app.url("/")).header("cookie", format!("sluice_session={cookie}"));
        async move { req.send().await.expect("page").status() }
    };
    assert_eq!(page(second).await, 200);
    assert_eq!(page(first).await, 303, "the id from before the sign-in still works");
}

#[tokio::test]
async fn signing_out_ends_every_session_of_the_user_and_no_one_elses() {
    let app = spawn_app(Mode::Distributed).await;
    user(&app, "ana", Role::Viewer).await;
    user(&app, "bo", Role::Viewer).await;
    let laptop = app.signed_in_as("ana", PASSWORD).await;
    let phone = app.signed_in_as("ana", PASSWORD).await;
    let other = app.signed_in_as("bo", PASSWORD).await;
    assert!(signed_in(&app, &laptop).await && signed_in(&app, &phone).await);
    let out = app.call(&laptop, "/ui/logout", &[]).await;
    assert!(out.status().is_redirection() || out.status().is_success(), "{}", out.status());
    assert!(!signed_in(&app, &laptop).await);
    assert!(!signed_in(&app, &phone).await, "the user's other session survived the sign-out");
    assert!(signed_in(&app, &other).await, "another user's session ended");
}

#[tokio::test]
async fn a_role_change_ends_the_users_sessions_but_the_changers_own() {
    let app = spawn_app(Mode::Embedded).await;
    user(&app, "root", Role::Admin).await;
    user(&app, "ana", Role::Admin).await;
    let admin = app.signed_in_as("root", PASSWORD).await;
    let admin_elsewhere = app.signed_in_as("root", PASSWORD).await;
    let ana = app.signed_in_as("ana", PASSWORD).await;
    let resp = app.call(&admin, "/ui/users/role", &[("username", "ana"), ("role", "viewer")]).await;
    assert_eq!(resp.status(), 200, "{}", resp.text().await.unwrap_or_default());
    assert!(!signed_in(&app, &ana).await, "a session from before the role change survived it");
    assert!(signed_in(&app, &admin).await && signed_in(&app, &admin_elsewhere).await);
    // Changing one's own role keeps the session one changes it in, and ends the others.
    user(&app, "third", Role::Admin).await;
    let resp = app.call(&admin, "/ui/users/role", &[("username", "root"), ("role", "support")]).await;
    assert_eq!(resp.status(), 200, "{}", resp.text().await.unwrap_or_default());
    assert!(signed_in(&app, &admin).await);
    assert!(!signed_in(&app, &admin_elsewhere).await);
}

#[tokio::test]
async fn a_new_password_ends_the_users_sessions() {
    let app = spawn_app(Mode::Distributed).await;
    user(&app, "ana", Role::Support).await;
    let before = app.signed_in_as("ana", PASSWORD).await;
    // As `sluice user password` does it.
    users::set_password(&app.db.db(), "ana", "a brand new password", None).await.expect("new password");
    assert!(!signed_in(&app, &before).await, "a session from before the new password survived it");
    assert!(signed_in(&app, &app.signed_in_as("ana", "a brand new password").await).await);
}

#[tokio::test]
async fn sessions_end_after_the_idle_time_and_after_the_absolute_lifetime() {
    let clock = Arc::new(ManualClock::at_test_epoch());
    let shared: SharedClock = clock.clone();
    // No delivery worker: its pauses between polls would move the clock.
    let settings =
        [("SLUICE_SESSION_IDLE_SECS", "600"), ("SLUICE_SESSION_ABSOLUTE_SECS", "1800"), ("SLUICE_DELIVERY_WORKER", "false")];
    let app = spawn_app_with_clock(Mode::Embedded, &settings, shared).await;
    user(&app, "ana", Role::Viewer).await;
    let secs = Duration::from_secs;

    // Idle: each request pushes the end out; ten minutes without one end it.
    let client = app.signed_in_as("ana", PASSWORD).await;
    clock.advance(secs(500));
    assert!(signed_in(&app, &client).await);
    clock.advance(secs(500));
    assert!(signed_in(&app, &client).await, "a session in use ended before its idle time");
    clock.advance(secs(601));
    assert!(!signed_in(&app, &client).await, "a session idle past session_idle_secs still works");

    // Absolute: in use every 500 s, it still ends 1800 s after sign-in.
    let client = app.signed_in_as("ana", PASSWORD).await;
    for _ in 0..3 {
        clock.advance(secs(500));
        assert!(signed_in(&app, &client).await);
    }
    clock.advance(secs(301));
    assert!(!signed_in(&app, &client).await, "a busy session outlived session_absolute_secs");
}
