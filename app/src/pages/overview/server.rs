//! The Overview's numbers, read on the server (ssr only).

use std::collections::HashMap;
use std::time::Duration;

use leptos::prelude::ServerFnError;
use plotters::style::RGBColor;
use sluice_engine::delivery::model::AttemptOutcome;
use sluice_engine::quota::history::SlotTotals;

use super::{Attention, BusyAccount, Dashboard, OpenBreaker};
use crate::ssr::auth::LOGIN_SCOPE;
use crate::ssr::charts::{self, palette, Series, TimeChart};
use crate::ssr::{internal, AppContext};

/// The Overview's "where to look" numbers: breakers, FAILED deliveries and
/// the quota history's last hour.
pub async fn attention(ctx: &AppContext) -> Result<Attention, ServerFnError> {
    let now = ctx.clock.now();
    let open_breakers = ctx.deliveries.open_breakers().await.map_err(|e| internal("reading breakers", e))?.len();
    let counts = ctx.deliveries.status_counts().await.map_err(|e| internal("counting deliveries", e))?;
    let hour = ctx
        .history
        .totals_since(now - Duration::from_secs(3600))
        .await
        .map_err(|e| internal("reading quota history", e))?;
    Ok(Attention {
        open_breakers: open_breakers as u64,
        failed_deliveries: counts.failed,
        penalties_1h: hour.penalties,
        refusals_1h: hour.refusals,
        grants_1h: hour.grants,
        wait_p95_ms_1h: if hour.grants == 0 { None } else { hour.wait_percentile(0.95).map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)) },
        history_slots: hour.slots,
        // A store that does not answer must not hide the other numbers.
        live_buckets: ctx.limiter.live_buckets().await.ok().map(|counts| counts.iter().map(|(_, n)| n).sum()),
    })
}

/// Delivery attempt outcomes, in the order and colours the chart shows them.
fn outcome_style(outcome: AttemptOutcome) -> (&'static str, RGBColor) {
    match outcome {
        AttemptOutcome::Success => ("delivered (2xx)", palette::OK),
        AttemptOutcome::ServerError => ("5xx", palette::BAD),
        AttemptOutcome::RateLimited => ("429 from the merchant", palette::WARN),
        AttemptOutcome::ClientError => ("4xx", palette::series(2)),
        AttemptOutcome::Network => ("network error", palette::series(3)),
        AttemptOutcome::Timeout => ("timeout", palette::series(4)),
    }
}

const OUTCOMES: [AttemptOutcome; 6] = [
    AttemptOutcome::Success,
    AttemptOutcome::ServerError,
    AttemptOutcome::RateLimited,
    AttemptOutcome::ClientError,
    AttemptOutcome::Network,
    AttemptOutcome::Timeout,
];

/// Busiest accounts listed on the Overview.
const BUSIEST: usize = 5;

