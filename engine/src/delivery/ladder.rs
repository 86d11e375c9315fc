//! The two retry ladders, as pure decisions (docs/delivery.md).
//!
//! [`decide`] takes the delivery's ladder state, the outcome of the attempt
//! just made and `now`, and says what happens next. It never reads a clock.
//!
//! - Fast ladder (5xx, 429, network, timeout): after failed attempt k (k < 10)
//!   the next comes 2^(k−1) s later; the 10th failure is final.
//! - Slow ladder (money event answered 3xx/4xx other than 429): pauses 15 min,
//!   1 h, 4 h, 12 h, 24 h; a 4xx on the attempt after the 24 h pause is final.
//!   Non-money events fail at once on such an answer.
//! - The budgets are separate: a fast failure never spends a slow step and the
//!   other way round.
//! - Ceilings: once the slow ladder has started, no attempt later than 48 h
//!   after its first step; no attempt when the delivery cycle is older than
//!   30 days. A retry that would fall past a ceiling fails the delivery now
//!   rather than scheduling an attempt that may not happen.

use std::time::Duration;

use serde::Serialize;

use super::model::{AttemptOutcome, FailedReason, Ladder};
use crate::clock::Timestamp;

/// The ladders' shape. [`LadderConfig::default`] is the product's policy; tests
/// may shrink it, production should not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LadderConfig {
    /// Fast-ladder attempts before FAILED (10).
    pub fast_attempts: u32,
    /// Pause after the first fast failure; doubles per failure (1 s).
    pub fast_base: Duration,
    /// Slow-ladder pauses, one per step (15 min, 1 h, 4 h, 12 h, 24 h).
    pub slow_pauses: Vec<Duration>,
    /// No attempt later than this after the slow ladder's first step (48 h).
    pub slow_ceiling: Duration,
    /// No attempt when the delivery cycle is older than this (30 days).
    pub max_age: Duration,
}

const MINUTE: u64 = 60;
const HOUR: u64 = 60 * MINUTE;

impl Default for LadderConfig {
    fn default() -> Self {
        LadderConfig {
            fast_attempts: 10,
            fast_base: Duration::from_secs(1),
            slow_pauses: [15 * MINUTE, HOUR, 4 * HOUR, 12 * HOUR, 24 * HOUR].map(Duration::from_secs).to_vec(),
            slow_ceiling: Duration::from_secs(48 * HOUR),
            max_age: Duration::from_secs(30 * 24 * HOUR),
        }
    }
}

/// What the ladders need to know about a delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct LadderState {
    pub is_money: bool,
    /// Fast attempts spent (failed) so far.
    pub fast_attempts: u32,
    /// Slow steps spent so far.
    pub slow_steps: u32,
    /// When the first slow step was taken; the 48 h ceiling counts from here.
    pub slow_started_at: Option<Timestamp>,
    /// Creation or last manual redelivery; the 30-day ceiling counts from here.
    pub cycle_started_at: Timestamp,
}

impl LadderState {
    pub fn new(is_money: bool, now: Timestamp) -> Self {
        LadderState { is_money, fast_attempts: 0, slow_steps: 0, slow_started_at: None, cycle_started_at: now }
    }
}

/// What happens after an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Delivered,
    Retry { at: Timestamp, ladder: Ladder, state: LadderState },
    Failed { reason: FailedReason, state: LadderState },
}

/// The pause after fast failure number `k` (1-based): base × 2^(k−1).
pub fn fast_pause(k: u32, cfg: &LadderConfig) -> Duration {
    cfg.fast_base.saturating_mul(1_u32 << k.saturating_sub(1).min(30))
}

/// The instants past which no attempt may happen: (48 h slow ceiling if the
/// slow ladder has started, 30-day age ceiling).
pub fn ceilings(state: &LadderState, cfg: &LadderConfig) -> (Option<Timestamp>, Timestamp) {
    (state.slow_started_at.map(|s| s + cfg.slow_ceiling), state.cycle_started_at + cfg.max_age)
}

