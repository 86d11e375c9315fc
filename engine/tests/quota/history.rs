//! The quota history sampler's cost follows the buckets used since its
//! previous pass, and its table of latest counters forgets idle buckets.

mod quota_history {
    use std::sync::Arc;
    use std::time::Duration;

    use sluice_engine::clock::{Clock, ManualClock, SharedClock};
    use sluice_engine::db::testing::TestDb;
    use sluice_engine::quota::history::{HistoryConfig, QuotaHistory, SampleOutcome};
    use sluice_engine::quota::{Limit, Limiter, LimiterConfig, MemoryStore, QuotaRequest, Rule, RuleRegistry};

    const MIN: Duration = Duration::from_secs(60);
    const HOUR: Duration = Duration::from_secs(3600);

    struct Setup {
        db: TestDb,
        clock: Arc<ManualClock>,
        limiter: Limiter,
        history: QuotaHistory,
    }

    async fn setup() -> Setup {
        let db = TestDb::sqlite().await;
        let clock = Arc::new(ManualClock::at_test_epoch());
        let shared: SharedClock = clock.clone();
        let store = Arc::new(MemoryStore::with_idle_retention(shared.clone(), HOUR));
        let rule = Rule::new("pricing", None, None, Limit::token_bucket(100, MIN, 100)).with_id("r");
        let limiter = Limiter::new(store, RuleRegistry::new([rule]), shared, LimiterConfig::default());
        let config = HistoryConfig { every: MIN, idle_retention: HOUR, ..HistoryConfig::default() };
        let history = QuotaHistory::new(db.db(), config);
        Setup { db, clock, limiter, history }
    }

    impl Setup {
        async fn permit(&self, account: &str) {
            let req = QuotaRequest::new("pricing", "GET", "/p").account(account);
            assert!(self.limiter.reserve(&req).await.expect("reserve").permit().is_some());
        }

        async fn sample(&self) -> SampleOutcome {
            self.history.sample(&self.limiter, self.clock.now(), "test").await.expect("sample")
        }

        async fn count(&self, table: &str) -> i64 {
            sqlx::query_scalar(&format!("SELECT CAST(COUNT(*) AS BIGINT) FROM {table}"))
                .fetch_one(self.db.db().pool())
                .await
                .expect("count")
        }
    }

    fn read(outcome: SampleOutcome) -> (usize, usize, bool) {
        match outcome {
            SampleOutcome::Sampled { buckets, changed, baseline, .. } => (buckets, changed, baseline),
            other => panic!("not sampled: {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_pass_reads_only_the_buckets_used_since_the_previous_pass() {
        let s = setup().await;
        for i in 0..50 {
            s.permit(&format!("acct{i}")).await;
        }
        s.clock.advance(MIN);
        assert_eq!(read(s.sample().await), (50, 50, true), "the baseline reads every bucket");
        s.clock.advance(MIN);
        s.permit("acct7").await;
        s.permit("acct7").await;
        assert_eq!(read(s.sample().await), (1, 1, false), "49 idle buckets are not read");
        assert_eq!(s.count("quota_history").await, 1);
        // The listing starts at the previous slot's start, so a bucket used
        // in the previous slot is read once more (unchanged: nothing written).
        s.clock.advance(MIN);
        assert_eq!(read(s.sample().await), (1, 0, false));
        s.clock.advance(MIN);
        assert_eq!(read(s.sample().await), (0, 0, false), "an idle minute costs nothing per bucket");
        let points = s.history.series("acct7", s.clock.now() - 10 * MIN).await.expect("series");
        assert_eq!(points.iter().map(|p| p.grants).sum::<u64>(), 2);
    }

    #[tokio::test]
    async fn the_overview_reads_totals_per_slot_and_permits_per_bucket() {
        let s = setup().await;
        s.permit("acct0").await;
        s.clock.advance(MIN);
        s.sample().await;
        let since = s.clock.now();
        for _ in 0..3 {
            s.permit("acct1").await;
        }
        s.permit("acct2").await;
        s.clock.advance(MIN);
        s.sample().await;
        let slots = s.history.slot_totals_since(since - MIN).await.expect("slots");
        let last = slots.last().expect("a slot");
        assert_eq!((last.at_ms, last.grants, last.refusals, last.penalties), (s.history.slot_of(s.clock.now()), 4, 0, 0));
        assert_eq!(slots.iter().map(|t| t.grants).sum::<u64>(), 4, "the baseline pass counts no permits");
        let mut by_bucket = s.history.grants_by_bucket_since(since - MIN).await.expect("by bucket");
        by_bucket.sort_by(|a, b| a.account.cmp(&b.account));
        let got: Vec<(&str, &str, &str, u64)> =
            by_bucket.iter().map(|g| (g.account.as_str(), g.rule.0.as_str(), g.scope.as_str(), g.grants)).collect();
        assert_eq!(got, vec![("acct1", "r", "pricing", 3), ("acct2", "r", "pricing", 1)]);
        assert!(s.history.slot_totals_since(s.clock.now()).await.expect("none").is_empty());
    }

    #[tokio::test]
    async fn latest_counters_of_idle_buckets_are_dropped_an_hour_after_their_statistics() {
        let s = setup().await;
        for i in 0..20 {
            s.permit(&format!("acct{i}")).await;
        }
        s.sample().await;
        assert_eq!(s.count("quota_history_latest").await, 20);
        // Past the statistics' retention (the store forgets them) plus the
        // sampling interval, but within the hour's margin: still kept.
        s.clock.advance(HOUR + MIN + 30 * MIN);
        assert_eq!(s.limiter.forget_idle(), 20);
        // Twice: a bucket that restarted at the count it had looks unchanged.
        s.permit("acct0").await;
        s.permit("acct0").await;
        s.sample().await;
        assert_eq!(s.count("quota_history_latest").await, 20);
        s.clock.advance(31 * MIN);
        s.sample().await;
        assert_eq!(s.count("quota_history_latest").await, 1, "only the bucket used since is left");
    }
}
