//! Priority lanes: how far ahead a request of each [`Priority`] may book.
//!
//! Every booking is still a reservation in one queue (FIFO across and within
//! lanes, one atomic decision, one Redis round trip): a lane changes only the
//! request's booking horizon, the wait beyond which nothing is booked.
//!
//! - `normal`: the rule's wait ceiling, as without lanes.
//! - `high`: that ceiling plus one reserved slot of its own size
//!   ([`reserve`]): it may book one slot beyond the furthest slot `normal`
//!   may take, so a high request arriving while normal traffic has booked
//!   everything up to its ceiling still gets a slot.
//! - `low`: no horizon at all: a permit only when one is free *now*, never a
//!   booking into the future; and on a token bucket whose burst is larger
//!   than the request, only while one more token than it asks for is free:
//!   low leaves the last token of the bucket to the other lanes. Alone, low
//!   takes the whole rate (every token that comes back is free now for the
//!   next low request; only the burst's last token stays unused); next to
//!   other lanes it never holds a slot they could want, so a high request
//!   behind any amount of low traffic waits at most one reserved slot, and
//!   on a token bucket with a burst of 2 or more, not at all once a token has
//!   come back since the last high or normal booking.
//!
//! Nothing is granted beyond what the rule allows: lanes only refuse more.
//! The Redis script (`lua/quota.lua`, `lane_horizon` and the low lane's
//! check in `decide`) mirrors [`Priority::decide`].

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::decision::{self, gcra_increment, BucketState, Decision};
use super::rule::{Algorithm, Limit};
use crate::clock::Timestamp;

/// The lane a permit request asks in. Default `normal`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Priority {
    High,
    #[default]
    Normal,
    Low,
}

/// A priority name that is none of `high`, `normal`, `low`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("priority must be one of high, normal, low")]
pub struct InvalidPriority;

impl Priority {
    pub const ALL: [Priority; 3] = [Priority::High, Priority::Normal, Priority::Low];

    pub fn as_str(self) -> &'static str {
        match self {
            Priority::High => "high",
            Priority::Normal => "normal",
            Priority::Low => "low",
        }
    }

    /// Decide a request of `cost` in this lane ([`decision::decide`] within
    /// the lane's [`horizon`](Self::horizon)); `low` on a token bucket also
    /// leaves one token free for the other lanes when the burst allows it.
    pub fn decide(self, state: &mut BucketState, now: Timestamp, limit: &Limit, cost: u32, ceiling: Duration) -> Decision {
        if self == Priority::Low && limit.algorithm == Algorithm::TokenBucket && limit.burst > cost.max(1) {
            let short = decision::token_bucket_wait_leaving_one(state, now, limit, cost);
            if !short.is_zero() {
                return Decision::Refused { retry_after: short };
            }
        }
        decision::decide(state, now, limit, cost, self.horizon(limit, cost, ceiling))
    }

    /// The longest wait this lane may book, given the rule's wait ceiling
    /// for the call (`ceiling`, see [`super::Rule::wait_ceiling`]).
    pub fn horizon(self, limit: &Limit, cost: u32, ceiling: Duration) -> Duration {
        match self {
            Priority::High => ceiling.saturating_add(reserve(limit, cost)),
            Priority::Normal => ceiling,
            Priority::Low => Duration::ZERO,
        }
    }
}

/// How far beyond the normal ceiling a high request of `cost` may book: the
/// distance from the furthest slot normal traffic can hold to the next slot
/// that fits `cost` tokens. Token bucket: `cost` emission intervals
/// (`cost × interval / tokens`, rounded up as the bucket rounds). Fixed window
/// and sliding log: one interval (the next window; the interval after which
/// the log's entries at the horizon leave it).
pub fn reserve(limit: &Limit, cost: u32) -> Duration {
    match limit.algorithm {
        Algorithm::TokenBucket => {
            Duration::from_micros(u64::try_from(gcra_increment(limit, u64::from(cost.max(1)))).unwrap_or(u64::MAX))
        }
        Algorithm::FixedWindow | Algorithm::SlidingLog => limit.interval,
    }
}

impl fmt::Display for Priority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Priority {
    type Err = InvalidPriority;
    fn from_str(s: &str) -> Result<Self, InvalidPriority> {
        Priority::ALL.into_iter().find(|p| p.as_str() == s).ok_or(InvalidPriority)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn high_may_book_one_slot_of_its_size_beyond_normal_and_low_nothing_ahead() {
        let ceiling = Duration::from_secs(30);
        let tb = Limit::token_bucket(40, Duration::from_secs(1), 1000);
        assert_eq!(Priority::Normal.horizon(&tb, 1, ceiling), ceiling);
        assert_eq!(Priority::High.horizon(&tb, 1, ceiling), ceiling + Duration::from_millis(25));
        assert_eq!(Priority::High.horizon(&tb, 4, ceiling), ceiling + Duration::from_millis(100));
        assert_eq!(Priority::Low.horizon(&tb, 1, ceiling), Duration::ZERO);
        let fw = Limit::fixed_window(1, Duration::from_secs(60));
        assert_eq!(Priority::High.horizon(&fw, 1, ceiling), ceiling + Duration::from_secs(60));
        // Rounded up like the bucket's own increment: 3 per second is 333 334 µs a token.
        let thirds = Limit::token_bucket(3, Duration::from_secs(1), 3);
        assert_eq!(reserve(&thirds, 1), Duration::from_micros(333_334));
    }

    #[test]
    fn priorities_parse_from_their_names_only() {
        for p in Priority::ALL {
            assert_eq!(p.as_str().parse::<Priority>(), Ok(p));
        }
        assert_eq!("urgent".parse::<Priority>(), Err(InvalidPriority));
        assert_eq!("HIGH".parse::<Priority>(), Err(InvalidPriority));
        assert_eq!(Priority::default(), Priority::Normal);
    }
}
