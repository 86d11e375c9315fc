//! Scenarios that need time to pass: the memory store with a `ManualClock`.
//! `acquire` sleeps on the manual clock, which advances it and records the
//! pause, so every wait is asserted exactly and nothing sleeps for real.

mod quota_scenarios {
    use std::time::Duration;

    use sluice_engine::clock::Clock;
    use sluice_engine::quota::{
        Limit, LimiterConfig, Outcome, QuotaRequest, RateLimitHeaders, RefusalReason, Rule, RuleRegistry,
    };

    use crate::support::{Backend, Harness};

    const SEC: Duration = Duration::from_secs(1);

    fn rule(limit: Limit) -> Rule {
        Rule::new("feeds", None, None, limit).with_id("r1")
    }

    fn req() -> QuotaRequest {
        QuotaRequest::new("feeds", "GET", "/api/v1/feed").account("acct42")
    }

    async fn harness(r: Rule, config: LimiterConfig) -> Harness {
        Harness::new(&Backend::Memory, vec![r], config).await
    }

    async fn granted(h: &Harness) -> Duration {
        h.limiter.acquire(&req()).await.expect("acquire").permit().expect("granted").wait
    }

    #[tokio::test]
    async fn acquire_holds_until_the_next_window_boundary() {
        let h = harness(rule(Limit::fixed_window(3, SEC * 10)), LimiterConfig::default()).await;
        h.clock.advance(SEC * 7);
        for _ in 0..3 {
            assert_eq!(granted(&h).await, Duration::ZERO);
        }
        assert_eq!(granted(&h).await, SEC * 3, "the window began at second 0");
        assert_eq!(h.clock.sleeps(), vec![SEC * 3]);
        // Now at second 10: two more fit the new window, the next waits for second 20.
        assert_eq!(granted(&h).await, Duration::ZERO);
        assert_eq!(granted(&h).await, Duration::ZERO);
        assert_eq!(granted(&h).await, SEC * 10);
    }

    #[tokio::test]
    async fn the_token_bucket_refills_continuously_after_a_burst() {
        let h = harness(rule(Limit::token_bucket(2, SEC, 4)), LimiterConfig::default()).await;
        for _ in 0..4 {
            assert_eq!(granted(&h).await, Duration::ZERO);
        }
        h.clock.advance(Duration::from_millis(750));
        assert_eq!(granted(&h).await, Duration::ZERO, "1.5 tokens refilled");
        assert_eq!(granted(&h).await, Duration::from_millis(250));
        // A long pause refills the bucket to its burst, never beyond.
        h.clock.advance(SEC * 60);
        let usage = h.limiter.peek(&req()).await.expect("peek").expect("rule").1;
        assert_eq!(usage.remaining, 4);
    }

    #[tokio::test]
    async fn a_penalty_ends_when_its_time_has_passed() {
        let h = harness(rule(Limit::token_bucket(10, SEC, 10)), LimiterConfig::default()).await;
        h.limiter.penalize(&req(), Some(SEC * 30)).await.expect("penalize");
        assert_eq!(granted(&h).await, SEC * 30);
        assert_eq!(granted(&h).await, Duration::from_millis(100), "drained: steady rate after the block");
    }

    #[tokio::test]
    async fn remaining_zero_blocks_until_the_reset() {
        let h = harness(rule(Limit::sliding_log(5, SEC * 60)), LimiterConfig::default()).await;
        let headers = RateLimitHeaders::parse(Some("0"), Some("12"), h.clock.now());
        assert_eq!(headers.reset_in, Some(SEC * 12));
        h.limiter.observe(&req(), headers).await.expect("observe");
        assert_eq!(granted(&h).await, SEC * 12);
        // Epoch-style reset values are understood too.
        let reset = (h.clock.now().as_secs() + 5).to_string();
        let headers = RateLimitHeaders::parse(Some("0"), Some(&reset), h.clock.now());
        assert_eq!(headers.reset_in, Some(SEC * 5));
    }

    #[tokio::test]
    async fn a_dead_holders_lease_is_reclaimed_after_its_ttl() {
        let mut r = rule(Limit::token_bucket(100, SEC, 100));
        r.concurrency = Some(1);
        let h = harness(r, LimiterConfig { lease_ttl: SEC * 10 }).await;
        assert!(h.limiter.acquire(&req()).await.expect("acquire").permit().is_some());
        let refused = h.limiter.acquire(&req()).await.expect("acquire");
        assert_eq!(refused.refusal().map(|r| r.reason), Some(RefusalReason::ConcurrencyLimit));
        h.clock.advance(SEC * 10);
        assert!(h.limiter.acquire(&req()).await.expect("acquire").permit().is_some());
    }

    #[tokio::test]
    async fn bucket_state_carries_over_a_rule_edit() {
        let h = harness(rule(Limit::token_bucket(1, SEC * 60, 1)), LimiterConfig::default()).await;
        assert_eq!(granted(&h).await, Duration::ZERO);
        let mut edited = rule(Limit::token_bucket(2, SEC * 60, 1));
        edited.note = "raised".into();
        h.limiter.replace_rules(RuleRegistry::new([edited]));
        // The booking made under the old rule stands (the bucket is not reset
        // to full by the edit): the next slot is still 60 s away…
        let outcome = h.limiter.reserve(&req()).await.expect("reserve");
        assert_eq!(outcome.permit().map(|p| p.wait), Some(SEC * 60));
        // …and after it the new rate (30 s per token) applies.
        let outcome = h.limiter.reserve(&req().max_wait(SEC * 120)).await.expect("reserve");
        assert_eq!(outcome.permit().map(|p| p.wait), Some(SEC * 90));
    }

    #[tokio::test]
    async fn stats_give_wait_percentiles_and_refusals_by_reason() {
        let h = harness(rule(Limit::token_bucket(1, SEC, 1)), LimiterConfig::default()).await;
        for _ in 0..10 {
            h.limiter.reserve(&req()).await.expect("reserve");
        }
        let key = h.limiter.peek(&req()).await.expect("peek").expect("rule").0;
        let stats = h.limiter.stats(&key).await.expect("stats");
        // Ceiling max(30 s, 2 × 1 s + 5 s) = 30 s: all ten book (waits 0..9 s).
        assert_eq!((stats.grants, stats.waited, stats.refusals_total()), (10, 9, 0));
        assert_eq!(stats.wait_percentile(0.5), Some(Duration::from_millis(4096)));
        assert_eq!(stats.wait_percentile(0.95), Some(Duration::from_millis(16384)));
        let r = req().max_wait(Duration::ZERO);
        for _ in 0..30 {
            h.limiter.reserve(&r).await.expect("reserve");
        }
        let stats = h.limiter.stats(&key).await.expect("stats");
        assert_eq!(stats.refusals(RefusalReason::WaitCeilingExceeded), 30);
        assert!(matches!(h.limiter.reserve(&r).await, Ok(Outcome::Refused(_))));
    }
}
