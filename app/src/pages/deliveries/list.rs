//! Deliveries (viewer+): the outbox filtered by status, merchant, event type,
//! money, ladder and creation time, newest first, paged by keyset cursor
//! (never OFFSET). Support staff retry the whole filtered set in batches,
//! after seeing how many deliveries it holds.

use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_query_map;
use serde::{Deserialize, Serialize};

use super::{state_class, DeliveryQuery};
use crate::model::{error_for, FieldError, RetentionDays};
use crate::format;
use crate::auth::{error_text, ForRole, Role};

/// Rows per page.
#[cfg(feature = "ssr")]
pub const PAGE_SIZE: u32 = 50;
/// Rows one bulk-retry call changes at most; the browser loops over batches.
#[cfg(feature = "ssr")]
pub const BULK_BATCH: u32 = 500;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeliveryRow {
    pub id: String,
    pub merchant_id: String,
    pub merchant: String,
    pub event_type: String,
    pub is_money: bool,
    pub status: String,
    pub ladder: String,
    pub fast_attempts: u32,
    pub slow_steps: u32,
    pub last_status_code: Option<u16>,
    pub created_at: i64,
    pub next_attempt_at: i64,
}

/// One page of the list, or why the filter was refused.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeliveryList {
    pub rows: Vec<DeliveryRow>,
    /// Cursor of the next (older) page.
    pub next: Option<String>,
    /// Cursor of the previous (newer) page.
    pub prev: Option<String>,
    /// (id, name) of every merchant, for the filter.
    pub merchants: Vec<(String, String)>,
    pub invalid: Vec<FieldError>,
    /// How long finished deliveries are kept.
    pub retention: RetentionDays,
}

/// How many deliveries a bulk retry of the filter would touch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BulkCount {
    pub failed: u64,
    pub pending: u64,
}

/// What one bulk-retry batch did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BulkBatch {
    /// FAILED deliveries sent again from the start.
    pub redelivered: u64,
    /// PENDING deliveries made due now.
    pub retried: u64,
    /// Rows looked at (changed or found changed by someone else meanwhile).
    pub examined: u64,
    /// Where the next batch starts; `None` when the set is done.
    pub next: Option<String>,
}

#[cfg(feature = "ssr")]
fn filter_or_refuse(filter: &DeliveryQuery) -> Result<sluice_engine::delivery::DeliveryFilter, ServerFnError> {
    super::server::parse_filter(filter).map_err(|errors| {
        super::server::set_status(http::StatusCode::UNPROCESSABLE_ENTITY);
        let text: Vec<String> = errors.into_iter().map(|e| format!("{}: {}", e.field, e.message)).collect();
        ServerFnError::new(text.join("; "))
    })
}

#[server(prefix = "/ui", endpoint = "deliveries/list")]
pub async fn list_deliveries(#[server(default)] filter: DeliveryQuery, after: Option<String>, before: Option<String>) -> Result<DeliveryList, ServerFnError> {
    use super::server::{cursor_text, parse_cursor, parse_filter};
    use sluice_engine::delivery::model::Delivery;
    crate::ssr::auth::require(Role::Viewer).await?;
    let ctx = crate::ssr::context()?;
    let store = &ctx.deliveries;
    let names = store.merchant_names().await.map_err(|e| crate::ssr::internal("listing merchants", e))?;
    let merchants: Vec<(String, String)> = names.into_iter().map(|(id, name)| (id.as_str().to_owned(), name)).collect();
    let mut invalid = Vec::new();
    let parsed = match parse_filter(&filter) {
        Ok(f) => Some(f),
        Err(e) => {
            invalid = e;
            None
        }
    };
    let mut cursor = |field: &str, text: Option<String>| match text.filter(|t| !t.is_empty()) {
        None => None,
        Some(t) => parse_cursor(&t).or_else(|| {
            invalid.push(FieldError::new(field, "not a page cursor of this list".to_owned()));
            None
        }),
    };
    let after = cursor("after", after);
    let before = cursor("before", before);
    let Some(parsed) = parsed.filter(|_| invalid.is_empty()) else {
        return Ok(DeliveryList { merchants, invalid, retention: (&ctx.retention).into(), ..DeliveryList::default() });
    };
    let (items, next, prev): (Vec<Delivery>, _, _) = match (&after, &before) {
        (_, Some(b)) => {
            let (items, newer) = store.list_deliveries_before(&parsed, b, PAGE_SIZE).await.map_err(|e| crate::ssr::internal("listing deliveries", e))?;
            let next = items.last().map(cursor_of);
            let prev = if newer { items.first().map(cursor_of) } else { None };
            (items, next, prev)
        }
        (a, None) => {
            let page = store.list_deliveries(&parsed, a.as_ref(), PAGE_SIZE).await.map_err(|e| crate::ssr::internal("listing deliveries", e))?;
            // Reached by "next": rows newer than the first one exist (we came from them).
            let prev = a.as_ref().and(page.items.first().map(cursor_of));
            (page.items, page.next, prev)
        }
    };
    let name_of = |id: &str| merchants.iter().find(|(m, _)| m == id).map(|(_, n)| n.clone()).unwrap_or_default();
    let rows = items
        .into_iter()
        .map(|d| DeliveryRow {
            merchant: name_of(d.merchant_id.as_str()),
            id: d.id.as_str().to_owned(),
            merchant_id: d.merchant_id.as_str().to_owned(),
            event_type: d.event_type,
            is_money: d.is_money,
            status: d.status.as_str().to_owned(),
            ladder: d.ladder.as_str().to_owned(),
            fast_attempts: d.fast_attempts,
            slow_steps: d.slow_steps,
            last_status_code: d.last_status_code,
            created_at: d.created_at.as_millis(),
            next_attempt_at: d.next_attempt_at.as_millis(),
        })
        .collect();
    fn cursor_of(d: &Delivery) -> sluice_engine::delivery::model::Cursor {
        sluice_engine::delivery::model::Cursor { created_at: d.created_at, id: d.id.clone() }
    }
    Ok(DeliveryList {
        rows,
        next: next.as_ref().map(cursor_text),
        prev: prev.as_ref().map(cursor_text),
        merchants,
        invalid,
        retention: (&ctx.retention).into(),
    })
}

