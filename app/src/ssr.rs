//! Server-side services for server functions. The server binary builds an
//! [`AppContext`] at startup and provides it to every request; server
//! functions fetch it with [`context`], check the caller's role with
//! [`auth::require`] and call one engine or repository function each.

pub mod auth;
pub mod charts;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use leptos::prelude::*;
use sluice_engine::upstream_breaker::UpstreamBreaker;
use sluice_engine::clock::SharedClock;
use sluice_engine::db::Db;
use sluice_engine::delivery::ssrf::SsrfPolicy;
use sluice_engine::delivery::DeliveryStore;
use sluice_engine::quota::history::QuotaHistory;
use sluice_engine::quota::{Limiter, RulesRepo};

use crate::model::HealthView;

/// A boxed future, for the object-safe service traits below.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Reports the health of the deployment's dependencies. Implemented by the
/// server, which owns the connections.
pub trait HealthCheck: Send + Sync {
    fn check(&self) -> BoxFuture<'_, HealthView>;
}

/// Everything server functions may use: the same engine handles the HTTP API
/// uses, so the UI and the API validate and audit alike.
#[derive(Clone)]
pub struct AppContext {
    pub health: Arc<dyn HealthCheck>,
    pub db: Db,
    pub clock: SharedClock,
    /// The shared-quota limiter (its rules, buckets and statistics).
    pub limiter: Limiter,
    /// Limit rules in the database; edits reach every instance through the reloader.
    pub rules: RulesRepo,
    /// This instance's live retry profiles (kept in step by the reloader).
    pub retry_profiles: sluice_engine::retry::RetryProfiles,
    /// Retry profiles in the database; written through `ProfileAdmin`.
    pub profiles_repo: sluice_engine::retry::profiles_repo::ProfilesRepo,
    /// The webhook outbox, merchants and their breakers.
    pub deliveries: DeliveryStore,
    /// Which merchant URLs may be delivered to (validated on merchant edits).
    pub ssrf: SsrfPolicy,
    /// The upstream circuit breakers (per account and API scope): in memory
    /// when embedded, in Redis when distributed (connected lazily, so the
    /// Breakers page says "unavailable" rather than failing while Redis is down).
    pub upstream_breakers: UpstreamBreaker,
    /// Audited resets of upstream breakers (the HTTP API uses the same service).
    pub upstream_breaker_admin: sluice_engine::upstream_breaker::admin::UpstreamBreakerAdmin,
    /// The delivery ladders' timings the worker runs with (product or demo).
    pub delivery_ladder: sluice_engine::delivery::ladder::LadderConfig,
    /// The merchant breakers' timings the worker runs with (product or demo).
    pub delivery_breaker: sluice_engine::delivery::merchant_breaker::MerchantBreakerConfig,
    /// Throttles sign-in attempts per username and per client address:
    /// Sluice's own limiter, with fixed rules ([`auth::login_rules`]) on the
    /// same store as the quotas.
    pub login_limiter: Limiter,
    /// Sampled quota counters: the Quotas charts and the Overview's last hour.
    pub history: QuotaHistory,
    /// API tokens recently authenticated by this process; a token revoked on
    /// the Users page is forgotten here at once.
    pub api_tokens: Arc<sluice_engine::tokens::TokenCache>,
    /// How long deliveries and audit rows are kept (the Deliveries, delivery
    /// and Audit pages say so).
    pub retention: sluice_engine::retention::RetentionConfig,
}

impl std::fmt::Debug for AppContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppContext").finish_non_exhaustive()
    }
}

impl AppContext {
    pub async fn health(&self) -> HealthView {
        self.health.check().await
    }
}

/// The request's [`AppContext`], or an error if the server forgot to provide it.
pub fn context() -> Result<AppContext, ServerFnError> {
    use_context::<AppContext>().ok_or_else(|| ServerFnError::new("application context missing"))
}

/// Log an internal error and give the browser a message without its details.
pub fn internal(what: &str, error: impl std::fmt::Display) -> ServerFnError {
    tracing::error!(error = %error, "{what}");
    ServerFnError::new(format!("{what}; the server log has the details"))
}

/// Write one audit row for a server function whose change is not a database
/// write of its own (user accounts). Changes to limits, merchants, breakers
/// and deliveries are audited by their engine operation, in its transaction.
pub async fn audit<T: serde::Serialize>(
    ctx: &AppContext,
    actor: &str,
    action: sluice_engine::audit::AuditAction,
    target: &str,
    before: Option<&T>,
    after: Option<&T>,
    reason: Option<&str>,
) -> Result<(), ServerFnError> {
    let entry = sluice_engine::audit::AuditEntry { actor, action, target, before, after, reason };
    sluice_engine::audit::record(&ctx.db, entry, ctx.clock.now()).await.map_err(|e| internal("writing the audit log", e))
}

/// Set the HTTP status of a server function's answer (401, 403, 404, 409, 422, …).
pub fn set_status(status: http::StatusCode) {
    if let Some(resp) = use_context::<leptos_axum::ResponseOptions>() {
        resp.set_status(status);
    }
}
