//! The per-merchant circuit breaker, as pure transitions (docs/delivery.md).
//!
//! - closed → open: in the sliding window (5 min) there were ≥ 5 attempts and
//!   ≥ 80 % failed. Only network errors, timeouts and 5xx fail; any 4xx, 429
//!   included, proves the endpoint reachable.
//! - open → probing: once the pause (5 min, doubled per failed probe, at most
//!   30 min) is over, one delivery is let through as the probe.
//! - probing → closed on a 2xx or 4xx (counters reset, the queue drains);
//!   probing → open on a failure, pause doubled.
//! - Everything else of that merchant is deferred (~30 s) while the breaker is
//!   not closed, spending no attempt and no slow step.
//!
//! The store keeps one row per merchant with a `version`; every transition
//! here returns the new row and the store writes it only if the version is
//! still the one it read, so instances never race each other into two probes.

use std::time::Duration;

use serde::Serialize;

use super::model::{AttemptOutcome, BreakerStatus, DeliveryId, MerchantId};
use crate::clock::Timestamp;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MerchantBreakerConfig {
    /// Sliding window for the failure ratio (5 min).
    pub window: Duration,
    /// Attempts needed in the window before the ratio counts (5).
    pub min_attempts: u32,
    /// Failed share that opens the breaker, in percent (80).
    pub failure_percent: u32,
    /// First pause after opening (5 min); doubled per failed probe.
    pub base_pause: Duration,
    /// Longest pause (30 min).
    pub max_pause: Duration,
    /// How long a deferred delivery waits before it is checked again (30 s).
    pub defer: Duration,
    /// A probe not reported within this long is presumed lost (its worker
    /// died) and another delivery may probe.
    pub probe_lease: Duration,
}

impl Default for MerchantBreakerConfig {
    fn default() -> Self {
        MerchantBreakerConfig {
            window: Duration::from_secs(5 * 60),
            min_attempts: 5,
            failure_percent: 80,
            base_pause: Duration::from_secs(5 * 60),
            max_pause: Duration::from_secs(30 * 60),
            defer: Duration::from_secs(30),
            probe_lease: Duration::from_secs(60),
        }
    }
}

/// One merchant's breaker row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MerchantBreaker {
    pub merchant_id: MerchantId,
    pub status: BreakerStatus,
    /// Bumped on every write; the compare-and-set token.
    pub version: i64,
    /// The pause the breaker is in (or would start with).
    pub pause: Duration,
    pub failed_probes: u32,
    pub opened_at: Option<Timestamp>,
    pub next_probe_at: Option<Timestamp>,
    pub probe_delivery_id: Option<DeliveryId>,
    pub probe_started_at: Option<Timestamp>,
    /// The window never reaches back before this (a close or reset zeroes the counters).
    pub counters_since: Timestamp,
    pub updated_at: Timestamp,
}

impl MerchantBreaker {
    /// A closed breaker for a new merchant.
    pub fn closed(merchant_id: MerchantId, now: Timestamp, cfg: &MerchantBreakerConfig) -> MerchantBreaker {
        MerchantBreaker {
            merchant_id,
            status: BreakerStatus::Closed,
            version: 0,
            pause: cfg.base_pause,
            failed_probes: 0,
            opened_at: None,
            next_probe_at: None,
            probe_delivery_id: None,
            probe_started_at: None,
            counters_since: now,
            updated_at: now,
        }
    }

    /// Where the sliding window starts at `now`.
    pub fn window_start(&self, now: Timestamp, cfg: &MerchantBreakerConfig) -> Timestamp {
        (now - cfg.window).max(self.counters_since)
    }

    fn next(&self, now: Timestamp) -> MerchantBreaker {
        MerchantBreaker { version: self.version + 1, updated_at: now, ..self.clone() }
    }
}

/// Attempts of the merchant inside the window (the attempt being recorded included).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct Window {
    pub attempts: u32,
    pub failures: u32,
}

impl Window {
    pub fn trips(&self, cfg: &MerchantBreakerConfig) -> bool {
        self.attempts >= cfg.min_attempts && u64::from(self.failures) * 100 >= u64::from(self.attempts) * u64::from(cfg.failure_percent)
    }
}

