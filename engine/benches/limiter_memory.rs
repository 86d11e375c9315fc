//! In-memory decision cost, side by side with `governor`'s keyed limiter in
//! the same run. Both see 1024 keys round-robin and a quota large enough that
//! every decision grants (so neither is measuring its refusal path).
//!
//! `cargo bench -p sluice-engine --bench limiter_memory` (docs/benchmarks.md)

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use governor::{Quota, RateLimiter};
use sluice_engine::clock::{SharedClock, SystemClock};
use sluice_engine::quota::store::DecideArgs;
use sluice_engine::quota::{BucketKey, Limit, MemoryStore, RuleId};

const KEYS: usize = 1024;

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("limiter_memory");
    let clock: SharedClock = Arc::new(SystemClock);
    let store = MemoryStore::new(clock);
    let limit = Limit::token_bucket(1_000_000_000, Duration::from_secs(1), 1_000_000_000);
    let args: Vec<DecideArgs> = (0..KEYS)
        .map(|i| DecideArgs {
            key: BucketKey { account: format!("acct{i}"), scope: "pricing".into(), rule: RuleId("r".into()) },
            limit,
            cost: 1,
            ceiling: Duration::from_secs(30),
            lane: sluice_engine::quota::Priority::Normal,
            shadow: false,
            lease: None,
        })
        .collect();
    let mut i = 0;
    group.bench_function("sluice_memory_store", |b| {
        b.iter(|| {
            i = (i + 1) % KEYS;
            black_box(store.decide_now(&args[i]))
        })
    });

    let quota = Quota::per_second(NonZeroU32::new(1_000_000_000).expect("non-zero"));
    let governor = RateLimiter::keyed(quota);
    let keys: Vec<String> = (0..KEYS).map(|i| format!("acct{i}:pricing:r")).collect();
    let mut j = 0;
    group.bench_function("governor_keyed", |b| {
        b.iter(|| {
            j = (j + 1) % KEYS;
            black_box(governor.check_key(&keys[j]).is_ok())
        })
    });

    // The same two limiters, with both cores deciding at once over the same
    // keys (each thread starts at a different key): what the shard locks and
    // governor's atomics cost under contention. Time per decision per thread.
    group.bench_function("sluice_memory_store_2_threads", |b| {
        b.iter_custom(|iters| {
            on_threads(iters, |k| {
                black_box(store.decide_now(&args[k]));
            })
        })
    });
    group.bench_function("governor_keyed_2_threads", |b| {
        b.iter_custom(|iters| {
            on_threads(iters, |k| {
                black_box(governor.check_key(&keys[k]).is_ok());
            })
        })
    });
    group.finish();
}

const THREADS: usize = 2;

/// `iters` calls of `decide(key index)` on each of [`THREADS`] threads at
/// once, each thread starting at a different key; the wall time of it all.
fn on_threads(iters: u64, decide: impl Fn(usize) + Sync) -> Duration {
    let start = std::time::Instant::now();
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let decide = &decide;
            s.spawn(move || {
                for n in 0..iters as usize {
                    decide((n + t * KEYS / THREADS) % KEYS);
                }
            });
        }
    });
    start.elapsed()
}

criterion_group!(benches, bench);
criterion_main!(benches);