/// How many FAILED and PENDING deliveries match the filter (support+: it
/// is the confirmation step of a bulk retry).
#[server(prefix = "/ui", endpoint = "deliveries/bulk_count")]
pub async fn bulk_retry_count(#[server(default)] filter: DeliveryQuery) -> Result<BulkCount, ServerFnError> {
    use sluice_engine::delivery::model::DeliveryStatus;
    crate::ssr::auth::require(Role::Support).await?;
    let ctx = crate::ssr::context()?;
    let parsed = filter_or_refuse(&filter)?;
    let mut counts = [0_u64; 2];
    for (slot, status) in counts.iter_mut().zip([DeliveryStatus::Failed, DeliveryStatus::Pending]) {
        if parsed.status.is_none_or(|s| s == status) {
            let f = sluice_engine::delivery::DeliveryFilter { status: Some(status), ..parsed.clone() };
            *slot = ctx.deliveries.count_deliveries(&f).await.map_err(|e| crate::ssr::internal("counting deliveries", e))?;
        }
    }
    Ok(BulkCount { failed: counts[0], pending: counts[1] })
}

/// Retry the next batch of the filtered set: FAILED ones are redelivered,
/// PENDING ones made due now, newest first from `after`. Audited per batch.
#[server(prefix = "/ui", endpoint = "deliveries/bulk_retry")]
pub async fn bulk_retry(#[server(default)] filter: DeliveryQuery, after: Option<String>) -> Result<BulkBatch, ServerFnError> {
    use super::server::{cursor_text, parse_cursor};
    use sluice_engine::delivery::ops;
    let me = crate::ssr::auth::require(Role::Support).await?;
    let ctx = crate::ssr::context()?;
    let parsed = filter_or_refuse(&filter)?;
    let after = match after.filter(|a| !a.is_empty()) {
        None => None,
        Some(a) => Some(parse_cursor(&a).ok_or_else(|| {
            super::server::set_status(http::StatusCode::UNPROCESSABLE_ENTITY);
            ServerFnError::new("after: not a bulk-retry cursor")
        })?),
    };
    let now = ctx.clock.now();
    let batch = ops::bulk_retry_after(&ctx.deliveries, &parsed, after.as_ref(), BULK_BATCH, ops::Actor::named(&me.username), now)
        .await
        .map_err(|e| crate::ssr::internal("retrying deliveries", e))?;
    let done = &batch.done;
    Ok(BulkBatch {
        redelivered: done.redelivered.len() as u64,
        retried: done.retried.len() as u64,
        examined: batch.examined,
        next: batch.next.as_ref().map(cursor_text),
    })
}

/// Where a bulk retry stands in the browser.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Bulk {
    Idle,
    Counting,
    Confirm(BulkCount),
    Running { total: u64, examined: u64, changed: u64 },
    Done { changed: u64 },
    Failed(String),
}

