//! The upstream breaker's transitions, as pure functions of
//! `(state, now, &config)`.
//!
//! ```text
//! closed --5 consecutive failures--> open --30 s--> half-open (one probe at a time)
//!   ^                                  ^                 |
//!   |                                  +---probe fails---+
//!   +---------------3 probes succeed--------------------+
//! ```
//!
//! "Failure" is a 5xx, a timeout or a network error. Any answer from the
//! upstream that is not one of those (2xx, 429, other 4xx) proves it is up and
//! counts as a success here.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::clock::Timestamp;

/// Thresholds of the upstream breaker (the defaults follow VTEX's guidance:
/// open after 5 failures in a row).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct UpstreamBreakerConfig {
    /// Consecutive failures that open the breaker.
    pub failure_threshold: u32,
    /// How long an open breaker refuses calls before it lets a probe through.
    #[serde(with = "millis")]
    pub probe_after: Duration,
    /// Successful probes in a row that close it again.
    pub probes_to_close: u32,
    /// How long one probe holds the half-open breaker before another caller
    /// may probe (a probe whose caller died must not block it forever).
    #[serde(with = "millis")]
    pub probe_lease: Duration,
    /// Idle breaker keys expire after this long (they read as closed).
    #[serde(with = "millis")]
    pub key_ttl: Duration,
}

impl Default for UpstreamBreakerConfig {
    fn default() -> Self {
        UpstreamBreakerConfig {
            failure_threshold: 5,
            probe_after: Duration::from_secs(30),
            probes_to_close: 3,
            probe_lease: Duration::from_secs(30),
            key_ttl: Duration::from_secs(86_400),
        }
    }
}

mod millis {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_millis)
    }
}

/// Where a breaker stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    #[default]
    Closed,
    Open,
    HalfOpen,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Closed => "closed",
            Phase::Open => "open",
            Phase::HalfOpen => "half_open",
        }
    }

    pub fn parse(s: &str) -> Option<Phase> {
        match s {
            "closed" => Some(Phase::Closed),
            "open" => Some(Phase::Open),
            "half_open" => Some(Phase::HalfOpen),
            _ => None,
        }
    }
}

/// Everything a breaker remembers. The default is a fresh, closed breaker
/// (what a missing or expired key reads as).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct BreakerState {
    pub phase: Phase,
    /// Failures in a row while closed.
    pub consecutive_failures: u32,
    /// When it last opened.
    pub opened_at: Option<Timestamp>,
    /// When an open breaker lets the next probe through.
    pub next_probe_at: Option<Timestamp>,
    /// Successful probes since it went half-open.
    pub probe_successes: u32,
    /// A probe is in flight until then (half-open only).
    pub probe_until: Option<Timestamp>,
    /// How many times it has opened (re-opening after a failed probe included).
    pub trips: u64,
}

/// What the breaker says to a caller about to send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpstreamAdmission {
    /// Closed: go ahead.
    Allowed,
    /// Half-open: go ahead, this call is the probe.
    Probe,
    /// Open (or a probe is already in flight): do not call before `retry_at`.
    Rejected { retry_at: Timestamp },
}

impl UpstreamAdmission {
    pub fn is_allowed(self) -> bool {
        !matches!(self, UpstreamAdmission::Rejected { .. })
    }
}

/// A caller asks to send: the answer and the state to store.
pub fn decide(state: &BreakerState, now: Timestamp, config: &UpstreamBreakerConfig) -> (UpstreamAdmission, BreakerState) {
    match state.phase {
        Phase::Closed => (UpstreamAdmission::Allowed, *state),
        Phase::Open => match state.next_probe_at {
            Some(at) if now < at => (UpstreamAdmission::Rejected { retry_at: at }, *state),
            _ => {
                let next = BreakerState {
                    phase: Phase::HalfOpen,
                    probe_successes: 0,
                    probe_until: Some(now + config.probe_lease),
                    ..*state
                };
                (UpstreamAdmission::Probe, next)
            }
        },
        Phase::HalfOpen => match state.probe_until {
            Some(until) if now < until => (UpstreamAdmission::Rejected { retry_at: until }, *state),
            _ => (UpstreamAdmission::Probe, BreakerState { probe_until: Some(now + config.probe_lease), ..*state }),
        },
    }
}

