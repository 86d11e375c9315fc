//! Permits for many distinct accounts through the HTTP API, as fast as one
//! process can send them: the loader of `scripts/bench-accounts.sh` (memory
//! per live bucket) and `scripts/bench/pages.sh` (the Quotas page with many
//! accounts seen).
//!
//! `account_load BASE_URL TOKEN FIRST COUNT [CONCURRENCY] [SCOPE]` sends one
//! `POST /api/v1/permits` for each account `acct-FIRST` … `acct-(FIRST+COUNT-1)`
//! over keep-alive connections, checks every answer is a grant, and prints
//! the rate. A 503 (the quota store did not answer in time) is asked again
//! after its `Retry-After`, up to five times, as a worker would, and counted.
//! Exits non-zero when any account was not granted in the end.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 5 {
        anyhow::bail!("usage: account_load BASE_URL TOKEN FIRST COUNT [CONCURRENCY] [SCOPE]");
    }
    let base = args[1].trim_end_matches('/').to_owned();
    let token = args[2].clone();
    let first: u64 = args[3].parse()?;
    let count: u64 = args[4].parse()?;
    let concurrency: u64 = args.get(5).map(|c| c.parse()).transpose()?.unwrap_or(32);
    let scope = args.get(6).cloned().unwrap_or_else(|| "soak".to_owned());

    let client = reqwest::Client::builder().pool_max_idle_per_host(concurrency as usize).build()?;
    let url = format!("{base}/api/v1/permits");
    let next = Arc::new(AtomicU64::new(first));
    let failed = Arc::new(AtomicU64::new(0));
    let retried = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..concurrency {
        let (client, url, token, scope) = (client.clone(), url.clone(), token.clone(), scope.clone());
        let (next, failed, retried) = (next.clone(), failed.clone(), retried.clone());
        tasks.spawn(async move {
            loop {
                let n = next.fetch_add(1, Ordering::Relaxed);
                if n >= first + count {
                    return;
                }
                let body = format!(r#"{{"account":"acct-{n}","scope":"{scope}","method":"GET","path":"/load"}}"#);
                let mut ok = false;
                for attempt in 0..6 {
                    match client.post(&url).bearer_auth(&token).header("content-type", "application/json").body(body.clone()).send().await {
                        Ok(r) if r.status() == reqwest::StatusCode::OK => ok = true,
                        // The last 503 is reported below like any refusal.
                        Ok(r) if r.status() == reqwest::StatusCode::SERVICE_UNAVAILABLE && attempt < 5 => {
                            let pause = r.headers().get("retry-after").and_then(|v| v.to_str().ok()?.parse().ok()).unwrap_or(1);
                            retried.fetch_add(1, Ordering::Relaxed);
                            tokio::time::sleep(std::time::Duration::from_secs(pause)).await;
                            continue;
                        }
                        Ok(r) => {
                            let status = r.status();
                            let text = r.text().await.unwrap_or_default();
                            if failed.load(Ordering::Relaxed) < 5 {
                                eprintln!("acct-{n}: {status} {text}");
                            }
                        }
                        Err(e) => {
                            if failed.load(Ordering::Relaxed) < 5 {
                                eprintln!("acct-{n}: {e}");
                            }
                        }
                    }
                    break;
                }
                if !ok {
                    failed.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
    }
    while tasks.join_next().await.is_some() {}
    let secs = started.elapsed().as_secs_f64();
    let failed = failed.load(Ordering::Relaxed);
    let retried = retried.load(Ordering::Relaxed);
    println!("{count} accounts in {secs:.1} s ({:.0} permits/s), {retried} asked again after a 503, {failed} not granted", count as f64 / secs);
    if failed > 0 {
        anyhow::bail!("{failed} permits were not granted");
    }
    Ok(())
}