#[component]
pub fn DeliveriesPage() -> impl IntoView {
    let query = use_query_map();
    let filter = Memo::new(move |_| query.with(|q| DeliveryQuery::from_pairs(|k| q.get(k))));
    let page = crate::codec::resource(
        move || query.get(),
        |q| {
            let filter = DeliveryQuery::from_pairs(|k| q.get(k));
            list_deliveries(filter, q.get("after"), q.get("before"))
        },
    );
    view! {
        <Title text="Deliveries"/>
        <header class="page-header"><h1>"Deliveries"</h1></header>
        <Transition fallback=|| view! { <p class="muted">"Loading…"</p> }>
            {move || page.get().map(|r| match r {
                Err(e) => view! { <p class="error">{error_text(&e)}</p> }.into_any(),
                Ok(list) => {
                    let kept = format!(
                        "Delivered deliveries are kept {} days and failed ones {} days after they finish, with their attempts and events; then they are deleted. Pending deliveries are always kept.",
                        list.retention.delivered, list.retention.failed
                    );
                    view! {
                        <FilterForm filter=filter.get_untracked() merchants=list.merchants.clone() invalid=list.invalid.clone()/>
                        <p class="muted" data-testid="retention">{kept}</p>
                        <DeliveryTable list=list filter=filter.get_untracked()/>
                    }.into_any()
                }
            })}
        </Transition>
        <BulkRetry filter=filter on_done=move || page.refetch()/>
    }
}

#[component]
fn FilterForm(filter: DeliveryQuery, merchants: Vec<(String, String)>, invalid: Vec<FieldError>) -> impl IntoView {
    let field_error = |field: &str| error_for(&invalid, field).map(|m| view! { <span class="field-error" role="alert">{m}</span> });
    let options = |value: Option<String>, choices: &[(&'static str, &'static str)]| {
        choices
            .iter()
            .map(|&(v, label)| {
                let is = value.as_deref() == Some(v);
                view! { <option value=v selected=is>{label}</option> }
            })
            .collect_view()
    };
    view! {
        // A plain GET form: the filter is the URL, so it works without JS and can be shared.
        <form method="get" action="/deliveries" class="form inline toolbar" data-testid="delivery-filter">
            <label>"Status"
                <select name="status">
                    {options(filter.status.clone(), &[("", "any"), ("PENDING", "PENDING"), ("DELIVERING", "DELIVERING"), ("DELIVERED", "DELIVERED"), ("FAILED", "FAILED")])}
                </select>
                {field_error("status")}
            </label>
            <label>"Merchant"
                <select name="merchant">
                    <option value="">"any"</option>
                    {merchants.into_iter().map(|(id, name)| {
                        let sel = filter.merchant.as_deref() == Some(id.as_str());
                        view! { <option value=id selected=sel>{name}</option> }
                    }).collect_view()}
                </select>
                {field_error("merchant")}
            </label>
            <label>"Event type"
                <input type="text" name="event_type" value=filter.event_type.clone().unwrap_or_default() placeholder="payment.status_changed"/>
                {field_error("event_type")}
            </label>
            <label>"Money"
                <select name="money">{options(filter.money.clone(), &[("", "any"), ("money", "money"), ("non_money", "non-money")])}</select>
                {field_error("money")}
            </label>
            <label>"Ladder"
                <select name="ladder">{options(filter.ladder.clone(), &[("", "any"), ("fast", "fast"), ("slow", "slow")])}</select>
                {field_error("ladder")}
            </label>
            <label>"Created from (UTC)"
                <input type="datetime-local" name="from" value=filter.from.clone().unwrap_or_default()/>
                {field_error("from")}
            </label>
            <label>"to (UTC)"
                <input type="datetime-local" name="to" value=filter.to.clone().unwrap_or_default()/>
                {field_error("to")}
            </label>
            <button type="submit" class="primary">"Filter"</button>
            <a href="/deliveries">"Clear"</a>
            {field_error("after").or_else(|| field_error("before"))}
        </form>
    }
}

