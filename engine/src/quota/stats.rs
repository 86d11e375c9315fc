//! What every decision leaves behind for the dashboards: grants, waits (as a
//! histogram, so p50/p95 are computable), refusals by reason, 429 penalties
//! and header observations, per (account, rule).
//!
//! The numbers live in the store (Redis: a hash next to the bucket, updated by
//! the same script call as the decision), so every instance sees the same ones.
//!
//! Wait histogram: bucket 0 counts waits under 1 ms; bucket `i ≥ 1` counts
//! waits in `[2^(i−1), 2^i)` ms; the last bucket is open-ended. A percentile is
//! reported as its bucket's upper bound: at most 2× off, never under.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::lane::Priority;
use super::rule::RuleId;

/// Number of wait-histogram buckets (the last one holds waits ≥ 2^20 ms ≈ 17 min).
pub const WAIT_BUCKETS: usize = 22;

/// Why a request got no permit. Shown on dashboards; stable snake_case names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RefusalReason {
    /// The booked wait would be beyond the effective ceiling; nothing booked.
    WaitCeilingExceeded,
    /// The shared store is down and the deployment fails closed.
    StoreUnavailable,
    /// The rule's concurrency leases are all held.
    ConcurrencyLimit,
    /// An upstream circuit breaker is open (recorded by the retry executor).
    BreakerOpen,
    /// No rule and no default matched the request.
    NoRule,
}

impl RefusalReason {
    pub const ALL: [RefusalReason; 5] = [
        RefusalReason::WaitCeilingExceeded,
        RefusalReason::StoreUnavailable,
        RefusalReason::ConcurrencyLimit,
        RefusalReason::BreakerOpen,
        RefusalReason::NoRule,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RefusalReason::WaitCeilingExceeded => "wait_ceiling_exceeded",
            RefusalReason::StoreUnavailable => "store_unavailable",
            RefusalReason::ConcurrencyLimit => "concurrency_limit",
            RefusalReason::BreakerOpen => "breaker_open",
            RefusalReason::NoRule => "no_rule",
        }
    }

    fn index(self) -> usize {
        match self {
            RefusalReason::WaitCeilingExceeded => 0,
            RefusalReason::StoreUnavailable => 1,
            RefusalReason::ConcurrencyLimit => 2,
            RefusalReason::BreakerOpen => 3,
            RefusalReason::NoRule => 4,
        }
    }
}

impl fmt::Display for RefusalReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for RefusalReason {
    type Err = ();
    fn from_str(s: &str) -> Result<Self, ()> {
        RefusalReason::ALL.into_iter().find(|r| r.as_str() == s).ok_or(())
    }
}

/// Identifies one bucket: `{prefix}:rl:{account}:{scope}:{rule}` in Redis.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct BucketKey {
    pub account: String,
    pub scope: String,
    pub rule: RuleId,
}

/// The account used for calls that name none.
pub const GLOBAL_ACCOUNT: &str = "_global";

/// Counters for one bucket since it was first used (Redis: since its stats
/// key last expired, 7 days after the last decision).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BucketStats {
    pub grants: u64,
    /// Grants that had to wait (booked wait ≥ 1 ms).
    pub waited: u64,
    /// Sum of booked waits, in microseconds.
    pub wait_sum_us: u64,
    pub wait_histogram: [u64; WAIT_BUCKETS],
    /// Indexed like [`RefusalReason::ALL`].
    pub refusals: [u64; 5],
    /// Decisions of shadow rules that would have waited or been refused.
    pub shadow_blocks: u64,
    pub penalties: u64,
    pub observations: u64,
    /// Last decision, milliseconds since the epoch (store clock).
    pub last_at_ms: i64,
    /// The part of the counters above that came from `high` and `low`
    /// requests; `None` until one came. `normal`'s is the rest (see
    /// [`BucketStats::lane`]): stores count only the two exceptions, so a
    /// normal decision costs what it did before lanes, and a bucket only ever
    /// asked in the normal lane keeps no more than it did.
    pub lanes: Option<Box<LaneSplit>>,
}

