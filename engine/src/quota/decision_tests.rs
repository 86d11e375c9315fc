//! Unit and property tests of the pure quota math.

use std::time::Duration;

use proptest::prelude::*;

use super::*;
use crate::quota::lane::{reserve, Priority};

const SEC: Duration = Duration::from_secs(1);
const BIG: Duration = Duration::from_secs(3600);

fn t(secs: f64) -> Timestamp {
    // A round epoch-aligned start, so windows begin at whole multiples.
    Timestamp::from_micros(1_767_225_600_000_000 + (secs * 1e6) as i64)
}

fn granted(d: Decision) -> Duration {
    match d {
        Decision::Granted { wait } => wait,
        Decision::Refused { retry_after } => panic!("refused, retry after {retry_after:?}"),
    }
}

#[test]
fn token_bucket_gives_the_burst_then_the_steady_rate() {
    let limit = Limit::token_bucket(2, SEC, 4);
    let mut s = BucketState::default();
    for _ in 0..4 {
        assert_eq!(granted(decide(&mut s, t(0.0), &limit, 1, BIG)), Duration::ZERO);
    }
    assert_eq!(granted(decide(&mut s, t(0.0), &limit, 1, BIG)), Duration::from_millis(500));
    assert_eq!(granted(decide(&mut s, t(0.0), &limit, 1, BIG)), Duration::from_millis(1000));
    assert_eq!(granted(decide(&mut s, t(0.0), &limit, 2, BIG)), Duration::from_millis(2000));
}

#[test]
fn fixed_window_books_into_the_next_epoch_aligned_window() {
    let limit = Limit::fixed_window(3, Duration::from_secs(10));
    let mut s = BucketState::default();
    for _ in 0..3 {
        assert_eq!(granted(decide(&mut s, t(7.0), &limit, 1, BIG)), Duration::ZERO);
    }
    // The window started at second 0, so the next one is 3 s away, not 10 s.
    assert_eq!(granted(decide(&mut s, t(7.0), &limit, 1, BIG)), Duration::from_secs(3));
    assert_eq!(granted(decide(&mut s, t(10.0), &limit, 2, BIG)), Duration::ZERO);
    assert_eq!(granted(decide(&mut s, t(10.0), &limit, 1, BIG)), Duration::from_secs(10));
}

#[test]
fn sliding_log_waits_for_the_oldest_entry_to_leave_the_interval() {
    let limit = Limit::sliding_log(2, Duration::from_secs(10));
    let mut s = BucketState::default();
    assert_eq!(granted(decide(&mut s, t(0.0), &limit, 1, BIG)), Duration::ZERO);
    assert_eq!(granted(decide(&mut s, t(4.0), &limit, 1, BIG)), Duration::ZERO);
    assert_eq!(granted(decide(&mut s, t(5.0), &limit, 1, BIG)), Duration::from_secs(5));
    assert_eq!(granted(decide(&mut s, t(5.0), &limit, 1, BIG)), Duration::from_secs(9));
}

#[test]
fn a_wait_beyond_the_ceiling_books_nothing_and_says_when_to_retry() {
    let limit = Limit::fixed_window(1, Duration::from_secs(60));
    let ceiling = limit.wait_ceiling(Duration::from_secs(30));
    let mut s = BucketState::default();
    granted(decide(&mut s, t(0.0), &limit, 1, ceiling));
    assert_eq!(granted(decide(&mut s, t(0.0), &limit, 1, ceiling)), Duration::from_secs(60));
    // tokens == 1: the ceiling is 2 × 60 + 5 s, so the third still books (120 s)…
    assert_eq!(granted(decide(&mut s, t(0.0), &limit, 1, ceiling)), Duration::from_secs(120));
    // …and the fourth (180 s) is refused without booking.
    let before = s.clone();
    assert_eq!(decide(&mut s, t(0.0), &limit, 1, ceiling), Decision::Refused { retry_after: Duration::from_secs(180) });
    assert_eq!(s, before);
}

#[test]
fn a_penalty_blocks_until_retry_after_or_one_refill_whichever_is_later() {
    for limit in [Limit::token_bucket(10, SEC, 10), Limit::fixed_window(10, SEC), Limit::sliding_log(10, SEC)] {
        let mut s = BucketState::default();
        let until = penalize(&mut s, t(0.0), &limit, limit.refill_one(), None);
        assert_eq!(until, t(0.1), "{limit:?}");
        assert_eq!(granted(decide(&mut s, t(0.0), &limit, 1, BIG)), Duration::from_millis(100), "{limit:?}");
        let until = penalize(&mut s, t(0.0), &limit, limit.refill_one(), Some(Duration::from_secs(30)));
        assert_eq!(until, t(30.0));
        assert_eq!(granted(decide(&mut s, t(1.0), &limit, 1, BIG)), Duration::from_secs(29), "{limit:?}");
    }
}

