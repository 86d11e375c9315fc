//! End-to-end delivery load: the loader and the receiver of
//! `scripts/bench-deliveries.sh` (docs/benchmarks.md, "Deliveries end to
//! end").
//!
//! `delivery_load BASE_URL ADMIN_TOKEN WORKER_TOKEN MERCHANTS EVENTS PRODUCERS [DELAY_MS]`
//!
//! Starts a loopback receiver (answers 200 after `DELAY_MS`, default 0, and
//! counts unique `x-webhook-id`s), creates `MERCHANTS` merchants pointing at
//! it through the API, then `PRODUCERS` concurrent producers post `EVENTS`
//! events (`POST /api/v1/events`, spread over the merchants) while Sluice
//! delivers them. Waits until every event was received once, then prints
//! one line of JSON: intake and delivery rates, over the whole run and
//! over its last three quarters (`steady`: the rate once the server's
//! connections, statements and caches are warm), how long an intake call took
//! as the producer saw it (`intake_call_ms`: mean, p50, p90, p99), duplicates (same id twice,
//! which at-least-once allows) and any refused intake. Exits non-zero when
//! an intake call failed or not everything arrived within ten minutes.
//!
//! `DELIVERY_LOAD_BATCH=N` (N > 1): producers post N events at a time to
//! `POST /api/v1/events/batch` instead.
//!
//! Fault mode (`scripts/bench-faults.sh`): `DELIVERY_LOAD_SECONDS=T` stops
//! producing after T seconds, and a refused call (503 while the database is
//! down) is not an error: the producer pauses 100 ms and goes on with new
//! events. `DELIVERY_LOAD_MARKS=FILE` names a file where the script writes
//! `up <unix ms>` when the database answers again; the output then says how
//! many seconds after that the delivery rate was back to the rate before the
//! fault (one-second windows, at least 90 %).

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::Router;
use serde_json::{json, Value};