/// May this delivery be sent now?
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MerchantAdmission {
    /// MerchantBreaker closed: send.
    Send,
    /// Send as the probe; write this breaker row first (compare-and-set).
    Probe(MerchantBreaker),
    /// Not now: check again at `until`. Spends nothing.
    Defer { until: Timestamp },
}

/// Decide whether `delivery` may be sent at `now`.
pub fn admit(b: &MerchantBreaker, delivery: &DeliveryId, now: Timestamp, cfg: &MerchantBreakerConfig) -> MerchantAdmission {
    let take_probe = || {
        let mut n = b.next(now);
        n.status = BreakerStatus::Probing;
        n.probe_delivery_id = Some(delivery.clone());
        n.probe_started_at = Some(now);
        MerchantAdmission::Probe(n)
    };
    match b.status {
        BreakerStatus::Closed => MerchantAdmission::Send,
        BreakerStatus::Open => match b.next_probe_at {
            Some(at) if now < at => MerchantAdmission::Defer { until: (now + cfg.defer).min(at) },
            _ => take_probe(),
        },
        BreakerStatus::Probing => {
            let stale = b.probe_started_at.is_none_or(|s| now >= s + cfg.probe_lease);
            if b.probe_delivery_id.as_ref() == Some(delivery) || stale {
                take_probe()
            } else {
                MerchantAdmission::Defer { until: now + cfg.defer }
            }
        }
    }
}

/// The breaker after `delivery`'s attempt came to `outcome`; `None` when the
/// row does not change. `window` counts the merchant's attempts since
/// [`MerchantBreaker::window_start`], this one included.
pub fn record(b: &MerchantBreaker, delivery: &DeliveryId, outcome: AttemptOutcome, window: Window, now: Timestamp, cfg: &MerchantBreakerConfig) -> Option<MerchantBreaker> {
    let failed = outcome.is_breaker_failure();
    match b.status {
        BreakerStatus::Probing if b.probe_delivery_id.as_ref() == Some(delivery) => {
            let mut n = b.next(now);
            n.probe_delivery_id = None;
            n.probe_started_at = None;
            if failed {
                n.status = BreakerStatus::Open;
                n.failed_probes += 1;
                n.pause = b.pause.saturating_mul(2).min(cfg.max_pause);
                n.next_probe_at = Some(now + n.pause);
            } else {
                n = close(&n, now, cfg);
            }
            Some(n)
        }
        BreakerStatus::Closed if failed && window.trips(cfg) => {
            let mut n = b.next(now);
            n.status = BreakerStatus::Open;
            n.pause = cfg.base_pause;
            n.opened_at = Some(now);
            n.next_probe_at = Some(now + cfg.base_pause);
            Some(n)
        }
        // Attempts that were in flight when the breaker opened, or a probe
        // someone else took over: they change nothing.
        _ => None,
    }
}

/// Closed with counters reset, keeping the row's identity and version.
fn close(b: &MerchantBreaker, now: Timestamp, cfg: &MerchantBreakerConfig) -> MerchantBreaker {
    MerchantBreaker { version: b.version, updated_at: b.updated_at, ..MerchantBreaker::closed(b.merchant_id.clone(), now, cfg) }
}