/// A call finished: `failed` is true for a 5xx, timeout or network error.
pub fn record(state: &BreakerState, failed: bool, now: Timestamp, config: &UpstreamBreakerConfig) -> BreakerState {
    let open = |s: &BreakerState| BreakerState {
        phase: Phase::Open,
        consecutive_failures: s.consecutive_failures,
        opened_at: Some(now),
        next_probe_at: Some(now + config.probe_after),
        probe_successes: 0,
        probe_until: None,
        trips: s.trips.saturating_add(1),
    };
    match (state.phase, failed) {
        (Phase::Closed, false) => BreakerState { consecutive_failures: 0, ..*state },
        (Phase::Closed, true) => {
            let failures = state.consecutive_failures.saturating_add(1);
            let counted = BreakerState { consecutive_failures: failures, ..*state };
            if failures >= config.failure_threshold {
                open(&counted)
            } else {
                counted
            }
        }
        // A call admitted before the breaker opened finishes late: it neither
        // closes the breaker nor pushes the probe back.
        (Phase::Open, _) => *state,
        (Phase::HalfOpen, true) => open(state),
        (Phase::HalfOpen, false) => {
            let successes = state.probe_successes.saturating_add(1);
            if successes >= config.probes_to_close {
                BreakerState { trips: state.trips, opened_at: state.opened_at, ..BreakerState::default() }
            } else {
                BreakerState { probe_successes: successes, probe_until: None, ..*state }
            }
        }
    }
}

