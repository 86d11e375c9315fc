//! The limiter contract: every case runs against the memory store, Redis and
//! a Redis Cluster (see `main.rs`).
//!
//! Redis decides with its own `TIME`, which tests cannot stop. The cases are
//! therefore written so that wall time cannot change their outcome: they never
//! advance time, they assert on booked waits (which real time can only shorten,
//! by at most the test's own run time, `Harness::tolerance`) and on counts, and
//! they use intervals of minutes or hours so a second of drift is harmless.
//! Scenarios that need time to pass (window boundaries, lease expiry after a
//! while) run on the memory store with a `ManualClock` in `scenarios.rs`.

use std::time::Duration;

use futures::future::join_all;
use sluice_engine::quota::{
    Limit, LimiterConfig, Outcome, Priority, QuotaError, QuotaRequest, RateLimitHeaders, RefusalReason, Rule,
};

use crate::support::{assert_wait, Backend, Harness};

const MIN: Duration = Duration::from_secs(60);
const HOUR: Duration = Duration::from_secs(3600);

fn rule(id: &str, limit: Limit) -> Rule {
    Rule::new("pricing", None, None, limit).with_id(id)
}

fn req() -> QuotaRequest {
    QuotaRequest::new("pricing", "PUT", "/api/prices/1").account("acct42")
}

async fn wait_of(h: &Harness, r: &QuotaRequest) -> Duration {
    match h.limiter.reserve(r).await.expect("reserve") {
        Outcome::Granted(p) => p.wait,
        Outcome::Refused(r) => panic!("refused: {r:?}"),
    }
}

pub async fn token_bucket_gives_the_burst_then_books_at_the_steady_rate(b: &Backend) {
    let h = Harness::new(b, vec![rule("tb", Limit::token_bucket(2, HOUR, 3))], LimiterConfig::default()).await;
    let r = req().max_wait(2 * HOUR);
    for _ in 0..3 {
        assert_eq!(wait_of(&h, &r).await, Duration::ZERO);
    }
    assert_wait(wait_of(&h, &r).await, HOUR / 2, h.tolerance);
    assert_wait(wait_of(&h, &r).await, HOUR, h.tolerance);
    assert_wait(wait_of(&h, &r.clone().cost(2)).await, 2 * HOUR, h.tolerance);
}

pub async fn fixed_windows_are_aligned_to_the_unix_epoch(b: &Backend) {
    let h = Harness::new(b, vec![rule("fw", Limit::fixed_window(2, HOUR))], LimiterConfig::default()).await;
    let r = req().max_wait(3 * HOUR);
    let now = h.store_now().await.as_micros();
    let hour = HOUR.as_micros() as i64;
    let next_window = Duration::from_micros(((now.div_euclid(hour) + 1) * hour - now) as u64);
    assert_eq!(wait_of(&h, &r).await, Duration::ZERO);
    assert_eq!(wait_of(&h, &r).await, Duration::ZERO);
    assert_wait(wait_of(&h, &r).await, next_window, h.tolerance);
    assert_wait(wait_of(&h, &r).await, next_window, h.tolerance);
    assert_wait(wait_of(&h, &r).await, next_window + HOUR, h.tolerance);
}

pub async fn sliding_log_allows_tokens_per_interval_exactly(b: &Backend) {
    let h = Harness::new(b, vec![rule("sl", Limit::sliding_log(3, HOUR))], LimiterConfig::default()).await;
    let r = req().max_wait(3 * HOUR);
    for _ in 0..3 {
        assert_eq!(wait_of(&h, &r).await, Duration::ZERO);
    }
    assert_wait(wait_of(&h, &r).await, HOUR, h.tolerance);
    assert_wait(wait_of(&h, &r.clone().cost(2)).await, HOUR, h.tolerance);
    assert_wait(wait_of(&h, &r).await, 2 * HOUR, h.tolerance);
}

