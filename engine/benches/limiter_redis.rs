//! Redis decisions per second with 1, 16 and 64 concurrent callers (one
//! `RedisStore`, one multiplexed connection, one EVALSHA per decision).
//! Compare with `redis-benchmark` running the same EVALSHA: see
//! `scripts/bench-limiter.sh`, which runs both.
//!
//! `SLUICE_BENCH_REDIS_URL=redis://127.0.0.1:6379 cargo bench -p sluice-engine --bench limiter_redis`

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use sluice_engine::quota::store::{DecideArgs, QuotaStore};
use sluice_engine::quota::{BucketKey, Limit, RedisSettings, RedisStore, RuleId};

fn bench(c: &mut Criterion) {
    let url = std::env::var("SLUICE_BENCH_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let prefix = format!("bench:{}", std::process::id());
    let store: Arc<RedisStore> =
        Arc::new(rt.block_on(RedisStore::connect(&RedisSettings::single(&url, &prefix))).expect("connect"));
    let args = Arc::new(DecideArgs {
        key: BucketKey { account: "acct42".into(), scope: "pricing".into(), rule: RuleId("r".into()) },
        limit: Limit::token_bucket(1_000_000, Duration::from_secs(1), 1_000_000),
        cost: 1,
        ceiling: Duration::from_secs(30),
        lane: sluice_engine::quota::Priority::Normal,
        shadow: false,
        lease: None,
    });
    let mut group = c.benchmark_group("limiter_redis");
    group.measurement_time(Duration::from_secs(5));
    for callers in [1usize, 16, 64] {
        group.throughput(Throughput::Elements(1));
        group.bench_function(format!("decide_{callers}_callers"), |b| {
            b.iter_custom(|iters| {
                let per = (iters as usize).div_ceil(callers);
                rt.block_on(async {
                    let start = Instant::now();
                    let tasks: Vec<_> = (0..callers)
                        .map(|_| {
                            let (store, args) = (store.clone(), args.clone());
                            tokio::spawn(async move {
                                for _ in 0..per {
                                    store.decide(&args).await.expect("decide");
                                }
                            })
                        })
                        .collect();
                    for t in tasks {
                        t.await.expect("task");
                    }
                    // Report time per decision as if `iters` ran one by one.
                    start.elapsed().mul_f64(iters as f64 / (per * callers) as f64)
                })
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
