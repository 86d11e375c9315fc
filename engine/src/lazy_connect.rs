//! Connect on first use, retry at a bounded rate while the server is down:
//! what the quota and breaker stores' lazy Redis wrappers share, so an
//! instance can start (and show its pages) during a Redis outage.

use std::fmt;
use std::future::Future;
use std::time::{Duration, Instant};

use tokio::sync::{Mutex, OnceCell};

use crate::redis_conn::RedisSettings;

/// Connect attempts are at most this frequent; calls in between fail fast.
pub(crate) const CONNECT_EVERY: Duration = Duration::from_millis(500);

/// A connection made by the first call that needs it.
#[derive(Debug)]
pub(crate) struct LazyConnection<T> {
    conn: OnceCell<T>,
    last_attempt: Mutex<Option<Instant>>,
}

impl<T> LazyConnection<T> {
    pub(crate) fn new() -> Self {
        LazyConnection { conn: OnceCell::new(), last_attempt: Mutex::new(None) }
    }

    pub(crate) fn is_connected(&self) -> bool {
        self.conn.initialized()
    }

    /// The connection if one was made, without trying to make one.
    pub(crate) fn connected(&self) -> Option<&T> {
        self.conn.get()
    }

    /// The connection, made by `connect` if there is none yet. `Err(None)`:
    /// an attempt failed less than [`CONNECT_EVERY`] ago, so this call fails
    /// fast; `Err(Some(e))`: this call's own attempt failed with `e`.
    ///
    /// The lock is held through an attempt: a call that arrives while a
    /// connect is in flight waits for its outcome instead of failing as if
    /// the server were down (at start-up the first user's sign-in raced the
    /// history sampler's first call and was refused).
    pub(crate) async fn get_or_connect<E, F>(&self, connect: impl FnOnce() -> F) -> Result<&T, Option<E>>
    where
        F: std::future::Future<Output = Result<T, E>>,
    {
        if let Some(conn) = self.conn.get() {
            return Ok(conn);
        }
        let mut last = self.last_attempt.lock().await;
        if let Some(conn) = self.conn.get() {
            return Ok(conn);
        }
        if last.is_some_and(|t| t.elapsed() < CONNECT_EVERY) {
            return Err(None);
        }
        *last = Some(Instant::now());
        let conn = connect().await.map_err(Some)?;
        Ok(self.conn.get_or_init(|| async move { conn }).await)
    }
}

/// A Redis-backed store that connects from settings.
pub(crate) trait ConnectRedis: Sized + Send + Sync {
    type Error: fmt::Display;
    /// What connects, for the log lines (`quota store`, `breaker store`).
    const NAME: &'static str;
    fn connect(settings: &RedisSettings) -> impl Future<Output = Result<Self, Self::Error>> + Send;
    /// The error of a call made while not connected and not trying again yet.
    fn not_connected(e: NotConnected) -> Self::Error;
}

#[derive(Debug, thiserror::Error)]
#[error("not connected to Redis yet")]
pub(crate) struct NotConnected;

/// A Redis store made by the first call that needs it. Until a connection
/// succeeds every call fails with `S::not_connected` (or the attempt's own
/// error); once connected, the store's connection manager reconnects itself.
pub(crate) struct LazyRedis<S> {
    settings: RedisSettings,
    conn: LazyConnection<S>,
}

impl<S> fmt::Debug for LazyRedis<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LazyRedis")
            .field("prefix", &self.settings.prefix)
            .field("connected", &self.conn.is_connected())
            .finish()
    }
}

impl<S: ConnectRedis> LazyRedis<S> {
    /// Nothing is connected here; the first call tries (one node or a
    /// cluster, as `settings` say).
    pub(crate) fn new(settings: RedisSettings) -> Self {
        LazyRedis { settings, conn: LazyConnection::new() }
    }

    /// The store if it has connected, without trying to connect.
    pub(crate) fn connected(&self) -> Option<&S> {
        self.conn.connected()
    }

    pub(crate) async fn get(&self) -> Result<&S, S::Error> {
        let connect = || async {
            let store = S::connect(&self.settings).await;
            match &store {
                Ok(_) => tracing::info!(prefix = %self.settings.prefix, "{} connected to Redis", S::NAME),
                Err(e) => tracing::warn!(error = %e, "{}: Redis not reachable yet", S::NAME),
            }
            store
        };
        self.conn
            .get_or_connect(connect)
            .await
            .map_err(|e| e.unwrap_or_else(|| S::not_connected(NotConnected)))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    #[tokio::test]
    async fn a_call_during_an_attempt_gets_its_connection_and_a_failed_attempt_makes_the_next_fail_fast() {
        let attempts = AtomicU32::new(0);
        let connect = |ok: bool| {
            let attempts = &attempts;
            move || async move {
                attempts.fetch_add(1, Ordering::Relaxed);
                tokio::task::yield_now().await;
                if ok { Ok("conn") } else { Err("refused") }
            }
        };

        let lazy = LazyConnection::new();
        let (a, b) = tokio::join!(lazy.get_or_connect(connect(true)), lazy.get_or_connect(connect(true)));
        assert_eq!((a, b), (Ok(&"conn"), Ok(&"conn")));
        assert_eq!(attempts.load(Ordering::Relaxed), 1, "the second call waited for the first attempt");

        let down = LazyConnection::<&str>::new();
        assert_eq!(down.get_or_connect(connect(false)).await, Err(Some("refused")));
        assert_eq!(down.get_or_connect(connect(true)).await, Err(None), "within CONNECT_EVERY: no new attempt");
        assert_eq!(attempts.load(Ordering::Relaxed), 2);
        assert!(!down.is_connected());
    }
}