pub async fn single_token_rules_may_wait_two_intervals_plus_five_seconds(b: &Backend) {
    let h = Harness::new(b, vec![rule("one", Limit::token_bucket(1, MIN, 1))], LimiterConfig::default()).await;
    assert_eq!(wait_of(&h, &req()).await, Duration::ZERO);
    assert_wait(wait_of(&h, &req()).await, MIN, h.tolerance);
    assert_wait(wait_of(&h, &req()).await, 2 * MIN, h.tolerance);
    // 3 min > 2 × 60 + 5 s: refused, and nothing booked (the next asks for the same slot).
    for _ in 0..2 {
        let Outcome::Refused(refusal) = h.limiter.reserve(&req()).await.expect("reserve") else { panic!("granted") };
        assert_eq!(refusal.reason, RefusalReason::WaitCeilingExceeded);
        assert_wait(refusal.retry_after.expect("retry_after"), 3 * MIN, h.tolerance);
        if h.tolerance.is_zero() {
            assert_eq!(refusal.retry_after_secs(), Some(180));
        }
    }
}

pub async fn multi_token_rules_may_wait_one_interval_plus_five_seconds(b: &Backend) {
    let h = Harness::new(b, vec![rule("two", Limit::token_bucket(2, MIN, 2))], LimiterConfig::default()).await;
    let waits = [0, 0, 30, 60];
    for w in waits {
        assert_wait(wait_of(&h, &req()).await, Duration::from_secs(w), h.tolerance);
    }
    let Outcome::Refused(refusal) = h.limiter.reserve(&req()).await.expect("reserve") else { panic!("granted") };
    assert_eq!(refusal.reason, RefusalReason::WaitCeilingExceeded);
    assert_wait(refusal.retry_after.expect("retry_after"), Duration::from_secs(90), h.tolerance);
    // A caller may ask for a longer ceiling than the default.
    assert_wait(wait_of(&h, &req().max_wait(2 * MIN)).await, Duration::from_secs(90), h.tolerance);
}

pub async fn concurrent_reservations_get_distinct_slots_in_order(b: &Backend) {
    let h = Harness::new(b, vec![rule("q", Limit::token_bucket(1, MIN, 1))], LimiterConfig::default()).await;
    let r = req().max_wait(20 * MIN);
    let outcomes = join_all((0..10).map(|_| h.limiter.reserve(&r))).await;
    let mut waits: Vec<u64> = outcomes
        .into_iter()
        .map(|o| o.expect("reserve").permit().expect("granted").wait.as_secs_f64().round() as u64)
        .collect();
    waits.sort_unstable();
    assert_eq!(waits, (0..10).map(|i| i * 60).collect::<Vec<_>>());
    // Sequential callers are served in booking order.
    let a = wait_of(&h, &r).await;
    let b2 = wait_of(&h, &r).await;
    assert!(b2 > a);
}

pub async fn a_429_blocks_the_bucket_until_retry_after_or_one_refill(b: &Backend) {
    let mut orders = rule("orders", Limit::token_bucket(10, Duration::from_secs(1), 10));
    orders.scope = "orders".into();
    orders.min_penalty = Some(MIN);
    let rules = vec![rule("fast", Limit::token_bucket(10, HOUR, 10)), orders];
    let h = Harness::new(b, rules, LimiterConfig::default()).await;
    let blocked = h.limiter.penalize(&req(), None).await.expect("penalize").expect("rule");
    assert_eq!(blocked, HOUR / 10, "one token's refill");
    assert_wait(wait_of(&h, &req().max_wait(HOUR)).await, HOUR / 10, h.tolerance);
    let blocked = h.limiter.penalize(&req(), Some(HOUR)).await.expect("penalize").expect("rule");
    assert_eq!(blocked, HOUR);
    assert_wait(wait_of(&h, &req().max_wait(2 * HOUR)).await, HOUR, h.tolerance);
    // VTEX Orders: at least a minute after a 429, even with a 1 s Retry-After.
    let o = QuotaRequest::new("orders", "GET", "/api/oms/orders").account("acct42").max_wait(2 * MIN);
    assert_eq!(h.limiter.penalize(&o, Some(Duration::from_secs(1))).await.expect("penalize"), Some(MIN));
    assert_wait(wait_of(&h, &o).await, MIN, h.tolerance);
    let key = h.limiter.peek(&o).await.expect("peek").expect("rule").0;
    assert_eq!(h.limiter.stats(&key).await.expect("stats").penalties, 1);
}

