//! The browser client's files under `/pkg/`: the wasm module, its JavaScript
//! glue and the stylesheet, as the site build leaves them (`scripts/lib.sh`,
//! `build_site`): named by a hash of their content, with brotli (`.br`) and
//! gzip (`.gz`) siblings compressed once at build time.
//!
//! A file whose name carries a content hash never changes, so browsers may
//! keep it for a year without asking again; any other file must be
//! revalidated on every use.

use std::path::Path;

use axum::extract::Request;
use axum::http::{header, HeaderValue};
use axum::middleware::Next;
use axum::response::Response;
use axum::Router;
use tower_http::services::ServeDir;

use crate::state::AppState;

/// Cache-Control of a file named by its content.
pub const IMMUTABLE: &str = "public, max-age=31536000, immutable";
/// Cache-Control of a file whose name stays when its content changes.
pub const REVALIDATE: &str = "no-cache";

pub fn router(site_root: &Path) -> Router<AppState> {
    let files = ServeDir::new(site_root.join("pkg")).precompressed_br().precompressed_gzip();
    Router::new().nest_service("/pkg", files).layer(axum::middleware::from_fn(cache_headers))
}

/// `sluice.0123456789abcdef.wasm`: a dot-separated part of 16 hex digits,
/// as the site build writes it.
pub fn is_content_named(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    name.split('.').any(|part| part.len() == 16 && part.bytes().all(|b| b.is_ascii_hexdigit()))
}

async fn cache_headers(request: Request, next: Next) -> Response {
    let immutable = is_content_named(request.uri().path());
    let mut response = next.run(request).await;
    if response.status().is_success() || response.status().is_redirection() {
        let headers = response.headers_mut();
        let policy = if immutable { IMMUTABLE } else { REVALIDATE };
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static(policy));
        // The body depends on Accept-Encoding (brotli, gzip or neither).
        headers.insert(header::VARY, HeaderValue::from_static("accept-encoding"));
    }
    response
}

#[cfg(test)]
mod tests {
    use super::is_content_named;

    #[test]
    fn only_names_with_a_content_hash_count_as_immutable() {
        assert!(is_content_named("/pkg/sluice.0123456789abcdef.wasm"));
        assert!(is_content_named("/pkg/sluice.0123456789ABCDEF.css"));
        assert!(!is_content_named("/pkg/sluice.css"));
        assert!(!is_content_named("/pkg/sluice_bg.wasm"));
        assert!(!is_content_named("/pkg/0123456789abcdef/sluice.js"));
        assert!(!is_content_named("/pkg/sluice.0123456789abcde.js"));
    }
}