/// Which ceiling, if any, forbids an attempt at `at`.
pub fn ceiling_reached(state: &LadderState, at: Timestamp, cfg: &LadderConfig) -> Option<FailedReason> {
    let (slow, age) = ceilings(state, cfg);
    if at > age {
        Some(FailedReason::AgeCeiling)
    } else if slow.is_some_and(|slow| at > slow) {
        Some(FailedReason::SlowLadderCeiling)
    } else {
        None
    }
}

/// The next state after an attempt made at `now` came to `outcome`.
pub fn decide(state: &LadderState, outcome: AttemptOutcome, now: Timestamp, cfg: &LadderConfig) -> Decision {
    let mut next = *state;
    let (ladder, at) = match outcome {
        AttemptOutcome::Success => return Decision::Delivered,
        AttemptOutcome::ClientError if !state.is_money => {
            return Decision::Failed { reason: FailedReason::NonMoneyClientError, state: next };
        }
        AttemptOutcome::ClientError => {
            next.slow_steps += 1;
            let started = *next.slow_started_at.get_or_insert(now);
            let Some(pause) = cfg.slow_pauses.get(next.slow_steps as usize - 1) else {
                return Decision::Failed { reason: FailedReason::SlowLadderExhausted, state: next };
            };
            debug_assert!(started <= now);
            (Ladder::Slow, now + *pause)
        }
        AttemptOutcome::RateLimited | AttemptOutcome::ServerError | AttemptOutcome::Network | AttemptOutcome::Timeout => {
            next.fast_attempts += 1;
            if next.fast_attempts >= cfg.fast_attempts {
                return Decision::Failed { reason: FailedReason::FastLadderExhausted, state: next };
            }
            (Ladder::Fast, now + fast_pause(next.fast_attempts, cfg))
        }
    };
    match ceiling_reached(&next, at, cfg) {
        Some(reason) => Decision::Failed { reason, state: next },
        None => Decision::Retry { at, ladder, state: next },
    }
}

/// One attempt still to come, as the detail page shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PlannedAttempt {
    /// Earliest time; breaker deferrals can only push it later.
    pub at: Timestamp,
    pub ladder: Ladder,
    /// 1-based number within its ladder's budget: fast attempt n of 10, or the
    /// attempt after slow step n of 5.
    pub number: u32,
    pub of: u32,
}

