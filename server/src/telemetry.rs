//! Logs (tracing) and metrics (Prometheus exposition).

use std::time::Instant;

use axum::extract::{MatchedPath, Request};
use axum::middleware::Next;
use axum::response::Response;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tracing_subscriber::EnvFilter;

use sluice_engine::quota::Limiter;

use crate::config::LogFormat;

/// Install the global tracing subscriber. Safe to call more than once (tests):
/// later calls are ignored.
pub fn init_tracing(filter: &str, format: LogFormat) {
    let filter = EnvFilter::try_new(filter).unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}

/// Latency buckets in seconds, from sub-millisecond API calls to held permits.
const LATENCY_BUCKETS: &[f64] = &[0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0];

/// Booked permit waits run from nothing to the wait ceiling (minutes for
/// slow rules), far beyond request latencies.
const PERMIT_WAIT_METRIC: &str = "sluice_api_permit_wait_seconds";
/// The limiter's own wait histogram (every caller, not only the API).
const QUOTA_WAIT_METRIC: &str = sluice_engine::quota::metrics::WAIT_SECONDS;
const PERMIT_WAIT_BUCKETS: &[f64] = &[0.0, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0];

/// The process-wide Prometheus recorder. Installed once; every `Application`
/// in the process (tests start many) shares it.
pub fn prometheus() -> PrometheusHandle {
    static HANDLE: std::sync::OnceLock<PrometheusHandle> = std::sync::OnceLock::new();
    HANDLE
        .get_or_init(|| {
            // Full-name matchers win over suffixes (the exporter sorts them first).
            let builder = PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Full(PERMIT_WAIT_METRIC.to_owned()), PERMIT_WAIT_BUCKETS)
                .and_then(|b| b.set_buckets_for_metric(Matcher::Full(QUOTA_WAIT_METRIC.to_owned()), PERMIT_WAIT_BUCKETS))
                .and_then(|b| b.set_buckets_for_metric(Matcher::Suffix("_seconds".to_owned()), LATENCY_BUCKETS))
                .unwrap_or_else(|_| PrometheusBuilder::new());
            match builder.install_recorder() {
                Ok(handle) => handle,
                // Another recorder is installed (should not happen): keep
                // serving an exporter of our own so /metrics still answers.
                Err(_) => PrometheusBuilder::new().build_recorder().handle(),
            }
        })
        .clone()
}

/// Count requests and time them, labelled by route template (not raw path,
/// which would explode the label set), method and status.
pub async fn track_http(req: Request, next: Next) -> Response {
    let started = Instant::now();
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_else(|| if req.uri().path().starts_with("/pkg/") { "/pkg/*".to_owned() } else { "other".to_owned() });
    let method = req.method().as_str().to_owned();
    let response = next.run(req).await;
    let status = response.status().as_u16().to_string();
    let labels = [("method", method), ("route", route), ("status", status)];
    metrics::counter!("sluice_http_requests_total", &labels).increment(1);
    metrics::histogram!("sluice_http_request_duration_seconds", &labels).record(started.elapsed().as_secs_f64());
    response
}

/// A permit granted by the API, with its booked wait.
pub fn record_permit(wait_ms: u64) {
    metrics::counter!("sluice_api_permit_decisions_total", "result" => "granted", "reason" => "").increment(1);
    metrics::histogram!(PERMIT_WAIT_METRIC).record(wait_ms as f64 / 1000.0);
}

/// A permit refused by the API, by reason.
pub fn record_refusal(reason: &'static str) {
    metrics::counter!("sluice_api_permit_decisions_total", "result" => "refused", "reason" => reason).increment(1);
}

/// An upstream 429 reported through the API.
pub fn record_penalty(scope: &str) {
    metrics::counter!("sluice_api_penalties_total", "scope" => scope.to_owned()).increment(1);
}

/// New events accepted through the API (duplicates not counted).
pub fn record_events_accepted(n: u64) {
    if n > 0 {
        metrics::counter!("sluice_api_events_accepted_total").increment(n);
    }
}

