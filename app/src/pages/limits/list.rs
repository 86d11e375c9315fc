//! The Limits page: the rules, their switches, and the "which rule applies?" tester.

use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::components::A;
use leptos_router::hooks::{use_navigate, use_query_map};

use super::edit::{EditRule, NewRule, RuleHistory};
use super::*;
use crate::auth::{error_text, use_role, ForRole, Role};
use crate::format;

#[component]
pub fn LimitsPage() -> impl IntoView {
    let create = ServerAction::<CreateRule>::new();
    let update = ServerAction::<UpdateRule>::new();
    let delete = ServerAction::<DeleteRule>::new();
    let shadow = ServerAction::<SetShadow>::new();
    // The list reloads after writes that succeeded; an invalid submit changes
    // nothing, and re-rendering then would only cost the admin their input.
    // One effect per action: an effect only follows the signals it read, and
    // a single `a || b` effect stops reading `b` once `a` is true (a create
    // followed by an edit then never reloaded the list).
    let writes = RwSignal::new(0u32);
    let succeeded = [
        Signal::derive(move || matches!(create.value().get(), Some(Ok(Saved::Ok(_))))),
        Signal::derive(move || matches!(update.value().get(), Some(Ok(Saved::Ok(_))))),
        Signal::derive(move || matches!(delete.value().get(), Some(Ok(_)))),
        Signal::derive(move || matches!(shadow.value().get(), Some(Ok(_)))),
    ];
    for ok in succeeded {
        Effect::new(move |_| {
            if ok.get() {
                writes.update(|w| *w += 1);
            }
        });
    }
    let rules = crate::codec::resource(move || writes.get(), |_| list_rules());
    let query = use_query_map();
    let param = move |name: &'static str| query.with(|q| q.get(name)).filter(|v| !v.is_empty());
    let role = use_role();
    let is_admin = move || role.get() == Some(Role::Admin);

    // After a confirmed delete, leave the confirmation.
    let navigate = use_navigate();
    Effect::new(move |_| {
        if let Some(Ok(_)) = delete.value().get() {
            navigate("/limits", Default::default());
        }
    });
    let write_error = move || {
        [delete.value().get().and_then(|r| r.err()), shadow.value().get().and_then(|r| r.err())]
            .into_iter()
            .flatten()
            .next()
            .map(|e| error_text(&e))
    };

    view! {
        <Title text="Limits"/>
        <header class="page-header">
            <h1>"Limits"</h1>
            <ForRole role=Role::Admin>
                <A href="/limits?new=1" attr:class="button primary" attr:data-testid="new-rule">"New rule"</A>
            </ForRole>
        </header>
        {move || write_error().map(|e| view! { <p class="notice bad" role="alert">{e}</p> })}
        <ResolveTester/>
        <section>
            <h2>"Rules"</h2>
            <Transition fallback=|| view! { <p class="muted">"Loading…"</p> }>
                {move || rules.get().map(|r| match r {
                    Err(e) => view! { <p class="error">{error_text(&e)}</p> }.into_any(),
                    Ok(rows) => {
                        let confirm = param("delete").and_then(|id| rows.iter().find(|r| r.id == id).cloned());
                        view! {
                            {confirm.map(|rule| view! { <DeleteConfirm rule=rule action=delete/> })}
                            <RulesTable rows=rows admin=is_admin() shadow=shadow/>
                        }.into_any()
                    }
                })}
            </Transition>
        </section>
        <Transition fallback=|| ()>
            {move || {
                if !is_admin() {
                    return None;
                }
                match param("edit") {
                    Some(id) => Some(view! { <EditRule id=id action=update/> }.into_any()),
                    None if param("new").is_some() => Some(view! { <NewRule action=create/> }.into_any()),
                    None => None,
                }
            }}
        </Transition>
        {move || param("history").map(|id| view! { <RuleHistory id=id/> })}
        <super::profiles::RetryProfilesSection/>
    }
}

