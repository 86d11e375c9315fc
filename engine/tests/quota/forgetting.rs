//! The in-process store forgets idle buckets only when that cannot change a
//! decision: ManualClock scenarios for each thing that keeps a bucket (an
//! unrefilled bucket, a window not yet over, a penalty, a live lease, the
//! statistics' retention), and a property test that a store sweeping after
//! every step decides exactly like one that never sweeps.

mod quota_forgetting {
    use std::sync::Arc;
    use std::time::Duration;

    use proptest::prelude::*;
    use sluice_engine::clock::{ManualClock, SharedClock};
    use sluice_engine::quota::store::{DecideArgs, LeaseArgs, StoreDecision};
    use sluice_engine::quota::{BucketKey, Limit, MemoryStore, Priority, QuotaStore, RuleId};

    const MIN: Duration = Duration::from_secs(60);
    const SEC: Duration = Duration::from_secs(1);

    fn key(account: &str) -> BucketKey {
        BucketKey { account: account.into(), scope: "pricing".into(), rule: RuleId("r".into()) }
    }

    fn args(account: &str, limit: Limit) -> DecideArgs {
        DecideArgs { key: key(account), limit, cost: 1, ceiling: 10 * MIN, lane: Priority::Normal, shadow: false, lease: None }
    }

    /// A store that keeps no statistics beyond need, on a manual clock.
    fn store(retention: Duration) -> (MemoryStore, Arc<ManualClock>) {
        let clock = Arc::new(ManualClock::at_test_epoch());
        let shared: SharedClock = clock.clone();
        (MemoryStore::with_idle_retention(shared, retention), clock)
    }

    fn block_on<T>(f: impl std::future::Future<Output = T>) -> T {
        futures::executor::block_on(f)
    }

    #[test]
    fn a_drained_token_bucket_is_kept_until_it_has_refilled() {
        let (store, clock) = store(Duration::ZERO);
        let limit = Limit::token_bucket(10, MIN, 10);
        for _ in 0..10 {
            store.decide_now(&args("a", limit));
        }
        clock.advance(MIN - SEC);
        assert_eq!(store.forget_idle(), 0, "one token short of full");
        assert_eq!(store.live_buckets(), 1);
        clock.advance(SEC);
        assert_eq!(store.forget_idle(), 1, "full again");
        assert_eq!(store.live_buckets(), 0);
        assert_eq!(block_on(store.list_buckets()).expect("memory"), Vec::<BucketKey>::new());
    }

    #[test]
    fn window_algorithms_are_kept_until_their_bookings_leave_the_window() {
        let (store, clock) = store(Duration::ZERO);
        // Fixed windows are aligned to the epoch: the test epoch is on a minute.
        store.decide_now(&args("fw", Limit::fixed_window(5, MIN)));
        store.decide_now(&args("sl", Limit::sliding_log(5, MIN)));
        clock.advance(30 * SEC);
        store.decide_now(&args("sl", Limit::sliding_log(5, MIN)));
        clock.advance(30 * SEC - Duration::from_micros(1));
        assert_eq!(store.forget_idle(), 0);
        clock.advance(Duration::from_micros(1));
        assert_eq!(store.forget_idle(), 1, "the fixed window is over; the log still holds a booking");
        clock.advance(30 * SEC);
        assert_eq!(store.forget_idle(), 1, "the log's last booking has left the interval");
    }

    #[test]
    fn a_penalty_or_a_header_block_keeps_the_bucket_until_it_ends() {
        let (store, clock) = store(Duration::ZERO);
        let fixed = Limit::fixed_window(5, MIN);
        block_on(store.penalize(&key("penalized"), &fixed, SEC, Some(10 * MIN))).expect("penalize");
        block_on(store.observe(&key("observed"), &fixed, 0, Some(5 * MIN))).expect("observe");
        clock.advance(5 * MIN - SEC);
        assert_eq!(store.forget_idle(), 0);
        clock.advance(SEC);
        assert_eq!(store.forget_idle(), 1, "the header block is over");
        clock.advance(5 * MIN - SEC);
        assert_eq!(store.forget_idle(), 0, "the penalty still runs");
        let refused = store.decide_now(&DecideArgs { ceiling: Duration::ZERO, ..args("penalized", fixed) });
        assert!(matches!(refused, StoreDecision::Refused { .. }), "{refused:?}");
        clock.advance(SEC);
        assert_eq!(store.forget_idle(), 1);
    }

