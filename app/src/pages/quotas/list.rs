//! Quotas: every (account, rule) bucket with its usage and counters, searched
//! by account (`?account=`, a plain GET form, so it works without
//! JavaScript) and paged. Once hydrated the table follows the server-sent
//! stream `GET /ui/stream/quotas` and pauses while the tab is hidden.

use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_query_map;

use super::{list_quotas, quotas_url, BucketTable, QuotasView, PAGE_SIZE};
use crate::auth::error_text;
use crate::format;
use crate::live::{use_live, LiveIndicator};

#[component]
pub fn QuotasPage() -> impl IntoView {
    let query = use_query_map();
    let search = Memo::new(move |_| {
        query.with(|q| (q.get("account").unwrap_or_default(), q.get("page").and_then(|p| p.parse::<u32>().ok())))
    });
    let data = crate::codec::resource(move || search.get(), |(account, page)| list_quotas(Some(account), page));
    // Updates from the stream replace the server-rendered page.
    let latest = RwSignal::new(None::<QuotasView>);
    let stream_url = Memo::new(move |_| {
        let (account, page) = search.get();
        format!("/ui/stream/quotas?account={}&page={}", format::percent_encode(&account), page.unwrap_or(1))
    });
    Effect::new(move |_| {
        search.track();
        latest.set(None);
    });
    let live = use_live(stream_url, "quotas", move |v: QuotasView| latest.set(Some(v)));

    view! {
        <Title text="Quotas"/>
        <header class="page-header">
            <h1>"Quotas"</h1>
            <LiveIndicator live/>
        </header>
        <form class="search" method="get" action="/quotas" role="search">
            <label for="account-search">"Account"</label>
            <input id="account-search" type="search" name="account" placeholder="part of an account name"
                value=move || search.get().0/>
            <button type="submit">"Search"</button>
        </form>
        <Transition fallback=|| view! { <p class="muted">"Loading…"</p> }>
            {move || {
                let shown = latest.get().map(Ok).or_else(|| data.get());
                shown.map(|r| match r {
                    Ok(v) => view! { <QuotasTable view=v/> }.into_any(),
                    Err(e) => view! { <p class="error">"Could not read the quotas: " {error_text(&e)}</p> }.into_any(),
                })
            }}
        </Transition>
    }
}

#[component]
fn QuotasTable(view: QuotasView) -> impl IntoView {
    let QuotasView { account, page, pages, total, rows, quota_mode, .. } = view;
    let degraded = quota_mode != "healthy";
    let prev = (page > 1).then(|| quotas_url(&account, page - 1));
    let next = (page < pages).then(|| quotas_url(&account, page + 1));
    let first = (page as usize - 1) * PAGE_SIZE + 1;
    let last = first + rows.len() - usize::from(!rows.is_empty());
    view! {
        <Show when=move || degraded>
            <p class="pill warn" data-testid="quota-mode">"quota store " {quota_mode.clone()}</p>
        </Show>
        <p class="muted" data-testid="quota-count">
            {if total == 0 {
                if account.is_empty() { "No buckets yet: they appear with the first permit.".to_owned() }
                else { format!("No bucket of an account matching “{account}”.") }
            } else {
                format!("{first}–{last} of {total} buckets")
            }}
        </p>
        <BucketTable rows link_accounts=true/>
        <nav class="pager">
            {prev.map(|href| view! { <a href=href rel="prev">"← previous"</a> })}
            <span class="muted">{format!("page {page} of {pages}")}</span>
            {next.map(|href| view! { <a href=href rel="next">"next →"</a> })}
        </nav>
    }
}
