//! Overview: is Sluice healthy, and where should an operator look first.

use std::time::Duration;

use leptos::prelude::*;
use leptos_meta::Title;
use serde::{Deserialize, Serialize};

#[cfg(feature = "ssr")]
mod server;

use crate::components::{FreshnessClock, StatePill};
use crate::model::HealthView;

/// How often the page re-reads its numbers once hydrated.
const REFRESH_EVERY_SECS: u32 = 5;

#[server(prefix = "/ui", endpoint = "health")]
pub async fn get_health() -> Result<HealthView, ServerFnError> {
    crate::ssr::auth::require(crate::auth::Role::Viewer).await?;
    let ctx = crate::ssr::context()?;
    Ok(ctx.health().await)
}

/// Where to look first: counts that link to the page explaining them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Attention {
    /// Merchant delivery breakers not closed (open or probing).
    pub open_breakers: u64,
    pub failed_deliveries: u64,
    /// Upstream 429s reported in the last hour (from the quota history).
    pub penalties_1h: u64,
    /// Permits refused in the last hour.
    pub refusals_1h: u64,
    pub grants_1h: u64,
    /// p95 of booked waits in the last hour, ms.
    pub wait_p95_ms_1h: Option<u64>,
    /// Sampling slots in the hour; 0 means the history has not started yet.
    pub history_slots: u64,
    /// Quota buckets the store holds now (used within the idle retention);
    /// `None` when the store did not answer.
    pub live_buckets: Option<u64>,
}

#[server(prefix = "/ui", endpoint = "overview/attention")]
pub async fn get_attention() -> Result<Attention, ServerFnError> {
    crate::ssr::auth::require(crate::auth::Role::Viewer).await?;
    let ctx = crate::ssr::context()?;
    server::attention(&ctx).await
}

#[component]
pub fn OverviewPage() -> impl IntoView {
    // Seconds since the last refresh; ticks only in the browser, so a number
    // that moves proves the page is hydrated.
    let (since, set_since) = signal(0u32);
    let (generation, set_generation) = signal(0u32);
    Effect::new(move |_| {
        if let Ok(handle) = set_interval_with_handle(
            move || {
                set_since.update(|s| *s += 1);
                if since.get_untracked() >= REFRESH_EVERY_SECS {
                    set_since.set(0);
                    set_generation.update(|g| *g += 1);
                }
            },
            Duration::from_secs(1),
        ) {
            on_cleanup(move || handle.clear());
        }
    });
    let health = Resource::new(move || generation.get(), |_| get_health());
    let attention = Resource::new(move || generation.get(), |_| get_attention());

    view! {
        <Title text="Overview"/>
        <header class="page-header">
            <h1>"Overview"</h1>
            <FreshnessClock seconds=since/>
        </header>
        <Transition fallback=|| view! { <p class="muted">"Loading…"</p> }>
            {move || {
                health.get().map(|h| match h {
                    Ok(h) => view! { <HealthPanel health=h/> }.into_any(),
                    Err(e) => view! { <p class="error">"Could not read health: " {e.to_string()}</p> }.into_any(),
                })
            }}
        </Transition>
        <Transition fallback=|| ()>
            {move || {
                attention.get().map(|a| match a {
                    Ok(a) => view! { <AttentionPanel attention=a/> }.into_any(),
                    Err(e) => view! { <p class="error">"Could not read the counts: " {e.to_string()}</p> }.into_any(),
                })
            }}
        </Transition>
    }
}

fn quota_mode_class(mode: &str) -> &'static str {
    match mode {
        "healthy" => "ok",
        "degraded" => "warn",
        _ => "bad",
    }
}

#[component]
fn HealthPanel(health: HealthView) -> impl IntoView {
    let ready = health.is_ready();
    view! {
        <section class="cards">
            <div class="card" data-testid="health-database">
                <h2>"Database"</h2>
                <p class="big">{health.database_backend.clone()}</p>
                <StatePill state=health.database.clone()/>
            </div>
            <div class="card" data-testid="health-redis">
                <h2>"Quota store"</h2>
                <p class="big">{health.quota_store.clone()}</p>
                <StatePill state=health.redis.clone()/>
                <span class=format!("pill {}", quota_mode_class(&health.quota_mode)) data-testid="quota-mode">
                    {health.quota_mode.clone()}
                </span>
            </div>
            <div class="card">
                <h2>"Readiness"</h2>
                <p class="big">{if ready { "ready" } else { "degraded" }}</p>
                <span class="muted">"Sluice " {health.version.clone()}</span>
            </div>
        </section>
    }
}

/// Counts that need a look, each linking to the page that explains it.
#[component]
fn AttentionPanel(attention: Attention) -> impl IntoView {
    let a = attention;
    let level = |n: u64, bad: bool| match (n, bad) {
        (0, _) => "big",
        (_, true) => "big bad",
        (_, false) => "big warn",
    };
    let hour = if a.history_slots == 0 { "last hour · history starting" } else { "last hour" };
    view! {
        <section class="cards attention">
            <a class="card" href="/breakers" data-testid="open-breakers">
                <h2>"Open breakers"</h2>
                <p class=level(a.open_breakers, true) data-testid="open-breakers-count">{a.open_breakers}</p>
                <span class="muted">"merchant delivery breakers"</span>
            </a>
            <a class="card" href="/deliveries?status=failed" data-testid="failed-deliveries">
                <h2>"FAILED deliveries"</h2>
                <p class=level(a.failed_deliveries, true) data-testid="failed-count">{a.failed_deliveries}</p>
                <span class="muted">"to redeliver or retry"</span>
            </a>
            <a class="card" href="/quotas" data-testid="penalties">
                <h2>"429 penalties"</h2>
                <p class=level(a.penalties_1h, false) data-testid="penalties-1h">{a.penalties_1h}</p>
                <span class="muted">{hour}</span>
            </a>
            <a class="card" href="/quotas" data-testid="refusals">
                <h2>"Refused permits"</h2>
                <p class=level(a.refusals_1h, false) data-testid="refusals-1h">{a.refusals_1h}</p>
                <span class="muted">{hour}</span>
            </a>
            <a class="card" href="/quotas" data-testid="live-buckets">
                <h2>"Live quota buckets"</h2>
                <p class="big" data-testid="live-buckets-count">
                    {a.live_buckets.map_or_else(|| "—".to_owned(), |n| n.to_string())}
                </p>
                <span class="muted">"accounts × rules used within the retention"</span>
            </a>
            <a class="card" href="/quotas" data-testid="waits">
                <h2>"Wait p95"</h2>
                <p class="big" data-testid="wait-p95-1h">{crate::format::duration_fine(a.wait_p95_ms_1h)}</p>
                <span class="muted">{format!("{} permits, {hour}", a.grants_1h)}</span>
            </a>
        </section>
    }
}