/// The `high` and `low` shares of a bucket's counters.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaneSplit {
    pub high: LaneStats,
    pub low: LaneStats,
}

/// Grants, waits and refusals of one priority lane of a bucket.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaneStats {
    pub grants: u64,
    /// Grants that had to wait (booked wait ≥ 1 ms).
    pub waited: u64,
    /// Sum of booked waits, in microseconds.
    pub wait_sum_us: u64,
    pub wait_histogram: [u64; WAIT_BUCKETS],
    /// Refusals of every reason.
    pub refusals: u64,
}

impl LaneStats {
    pub(crate) fn add_grant(&mut self, wait: Duration) {
        count_grant(&mut self.grants, &mut self.waited, &mut self.wait_sum_us, &mut self.wait_histogram, wait);
    }

    /// The `q`-quantile of this lane's booked waits (see [`BucketStats::wait_percentile`]).
    pub fn wait_percentile(&self, q: f64) -> Option<Duration> {
        percentile(&self.wait_histogram, q)
    }

    /// A counter field of the Redis stats hash (`high:grants`, `low:w3`, …).
    fn set_field(&mut self, field: &str, n: u64) {
        match field {
            "grants" => self.grants = n,
            "waited" => self.waited = n,
            "wait_sum_us" => self.wait_sum_us = n,
            "refused" => self.refusals = n,
            _ => {
                if let Some(slot) = field.strip_prefix('w').and_then(|i| i.parse::<usize>().ok()).and_then(|i| self.wait_histogram.get_mut(i)) {
                    *slot = n;
                }
            }
        }
    }
}

impl BucketStats {
    pub fn refusals(&self, reason: RefusalReason) -> u64 {
        self.refusals[reason.index()]
    }

    pub fn refusals_total(&self) -> u64 {
        self.refusals.iter().sum()
    }

    pub(crate) fn add_refusal(&mut self, reason: RefusalReason) {
        self.refusals[reason.index()] += 1;
    }

    /// The counters of one lane. `normal`'s are the bucket's totals less the
    /// other two lanes'.
    pub fn lane(&self, lane: Priority) -> LaneStats {
        let split = self.lanes.as_deref().cloned().unwrap_or_default();
        match lane {
            Priority::High => split.high,
            Priority::Low => split.low,
            Priority::Normal => {
                let (high, low) = (&split.high, &split.low);
                let rest = |total: u64, f: fn(&LaneStats) -> u64| total.saturating_sub(f(high) + f(low));
                LaneStats {
                    grants: rest(self.grants, |l| l.grants),
                    waited: rest(self.waited, |l| l.waited),
                    wait_sum_us: rest(self.wait_sum_us, |l| l.wait_sum_us),
                    wait_histogram: std::array::from_fn(|i| {
                        self.wait_histogram[i].saturating_sub(high.wait_histogram[i] + low.wait_histogram[i])
                    }),
                    refusals: rest(self.refusals_total(), |l| l.refusals),
                }
            }
        }
    }

    /// Where a request of `lane` is counted besides the totals (`None` for `normal`).
    pub(crate) fn lane_mut(&mut self, lane: Priority) -> Option<&mut LaneStats> {
        match lane {
            Priority::High => Some(&mut self.lanes.get_or_insert_default().high),
            Priority::Low => Some(&mut self.lanes.get_or_insert_default().low),
            Priority::Normal => None,
        }
    }

    pub(crate) fn add_grant(&mut self, wait: Duration) {
        count_grant(&mut self.grants, &mut self.waited, &mut self.wait_sum_us, &mut self.wait_histogram, wait);
    }

    /// The `q`-quantile (0.5 = p50, 0.95 = p95) of booked waits, as the upper
    /// bound of its histogram bucket; `None` before the first grant.
    pub fn wait_percentile(&self, q: f64) -> Option<Duration> {
        percentile(&self.wait_histogram, q)
    }