pub async fn rate_limit_headers_lower_the_bucket_and_never_raise_it(b: &Backend) {
    let h = Harness::new(b, vec![rule("hdr", Limit::fixed_window(10, HOUR))], LimiterConfig::default()).await;
    let remaining = |n: u64| RateLimitHeaders { remaining: Some(n), reset_in: None };
    h.limiter.observe(&req(), remaining(3)).await.expect("observe");
    assert_eq!(h.limiter.peek(&req()).await.expect("peek").expect("rule").1.remaining, 3);
    h.limiter.observe(&req(), remaining(8)).await.expect("observe");
    assert_eq!(h.limiter.peek(&req()).await.expect("peek").expect("rule").1.remaining, 3);
    let zero = RateLimitHeaders { remaining: Some(0), reset_in: Some(2 * MIN) };
    h.limiter.observe(&req(), zero).await.expect("observe");
    let usage = h.limiter.peek(&req()).await.expect("peek").expect("rule").1;
    assert_eq!(usage.remaining, 0);
    assert_wait(usage.next_in, 2 * MIN, h.tolerance);
}

pub async fn peek_reads_usage_without_consuming(b: &Backend) {
    let h = Harness::new(b, vec![rule("p", Limit::token_bucket(5, HOUR, 5))], LimiterConfig::default()).await;
    let first = h.limiter.peek(&req()).await.expect("peek").expect("rule").1;
    assert_eq!((first.remaining, first.capacity, first.next_in), (5, 5, Duration::ZERO));
    assert_eq!(h.limiter.peek(&req()).await.expect("peek").expect("rule").1, first);
    wait_of(&h, &req().cost(2)).await;
    assert_eq!(h.limiter.peek(&req()).await.expect("peek").expect("rule").1.remaining, 3);
}

pub async fn shadow_rules_record_but_never_block(b: &Backend) {
    let mut r = rule("shadow", Limit::token_bucket(1, HOUR, 1));
    r.shadow = true;
    let h = Harness::new(b, vec![r], LimiterConfig::default()).await;
    for _ in 0..4 {
        let permit = h.limiter.acquire(&req()).await.expect("acquire").permit().cloned().expect("granted");
        assert!(permit.shadow);
        assert_eq!(permit.wait, Duration::ZERO);
    }
    assert!(h.clock.sleeps().is_empty(), "shadow permits never sleep");
    let key = h.limiter.peek(&req()).await.expect("peek").expect("rule").0;
    let stats = h.limiter.stats(&key).await.expect("stats");
    // 1st free, 2nd would wait 1 h, 3rd 2 h, 4th (3 h > 2 h 5 s) would be refused.
    assert_eq!((stats.grants, stats.refusals(RefusalReason::WaitCeilingExceeded), stats.shadow_blocks), (3, 1, 3));
}

pub async fn requests_matching_no_rule_are_refused_not_unlimited(b: &Backend) {
    let h = Harness::new(b, vec![rule("p", Limit::token_bucket(5, HOUR, 5))], LimiterConfig::default()).await;
    let r = QuotaRequest::new("content", "GET", "/cards").account("acct42");
    let Outcome::Refused(refusal) = h.limiter.acquire(&r).await.expect("acquire") else { panic!("granted") };
    assert_eq!((refusal.reason, refusal.rule), (RefusalReason::NoRule, None));
    let buckets = h.limiter.list_buckets().await.expect("list");
    let none = buckets.iter().find(|k| k.rule.as_str() == "_none").expect("no-rule bucket listed");
    assert_eq!(h.limiter.stats(none).await.expect("stats").refusals(RefusalReason::NoRule), 1);
}

pub async fn costs_above_one_spend_several_tokens_and_too_large_costs_are_errors(b: &Backend) {
    let h = Harness::new(b, vec![rule("c", Limit::token_bucket(10, HOUR, 10))], LimiterConfig::default()).await;
    let r = req().max_wait(HOUR);
    assert_eq!(wait_of(&h, &r.clone().cost(4)).await, Duration::ZERO);
    assert_eq!(wait_of(&h, &r.clone().cost(4)).await, Duration::ZERO);
    assert_wait(wait_of(&h, &r.clone().cost(4)).await, HOUR * 2 / 10, h.tolerance);
    let err = h.limiter.reserve(&r.clone().cost(11)).await.expect_err("cost above capacity");
    assert!(matches!(err, QuotaError::InvalidCost { cost: 11, capacity: 10 }));
    assert!(matches!(h.limiter.reserve(&r.cost(0)).await, Err(QuotaError::InvalidCost { .. })));
}

