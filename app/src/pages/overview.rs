//! Overview: is Sluice healthy, and where should an operator look first.

use std::time::Duration;

use leptos::prelude::*;
use leptos_meta::Title;

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