/// An admitted probe was never sent (no permit, no budget): free the probe
/// slot at once instead of making others wait out its lease.
pub fn abandon_probe(state: &BreakerState) -> BreakerState {
    match state.phase {
        Phase::HalfOpen => BreakerState { probe_until: None, ..*state },
        _ => *state,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(secs: i64) -> Timestamp {
        Timestamp::from_secs(1_767_225_600 + secs)
    }

    fn fail_n(mut s: BreakerState, n: u32, now: Timestamp, c: &UpstreamBreakerConfig) -> BreakerState {
        for _ in 0..n {
            s = record(&s, true, now, c);
        }
        s
    }

    #[test]
    fn five_consecutive_failures_open_it_and_a_success_in_between_resets_the_count() {
        let c = UpstreamBreakerConfig::default();
        let s = fail_n(BreakerState::default(), 4, t(0), &c);
        assert_eq!((s.phase, s.consecutive_failures), (Phase::Closed, 4));
        let s = record(&s, false, t(1), &c);
        assert_eq!(s.consecutive_failures, 0);
        let s = fail_n(s, 5, t(2), &c);
        assert_eq!(s.phase, Phase::Open);
        assert_eq!((s.opened_at, s.next_probe_at, s.trips), (Some(t(2)), Some(t(32)), 1));
    }

    #[test]
    fn an_open_breaker_refuses_until_the_probe_time_then_lets_one_probe_through() {
        let c = UpstreamBreakerConfig::default();
        let s = fail_n(BreakerState::default(), 5, t(0), &c);
        assert_eq!(decide(&s, t(29), &c).0, UpstreamAdmission::Rejected { retry_at: t(30) });
        let (admission, s) = decide(&s, t(30), &c);
        assert_eq!((admission, s.phase), (UpstreamAdmission::Probe, Phase::HalfOpen));
        // A second caller while the probe is in flight waits for it.
        assert_eq!(decide(&s, t(31), &c).0, UpstreamAdmission::Rejected { retry_at: t(60) });
        // A probe that never reports back stops blocking after its lease.
        assert_eq!(decide(&s, t(60), &c).0, UpstreamAdmission::Probe);
    }

    #[test]
    fn three_successful_probes_close_it() {
        let c = UpstreamBreakerConfig::default();
        let mut s = fail_n(BreakerState::default(), 5, t(0), &c);
        for i in 0..3 {
            let (admission, next) = decide(&s, t(30 + i), &c);
            assert_eq!(admission, UpstreamAdmission::Probe);
            s = record(&next, false, t(30 + i), &c);
        }
        assert_eq!((s.phase, s.consecutive_failures, s.probe_successes), (Phase::Closed, 0, 0));
        assert_eq!((s.trips, s.opened_at, s.next_probe_at), (1, Some(t(0)), None));
        assert_eq!(decide(&s, t(40), &c).0, UpstreamAdmission::Allowed);
    }

    #[test]
    fn a_failed_probe_opens_it_again_for_another_pause() {
        let c = UpstreamBreakerConfig::default();
        let s = fail_n(BreakerState::default(), 5, t(0), &c);
        let (_, s) = decide(&s, t(30), &c);
        let s = record(&s, false, t(30), &c);
        let (_, s) = decide(&s, t(31), &c);
        let s = record(&s, true, t(31), &c);
        assert_eq!((s.phase, s.next_probe_at, s.trips, s.probe_successes), (Phase::Open, Some(t(61)), 2, 0));
    }

    #[test]
    fn an_abandoned_probe_frees_the_slot_for_the_next_caller() {
        let c = UpstreamBreakerConfig::default();
        let s = fail_n(BreakerState::default(), 5, t(0), &c);
        let (_, s) = decide(&s, t(30), &c);
        assert!(!decide(&s, t(31), &c).0.is_allowed());
        assert_eq!(decide(&abandon_probe(&s), t(31), &c).0, UpstreamAdmission::Probe);
        assert_eq!(abandon_probe(&BreakerState::default()), BreakerState::default());
    }

    #[test]
    fn late_results_do_not_move_an_open_breaker() {
        let c = UpstreamBreakerConfig::default();
        let s = fail_n(BreakerState::default(), 5, t(0), &c);
        assert_eq!(record(&s, false, t(1), &c), s);
        assert_eq!(record(&s, true, t(1), &c), s);
    }

    proptest::proptest! {
        /// Whatever the order of calls, results and time steps: a closed breaker
        /// has fewer failures than the threshold, an open one probes exactly
        /// `probe_after` after it opened, half-open admits one probe at a time,
        /// and trips never go down.
        #[test]
        fn any_sequence_of_events_keeps_the_breaker_invariants(
            events in proptest::collection::vec((0u8..3, 0u64..20), 1..200)
        ) {
            let c = UpstreamBreakerConfig::default();
            let mut s = BreakerState::default();
            let mut now = t(0);
            for (event, step) in events {
                now = now + Duration::from_secs(step);
                let trips = s.trips;
                s = match event {
                    0 => {
                        let (admission, next) = decide(&s, now, &c);
                        if s.phase == Phase::HalfOpen && s.probe_until.is_some_and(|u| now < u) {
                            proptest::prop_assert!(!admission.is_allowed());
                        }
                        next
                    }
                    1 => record(&s, true, now, &c),
                    _ => record(&s, false, now, &c),
                };
                proptest::prop_assert!(s.trips >= trips);
                match s.phase {
                    Phase::Closed => proptest::prop_assert!(s.consecutive_failures < c.failure_threshold),
                    Phase::Open => proptest::prop_assert_eq!(
                        s.next_probe_at, s.opened_at.map(|o| o + c.probe_after)
                    ),
                    Phase::HalfOpen => proptest::prop_assert!(s.probe_successes < c.probes_to_close),
                }
            }
        }
    }

    #[test]
    fn config_round_trips_through_json_in_milliseconds() {
        let c: UpstreamBreakerConfig = serde_json::from_str(r#"{"probe_after": 1500}"#).expect("valid");
        assert_eq!((c.probe_after, c.failure_threshold), (Duration::from_millis(1500), 5));
    }
}