pub async fn concurrency_leases_cap_in_flight_requests_and_expire(b: &Backend) {
    let mut r = rule("conc", Limit::token_bucket(100, Duration::from_secs(1), 100));
    r.concurrency = Some(2);
    let h = Harness::new(b, vec![r.clone()], LimiterConfig { lease_ttl: HOUR }).await;
    let a = h.limiter.acquire(&req()).await.expect("acquire").permit().cloned().expect("granted");
    let _b = h.limiter.acquire(&req()).await.expect("acquire").permit().cloned().expect("granted");
    let Outcome::Refused(refusal) = h.limiter.acquire(&req()).await.expect("acquire") else { panic!("granted") };
    assert_eq!(refusal.reason, RefusalReason::ConcurrencyLimit);
    h.limiter.release(a.lease.as_ref().expect("lease")).await.expect("release");
    assert!(h.limiter.acquire(&req()).await.expect("acquire").permit().is_some());
    // A lease whose holder died is reclaimed at its expiry (here: at once).
    let h = Harness::new(b, vec![r], LimiterConfig { lease_ttl: Duration::ZERO }).await;
    for _ in 0..5 {
        assert!(h.limiter.acquire(&req()).await.expect("acquire").permit().is_some());
    }
}

pub async fn accounts_have_separate_buckets_and_all_are_listed(b: &Backend) {
    let h = Harness::new(b, vec![rule("acc", Limit::token_bucket(1, HOUR, 1))], LimiterConfig::default()).await;
    for account in ["a1", "a2", "a3"] {
        let r = req().account(account);
        assert_eq!(wait_of(&h, &r).await, Duration::ZERO);
    }
    let buckets = h.limiter.list_buckets().await.expect("list");
    let accounts: Vec<&str> = buckets.iter().map(|k| k.account.as_str()).collect();
    assert_eq!(accounts, vec!["a1", "a2", "a3"]);
    // A capped listing holds at most that many, sorted, each one listed above.
    let two = h.limiter.list_buckets_since(i64::MIN, 2).await.expect("list");
    assert_eq!(two.len(), 2, "{two:?}");
    assert!(two[0] < two[1] && two.iter().all(|k| buckets.contains(k)), "{two:?}");
    assert!(h.limiter.list_buckets_since(i64::MIN, 0).await.expect("list").is_empty());
    // The retry executor records its open breaker against the same bucket.
    h.limiter.record_refusal(&req().account("a1"), RefusalReason::BreakerOpen).await.expect("record");
    let stats = h.limiter.stats(&buckets[0]).await.expect("stats");
    assert_eq!((stats.grants, stats.waited, stats.refusals(RefusalReason::BreakerOpen)), (1, 0, 1));
    assert_eq!(stats.wait_percentile(0.95), Some(Duration::from_millis(1)));
}

async fn refused_after(h: &Harness, r: &QuotaRequest) -> Duration {
    match h.limiter.reserve(r).await.expect("reserve") {
        Outcome::Granted(p) => panic!("granted after {:?}", p.wait),
        Outcome::Refused(r) => {
            assert_eq!(r.reason, RefusalReason::WaitCeilingExceeded);
            r.retry_after.expect("retry_after")
        }
    }
}

