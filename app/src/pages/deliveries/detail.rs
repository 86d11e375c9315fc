//! One delivery: its ladder timeline (attempts made with code, latency and
//! error; attempts still to come with their earliest times; the 48 h and
//! 30-day ceilings; breaker deferrals), a summary of the event payload, and
//! Redeliver / Retry now for support staff.

use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_params_map;
use serde::{Deserialize, Serialize};

use super::state_class;
use crate::components::CopyId;
use crate::format;
use crate::auth::{error_text, use_role, Role};

/// Payload text shown on the page at most (the whole event is in the database).
#[cfg(feature = "ssr")]
pub const PAYLOAD_PREVIEW_BYTES: usize = 4096;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttemptView {
    pub id: String,
    pub at: i64,
    pub ladder: String,
    pub outcome: String,
    pub status_code: Option<u16>,
    pub latency_ms: i64,
    pub error: Option<String>,
    pub probe: bool,
    /// What the merchant answered: the start of the body as text, secrets redacted.
    pub response_body: Option<String>,
    pub response_truncated: bool,
    /// Headers as sent (signatures included, never the secret); `None`: not recorded.
    pub request_headers: Option<Vec<(String, String)>>,
    /// The answer's headers, credentials redacted.
    pub response_headers: Option<Vec<(String, String)>>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedView {
    pub at: i64,
    pub ladder: String,
    pub number: u32,
    pub of: u32,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeliveryView {
    pub id: String,
    pub event_id: String,
    pub merchant_id: String,
    pub merchant: String,
    pub event_type: String,
    pub is_money: bool,
    pub status: String,
    pub ladder: String,
    pub failed_reason: Option<String>,
    pub created_at: i64,
    pub cycle_started_at: i64,
    pub next_attempt_at: i64,
    pub finished_at: Option<i64>,
    pub attempts: Vec<AttemptView>,
    pub upcoming: Vec<PlannedView>,
    pub fast_used: u32,
    pub fast_budget: u32,
    pub slow_used: u32,
    pub slow_budget: u32,
    pub slow_ceiling_at: Option<i64>,
    pub age_ceiling_at: i64,
    pub deferrals: u32,
    pub last_deferred_at: Option<i64>,
    pub breaker: String,
    pub breaker_next_probe_at: Option<i64>,
    /// Pretty-printed payload, cut at [`PAYLOAD_PREVIEW_BYTES`].
    pub payload: String,
    pub payload_truncated: bool,
    /// When retention deletes this delivery (finished ones only).
    pub deleted_after: Option<i64>,
}

#[server(prefix = "/ui", endpoint = "deliveries/detail")]
pub async fn delivery_detail(id: String) -> Result<Option<DeliveryView>, ServerFnError> {
    use sluice_engine::delivery::model::DeliveryId;
    use sluice_engine::delivery::StoreError;
    crate::ssr::auth::require(Role::Viewer).await?;
    let ctx = crate::ssr::context()?;
    let Ok(id) = DeliveryId::parse(&id) else { return Ok(None) };
    let d = match ctx.deliveries.delivery_detail(&id, &ctx.delivery_ladder).await {
        Ok(d) => d,
        Err(StoreError::UnknownDelivery(_)) => return Ok(None),
        Err(e) => return Err(crate::ssr::internal("reading the delivery", e)),
    };
    let merchant = ctx.deliveries.merchant(&d.delivery.merchant_id).await.map(|m| m.name).unwrap_or_default();
    let (payload, payload_truncated) = payload_preview(&d.payload);
    let t = d.timeline;
    let keep = match d.delivery.status {
        sluice_engine::delivery::DeliveryStatus::Delivered => Some(ctx.retention.delivered),
        sluice_engine::delivery::DeliveryStatus::Failed => Some(ctx.retention.failed),
        _ => None,
    };
    let deleted_after = d.delivery.finished_at.zip(keep).map(|(at, keep)| (at + keep).as_millis());
    let ms = |t: sluice_engine::clock::Timestamp| t.as_millis();
    let del = d.delivery;
    Ok(Some(DeliveryView {
        id: del.id.as_str().to_owned(),
        event_id: del.event_id.as_str().to_owned(),
        merchant_id: del.merchant_id.as_str().to_owned(),
        merchant,
        event_type: del.event_type,
        is_money: del.is_money,
        status: del.status.as_str().to_owned(),
        ladder: del.ladder.as_str().to_owned(),
        failed_reason: del.failed_reason.map(|r| r.as_str().to_owned()),
        created_at: ms(del.created_at),
        cycle_started_at: ms(del.cycle_started_at),
        next_attempt_at: ms(del.next_attempt_at),
        finished_at: del.finished_at.map(ms),
        attempts: d
            .attempts
            .into_iter()
            .map(|a| AttemptView {
                id: a.id.as_str().to_owned(),
                at: ms(a.at),
                ladder: a.ladder.as_str().to_owned(),
                outcome: a.outcome.as_str().to_owned(),
                status_code: a.status_code,
                latency_ms: a.latency_ms,
                error: a.error,
                probe: a.probe,
                response_body: a.response_body,
                response_truncated: a.response_truncated,
                request_headers: a.request_headers.map(|h| h.into_iter().collect()),
                response_headers: a.response_headers.map(|h| h.into_iter().collect()),
            })
            .collect(),
        upcoming: t
            .upcoming
            .into_iter()
            .map(|p| PlannedView { at: ms(p.at), ladder: p.ladder.as_str().to_owned(), number: p.number, of: p.of })
            .collect(),
        fast_used: t.fast_attempts_used,
        fast_budget: t.fast_attempts_budget,
        slow_used: t.slow_steps_used,
        slow_budget: t.slow_steps_budget,
        slow_ceiling_at: t.slow_ceiling_at.map(ms),
        age_ceiling_at: ms(t.age_ceiling_at),
        deferrals: t.breaker_deferrals,
        last_deferred_at: t.last_deferred_at.map(ms),
        breaker: t.breaker_status.as_str().to_owned(),
        breaker_next_probe_at: t.breaker_next_probe_at.map(ms),
        payload,
        payload_truncated,
        deleted_after,
    }))
}

/// The payload pretty-printed, cut on a character boundary.
#[cfg(feature = "ssr")]
fn payload_preview(raw: &str) -> (String, bool) {
    let pretty = serde_json::from_str::<serde_json::Value>(raw)
        .ok()
        .and_then(|v| serde_json::to_string_pretty(&v).ok())
        .unwrap_or_else(|| raw.to_owned());
    if pretty.len() <= PAYLOAD_PREVIEW_BYTES {
        return (pretty, false);
    }
    let mut end = PAYLOAD_PREVIEW_BYTES;
    while !pretty.is_char_boundary(end) {
        end -= 1;
    }
    (pretty[..end].to_owned(), true)
}

/// Send a FAILED delivery again from the start of both ladders (same row,
/// same `X-Webhook-Id`). Support and admin.
#[server(prefix = "/ui", endpoint = "deliveries/redeliver")]
pub async fn redeliver(id: String) -> Result<(), ServerFnError> {
    let me = crate::ssr::auth::require(Role::Support).await?;
    let ctx = crate::ssr::context()?;
    delivery_op(&ctx, &me.username, &id, sluice_engine::delivery::ops::DeliveryOp::Redeliver).await
}

/// Make a PENDING delivery due now. Support and admin.
#[server(prefix = "/ui", endpoint = "deliveries/retry_now")]
pub async fn retry_now(id: String) -> Result<(), ServerFnError> {
    let me = crate::ssr::auth::require(Role::Support).await?;
    let ctx = crate::ssr::context()?;
    delivery_op(&ctx, &me.username, &id, sluice_engine::delivery::ops::DeliveryOp::RetryNow).await
}

#[cfg(feature = "ssr")]
async fn delivery_op(ctx: &crate::ssr::AppContext, actor: &str, id: &str, op: sluice_engine::delivery::ops::DeliveryOp) -> Result<(), ServerFnError> {
    use super::server::set_status;
    use sluice_engine::delivery::model::DeliveryId;
    use sluice_engine::delivery::ops::{self, OpsError};
    use sluice_engine::delivery::StoreError;
    let not_found = || {
        set_status(http::StatusCode::NOT_FOUND);
        ServerFnError::new(format!("no delivery with id '{}'", id.chars().take(80).collect::<String>()))
    };
    let id = DeliveryId::parse(id).map_err(|_| not_found())?;
    let now = ctx.clock.now();
    match ops::one_delivery(&ctx.deliveries, &id, op, ops::Actor::named(actor), now).await {
        Ok(_) => Ok(()),
        Err(OpsError::WrongStatus { status, needed, .. }) => {
            set_status(http::StatusCode::CONFLICT);
            Err(ServerFnError::new(format!("this delivery is {status}; only a {needed} one can be {}", op.done())))
        }
        Err(OpsError::Store(StoreError::UnknownDelivery(_))) => Err(not_found()),
        Err(e) => Err(crate::ssr::internal("changing the delivery", e)),
    }
}

#[component]
pub fn DeliveryPage() -> impl IntoView {
    let params = use_params_map();
    let id = move || params.with(|p| p.get("id").unwrap_or_default());
    let redeliver = ServerAction::<Redeliver>::new();
    let retry = ServerAction::<RetryNow>::new();
    let detail = crate::codec::resource(
        move || (id(), redeliver.version().get(), retry.version().get()),
        |(id, _, _)| delivery_detail(id),
    );
    let op_error = move || {
        [redeliver.value().get(), retry.value().get()].into_iter().flatten().find_map(|r| r.err()).map(|e| error_text(&e))
    };
    view! {
        <Title text="Delivery"/>
        <header class="page-header">
            <h1>"Delivery"</h1>
            <a href="/deliveries">"← All deliveries"</a>
        </header>
        {move || op_error().map(|e| view! { <p class="notice bad" role="alert" data-testid="op-error">{e}</p> })}
        <Transition fallback=|| view! { <p class="muted">"Loading…"</p> }>
            {move || detail.get().map(|r| match r {
                Err(e) => view! { <p class="error">{error_text(&e)}</p> }.into_any(),
                Ok(None) => view! { <p class="error" data-testid="not-found">"There is no delivery with this id."</p> }.into_any(),
                Ok(Some(d)) => view! { <DeliveryDetail d=d redeliver=redeliver retry=retry/> }.into_any(),
            })}
        </Transition>
    }
}

#[component]
fn DeliveryDetail(d: DeliveryView, redeliver: ServerAction<Redeliver>, retry: ServerAction<RetryNow>) -> impl IntoView {
    let role = use_role();
    let can_act = move || role.get().is_some_and(|r| r.allows(Role::Support));
    let failed = d.status == "FAILED";
    let pending = d.status == "PENDING";
    let id_redeliver = d.id.clone();
    let id_retry = d.id.clone();
    let merchant_href = format!("/deliveries?merchant={}", d.merchant_id);
    view! {
        <section class="cards">
            <div class="card" data-testid="delivery-summary">
                <h2>"Status"</h2>
                <p class="big"><span class=state_class(&d.status) data-testid="delivery-status">{d.status.clone()}</span></p>
                <p><CopyId id=d.id.clone() testid="delivery-id"/></p>
                {d.failed_reason.clone().map(|r| view! { <p class="error">"Failed: " {r}</p> })}
            </div>
            <div class="card">
                <h2>"Event"</h2>
                <p>{d.event_type.clone()} " " {if d.is_money { "(money)" } else { "(non-money)" }}</p>
                <p><CopyId id=d.event_id.clone() testid="event-id"/></p>
                <p>"Merchant: " <a href=merchant_href>{if d.merchant.is_empty() { d.merchant_id.clone() } else { d.merchant.clone() }}</a></p>
            </div>
            <div class="card">
                <h2>"Budgets"</h2>
                <p>{format!("fast {} of {} attempts", d.fast_used, d.fast_budget)}</p>
                <p>{format!("slow {} of {} steps", d.slow_used, d.slow_budget)}</p>
                <p class="muted">"ladder now: " {d.ladder.clone()}</p>
            </div>
            <div class="card" data-testid="ceilings">
                <h2>"Ceilings"</h2>
                <p>"48 h (slow ladder): " {d.slow_ceiling_at.map(format::date_time_seconds).unwrap_or_else(|| "not started".into())}</p>
                <p>"30 days (age): " {format::date_time_seconds(d.age_ceiling_at)}</p>
                <p class="muted">"cycle started " {format::date_time_seconds(d.cycle_started_at)}</p>
            </div>
            <div class="card" data-testid="deferrals">
                <h2>"Merchant breaker"</h2>
                <p><span class=state_class(&d.breaker)>{d.breaker.clone()}</span>
                    {d.breaker_next_probe_at.map(|t| format!(" · next probe {}", format::date_time_seconds(t)))}</p>
                <p>{format!("{} deferrals", d.deferrals)}
                    {d.last_deferred_at.map(|t| format!(", last {}", format::date_time_seconds(t)))}</p>
            </div>
        </section>
        {move || can_act().then(|| {
            let (id_redeliver, id_retry) = (id_redeliver.clone(), id_retry.clone());
            view! {
                <section class="toolbar" data-testid="delivery-actions">
                    {failed.then(|| view! {
                        <ActionForm action=redeliver>
                            <input type="hidden" name="id" value=id_redeliver/>
                            <button type="submit" class="primary" data-testid="redeliver">"Redeliver"</button>
                        </ActionForm>
                    })}
                    {pending.then(|| view! {
                        <ActionForm action=retry>
                            <input type="hidden" name="id" value=id_retry/>
                            <button type="submit" class="primary" data-testid="retry-now">"Retry now"</button>
                        </ActionForm>
                    })}
                </section>
            }
        })}
        <section>
            <h2>"Ladder timeline"</h2>
            <div class="table-scroll" tabindex="0">
            <table data-testid="timeline">
                <thead><tr><th>"When"</th><th>"What"</th><th>"Ladder"</th><th>"HTTP"</th><th>"Latency"</th><th>"Error"</th></tr></thead>
                <tbody>
                    <tr class="muted"><td>{format::date_time_seconds(d.created_at)}</td><td>"created"</td><td></td><td></td><td></td><td></td></tr>
                    {d.attempts.iter().enumerate().map(|(i, a)| view! {
                        <tr data-testid="attempt">
                            <td>{format::date_time_seconds(a.at)}</td>
                            <td><a href=format!("#attempt-{}", i + 1)>{format!("attempt {}", i + 1)}</a>{if a.probe { " (breaker probe)" } else { "" }} " "
                                <span class={if a.outcome == "success" { "pill ok" } else { "pill bad" }}>{a.outcome.clone()}</span></td>
                            <td>{a.ladder.clone()}</td>
                            <td data-testid="attempt-code">{a.status_code.map(|c| c.to_string()).unwrap_or_else(|| "—".into())}</td>
                            <td>{format!("{} ms", a.latency_ms)}</td>
                            <td class="wrap">{a.error.clone().unwrap_or_default()}</td>
                        </tr>
                    }).collect_view()}
                    {d.upcoming.iter().map(|p| view! {
                        <tr class="planned" data-testid="planned">
                            <td>{format!("≥ {}", format::date_time_seconds(p.at))}</td>
                            <td>{format!("{} attempt {} of {} (if the previous fails)", p.ladder, p.number, p.of)}</td>
                            <td>{p.ladder.clone()}</td><td></td><td></td><td></td>
                        </tr>
                    }).collect_view()}
                    {d.finished_at.map(|t| view! {
                        <tr><td>{format::date_time_seconds(t)}</td><td>{format!("finished: {}", d.status)}</td><td></td><td></td><td></td><td></td></tr>
                    })}
                </tbody>
            </table>
            </div>
            <p class="muted">"Planned times are the earliest; an open merchant breaker defers them without spending attempts."</p>
        </section>
        {(!d.attempts.is_empty()).then(|| view! {
            <section data-testid="attempt-details">
                <h2>"What the merchant answered"</h2>
                {d.attempts.iter().enumerate().map(|(i, a)| view! { <AttemptDetail number=i + 1 a=a.clone()/> }).collect_view()}
            </section>
        })}
        <section>
            <h2>"Payload"</h2>
            <pre class="payload" data-testid="payload">{d.payload.clone()}</pre>
            {d.payload_truncated.then(|| view! { <p class="muted">"(cut; the whole event is stored)"</p> })}
            {d.deleted_after.map(|t| view! {
                <p class="muted" data-testid="retention">{format!(
                    "Retention deletes this delivery, its attempts and (unless another delivery needs it) its event after {}.",
                    format::date_time(t)
                )}</p>
            })}
        </section>
    }
}

/// One attempt: status, latency, the answer's body and headers, and the
/// headers that were sent.
#[component]
fn AttemptDetail(number: usize, a: AttemptView) -> impl IntoView {
    let headers_table = |rows: Vec<(String, String)>, testid: &'static str| view! {
        <div class="table-scroll" tabindex="0">
        <table class="headers" data-testid=testid>
            <tbody>
                {rows.into_iter().map(|(k, v)| view! { <tr><th class="mono">{k}</th><td class="mono wrap">{v}</td></tr> }).collect_view()}
            </tbody>
        </table>
        </div>
    };
    view! {
        <article class="card attempt" id=format!("attempt-{number}") data-testid="attempt-detail">
            <h3>{format!("Attempt {number}")} " "
                <span class={if a.outcome == "success" { "pill ok" } else { "pill bad" }}>{a.outcome.clone()}</span></h3>
            <p><CopyId id=a.id.clone() testid="attempt-id"/></p>
            <p>{format::date_time_seconds(a.at)} " · "
                {a.status_code.map(|c| format!("HTTP {c}")).unwrap_or_else(|| "no answer".into())} " · "
                {format!("{} ms", a.latency_ms)}
                {a.error.clone().filter(|_| a.status_code.is_none()).map(|e| view! { " · " <span class="error">{e}</span> })}</p>
            {match a.response_body.clone() {
                Some(body) => view! {
                    <pre class="payload" data-testid="attempt-response">{body}</pre>
                    {a.response_truncated.then(|| view! { <p class="muted" data-testid="attempt-response-cut">"(cut: only the first 4 KiB of the answer is kept)"</p> })}
                }.into_any(),
                None if a.status_code.is_some() => view! { <p class="muted" data-testid="attempt-response-empty">"The answer had no body."</p> }.into_any(),
                None => ().into_any(),
            }}
            {a.response_headers.clone().map(|h| view! {
                <details><summary>{format!("Response headers ({})", h.len())}</summary>{headers_table(h, "attempt-response-headers")}</details>
            })}
            {a.request_headers.clone().map(|h| view! {
                <details><summary>{format!("Headers sent ({})", h.len())}</summary>{headers_table(h, "attempt-request-headers")}</details>
            })}
        </article>
    }
}
