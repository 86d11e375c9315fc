//! The quota math, pure: functions of `(state, now, limit, …)` with no IO and
//! no clock reads. The in-memory store runs these under a lock; the Redis
//! store runs the same math in `lua/quota.lua` (the contract suite holds both
//! to the same behaviour).
//!
//! Every algorithm books by *reservation*: a request gets the earliest instant
//! `at ≥ now` at which it may go, later requests queue behind it (FIFO), and
//! the caller sleeps `at − now`. If that wait is beyond the ceiling nothing is
//! booked and the refusal carries `retry_after = at − now`.
//!
//! All instants are microseconds since the Unix epoch.

use std::collections::VecDeque;
use std::time::Duration;

use crate::clock::{duration_micros, Timestamp};

use super::rule::{Algorithm, Limit};

/// What a bucket remembers. One struct for every algorithm: a rule edited to
/// another algorithm simply starts using other fields.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BucketState {
    /// Token bucket: theoretical arrival time (GCRA).
    pub tat: i64,
    /// Fixed window: index of the last window with bookings (`start / interval`).
    pub window: i64,
    /// Fixed window: tokens booked in `window`.
    pub used: u64,
    /// Sliding log: one entry per token granted or booked, ascending. Boxed,
    /// and absent until the first booking, so that the other algorithms'
    /// state fits in half a cache line next to its key (see `memory.rs`).
    pub log: Option<Box<VecDeque<i64>>>,
    /// Window algorithms: no grant before this instant (429 penalty, `Remaining: 0`).
    pub blocked_until: i64,
}

/// The outcome of one rate decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Booked: the caller may go after `wait`.
    Granted { wait: Duration },
    /// Not booked: the earliest slot is `retry_after` away, beyond the ceiling.
    Refused { retry_after: Duration },
}

/// Usage of a bucket, read without consuming.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Usage {
    /// Tokens a request could take right now without waiting.
    pub remaining: u64,
    /// The most the bucket holds (`burst` or `tokens`).
    pub capacity: u64,
    /// How long a cost-1 request arriving now would wait.
    pub next_in: Duration,
}

fn interval_us(limit: &Limit) -> i64 {
    duration_micros(limit.interval).max(1)
}

/// GCRA increment for `cost` tokens (µs), rounded up so rounding never
/// grants extra. Also a high lane's reserve ([`super::lane::reserve`]).
pub(crate) fn gcra_increment(limit: &Limit, cost: u64) -> i64 {
    let den = u64::from(limit.tokens.max(1));
    // 64-bit fast path (validated rules always take it); 128-bit otherwise.
    match cost.checked_mul(interval_us(limit).unsigned_abs()) {
        Some(num) => i64::try_from(num.div_ceil(den)).unwrap_or(i64::MAX),
        None => {
            let num = u128::from(cost) * u128::from(interval_us(limit).unsigned_abs());
            i64::try_from(num.div_ceil(u128::from(den))).unwrap_or(i64::MAX)
        }
    }
}

/// GCRA burst tolerance span, rounded down for the same reason.
fn gcra_span(limit: &Limit) -> i64 {
    if limit.burst == limit.tokens {
        // The usual rule (burst defaults to tokens): exactly one interval,
        // without the division below.
        return interval_us(limit);
    }
    let den = u64::from(limit.tokens.max(1));
    match u64::from(limit.burst).checked_mul(interval_us(limit).unsigned_abs()) {
        Some(num) => i64::try_from(num / den).unwrap_or(i64::MAX),
        None => {
            let num = u128::from(limit.burst) * u128::from(interval_us(limit).unsigned_abs());
            i64::try_from(num / u128::from(den)).unwrap_or(i64::MAX)
        }
    }
}

/// Drop sliding-log entries that no window containing `now` can see.
fn prune(state: &mut BucketState, now: i64, w: i64) {
    if let Some(log) = state.log.as_mut() {
        while log.front().is_some_and(|&e| e <= now - w) {
            log.pop_front();
        }
    }
}

impl BucketState {
    fn log_len(&self) -> u64 {
        self.log.as_ref().map_or(0, |log| log.len() as u64)
    }

    fn log_last(&self) -> Option<i64> {
        self.log.as_ref().and_then(|log| log.back().copied())
    }

    fn log_mut(&mut self) -> &mut VecDeque<i64> {
        self.log.get_or_insert_with(Box::default)
    }
}

/// A token-bucket request of `cost`: the instant it may go, and the
/// theoretical arrival time once it is booked.
#[inline]
fn gcra_booking(state: &BucketState, now: i64, limit: &Limit, cost: u64) -> (i64, i64) {
    let tat = state.tat.max(now) + gcra_increment(limit, cost);
    ((tat - gcra_span(limit)).max(now), tat)
}

