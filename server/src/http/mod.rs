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
use leptos_axum::{generate_route_list, LeptosRoutes};
use sluice_app::{shell, App};

use crate::state::AppState;

/// The whole HTTP surface of Sluice.
pub fn router(state: AppState) -> Router {
    let routes = generate_route_list(App);
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
