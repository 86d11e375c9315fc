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
//!
//! With one transaction at a time (the default), the transactions run on the
//! collector's own task and, on PostgreSQL, through one connection it keeps
//! (`Held`).
//!
//! With a [`Handoff`] (an instance that also delivers), new deliveries are
//! stored claimed for this instance's steps while the hand-off has room,
//! and their ids handed over in memory ([`super::handoff`]).

use std::sync::Arc;
use std::time::Instant;

use sqlx::pool::PoolConnection;
use sqlx::Any;
use tokio::sync::{mpsc, oneshot, Semaphore};

use super::batch::ClaimAtIntake;
use super::handoff::Handoff;
use super::model::{Accepted, DeliveryId, EventIn};
use super::store::{DeliveryStore, StoreError};
use super::wake::Wake;
use crate::clock::Timestamp;
use crate::db::{ping_if_idle, Backend};

/// How many calls one transaction stores at most.
pub const DEFAULT_MAX_BATCH: usize = 256;
/// How many intake transactions run at once. One: the calls that arrive
/// while it commits form the next batch. With sixteen producers posting one
/// event each, four at once split the calls into small groups and
/// PostgreSQL spent its CPU on their commits (1.07 database transactions per
/// delivered event, against 0.71 with two); one makes the groups larger
/// still, and in alternating pairs it delivered as fast as two or faster
/// with about a tenth less CPU in PostgreSQL and in the server
/// (docs/benchmarks.md, "One intake transaction at a time"). A batch
/// producer's call (`accept_many`) is its own transaction and does not wait
/// for this one.
pub const DEFAULT_MAX_IN_FLIGHT: usize = 1;

type Reply = oneshot::Sender<Result<Accepted, StoreError>>;
/// A queued call: its event, when it was made, and where its answer goes.
type Call = (EventIn, Timestamp, Reply);

/// The intake queue. Cheap to clone; the collector task ends when the last
/// clone is dropped.
#[derive(Debug, Clone)]
pub struct Intake {
    queue: mpsc::UnboundedSender<Call>,
    target: Target,
}

/// Where a batch goes. Kept apart from the queue's sender, so the
/// collector (which owns one) does not keep its own queue open.
#[derive(Debug, Clone)]
struct Target {
    store: DeliveryStore,
    wake: Wake,
    handoff: Option<Handoff>,
}

impl Intake {
    /// Start the collector on the current tokio runtime. With `handoff`,
    /// new deliveries go to this instance's steps claimed while it has room.
    pub fn start(store: DeliveryStore, wake: Wake, max_batch: usize, max_in_flight: usize, handoff: Option<Handoff>) -> Intake {
        let (queue, rx) = mpsc::unbounded_channel();
        let target = Target { store, wake, handoff };
        tokio::spawn(collect(rx, target.clone(), max_batch.max(1), max_in_flight.max(1)));
        Intake { queue, target }
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
        self.target.store_batch(events, now).await
    }
}

impl Target {
    /// One transaction: the events, claimed where the hand-off has room;
    /// then the hand-off filled and the steps woken.
    async fn store_batch(&self, events: &[EventIn], now: Timestamp) -> Result<Vec<Result<Accepted, StoreError>>, StoreError> {
        self.store_batch_on(None, events, now).await
    }

    /// [`Target::store_batch`], on PostgreSQL through `held` when given.
    async fn store_batch_on(&self, held: Option<&mut Held>, events: &[EventIn], now: Timestamp) -> Result<Vec<Result<Accepted, StoreError>>, StoreError> {
        let reservation = self.handoff.as_ref().map(|h| h.reserve(events.len()));
        let claim = match (&self.handoff, &reservation) {
            (Some(h), Some(r)) if r.places() > 0 => Some(ClaimAtIntake { owner: h.owner(), until: now + h.lease(), places: r.places() }),
            _ => None,
        };
        let (answers, claimed): (_, Vec<DeliveryId>) = match held {
            Some(held) => {
                let stored = self.store.accept_events_on(Some(held.get(&self.store).await?), events, now, claim).await;
                held.after(stored.is_ok());
                stored?
            }
            None => self.store.accept_events_claiming(events, now, claim).await?,
        };
        if let (Some(h), Some(r)) = (&self.handoff, reservation) {
            h.fill(r, claimed, now);
        }
        if answers.iter().any(|a| a.as_ref().is_ok_and(|a| !a.duplicate)) {
            self.wake.notify();
        }
        Ok(answers)
    }
}