/// Gauges read from shared state just before a scrape: the outbox by status
/// (the queue depth is its PENDING count), merchant breakers that are not
/// closed, the quota buckets each store holds, this process's resident
/// memory and what its allocator holds ([`AllocatorStats`]). Counters of
/// decisions, waits, penalties and delivery results are kept as they happen
/// (engine `quota::metrics`, `delivery::worker`).
/// A failed read leaves the previous values and is logged.
pub async fn refresh_gauges(deliveries: &sluice_engine::delivery::DeliveryStore, limiter: &Limiter) {
    match limiter.live_buckets().await {
        Ok(counts) => {
            for (store, n) in counts {
                metrics::gauge!("sluice_quota_live_buckets", "store" => store).set(n as f64);
            }
        }
        Err(e) => tracing::warn!(error = &e as &dyn std::error::Error, "metrics: counting quota buckets"),
    }
    if let Some(bytes) = resident_memory_bytes() {
        // The name Prometheus' own client libraries use for this.
        metrics::gauge!("process_resident_memory_bytes").set(bytes as f64);
    }
    record_allocator_stats();
    use sluice_engine::delivery::BreakerStatus;
    match deliveries.status_counts().await {
        Ok(c) => {
            for (status, n) in [("PENDING", c.pending), ("DELIVERING", c.delivering), ("FAILED", c.failed)] {
                metrics::gauge!("sluice_deliveries", "status" => status).set(n as f64);
            }
            metrics::gauge!("sluice_delivery_queue_depth").set(c.pending as f64);
        }
        Err(e) => tracing::warn!(error = &e as &dyn std::error::Error, "metrics: counting deliveries"),
    }
    match deliveries.open_breakers().await {
        Ok(breakers) => {
            for state in [BreakerStatus::Open, BreakerStatus::Probing] {
                let n = breakers.iter().filter(|b| b.status == state).count();
                metrics::gauge!("sluice_merchant_breakers", "state" => state.as_str()).set(n as f64);
            }
        }
        Err(e) => tracing::warn!(error = &e as &dyn std::error::Error, "metrics: reading breakers"),
    }
}

/// What the process's allocator says it holds, in bytes: `allocated` by the
/// program now, `active` in pages that hold some of it, `metadata` for its
/// own bookkeeping, `resident` in physical memory, `retained` as address
/// space kept for reuse but given back to the system. `resident` well above
/// `allocated` is memory held in partly used pages (fragmentation), which
/// the background thread cannot return.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AllocatorStats {
    pub allocated: u64,
    pub active: u64,
    pub metadata: u64,
    pub resident: u64,
    pub retained: u64,
}

static ALLOCATOR_STATS: std::sync::OnceLock<fn() -> Option<AllocatorStats>> = std::sync::OnceLock::new();

/// Name how to read the allocator's statistics. The `sluice` binary sets
/// this for jemalloc at start; elsewhere (tests, the library in another
/// program) there is none and `/metrics` leaves the
/// `sluice_allocator_bytes` gauges out. Later calls are ignored.
pub fn set_allocator_stats(read: fn() -> Option<AllocatorStats>) {
    let _ = ALLOCATOR_STATS.set(read);
}

fn record_allocator_stats() {
    let Some(stats) = ALLOCATOR_STATS.get().and_then(|read| read()) else { return };
    for (kind, bytes) in [
        ("allocated", stats.allocated),
        ("active", stats.active),
        ("metadata", stats.metadata),
        ("resident", stats.resident),
        ("retained", stats.retained),
    ] {
        metrics::gauge!("sluice_allocator_bytes", "kind" => kind).set(bytes as f64);
    }
}

/// This process's resident set size, from `/proc/self/status` (`VmRSS`, in
/// kB); `None` where there is no procfs.
pub fn resident_memory_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: u64 = line.trim_start_matches("VmRSS:").trim().trim_end_matches("kB").trim().parse().ok()?;
    Some(kb * 1024)
}
