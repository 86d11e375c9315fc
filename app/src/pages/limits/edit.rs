//! Creating and editing a rule, and a rule's history.

use leptos::prelude::*;
use leptos_router::components::A;

use super::*;
use crate::auth::error_text;
use crate::format;
use crate::pages::audit::ChangeList;
use crate::model::{error_for, FieldError};

fn errors_of(value: Option<Result<Saved, ServerFnError>>) -> Vec<FieldError> {
    match value {
        Some(Ok(Saved::Invalid(errors))) => errors,
        _ => Vec::new(),
    }
}

fn opt_ms(ms: Option<u64>) -> String {
    ms.map(format::duration_input).unwrap_or_default()
}

#[component]
pub(super) fn NewRule(action: ServerAction<CreateRule>) -> impl IntoView {
    let result = Signal::derive(move || action.value().get());
    let errors = Signal::derive(move || errors_of(result.get()));
    view! {
        <section class="card rule-form" data-testid="rule-form">
            <h2>"New rule"</h2>
            <ActionForm action=action attr:class="form grid" attr:novalidate=true>
                <RuleFields initial=None errors=errors/>
                <div class="form-actions">
                    <button type="submit" class="primary" disabled=move || action.pending().get()>"Create rule"</button>
                    <A href="/limits">"Close"</A>
                </div>
            </ActionForm>
            <FormNotice result=result/>
        </section>
    }
}

#[component]
pub(super) fn EditRule(id: String, action: ServerAction<UpdateRule>) -> impl IntoView {
    // Keyed on the id only: a failed submit must not reset what was typed.
    let rule_id = id.clone();
    let rule = crate::codec::resource(move || rule_id.clone(), get_rule);
    let result = Signal::derive(move || action.value().get());
    let errors = Signal::derive(move || errors_of(result.get()));
    view! {
        <section class="card rule-form" data-testid="rule-form">
            <h2>"Edit rule " <span class="mono">{id.clone()}</span></h2>
            <Suspense fallback=|| view! { <p class="muted">"Loading…"</p> }>
                {move || rule.get().map(|r| match r {
                    Err(e) => view! { <p class="error">{error_text(&e)}</p> }.into_any(),
                    Ok(None) => view! { <p class="error">"There is no such rule (deleted?)."</p> }.into_any(),
                    Ok(Some(row)) => view! {
                        <ActionForm action=action attr:class="form grid" attr:novalidate=true>
                            <input type="hidden" name="id" value=row.id.clone()/>
                            <RuleFields initial=Some(row) errors=errors/>
                            <div class="form-actions">
                                <button type="submit" class="primary" disabled=move || action.pending().get()>"Save changes"</button>
                                <A href="/limits">"Close"</A>
                            </div>
                        </ActionForm>
                    }.into_any(),
                })}
            </Suspense>
            <FormNotice result=result/>
        </section>
    }
}

/// What the last submit of a rule form did: saved, or failed as a whole
/// (field errors are shown next to their fields instead).
#[component]
fn FormNotice(result: Signal<Option<Result<Saved, ServerFnError>>>) -> impl IntoView {
    move || match result.get() {
        Some(Err(e)) => Some(view! { <p class="notice bad" role="alert">{error_text(&e)}</p> }.into_any()),
        Some(Ok(Saved::Ok(row))) => Some(
            view! { <p class="notice" role="status" data-testid="saved">{format!("Saved rule {}; it applies now.", row.id)}</p> }
                .into_any(),
        ),
        _ => None,
    }
}

