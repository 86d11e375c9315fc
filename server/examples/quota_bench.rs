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
//!
//! `lanes` (priority lanes, docs/limiter.md): K processes of `low` requests
//! keep the shared bucket busy (a token bucket with a burst of `--burst`,
//! default 2, at `burst − 1` fewer tokens per window than the upstream's
//! limit, so no upstream window ever sees more than its limit) while one
//! more process sends a `high` request now and then. Reported: high's waits
//! from asking to holding its permit (p50, p95, max, in ms and in emission
//! intervals), and the total answered against what the rule allows.

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
    Limit, Limiter, LimiterConfig, MemoryStore, Outcome, Priority, QuotaRequest, QuotaStore, RedisSettings, RedisStore,
    Rule, RuleRegistry,
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
    /// Redis, K processes asking `low` and one asking `high` now and then.
    Lanes,
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
    /// `lanes` mode: the rule's burst. Low leaves a token bucket's last token
    /// to the other lanes only when the burst exceeds the request (1).
    #[arg(long, default_value_t = 2)]
    burst: u32,
}

impl Shape {
    /// `lanes` mode's rule: a token bucket of `burst`, at a rate that keeps
    /// every upstream window within its limit (a burst of b can add b − 1 to
    /// what the rate puts into one window).
    fn lanes_limit(&self) -> Limit {
        let burst = self.burst.clamp(1, self.limit.max(1));
        Limit::token_bucket(self.limit.max(1) - (burst - 1), Duration::from_millis(self.window_ms), burst)
    }
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
        /// `lanes` mode: this process's lane (`high`: one task, one request
        /// about every `high_every_ms`).
        #[arg(long, default_value = "normal")]
        priority: String,
        #[arg(long, default_value_t = 150)]
        high_every_ms: u64,
    },
}

/// What one worker process saw, printed as one JSON line.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Report {
    ok: u64,
    rejected: u64,
    errors: u64,
    refusals: u64,
    /// `high` lane: each request's time from asking to holding its permit, µs.
    #[serde(default)]
    high_waits_us: Vec<u64>,
    /// `high` lane: each request's booked wait (the limiter's part of the above), µs.
    #[serde(default)]
    high_booked_us: Vec<u64>,
    /// `high` lane: requests refused (beyond even high's horizon).
    #[serde(default)]
    high_refusals: u64,
}

