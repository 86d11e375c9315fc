//! Shared, cheaply cloned state handed to every handler.

use std::sync::Arc;

use axum::extract::FromRef;
use leptos::prelude::LeptosOptions;
use metrics_exporter_prometheus::PrometheusHandle;
use sluice_app::ssr::AppContext;
use sluice_engine::db::Db;

use crate::config::Settings;
use crate::health::Health;

#[derive(Clone, FromRef)]
pub struct AppState {
    pub settings: Arc<Settings>,
    pub db: Db,
    pub health: Arc<Health>,
    pub leptos_options: LeptosOptions,
    pub prometheus: PrometheusHandle,
    pub app_context: AppContext,
}