pub async fn lanes_book_within_their_own_horizons(b: &Backend) {
    // 2 per hour, burst 2: one slot every 30 min; normal's ceiling is 1 h 5 s.
    let h = Harness::new(b, vec![rule("lanes", Limit::token_bucket(2, HOUR, 2))], LimiterConfig::default()).await;
    let (high, low) = (req().priority(Priority::High), req().priority(Priority::Low));
    // Low takes what is free now, nothing ahead, and not the last token:
    // refused until two are back (one for it, one left free).
    assert_eq!(wait_of(&h, &low).await, Duration::ZERO);
    assert_wait(refused_after(&h, &low).await, HOUR / 2, h.tolerance);
    // High takes the token low left, at once.
    assert_eq!(wait_of(&h, &high).await, Duration::ZERO);
    // Normal books up to its ceiling…
    assert_wait(wait_of(&h, &req()).await, HOUR / 2, h.tolerance);
    assert_wait(wait_of(&h, &req()).await, HOUR, h.tolerance);
    assert_wait(refused_after(&h, &req()).await, HOUR * 3 / 2, h.tolerance);
    // …and high one slot beyond it, then no further.
    assert_wait(wait_of(&h, &high).await, HOUR * 3 / 2, h.tolerance);
    assert_wait(refused_after(&h, &high).await, 2 * HOUR, h.tolerance);
    assert_wait(refused_after(&h, &low).await, HOUR * 5 / 2, h.tolerance);

    let key = h.limiter.peek(&req()).await.expect("peek").expect("rule").0;
    let stats = h.limiter.stats(&key).await.expect("stats");
    let lane = |p| {
        let l = stats.lane(p);
        (l.grants, l.waited, l.refusals)
    };
    assert_eq!(lane(Priority::High), (2, 1, 1));
    assert_eq!(lane(Priority::Normal), (2, 2, 1));
    assert_eq!(lane(Priority::Low), (1, 0, 2));
    assert_eq!(stats.lane(Priority::Low).wait_sum_us, 0);
    assert_eq!(stats.lane(Priority::High).wait_percentile(0.95), stats.wait_percentile(1.0));
    // A refusal decided elsewhere counts against the request's lane.
    h.limiter.record_refusal(&high, RefusalReason::BreakerOpen).await.expect("record");
    assert_eq!(h.limiter.stats(&key).await.expect("stats").lane(Priority::High).refusals, 2);
}

pub async fn window_lanes_reserve_one_interval_for_high(b: &Backend) {
    // Two per hour-long window, ceiling 2 h: low takes this window's two,
    // normal the next two windows', high one window beyond (both its tokens).
    let h = Harness::new(b, vec![rule("fw", Limit::fixed_window(2, HOUR))], LimiterConfig::default()).await;
    let r = req().max_wait(2 * HOUR);
    let (high, low) = (r.clone().priority(Priority::High), r.clone().priority(Priority::Low));
    for _ in 0..2 {
        assert_eq!(wait_of(&h, &low).await, Duration::ZERO);
    }
    let now = h.store_now().await.as_micros();
    let hour = HOUR.as_micros() as i64;
    let next_window = Duration::from_micros(((now.div_euclid(hour) + 1) * hour - now) as u64);
    assert!(refused_after(&h, &low).await <= next_window);
    for window in [next_window, next_window + HOUR] {
        for _ in 0..2 {
            assert_wait(wait_of(&h, &r).await, window, h.tolerance);
        }
    }
    assert_wait(refused_after(&h, &r).await, next_window + 2 * HOUR, h.tolerance);
    for _ in 0..2 {
        assert_wait(wait_of(&h, &high).await, next_window + 2 * HOUR, h.tolerance);
    }
    assert_wait(refused_after(&h, &high).await, next_window + 3 * HOUR, h.tolerance);

    // Two per hour, exact; ceiling 1 h 5 s: low takes two now, normal the two
    // an hour on, high the two after those, an interval beyond normal's reach.
    let h = Harness::new(b, vec![rule("sl", Limit::sliding_log(2, HOUR))], LimiterConfig::default()).await;
    let r = req().max_wait(HOUR);
    let high = r.clone().priority(Priority::High);
    for _ in 0..2 {
        assert_eq!(wait_of(&h, &r.clone().priority(Priority::Low)).await, Duration::ZERO);
    }
    for _ in 0..2 {
        assert_wait(wait_of(&h, &r).await, HOUR, h.tolerance);
    }
    assert_wait(refused_after(&h, &r).await, 2 * HOUR, h.tolerance);
    for _ in 0..2 {
        assert_wait(wait_of(&h, &high).await, 2 * HOUR, h.tolerance);
    }
    assert_wait(refused_after(&h, &high).await, 3 * HOUR, h.tolerance);
}

