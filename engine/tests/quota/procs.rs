//! Several OS processes racing for the last permits of one Redis bucket.
//!
//! The parent re-executes this test binary (`std::env::current_exe()`) with
//! `--exact procs::quota_procs::child_racer --ignored`; each child connects, waits
//! on a Redis list for the start signal (a real barrier, no sleeping), makes
//! its reservations and prints one line per outcome.

mod quota_procs {
    use std::process::{Command, Stdio};
    use std::sync::Arc;
    use std::time::Duration;

    use sluice_engine::clock::SystemClock;
    use sluice_engine::quota::{
        Limit, Limiter, LimiterConfig, Outcome, QuotaRequest, RedisSettings, RedisStore, Rule, RuleRegistry,
    };

    use crate::support::{test_redis_url, unique_prefix};

    const PROCESSES: usize = 4;
    const PER_PROCESS: usize = 6;
    const ROUNDS: usize = 20;
    const MIN: Duration = Duration::from_secs(60);

    fn rule() -> Rule {
        // 5 per minute, burst 5: the ceiling is 65 s, so a bucket books its
        // burst plus 5 slots (12, 24, 36, 48, 60 s) and refuses the rest.
        Rule::new("pricing", None, None, Limit::token_bucket(5, MIN, 5)).with_id("race")
    }

    fn req() -> QuotaRequest {
        QuotaRequest::new("pricing", "PUT", "/prices").account("acct42")
    }

    async fn limiter(prefix: &str) -> Limiter {
        let mut settings = RedisSettings::single(&test_redis_url(), prefix);
        settings.timeout = Duration::from_secs(5);
        let store = RedisStore::connect(&settings).await.expect("connect");
        Limiter::new(Arc::new(store), RuleRegistry::new([rule()]), Arc::new(SystemClock), LimiterConfig::default())
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn processes_racing_for_the_last_permits_get_exactly_the_allowed_number() {
        let exe = std::env::current_exe().expect("test binary");
        for round in 0..ROUNDS {
            let prefix = unique_prefix();
            let lim = limiter(&prefix).await;
            // Take 3 of the 5 burst permits first: the children race for the last two.
            for _ in 0..3 {
                assert_eq!(lim.reserve(&req()).await.expect("reserve").permit().map(|p| p.wait), Some(Duration::ZERO));
            }
            let children: Vec<_> = (0..PROCESSES)
                .map(|_| {
                    Command::new(&exe)
                        .args([
                            "--exact",
                            "procs::quota_procs::child_racer",
                            "--ignored",
                            "--nocapture",
                            "--test-threads",
                            "1",
                        ])
                        .env("SLUICE_RACE_PREFIX", &prefix)
                        .stdout(Stdio::piped())
                        .stderr(Stdio::null())
                        .spawn()
                        .expect("spawn child")
                })
                .collect();
            let client = redis::Client::open(test_redis_url()).expect("url");
            let mut conn = client.get_multiplexed_async_connection().await.expect("conn");
            let go = ["go"; PROCESSES];
            let _: () =
                redis::cmd("RPUSH").arg(format!("{prefix}:go")).arg(&go[..]).query_async(&mut conn).await.expect("go");
            let _: () =
                redis::cmd("EXPIRE").arg(format!("{prefix}:go")).arg(60).query_async(&mut conn).await.expect("ttl");
            let mut immediate = 0;
            let mut booked = Vec::new();
            let mut refused = 0;
            for child in children {
                let out = child.wait_with_output().expect("child output");
                assert!(out.status.success(), "child failed");
                for line in String::from_utf8_lossy(&out.stdout).lines() {
                    // libtest prints "test … ... " on the same line as the first output.
                    if let Some((_, us)) = line.split_once("RACE GRANT ") {
                        let us: u64 = us.trim().parse().expect("wait");
                        if us == 0 {
                            immediate += 1;
                        } else {
                            booked.push(us);
                        }
                    } else if line.contains("RACE REFUSE") {
                        refused += 1;
                    }
                }
            }
            println!("round {round}: immediate {immediate}, booked {booked:?}, refused {refused}");
            assert_eq!(immediate, 2, "round {round}: exactly the two last permits go at once");
            assert_eq!(booked.len(), 5, "round {round}: five slots within the 65 s ceiling");
            assert_eq!(immediate + booked.len() + refused, PROCESSES * PER_PROCESS, "round {round}");
            booked.sort_unstable();
            let slots: Vec<u64> = booked.iter().map(|us| (*us as f64 / 12e6).round() as u64).collect();
            assert_eq!(slots, vec![1, 2, 3, 4, 5], "round {round}: distinct slots 12 s apart");
        }
    }

    /// Run only as a child of the test above.
    #[tokio::test]
    #[ignore = "child process of processes_racing_for_the_last_permits_get_exactly_the_allowed_number"]
    async fn child_racer() {
        let Ok(prefix) = std::env::var("SLUICE_RACE_PREFIX") else { return };
        let lim = limiter(&prefix).await;
        let client = redis::Client::open(test_redis_url()).expect("url");
        // A blocking connection: async ones time out responses after a short default.
        let mut conn = client.get_connection().expect("conn");
        let _: Option<(String, String)> =
            redis::cmd("BLPOP").arg(format!("{prefix}:go")).arg(30).query(&mut conn).expect("barrier");
        let r = req();
        let outcomes = futures::future::join_all((0..PER_PROCESS).map(|_| lim.reserve(&r))).await;
        for o in outcomes {
            match o.expect("reserve") {
                Outcome::Granted(p) => println!("RACE GRANT {}", p.wait.as_micros()),
                Outcome::Refused(_) => println!("RACE REFUSE"),
            }
        }
    }
}