#[test]
fn headers_lower_the_bucket_but_never_raise_it() {
    for limit in [Limit::token_bucket(10, SEC, 10), Limit::fixed_window(10, SEC), Limit::sliding_log(10, SEC)] {
        let mut s = BucketState::default();
        observe(&mut s, t(0.0), &limit, 3, None);
        assert_eq!(peek(&mut s, t(0.0), &limit).remaining, 3, "{limit:?}");
        observe(&mut s, t(0.0), &limit, 8, None);
        assert_eq!(peek(&mut s, t(0.0), &limit).remaining, 3, "{limit:?}");
        observe(&mut s, t(0.0), &limit, 0, Some(Duration::from_millis(700)));
        assert_eq!(peek(&mut s, t(0.0), &limit).next_in, Duration::from_millis(700), "{limit:?}");
    }
}

#[test]
fn peek_reads_without_consuming() {
    let limit = Limit::token_bucket(5, SEC, 5);
    let mut s = BucketState::default();
    granted(decide(&mut s, t(0.0), &limit, 2, BIG));
    let u = peek(&mut s, t(0.0), &limit);
    assert_eq!((u.remaining, u.capacity, u.next_in), (3, 5, Duration::ZERO));
    assert_eq!(peek(&mut s, t(0.0), &limit), u);
}

/// Grant instants (µs) of a run of decisions at the given offsets.
fn run(limit: &Limit, arrivals: &[(u32, u32)], ceiling: Duration) -> Vec<(i64, u32)> {
    let mut s = BucketState::default();
    let mut now = t(0.0).as_micros();
    let mut grants = Vec::new();
    for &(gap_ms, cost) in arrivals {
        now += i64::from(gap_ms) * 1000;
        let cost = cost.min(limit.capacity());
        if let Decision::Granted { wait } = decide(&mut s, Timestamp::from_micros(now), limit, cost, ceiling) {
            grants.push((now + duration_micros(wait), cost));
        }
    }
    grants.sort();
    grants
}

fn arb_limit() -> impl Strategy<Value = Limit> {
    (0..3u8, 1..20u32, 1..5_000u64, 1..40u32).prop_map(|(a, tokens, ms, burst)| {
        let interval = Duration::from_millis(ms);
        match a {
            0 => Limit::token_bucket(tokens, interval, burst),
            1 => Limit::fixed_window(tokens, interval),
            _ => Limit::sliding_log(tokens, interval),
        }
    })
}

/// Every span's grants (instant, cost; sorted) are within what the rule allows.
fn within_the_rule(limit: &Limit, grants: &[(i64, u32)]) -> Result<(), TestCaseError> {
    let w = duration_micros(limit.interval);
    let tokens = u64::from(limit.tokens);
    match limit.algorithm {
        Algorithm::SlidingLog => {
            // Any window (s − w, s]: it suffices to check windows ending at each grant.
            for &(end, _) in grants {
                let n: u64 = grants.iter().filter(|(g, _)| *g > end - w && *g <= end).map(|(_, c)| u64::from(*c)).sum();
                prop_assert!(n <= tokens, "{n} > {tokens} in window ending {end}");
            }
        }
        Algorithm::FixedWindow => {
            let mut per: std::collections::HashMap<i64, u64> = Default::default();
            for &(g, c) in grants {
                *per.entry(g.div_euclid(w)).or_default() += u64::from(c);
            }
            prop_assert!(per.values().all(|&n| n <= tokens));
        }
        Algorithm::TokenBucket => {
            // Over [a, b]: at most burst + tokens × (b − a) / w.
            for (i, &(a, _)) in grants.iter().enumerate() {
                let mut n = 0u64;
                for &(b, c) in &grants[i..] {
                    n += u64::from(c);
                    let allowed = f64::from(limit.burst) + tokens as f64 * (b - a) as f64 / w as f64;
                    prop_assert!(n as f64 <= allowed + 1e-9, "{n} > {allowed} over [{a}, {b}]");
                }
            }
        }
    }
    Ok(())
}

fn arb_lane() -> impl Strategy<Value = Priority> {
    prop_oneof![Just(Priority::High), Just(Priority::Normal), Just(Priority::Low)]
}

/// One decision in a lane, as a store makes it.
fn decide_in(s: &mut BucketState, now: i64, limit: &Limit, cost: u32, lane: Priority, ceiling: Duration) -> Decision {
    lane.decide(s, Timestamp::from_micros(now), limit, cost, ceiling)
}

