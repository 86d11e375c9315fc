//! The executor on the real shared-quota limiter: retries spend permits that
//! show up in the limiter's own counters, 429s are counted as penalties, and
//! observed headers hold back the next permit.

use std::sync::Arc;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::SeedableRng;
use sluice_engine::upstream_breaker::memory::MemoryBreakerStore;
use sluice_engine::upstream_breaker::{UpstreamBreaker, UpstreamBreakerConfig};
use sluice_engine::clock::{ManualClock, SharedClock};
use sluice_engine::quota::limiter::{bucket_key, LimiterConfig};
use sluice_engine::quota::{
    BucketStats, Limit, Limiter, MemoryStore, Priority, RedisSettings, RedisStore, RefusalReason, Rule, RuleRegistry,
};
use sluice_engine::retry::middleware::Account;
use sluice_engine::retry::{GiveUpReason, RetryExecutor, RetryPolicy};

use super::breaker_contract::{redis_url, test_prefix};
use super::http_server::{client_with, retry_error, spawn_marketplace};

struct Quota {
    clock: Arc<ManualClock>,
    limiter: Limiter,
    rule: Rule,
}

fn memory_quota(limit: Limit) -> Quota {
    let clock = Arc::new(ManualClock::at_test_epoch());
    let rule = Rule::new("marketplace", None, None, limit);
    let store = Arc::new(MemoryStore::new(clock.clone() as SharedClock));
    let limiter =
        Limiter::new(store, RuleRegistry::new([rule.clone()]), clock.clone() as SharedClock, LimiterConfig::default());
    Quota { clock, limiter, rule }
}

impl Quota {
    fn executor(&self) -> RetryExecutor {
        RetryExecutor::new(Arc::new(self.limiter.clone()), self.clock.clone() as SharedClock)
            .with_rng(StdRng::seed_from_u64(3))
    }

    async fn stats(&self) -> BucketStats {
        self.limiter.stats(&bucket_key("seller-1".to_owned(), &self.rule)).await.expect("stats")
    }
}

fn vtex_pricing() -> Limit {
    Limit::token_bucket(40, Duration::from_secs(1), 1000)
}

#[tokio::test]
async fn retries_show_up_in_the_limiters_grant_counter() {
    let (base, hits) = spawn_marketplace().await;
    let q = memory_quota(vtex_pricing());
    let client = client_with(q.executor());
    let resp = client.get(format!("{base}/5xx")).with_extension(Account::new("seller-1")).send().await;
    assert_eq!(resp.expect("third attempt succeeds").status(), 200);
    assert_eq!((hits.get(), q.stats().await.grants), (3, 3));
}

/// The lane rides on the request (a `Priority` extension) into every
/// attempt's permit: with the bucket drained, a `low` call is refused at
/// once (low never books ahead) while a `high` one books the next slot.
#[tokio::test]
async fn a_calls_lane_reaches_the_limiter_low_is_refused_where_high_books_the_next_slot() {
    let (base, _) = spawn_marketplace().await;
    let q = memory_quota(Limit::token_bucket(1, Duration::from_secs(10), 1));
    let client = client_with(q.executor());
    let send = |lane: Option<Priority>| {
        let mut req = client.get(format!("{base}/echo-account")).with_extension(Account::new("seller-1"));
        if let Some(lane) = lane {
            req = req.with_extension(lane);
        }
        req.send()
    };
    assert_eq!(send(None).await.expect("the only token").status(), 200);
    let err = send(Some(Priority::Low)).await.expect_err("low gets no permit while the bucket is empty");
    assert_eq!((retry_error(&err).reason.code(), retry_error(&err).attempts), ("wait_ceiling", 0));
    assert_eq!(send(Some(Priority::High)).await.expect("high books the next token").status(), 200);
    assert_eq!(q.clock.sleeps(), vec![Duration::from_secs(10)], "high waited for the next token only");
    let stats = q.stats().await;
    assert_eq!(stats.grants, 2);
    assert_eq!((stats.lane(Priority::High).grants, stats.lane(Priority::Low).refusals), (1, 1));
}

#[tokio::test]
async fn a_429_on_a_one_per_minute_feed_is_a_penalty_and_the_retry_waits_a_full_refill() {
    let (base, _) = spawn_marketplace().await;
    let q = memory_quota(Limit::token_bucket(1, Duration::from_secs(60), 1));
    let client = client_with(q.executor());
    let resp = client.get(format!("{base}/rl/plain")).with_extension(Account::new("seller-1")).send().await;
    assert_eq!(resp.expect("retried").status(), 200);
    let stats = q.stats().await;
    assert_eq!((stats.grants, stats.penalties), (2, 1));
    // The pause is one refill; the penalized bucket is free exactly then, so
    // the second permit needs no further wait.
    assert_eq!(q.clock.sleeps(), vec![Duration::from_secs(60)]);
}

