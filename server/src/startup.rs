//! Building and running the application from validated settings.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use leptos::prelude::LeptosOptions;
use sluice_app::ssr::AppContext;
use sluice_engine::db::{Backend, Db, PoolSettings};
use tokio::net::TcpListener;

use crate::config::{redact_url, Settings};
use crate::health::{Health, RedisProbe};
use crate::state::AppState;

/// A built application: connected, migrated and bound, not yet serving.
pub struct Application {
    listener: TcpListener,
    address: SocketAddr,
    state: AppState,
}

/// Connect to the database named by the settings, creating the embedded
/// data directory if needed, and run migrations. A failed migration is an
/// error: Sluice must not serve on a half-migrated schema.
pub async fn connect_and_migrate(settings: &Settings) -> anyhow::Result<Db> {
    if Backend::from_url(&settings.database_url) == Some(Backend::Sqlite) {
        std::fs::create_dir_all(&settings.data_dir)
            .with_context(|| format!("creating data directory {}", settings.data_dir.display()))?;
    }
    let pool = PoolSettings { max_connections: settings.database_max_connections, ..PoolSettings::default() };
    let db = Db::connect(&settings.database_url, &pool)
        .await
        .with_context(|| format!("connecting to {}", redact_url(&settings.database_url)))?;
    db.migrate().await.context("database migration failed; refusing to start")?;
    Ok(db)
}

impl Application {
    pub async fn build(settings: Settings) -> anyhow::Result<Application> {
        let db = connect_and_migrate(&settings).await?;
        let redis = match &settings.redis_url {
            Some(url) => Some(Arc::new(RedisProbe::new(
                redis::Client::open(url.as_str()).context("opening Redis client")?,
            ))),
            None => None,
        };
        let health = Arc::new(Health::new(db.clone(), redis));
        let listener = TcpListener::bind(settings.listen)
            .await
            .with_context(|| format!("binding {}", settings.listen))?;
        let address = listener.local_addr().context("reading the bound address")?;
        let leptos_options = LeptosOptions::builder()
            .output_name("sluice")
            .site_root(settings.site_root.to_string_lossy().into_owned())
            .site_pkg_dir("pkg")
            .site_addr(address)
            .build();
        let state = AppState {
            settings: Arc::new(settings),
            db,
            health: health.clone(),
            leptos_options,
            prometheus: crate::telemetry::prometheus(),
            app_context: AppContext::new(health),
        };
        Ok(Application { listener, address, state })
    }

    /// The address actually bound (port 0 in tests becomes a real port).
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    pub fn state(&self) -> &AppState {
        &self.state
    }

    /// Serve until `shutdown` completes, then finish in-flight requests.
    pub async fn run_until_stopped(self, shutdown: impl Future<Output = ()> + Send + 'static) -> anyhow::Result<()> {
        let router = crate::http::router(self.state.clone());
        axum::serve(self.listener, router.into_make_service())
            .with_graceful_shutdown(shutdown)
            .await
            .context("HTTP server failed")?;
        self.state.db.close().await;
        Ok(())
    }
}

/// Completes on Ctrl-C or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
    tracing::info!("shutting down");
}