    #[test]
    fn a_live_lease_keeps_the_bucket_and_an_expired_or_released_one_does_not() {
        let (store, clock) = store(Duration::ZERO);
        let limit = Limit::token_bucket(1000, SEC, 1000);
        let leased = |account: &str, id: &str| DecideArgs {
            lease: Some(LeaseArgs { max_in_flight: 1, id: id.into(), ttl: MIN }),
            ..args(account, limit)
        };
        store.decide_now(&leased("held", "lease_1"));
        store.decide_now(&leased("given_back", "lease_2"));
        block_on(store.release(&key("given_back"), "lease_2")).expect("release");
        clock.advance(SEC);
        assert_eq!(store.forget_idle(), 1, "only the released one goes");
        let second = store.decide_now(&leased("held", "lease_3"));
        assert!(matches!(second, StoreDecision::Refused { .. }), "the lease still counts: {second:?}");
        clock.advance(MIN);
        assert_eq!(store.forget_idle(), 1, "the lease expired");
    }

    #[test]
    fn statistics_are_kept_for_the_idle_retention_and_then_forgotten() {
        let (store, clock) = store(Duration::from_secs(3600));
        store.decide_now(&args("a", Limit::token_bucket(10, MIN, 10)));
        clock.advance(Duration::from_secs(3600) - SEC);
        assert_eq!(store.forget_idle(), 0);
        assert_eq!(block_on(store.stats(&key("a"))).expect("memory").grants, 1);
        // A use restarts the retention.
        store.decide_now(&args("a", Limit::token_bucket(10, MIN, 10)));
        clock.advance(Duration::from_secs(3600) - SEC);
        assert_eq!(store.forget_idle(), 0);
        assert_eq!(block_on(store.stats(&key("a"))).expect("memory").grants, 2);
        clock.advance(SEC);
        assert_eq!(store.forget_idle(), 1);
        assert_eq!(block_on(store.stats(&key("a"))).expect("memory").grants, 0, "gone with the bucket");
    }

    #[test]
    fn a_shard_emptied_by_the_sweep_gives_its_memory_back_and_fills_again() {
        let (store, clock) = store(Duration::ZERO);
        let limit = Limit::token_bucket(10, SEC, 10);
        for i in 0..20_000 {
            store.decide_now(&args(&format!("acct{i}"), limit));
        }
        clock.advance(SEC);
        assert_eq!(store.forget_idle(), 20_000);
        assert_eq!(store.live_buckets(), 0);
        for i in 0..100 {
            assert_eq!(
                store.decide_now(&args(&format!("acct{i}"), limit)),
                StoreDecision::Granted { wait: Duration::ZERO, lease: None }
            );
        }
        assert_eq!(store.live_buckets(), 100);
    }

    #[derive(Clone, Debug)]
    enum Op {
        Decide { account: usize, cost: u32, ceiling_ms: u64, lease: Option<u8> },
        Penalize { account: usize, retry_after_ms: Option<u64> },
        Observe { account: usize, remaining: u64, reset_ms: u64 },
        Release { account: usize, lease: u8 },
        Peek { account: usize },
        Advance { ms: u64 },
    }

    fn arb_op(interval_ms: u64) -> impl Strategy<Value = Op> {
        let account = 0..3usize;
        prop_oneof![
            4 => (account.clone(), 1..3u32, 0..3 * interval_ms, proptest::option::of(0..3u8))
                .prop_map(|(account, cost, ceiling_ms, lease)| Op::Decide { account, cost, ceiling_ms, lease }),
            1 => (account.clone(), proptest::option::of(0..2 * interval_ms))
                .prop_map(|(account, retry_after_ms)| Op::Penalize { account, retry_after_ms }),
            1 => (account.clone(), 0..4u64, 0..2 * interval_ms)
                .prop_map(|(account, remaining, reset_ms)| Op::Observe { account, remaining, reset_ms }),
            1 => (account.clone(), 0..3u8).prop_map(|(account, lease)| Op::Release { account, lease }),
            1 => account.prop_map(|account| Op::Peek { account }),
            3 => (0..2 * interval_ms).prop_map(|ms| Op::Advance { ms }),
        ]
    }

