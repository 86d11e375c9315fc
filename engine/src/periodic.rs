//! Background loops: run a step every period until shutdown. The loops of
//! the rule reloader, the history sampler and the idle-bucket sweep differ
//! only in their step.

use std::future::Future;
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
