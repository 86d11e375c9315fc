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

/// A breaker that is not closed: a merchant's delivery breaker or an
/// upstream (account, scope) breaker.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OpenBreaker {
    /// "merchant" or "upstream".
    pub kind: String,
    /// The merchant's name, or "account · scope".
    pub name: String,
    /// Where to look at what it holds back.
    pub href: String,
    /// `open` or `half_open`.
    pub state: String,
    /// Since the breaker opened, ms.
    pub open_for_ms: Option<i64>,
}

/// An account's use of one rule's limit over the last minutes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BusyAccount {
    pub account: String,
    pub rule: String,
    pub scope: String,
    /// Permits per minute as a share of the rule's limit, %.
    pub percent: f64,
}

/// The Overview's dashboard over the chosen period.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Dashboard {
    pub hours: u32,
    /// Sampling slots of the quota history in the period (0: none yet).
    pub history_slots: u64,
    /// Permits granted and refused and 429 penalties per minute (SVG).
    pub permits_svg: String,
    /// Delivery attempts by outcome per minute (SVG).
    pub deliveries_svg: String,
    pub open_breakers: Vec<OpenBreaker>,
    /// The upstream breaker store (Redis) did not answer.
    pub upstream_unreadable: bool,
    pub busiest: Vec<BusyAccount>,
    /// Age of the oldest PENDING delivery, ms.
    pub oldest_pending_ms: Option<i64>,
}

#[server(prefix = "/ui", endpoint = "overview/dashboard")]
pub async fn get_dashboard(hours: Option<u32>) -> Result<Dashboard, ServerFnError> {
    crate::ssr::auth::require(crate::auth::Role::Viewer).await?;
    let ctx = crate::ssr::context()?;
    server::dashboard(&ctx, crate::pages::quotas::chart_hours(hours)).await
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
    let health = crate::codec::resource(move || generation.get(), |_| get_health());
    let attention = crate::codec::resource(move || generation.get(), |_| get_attention());
    let query = leptos_router::hooks::use_query_map();
    let hours = Memo::new(move |_| {
        crate::pages::quotas::chart_hours(query.with(|q| q.get("hours").and_then(|h| h.parse().ok())))
    });
    let dashboard = crate::codec::resource(move || (hours.get(), generation.get()), |(h, _)| get_dashboard(Some(h)));

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
        <Transition fallback=|| ()>
            {move || {
                dashboard.get().map(|d| match d {
                    Ok(d) => view! { <DashboardPanel dashboard=d/> }.into_any(),
                    Err(e) => view! { <p class="error">"Could not read the dashboard: " {e.to_string()}</p> }.into_any(),
                })
            }}
        </Transition>
    }
}

/// Charts over the period (1, 6 or 24 h), then what is wrong right now.
#[component]
fn DashboardPanel(dashboard: Dashboard) -> impl IntoView {
    let d = dashboard;
    let range = [1u32, 6, 24]
        .into_iter()
        .map(|h| {
            let href = if h == 1 { "/".to_owned() } else { format!("/?hours={h}") };
            let current = h == d.hours;
            view! {
                <a href=href class=if current { "current" } else { "" } aria-current=current.then_some("page")>{format!("{h} h")}</a>
            }
        })
        .collect_view();
    let breakers = if d.open_breakers.is_empty() {
        view! { <p class="muted">"None open."</p> }.into_any()
    } else {
        view! {
            <ul class="plain">
                {d.open_breakers.into_iter().map(|b| {
                    let class = if b.state == "open" { "pill bad" } else { "pill warn" };
                    view! {
                        <li data-testid="dashboard-breaker" data-kind=b.kind.clone()>
                            <span class="muted small">{b.kind.clone()} " "</span>
                            <a href=b.href.clone()>{b.name.clone()}</a> " "
                            <span class=class>{b.state.replace('_', " ")}</span> " "
                            <span class="muted">{b.open_for_ms.map(|ms| format!("for {}", crate::format::duration(ms)))}</span>
                        </li>
                    }
                }).collect_view()}
            </ul>
        }
        .into_any()
    };
    let upstream_unreadable = d.upstream_unreadable;
    let busiest = if d.busiest.is_empty() {
        view! { <p class="muted">"No permits in the last 5 minutes of history."</p> }.into_any()
    } else {
        view! {
            <ul class="plain">
                {d.busiest.into_iter().map(|b| {
                    let class = match b.percent {
                        p if p >= 90.0 => "bad",
                        p if p >= 70.0 => "warn",
                        _ => "",
                    };
                    view! {
                        <li data-testid="busy-account">
                            <a class="account" href=format!("/quotas/{}", crate::format::percent_encode(&b.account))
                                title=b.account.clone()>{b.account.clone()}</a>
                            <code class="muted" title=format!("rule {}", b.rule)>{b.scope.clone()}</code>
                            <span class=format!("share {class}")>{format!("{:.0} % of limit", b.percent)}</span>
                            <meter min="0" max="100" low="70" high="90" optimum="0" value=b.percent.min(100.0)
                                aria-label=format!("{} at {:.0} % of its limit", b.account, b.percent)></meter>
                        </li>
                    }
                }).collect_view()}
            </ul>
        }
        .into_any()
    };
    let oldest = d.oldest_pending_ms.map_or_else(|| "none pending".to_owned(), crate::format::duration);
    view! {
        <section class="dashboard" data-testid="dashboard">
            <nav class="range" aria-label="Chart period">"Period: " {range}</nav>
            <Show when=move || d.history_slots == 0>
                <p class="muted">"No quota history sampled in this period yet; the permits chart fills in as the sampler runs."</p>
            </Show>
            <div class="chart-row">
                <figure class="chart" data-testid="permits-chart" inner_html=d.permits_svg></figure>
                <figure class="chart" data-testid="deliveries-chart" inner_html=d.deliveries_svg></figure>
            </div>
            <div class="cards">
                <div class="card" data-testid="dashboard-breakers">
                    <h2>"Open breakers"</h2>
                    {breakers}
                    {upstream_unreadable.then(|| view! {
                        <p class="error small">"Upstream breakers unknown: their store (Redis) did not answer."</p>
                    })}
                    <a class="small" href="/breakers">"All breakers →"</a>
                </div>
                <div class="card" data-testid="busiest">
                    <h2>"Busiest accounts"</h2>
                    <span class="muted small">"share of the limit, last 5 min"</span>
                    {busiest}
                </div>
                <a class="card" href="/deliveries?status=PENDING" data-testid="oldest-pending">
                    <h2>"Oldest pending delivery"</h2>
                    <p class="big" data-testid="oldest-pending-age">{oldest}</p>
                    <span class="muted">"waiting since it was created"</span>
                </a>
            </div>
        </section>
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
