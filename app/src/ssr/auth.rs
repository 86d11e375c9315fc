//! Sessions and roles on the server side of server functions.

use std::net::IpAddr;
use std::time::Duration;

use leptos::prelude::*;
use sluice_engine::audit::AuditAction;
use sluice_engine::quota::{Algorithm, Limit, Limiter, Outcome, QuotaRequest, RefusalReason, Rule};
use sluice_engine::users;
use tower_sessions::Session;

use super::{context, internal, set_status};
use crate::model::{Role, SessionUser};

/// Session key holding the signed-in user's id.
pub const SESSION_USER_ID: &str = "user_id";
/// Scope of the login throttle's rule per username.
pub const LOGIN_SCOPE: &str = "sluice_login";
/// Scope of the login throttle's rule per client address.
pub const LOGIN_ADDRESS_SCOPE: &str = "sluice_login_address";

/// The address a request came from, as the server resolved it (the peer, or
/// `X-Forwarded-For` behind a trusted proxy); set on every served request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClientAddr(pub IpAddr);

/// The login throttle: per username 5 attempts a minute (burst 5), per
/// client address 20 a minute (burst 20); an attempt must pass both and is
/// refused at once rather than waited for. Sluice's own limiter on the quota
/// store, so every instance counts the same attempts.
pub fn login_rules() -> [Rule; 2] {
    let rule = |scope: &str, tokens: u32, note: &str| {
        let limit = Limit { algorithm: Algorithm::TokenBucket, tokens, interval: Duration::from_secs(60), burst: tokens };
        let mut rule = Rule::new(scope, None, None, limit).with_id(scope);
        rule.note = note.to_owned();
        rule
    };
    [
        rule(LOGIN_SCOPE, 5, "login attempts per username"),
        rule(LOGIN_ADDRESS_SCOPE, 20, "login attempts per client address (IPv6: per /64)"),
    ]
}

/// The throttle's bucket for a username: the name as typed, lower case;
/// characters an account id cannot hold become `_` (no user has them, and
/// such names must be throttled like any other).
fn username_bucket(username: &str) -> String {
    let name: String = username.trim().to_lowercase().chars().take(64).collect();
    match sluice_engine::account::parse_account(Some(&name)) {
        Ok(account) => account,
        Err(_) => name.chars().map(|c| if c.is_alphanumeric() || ".-_@".contains(c) { c } else { '_' }).collect(),
    }
}

/// The throttle's bucket for an address: an IPv4 address alone; an IPv6
/// address by its /64, the block one subscriber usually holds (RFC 6177), so
/// walking through a network's addresses gains nothing.
pub fn address_bucket(ip: IpAddr) -> String {
    match ip.to_canonical() {
        IpAddr::V4(v4) => format!("ip4-{v4}"),
        IpAddr::V6(v6) => {
            let s = v6.segments();
            format!("ip6-{:x}-{:x}-{:x}-{:x}-64", s[0], s[1], s[2], s[3])
        }
    }
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

/// Record a refused sign-in: the username as typed (cut to a username's
/// length) and the client's address; never the password.
async fn audit_failed_login(ctx: &super::AppContext, username: &str, address: Option<IpAddr>) -> Result<(), ServerFnError> {
    let username: String = username.trim().chars().take(64).collect();
    let address = address.map_or_else(|| "unknown".to_owned(), |ip| ip.to_string());
    let record = serde_json::json!({ "username": username, "address": address });
    super::audit(ctx, &address, AuditAction::UserLoginFailed, &username, None, Some(&record), None).await
}

/// A redirect target from the login form: local paths only.
fn safe_next(next: Option<&str>) -> &str {
    match next {
        Some(n) if n.starts_with('/') && !n.starts_with("//") && !n.contains('\\') && !n.starts_with("/login") => n,
        _ => "/",
    }
}

/// Take one attempt from `bucket` of `scope`; `Some(seconds)` when it is
/// refused (over budget), an error when the throttle cannot decide.
async fn throttle(limiter: &Limiter, scope: &str, bucket: String) -> Result<Option<u64>, ServerFnError> {
    let attempt = QuotaRequest::new(scope, "POST", "/login").account(bucket).max_wait(Duration::ZERO);
    // `reserve`, not `acquire`: a sign-in never waits for a slot. A booked
    // wait means the bucket is over its budget; the booking stands, so
    // someone guessing pushes their own next attempt further out.
    match limiter.reserve(&attempt).await {
        Ok(Outcome::Granted(permit)) if permit.wait.is_zero() => Ok(None),
        Ok(Outcome::Granted(permit)) => Ok(Some(permit.wait.as_secs() + 1)),
        Ok(Outcome::Refused(refusal)) if refusal.reason == RefusalReason::StoreUnavailable => {
            // Failing closed while the quota store is down: not the user's fault.
            set_status(http::StatusCode::SERVICE_UNAVAILABLE);
            Err(ServerFnError::new("sign-in is unavailable while the quota store is down; try again shortly"))
        }
        Ok(Outcome::Refused(refusal)) => Ok(Some(refusal.retry_after_secs().unwrap_or(60))),
        // The quota store is down and failing closed: do not let guessing through.
        Err(e) => Err(internal("the login throttle is unavailable", e)),
    }
}

/// The client address of the request being served, if the server knows it.
fn client_addr() -> Option<IpAddr> {
    use_context::<http::request::Parts>().and_then(|parts| parts.extensions.get::<ClientAddr>().map(|a| a.0))
}

pub async fn login(username: &str, password: &str, next: Option<&str>) -> Result<(), ServerFnError> {
    let ctx = context()?;
    let address = client_addr();
    // The throttles count every attempt before the password is looked at,
    // so the answer to a throttled attempt says nothing about whether the
    // username exists. An attempt refused for its address spends nothing
    // of the username's budget.
    let by_address = match address {
        Some(ip) => throttle(&ctx.login_limiter, LOGIN_ADDRESS_SCOPE, address_bucket(ip)).await?,
        None => None,
    };
    let refused = match by_address {
        Some(secs) => Some(secs),
        None => throttle(&ctx.login_limiter, LOGIN_SCOPE, username_bucket(username)).await?,
    };
    if let Some(secs) = refused {
        set_status(http::StatusCode::TOO_MANY_REQUESTS);
        return Err(ServerFnError::new(format!("too many sign-in attempts; try again in {secs} s")));
    }
    let user = users::verify_login(&ctx.db, username, password, ctx.clock.now())
        .await
        .map_err(|e| internal("checking the password", e))?;
    let Some(user) = user else {
        audit_failed_login(&ctx, username, address).await?;
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
