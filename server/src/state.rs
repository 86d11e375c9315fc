//! Shared, cheaply cloned state handed to every handler.

use std::sync::Arc;

use axum::extract::FromRef;
use leptos::prelude::LeptosOptions;
use metrics_exporter_prometheus::PrometheusHandle;
use sluice_app::ssr::AppContext;
use sluice_engine::clock::SharedClock;
use sluice_engine::db::Db;
use sluice_engine::delivery::DeliveryStore;
use sluice_engine::quota::{Limiter, RulesRepo};

use crate::config::Settings;
use crate::health::Health;

#[derive(Clone, FromRef)]
pub struct AppState {
    pub settings: Arc<Settings>,
    pub db: Db,
    pub clock: SharedClock,
    /// The shared-quota limiter (memory or Redis behind the store-down policy).
    pub limiter: Limiter,
    /// Limit rules in the database; edits reach every instance through the reloader.
    pub rules: RulesRepo,
    /// The webhook outbox.
    pub deliveries: DeliveryStore,
    pub health: Arc<Health>,
    pub leptos_options: LeptosOptions,
    pub prometheus: PrometheusHandle,
    pub app_context: AppContext,
}
