//! One account's quotas: each rule's bucket with its numbers (live, like the
//! Quotas page) and charts of usage and 429 penalties over time, drawn on the
//! server with plotters from the sampled history.

use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::{use_params_map, use_query_map};

use super::{account_quotas, chart_hours, AccountView, BucketTable, QuotasView};
use crate::format::percent_encode;
use crate::auth::error_text;
use crate::live::{use_live, LiveIndicator};

#[component]
pub fn QuotaAccountPage() -> impl IntoView {
    let params = use_params_map();
    let query = use_query_map();
    let account = Memo::new(move |_| params.with(|p| p.get("account").unwrap_or_default()));
    let hours = Memo::new(move |_| chart_hours(query.with(|q| q.get("hours").and_then(|h| h.parse().ok()))));
    let data = crate::codec::resource(move || (account.get(), hours.get()), |(a, h)| account_quotas(a, Some(h)));
    let latest = RwSignal::new(None::<QuotasView>);
    let stream_url =
        Memo::new(move |_| format!("/ui/stream/quotas?exact=true&account={}", percent_encode(&account.get())));
    Effect::new(move |_| {
        account.track();
        latest.set(None);
    });
    let live = use_live(stream_url, "quotas", move |v: QuotasView| latest.set(Some(v)));

    view! {
        <Title text=move || format!("Quotas of {}", account.get())/>
        <header class="page-header">
            <h1>"Account " <code>{move || account.get()}</code></h1>
            <LiveIndicator live/>
        </header>
        <p><a href="/quotas">"← all quotas"</a></p>
        <Transition fallback=|| view! { <p class="muted">"Loading…"</p> }>
            {move || {
                data.get().map(|r| match r {
                    Ok(v) => view! { <AccountBody view=v latest/> }.into_any(),
                    Err(e) => view! { <p class="error">"Could not read the account: " {error_text(&e)}</p> }.into_any(),
                })
            }}
        </Transition>
    }
}

#[component]
fn AccountBody(view: AccountView, latest: RwSignal<Option<QuotasView>>) -> impl IntoView {
    let AccountView { account, hours, samples, usage_svg, penalties_svg, table } = view;
    let empty = table.rows.is_empty();
    let rows = move || latest.get().unwrap_or_else(|| table.clone()).rows;
    let range = [1u32, 6, 24]
        .into_iter()
        .map(|h| {
            let href = format!("/quotas/{}?hours={h}", percent_encode(&account));
            let class = if h == hours { "current" } else { "" };
            view! { <a href=href class=class>{format!("{h} h")}</a> }
        })
        .collect_view();
    view! {
        <Show when=move || empty>
            <p class="muted" data-testid="quota-count">"No bucket of this account is in use."</p>
        </Show>
        {move || view! { <BucketTable rows=rows() link_accounts=false/> }}
        <section class="charts">
            <nav class="range">"Period: " {range}</nav>
            <Show when=move || samples == 0>
                <p class="muted">"No history sampled in this period yet; charts fill in as the sampler runs."</p>
            </Show>
            <figure class="chart" data-testid="usage-chart" inner_html=usage_svg></figure>
            <figure class="chart" data-testid="penalties-chart" inner_html=penalties_svg></figure>
        </section>
    }
}
