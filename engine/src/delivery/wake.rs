//! Waking idle delivery workers when new work is stored, instead of leaving
//! it until their next poll.
//!
//! Within one instance intake calls [`Wake::notify`] after it commits. Across
//! instances on PostgreSQL, intake's transaction sends `NOTIFY` on
//! [`NEW_WORK_CHANNEL`] (delivered at commit) and [`listen`] turns each
//! notification into a [`Wake::notify`]. Polling stays as the fallback:
//! a lost notification only costs the idle pause.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::PgListener;
use tokio::sync::Notify;

pub use super::batch::NEW_WORK_CHANNEL;
use crate::log_throttle::{LogThrottle, DEFAULT_PERIOD};

/// A wake-up signal for one instance's worker. Cheap to clone.
///
/// Wake-ups that arrive while one is already on its way are absorbed into
/// it: one step loop answers them all with one claim
/// ([`Wake::claiming`] marks the moment it reads the queue). Without that,
/// every intake commit (and its own `NOTIFY`, heard back) sent a step of
/// its own to claim the handful of rows it stored, and under a steady
/// stream of single events the database spent more round trips on claims
/// than on the events.
#[derive(Debug, Clone, Default)]
pub struct Wake(Arc<Inner>);

#[derive(Debug, Default)]
struct Inner {
    notify: Notify,
    /// A wake-up is on its way: a step was notified and has not claimed yet.
    pending: AtomicBool,
}

impl Wake {
    /// New work is stored. A worker that is busy now steps again at once
    /// when it is done (the wake-up is kept, not lost).
    pub fn notify(&self) {
        if !self.0.pending.swap(true, Ordering::AcqRel) {
            self.0.notify.notify_one();
        }
    }

    pub async fn notified(&self) {
        self.0.notify.notified().await;
    }

    /// A step is about to claim: whatever was stored before now is in its
    /// reach, and a later store needs a wake-up of its own. Call it before
    /// the claim reads the queue, never after (a store between the read and
    /// this would be left to the next poll).
    pub fn claiming(&self) {
        self.0.pending.store(false, Ordering::Release);
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

#[cfg(test)]
mod tests {
    use futures::FutureExt;

    use super::*;

    #[test]
    fn wake_ups_while_one_is_on_its_way_are_absorbed_until_a_step_claims() {
        let wake = Wake::default();
        wake.notify();
        wake.notify();
        wake.notify();
        assert!(wake.notified().now_or_never().is_some(), "the first wake-up is kept for a busy step");
        assert!(wake.notified().now_or_never().is_none(), "the two after it joined the first");
        wake.notify();
        assert!(wake.notified().now_or_never().is_none(), "no step has claimed yet: still absorbed");
        wake.claiming();
        wake.notify();
        assert!(wake.notified().now_or_never().is_some(), "after a claim, new work wakes a step again");
    }
}
