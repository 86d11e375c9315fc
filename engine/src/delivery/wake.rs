//! Waking idle delivery workers when new work is stored, instead of leaving
//! it until their next poll.
//!
//! Within one instance intake calls [`Wake::notify`] after it commits. Across
//! instances on PostgreSQL, intake's transaction sends `NOTIFY` on
//! [`NEW_WORK_CHANNEL`] (delivered at commit) and [`listen`] turns each
//! notification into a [`Wake::notify`]. Polling stays as the fallback:
//! a lost notification only costs the idle pause.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::PgListener;
use tokio::sync::Notify;

pub use super::batch::NEW_WORK_CHANNEL;
use crate::log_throttle::{LogThrottle, DEFAULT_PERIOD};

/// A wake-up signal for one instance's worker. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct Wake(Arc<Notify>);

impl Wake {
    /// New work is stored. A worker that is busy now steps again at once
    /// when it is done (the wake-up is kept, not lost).
    pub fn notify(&self) {
        self.0.notify_one();
    }

    pub async fn notified(&self) {
        self.0.notified().await;
    }
}

/// Listen on PostgreSQL at `url` for other instances' new work and wake
/// `wake` for each, until `shutdown`. Reconnects by itself after the
/// database went away (and wakes once then: notifications sent meanwhile
/// were lost).
pub async fn listen(url: String, wake: Wake, shutdown: impl Future<Output = ()>) {
    static THROTTLE: LogThrottle = LogThrottle::new(DEFAULT_PERIOD);
    tokio::pin!(shutdown);
    loop {
        let connect = async {
            let mut l = PgListener::connect(&url).await?;
            l.listen(NEW_WORK_CHANNEL).await?;
            Ok::<_, sqlx::Error>(l)
        };
        let connected = tokio::select! {
            _ = &mut shutdown => return,
            r = connect => r,
        };
        match connected {
            Ok(mut listener) => {
                wake.notify();
                loop {
                    let got = tokio::select! {
                        _ = &mut shutdown => return,
                        r = listener.recv() => r,
                    };
                    match got {
                        Ok(_) => wake.notify(),
                        Err(e) => {
                            THROTTLE.warn("listening for new deliveries", &e);
                            break;
                        }
                    }
                }
            }
            Err(e) => THROTTLE.warn("listening for new deliveries", &e),
        }
        tokio::select! {
            _ = &mut shutdown => return,
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    }
}