proptest! {
    #[test]
    fn no_algorithm_grants_more_than_its_rule_allows(
        limit in arb_limit(),
        arrivals in prop::collection::vec((0..600u32, 1..4u32), 1..150),
        ceiling_ms in 0..20_000u64,
    ) {
        within_the_rule(&limit, &run(&limit, &arrivals, Duration::from_millis(ceiling_ms)))?;
    }

    #[test]
    fn lanes_never_grant_more_than_the_rule_allows_and_keep_arrival_order(
        limit in arb_limit(),
        arrivals in prop::collection::vec((0..600u32, 1..4u32, arb_lane()), 1..150),
        ceiling_ms in 0..20_000u64,
    ) {
        let mut s = BucketState::default();
        let mut now = t(0.0).as_micros();
        let (mut grants, mut last) = (Vec::new(), i64::MIN);
        for &(gap_ms, cost, lane) in &arrivals {
            now += i64::from(gap_ms) * 1000;
            let cost = cost.min(limit.capacity());
            if let Decision::Granted { wait } = decide_in(&mut s, now, &limit, cost, lane, Duration::from_millis(ceiling_ms)) {
                let at = now + duration_micros(wait);
                // FIFO across lanes, so within each: no booking overtakes an earlier one.
                prop_assert!(at >= last, "{lane} booked {at} before an earlier booking {last}");
                last = at;
                grants.push((at, cost));
            }
        }
        grants.sort();
        within_the_rule(&limit, &grants)?;
    }

    /// A high request with no earlier high booking still ahead of it is never
    /// refused for what normal and low booked (with one ceiling for all
    /// callers), and behind low traffic alone it waits at most its reserve;
    /// on a token bucket with a burst of 2 or more, a high request of one
    /// token waits not at all once a token has come back since the last high
    /// or normal slot and the last low grant of the whole burst (low leaves
    /// the last token free when it costs less than the burst).
    #[test]
    fn high_is_never_starved_by_lower_lanes(
        limit in arb_limit(),
        arrivals in prop::collection::vec((0..600u32, 1..4u32, arb_lane()), 1..150),
        ceiling_ms in 0..20_000u64,
    ) {
        let ceiling = Duration::from_millis(ceiling_ms);
        let mut s = BucketState::default();
        let mut now = t(0.0).as_micros();
        // The furthest slot booked so far by high and by normal requests.
        let (mut high_ahead, mut normal_ahead) = (i64::MIN, i64::MIN);
        // The last low grant that took the whole burst: a low request leaves
        // the last token only when its cost is below the burst (it would
        // never be granted otherwise), so high may wait for a token after it.
        let mut low_whole_burst = i64::MIN;
        let one_back = duration_micros(reserve(&limit, 1));
        let keeps_a_token = limit.algorithm == Algorithm::TokenBucket && limit.burst >= 2;
        for &(gap_ms, cost, lane) in &arrivals {
            now += i64::from(gap_ms) * 1000;
            let cost = cost.min(limit.capacity());
            let decision = decide_in(&mut s, now, &limit, cost, lane, ceiling);
            if lane == Priority::High && high_ahead <= now {
                let Decision::Granted { wait } = decision else {
                    return Err(TestCaseError::fail(format!("high refused at {now}: {decision:?}")));
                };
                if normal_ahead <= now {
                    prop_assert!(wait <= reserve(&limit, cost), "high waited {wait:?} behind low traffic only");
                }
                if keeps_a_token && cost == 1 && high_ahead.max(normal_ahead).max(low_whole_burst).saturating_add(one_back) <= now {
                    // Zero, but for the increments' rounding (up to 1 µs each).
                    prop_assert!(wait <= Duration::from_micros(3), "low took the token it leaves to high: {wait:?}");
                }
            }
            if let Decision::Granted { wait } = decision {
                let at = now + duration_micros(wait);
                match lane {
                    Priority::High => high_ahead = high_ahead.max(at),
                    Priority::Normal => normal_ahead = normal_ahead.max(at),
                    Priority::Low => {
                        prop_assert_eq!(wait, Duration::ZERO, "low booked ahead");
                        if cost >= limit.burst {
                            low_whole_burst = now;
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn bookings_are_served_in_arrival_order(
        limit in arb_limit(),
        arrivals in prop::collection::vec((0..300u32, 1..3u32), 1..60),
    ) {
        let mut s = BucketState::default();
        let mut now = t(0.0).as_micros();
        let mut last = i64::MIN;
        for &(gap_ms, cost) in &arrivals {
            now += i64::from(gap_ms) * 1000;
            let cost = cost.min(limit.capacity());
            if let Decision::Granted { wait } = decide(&mut s, Timestamp::from_micros(now), &limit, cost, BIG) {
                let at = now + duration_micros(wait);
                prop_assert!(at >= last, "booked {at} before an earlier booking {last}");
                last = last.max(at);
            }
        }
    }
}

#[test]
fn low_alone_takes_the_whole_rate() {
    // Low requests polling every millisecond for ten seconds get exactly what
    // the rule allows over that span: the burst (or a window's tokens) and
    // then every token as it comes back; on a token bucket, all but the
    // burst's last token, which low leaves to the other lanes.
    let cases = [
        (Limit::token_bucket(10, SEC, 5), 4 + 99),
        (Limit::token_bucket(10, SEC, 1), 1 + 99),
        (Limit::fixed_window(10, SEC), 100),
        (Limit::sliding_log(10, SEC), 100),
    ];
    for (limit, expected) in cases {
        let mut s = BucketState::default();
        let start = t(0.0).as_micros();
        let granted = (0..10_000i64)
            .filter(|ms| {
                let d = decide_in(&mut s, start + ms * 1000, &limit, 1, Priority::Low, BIG);
                matches!(d, Decision::Granted { wait: Duration::ZERO })
            })
            .count();
        assert_eq!(granted, expected, "{limit:?}");
    }
}

#[test]
fn a_high_request_gets_the_next_slot_while_low_keeps_the_bucket_busy() {
    // The worked example of docs/limiter.md: 40 per second (one token every
    // 25 ms), burst 40. Low traffic has taken all but the last token; a high
    // request takes that one at once; normal traffic then books 25 ms,
    // 50 ms, … ahead, up to its ceiling.
    let limit = Limit::token_bucket(40, SEC, 40);
    let ceiling = limit.wait_ceiling(Duration::from_secs(30));
    let mut s = BucketState::default();
    let now = t(0.0).as_micros();
    for _ in 0..39 {
        assert_eq!(granted(decide_in(&mut s, now, &limit, 1, Priority::Low, ceiling)), Duration::ZERO);
    }
    let refused = decide_in(&mut s, now, &limit, 1, Priority::Low, ceiling);
    assert_eq!(refused, Decision::Refused { retry_after: Duration::from_millis(25) });
    assert_eq!(granted(decide_in(&mut s, now, &limit, 1, Priority::High, ceiling)), Duration::ZERO);
    // Low waits until two tokens are back (one for it, one left free).
    let refused = decide_in(&mut s, now, &limit, 1, Priority::Low, ceiling);
    assert_eq!(refused, Decision::Refused { retry_after: Duration::from_millis(50) });
    // Normal traffic books up to its ceiling (30 s: 1200 slots); high still gets one beyond it.
    for i in 1..=1200u64 {
        assert_eq!(granted(decide_in(&mut s, now, &limit, 1, Priority::Normal, ceiling)), Duration::from_millis(25 * i));
    }
    assert!(matches!(decide_in(&mut s, now, &limit, 1, Priority::Normal, ceiling), Decision::Refused { .. }));
    let beyond = granted(decide_in(&mut s, now, &limit, 1, Priority::High, ceiling));
    assert_eq!(beyond, ceiling + Duration::from_millis(25));
    assert!(matches!(decide_in(&mut s, now, &limit, 1, Priority::High, ceiling), Decision::Refused { .. }));
}

#[test]
fn low_leaves_the_last_token_even_when_the_rate_does_not_divide_the_interval() {
    // 49 per second: 20 408.16 µs a token, which the increments round up and
    // the span down. A full bucket of 2 still gives low one token and keeps
    // the other for high, which takes it without waiting (rounding aside).
    let limit = Limit::token_bucket(49, SEC, 2);
    let mut s = BucketState::default();
    let now = t(0.0).as_micros();
    assert_eq!(granted(decide_in(&mut s, now, &limit, 1, Priority::Low, BIG)), Duration::ZERO);
    let Decision::Refused { retry_after } = decide_in(&mut s, now, &limit, 1, Priority::Low, BIG) else {
        panic!("low took the last token");
    };
    assert_eq!(retry_after, Duration::from_micros(20_409), "one token's increment, rounded up");
    assert!(granted(decide_in(&mut s, now, &limit, 1, Priority::High, BIG)) <= Duration::from_micros(3));
    // Once both tokens are back, low is granted again.
    assert_eq!(granted(decide_in(&mut s, now + 2 * 20_409, &limit, 1, Priority::Low, BIG)), Duration::ZERO);
}
