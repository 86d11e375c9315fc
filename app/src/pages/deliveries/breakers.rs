//! Breakers: every merchant's delivery breaker and the upstream breakers
//! (per account and API scope). Support staff and admins reset one by hand,
//! after a confirmation and with a reason that goes to the audit log.

use leptos::prelude::*;
use leptos_meta::Title;
use serde::{Deserialize, Serialize};

use super::state_class;
use crate::format;
use crate::auth::{error_text, use_role, Role};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MerchantBreakerView {
    pub merchant_id: String,
    pub merchant: String,
    pub state: String,
    /// Attempts and failures in the sliding window (5 min).
    pub window_attempts: u32,
    pub window_failures: u32,
    pub pause_ms: i64,
    pub failed_probes: u32,
    pub opened_at: Option<i64>,
    pub next_probe_at: Option<i64>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UpstreamBreakerView {
    pub account: String,
    pub scope: String,
    pub state: String,
    pub consecutive_failures: u32,
    pub opened_at: Option<i64>,
    pub next_probe_at: Option<i64>,
    pub probe_successes: u32,
    /// Good probes in a row that close it (the deployment's setting).
    pub probes_to_close: u32,
    pub trips: u64,
}

/// One recent reset from the audit log.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResetView {
    pub at: i64,
    pub actor: String,
    pub action: String,
    pub target: String,
    pub reason: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BreakersView {
    pub merchants: Vec<MerchantBreakerView>,
    /// `Err` when the upstream breaker store cannot be read (Redis down).
    pub upstream: Result<Vec<UpstreamBreakerView>, String>,
    pub recent_resets: Vec<ResetView>,
}

#[server(prefix = "/ui", endpoint = "breakers/list")]
pub async fn list_breakers() -> Result<BreakersView, ServerFnError> {
    use resets::recent_resets;
    crate::ssr::auth::require(Role::Viewer).await?;
    let ctx = crate::ssr::context()?;
    let now = ctx.clock.now();
    let all = ctx.deliveries.list_merchants(now, &ctx.delivery_breaker).await.map_err(|e| crate::ssr::internal("listing merchant breakers", e))?;
    let ms = |t: sluice_engine::clock::Timestamp| t.as_millis();
    let merchants = all
        .into_iter()
        .map(|o| MerchantBreakerView {
            merchant_id: o.merchant.id.as_str().to_owned(),
            merchant: o.merchant.name.clone(),
            state: o.breaker.status.as_str().to_owned(),
            window_attempts: o.window.attempts,
            window_failures: o.window.failures,
            pause_ms: i64::try_from(o.breaker.pause.as_millis()).unwrap_or(i64::MAX),
            failed_probes: o.breaker.failed_probes,
            opened_at: o.breaker.opened_at.map(ms),
            next_probe_at: o.breaker.next_probe_at.map(ms),
        })
        .collect();
    let upstream = match ctx.upstream_breakers.list().await {
        Ok(list) => Ok(list
            .into_iter()
            .map(|b| UpstreamBreakerView {
                account: b.account,
                scope: b.scope,
                state: b.phase.as_str().to_owned(),
                consecutive_failures: b.consecutive_failures,
                opened_at: b.opened_at.map(ms),
                next_probe_at: b.next_probe_at.map(ms),
                probe_successes: b.probe_successes,
                probes_to_close: ctx.upstream_breakers.config().probes_to_close,
                trips: b.trips,
            })
            .collect()),
        Err(e) => {
            tracing::warn!(error = %e, "reading upstream breakers");
            Err("unavailable: the breaker store (Redis) cannot be reached".to_owned())
        }
    };
    let recent_resets = recent_resets(&ctx).await?;
    Ok(BreakersView { merchants, upstream, recent_resets })
}

/// The last resets, newest first, from the audit log.
#[cfg(feature = "ssr")]
mod resets {
    use leptos::prelude::ServerFnError;
    use sluice_engine::audit;

    use sluice_engine::audit::AuditAction;

    use super::ResetView;
    use crate::ssr::{internal, AppContext};

    pub async fn recent_resets(ctx: &AppContext) -> Result<Vec<ResetView>, ServerFnError> {
        let rows = audit::recent(&ctx.db, &[AuditAction::MerchantBreakerReset, AuditAction::UpstreamBreakerReset], 10).await.map_err(|e| internal("reading the audit log", e))?;
        Ok(rows
            .into_iter()
            .map(|r| ResetView { at: r.at_ms, actor: r.actor, action: r.action, target: r.target, reason: r.reason.unwrap_or_default() })
            .collect())
    }
}

#[cfg(feature = "ssr")]
fn reason_or_refuse(reason: &str) -> Result<&str, ServerFnError> {
    let reason = reason.trim();
    if reason.is_empty() || reason.len() > 500 {
        super::server::set_status(http::StatusCode::UNPROCESSABLE_ENTITY);
        return Err(ServerFnError::new("reason: say why the breaker is reset (1–500 characters)"));
    }
    Ok(reason)
}

/// Close a merchant's delivery breaker by hand (support+); its deferred
/// deliveries become due at once.
#[server(prefix = "/ui", endpoint = "breakers/reset_merchant")]
pub async fn reset_merchant_breaker(merchant_id: String, reason: String) -> Result<(), ServerFnError> {
    use sluice_engine::delivery::model::MerchantId;
    use sluice_engine::delivery::ops::{self, OpsError};
    use sluice_engine::delivery::StoreError;
    let me = crate::ssr::auth::require(Role::Support).await?;
    let ctx = crate::ssr::context()?;
    let reason = reason_or_refuse(&reason)?;
    let not_found = || {
        super::server::set_status(http::StatusCode::NOT_FOUND);
        ServerFnError::new("no merchant with this id")
    };
    let id = MerchantId::parse(&merchant_id).map_err(|_| not_found())?;
    match ops::reset_breaker(&ctx.deliveries, &id, &ctx.delivery_breaker, ops::Actor::with_reason(&me.username, reason), ctx.clock.now()).await {
        Ok(_) => Ok(()),
        Err(OpsError::Store(StoreError::UnknownMerchant(_))) => Err(not_found()),
        Err(e) => Err(crate::ssr::internal("resetting the breaker", e)),
    }
}

/// Close an upstream breaker by hand (support+), through the same audited
/// engine service as `POST /api/v1/upstream-breakers/reset`.
#[server(prefix = "/ui", endpoint = "breakers/reset_upstream")]
pub async fn reset_upstream_breaker(account: String, scope: String, reason: String) -> Result<(), ServerFnError> {
    use sluice_engine::upstream_breaker::admin::UpstreamBreakerAdminError;
    use sluice_engine::upstream_breaker::BreakerKey;
    let me = crate::ssr::auth::require(Role::Support).await?;
    let ctx = crate::ssr::context()?;
    let invalid = |message: String| {
        super::server::set_status(http::StatusCode::UNPROCESSABLE_ENTITY);
        ServerFnError::new(message)
    };
    let key = BreakerKey::new(Some(&account), &scope).map_err(|e| invalid(e.to_string()))?;
    match ctx.upstream_breaker_admin.reset(&key, &me.username, &reason, ctx.clock.now()).await {
        Ok(_) => Ok(()),
        Err(e @ UpstreamBreakerAdminError::Reason) => Err(invalid(e.to_string())),
        Err(e) => Err(crate::ssr::internal("resetting the upstream breaker", e)),
    }
}

/// "Reset…" opens a confirmation asking for the reason (a `<details>`, so
/// it works without JS too); `children` is the form with its hidden fields.
#[component]
fn ConfirmReset(children: Children) -> impl IntoView {
    view! {
        <details class="reset">
            <summary data-testid="reset-open">"Reset…"</summary>
            {children()}
        </details>
    }
}

/// The fields of a reset form after its hidden ones.
fn reason_fields(label: String) -> impl IntoView {
    view! {
        <p>{format!("Close {label} now? Held-back calls and deliveries go out again.")}</p>
        <label>"Reason (goes to the audit log)"
            <input type="text" name="reason" required maxlength="500" data-testid="reset-reason"/>
        </label>
        <button type="submit" class="danger" data-testid="reset-confirm">"Confirm reset"</button>
    }
}

#[component]
pub fn BreakersPage() -> impl IntoView {
    let reset_merchant = ServerAction::<ResetMerchantBreaker>::new();
    let reset_upstream = ServerAction::<ResetUpstreamBreaker>::new();
    let role = use_role();
    let can_reset = move || role.get().is_some_and(|r| r.allows(Role::Support));
    let data = crate::codec::resource(move || (reset_merchant.version().get(), reset_upstream.version().get()), |_| list_breakers());
    let notice = move || {
        [reset_merchant.value().get(), reset_upstream.value().get()].into_iter().flatten().next().map(|r| match r {
            Ok(()) => view! { <p class="notice" role="status" data-testid="reset-done">"Breaker reset; recorded in the audit log."</p> }.into_any(),
            Err(e) => view! { <p class="notice bad" role="alert">{error_text(&e)}</p> }.into_any(),
        })
    };
    view! {
        <Title text="Breakers"/>
        <header class="page-header"><h1>"Breakers"</h1></header>
        {notice}
        <Transition fallback=|| view! { <p class="muted">"Loading…"</p> }>
            {move || data.get().map(|r| match r {
                Err(e) => view! { <p class="error">{error_text(&e)}</p> }.into_any(),
                Ok(v) => view! {
                    <section>
                        <h2>"Merchant delivery breakers"</h2>
                        <div class="table-scroll" tabindex="0">
                        <table data-testid="merchant-breakers">
                            <thead><tr><th>"Merchant"</th><th>"State"</th><th>"Failures (5 min)"</th><th>"Pause"</th><th>"Failed probes"</th><th>"Opened"</th><th>"Next probe"</th><th></th></tr></thead>
                            <tbody>
                                {v.merchants.into_iter().map(|b| {
                                    let closed = b.state == "closed";
                                    let id = b.merchant_id.clone();
                                    let label = format!("the breaker of {}", b.merchant);
                                    view! {
                                        <tr data-testid="merchant-breaker" data-merchant=b.merchant_id.clone()>
                                            <td>{b.merchant.clone()}</td>
                                            <td><span class=state_class(&b.state) data-testid="breaker-state">{b.state.clone()}</span></td>
                                            <td>{format!("{} of {} attempts", b.window_failures, b.window_attempts)}</td>
                                            <td>{if closed { "—".into() } else { format::duration(b.pause_ms) }}</td>
                                            <td>{b.failed_probes}</td>
                                            <td>{b.opened_at.map(format::date_time_seconds).unwrap_or_else(|| "—".into())}</td>
                                            <td>{b.next_probe_at.map(format::date_time_seconds).unwrap_or_else(|| "—".into())}</td>
                                            <td>{(!closed && can_reset()).then(|| view! {
                                                <ConfirmReset>
                                                    <ActionForm action=reset_merchant attr:class="form">
                                                        <input type="hidden" name="merchant_id" value=id.clone()/>
                                                        {reason_fields(label.clone())}
                                                    </ActionForm>
                                                </ConfirmReset>
                                            })}</td>
                                        </tr>
                                    }
                                }).collect_view()}
                            </tbody>
                        </table>
                        </div>
                    </section>
                    <section>
                        <h2>"Upstream breakers (account × API scope)"</h2>
                        {match v.upstream {
                            Err(why) => view! { <p class="notice warn" data-testid="upstream-unavailable">{why}</p> }.into_any(),
                            Ok(list) if list.is_empty() => view! { <p class="muted">"No upstream breaker has recorded anything yet."</p> }.into_any(),
                            Ok(list) => view! {
                                <div class="table-scroll" tabindex="0">
                                <table data-testid="upstream-breakers">
                                    <thead><tr><th>"Account"</th><th>"Scope"</th><th>"State"</th><th>"Failures in a row"</th><th>"Next probe"</th><th>"Good probes"</th><th>"Opened"</th><th>"Trips"</th><th></th></tr></thead>
                                    <tbody>
                                        {list.into_iter().map(|b| {
                                            let closed = b.state == "closed";
                                            let (account, scope) = (b.account.clone(), b.scope.clone());
                                            let label = format!("the upstream breaker {}/{}", b.account, b.scope);
                                            view! {
                                                <tr data-testid="upstream-breaker">
                                                    <td>{b.account.clone()}</td>
                                                    <td>{b.scope.clone()}</td>
                                                    <td><span class=state_class(&b.state) data-testid="upstream-state">{b.state.clone()}</span></td>
                                                    <td data-testid="upstream-failures">{b.consecutive_failures}</td>
                                                    <td data-testid="upstream-next-probe">{if b.state == "open" {
                                                        b.next_probe_at.map(format::date_time_seconds).unwrap_or_else(|| "—".into())
                                                    } else { "—".into() }}</td>
                                                    <td>{if b.state == "half_open" { format!("{} of {}", b.probe_successes, b.probes_to_close) } else { "—".into() }}</td>
                                                    <td>{b.opened_at.map(format::date_time_seconds).unwrap_or_else(|| "—".into())}</td>
                                                    <td>{b.trips}</td>
                                                    <td>{(!closed && can_reset()).then(|| view! {
                                                        <ConfirmReset>
                                                            <ActionForm action=reset_upstream attr:class="form">
                                                                <input type="hidden" name="account" value=account.clone()/>
                                                                <input type="hidden" name="scope" value=scope.clone()/>
                                                                {reason_fields(label.clone())}
                                                            </ActionForm>
                                                        </ConfirmReset>
                                                    })}</td>
                                                </tr>
                                            }
                                        }).collect_view()}
                                    </tbody>
                                </table>
                                </div>
                            }.into_any(),
                        }}
                    </section>
                    <section>
                        <h2>"Recent resets"</h2>
                        <div class="table-scroll" tabindex="0">
                        <table data-testid="recent-resets">
                            <thead><tr><th>"When"</th><th>"Who"</th><th>"What"</th><th>"Reason"</th></tr></thead>
                            <tbody>
                                {v.recent_resets.into_iter().map(|r| view! {
                                    <tr data-testid="reset-row">
                                        <td>{format::date_time_seconds(r.at)}</td>
                                        <td>{r.actor}</td>
                                        <td>{format!("{} {}", r.action, r.target)}</td>
                                        <td>{r.reason}</td>
                                    </tr>
                                }).collect_view()}
                            </tbody>
                        </table>
                        </div>
                    </section>
                }.into_any(),
            })}
        </Transition>
    }
}
