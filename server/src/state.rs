//! Shared, cheaply cloned state handed to every handler.

use std::sync::Arc;

use axum::extract::FromRef;
use leptos::prelude::LeptosOptions;
use metrics_exporter_prometheus::PrometheusHandle;
use sluice_app::ssr::AppContext;
use sluice_engine::clock::SharedClock;
use sluice_engine::db::Db;
use sluice_engine::delivery::handoff::Handoff;
use sluice_engine::delivery::{DeliveryStore, Intake, Wake};
use sluice_engine::quota::{Limiter, RulesRepo};
use sluice_engine::retry::profiles_repo::ProfilesRepo;
use sluice_engine::retry::RetryProfiles;
use sluice_engine::upstream_breaker::admin::UpstreamBreakerAdmin;
use sluice_engine::upstream_breaker::permits::BreakerGate;
use sluice_engine::upstream_breaker::UpstreamBreaker;

use crate::config::Settings;
use crate::health::Health;

/// Cloned for every request (axum's `State`, each middleware), so a clone
/// is one reference count: the parts live in [`Shared`]. Cloning the parts
/// themselves (a dozen `Arc`s, the Leptos options' strings) was a sixth of a
/// permit's server time.
#[derive(Clone)]
pub struct AppState(Arc<Shared>);

pub struct Shared {
    pub settings: Arc<Settings>,
    pub db: Db,
    pub clock: SharedClock,
    /// The shared-quota limiter (memory or Redis behind the store-down policy).
    pub limiter: Limiter,
    /// The limiter behind the upstream breakers: what the permit endpoint asks.
    pub permits: BreakerGate,
    /// The upstream breakers (per account and API scope) workers admit and report to.
    pub upstream_breakers: UpstreamBreaker,
    /// Audited resets of upstream breakers (the Breakers page uses the same).
    pub upstream_breaker_admin: UpstreamBreakerAdmin,
    /// Limit rules in the database; edits reach every instance through the reloader.
    pub rules: RulesRepo,
    /// Retry profiles per scope: the live set (kept in step by the reloader)
    /// and the table it is loaded from.
    pub retry_profiles: RetryProfiles,
    pub profiles_repo: ProfilesRepo,
    /// The webhook outbox.
    pub deliveries: DeliveryStore,
    /// Event intake, concurrent calls committed together.
    pub intake: Intake,
    /// Wakes this instance's delivery worker when intake stored new work.
    pub wake: Wake,
    /// Deliveries this instance's intake stored claimed for its own steps
    /// (`None` when it does not deliver).
    pub handoff: Option<Handoff>,
    pub health: Arc<Health>,
    pub leptos_options: LeptosOptions,
    pub prometheus: PrometheusHandle,
    pub app_context: AppContext,
}

impl AppState {
    pub fn new(shared: Shared) -> AppState {
        AppState(Arc::new(shared))
    }
}

impl std::ops::Deref for AppState {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0
    }
}

/// Leptos' routes and file handler read their options from the state.
impl FromRef<AppState> for LeptosOptions {
    fn from_ref(state: &AppState) -> LeptosOptions {
        state.leptos_options.clone()
    }
}