    fn arb_limit_and_ops() -> impl Strategy<Value = (Limit, Vec<Op>)> {
        (0..3u8, 1..5u32, prop_oneof![Just(1_000u64), Just(60_000u64)], 0..3u32).prop_flat_map(
            |(algorithm, tokens, interval_ms, extra_burst)| {
                let interval = Duration::from_millis(interval_ms);
                let limit = match algorithm {
                    0 => Limit::token_bucket(tokens, interval, tokens + extra_burst),
                    1 => Limit::fixed_window(tokens.max(2), interval),
                    _ => Limit::sliding_log(tokens.max(2), interval),
                };
                (Just(limit), proptest::collection::vec(arb_op(interval_ms), 1..60))
            },
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]
        #[test]
        fn forgetting_idle_buckets_never_changes_a_decision((limit, ops) in arb_limit_and_ops()) {
            let clock = Arc::new(ManualClock::at_test_epoch());
            let shared: SharedClock = clock.clone();
            // Retention zero: forgotten the moment the state allows it.
            let sweeping = MemoryStore::with_idle_retention(shared.clone(), Duration::ZERO);
            let keeping = MemoryStore::with_idle_retention(shared, Duration::from_secs(86_400 * 365));
            let accounts = ["a", "b", "c"];
            for (step, op) in ops.iter().enumerate() {
                let ctx = format!("step {step}: {op:?} on {limit:?}");
                match *op {
                    Op::Decide { account, cost, ceiling_ms, lease } => {
                        let a = DecideArgs {
                            cost: cost.min(limit.capacity()),
                            ceiling: Duration::from_millis(ceiling_ms),
                            lane: Priority::Normal,
                            lease: lease.map(|l| LeaseArgs { max_in_flight: 2, id: format!("lease_{l}"), ttl: limit.interval }),
                            ..args(accounts[account], limit)
                        };
                        prop_assert_eq!(sweeping.decide_now(&a), keeping.decide_now(&a), "{}", ctx);
                    }
                    Op::Penalize { account, retry_after_ms } => {
                        let retry = retry_after_ms.map(Duration::from_millis);
                        let k = key(accounts[account]);
                        let x = block_on(sweeping.penalize(&k, &limit, limit.refill_one(), retry)).expect("memory");
                        let y = block_on(keeping.penalize(&k, &limit, limit.refill_one(), retry)).expect("memory");
                        prop_assert_eq!(x, y, "{}", ctx);
                    }
                    Op::Observe { account, remaining, reset_ms } => {
                        let k = key(accounts[account]);
                        let reset = Some(Duration::from_millis(reset_ms));
                        block_on(sweeping.observe(&k, &limit, remaining, reset)).expect("memory");
                        block_on(keeping.observe(&k, &limit, remaining, reset)).expect("memory");
                    }
                    Op::Release { account, lease } => {
                        let (k, id) = (key(accounts[account]), format!("lease_{lease}"));
                        block_on(sweeping.release(&k, &id)).expect("memory");
                        block_on(keeping.release(&k, &id)).expect("memory");
                    }
                    Op::Peek { account } => {
                        let k = key(accounts[account]);
                        let x = block_on(sweeping.peek(&k, &limit)).expect("memory");
                        let y = block_on(keeping.peek(&k, &limit)).expect("memory");
                        prop_assert_eq!(x, y, "{}", ctx);
                    }
                    Op::Advance { ms } => clock.advance(Duration::from_millis(ms)),
                }
                sweeping.forget_idle();
                prop_assert!(sweeping.live_buckets() <= keeping.live_buckets());
            }
        }
    }
}