/// A manual reset by support staff: closed, counters zeroed.
pub fn reset(b: &MerchantBreaker, now: Timestamp, cfg: &MerchantBreakerConfig) -> MerchantBreaker {
    close(&b.next(now), now, cfg)
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: Timestamp = Timestamp::from_secs(1_767_225_600);

    fn ids() -> (MerchantId, DeliveryId, DeliveryId) {
        (MerchantId::generate(), DeliveryId::generate(), DeliveryId::generate())
    }

    fn w(attempts: u32, failures: u32) -> Window {
        Window { attempts, failures }
    }

    #[test]
    fn it_opens_on_five_attempts_with_eighty_percent_failed_and_not_before() {
        let cfg = MerchantBreakerConfig::default();
        let (m, d, _) = ids();
        let b = MerchantBreaker::closed(m, T0, &cfg);
        assert_eq!(record(&b, &d, AttemptOutcome::ServerError, w(4, 4), T0, &cfg), None, "four attempts are too few");
        assert_eq!(record(&b, &d, AttemptOutcome::ServerError, w(6, 4), T0, &cfg), None, "67 % is too little");
        let open = record(&b, &d, AttemptOutcome::Timeout, w(5, 4), T0, &cfg).expect("opens");
        assert_eq!(open.status, BreakerStatus::Open);
        assert_eq!(open.next_probe_at, Some(T0 + Duration::from_secs(300)));
        assert_eq!(open.version, b.version + 1);
    }

    #[test]
    fn client_errors_never_open_it() {
        let cfg = MerchantBreakerConfig::default();
        let (m, d, _) = ids();
        let b = MerchantBreaker::closed(m, T0, &cfg);
        for outcome in [AttemptOutcome::ClientError, AttemptOutcome::RateLimited] {
            assert!(!outcome.is_breaker_failure());
            assert_eq!(record(&b, &d, outcome, w(50, 50), T0, &cfg), None);
        }
    }

    #[test]
    fn an_open_breaker_defers_until_the_pause_is_over_then_lets_one_probe_through() {
        let cfg = MerchantBreakerConfig::default();
        let (m, d1, d2) = ids();
        let open = record(&MerchantBreaker::closed(m, T0, &cfg), &d1, AttemptOutcome::Network, w(5, 5), T0, &cfg).expect("open");
        assert_eq!(admit(&open, &d2, T0 + Duration::from_secs(10), &cfg), MerchantAdmission::Defer { until: T0 + Duration::from_secs(40) });
        assert_eq!(admit(&open, &d2, T0 + Duration::from_secs(290), &cfg), MerchantAdmission::Defer { until: T0 + Duration::from_secs(300) });
        let probe_at = T0 + Duration::from_secs(300);
        let MerchantAdmission::Probe(probing) = admit(&open, &d1, probe_at, &cfg) else { panic!("probe") };
        assert_eq!(probing.status, BreakerStatus::Probing);
        assert_eq!(admit(&probing, &d2, probe_at, &cfg), MerchantAdmission::Defer { until: probe_at + cfg.defer }, "one probe at a time");
        // A probe whose worker died is taken over after the probe lease.
        assert!(matches!(admit(&probing, &d2, probe_at + cfg.probe_lease, &cfg), MerchantAdmission::Probe(_)));
    }

    #[test]
    fn failed_probes_double_the_pause_up_to_thirty_minutes_and_a_good_one_closes() {
        let cfg = MerchantBreakerConfig::default();
        let (m, d, other) = ids();
        let mut b = record(&MerchantBreaker::closed(m, T0, &cfg), &d, AttemptOutcome::Network, w(5, 5), T0, &cfg).expect("open");
        let mut pauses = Vec::new();
        for _ in 0..5 {
            let now = b.next_probe_at.expect("open has a probe time");
            let MerchantAdmission::Probe(p) = admit(&b, &d, now, &cfg) else { panic!("probe") };
            assert_eq!(record(&p, &other, AttemptOutcome::Network, w(9, 9), now, &cfg), None, "only the probe's result counts");
            b = record(&p, &d, AttemptOutcome::ServerError, w(9, 9), now, &cfg).expect("reopens");
            pauses.push(b.pause.as_secs() / 60);
        }
        assert_eq!(pauses, [10, 20, 30, 30, 30]);
        let now = b.next_probe_at.expect("probe time");
        let MerchantAdmission::Probe(p) = admit(&b, &d, now, &cfg) else { panic!("probe") };
        // A 4xx proves the endpoint reachable: closed, counters reset.
        let closed = record(&p, &d, AttemptOutcome::ClientError, w(9, 9), now, &cfg).expect("closes");
        assert_eq!((closed.status, closed.pause, closed.failed_probes, closed.counters_since), (BreakerStatus::Closed, cfg.base_pause, 0, now));
        assert_eq!(closed.window_start(now + Duration::from_secs(60), &cfg), now);
    }

    #[test]
    fn a_manual_reset_closes_it_and_zeroes_the_counters() {
        let cfg = MerchantBreakerConfig::default();
        let (m, d, _) = ids();
        let open = record(&MerchantBreaker::closed(m, T0, &cfg), &d, AttemptOutcome::Network, w(5, 5), T0, &cfg).expect("open");
        let later = T0 + Duration::from_secs(30);
        let r = reset(&open, later, &cfg);
        assert_eq!((r.status, r.counters_since, r.next_probe_at, r.version), (BreakerStatus::Closed, later, None, open.version + 1));
        assert_eq!(admit(&r, &d, later, &cfg), MerchantAdmission::Send);
    }
}