    /// Parse the flat field map the Redis script writes (`HGETALL`).
    pub fn from_fields<'a>(fields: impl IntoIterator<Item = (&'a str, i64)>) -> BucketStats {
        let mut s = BucketStats::default();
        for (k, v) in fields {
            let n = u64::try_from(v).unwrap_or(0);
            match k {
                "grants" => s.grants = n,
                "waited" => s.waited = n,
                "wait_sum_us" => s.wait_sum_us = n,
                "shadow_blocks" => s.shadow_blocks = n,
                "penalties" => s.penalties = n,
                "observations" => s.observations = n,
                "last_at_ms" => s.last_at_ms = v,
                _ => {
                    let lane = k.split_once(':').and_then(|(lane, field)| Some((lane.parse::<Priority>().ok()?, field)));
                    if let Some((lane, field)) = lane {
                        if let Some(stats) = s.lane_mut(lane) {
                            stats.set_field(field, n);
                        }
                    } else if let Some(i) = k.strip_prefix("w").and_then(|i| i.parse::<usize>().ok()) {
                        if let Some(slot) = s.wait_histogram.get_mut(i) {
                            *slot = n;
                        }
                    } else if let Some(r) = k.strip_prefix("refused:").and_then(|r| r.parse::<RefusalReason>().ok()) {
                        s.refusals[r.index()] = n;
                    }
                }
            }
        }
        s
    }
}

/// One grant into a set of grant counters (a bucket's, or a lane's).
fn count_grant(grants: &mut u64, waited: &mut u64, sum_us: &mut u64, histogram: &mut [u64; WAIT_BUCKETS], wait: Duration) {
    *grants += 1;
    *waited += u64::from(wait >= Duration::from_millis(1));
    *sum_us += u64::try_from(wait.as_micros()).unwrap_or(u64::MAX);
    histogram[wait_bucket(wait)] += 1;
}

/// The `q`-quantile of a wait histogram, as its bucket's upper bound.
fn percentile(histogram: &[u64; WAIT_BUCKETS], q: f64) -> Option<Duration> {
    let total: u64 = histogram.iter().sum();
    if total == 0 {
        return None;
    }
    let rank = ((q.clamp(0.0, 1.0) * total as f64).ceil() as u64).max(1);
    let mut seen = 0;
    for (i, n) in histogram.iter().enumerate() {
        seen += n;
        if seen >= rank {
            return Some(bucket_upper_bound(i));
        }
    }
    Some(bucket_upper_bound(WAIT_BUCKETS - 1))
}

/// Histogram bucket of a wait (the Lua script computes the same).
pub fn wait_bucket(wait: Duration) -> usize {
    let ms = wait.as_millis();
    if ms == 0 {
        0
    } else {
        ((128 - ms.leading_zeros()) as usize).min(WAIT_BUCKETS - 1)
    }
}

fn bucket_upper_bound(i: usize) -> Duration {
    if i == 0 {
        Duration::from_millis(1)
    } else {
        Duration::from_millis(1u64 << i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_percentiles_come_from_the_histogram_and_never_understate() {
        let mut s = BucketStats::default();
        for _ in 0..90 {
            s.add_grant(Duration::ZERO);
        }
        for _ in 0..10 {
            s.add_grant(Duration::from_millis(300));
        }
        assert_eq!(s.wait_percentile(0.5), Some(Duration::from_millis(1)));
        assert_eq!(s.wait_percentile(0.95), Some(Duration::from_millis(512)));
        assert_eq!(s.waited, 10);
        assert_eq!(wait_bucket(Duration::from_millis(1)), 1);
        assert_eq!(wait_bucket(Duration::from_millis(2)), 2);
        assert_eq!(wait_bucket(Duration::from_millis(3)), 2);
    }
}