/// The inputs of a rule, prefilled from `initial`, each with its error.
#[component]
fn RuleFields(initial: Option<RuleRow>, errors: Signal<Vec<FieldError>>) -> impl IntoView {
    let r = initial.clone();
    let init = move |f: fn(&RuleRow) -> String| r.as_ref().map(f).unwrap_or_default();
    let algorithm = initial.as_ref().map(|r| r.algorithm.clone()).unwrap_or_else(|| "token_bucket".into());
    let method = initial.as_ref().and_then(|r| r.method.clone()).unwrap_or_default();
    let shadow = initial.as_ref().is_some_and(|r| r.shadow);
    let enabled = initial.as_ref().is_none_or(|r| r.enabled);
    let text = move |name: &'static str, label: &'static str, hint: &'static str, value: String| {
        let message = move || errors.get().into_iter().find(|e| e.field == name).map(|e| e.message);
        let invalid = move || message().is_some().to_string();
        view! {
            <label>
                {label}
                <input type="text" name=name value=value aria-invalid=invalid data-testid=format!("field-{name}") placeholder=hint/>
                {move || message().map(|m| view! { <span class="field-error" data-testid=format!("error-{name}")>{m}</span> })}
            </label>
        }
    };
    let error_view = move |name: &'static str| {
        move || {
            error_for(&errors.get(), name).map(|message| {
                view! { <span class="field-error" data-testid=format!("error-{name}")>{message}</span> }
            })
        }
    };
    view! {
        {text("scope", "Scope", "e.g. vtex_pricing, or * for the global default", init(|r| r.scope.clone()))}
        <label>
            "Method"
            <select name="method" data-testid="field-method">
                {["", "GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"].into_iter().map(|m| view! {
                    <option value=m selected=m == method>{if m.is_empty() { "any" } else { m }}</option>
                }).collect_view()}
            </select>
            {error_view("method")}
        </label>
        {text("path", "Path or template", "empty: the scope's default; /prices/{sku}, /feeds/*", init(|r| r.path.clone().unwrap_or_default()))}
        <label>
            "Algorithm"
            <select name="algorithm" data-testid="field-algorithm">
                {[("token_bucket", "token bucket"), ("fixed_window", "fixed window"), ("sliding_log", "sliding log")].into_iter().map(|(v, l)| view! {
                    <option value=v selected=v == algorithm>{l}</option>
                }).collect_view()}
            </select>
            {error_view("algorithm")}
        </label>
        {text("tokens", "Tokens", "per interval, at least 1", init(|r| r.tokens.to_string()))}
        {text("interval", "Interval", "e.g. 1s, 10s, 1m", init(|r| format::duration_input(r.interval_ms)))}
        {text("burst", "Burst", "token bucket capacity; empty: = tokens", init(|r| if r.burst == r.tokens { String::new() } else { r.burst.to_string() }))}
        {text("concurrency", "Concurrency", "max in flight; empty: none", init(|r| r.concurrency.map(|c| c.to_string()).unwrap_or_default()))}
        {text("max_wait", "Max wait", "empty: 30s (the ceiling is at least interval + 5s)", init(|r| opt_ms(r.max_wait_ms)))}
        {text("min_penalty", "Min back-off after a 429", "empty: one token's refill time", init(|r| opt_ms(r.min_penalty_ms)))}
        <label class="check"><input type="checkbox" name="shadow" checked=shadow data-testid="field-shadow"/>"Shadow: decide and record, never block"</label>
        <label class="check"><input type="checkbox" name="enabled" checked=enabled data-testid="field-enabled"/>"Enabled"</label>
        <label class="wide">
            "Note"
            <textarea name="note" rows="2" data-testid="field-note">{init(|r| r.note.clone())}</textarea>
            {error_view("note")}
        </label>
    }
}

#[component]
pub(super) fn RuleHistory(id: String) -> impl IntoView {
    let rule_id = id.clone();
    let history = crate::codec::resource(move || rule_id.clone(), rule_history);
    view! {
        <section class="card" data-testid="rule-history">
            <h2>"History of " <span class="mono">{id}</span></h2>
            <Suspense fallback=|| view! { <p class="muted">"Loading…"</p> }>
                {move || history.get().map(|h| match h {
                    Err(e) => view! { <p class="error">{error_text(&e)}</p> }.into_any(),
                    Ok(rows) if rows.is_empty() => view! { <p class="muted">"No recorded changes."</p> }.into_any(),
                    Ok(rows) => view! {
                        <div class="table-scroll" tabindex="0">
                        <table>
                            <thead><tr><th>"When"</th><th>"Who"</th><th>"Change"</th><th>"Fields"</th></tr></thead>
                            <tbody>
                                {rows.into_iter().map(|h| view! {
                                    <tr>
                                        <td>{format::date_time(h.at_ms)}</td>
                                        <td>{h.actor}</td>
                                        <td>{h.action}</td>
                                        <td><ChangeList changes=h.changes/></td>
                                    </tr>
                                }).collect_view()}
                            </tbody>
                        </table>
                        </div>
                    }.into_any(),
                })}
            </Suspense>
            <A href="/limits">"Close"</A>
        </section>
    }
}
