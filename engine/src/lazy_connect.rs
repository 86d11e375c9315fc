//! Connect on first use, retry at a bounded rate while the server is down:
//! the part the quota and breaker stores' lazy Redis wrappers share.

use std::time::{Duration, Instant};

use tokio::sync::{Mutex, OnceCell};

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