#[tokio::test]
async fn observed_headers_hold_back_the_next_permit() {
    let (base, _) = spawn_marketplace().await;
    let q = memory_quota(vtex_pricing());
    let client = client_with(q.executor());
    for _ in 0..2 {
        let resp = client.get(format!("{base}/remaining-zero")).with_extension(Account::new("seller-1")).send().await;
        assert_eq!(resp.expect("ok").status(), 200);
    }
    assert_eq!(q.stats().await.observations, 2);
    // `Remaining: 0, Reset: 30` after the first call: the second waited 30 s
    // for its permit.
    assert_eq!(q.clock.sleeps(), vec![Duration::from_secs(30)]);
}

#[tokio::test]
async fn a_retry_after_beyond_the_ceiling_pauses_the_ceiling_then_gives_up_on_it() {
    let (base, hits) = spawn_marketplace().await;
    let q = memory_quota(vtex_pricing());
    let client = client_with(q.executor());
    let err = client.get(format!("{base}/rl/an-hour")).with_extension(Account::new("seller-1")).send().await;
    let err = err.expect_err("gives up");
    let err = retry_error(&err);
    // Paused the 30 s ceiling; the bucket, penalized for an hour, then refused
    // the permit: nothing more was sent.
    assert!(matches!(err.reason, GiveUpReason::WaitCeiling { .. }), "{err:?}");
    assert_eq!((err.attempts, hits.get()), (1, 1));
    assert_eq!(q.clock.sleeps(), vec![Duration::from_secs(30)]);
    let stats = q.stats().await;
    assert_eq!((stats.penalties, stats.refusals(RefusalReason::WaitCeilingExceeded)), (1, 1));
}

#[tokio::test]
async fn a_call_refused_by_an_open_breaker_is_counted_on_the_quota_dashboard() {
    let (base, hits) = spawn_marketplace().await;
    let q = memory_quota(vtex_pricing());
    let breaker = UpstreamBreaker::new(Arc::new(MemoryBreakerStore::new(q.clock.clone() as SharedClock)), UpstreamBreakerConfig::default());
    let one_shot = RetryPolicy::new(1, Duration::from_millis(500), Duration::from_secs(60)).expect("valid");
    let client = client_with(q.executor().with_policy(one_shot).with_breaker(breaker));
    for _ in 0..5 {
        let err = client.get(format!("{base}/always-503")).with_extension(Account::new("seller-1")).send().await;
        assert!(matches!(retry_error(&err.expect_err("503")).reason, GiveUpReason::AttemptsExhausted));
    }
    let err = client.get(format!("{base}/always-503")).with_extension(Account::new("seller-1")).send().await;
    assert!(matches!(retry_error(&err.expect_err("open")).reason, GiveUpReason::BreakerOpen { .. }));
    let stats = q.stats().await;
    assert_eq!((hits.get(), stats.grants, stats.refusals(RefusalReason::BreakerOpen)), (5, 5, 1));
}

#[tokio::test]
async fn retries_spend_quota_in_the_redis_store_too() {
    let (base, _) = spawn_marketplace().await;
    let clock = Arc::new(ManualClock::at_test_epoch());
    let store = RedisStore::connect(&RedisSettings::single(&redis_url(), &test_prefix())).await.expect("redis");
    let rule = Rule::new("marketplace", None, None, vtex_pricing());
    let limiter =
        Limiter::new(Arc::new(store), RuleRegistry::new([rule.clone()]), clock.clone() as SharedClock, LimiterConfig::default());
    let q = Quota { clock, limiter, rule };
    let client = client_with(q.executor());
    let resp = client.get(format!("{base}/rl/retry-after")).with_extension(Account::new("seller-1")).send().await;
    assert_eq!(resp.expect("retried").status(), 200);
    let stats = q.stats().await;
    assert_eq!((stats.grants, stats.penalties), (2, 1));
}

#[tokio::test]
async fn a_concurrency_lease_is_given_back_after_every_attempt() {
    let (base, hits) = spawn_marketplace().await;
    let mut q = memory_quota(vtex_pricing());
    q.rule.concurrency = Some(1);
    q.limiter.replace_rules(RuleRegistry::new([q.rule.clone()]));
    let client = client_with(q.executor());
    // Three attempts, then a second call: each would be refused with
    // concurrency_limit if an earlier attempt still held the only lease.
    client.get(format!("{base}/5xx")).with_extension(Account::new("seller-1")).send().await.expect("retried");
    client.get(format!("{base}/5xx")).with_extension(Account::new("seller-1")).send().await.expect("ok");
    let stats = q.stats().await;
    assert_eq!((hits.get(), stats.grants, stats.refusals(RefusalReason::ConcurrencyLimit)), (4, 4, 0));
}

#[tokio::test]
async fn a_request_no_rule_covers_gives_up_with_no_rule() {
    let (base, hits) = spawn_marketplace().await;
    let q = memory_quota(vtex_pricing());
    let executor = q.executor();
    let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
        .with(sluice_engine::retry::middleware::RetryMiddleware::new(Arc::new(executor)).default_scope("content"))
        .build();
    let err = client.get(format!("{base}/5xx")).send().await.expect_err("no rule");
    assert!(matches!(retry_error(&err).reason, GiveUpReason::NoRule));
    assert_eq!(hits.get(), 0);
}