/// A worker's lane in the `lanes` mode.
struct Lane {
    priority: Priority,
    /// `high`: the mean pause between two requests.
    high_every: Duration,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(async move {
        match cli.command {
            Command::Run { shape, k, modes, windows, redis } => run(shape, k, modes, windows, redis).await,
            Command::Worker { shape, mode, upstream, redis, prefix, start_ms, end_ms, priority, high_every_ms } => {
                let priority: Priority = priority.parse().context("--priority")?;
                let lane = Lane { priority, high_every: Duration::from_millis(high_every_ms) };
                let run = Run { mode, upstream: &upstream, redis: &redis, prefix: &prefix, span: (start_ms, end_ms) };
                let report = worker(&shape, &run, lane).await?;
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
    if modes.iter().any(|&m| m != Mode::Lanes) {
        println!("| mode | K | allowed | answered 2xx | share of allowed rate | answered 429 | share 429 |");
        println!("|---|---|---|---|---|---|---|");
    }
    for &mode in modes.iter().filter(|&&m| m != Mode::Lanes) {
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
                let url = upstream.base_url();
                let run = Run { mode, upstream: &url, redis: &redis, prefix: &prefix, span: (start_ms, end_ms) };
                children.push(spawn_worker(&exe, &shape, &run, Priority::Normal)?);
            }
            let mut total = Report::default();
            for child in children {
                let report = report_of(child).await?;
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
    if modes.contains(&Mode::Lanes) {
        run_lanes(&exe, &shape, &ks, windows, &redis).await?;
    }
    Ok(())
}

/// What the worker processes of one run share.
struct Run<'a> {
    mode: Mode,
    upstream: &'a str,
    redis: &'a str,
    /// Redis key prefix of this run (every run starts from a full bucket).
    prefix: &'a str,
    /// Unix ms at which to start sending, and at which to stop.
    span: (u64, u64),
}

/// Spawn one worker process of the run in `priority`'s lane.
fn spawn_worker(exe: &std::path::Path, shape: &Shape, run: &Run<'_>, priority: Priority) -> anyhow::Result<tokio::process::Child> {
    let (start_ms, end_ms) = run.span;
    tokio::process::Command::new(exe)
        .args(["worker", "--mode", mode_name(run.mode), "--upstream", run.upstream, "--redis", run.redis])
        .args(["--prefix", run.prefix, "--start-ms", &start_ms.to_string(), "--end-ms", &end_ms.to_string()])
        .args(["--limit", &shape.limit.to_string(), "--window-ms", &shape.window_ms.to_string()])
        .args(["--tasks", &shape.tasks.to_string(), "--burst", &shape.burst.to_string(), "--priority", priority.as_str()])
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .context("spawning a worker process")
}

async fn report_of(child: tokio::process::Child) -> anyhow::Result<Report> {
    let out = child.wait_with_output().await?;
    if !out.status.success() {
        bail!("a worker process failed: {}", out.status);
    }
    serde_json::from_slice(&out.stdout).context("reading a worker's report")
}

/// K `low` processes keep the bucket busy; one `high` process asks now and then.
async fn run_lanes(exe: &std::path::Path, shape: &Shape, ks: &[usize], windows: u64, redis: &str) -> anyhow::Result<()> {
    let rule = shape.lanes_limit();
    let emission = rule.interval / rule.tokens;
    println!(
        "\nlanes: upstream {} per {} ms; rule: token bucket {} per {} ms, burst {} (emission interval {emission:?}); {} tasks per low process\n",
        shape.limit, shape.window_ms, rule.tokens, shape.window_ms, rule.burst, shape.tasks
    );
    println!("| low processes | allowed | answered 2xx | answered 429 | high requests | high refused | high wait p50 | p95 | max | p95 in emission intervals | booked wait p95 | max |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    for &k in ks {
        let upstream = MockUpstream::start(shape.limit, Duration::from_millis(shape.window_ms)).await?;
        let start_ms = (now_ms() + 2000).div_ceil(shape.window_ms) * shape.window_ms;
        let prefix = format!("bench:{}", ulid::Ulid::new());
        let url = upstream.base_url();
        let run = Run { mode: Mode::Lanes, upstream: &url, redis, prefix: &prefix, span: (start_ms, start_ms + windows * shape.window_ms) };
        let mut lows = Vec::new();
        for _ in 0..k {
            lows.push(spawn_worker(exe, shape, &run, Priority::Low)?);
        }
        let high = spawn_worker(exe, shape, &run, Priority::High)?;
        let mut total = Report::default();
        for child in lows.into_iter().chain([high]) {
            let r = report_of(child).await?;
            total.ok += r.ok;
            total.rejected += r.rejected;
            total.errors += r.errors;
            total.refusals += r.refusals;
            total.high_refusals += r.high_refusals;
            total.high_waits_us.extend(r.high_waits_us);
            total.high_booked_us.extend(r.high_booked_us);
        }
        upstream.stop();
        let sorted = |mut v: Vec<u64>| {
            v.sort_unstable();
            v
        };
        let (waits, booked) = (sorted(total.high_waits_us.clone()), sorted(total.high_booked_us.clone()));
        let at = |v: &[u64], q: f64| v.get(((q * v.len() as f64).ceil() as usize).saturating_sub(1)).copied().unwrap_or(0);
        let pct = |q: f64| at(&waits, q);
        let ms = |us: u64| format!("{:.1} ms", us as f64 / 1000.0);
        // What the rule allows over the run: the burst plus one per emission interval.
        let allowed = u64::from(rule.burst) + u64::from(rule.tokens) * windows;
        println!(
            "| {k} | {allowed} | {} | {} | {} | {} | {} | {} | {} | **{:.2}** | {} | {} |",
            total.ok,
            total.rejected,
            waits.len(),
            total.high_refusals,
            ms(pct(0.5)),
            ms(pct(0.95)),
            ms(waits.last().copied().unwrap_or(0)),
            pct(0.95) as f64 / emission.as_micros().max(1) as f64,
            ms(at(&booked, 0.95)),
            ms(booked.last().copied().unwrap_or(0)),
        );
        if total.errors > 0 {
            println!("|   | (network errors: {}) |||||||||", total.errors);
        }
    }
    Ok(())
}

fn mode_name(mode: Mode) -> &'static str {
    match mode {
        Mode::Sluice => "sluice",
        Mode::Naive => "naive",
        Mode::Lanes => "lanes",
    }
}

async fn worker(shape: &Shape, run: &Run<'_>, lane: Lane) -> anyhow::Result<Report> {
    let Run { mode, upstream, redis, prefix, span: (start_ms, end_ms) } = *run;
    let clock: SharedClock = Arc::new(SystemClock);
    let store: Arc<dyn QuotaStore> = match mode {
        Mode::Sluice | Mode::Lanes => {
            Arc::new(RedisStore::connect(&RedisSettings::single(redis, prefix)).await.context("connecting to Redis")?)
        }
        Mode::Naive => Arc::new(MemoryStore::new(clock.clone())),
    };
    // The upstream's own limit: as fixed windows, or (lanes) as a token bucket
    // that never puts more into one of its windows than it allows and has an
    // emission interval to measure waits in (`Shape::lanes_limit`).
    // A fixed id: the bucket key names the rule, and every process must hit the same bucket.
    let window = Duration::from_millis(shape.window_ms);
    let limit = match mode {
        Mode::Lanes => shape.lanes_limit(),
        Mode::Sluice | Mode::Naive => Limit::fixed_window(shape.limit, window),
    };
    let rule = Rule::new(SCOPE, None, None, limit).with_id("bench");
    let limiter = Limiter::new(store, RuleRegistry::new([rule]), clock, LimiterConfig::default());
    let client = reqwest::Client::builder().timeout(Duration::from_secs(5)).build()?;
    let counters = Arc::new(Counters::default());
    let start_in = Duration::from_millis(start_ms.saturating_sub(now_ms()));
    tokio::time::sleep(start_in).await;
    let high = lane.priority == Priority::High;
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..if high { 1 } else { shape.tasks } {
        let (limiter, client, counters) = (limiter.clone(), client.clone(), counters.clone());
        let url = format!("{upstream}/api/{ACCOUNT}/items");
        let high_every = lane.high_every;
        let req = QuotaRequest::new(SCOPE, "GET", "/items").account(ACCOUNT).priority(lane.priority);
        tasks.spawn(async move {
            while now_ms() < end_ms {
                if high {
                    // Now and then: uniformly between half and one and a half mean pauses.
                    let pause = high_every.mul_f64(rand::random_range(0.5..1.5));
                    tokio::time::sleep(pause).await;
                }
                let asked = std::time::Instant::now();
                match limiter.acquire(&req).await {
                    Ok(Outcome::Granted(permit)) if high => {
                        let micros = |d: Duration| u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
                        let mut waits = counters.high_waits.lock().unwrap_or_else(|p| p.into_inner());
                        waits.0.push(micros(asked.elapsed()));
                        waits.1.push(micros(permit.wait));
                    }
                    Ok(Outcome::Granted(_)) => {}
                    Ok(Outcome::Refused(_)) if high => {
                        counters.high_refusals.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                    Ok(Outcome::Refused(refusal)) => {
                        counters.refusals.fetch_add(1, Ordering::Relaxed);
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
                        counters.ok.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(resp) if resp.status() == reqwest::StatusCode::TOO_MANY_REQUESTS => {
                        counters.rejected.fetch_add(1, Ordering::Relaxed);
                        if mode != Mode::Naive {
                            limiter.penalize(&req, None).await.context("reporting a 429")?;
                        }
                    }
                    _ => {
                        counters.errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            Ok(())
        });
    }
    while let Some(joined) = tasks.join_next().await {
        joined??;
    }
    let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
    let (high_waits_us, high_booked_us) = std::mem::take(&mut *counters.high_waits.lock().unwrap_or_else(|p| p.into_inner()));
    Ok(Report {
        ok: get(&counters.ok),
        rejected: get(&counters.rejected),
        errors: get(&counters.errors),
        refusals: get(&counters.refusals),
        high_waits_us,
        high_booked_us,
        high_refusals: get(&counters.high_refusals),
    })
}

/// What a worker's tasks count together.
#[derive(Default)]
struct Counters {
    ok: AtomicU64,
    rejected: AtomicU64,
    errors: AtomicU64,
    refusals: AtomicU64,
    high_refusals: AtomicU64,
    /// `high`: (asked → permit held, booked wait), µs.
    high_waits: std::sync::Mutex<(Vec<u64>, Vec<u64>)>,
}
