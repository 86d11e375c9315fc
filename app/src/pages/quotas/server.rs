//! The Quotas pages' and the Overview's numbers, read on the server. Shared
//! by the server functions and the live stream (`GET /ui/stream/quotas`,
//! `server/src/http/stream.rs`), so both show exactly the same thing.

use std::collections::HashMap;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use leptos::prelude::ServerFnError;
use sluice_engine::quota::{BucketKey, BucketStats, Priority, RefusalReason};

use super::{AccountView, BucketRow, LaneRow, QuotasView, PAGE_SIZE};
use crate::ssr::{internal, AppContext};
use crate::ssr::auth::LOGIN_SCOPE;

/// Permits per minute are averaged over this window of history.
pub const RATE_WINDOW: Duration = Duration::from_secs(300);
/// Buckets read from the store at once while building a page.
const READS_IN_FLIGHT: usize = 8;

/// Which buckets a page shows.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TableQuery {
    /// Part of an account name, case-insensitive; empty: every account.
    pub account: String,
    /// Only the account named exactly (the per-account page).
    pub exact: bool,
    /// 1-based.
    pub page: u32,
}

impl TableQuery {
    /// Trim and bound what came from a URL.
    pub fn parse(account: Option<&str>, exact: bool, page: Option<u32>) -> TableQuery {
        let account: String = account.unwrap_or_default().trim().chars().take(128).collect();
        TableQuery { account, exact, page: page.unwrap_or(1).max(1) }
    }

    fn matches(&self, key: &BucketKey, needle: &str) -> bool {
        if self.exact {
            key.account == self.account
        } else {
            needle.is_empty() || key.account.to_lowercase().contains(needle)
        }
    }
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// One table row: the bucket's usage (peek) and counters (stats).
async fn row(ctx: &AppContext, key: BucketKey, rates: &HashMap<BucketKey, f64>) -> Result<BucketRow, ServerFnError> {
    let usage = ctx.limiter.peek_bucket(&key).await.map_err(|e| internal("reading a quota bucket", e))?;
    let stats = ctx.limiter.stats(&key).await.map_err(|e| internal("reading quota statistics", e))?;
    Ok(BucketRow {
        per_minute: rates.get(&key).copied(),
        remaining: usage.map(|u| u.remaining),
        capacity: usage.map(|u| u.capacity),
        next_in_ms: usage.map(|u| ms(u.next_in)),
        grants: stats.grants,
        wait_p50_ms: stats.wait_percentile(0.5).map(ms),
        wait_p95_ms: stats.wait_percentile(0.95).map(ms),
        refusals: RefusalReason::ALL
            .iter()
            .map(|r| (r.as_str().to_owned(), stats.refusals(*r)))
            .filter(|(_, n)| *n > 0)
            .collect(),
        penalties: stats.penalties,
        last_at_ms: stats.last_at_ms,
        lanes: lanes(&stats),
        account: key.account,
        scope: key.scope,
        rule: key.rule.0,
    })
}

/// Each lane's counters, once a request named a lane other than normal.
fn lanes(stats: &BucketStats) -> Vec<LaneRow> {
    if stats.lanes.is_none() {
        return Vec::new();
    }
    Priority::ALL
        .into_iter()
        .map(|p| {
            let l = stats.lane(p);
            LaneRow {
                lane: p.as_str().to_owned(),
                grants: l.grants,
                wait_p95_ms: l.wait_percentile(0.95).map(ms),
                refusals: l.refusals,
            }
        })
        .collect()
}

/// The buckets matching `q`, one page of them with their numbers.
pub async fn table(ctx: &AppContext, q: &TableQuery) -> Result<QuotasView, ServerFnError> {
    let now = ctx.clock.now();
    let keys = ctx.limiter.list_buckets().await.map_err(|e| internal("listing quota buckets", e))?;
    let needle = q.account.to_lowercase();
    // The login throttle shares the store; its buckets are usernames, not quotas.
    let matching: Vec<BucketKey> =
        keys.into_iter().filter(|k| k.scope != LOGIN_SCOPE && q.matches(k, &needle)).collect();
    let total = matching.len();
    let pages = total.div_ceil(PAGE_SIZE).max(1);
    let page = (q.page as usize).min(pages);
    let start = (page - 1) * PAGE_SIZE;
    let shown: Vec<BucketKey> = matching.into_iter().skip(start).take(PAGE_SIZE).collect();
    let rates = ctx.history.rates(&shown, now, RATE_WINDOW).await.map_err(|e| internal("reading quota history", e))?;
    let rates = &rates;
    let rows: Vec<BucketRow> = futures::stream::iter(shown)
        .map(|key| row(ctx, key, rates))
        .buffered(READS_IN_FLIGHT)
        .try_collect()
        .await?;
    Ok(QuotasView {
        account: q.account.clone(),
        page: page as u32,
        pages: pages as u32,
        total: total as u64,
        rows,
        at_ms: now.as_millis(),
        quota_mode: format!("{:?}", ctx.limiter.health()).to_lowercase(),
    })
}

/// One account: its buckets and charts of the last `hours`.
pub async fn account(ctx: &AppContext, account: &str, hours: u32) -> Result<AccountView, ServerFnError> {
    let now = ctx.clock.now();
    let q = TableQuery::parse(Some(account), true, Some(1));
    let table = table(ctx, &q).await?;
    let since = now - Duration::from_secs(u64::from(hours) * 3600);
    let history = |e| internal("reading quota history", e);
    let points = ctx.history.series(account, since).await.map_err(history)?;
    let slots = ctx.history.slots_since(since).await.map_err(history)?;
    let limits = per_minute_limits(ctx);
    let charts = crate::ssr::charts::account_charts(&points, &slots, &limits, since.as_millis(), now.as_millis());
    Ok(AccountView {
        account: account.to_owned(),
        hours,
        samples: slots.len() as u64,
        usage_svg: charts.usage,
        penalties_svg: charts.penalties,
        table,
    })
}

/// Permits per minute each rule allows (its tokens per interval), by rule id.
pub fn per_minute_limits(ctx: &AppContext) -> HashMap<String, f64> {
    ctx.limiter
        .rules()
        .rules()
        .map(|r| {
            let per_ms = f64::from(r.limit.tokens) / r.limit.interval.as_millis().max(1) as f64;
            (r.id.0.clone(), per_ms * 60_000.0)
        })
        .collect()
}