/// How long until a token bucket holds `cost` tokens and one more, without
/// booking anything: zero when it does now. The low lane's check that it
/// leaves a token to the others ([`super::lane`]). Exact, unlike a booking of
/// `cost + 1` (whose increments round up and whose span rounds down, so a
/// full bucket of 2 could never pass it): the bucket's debt (`tat − now`)
/// may be at most `(burst − cost − 1) × interval / tokens`, rounded down.
pub(crate) fn token_bucket_wait_leaving_one(state: &BucketState, now: Timestamp, limit: &Limit, cost: u32) -> Duration {
    let now = now.as_micros();
    let spare = u128::from(limit.burst.saturating_sub(cost.max(1)).saturating_sub(1));
    let allowed = spare * u128::from(interval_us(limit).unsigned_abs()) / u128::from(limit.tokens.max(1));
    let debt = state.tat.max(now) - now;
    Duration::from_micros(u64::try_from(i128::from(debt) - i128::try_from(allowed).unwrap_or(i128::MAX)).unwrap_or(0))
}

/// The earliest instant a request of `cost` may go, given the bookings so far.
fn earliest(state: &mut BucketState, now: i64, limit: &Limit, cost: u64) -> i64 {
    let w = interval_us(limit);
    match limit.algorithm {
        Algorithm::TokenBucket => gcra_booking(state, now, limit, cost).0,
        Algorithm::FixedWindow => {
            let (win, used) = fixed_cursor(state, now, w);
            let win = if used + cost > u64::from(limit.tokens) { win + 1 } else { win };
            (win * w).max(now).max(state.blocked_until)
        }
        Algorithm::SlidingLog => {
            prune(state, now, w);
            let mut at = now.max(state.blocked_until).max(state.log_last().unwrap_or(now));
            let allowed_others = u64::from(limit.tokens).saturating_sub(cost);
            if let Some(log) = state.log.as_ref().filter(|log| log.len() as u64 > allowed_others) {
                // The (m − allowed_others)-th entry must have left the window (t − w, t].
                let idx = usize::try_from(log.len() as u64 - allowed_others - 1).unwrap_or(0);
                at = at.max(log[idx] + w);
            }
            at
        }
    }
}

/// The window a fixed-window booking would go into, and what it already holds.
fn fixed_cursor(state: &BucketState, now: i64, w: i64) -> (i64, u64) {
    let current = now.div_euclid(w);
    let blocked = if state.blocked_until > now { state.blocked_until.div_euclid(w) } else { current };
    let floor = current.max(blocked);
    if state.window >= floor {
        (state.window, state.used)
    } else {
        (floor, 0)
    }
}

fn book(state: &mut BucketState, now: i64, at: i64, limit: &Limit, cost: u64) {
    let w = interval_us(limit);
    match limit.algorithm {
        Algorithm::TokenBucket => state.tat = gcra_booking(state, now, limit, cost).1,
        Algorithm::FixedWindow => {
            let win = at.div_euclid(w);
            let (cur, used) = fixed_cursor(state, now, w);
            state.used = if win == cur { used + cost } else { cost };
            state.window = win;
        }
        Algorithm::SlidingLog => {
            state.log_mut().extend(std::iter::repeat_n(at, cost as usize));
        }
    }
}

/// Decide one request of `cost` tokens (1 ≤ cost ≤ [`Limit::capacity`]):
/// book it and return the wait, or refuse without booking when the wait would
/// exceed `ceiling`.
#[inline]
pub fn decide(state: &mut BucketState, now: Timestamp, limit: &Limit, cost: u32, ceiling: Duration) -> Decision {
    let now = now.as_micros();
    let cost = u64::from(cost.max(1));
    let wait_for = |at: i64| Duration::from_micros(u64::try_from(at - now).unwrap_or(0));
    if limit.algorithm == Algorithm::TokenBucket {
        // The common rule, hot in every store: `earliest` and `book` in one,
        // so the increment's division is done once.
        let (at, tat) = gcra_booking(state, now, limit, cost);
        let wait = wait_for(at);
        if wait > ceiling {
            return Decision::Refused { retry_after: wait };
        }
        state.tat = tat;
        return Decision::Granted { wait };
    }
    let at = earliest(state, now, limit, cost);
    let wait = wait_for(at);
    if wait > ceiling {
        return Decision::Refused { retry_after: wait };
    }
    book(state, now, at, limit, cost);
    Decision::Granted { wait }
}

