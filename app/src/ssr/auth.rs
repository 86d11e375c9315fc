//! Sessions and roles on the server side of server functions.

use std::time::Duration;

use leptos::prelude::*;
use sluice_engine::quota::{Algorithm, Limit, Outcome, QuotaRequest, RefusalReason, Rule};
use sluice_engine::users;
use tower_sessions::Session;

use super::{context, internal, set_status};
use crate::model::{Role, SessionUser};

/// Session key holding the signed-in user's id.
pub const SESSION_USER_ID: &str = "user_id";
/// Scope of the login throttle's rule and requests.
pub const LOGIN_SCOPE: &str = "sluice_login";

/// The login throttle: 5 attempts per username per minute (burst 5), refused
/// at once rather than waited for.
pub fn login_rule() -> Rule {
    let limit = Limit { algorithm: Algorithm::TokenBucket, tokens: 5, interval: Duration::from_secs(60), burst: 5 };
    let mut rule = Rule::new(LOGIN_SCOPE, None, None, limit).with_id("sluice_login");
    rule.note = "login attempts per username".to_owned();
    rule
}

fn engine_role(role: users::Role) -> Role {
    match role {
        users::Role::Viewer => Role::Viewer,
        users::Role::Support => Role::Support,
        users::Role::Admin => Role::Admin,
    }
}

/// The request's session (the server installs the session layer).
pub async fn session() -> Result<Session, ServerFnError> {
    leptos_axum::extract::<Session>().await.map_err(|e| internal("session layer missing", e))
}

/// The signed-in user, read from the database on every call so that a
/// removed user or a changed role takes effect at once.
pub async fn current_user() -> Result<Option<SessionUser>, ServerFnError> {
    let session = session().await?;
    let id: Option<String> = session.get(SESSION_USER_ID).await.map_err(|e| internal("reading the session", e))?;
    let Some(id) = id else { return Ok(None) };
    let ctx = context()?;
    match users::get_user(&ctx.db, &id).await.map_err(|e| internal("reading the user", e))? {
        Some(user) => Ok(Some(SessionUser { username: user.username, role: engine_role(user.role) })),
        None => {
            let _ = session.flush().await;
            Ok(None)
        }
    }
}

/// The signed-in user if their role allows `needed`; otherwise an error and
/// the HTTP status 401 (not signed in) or 403 (role too low).
pub async fn require(needed: Role) -> Result<SessionUser, ServerFnError> {
    match current_user().await? {
        None => {
            set_status(http::StatusCode::UNAUTHORIZED);
            Err(ServerFnError::new("not signed in"))
        }
        Some(user) if !user.role.allows(needed) => {
            set_status(http::StatusCode::FORBIDDEN);
            Err(ServerFnError::new(format!("this needs the {needed} role; you are {}", user.role)))
        }
        Some(user) => Ok(user),
    }
}

/// A redirect target from the login form: local paths only.
fn safe_next(next: Option<&str>) -> &str {
    match next {
        Some(n) if n.starts_with('/') && !n.starts_with("//") && !n.contains('\\') && !n.starts_with("/login") => n,
        _ => "/",
    }
}

pub async fn login(username: &str, password: &str, next: Option<&str>) -> Result<(), ServerFnError> {
    let ctx = context()?;
    let account = username.trim().to_lowercase();
    let attempt = QuotaRequest::new(LOGIN_SCOPE, "POST", "/login").account(account).max_wait(Duration::ZERO);
    // `reserve`, not `acquire`: a sign-in never waits for a slot. A booked
    // wait means the username is over its budget; the booking stands, so
    // someone guessing pushes their own next attempt further out.
    let refused_for = match ctx.login_limiter.reserve(&attempt).await {
        Ok(Outcome::Granted(permit)) if permit.wait.is_zero() => None,
        Ok(Outcome::Granted(permit)) => Some(permit.wait.as_secs() + 1),
        Ok(Outcome::Refused(refusal)) if refusal.reason == RefusalReason::StoreUnavailable => {
            // Failing closed while the quota store is down: not the user's fault.
            set_status(http::StatusCode::SERVICE_UNAVAILABLE);
            return Err(ServerFnError::new("sign-in is unavailable while the quota store is down; try again shortly"));
        }
        Ok(Outcome::Refused(refusal)) => Some(refusal.retry_after_secs().unwrap_or(60)),
        // The quota store is down and failing closed: do not let guessing through.
        Err(e) => return Err(internal("the login throttle is unavailable", e)),
    };
    if let Some(secs) = refused_for {
        set_status(http::StatusCode::TOO_MANY_REQUESTS);
        return Err(ServerFnError::new(format!("too many sign-in attempts; try again in {secs} s")));
    }
    let user = users::verify_login(&ctx.db, username, password, ctx.clock.now())
        .await
        .map_err(|e| internal("checking the password", e))?;
    let Some(user) = user else {
        set_status(http::StatusCode::UNAUTHORIZED);
        return Err(ServerFnError::new("wrong username or password"));
    };
    let session = session().await?;
    // A new id at login: a session id planted before login is worth nothing.
    session.cycle_id().await.map_err(|e| internal("rotating the session id", e))?;
    session.insert(SESSION_USER_ID, &user.id).await.map_err(|e| internal("writing the session", e))?;
    tracing::info!(user = %user.username, "signed in");
    leptos_axum::redirect(safe_next(next));
    Ok(())
}

/// Sign out: this session and every other session of the same user end (a
/// session left open on another machine is one sign-out away from closed).
pub async fn logout() -> Result<(), ServerFnError> {
    let session = session().await?;
    let user_id: Option<String> = session.get(SESSION_USER_ID).await.map_err(|e| internal("reading the session", e))?;
    session.flush().await.map_err(|e| internal("ending the session", e))?;
    if let Some(user_id) = user_id {
        let ctx = context()?;
        users::end_sessions(&ctx.db, &user_id, None).await.map_err(|e| internal("ending the user's sessions", e))?;
    }
    leptos_axum::redirect("/login");
    Ok(())
}
