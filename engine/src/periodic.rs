//! Background loops: run a step every period until shutdown. The loops of
//! the reloaders, the history sampler and the idle-bucket sweep differ
//! only in their step; the reloaders of the limit rules and the retry
//! profiles differ only in their [`VersionedSet`].

use std::future::Future;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

/// Run `step` at once and then every `period` (a late tick delays the next
/// rather than bunching up) until `shutdown` resolves. A step in progress
/// is finished first only if it completes before shutdown is next polled.
pub async fn every<F, Fut>(period: Duration, shutdown: impl Future<Output = ()>, mut step: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = ()>,
{
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => return,
            _ = tick.tick() => step().await,
        }
    }
}

/// A set kept in the database under a version number that moves with every
/// change (limit rules, retry profiles), and the in-memory copy that is in
/// force on this instance.
pub trait VersionedSet: Send + Sync {
    type Error: std::error::Error + Send + Sync + 'static;

    /// What the set is, for the log line when a reload fails ("limit rules").
    const WHAT: &'static str;

    /// The database's version: one indexed single-row read.
    fn version(&self) -> impl Future<Output = Result<i64, Self::Error>> + Send;

    /// Read the whole set, put it in force, and return the version read.
    fn install(&self) -> impl Future<Output = Result<i64, Self::Error>> + Send;
}

/// Keeps one instance's copy of a [`VersionedSet`] in step with the
/// database: poll the version, reload only when it moved. Edits made on
/// other instances (or straight in the database) are live here one period
/// later.
#[derive(Debug)]
pub struct Reloader<S> {
    set: S,
    loaded: AtomicI64,
}

impl<S: VersionedSet> Reloader<S> {
    /// Call [`Reloader::run_once`] (or `run`) to load the first set.
    pub fn of(set: S) -> Reloader<S> {
        Reloader { set, loaded: AtomicI64::new(-1) }
    }

    /// One poll: reload and swap if the version moved. Returns whether it did.
    pub async fn run_once(&self) -> Result<bool, S::Error> {
        if self.set.version().await? == self.loaded.load(Ordering::SeqCst) {
            return Ok(false);
        }
        let version = self.set.install().await?;
        self.loaded.store(version, Ordering::SeqCst);
        Ok(true)
    }

    /// Poll every `period` until `shutdown` resolves. Errors are logged and
    /// the set in force stays.
    pub async fn run(self, period: Duration, shutdown: impl Future<Output = ()>) {
        every(period, shutdown, || async {
            if let Err(e) = self.run_once().await {
                tracing::warn!(error = &e as &dyn std::error::Error, "reloading {} failed; keeping the ones in force", S::WHAT);
            }
        })
        .await
    }
}
