//! The quota-utilization benchmark (run it with
//! `scripts/bench-quota.sh`, results in docs/benchmarks.md).
//!
//! K separate OS processes share one account's limit of the demo's mock
//! marketplace (a real HTTP server on loopback, fixed windows aligned to the
//! Unix epoch, 429 with problem+json). Each process runs a few tasks that send
//! as fast as their limiter lets them, for a fixed time:
//!
//! - `sluice`: every process asks the engine's limiter with the Redis store
//!   for a permit before each call (one shared bucket; the Lua decision uses
//!   Redis's clock), and reports each 429 as a penalty, as a Rust worker does
//!   through the retry middleware;
//! - `naive`: every process has its own in-memory limiter with the same
//!   limit, believing it owns the account's whole quota.
//!
//! `quota_bench run` starts the mock upstream in-process, spawns the K worker
//! processes (this same executable, `quota_bench worker …`), sums what they
//! report and prints a Markdown table: achieved rate as a share of the allowed
//! rate, and the share of requests answered 429.

use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context};
use clap::{Parser, Subcommand, ValueEnum};
use serde::{Deserialize, Serialize};
use sluice::demo::upstream::MockUpstream;
use sluice_engine::clock::{SharedClock, SystemClock};
use sluice_engine::quota::{
    Limit, Limiter, LimiterConfig, MemoryStore, Outcome, QuotaRequest, QuotaStore, RedisSettings, RedisStore, Rule,
    RuleRegistry,
};

const SCOPE: &str = "bench_market";
const ACCOUNT: &str = "acct-bench";

#[derive(Parser)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
enum Mode {
    /// One shared limit in Redis (Sluice's engine).
    Sluice,
    /// One in-memory limiter per process, each with the whole limit.
    Naive,
}

#[derive(clap::Args, Clone, Debug)]
struct Shape {
    /// Requests the upstream allows per window, per account.
    #[arg(long, default_value_t = 50)]
    limit: u32,
    /// The upstream's window (fixed, aligned to the Unix epoch).
    #[arg(long, default_value_t = 1000)]
    window_ms: u64,
    /// Concurrent tasks in each worker process.
    #[arg(long, default_value_t = 4)]
    tasks: usize,
}

#[derive(Subcommand)]
enum Command {
    /// Run the whole matrix and print a Markdown table.
    Run {
        #[command(flatten)]
        shape: Shape,
        /// Worker process counts.
        #[arg(long, value_delimiter = ',', default_value = "1,4,8")]
        k: Vec<usize>,
        #[arg(long, value_delimiter = ',', default_value = "sluice,naive")]
        modes: Vec<Mode>,
        /// Measured time per run, in whole windows.
        #[arg(long, default_value_t = 20)]
        windows: u64,
        #[arg(long, env = "SLUICE_BENCH_REDIS_URL", default_value = "redis://127.0.0.1:6379")]
        redis: String,
    },
    /// One worker process (spawned by `run`).
    Worker {
        #[command(flatten)]
        shape: Shape,
        #[arg(long)]
        mode: Mode,
        #[arg(long)]
        upstream: String,
        #[arg(long)]
        redis: String,
        /// Redis key prefix of this run (every run starts from a full bucket).
        #[arg(long)]
        prefix: String,
        /// Unix ms at which to start sending, and at which to stop.
        #[arg(long)]
        start_ms: u64,
        #[arg(long)]
        end_ms: u64,
    },
}

/// What one worker process saw, printed as one JSON line.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Report {
    ok: u64,
    rejected: u64,
    errors: u64,
    refusals: u64,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(async move {
        match cli.command {
            Command::Run { shape, k, modes, windows, redis } => run(shape, k, modes, windows, redis).await,
            Command::Worker { shape, mode, upstream, redis, prefix, start_ms, end_ms } => {
                let report = worker(&shape, mode, &upstream, &redis, &prefix, start_ms, end_ms).await?;
                println!("{}", serde_json::to_string(&report)?);
                Ok(())
            }
        }
    })
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