/// The Overview's dashboard over the last `hours`: charts of permits and
/// delivery attempts, open breakers, the busiest accounts, the oldest
/// pending delivery.
pub async fn dashboard(ctx: &AppContext, hours: u32) -> Result<Dashboard, ServerFnError> {
    let now = ctx.clock.now();
    let since = now - Duration::from_secs(u64::from(hours) * 3600);
    let (from_ms, to_ms) = (since.as_millis(), now.as_millis());
    let history = |e| internal("reading quota history", e);

    // Permits: every bucket's totals per sampling slot.
    let slots = ctx.history.slot_totals_since(since).await.map_err(history)?;
    let per_min = |n: u64, span_ms: i64| n as f64 * 60_000.0 / span_ms.max(1) as f64;
    let line = |name: &str, color, value: &dyn Fn(&SlotTotals) -> u64| Series {
        name: name.to_owned(),
        color,
        points: slots.iter().map(|s| (s.at_ms, per_min(value(s), s.span_ms))).collect(),
    };
    let permits = TimeChart {
        title: "Permits".into(),
        unit: "per minute".into(),
        from_ms,
        to_ms,
        series: vec![
            line("granted", palette::OK, &|s| s.grants),
            line("refused", palette::WARN, &|s| s.refusals),
            line("429 penalties", palette::BAD, &|s| s.penalties),
        ],
        marks: slots.iter().filter(|s| s.penalties > 0).map(|s| s.at_ms).collect(),
        marks_name: "429 penalty".into(),
        ..TimeChart::default()
    };

    // Deliveries: attempts by outcome in 60 buckets over the period.
    let bucket = Duration::from_secs(u64::from(hours) * 60);
    let bucket_ms = i64::try_from(bucket.as_millis()).unwrap_or(i64::MAX);
    let counts = ctx
        .deliveries
        .attempt_outcomes_since(since, bucket)
        .await
        .map_err(|e| internal("counting delivery attempts", e))?;
    let first = from_ms.div_euclid(bucket_ms) * bucket_ms;
    let buckets: Vec<i64> = (0..).map(|i| first + i * bucket_ms).take_while(|b| *b <= to_ms).collect();
    let by_outcome: HashMap<(i64, AttemptOutcome), u64> = counts.into_iter().map(|(at, o, n)| ((at, o), n)).collect();
    let deliveries = TimeChart {
        title: "Delivery attempts".into(),
        unit: "attempts / min".into(),
        from_ms,
        to_ms,
        series: OUTCOMES
            .iter()
            .filter(|o| **o == AttemptOutcome::Success || by_outcome.keys().any(|(_, k)| k == *o))
            .map(|o| {
                let (name, color) = outcome_style(*o);
                Series {
                    name: name.to_owned(),
                    color,
                    points: if by_outcome.is_empty() {
                        Vec::new()
                    } else {
                        buckets.iter().map(|b| (*b, per_min(by_outcome.get(&(*b, *o)).copied().unwrap_or(0), bucket_ms))).collect()
                    },
                }
            })
            .collect(),
        ..TimeChart::default()
    };

    // Open breakers with how long they have been open.
    let breakers = ctx.deliveries.open_breakers().await.map_err(|e| internal("reading breakers", e))?;
    let mut open_breakers = Vec::with_capacity(breakers.len());
    for b in breakers {
        let merchant = ctx.deliveries.merchant(&b.merchant_id).await.map(|m| m.name).unwrap_or_default();
        open_breakers.push(OpenBreaker {
            kind: "merchant".into(),
            name: if merchant.is_empty() { b.merchant_id.as_str().to_owned() } else { merchant },
            href: format!("/deliveries?merchant={}", b.merchant_id.as_str()),
            state: b.status.as_str().to_owned(),
            open_for_ms: b.opened_at.map(|at| to_ms - at.as_millis()),
        });
    }
    // A store that does not answer must not hide the rest of the dashboard.
    let upstream = ctx.upstream_breakers.list().await;
    let upstream_unreadable = upstream.is_err();
    for b in upstream.unwrap_or_default() {
        let state = b.phase.as_str();
        if state == "closed" {
            continue;
        }
        open_breakers.push(OpenBreaker {
            kind: "upstream".into(),
            name: format!("{} · {}", b.account, b.scope),
            href: "/breakers".into(),
            state: state.to_owned(),
            open_for_ms: b.opened_at.map(|at| to_ms - at.as_millis()),
        });
    }

    // Busiest accounts: permits per minute over the last minutes as a share
    // of their rule's limit.
    let window = crate::pages::quotas::server::RATE_WINDOW;
    let limits = crate::pages::quotas::server::per_minute_limits(ctx);
    let minutes = window.as_secs_f64() / 60.0;
    let mut busiest: Vec<BusyAccount> = ctx
        .history
        .grants_by_bucket_since(now - window)
        .await
        .map_err(history)?
        .into_iter()
        .filter(|g| g.scope != LOGIN_SCOPE && g.grants > 0)
        .filter_map(|g| {
            let limit = limits.get(&g.rule.0).copied().filter(|l| *l > 0.0)?;
            Some(BusyAccount {
                percent: 100.0 * g.grants as f64 / minutes / limit,
                account: g.account,
                rule: g.rule.0,
                scope: g.scope,
            })
        })
        .collect();
    busiest.sort_by(|a, b| b.percent.total_cmp(&a.percent).then_with(|| a.account.cmp(&b.account)));
    busiest.truncate(BUSIEST);

    let oldest = ctx.deliveries.oldest_pending_created_at().await.map_err(|e| internal("reading deliveries", e))?;
    Ok(Dashboard {
        hours,
        history_slots: slots.len() as u64,
        permits_svg: charts::draw(&permits),
        deliveries_svg: charts::draw(&deliveries),
        open_breakers,
        upstream_unreadable,
        busiest,
        oldest_pending_ms: oldest.map(|at| to_ms - at.as_millis()),
    })
}