#[component]
fn RulesTable(rows: Vec<RuleRow>, admin: bool, shadow: ServerAction<SetShadow>) -> impl IntoView {
    if rows.is_empty() {
        return view! { <p class="muted">"No rules: every request is refused with reason no_rule."</p> }.into_any();
    }
    view! {
        <div class="table-scroll" tabindex="0">
        <table data-testid="rules" class="rules">
            <thead><tr>
                <th>"Scope"</th><th>"Method"</th><th>"Path"</th><th>"Kind"</th><th>"Algorithm"</th>
                <th>"Tokens / interval"</th><th>"Burst"</th><th>"Concurrency"</th><th>"Max wait"</th>
                <th>"Wait ceiling"</th><th>"Shadow"</th><th>"Enabled"</th><th>"Note"</th><th>"Updated"</th><th></th>
            </tr></thead>
            <tbody>
                {rows.into_iter().map(|r| {
                    let id = r.id.clone();
                    let history = format!("/limits?history={}", r.id);
                    let edit = format!("/limits?edit={}", r.id);
                    let remove = format!("/limits?delete={}", r.id);
                    let next_shadow = (!r.shadow).to_string();
                    view! {
                        <tr data-rule=r.id.clone() data-testid="rule-row">
                            <td>{r.scope.clone()}</td>
                            <td>{r.method.clone().unwrap_or_else(|| "any".into())}</td>
                            <td class="mono">{r.path.clone().unwrap_or_else(|| "—".into())}</td>
                            <td>{r.kind()}</td>
                            <td>{r.algorithm.replace('_', " ")}</td>
                            <td data-testid="rate">{format!("{} / {}", r.tokens, format::duration_input(r.interval_ms))}</td>
                            <td>{r.burst}</td>
                            <td>{r.concurrency.map(|c| c.to_string()).unwrap_or_else(|| "—".into())}</td>
                            <td>{r.max_wait_ms.map(format::duration_input).unwrap_or_else(|| "default".into())}</td>
                            <td data-testid="ceiling">{format::duration_input(r.wait_ceiling_ms)}</td>
                            <td>{if r.shadow {
                                view! { <span class="pill warn">"shadow"</span> }.into_any()
                            } else {
                                view! { <span class="pill muted">"enforcing"</span> }.into_any()
                            }}</td>
                            <td>{if r.enabled {
                                view! { <span class="pill ok">"on"</span> }.into_any()
                            } else {
                                view! { <span class="pill muted">"off"</span> }.into_any()
                            }}</td>
                            <td class="note">{r.note.clone()}</td>
                            <td class="muted small">{format!("{} · {}", r.updated_by, format::date_time(r.updated_at))}</td>
                            <td class="actions">
                                <A href=history>"History"</A>
                                {admin.then(|| view! {
                                    <A href=edit attr:data-testid="edit">"Edit"</A>
                                    <ActionForm action=shadow attr:class="form inline">
                                        <input type="hidden" name="id" value=id/>
                                        <input type="hidden" name="shadow" value=next_shadow/>
                                        <button type="submit" data-testid="toggle-shadow">{if r.shadow { "Enforce" } else { "Shadow" }}</button>
                                    </ActionForm>
                                    <A href=remove attr:class="danger-link" attr:data-testid="delete">"Delete"</A>
                                })}
                            </td>
                        </tr>
                    }
                }).collect_view()}
            </tbody>
        </table>
        </div>
    }
    .into_any()
}

#[component]
fn DeleteConfirm(rule: RuleRow, action: ServerAction<DeleteRule>) -> impl IntoView {
    let what = format!(
        "Delete the {} rule for {} {} {}?",
        rule.kind(),
        rule.scope,
        rule.method.clone().unwrap_or_else(|| "any method".into()),
        rule.path.clone().unwrap_or_default()
    );
    view! {
        <div class="notice warn confirm" role="alertdialog" data-testid="delete-confirm">
            <p>{what}</p>
            <p>"Requests it covers fall back to the next rule by precedence, or are refused when none is left. This applies at once."</p>
            <ActionForm action=action attr:class="form inline">
                <input type="hidden" name="id" value=rule.id.clone()/>
                <button type="submit" class="danger">"Delete rule"</button>
                <A href="/limits">"Cancel"</A>
            </ActionForm>
        </div>
    }
}

/// "Which rule applies to this request?"
#[component]
fn ResolveTester() -> impl IntoView {
    let action = ServerAction::<ResolveRule>::new();
    let result = move || action.value().get();
    view! {
        <section class="card tester" data-testid="tester">
            <h2>"Which rule applies to this request?"</h2>
            <ActionForm action=action attr:class="form inline">
                <label>"Scope"<input type="text" name="scope" required placeholder="vtex_pricing" data-testid="test-scope"/></label>
                <label>"Method"<input type="text" name="method" placeholder="PUT" size="8" data-testid="test-method"/></label>
                <label>"Path"<input type="text" name="path" required placeholder="/api/pricing/prices/123" data-testid="test-path"/></label>
                <button type="submit">"Find the rule"</button>
            </ActionForm>
            <div data-testid="test-result">
                {move || result().map(|r| match r {
                    Err(e) => view! { <p class="notice bad">{error_text(&e)}</p> }.into_any(),
                    Ok(Resolved::NoRule) => view! {
                        <p class="notice bad">"Refused: no rule. No rule, scope default or global default matches; the limiter refuses such requests with reason no_rule."</p>
                    }.into_any(),
                    Ok(Resolved::Invalid(errors)) => view! {
                        <p class="notice bad">{errors.into_iter().map(|e| format!("{}: {}", e.field, e.message)).collect::<Vec<_>>().join("; ")}</p>
                    }.into_any(),
                    Ok(Resolved::Rule(r)) => {
                        let history = format!("/limits?history={}", r.id);
                        view! {
                            <p class="notice">
                                {format!(
                                    "{} ({}): {} {} · {} / {}, burst {} · wait ceiling {}{}",
                                    r.id, r.kind(), r.scope,
                                    [r.method.clone().unwrap_or_else(|| "any method".into()), r.path.clone().unwrap_or_default()].join(" "),
                                    r.tokens, format::duration_input(r.interval_ms), r.burst, format::duration_input(r.wait_ceiling_ms),
                                    if r.shadow { " · shadow" } else { "" }
                                )}
                                " " <A href=history>"history"</A>
                            </p>
                        }.into_any()
                    }
                })}
            </div>
        </section>
    }
}