/// Intake's own connection on PostgreSQL, kept from one transaction to the
/// next. A pooled connection is pinged by sqlx on its way back to the pool,
/// a round trip and a database wake-up per transaction, and intake runs
/// hundreds a second; each batch size's statement is also prepared and
/// planned once per connection it runs on. Like a pooled connection
/// (`crate::db::ping_if_idle`), it is pinged before use once it sat
/// idle, and after a failed transaction it goes back to the pool (which
/// closes it if it is broken) and the next one takes a fresh one.
#[derive(Default)]
struct Held {
    conn: Option<PoolConnection<Any>>,
    used: Option<Instant>,
}

impl Held {
    async fn get(&mut self, store: &DeliveryStore) -> Result<&mut sqlx::AnyConnection, StoreError> {
        if let (Some(conn), Some(used)) = (self.conn.as_mut(), self.used) {
            if ping_if_idle(conn, used.elapsed()).await.is_err() {
                self.conn = None;
            }
        }
        let conn = match self.conn.take() {
            Some(conn) => conn,
            None => store.db().pool().acquire().await?,
        };
        Ok(&mut **self.conn.insert(conn))
    }

    fn after(&mut self, ok: bool) {
        if ok {
            self.used = Some(Instant::now());
        } else {
            self.conn = None;
        }
    }
}

async fn collect(mut rx: mpsc::UnboundedReceiver<Call>, target: Target, max_batch: usize, max_in_flight: usize) {
    if max_in_flight == 1 {
        // One transaction at a time runs on this task, on PostgreSQL through
        // a connection it keeps ([`Held`]): when it ends, the calls that
        // arrived meanwhile go out at once, not after a wake-up of this
        // task and of a spawned one.
        let mut held = (target.store.db().backend() == Backend::Postgres).then(Held::default);
        while let Some(first) = rx.recv().await {
            let batch = gather(&mut rx, first, max_batch);
            store(&target, held.as_mut(), batch).await;
        }
        return;
    }
    let slots = Arc::new(Semaphore::new(max_in_flight));
    while let Some(first) = rx.recv().await {
        // Wait for a free transaction slot first: calls that arrive meanwhile
        // join this batch.
        let Ok(slot) = slots.clone().acquire_owned().await else { return };
        let batch = gather(&mut rx, first, max_batch);
        let target = target.clone();
        tokio::spawn(async move {
            let _slot = slot;
            store(&target, None, batch).await;
        });
    }
}

/// `first` and the calls waiting behind it, up to `max_batch`.
fn gather(rx: &mut mpsc::UnboundedReceiver<Call>, first: Call, max_batch: usize) -> Vec<Call> {
    let mut batch = vec![first];
    while batch.len() < max_batch {
        match rx.try_recv() {
            Ok(call) => batch.push(call),
            Err(_) => break,
        }
    }
    batch
}

/// Store one batch of calls in one transaction and answer each caller.
async fn store(target: &Target, held: Option<&mut Held>, batch: Vec<Call>) {
    // One `now` for the transaction: the latest any caller read.
    let now = batch.iter().map(|(_, at, _)| *at).max().unwrap_or(Timestamp::from_millis(0));
    let (events, replies): (Vec<EventIn>, Vec<Reply>) = batch.into_iter().map(|(e, _, r)| (e, r)).unzip();
    match target.store_batch_on(held, &events, now).await {
        Ok(answers) => {
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
}