/// The attempts still to come if every one of them fails the same way as the
/// last one (the worst case the UI shows), cut at the ceilings.
pub fn plan(state: &LadderState, ladder: Ladder, next_attempt_at: Timestamp, cfg: &LadderConfig) -> Vec<PlannedAttempt> {
    let mut out = Vec::new();
    let mut at = next_attempt_at;
    match ladder {
        Ladder::Fast => {
            let of = cfg.fast_attempts;
            for number in state.fast_attempts + 1..=of {
                if ceiling_reached(state, at, cfg).is_some() {
                    break;
                }
                out.push(PlannedAttempt { at, ladder, number, of });
                at = at + fast_pause(number, cfg);
            }
        }
        Ladder::Slow => {
            let of = cfg.slow_pauses.len() as u32;
            for number in state.slow_steps.max(1)..=of {
                if ceiling_reached(state, at, cfg).is_some() {
                    break;
                }
                out.push(PlannedAttempt { at, ladder, number, of });
                match cfg.slow_pauses.get(number as usize) {
                    Some(pause) => at = at + *pause,
                    None => break,
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: Timestamp = Timestamp::from_secs(1_767_225_600);

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn the_fast_ladder_pauses_double_from_one_second_and_fail_after_ten() {
        let cfg = LadderConfig::default();
        let mut state = LadderState::new(false, T0);
        let mut now = T0;
        let mut pauses = Vec::new();
        for _ in 0..9 {
            match decide(&state, AttemptOutcome::ServerError, now, &cfg) {
                Decision::Retry { at, ladder: Ladder::Fast, state: s } => {
                    pauses.push(at.saturating_duration_since(now).as_secs());
                    state = s;
                    now = at;
                }
                other => panic!("expected a fast retry, got {other:?}"),
            }
        }
        assert_eq!(pauses, [1, 2, 4, 8, 16, 32, 64, 128, 256]);
        assert_eq!(pauses.iter().sum::<u64>(), 511, "about 8.5 minutes of pauses");
        assert!(matches!(
            decide(&state, AttemptOutcome::Timeout, now, &cfg),
            Decision::Failed { reason: FailedReason::FastLadderExhausted, state: LadderState { fast_attempts: 10, .. } }
        ));
    }

    #[test]
    fn rate_limits_network_errors_and_timeouts_spend_fast_attempts() {
        let cfg = LadderConfig::default();
        for outcome in [AttemptOutcome::RateLimited, AttemptOutcome::Network, AttemptOutcome::Timeout, AttemptOutcome::ServerError] {
            let Decision::Retry { ladder, state, .. } = decide(&LadderState::new(true, T0), outcome, T0, &cfg) else {
                panic!("{outcome} retries");
            };
            assert_eq!((ladder, state.fast_attempts, state.slow_steps), (Ladder::Fast, 1, 0));
        }
    }

    #[test]
    fn a_non_money_client_error_fails_at_once_and_redirects_count_as_client_errors() {
        let cfg = LadderConfig::default();
        assert_eq!(AttemptOutcome::from_status(302), AttemptOutcome::ClientError);
        assert_eq!(AttemptOutcome::from_status(429), AttemptOutcome::RateLimited);
        assert_eq!(AttemptOutcome::from_status(204), AttemptOutcome::Success);
        assert_eq!(AttemptOutcome::from_status(503), AttemptOutcome::ServerError);
        assert!(matches!(
            decide(&LadderState::new(false, T0), AttemptOutcome::ClientError, T0, &cfg),
            Decision::Failed { reason: FailedReason::NonMoneyClientError, .. }
        ));
    }

    #[test]
    fn the_slow_ladder_pauses_fifteen_minutes_to_a_day_then_fails() {
        let cfg = LadderConfig::default();
        let mut state = LadderState::new(true, T0);
        let mut now = T0;
        let mut pauses = Vec::new();
        for _ in 0..5 {
            let Decision::Retry { at, ladder: Ladder::Slow, state: s } = decide(&state, AttemptOutcome::ClientError, now, &cfg) else {
                panic!("slow retry expected");
            };
            pauses.push(at.saturating_duration_since(now).as_secs());
            state = s;
            now = at;
        }
        assert_eq!(pauses, [900, 3600, 4 * 3600, 12 * 3600, 24 * 3600]);
        assert_eq!(state.slow_started_at, Some(T0));
        assert_eq!(state.fast_attempts, 0, "slow steps never spend fast attempts");
        assert!(matches!(
            decide(&state, AttemptOutcome::ClientError, now, &cfg),
            Decision::Failed { reason: FailedReason::SlowLadderExhausted, .. }
        ));
    }

    #[test]
    fn the_48_hour_ceiling_counts_from_the_first_slow_step_not_from_creation() {
        let cfg = LadderConfig::default();
        // Created 10 days ago: an old delivery still gets the whole slow ladder.
        let state = LadderState::new(true, T0);
        let first_4xx = T0 + secs(10 * 24 * 3600);
        let Decision::Retry { state, .. } = decide(&state, AttemptOutcome::ClientError, first_4xx, &cfg) else { panic!() };
        assert_eq!(state.slow_started_at, Some(first_4xx));
        // Step 4 (12 h pause) answered 47 h after the first step: the next
        // attempt would land past 48 h, so the delivery fails now.
        let late = LadderState { slow_steps: 3, ..state };
        assert!(matches!(
            decide(&late, AttemptOutcome::ClientError, first_4xx + secs(47 * 3600), &cfg),
            Decision::Failed { reason: FailedReason::SlowLadderCeiling, .. }
        ));
        // Fast retries are bounded by the same ceiling once the slow ladder ran.
        let fast = LadderState { fast_attempts: 8, ..state };
        assert!(matches!(
            decide(&fast, AttemptOutcome::ServerError, first_4xx + secs(48 * 3600 - 100), &cfg),
            Decision::Failed { reason: FailedReason::SlowLadderCeiling, .. }
        ));
    }

    #[test]
    fn nothing_is_attempted_after_thirty_days_whatever_the_ladders_say() {
        let cfg = LadderConfig::default();
        let state = LadderState::new(true, T0);
        let day30 = T0 + cfg.max_age;
        assert!(matches!(
            decide(&state, AttemptOutcome::ClientError, day30 - secs(60), &cfg),
            Decision::Failed { reason: FailedReason::AgeCeiling, .. }
        ));
        assert_eq!(ceiling_reached(&state, day30, &cfg), None);
        assert_eq!(ceiling_reached(&state, day30 + secs(1), &cfg), Some(FailedReason::AgeCeiling));
    }

    fn any_outcome() -> impl proptest::strategy::Strategy<Value = AttemptOutcome> {
        proptest::sample::select(AttemptOutcome::ALL.to_vec())
    }

    proptest::proptest! {
        /// Whatever the answers, a delivery ends within its budgets and never
        /// schedules an attempt past a ceiling or in the past.
        #[test]
        fn any_sequence_of_answers_stays_within_budgets_and_ceilings(
            money in proptest::bool::ANY,
            outcomes in proptest::collection::vec(any_outcome(), 1..40),
            gaps in proptest::collection::vec(0_u64..200_000, 40),
        ) {
            let cfg = LadderConfig::default();
            let mut state = LadderState::new(money, T0);
            let mut now = T0;
            for (outcome, gap) in outcomes.into_iter().zip(gaps) {
                // MerchantBreaker deferrals may delay an attempt past its time.
                now = now + secs(gap);
                match decide(&state, outcome, now, &cfg) {
                    Decision::Delivered => {
                        proptest::prop_assert_eq!(outcome, AttemptOutcome::Success);
                        break;
                    }
                    Decision::Failed { state: s, .. } => {
                        proptest::prop_assert!(s.fast_attempts <= cfg.fast_attempts && s.slow_steps <= 6);
                        break;
                    }
                    Decision::Retry { at, state: s, .. } => {
                        proptest::prop_assert!(at > now);
                        proptest::prop_assert!(ceiling_reached(&s, at, &cfg).is_none());
                        proptest::prop_assert!(s.fast_attempts < cfg.fast_attempts && s.slow_steps <= 5);
                        proptest::prop_assert!(s.fast_attempts + s.slow_steps == state.fast_attempts + state.slow_steps + 1, "each attempt spends exactly one budget");
                        state = s;
                        now = at;
                    }
                }
            }
        }
    }

    #[test]
    fn the_plan_lists_the_remaining_attempts_of_the_current_ladder() {
        let cfg = LadderConfig::default();
        let state = LadderState { fast_attempts: 7, ..LadderState::new(false, T0) };
        let plan = plan(&state, Ladder::Fast, T0, &cfg);
        let numbers: Vec<_> = plan.iter().map(|p| (p.number, p.at.saturating_duration_since(T0).as_secs())).collect();
        assert_eq!(numbers, [(8, 0), (9, 128), (10, 384)]);

        let slow = LadderState { slow_steps: 4, slow_started_at: Some(T0), ..LadderState::new(true, T0) };
        let plan = super::plan(&slow, Ladder::Slow, T0 + secs(17 * 3600 + 900), &cfg);
        assert_eq!(plan.iter().map(|p| p.number).collect::<Vec<_>>(), [4, 5]);
    }
}