#[derive(Default)]
struct Received {
    ids: Mutex<HashSet<String>>,
    total: AtomicU64,
    delay: Duration,
    last: Mutex<Option<Instant>>,
    /// Unix milliseconds of each first arrival.
    arrivals: Mutex<Vec<u64>>,
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

async fn receive(State(r): State<Arc<Received>>, headers: HeaderMap) -> StatusCode {
    if !r.delay.is_zero() {
        tokio::time::sleep(r.delay).await;
    }
    let id = headers.get("x-webhook-id").or_else(|| headers.get("webhook-id")).and_then(|v| v.to_str().ok());
    let Some(id) = id else { return StatusCode::BAD_REQUEST };
    r.total.fetch_add(1, Ordering::Relaxed);
    if r.ids.lock().unwrap_or_else(|p| p.into_inner()).insert(id.to_owned()) {
        r.arrivals.lock().unwrap_or_else(|p| p.into_inner()).push(unix_ms());
    }
    *r.last.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
    StatusCode::OK
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 7 {
        anyhow::bail!("usage: delivery_load BASE_URL ADMIN_TOKEN WORKER_TOKEN MERCHANTS EVENTS PRODUCERS [DELAY_MS]");
    }
    let base = args[1].trim_end_matches('/').to_owned();
    let (admin, worker) = (args[2].clone(), args[3].clone());
    let merchants: usize = args[4].parse()?;
    let events: u64 = args[5].parse()?;
    let producers: u64 = args[6].parse()?;
    let delay = Duration::from_millis(args.get(7).map(|d| d.parse()).transpose()?.unwrap_or(0));

    let received = Arc::new(Received { delay, ..Received::default() });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    let app = Router::new().route("/hook/{n}", post(receive)).with_state(received.clone());
    tokio::spawn(async move { axum::serve(listener, app).await });

    let client = reqwest::Client::builder().pool_max_idle_per_host(producers as usize).build()?;
    let mut merchant_ids = Vec::with_capacity(merchants);
    for n in 0..merchants {
        let res = client
            .post(format!("{base}/api/v1/merchants"))
            .bearer_auth(&admin)
            .json(&json!({"name": format!("load {n}"), "url": format!("http://127.0.0.1:{port}/hook/{n}")}))
            .send()
            .await?;
        let status = res.status();
        let body: Value = res.json().await?;
        anyhow::ensure!(status == StatusCode::CREATED, "creating merchant {n}: {status} {body}");
        let id = body["merchant"]["id"].as_str().ok_or_else(|| anyhow::anyhow!("no merchant id in {body}"))?;
        merchant_ids.push(id.to_owned());
    }
    let merchant_ids = Arc::new(merchant_ids);

    let seconds: Option<u64> = std::env::var("DELIVERY_LOAD_SECONDS").ok().map(|b| b.parse()).transpose()?;
    let stop_at = seconds.map(|s| Instant::now() + Duration::from_secs(s));
    let batch: u64 = std::env::var("DELIVERY_LOAD_BATCH").ok().map(|b| b.parse()).transpose()?.unwrap_or(1).max(1);
    let run = format!("{:x}", std::process::id());
    let next = Arc::new(AtomicU64::new(0));
    let refused = Arc::new(AtomicU64::new(0));
    // Events actually posted: `next` also counts the numbers producers drew
    // when they stopped.
    let posted = Arc::new(AtomicU64::new(0));
    // Unix milliseconds at which each stored event's call returned.
    let stored_at = Arc::new(Mutex::new(Vec::with_capacity(events as usize)));
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..producers {
        let (client, base, worker, run) = (client.clone(), base.clone(), worker.clone(), run.clone());
        let (next, refused, posted, merchant_ids) = (next.clone(), refused.clone(), posted.clone(), merchant_ids.clone());
        let stored_at = stored_at.clone();
        tasks.spawn(async move {
            let event = |n: u64| {
                let merchant = &merchant_ids[n as usize % merchant_ids.len()];
                json!({"merchant_id": merchant, "event_type": "order.created",
                    "payload": {"order": n}, "idempotency_key": format!("load-{run}-{n}")})
            };
            // How long each intake call took, in µs.
            let mut latencies = Vec::new();
            loop {
                let first = next.fetch_add(batch, Ordering::Relaxed);
                if first >= events || stop_at.is_some_and(|at| Instant::now() >= at) {
                    return latencies;
                }
                let last = (first + batch).min(events);
                posted.fetch_add(last - first, Ordering::Relaxed);
                let call = Instant::now();
                let stored = if batch == 1 {
                    match client.post(format!("{base}/api/v1/events")).bearer_auth(&worker).json(&event(first)).send().await {
                        Ok(r) if r.status() == StatusCode::CREATED => 1,
                        _ => 0,
                    }
                } else {
                    let body: Vec<Value> = (first..last).map(event).collect();
                    match client.post(format!("{base}/api/v1/events/batch")).bearer_auth(&worker).json(&body).send().await {
                        Ok(r) if r.status() == StatusCode::OK => match r.json::<Value>().await {
                            Ok(out) => out["results"].as_array().map_or(0, |rs| rs.iter().filter(|r| r["status"] == 201).count() as u64),
                            Err(_) => 0,
                        },
                        _ => 0,
                    }
                };
                latencies.push(u64::try_from(call.elapsed().as_micros()).unwrap_or(u64::MAX));
                let at = unix_ms();
                stored_at.lock().unwrap_or_else(|p| p.into_inner()).extend((0..stored).map(|_| at));
                refused.fetch_add(last - first - stored, Ordering::Relaxed);
                if stored < last - first && stop_at.is_some() {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        });
    }
    let mut latencies = Vec::new();
    while let Some(done) = tasks.join_next().await {
        latencies.extend(done?);
    }
    let intake_s = started.elapsed().as_secs_f64();
    latencies.sort_unstable();
    // An intake call's latency as the producer saw it, in ms (what sets
    // the rate of producers that post one call at a time).
    let ms = |us: f64| (us / 100.0).round() / 10.0;
    let latency_ms = |q: f64| {
        let i = ((latencies.len() as f64 * q) as usize).min(latencies.len().saturating_sub(1));
        latencies.get(i).map_or(0.0, |&us| ms(us as f64))
    };
    // The mean, to set beside pgbench's "latency average": by Little's law
    // each side's rate is its clients over its mean latency.
    let mean_ms = ms(latencies.iter().map(|&us| us as f64).sum::<f64>() / latencies.len().max(1) as f64);
    let posted = posted.load(Ordering::Relaxed);
    let accepted = posted - refused.load(Ordering::Relaxed);

    let deadline = Instant::now() + Duration::from_secs(600);
    let unique = || received.ids.lock().unwrap_or_else(|p| p.into_inner()).len() as u64;
    while unique() < accepted && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let last = received.last.lock().unwrap_or_else(|p| p.into_inner()).unwrap_or(started);
    let delivered = unique();
    let deliver_s = last.duration_since(started).as_secs_f64();
    let total = received.total.load(Ordering::Relaxed);
    let steady_intake = steady_rate(&stored_at.lock().unwrap_or_else(|p| p.into_inner()));
    let steady_deliveries = steady_rate(&received.arrivals.lock().unwrap_or_else(|p| p.into_inner()));
    println!(
        "{}",
        json!({
            "merchants": merchants, "events": events, "producers": producers, "batch": batch, "receiver_delay_ms": delay.as_millis() as u64,
            "accepted": accepted, "refused": posted - accepted, "recovery": recovery(&received), "delivered_unique": delivered, "duplicates": total - delivered,
            "intake_per_s": (accepted as f64 / intake_s).round(), "deliveries_per_s": (delivered as f64 / deliver_s).round(),
            "steady": {"intake_per_s": steady_intake, "deliveries_per_s": steady_deliveries},
            "intake_s": (intake_s * 10.0).round() / 10.0, "all_delivered_s": (deliver_s * 10.0).round() / 10.0,
            "intake_call_ms": {"mean": mean_ms, "p50": latency_ms(0.5), "p90": latency_ms(0.9), "p99": latency_ms(0.99)},
        })
    );
    anyhow::ensure!(seconds.is_some() || accepted == events, "{} intake calls were refused", events - accepted);
    anyhow::ensure!(delivered == accepted, "only {delivered} of {accepted} events arrived within ten minutes");
    Ok(())
}

/// Items per second over the last three quarters of `times` (Unix ms, in
/// any order): from the moment a quarter of them were in to the last one.
/// The first quarter holds the start-up (connections opened, statements
/// prepared and planned, caches filled); `null` when the window is empty.
fn steady_rate(times: &[u64]) -> Value {
    let mut t = times.to_vec();
    t.sort_unstable();
    let from = t.len() / 4;
    match (t.get(from), t.last()) {
        (Some(&a), Some(&b)) if b > a => json!((((t.len() - 1 - from) as f64) / ((b - a) as f64 / 1000.0)).round()),
        _ => Value::Null,
    }
}

/// Fault mode: the delivery rate before the fault and how long after the
/// database answered again (`up` in the marks file) the rate was back.
fn recovery(r: &Received) -> Value {
    let Ok(path) = std::env::var("DELIVERY_LOAD_MARKS") else { return Value::Null };
    let marks = std::fs::read_to_string(path).unwrap_or_default();
    let mark = |name: &str| marks.lines().find_map(|l| l.strip_prefix(name)?.trim().parse::<u64>().ok());
    let (Some(down), Some(up)) = (mark("down "), mark("up ")) else { return json!({"error": "no down/up marks"}) };
    let mut arrivals = r.arrivals.lock().unwrap_or_else(|p| p.into_inner()).clone();
    arrivals.sort_unstable();
    let in_window = |from: u64, to: u64| arrivals.partition_point(|&t| t < to) - arrivals.partition_point(|&t| t < from);
    // The rate before: the five seconds before the database went down.
    let before = in_window(down.saturating_sub(5_000), down) as f64 / 5.0;
    // Back: the first one-second window, sliding by 100 ms from `up`, at 90 % of it.
    let last = arrivals.last().copied().unwrap_or(up);
    let back = (0..)
        .map(|k| up + k * 100)
        .take_while(|&t| t + 1_000 <= last)
        .find(|&t| in_window(t, t + 1_000) as f64 >= 0.9 * before)
        .map(|t| (t - up) as f64 / 1000.0);
    json!({"rate_before_per_s": before.round(), "down_s": (up - down) as f64 / 1000.0, "back_to_full_rate_s": back})
}
