//! Security headers on every response, configured here and nowhere else.
//!
//! - `Content-Security-Policy`: scripts only with this response's nonce
//!   (Leptos puts it on the hydration and resource scripts, see
//!   [`provide_request_nonce`]) plus `'wasm-unsafe-eval'` for the client's
//!   WebAssembly; everything else from our own origin; no plugins, no
//!   `<base>`, no framing (MDN, "Content-Security-Policy";
//!   OWASP Secure Headers Project).
//! - `X-Frame-Options: DENY` for browsers that predate `frame-ancestors`:
//!   the Breakers page must not be framed (clickjacking its reset button).
//! - `X-Content-Type-Options: nosniff`, `Referrer-Policy: same-origin`, a
//!   `Permissions-Policy` that turns off device features the console never uses.
//! - `Strict-Transport-Security` only when `session_secure_cookie` says
//!   users reach Sluice over HTTPS (on plain HTTP it would be ignored, and on
//!   a mistaken deployment it would lock users out of the HTTP site).
//! - `Cache-Control: no-store` on every answer that did not choose its own
//!   caching: pages, server functions and API answers carry account and
//!   merchant data. The client's hashed files under `/pkg/` set theirs
//!   (immutable for a year, see [`super::assets`]) and keep it.

use axum::extract::{Request, State};
use axum::http::{header, HeaderName, HeaderValue};
use axum::middleware::Next;
use axum::response::Response;
use leptos::nonce::Nonce;

/// What every response gets; built once from the settings.
#[derive(Clone, Debug)]
pub struct SecurityHeaders {
    /// Send `Strict-Transport-Security` (users come over HTTPS).
    pub hsts: bool,
}

/// A year, with subdomains left to the operator (they may serve other
/// sites over plain HTTP under the same name).
const HSTS: &str = "max-age=31536000";
const PERMISSIONS_POLICY: &str = "accelerometer=(), camera=(), geolocation=(), gyroscope=(), magnetometer=(), \
     microphone=(), payment=(), usb=(), interest-cohort=()";

/// The policy for a response whose scripts carry `nonce`.
///
/// Styles come from the stylesheet under `/pkg/` (`'self'`); charts are
/// inline SVG with presentation attributes, which `style-src` does not govern.
/// `connect-src 'self'` covers the wasm download, server functions and the
/// live updates' event stream.
pub fn content_security_policy(nonce: &str) -> String {
    format!(
        "default-src 'self'; script-src 'nonce-{nonce}' 'wasm-unsafe-eval'; style-src 'self'; \
         img-src 'self' data:; font-src 'self'; connect-src 'self'; object-src 'none'; base-uri 'none'; \
         frame-ancestors 'none'; form-action 'self'"
    )
}

/// The layer: a fresh nonce for the request (read by the page render through
/// [`provide_request_nonce`]), the headers on its response.
pub async fn apply(State(config): State<SecurityHeaders>, mut request: Request, next: Next) -> Response {
    let nonce = Nonce::new();
    request.extensions_mut().insert(nonce.clone());
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    let mut set = |name: HeaderName, value: HeaderValue| {
        headers.insert(name, value);
    };
    // The nonce is URL-safe base64, always a valid header value.
    if let Ok(csp) = HeaderValue::from_str(&content_security_policy(&nonce)) {
        set(header::CONTENT_SECURITY_POLICY, csp);
    }
    set(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    set(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    set(header::REFERRER_POLICY, HeaderValue::from_static("same-origin"));
    set(HeaderName::from_static("permissions-policy"), HeaderValue::from_static(PERMISSIONS_POLICY));
    if config.hsts {
        set(header::STRICT_TRANSPORT_SECURITY, HeaderValue::from_static(HSTS));
    }
    if !response.headers().contains_key(header::CACHE_CONTROL) {
        response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    response
}

/// For the page render (Leptos' additional context): make the nonce of the
/// response's `Content-Security-Policy` the one Leptos writes on its
/// scripts, in place of the one it drew itself.
pub fn provide_request_nonce() {
    let nonce = leptos::prelude::use_context::<axum::http::request::Parts>().and_then(|parts| parts.extensions.get::<Nonce>().cloned());
    if let Some(nonce) = nonce {
        leptos::prelude::provide_context(nonce);
    }
}