/// No grant before `until` (a 429 penalty or `Remaining: 0` until reset). For
/// the token bucket this drains the bucket: after the block, permits come at
/// the steady rate, not as a fresh burst.
pub fn block_until(state: &mut BucketState, limit: &Limit, until: Timestamp) {
    let until = until.as_micros();
    match limit.algorithm {
        Algorithm::TokenBucket => {
            state.tat = state.tat.max(until - gcra_increment(limit, 1) + gcra_span(limit));
        }
        Algorithm::FixedWindow | Algorithm::SlidingLog => state.blocked_until = state.blocked_until.max(until),
    }
}

/// An upstream 429: no permit before `now + max(floor, retry_after)`, where
/// `floor` is [`super::rule::Rule::penalty_floor`] (one token's refill, or the
/// rule's minimum back-off). Returns the instant the block ends.
pub fn penalize(
    state: &mut BucketState,
    now: Timestamp,
    limit: &Limit,
    floor: Duration,
    retry_after: Option<Duration>,
) -> Timestamp {
    let until = now + floor.max(retry_after.unwrap_or_default());
    block_until(state, limit, until);
    until
}

/// Upstream rate-limit headers: lower the bucket to `remaining`, never raise
/// it. `remaining == 0` blocks until `reset_in` (or one token's refill when
/// the upstream gave no reset).
pub fn observe(state: &mut BucketState, now: Timestamp, limit: &Limit, remaining: u64, reset_in: Option<Duration>) {
    if remaining == 0 {
        let until = now + reset_in.unwrap_or_else(|| limit.refill_one());
        block_until(state, limit, until);
        return;
    }
    let available = peek(state, now, limit).remaining;
    if available <= remaining {
        return;
    }
    let now_us = now.as_micros();
    let w = interval_us(limit);
    match limit.algorithm {
        Algorithm::TokenBucket => {
            // remaining tokens ⇔ tat = now + span − remaining × T
            let target = now_us + gcra_span(limit) - gcra_increment(limit, remaining);
            state.tat = state.tat.max(target);
        }
        Algorithm::FixedWindow => {
            let current = now_us.div_euclid(w);
            if state.window < current {
                state.window = current;
                state.used = 0;
            }
            if state.window == current {
                state.used = state.used.max(u64::from(limit.tokens).saturating_sub(remaining));
            }
        }
        Algorithm::SlidingLog => {
            let at = now_us.max(state.log_last().unwrap_or(now_us));
            state.log_mut().extend(std::iter::repeat_n(at, (available - remaining) as usize));
        }
    }
}

/// Read usage without consuming (pruning the sliding log is not consuming).
pub fn peek(state: &mut BucketState, now: Timestamp, limit: &Limit) -> Usage {
    let now_us = now.as_micros();
    let w = interval_us(limit);
    let capacity = u64::from(limit.capacity());
    let remaining = match limit.algorithm {
        Algorithm::TokenBucket => {
            let room = now_us + gcra_span(limit) - state.tat.max(now_us);
            let tokens = i128::from(room.max(0)) * i128::from(limit.tokens) / i128::from(w);
            u64::try_from(tokens).unwrap_or(0).min(capacity)
        }
        Algorithm::FixedWindow if state.blocked_until > now_us => 0,
        Algorithm::FixedWindow => {
            let current = now_us.div_euclid(w);
            match state.window.cmp(&current) {
                std::cmp::Ordering::Less => capacity,
                std::cmp::Ordering::Equal => capacity.saturating_sub(state.used),
                std::cmp::Ordering::Greater => 0,
            }
        }
        Algorithm::SlidingLog if state.blocked_until > now_us => 0,
        Algorithm::SlidingLog => {
            prune(state, now_us, w);
            capacity.saturating_sub(state.log_len())
        }
    };
    let at = earliest(state, now_us, limit, 1);
    Usage { remaining, capacity, next_in: Duration::from_micros(u64::try_from(at - now_us).unwrap_or(0)) }
}

/// The instant (µs since the epoch) from which the state reads as a full
/// bucket under `limit`: a decision, peek or penalty made then or later is
/// the same as on a fresh bucket, so a store may forget the state (memory:
/// the idle sweep; Redis: the key's TTL, `save` in `lua/quota.lua`).
pub fn relevant_until(state: &BucketState, limit: &Limit) -> i64 {
    let w = interval_us(limit);
    match limit.algorithm {
        Algorithm::TokenBucket => state.tat,
        Algorithm::FixedWindow => (state.window + 1).saturating_mul(w),
        Algorithm::SlidingLog => state.log_last().map_or(0, |e| e.saturating_add(w)),
    }
    .max(state.blocked_until)
}

#[cfg(test)]
#[path = "decision_tests.rs"]
mod tests;
