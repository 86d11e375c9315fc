//! Resident memory per live bucket of the in-process store, next to
//! `governor`'s keyed limiter holding the same keys, and what the store gives
//! back once its idle buckets are forgotten (`scripts/bench-accounts.sh`,
//! docs/benchmarks.md "Memory per account").
//!
//! `bucket_bytes memory|governor [BUCKETS]`: one limiter per process, so
//! neither inherits the other's freed memory. RSS is read from
//! `/proc/self/status` before and after filling the limiter with BUCKETS
//! distinct keys (default 1,000,000), one decision each.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use sluice_engine::clock::{ManualClock, SharedClock};
use sluice_engine::quota::store::DecideArgs;
use sluice_engine::quota::{BucketKey, Limit, MemoryStore, Priority, RuleId};

fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("procfs");
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).expect("VmRSS");
    line.trim_start_matches("VmRSS:").trim().trim_end_matches("kB").trim().parse::<u64>().expect("kB") * 1024
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let which = args.get(1).map(String::as_str).unwrap_or("memory");
    let n: usize = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(1_000_000);
    let before = rss_bytes();
    match which {
        "memory" => {
            let clock = Arc::new(ManualClock::at_test_epoch());
            let shared: SharedClock = clock.clone();
            let store = MemoryStore::with_idle_retention(shared, Duration::ZERO);
            // The soak's rule: 100 per second.
            let limit = Limit::token_bucket(100, Duration::from_secs(1), 100);
            for i in 0..n {
                let key = BucketKey { account: format!("acct-{i}"), scope: "soak".into(), rule: RuleId("rule_01".into()) };
                store.decide_now(&DecideArgs { key, limit, cost: 1, ceiling: Duration::ZERO, lane: Priority::Normal, shadow: false, lease: None });
            }
            let full = rss_bytes();
            report("sluice MemoryStore", n, before, full);
            clock.advance(Duration::from_secs(1));
            let forgotten = store.forget_idle();
            let after = rss_bytes();
            println!(
                "  after forgetting {forgotten} idle buckets: RSS {:.1} MB ({:.1} MB above the start)",
                mb(after),
                mb(after.saturating_sub(before))
            );
        }
        "governor" => {
            let quota = governor::Quota::per_second(NonZeroU32::new(100).expect("non-zero"));
            let limiter = governor::RateLimiter::keyed(quota);
            for i in 0..n {
                // The same three key parts as sluice's, joined.
                let _ = limiter.check_key(&format!("acct-{i}:soak:rule_01"));
            }
            report("governor keyed (DashMap, String keys)", n, before, rss_bytes());
            println!("  live keys: {}", limiter.len());
        }
        other => panic!("unknown limiter {other}: memory or governor"),
    }
}

fn mb(b: u64) -> f64 {
    b as f64 / 1_048_576.0
}

fn report(what: &str, n: usize, before: u64, after: u64) {
    println!(
        "{what}: {n} buckets, RSS {:.1} → {:.1} MB, {:.0} bytes per live bucket",
        mb(before),
        mb(after),
        after.saturating_sub(before) as f64 / n as f64
    );
}
