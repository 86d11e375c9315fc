//! Deliveries claimed at intake: this instance's intake stores a fresh
//! delivery already claimed for this instance's own steps (DELIVERING, under
//! the hand-off's lease owner) and hands its id over in memory, so the step
//! that sends it does not claim it from the database first.
//!
//! Without it every delivery was written three times: inserted PENDING,
//! claimed (DELIVERING), finished. Each write is a new row version in most
//! of `deliveries`' indexes, and the claim is a statement and a transaction
//! of its own; with the hand-off a delivery accepted by an instance that
//! also delivers is written twice (docs/decisions.md, "Intake hands its
//! deliveries to its own steps").
//!
//! The server uses it on PostgreSQL, where the claim's `UPDATE` was the
//! most expensive statement per delivery; on SQLite the one step claims
//! whole batches faster than it takes the hand-off's smaller ones.
//!
//! Nothing is lost when the process is not there to send: a claimed row
//! carries a lease like any other, and once it runs out any step of any
//! instance claims it from the database ([`super::store::DeliveryStore::claim`]).
//! At shutdown the server puts what is left back to PENDING
//! ([`super::store::DeliveryStore::release_claims`]). The hand-off is bounded: when it is full, intake stores PENDING rows as
//! before and every instance's steps claim them. Ids that waited longer
//! than half the lease are left to that reclaim rather than sent late.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use super::model::DeliveryId;
use crate::clock::Timestamp;

/// The hand-off between one instance's intake and its delivery steps.
/// Cheap to clone.
#[derive(Debug, Clone)]
pub struct Handoff(Arc<Inner>);

#[derive(Debug)]
struct Inner {
    owner: String,
    capacity: usize,
    lease: Duration,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Claimed ids in intake order, with the time their lease began.
    queue: VecDeque<(DeliveryId, Timestamp)>,
    /// Places promised to intake transactions still in flight.
    reserved: usize,
}

/// An id a step took from the hand-off, with the time its lease began.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handed {
    pub id: DeliveryId,
    pub leased_at: Timestamp,
}

/// Places in the hand-off promised to one intake transaction. Give it back
/// with [`Handoff::fill`] (committed) or drop it (nothing stored).
#[derive(Debug)]
pub struct Reservation {
    handoff: Handoff,
    places: usize,
}

impl Handoff {
    /// A hand-off of at most `capacity` ids, whose rows are claimed under
    /// `owner` for `lease` (the steps' lease, so a row waits no longer than
    /// a claimed one could).
    pub fn new(owner: String, capacity: usize, lease: Duration) -> Handoff {
        Handoff(Arc::new(Inner { owner, capacity, lease, state: Mutex::new(State::default()) }))
    }

    /// The lease owner the rows are stored under.
    pub fn owner(&self) -> &str {
        &self.0.owner
    }

    /// How long the rows' lease lasts.
    pub fn lease(&self) -> Duration {
        self.0.lease
    }

    /// Promise up to `wanted` places to an intake transaction.
    pub fn reserve(&self, wanted: usize) -> Reservation {
        let mut s = self.state();
        let free = self.0.capacity.saturating_sub(s.queue.len() + s.reserved);
        let places = wanted.min(free);
        s.reserved += places;
        Reservation { handoff: self.clone(), places }
    }

    /// Ids stored claimed under a reservation (at most its places), whose
    /// lease began at `at`.
    pub fn fill(&self, mut r: Reservation, ids: impl IntoIterator<Item = DeliveryId>, at: Timestamp) {
        let mut s = self.state();
        let places = std::mem::take(&mut r.places);
        s.reserved -= places;
        s.queue.extend(ids.into_iter().take(places).map(|id| (id, at)));
    }

    /// Up to `max` ids for a step at `now`, oldest first. Ids that waited
    /// half their lease or more are dropped: their rows are reclaimed from
    /// the database once the lease runs out.
    pub fn take(&self, max: usize, now: Timestamp) -> Vec<Handed> {
        let mut s = self.state();
        let stale = now - self.0.lease / 2;
        while s.queue.front().is_some_and(|(_, at)| *at <= stale) {
            s.queue.pop_front();
        }
        let n = max.min(s.queue.len());
        s.queue.drain(..n).map(|(id, leased_at)| Handed { id, leased_at }).collect()
    }

    /// Ids a step took but could not finish (the database went away half
    /// way): first in line for the next step, in their order.
    pub fn put_back(&self, handed: Vec<Handed>) {
        let mut s = self.state();
        for h in handed.into_iter().rev() {
            s.queue.push_front((h.id, h.leased_at));
        }
    }

    /// Ids waiting now.
    pub fn len(&self) -> usize {
        self.state().queue.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // The state is consistent after every statement; a panic elsewhere
        // while holding the lock leaves nothing half done.
        self.0.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Reservation {
    /// How many rows the transaction may store claimed.
    pub fn places(&self) -> usize {
        self.places
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if self.places > 0 {
            self.handoff.state().reserved -= self.places;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taken(h: &Handoff, now: Timestamp) -> Vec<DeliveryId> {
        h.take(usize::MAX, now).into_iter().map(|t| t.id).collect()
    }

    fn ids(n: usize) -> Vec<DeliveryId> {
        (0..n).map(|_| DeliveryId::generate()).collect()
    }

    #[test]
    fn reservations_never_promise_more_than_the_capacity() {
        let h = Handoff::new("intake".into(), 5, Duration::from_secs(60));
        let t = Timestamp::from_millis(1_000);
        let a = h.reserve(3);
        let b = h.reserve(3);
        assert_eq!((a.places(), b.places()), (3, 2));
        assert_eq!(h.reserve(1).places(), 0, "all five places are promised");
        drop(b); // that transaction failed: its places are free again
        let batch = ids(3);
        h.fill(a, batch.clone(), t);
        assert_eq!(h.reserve(9).places(), 2);
        assert_eq!(taken(&h, t), batch);
    }

    #[test]
    fn ids_that_waited_half_the_lease_are_left_to_the_reclaim() {
        let h = Handoff::new("intake".into(), 10, Duration::from_secs(60));
        let t0 = Timestamp::from_millis(1_000_000);
        let old = ids(2);
        let fresh = ids(2);
        h.fill(h.reserve(2), old, t0);
        h.fill(h.reserve(2), fresh.clone(), t0 + Duration::from_secs(20));
        assert_eq!(taken(&h, t0 + Duration::from_secs(30)), fresh);
        assert!(h.is_empty());
    }

    #[test]
    fn put_back_ids_come_first_in_their_order() {
        let h = Handoff::new("intake".into(), 10, Duration::from_secs(60));
        let t = Timestamp::from_millis(5_000);
        let (first, later) = (ids(2), ids(1));
        h.fill(h.reserve(3), [first.clone(), later.clone()].concat(), t);
        let back = h.take(2, t);
        assert_eq!(back.iter().map(|b| b.id.clone()).collect::<Vec<_>>(), first);
        h.put_back(back);
        assert_eq!(taken(&h, t), [first, later].concat());
    }
}