#[component]
fn DeliveryTable(list: DeliveryList, filter: DeliveryQuery) -> impl IntoView {
    let prev = list.prev.clone().map(|c| filter.href(Some(("before", &c))));
    let next = list.next.clone().map(|c| filter.href(Some(("after", &c))));
    let empty = list.rows.is_empty();
    view! {
        <div class="table-scroll" tabindex="0">
        <table data-testid="deliveries">
            <thead><tr>
                <th>"Delivery"</th><th>"Merchant"</th><th>"Event type"</th><th>"Status"</th>
                <th>"Ladder"</th><th>"Attempts"</th><th>"Last code"</th><th>"Created"</th><th>"Next attempt"</th>
            </tr></thead>
            <tbody>
                {list.rows.into_iter().map(|d| {
                    let href = format!("/deliveries/{}", d.id);
                    let waiting = d.status == "PENDING";
                    view! {
                        <tr data-testid="delivery-row" data-id=d.id.clone()>
                            <td><a href=href class="mono">{d.id.clone()}</a></td>
                            <td>{if d.merchant.is_empty() { d.merchant_id.clone() } else { d.merchant.clone() }}</td>
                            <td>{d.event_type.clone()} {d.is_money.then(|| view! { " " <span class="pill muted">"money"</span> })}</td>
                            <td><span class=state_class(&d.status)>{d.status.clone()}</span></td>
                            <td>{d.ladder.clone()}</td>
                            <td>{format!("{} fast · {} slow", d.fast_attempts, d.slow_steps)}</td>
                            <td>{d.last_status_code.map(|c| c.to_string()).unwrap_or_else(|| "—".into())}</td>
                            <td>{format::date_time_seconds(d.created_at)}</td>
                            <td>{if waiting { format::date_time_seconds(d.next_attempt_at) } else { "—".into() }}</td>
                        </tr>
                    }
                }).collect_view()}
            </tbody>
        </table>
        </div>
        {empty.then(|| view! { <p class="muted" data-testid="no-deliveries">"No deliveries match this filter."</p> })}
        <nav class="pager" aria-label="Pages">
            {match prev {
                Some(h) => view! { <a href=h rel="prev" data-testid="prev-page">"← Newer"</a> }.into_any(),
                None => view! { <span class="muted">"← Newer"</span> }.into_any(),
            }}
            {match next {
                Some(h) => view! { <a href=h rel="next" data-testid="next-page">"Older →"</a> }.into_any(),
                None => view! { <span class="muted">"Older →"</span> }.into_any(),
            }}
        </nav>
    }
}

/// "Retry all matching…": count, confirm, then batches with a progress bar.
#[component]
fn BulkRetry(filter: Memo<DeliveryQuery>, on_done: impl Fn() + Clone + Send + Sync + 'static) -> impl IntoView {
    let state = RwSignal::new(Bulk::Idle);
    let count = move |_: leptos::ev::MouseEvent| {
        state.set(Bulk::Counting);
        let f = filter.get_untracked();
        leptos::task::spawn_local(async move {
            state.set(match bulk_retry_count(f).await {
                Ok(c) => Bulk::Confirm(c),
                Err(e) => Bulk::Failed(error_text(&e)),
            });
        });
    };
    let run = move |total: u64| {
        let f = filter.get_untracked();
        let on_done = on_done.clone();
        state.set(Bulk::Running { total, examined: 0, changed: 0 });
        leptos::task::spawn_local(async move {
            let (mut after, mut examined, mut changed) = (None, 0, 0);
            loop {
                match bulk_retry(f.clone(), after.clone()).await {
                    Ok(b) => {
                        examined += b.examined;
                        changed += b.redelivered + b.retried;
                        state.set(Bulk::Running { total: total.max(examined), examined, changed });
                        if b.next.is_none() {
                            state.set(Bulk::Done { changed });
                            break;
                        }
                        after = b.next;
                    }
                    Err(e) => {
                        state.set(Bulk::Failed(error_text(&e)));
                        break;
                    }
                }
            }
            on_done();
        });
    };
    let run = StoredValue::new(run);
    view! {
        <ForRole role=Role::Support>
            <section class="card bulk" data-testid="bulk-retry">
                <h2>"Bulk retry"</h2>
                {move || match state.get() {
                    Bulk::Idle | Bulk::Done { .. } | Bulk::Failed(_) => view! {
                        <p>"Redeliver every FAILED and retry every PENDING delivery matching the filter above."</p>
                        <button type="button" on:click=count data-testid="bulk-start">"Retry all matching…"</button>
                        {match state.get() {
                            Bulk::Done { changed } => Some(view! { <p class="notice" role="status" data-testid="bulk-done">{format!("Done: {changed} deliveries retried.")}</p> }.into_any()),
                            Bulk::Failed(e) => Some(view! { <p class="notice bad" role="alert">{e}</p> }.into_any()),
                            _ => None,
                        }}
                    }.into_any(),
                    Bulk::Counting => view! { <p class="muted">"Counting…"</p> }.into_any(),
                    Bulk::Confirm(c) => {
                        let total = c.failed + c.pending;
                        view! {
                            <p data-testid="bulk-count">{format!("{total} deliveries match: {} FAILED will be redelivered, {} PENDING made due now.", c.failed, c.pending)}</p>
                            <button type="button" class="danger" disabled={total == 0} data-testid="bulk-confirm"
                                on:click=move |_| run.with_value(|run| run(total))>{format!("Retry {total} deliveries")}</button>
                            " "
                            <button type="button" on:click=move |_| state.set(Bulk::Idle)>"Cancel"</button>
                        }.into_any()
                    }
                    Bulk::Running { total, examined, changed } => view! {
                        <p>{format!("Retrying… {examined} of {total} looked at, {changed} retried.")}</p>
                        <progress max=total.max(1).to_string() value=examined.to_string() data-testid="bulk-progress"></progress>
                    }.into_any(),
                }}
            </section>
        </ForRole>
    }
}
