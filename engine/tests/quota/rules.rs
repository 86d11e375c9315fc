//! Rule persistence (migration 0002) and hot reload, on SQLite and PostgreSQL.

mod quota_rules_repo {
    use std::sync::Arc;
    use std::time::Duration;

    use sluice_engine::clock::{ManualClock, SharedClock, Timestamp};
    use sluice_engine::db::testing::TestDb;
    use sluice_engine::quota::{
        Limit, Limiter, LimiterConfig, MemoryStore, QuotaRequest, Rule, RuleError, RuleRegistry, RuleReloader,
        RulesRepo, RulesRepoError,
    };

    const MIN: Duration = Duration::from_secs(60);

    fn t(ms: i64) -> Timestamp {
        Timestamp::from_millis(1_767_225_600_000 + ms)
    }

    #[tokio::test]
    async fn rules_are_created_updated_and_deleted_with_before_and_after() {
        for db in TestDb::each().await {
            let repo = RulesRepo::new(db.db());
            let v0 = repo.version().await.expect("version");
            let mut rule = Rule::new("pricing", Some("PUT"), Some("/prices/{sku}"), Limit::token_bucket(40, MIN, 1000));
            rule.concurrency = Some(8);
            rule.max_wait = Some(Duration::from_secs(10));
            let created = repo.create(rule.clone(), "alice", t(1)).await.expect("create");
            assert_eq!(created.before, None);
            let stored = repo.get(&rule.id).await.expect("get").expect("stored");
            assert_eq!(Some(&stored), created.after.as_ref());
            assert_eq!((stored.updated_by.as_str(), stored.updated_at), ("alice", t(1)));

            let mut edited = stored.clone();
            edited.limit = Limit::sliding_log(10, MIN);
            edited.shadow = true;
            let change = repo.update(edited.clone(), "bob", t(2)).await.expect("update");
            assert_eq!(change.before.as_ref(), Some(&stored));
            assert_eq!(change.after.as_ref().map(|r| r.limit), Some(edited.limit));

            let deleted = repo.delete(&rule.id, "carol", t(3)).await.expect("delete");
            assert_eq!(deleted.after, None);
            assert!(repo.get(&rule.id).await.expect("get").is_none());

            let history = repo.history(&rule.id, 10).await.expect("history");
            let actions: Vec<(&str, &str)> = history.iter().map(|h| (h.action.as_str(), h.actor.as_str())).collect();
            assert_eq!(actions, vec![("delete", "carol"), ("update", "bob"), ("create", "alice")]);
            assert_eq!(history[1].before.as_ref(), Some(&stored));
            assert_eq!(repo.version().await.expect("version"), v0 + 3);
        }
    }

    #[tokio::test]
    async fn invalid_and_duplicate_rules_are_rejected_with_a_clear_error() {
        for db in TestDb::each().await {
            let repo = RulesRepo::new(db.db());
            let bad = Rule::new("pricing", None, None, Limit::token_bucket(0, MIN, 1));
            assert!(matches!(repo.create(bad, "a", t(0)).await, Err(RulesRepoError::Invalid(RuleError::Tokens))));
            let rule = Rule::new("pricing", None, Some("/p"), Limit::fixed_window(1, MIN));
            repo.create(rule, "a", t(0)).await.expect("create");
            let twin = Rule::new("pricing", None, Some("/p"), Limit::fixed_window(2, MIN));
            assert!(matches!(repo.create(twin.clone(), "a", t(0)).await, Err(RulesRepoError::Conflict)));
            assert!(matches!(repo.update(twin, "a", t(0)).await, Err(RulesRepoError::NotFound(_))));
            assert_eq!(repo.seed_presets("system", t(0)).await.expect("presets"), 5);
            assert_eq!(repo.seed_presets("system", t(0)).await.expect("presets"), 0, "idempotent");
        }
    }

    fn instance(clock: &SharedClock) -> Limiter {
        Limiter::new(
            Arc::new(MemoryStore::new(clock.clone())),
            RuleRegistry::default(),
            clock.clone(),
            LimiterConfig::default(),
        )
    }

    #[tokio::test]
    async fn an_edit_reaches_every_instance_on_its_next_poll_and_buckets_carry_over() {
        for db in TestDb::each().await {
            let repo = RulesRepo::new(db.db());
            let clock: SharedClock = Arc::new(ManualClock::at_test_epoch());
            let (a, b) = (instance(&clock), instance(&clock));
            let (ra, rb) = (RuleReloader::new(repo.clone(), a.clone()), RuleReloader::new(repo.clone(), b.clone()));
            let req = QuotaRequest::new("feeds", "GET", "/feed").account("acct42");

            let rule = Rule::new("feeds", None, None, Limit::token_bucket(1, MIN, 1));
            repo.create(rule.clone(), "admin", t(0)).await.expect("create");
            assert!(ra.run_once().await.expect("poll") && rb.run_once().await.expect("poll"));
            assert!(!ra.run_once().await.expect("poll"), "nothing changed, nothing reloaded");
            assert_eq!(a.reserve(&req).await.expect("reserve").permit().map(|p| p.wait), Some(Duration::ZERO));

            let mut edited = rule.clone();
            edited.limit = Limit::token_bucket(4, MIN, 1);
            repo.update(edited, "admin", t(1)).await.expect("update");
            assert!(ra.run_once().await.expect("poll") && rb.run_once().await.expect("poll"));
            for lim in [&a, &b] {
                assert_eq!(lim.resolve("feeds", "GET", "/feed").map(|r| r.limit.tokens), Some(4));
            }
            // Instance a's bucket state carries over: the old booking still stands.
            assert_eq!(a.reserve(&req).await.expect("reserve").permit().map(|p| p.wait), Some(MIN));
            assert_eq!(b.reserve(&req).await.expect("reserve").permit().map(|p| p.wait), Some(Duration::ZERO));

            repo.delete(&rule.id, "admin", t(2)).await.expect("delete");
            assert!(rb.run_once().await.expect("poll"));
            assert!(b.reserve(&req).await.expect("reserve").refusal().is_some(), "no rule: refused");
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_running_reloader_applies_an_edit_within_two_seconds() {
        for db in TestDb::each().await {
            let repo = RulesRepo::new(db.db());
            let clock: SharedClock = Arc::new(ManualClock::at_test_epoch());
            let limiter = instance(&clock);
            let mut versions = limiter.watch_rules();
            let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
            let reloader = RuleReloader::new(repo.clone(), limiter.clone());
            let task = tokio::spawn(reloader.run(sluice_engine::quota::rules_repo::RELOAD_EVERY, async {
                let _ = stopped.await;
            }));
            let rule = Rule::new("feeds", None, None, Limit::token_bucket(1, MIN, 1));
            repo.create(rule.clone(), "admin", t(0)).await.expect("create");
            let mut edited = rule.clone();
            edited.limit = Limit::token_bucket(7, MIN, 7);
            repo.update(edited, "admin", t(1)).await.expect("update");
            let target = repo.version().await.expect("version");
            // A deadline, not a sleep: the watch fires when the set is swapped in.
            tokio::time::timeout(Duration::from_secs(2), versions.wait_for(|v| *v >= target))
                .await
                .expect("the edit arrived within 2 s")
                .expect("limiter alive");
            assert_eq!(limiter.resolve("feeds", "GET", "/feed").map(|r| r.limit.tokens), Some(7));
            let _ = stop.send(());
            task.await.expect("reloader stops on shutdown");
        }
    }
}
