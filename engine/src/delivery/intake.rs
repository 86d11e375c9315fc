//! Group commit of concurrent intake calls.
//!
//! Each `POST /api/v1/events` used to be a transaction of its own: under many
//! concurrent producers the database spends its time on commits. [`Intake`]
//! queues the calls and stores whatever is waiting together, in one
//! transaction ([`DeliveryStore::accept_events`]), with at most
//! `max_in_flight` such transactions at once. Under light load a call is
//! stored at once, alone; under heavy load calls queue while the
//! transactions in flight finish, and the next one takes them all (up to
//! `max_batch`). No timer: a batch never waits for company.
//!
//! Each caller still gets its own answer (stored, duplicate, refused), and
//! idempotency holds within a batch too: the same key twice stores one event
//! and the second caller gets the first one's ids with `duplicate: true`.

use std::sync::Arc;

use tokio::sync::{mpsc, oneshot, Semaphore};

use super::model::{Accepted, EventIn};
use super::store::{DeliveryStore, StoreError};
use super::wake::Wake;
use crate::clock::Timestamp;

/// How many calls one transaction stores at most.
pub const DEFAULT_MAX_BATCH: usize = 256;
/// How many intake transactions run at once. Two, not more: with sixteen
/// producers posting one event each, four at once split the calls into
/// small groups and PostgreSQL spent its CPU on their commits; two make the
/// groups larger (1.07 → 0.71 database transactions per delivered event,
/// +27 % deliveries/s; docs/benchmarks.md, "Single events").
pub const DEFAULT_MAX_IN_FLIGHT: usize = 2;

type Reply = oneshot::Sender<Result<Accepted, StoreError>>;

/// The intake queue. Cheap to clone; the collector task ends when the last
/// clone is dropped.
#[derive(Debug, Clone)]
pub struct Intake {
    queue: mpsc::UnboundedSender<(EventIn, Timestamp, Reply)>,
    store: DeliveryStore,
    wake: Wake,
}

impl Intake {
    /// Start the collector on the current tokio runtime.
    pub fn start(store: DeliveryStore, wake: Wake, max_batch: usize, max_in_flight: usize) -> Intake {
        let (queue, rx) = mpsc::unbounded_channel();
        tokio::spawn(collect(rx, store.clone(), wake.clone(), max_batch.max(1), max_in_flight.max(1)));
        Intake { queue, store, wake }
    }

    /// Store one event, in a transaction shared with whatever calls are
    /// waiting alongside it.
    pub async fn accept(&self, event: EventIn, now: Timestamp) -> Result<Accepted, StoreError> {
        let (tx, rx) = oneshot::channel();
        if self.queue.send((event, now, tx)).is_err() {
            return Err(StoreError::Db(sqlx::Error::PoolClosed));
        }
        rx.await.unwrap_or(Err(StoreError::Db(sqlx::Error::PoolClosed)))
    }

    /// Store a producer's batch in one transaction: one answer per event, in
    /// order. The outer error means none was stored.
    pub async fn accept_many(&self, events: &[EventIn], now: Timestamp) -> Result<Vec<Result<Accepted, StoreError>>, StoreError> {
        let answers = self.store.accept_events(events, now).await?;
        if answers.iter().any(|a| a.as_ref().is_ok_and(|a| !a.duplicate)) {
            self.wake.notify();
        }
        Ok(answers)
    }
}

async fn collect(mut rx: mpsc::UnboundedReceiver<(EventIn, Timestamp, Reply)>, store: DeliveryStore, wake: Wake, max_batch: usize, max_in_flight: usize) {
    let slots = Arc::new(Semaphore::new(max_in_flight));
    while let Some(first) = rx.recv().await {
        // Wait for a free transaction slot first: calls that arrive meanwhile
        // join this batch.
        let Ok(slot) = slots.clone().acquire_owned().await else { return };
        let mut batch = vec![first];
        while batch.len() < max_batch {
            match rx.try_recv() {
                Ok(call) => batch.push(call),
                Err(_) => break,
            }
        }
        let (store, wake) = (store.clone(), wake.clone());
        tokio::spawn(async move {
            let _slot = slot;
            // One `now` for the transaction: the latest any caller read.
            let now = batch.iter().map(|(_, at, _)| *at).max().unwrap_or(Timestamp::from_millis(0));
            let (events, replies): (Vec<EventIn>, Vec<Reply>) = batch.into_iter().map(|(e, _, r)| (e, r)).unzip();
            match store.accept_events(&events, now).await {
                Ok(answers) => {
                    if answers.iter().any(|a| a.as_ref().is_ok_and(|a| !a.duplicate)) {
                        wake.notify();
                    }
                    for (reply, answer) in replies.into_iter().zip(answers) {
                        let _ = reply.send(answer);
                    }
                }
                Err(e) => {
                    let shared = Arc::new(e);
                    for reply in replies {
                        let _ = reply.send(Err(StoreError::Batch(shared.clone())));
                    }
                }
            }
        });
    }
}
