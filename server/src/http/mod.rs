//! HTTP routes. One router function per resource, merged in [`router`].

pub mod api;
pub mod assets;
pub mod client_addr;
pub mod guard;
pub mod ops;
pub mod security;
pub mod stream;

use axum::Router;
use leptos::prelude::provide_context;
use leptos_axum::{generate_route_list, AxumRouteListing, LeptosRoutes};
use sluice_app::{shell, App};

use crate::state::AppState;

/// The page routes, generated once per process. Generating them renders the
/// app once with resource loading switched off by a process-wide flag
/// (leptos_server's `SuppressResourceLoad`): a page rendered on another
/// thread meanwhile waits for ever on a resource that never loads
/// (leptos-rs/leptos#4773). Seen in the test binary, where many
/// applications start while others serve pages: the Overview hung about once
/// in ten runs of the suite. Generated once, before any router exists,
/// nothing can be rendering.
fn page_routes() -> Vec<AxumRouteListing> {
    static ROUTES: std::sync::OnceLock<Vec<AxumRouteListing>> = std::sync::OnceLock::new();
    ROUTES.get_or_init(|| generate_route_list(App)).clone()
}

/// The whole HTTP surface of Sluice.
pub fn router(state: AppState) -> Router {
    let routes = page_routes();
    let context = state.app_context.clone();
    let options = state.leptos_options.clone();
    let page_context = move || {
        provide_context(context.clone());
        security::provide_request_nonce();
    };
    let trusted_proxies = std::sync::Arc::new(state.settings.trusted_proxies.clone());
    let security = security::SecurityHeaders { hsts: state.settings.session_secure_cookie };
    Router::new()
        .merge(ops::router())
        .merge(api::router())
        .merge(stream::router())
        .merge(assets::router(&state.settings.site_root))
        .leptos_routes_with_context(
            &state,
            routes,
            page_context.clone(),
            move || shell(options.clone()),
        )
        .fallback(leptos_axum::file_and_error_handler_with_context::<AppState, _>(page_context, shell))
        .layer(axum::middleware::from_fn(guard::require_login))
        .layer(crate::sessions::layer(crate::sessions::store(&state), state.settings.session_secure_cookie))
        .layer(axum::middleware::from_fn(guard::reject_cross_site_writes))
        .layer(axum::middleware::from_fn_with_state(trusted_proxies, client_addr::resolve))
        .layer(axum::middleware::from_fn_with_state(security, security::apply))
        .layer(axum::middleware::from_fn(crate::telemetry::track_http))
        .with_state(state)
}