async fn run(shape: Shape, ks: Vec<usize>, modes: Vec<Mode>, windows: u64, redis: String) -> anyhow::Result<()> {
    let exe = std::env::current_exe().context("locating this executable")?;
    println!("limit {} per {} ms, {} tasks per process, {} windows per run\n", shape.limit, shape.window_ms, shape.tasks, windows);
    println!("| mode | K | allowed | answered 2xx | share of allowed rate | answered 429 | share 429 |");
    println!("|---|---|---|---|---|---|---|");
    for &mode in &modes {
        for &k in &ks {
            // A fresh upstream per run: its per-account windows start empty.
            let upstream = MockUpstream::start(shape.limit, Duration::from_millis(shape.window_ms)).await?;
            // Start on a window boundary, far enough ahead for the processes
            // to start and connect.
            let start_ms = (now_ms() + 2000).div_ceil(shape.window_ms) * shape.window_ms;
            let end_ms = start_ms + windows * shape.window_ms;
            let prefix = format!("bench:{}", ulid::Ulid::new());
            let mut children = Vec::new();
            for _ in 0..k {
                let child = tokio::process::Command::new(&exe)
                    .args(["worker", "--mode", mode_name(mode), "--upstream", &upstream.base_url(), "--redis", &redis])
                    .args(["--prefix", &prefix, "--start-ms", &start_ms.to_string(), "--end-ms", &end_ms.to_string()])
                    .args(["--limit", &shape.limit.to_string(), "--window-ms", &shape.window_ms.to_string()])
                    .args(["--tasks", &shape.tasks.to_string()])
                    .stdout(Stdio::piped())
                    .kill_on_drop(true)
                    .spawn()
                    .context("spawning a worker process")?;
                children.push(child);
            }
            let mut total = Report::default();
            for child in children {
                let out = child.wait_with_output().await?;
                if !out.status.success() {
                    bail!("a worker process failed: {}", out.status);
                }
                let report: Report = serde_json::from_slice(&out.stdout).context("reading a worker's report")?;
                total.ok += report.ok;
                total.rejected += report.rejected;
                total.errors += report.errors;
                total.refusals += report.refusals;
            }
            upstream.stop();
            let allowed = u64::from(shape.limit) * windows;
            let sent = total.ok + total.rejected;
            println!(
                "| {} | {k} | {allowed} | {} | {:.1} % | {} | {:.2} % |",
                mode_name(mode),
                total.ok,
                100.0 * total.ok as f64 / allowed as f64,
                total.rejected,
                if sent == 0 { 0.0 } else { 100.0 * total.rejected as f64 / sent as f64 },
            );
            if total.errors > 0 {
                println!("|   | (network errors: {}) |||||", total.errors);
            }
        }
    }
    Ok(())
}

fn mode_name(mode: Mode) -> &'static str {
    match mode {
        Mode::Sluice => "sluice",
        Mode::Naive => "naive",
    }
}

async fn worker(shape: &Shape, mode: Mode, upstream: &str, redis: &str, prefix: &str, start_ms: u64, end_ms: u64) -> anyhow::Result<Report> {
    let clock: SharedClock = Arc::new(SystemClock);
    let store: Arc<dyn QuotaStore> = match mode {
        Mode::Sluice => Arc::new(RedisStore::connect(&RedisSettings::single(redis, prefix)).await.context("connecting to Redis")?),
        Mode::Naive => Arc::new(MemoryStore::new(clock.clone())),
    };
    // The same rule in both modes: the upstream's own limit, as fixed windows.
    // A fixed id: the bucket key names the rule, and every process must hit the same bucket.
    let rule = Rule::new(SCOPE, None, None, Limit::fixed_window(shape.limit, Duration::from_millis(shape.window_ms))).with_id("bench");
    let limiter = Limiter::new(store, RuleRegistry::new([rule]), clock, LimiterConfig::default());
    let client = reqwest::Client::builder().timeout(Duration::from_secs(5)).build()?;
    let counters = Arc::new([AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)]);
    let start_in = Duration::from_millis(start_ms.saturating_sub(now_ms()));
    tokio::time::sleep(start_in).await;
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..shape.tasks {
        let (limiter, client, counters) = (limiter.clone(), client.clone(), counters.clone());
        let url = format!("{upstream}/api/{ACCOUNT}/items");
        tasks.spawn(async move {
            let req = QuotaRequest::new(SCOPE, "GET", "/items").account(ACCOUNT);
            while now_ms() < end_ms {
                match limiter.acquire(&req).await {
                    Ok(Outcome::Granted(_)) => {}
                    Ok(Outcome::Refused(refusal)) => {
                        counters[3].fetch_add(1, Ordering::Relaxed);
                        tokio::time::sleep(refusal.retry_after.unwrap_or(Duration::from_millis(100))).await;
                        continue;
                    }
                    Err(e) => return Err(anyhow::Error::new(e).context("limiter")),
                }
                // A permit that came after the end is not used.
                if now_ms() >= end_ms {
                    break;
                }
                match client.get(&url).send().await {
                    Ok(resp) if resp.status().is_success() => {
                        counters[0].fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(resp) if resp.status() == reqwest::StatusCode::TOO_MANY_REQUESTS => {
                        counters[1].fetch_add(1, Ordering::Relaxed);
                        if mode == Mode::Sluice {
                            limiter.penalize(&req, None).await.context("reporting a 429")?;
                        }
                    }
                    _ => {
                        counters[2].fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            Ok(())
        });
    }
    while let Some(joined) = tasks.join_next().await {
        joined??;
    }
    let get = |i: usize| counters[i].load(Ordering::Relaxed);
    Ok(Report { ok: get(0), rejected: get(1), errors: get(2), refusals: get(3) })
}
