//! Health of the dependencies: the database always, Redis when configured.
//! Shared by `/readyz` and the Overview page.

use std::sync::Arc;
use std::time::Duration;

use sluice_app::model::{ComponentState, HealthView};
use sluice_app::ssr::{BoxFuture, HealthCheck};
use sluice_engine::db::Db;
use sluice_engine::log_throttle::{self, LogThrottle};
use sluice_engine::quota::{Limiter, StoreHealth};
use tokio::sync::Mutex;

/// How long a probe may take before the dependency counts as down. Short on
/// purpose: a readiness probe must answer quickly when a dependency hangs.
const PROBE_TIMEOUT: Duration = Duration::from_millis(800);

/// Pings Redis over one cached multiplexed connection, reconnecting after a failure.
pub struct RedisProbe {
    client: redis::Client,
    conn: Mutex<Option<redis::aio::MultiplexedConnection>>,
}

impl RedisProbe {
    pub fn new(client: redis::Client) -> Self {
        RedisProbe { client, conn: Mutex::new(None) }
    }

    async fn ping(&self) -> Result<(), String> {
        let mut slot = self.conn.lock().await;
        if slot.is_none() {
            let config = redis::AsyncConnectionConfig::new()
                .set_connection_timeout(Some(PROBE_TIMEOUT))
                .set_response_timeout(Some(PROBE_TIMEOUT));
            let conn = tokio::time::timeout(
                PROBE_TIMEOUT,
                self.client.get_multiplexed_async_connection_with_config(&config),
            )
            .await
            .map_err(|_| "connect timed out".to_owned())?
            .map_err(|e| short(&e))?;
            *slot = Some(conn);
        }
        let Some(conn) = slot.as_mut() else { return Err("no connection".to_owned()) };
        let result: Result<String, String> =
            match tokio::time::timeout(PROBE_TIMEOUT, redis::cmd("PING").query_async(conn)).await {
                Ok(r) => r.map_err(|e| short(&e)),
                Err(_) => Err("PING timed out".to_owned()),
            };
        if result.is_err() {
            *slot = None;
        }
        result.map(|_| ())
    }
}

fn short(e: &redis::RedisError) -> String {
    // The kind and detail are enough for an operator; the URL is not repeated.
    e.to_string()
}

/// The deployment's health checker.
pub struct Health {
    db: Db,
    redis: Option<Arc<RedisProbe>>,
    limiter: Limiter,
}

impl Health {
    pub fn new(db: Db, redis: Option<Arc<RedisProbe>>, limiter: Limiter) -> Self {
        Health { db, redis, limiter }
    }

    pub async fn report(&self) -> HealthView {
        let database = match tokio::time::timeout(PROBE_TIMEOUT, self.db.ping()).await {
            Ok(Ok(())) => ComponentState::Up,
            Ok(Err(e)) => {
                static THROTTLE: LogThrottle = LogThrottle::new(log_throttle::DEFAULT_PERIOD);
                THROTTLE.warn("database ping failed", &e);
                ComponentState::Down("database not answering".to_owned())
            }
            Err(_) => ComponentState::Down("database ping timed out".to_owned()),
        };
        let (quota_store, redis) = match &self.redis {
            None => ("memory", ComponentState::NotConfigured),
            Some(probe) => (
                "redis",
                match probe.ping().await {
                    Ok(()) => ComponentState::Up,
                    Err(why) => {
                        static THROTTLE: LogThrottle = LogThrottle::new(log_throttle::DEFAULT_PERIOD);
                        if let Some(quiet) = THROTTLE.hit() {
                            tracing::warn!(error = %why, similar_since_last = quiet, "redis ping failed");
                        }
                        ComponentState::Down(why)
                    }
                },
            ),
        };
        HealthView {
            database_backend: self.db.backend().to_string(),
            database,
            quota_store: quota_store.to_owned(),
            redis,
            quota_mode: match self.limiter.health() {
                StoreHealth::Healthy => "healthy",
                StoreHealth::Degraded => "degraded",
                StoreHealth::Unavailable => "unavailable",
            }
            .to_owned(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
        }
    }
}

impl HealthCheck for Health {
    fn check(&self) -> BoxFuture<'_, HealthView> {
        Box::pin(self.report())
    }
}