/// Every case, for backends that run them all in one test (Cluster).
pub async fn run_all(b: &Backend) {
    token_bucket_gives_the_burst_then_books_at_the_steady_rate(b).await;
    fixed_windows_are_aligned_to_the_unix_epoch(b).await;
    sliding_log_allows_tokens_per_interval_exactly(b).await;
    single_token_rules_may_wait_two_intervals_plus_five_seconds(b).await;
    multi_token_rules_may_wait_one_interval_plus_five_seconds(b).await;
    concurrent_reservations_get_distinct_slots_in_order(b).await;
    a_429_blocks_the_bucket_until_retry_after_or_one_refill(b).await;
    rate_limit_headers_lower_the_bucket_and_never_raise_it(b).await;
    peek_reads_usage_without_consuming(b).await;
    shadow_rules_record_but_never_block(b).await;
    requests_matching_no_rule_are_refused_not_unlimited(b).await;
    costs_above_one_spend_several_tokens_and_too_large_costs_are_errors(b).await;
    concurrency_leases_cap_in_flight_requests_and_expire(b).await;
    accounts_have_separate_buckets_and_all_are_listed(b).await;
    lanes_book_within_their_own_horizons(b).await;
    window_lanes_reserve_one_interval_for_high(b).await;
}

/// One `#[tokio::test]` per case for a backend.
macro_rules! contract_tests {
    ($backend:expr; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                $crate::contract::$case(&$backend).await;
            }
        )*
    };
}

/// The memory store (Rust math) and Redis (Lua math) give the same answers to
/// the same pseudo-random operation sequences, in all three priority lanes,
/// and count the same per-lane statistics. Token bucket and sliding log
/// only: they do not depend on where "now" falls (fixed windows are aligned to
/// the epoch, and Redis's now is not the manual clock's), and the contract
/// cases above cover fixed windows on both stores.
pub async fn random_sequences_agree_between_the_rust_and_lua_math() {
    let limits = [Limit::token_bucket(5, HOUR, 8), Limit::sliding_log(5, HOUR)];
    for (n, limit) in limits.into_iter().enumerate() {
        for seed in 0..6u64 {
            let id = format!("diff{n}");
            let memory = Harness::new(&Backend::Memory, vec![rule(&id, limit)], LimiterConfig::default()).await;
            let redis = Harness::new(&Backend::redis(), vec![rule(&id, limit)], LimiterConfig::default()).await;
            let mut x = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            for step in 0..40 {
                x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
                let r = (x >> 33) as u32;
                let ctx = format!("{limit:?} seed {seed} step {step} op {}", r % 10);
                match r % 10 {
                    0 => {
                        let retry = (r % 3 == 0).then_some(Duration::from_secs(u64::from(r % 7200)));
                        let a = memory.limiter.penalize(&req(), retry).await.expect("penalize");
                        let b = redis.limiter.penalize(&req(), retry).await.expect("penalize");
                        assert_eq!(a, b, "{ctx}");
                    }
                    1 => {
                        let headers = RateLimitHeaders { remaining: Some(u64::from(r % 6)), reset_in: Some(MIN) };
                        memory.limiter.observe(&req(), headers).await.expect("observe");
                        redis.limiter.observe(&req(), headers).await.expect("observe");
                    }
                    _ => {
                        let lane = Priority::ALL[(r / 10 % 3) as usize];
                        let q = req().cost(1 + r % 3).max_wait(5 * HOUR).priority(lane);
                        let a = memory.limiter.reserve(&q).await.expect("reserve");
                        let b = redis.limiter.reserve(&q).await.expect("reserve");
                        match (a, b) {
                            (Outcome::Granted(a), Outcome::Granted(b)) => assert_wait(b.wait, a.wait, redis.tolerance),
                            (Outcome::Refused(a), Outcome::Refused(b)) => {
                                assert_eq!(a.reason, b.reason, "{ctx}");
                                assert_wait(b.retry_after.expect("r"), a.retry_after.expect("r"), redis.tolerance);
                            }
                            (a, b) => panic!("{ctx}: memory {a:?}, redis {b:?}"),
                        }
                    }
                }
                let (key, a) = memory.limiter.peek(&req()).await.expect("peek").expect("rule");
                let b = redis.limiter.peek(&req()).await.expect("peek").expect("rule").1;
                assert_eq!((a.remaining, a.capacity), (b.remaining, b.capacity), "{ctx}");
                assert_wait(b.next_in, a.next_in, redis.tolerance);
                let (a, b) = (memory.limiter.stats(&key).await.expect("stats"), redis.limiter.stats(&key).await.expect("stats"));
                for lane in Priority::ALL {
                    let (a, b) = (a.lane(lane), b.lane(lane));
                    assert_eq!((a.grants, a.waited, a.refusals), (b.grants, b.waited, b.refusals), "{ctx} {lane}");
                }
            }
        }
    }
}
