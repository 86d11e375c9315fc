//! Server-side services for server functions. The server binary builds an
//! [`AppContext`] at startup and provides it to every request; server
//! functions fetch it with [`context`] and call one engine or repository
//! function each.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use leptos::prelude::*;

use crate::model::HealthView;

/// A boxed future, for the object-safe service traits below.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Reports the health of the deployment's dependencies. Implemented by the
/// server, which owns the connections.
pub trait HealthCheck: Send + Sync {
    fn check(&self) -> BoxFuture<'_, HealthView>;
}

/// Everything server functions may use.
#[derive(Clone)]
pub struct AppContext {
    health: Arc<dyn HealthCheck>,
}

impl std::fmt::Debug for AppContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppContext").finish_non_exhaustive()
    }
}

impl AppContext {
    pub fn new(health: Arc<dyn HealthCheck>) -> Self {
        AppContext { health }
    }

    pub async fn health(&self) -> HealthView {
        self.health.check().await
    }
}

/// The request's [`AppContext`], or an error if the server forgot to provide it.
pub fn context() -> Result<AppContext, ServerFnError> {
    use_context::<AppContext>().ok_or_else(|| ServerFnError::new("application context missing"))
}
