//! Request guards for the web application: sign-in for pages, and the
//! same-origin rule that makes cookie-authenticated writes safe from CSRF.
//!
//! Roles are checked by every server function ([`sluice_app::ssr::auth`]);
//! these guards only decide who reaches a page at all and which browser
//! writes are accepted.

use axum::extract::Request;
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use sluice_app::ssr::auth::SESSION_USER_ID;
use tower_sessions::Session;

/// Paths any visitor may fetch: the login page, static assets, health,
/// metrics and APIs that authenticate themselves (server functions check the
/// session and role; `/api/v1` checks bearer tokens).
fn is_public(path: &str) -> bool {
    path == "/login"
        || path == "/healthz"
        || path == "/readyz"
        || path == "/metrics"
        || path == "/favicon.svg"
        || path.starts_with("/pkg/")
        || path.starts_with("/api/")
        || path.starts_with("/ui/")
}

/// Send page requests without a signed-in session to `/login?next=…`.
pub async fn require_login(session: Session, request: Request, next: Next) -> Response {
    let path = request.uri().path();
    if is_public(path) || !matches!(*request.method(), Method::GET | Method::HEAD) {
        return next.run(request).await;
    }
    let signed_in = matches!(session.get::<String>(SESSION_USER_ID).await, Ok(Some(_)));
    if signed_in {
        return next.run(request).await;
    }
    let target = request.uri().path_and_query().map(|pq| pq.as_str()).unwrap_or("/");
    let login = format!("/login?next={}", url::form_urlencoded::byte_serialize(target.as_bytes()).collect::<String>());
    Redirect::to(&login).into_response()
}

/// Whether a request that could change something came from one of our own
/// pages. Modern browsers send `Sec-Fetch-Site`; older ones `Origin`. A
/// request with neither (curl, a worker) carries no browser's ambient
/// cookies on a victim's behalf, so it is not a CSRF vector.
fn same_origin(headers: &HeaderMap) -> bool {
    if let Some(site) = headers.get("sec-fetch-site").and_then(|v| v.to_str().ok()) {
        return matches!(site, "same-origin" | "none");
    }
    match (headers.get(header::ORIGIN), headers.get(header::HOST)) {
        (Some(origin), Some(host)) => {
            let origin = origin.to_str().unwrap_or_default();
            let host = host.to_str().unwrap_or_default();
            origin.strip_prefix("http://").or_else(|| origin.strip_prefix("https://")) == Some(host)
        }
        (Some(_), None) => false,
        (None, _) => true,
    }
}

/// Refuse cross-site writes (403). Together with SameSite=Strict session
/// cookies this is the CSRF defence: no token to forget in a form.
pub async fn reject_cross_site_writes(request: Request, next: Next) -> Response {
    let safe = matches!(*request.method(), Method::GET | Method::HEAD | Method::OPTIONS);
    let bearer = request.headers().get(header::AUTHORIZATION).is_some();
    if safe || bearer || same_origin(request.headers()) {
        return next.run(request).await;
    }
    (StatusCode::FORBIDDEN, "cross-site request refused").into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn same_origin_rules() {
        assert!(same_origin(&headers(&[("sec-fetch-site", "same-origin")])));
        assert!(!same_origin(&headers(&[("sec-fetch-site", "cross-site")])));
        assert!(!same_origin(&headers(&[("sec-fetch-site", "same-site")])));
        assert!(same_origin(&headers(&[("origin", "http://127.0.0.1:3000"), ("host", "127.0.0.1:3000")])));
        assert!(!same_origin(&headers(&[("origin", "http://evil.example"), ("host", "127.0.0.1:3000")])));
        assert!(same_origin(&headers(&[("host", "127.0.0.1:3000")])));
    }
}
