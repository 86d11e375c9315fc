//! Limits: the rules the shared-quota limiter enforces. Everyone signed in
//! reads them and asks "which rule applies to this request?"; admins create,
//! edit, delete and shadow them. Writes go through the engine's
//! [`RuleAdmin`](sluice_engine::quota::admin::RuleAdmin), like the HTTP API's,
//! so both validate and audit alike and apply at once on this instance
//! (others follow within a second through their reloader).

use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::components::A;
use leptos_router::hooks::{use_navigate, use_query_map};
use serde::{Deserialize, Serialize};

use crate::auth::{error_text, use_role, ForRole, Role};
use crate::pages::audit::{ChangeList, ChangeRow};
use crate::format;
use crate::model::{error_for, FieldError};

/// A rule as the page shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuleRow {
    pub id: String,
    pub scope: String,
    pub method: Option<String>,
    pub path: Option<String>,
    pub algorithm: String,
    pub tokens: u32,
    pub interval_ms: u64,
    pub burst: u32,
    pub concurrency: Option<u32>,
    pub max_wait_ms: Option<u64>,
    pub min_penalty_ms: Option<u64>,
    /// The wait ceiling a call without its own max wait gets.
    pub wait_ceiling_ms: u64,
    pub shadow: bool,
    pub enabled: bool,
    pub note: String,
    pub updated_by: String,
    pub updated_at: i64,
}

impl RuleRow {
    /// "global default", "scope default" or "override".
    pub fn kind(&self) -> &'static str {
        match (&self.scope[..], &self.method, &self.path) {
            ("*", _, _) => "global default",
            (_, _, None) => "scope default",
            _ => "override",
        }
    }
}

/// The answer to a create or edit form.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Saved {
    Ok(RuleRow),
    /// Nothing was written; one message per invalid field.
    Invalid(Vec<FieldError>),
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryRow {
    pub at_ms: i64,
    pub actor: String,
    pub action: String,
    pub changes: Vec<ChangeRow>,
}

/// The answer of the "which rule applies?" tester.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Resolved {
    Rule(RuleRow),
    /// No rule and no default: the limiter refuses such requests.
    NoRule,
    Invalid(Vec<FieldError>),
}

#[cfg(feature = "ssr")]
pub(crate) mod server {
    use std::time::Duration;

    use sluice_engine::audit;
    use sluice_engine::quota::admin::{RuleAdmin, RuleAdminError};
    use sluice_engine::quota::{Rule, RuleDraft, RuleHistoryEntry, RulesRepoError};

    use super::*;
    use crate::ssr::{internal, AppContext};

    pub fn row(rule: &Rule) -> RuleRow {
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        RuleRow {
            id: rule.id.to_string(),
            scope: rule.scope.clone(),
            method: rule.method.clone(),
            path: rule.path.clone(),
            algorithm: rule.limit.algorithm.as_str().to_owned(),
            tokens: rule.limit.tokens,
            interval_ms: ms(rule.limit.interval),
            burst: rule.limit.burst,
            concurrency: rule.concurrency,
            max_wait_ms: rule.max_wait.map(ms),
            min_penalty_ms: rule.min_penalty.map(ms),
            wait_ceiling_ms: ms(rule.wait_ceiling(None)),
            shadow: rule.shadow,
            enabled: rule.enabled,
            note: rule.note.clone(),
            updated_by: rule.updated_by.clone(),
            updated_at: rule.updated_at.as_millis(),
        }
    }

    pub fn admin(ctx: &AppContext) -> RuleAdmin {
        RuleAdmin::new(ctx.db.clone(), ctx.rules.clone(), ctx.limiter.clone())
    }

    pub fn field_error(field: &str, message: impl std::fmt::Display) -> FieldError {
        let message = message.to_string();
        // Engine messages start with their field ("tokens: must be…"); the
        // form shows them next to the field, so the prefix goes.
        let message = message.strip_prefix(&format!("{field}: ")).map(str::to_owned).unwrap_or(message);
        FieldError::new(field, message)
    }

    /// The form as typed → a draft, or the fields that are not even numbers.
    #[allow(clippy::too_many_arguments)]
    pub fn draft(form: RuleForm) -> Result<RuleDraft, Vec<FieldError>> {
        let mut errors = Vec::new();
        let blank = |s: &str| s.trim().is_empty();
        let mut count = |field: &str, text: &str, optional: bool| -> Option<u32> {
            if optional && blank(text) {
                return None;
            }
            match text.trim().parse::<u32>() {
                Ok(n) => Some(n),
                Err(_) if blank(text) => {
                    errors.push(FieldError::new(field, "required"));
                    None
                }
                Err(_) => {
                    errors.push(FieldError::new(field, format!("'{}' is not a whole number", text.trim())));
                    None
                }
            }
        };
        let tokens = count("tokens", &form.tokens, false);
        let burst = count("burst", &form.burst, true);
        let concurrency = count("concurrency", &form.concurrency, true);
        let mut duration = |field: &str, text: &str, optional: bool| -> Option<Duration> {
            if blank(text) {
                if !optional {
                    errors.push(FieldError::new(field, "required, e.g. 10s or 1m"));
                }
                return None;
            }
            match format::parse_duration_input(text) {
                Ok(ms) => Some(Duration::from_millis(ms)),
                Err(message) => {
                    errors.push(FieldError::new(field, message));
                    None
                }
            }
        };
        let interval = duration("interval", &form.interval, false);
        let max_wait = duration("max_wait", &form.max_wait, true);
        let min_penalty = duration("min_penalty", &form.min_penalty, true);
        let some = |s: String| Some(s).filter(|s| !s.trim().is_empty());
        let draft = RuleDraft {
            scope: form.scope,
            method: some(form.method),
            path: some(form.path),
            algorithm: some(form.algorithm),
            tokens: tokens.unwrap_or(1),
            interval: interval.unwrap_or(Duration::from_secs(1)),
            burst,
            concurrency,
            max_wait,
            min_penalty,
            shadow: form.shadow.is_some(),
            enabled: form.enabled.is_some(),
            note: form.note,
        };
        // The engine's checks run too, so one submit shows every problem.
        if let Err(engine) = draft.clone().into_rule(sluice_engine::quota::RuleId(String::new())) {
            for e in engine {
                if !errors.iter().any(|f| f.field == e.field()) {
                    errors.push(field_error(e.field(), &e));
                }
            }
        }
        if errors.is_empty() {
            Ok(draft)
        } else {
            Err(errors)
        }
    }

    pub fn saved(result: Result<Rule, RuleAdminError>) -> Result<Saved, ServerFnError> {
        match result {
            Ok(rule) => Ok(Saved::Ok(row(&rule))),
            Err(RuleAdminError::Invalid(errors)) => {
                Ok(Saved::Invalid(errors.iter().map(|e| field_error(e.field(), e)).collect()))
            }
            Err(e @ RuleAdminError::Conflict) => Ok(Saved::Invalid(vec![field_error("path", e)])),
            Err(e @ RuleAdminError::NotFound(_)) => Err(ServerFnError::new(e.to_string())),
            Err(e) => Err(internal("saving the limit rule", e)),
        }
    }

    pub fn history_row(entry: RuleHistoryEntry) -> HistoryRow {
        let json = |r: &Option<Rule>| r.as_ref().and_then(|r| serde_json::to_value(r).ok());
        let changes = audit::diff(json(&entry.before).as_ref(), json(&entry.after).as_ref());
        HistoryRow {
            at_ms: entry.at_ms,
            actor: entry.actor,
            action: entry.action,
            changes: changes.into_iter().map(crate::pages::audit::change_row).collect(),
        }
    }

    pub fn repo_error(what: &str, e: RulesRepoError) -> ServerFnError {
        internal(what, e)
    }
}

/// The form's fields as typed (every value a string, so nothing typed is
/// lost to a parse error before the server can say what is wrong).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuleForm {
    pub scope: String,
    #[serde(default)]
    pub method: String,
    #[serde(default)]
    pub path: String,
    #[serde(default)]
    pub algorithm: String,
    #[serde(default)]
    pub tokens: String,
    #[serde(default)]
    pub interval: String,
    #[serde(default)]
    pub burst: String,
    #[serde(default)]
    pub concurrency: String,
    #[serde(default)]
    pub max_wait: String,
    #[serde(default)]
    pub min_penalty: String,
    /// Checkboxes: present ("on") when ticked.
    pub shadow: Option<String>,
    pub enabled: Option<String>,
    #[serde(default)]
    pub note: String,
}

#[server(prefix = "/ui", endpoint = "limits/list")]
pub async fn list_rules() -> Result<Vec<RuleRow>, ServerFnError> {
    crate::ssr::auth::require(Role::Viewer).await?;
    let ctx = crate::ssr::context()?;
    let rules = ctx.rules.list().await.map_err(|e| server::repo_error("listing limit rules", e))?;
    let mut rows: Vec<RuleRow> = rules.iter().map(server::row).collect();
    // Defaults first within a scope, then overrides by path and method.
    rows.sort_by(|a, b| {
        (&a.scope, a.path.is_some(), &a.path, &a.method).cmp(&(&b.scope, b.path.is_some(), &b.path, &b.method))
    });
    Ok(rows)
}

#[server(prefix = "/ui", endpoint = "limits/get")]
pub async fn get_rule(id: String) -> Result<Option<RuleRow>, ServerFnError> {
    crate::ssr::auth::require(Role::Viewer).await?;
    let ctx = crate::ssr::context()?;
    let rule = ctx.rules.get(&sluice_engine::quota::RuleId(id)).await.map_err(|e| server::repo_error("reading the limit rule", e))?;
    Ok(rule.as_ref().map(server::row))
}

#[server(prefix = "/ui", endpoint = "limits/create")]
pub async fn create_rule(#[server(flatten)] form: RuleForm) -> Result<Saved, ServerFnError> {
    let me = crate::ssr::auth::require(Role::Admin).await?;
    let ctx = crate::ssr::context()?;
    let draft = match server::draft(form) {
        Ok(d) => d,
        Err(errors) => return Ok(Saved::Invalid(errors)),
    };
    server::saved(server::admin(&ctx).create(draft, &me.username, ctx.clock.now()).await)
}

#[server(prefix = "/ui", endpoint = "limits/update")]
pub async fn update_rule(id: String, #[server(flatten)] form: RuleForm) -> Result<Saved, ServerFnError> {
    let me = crate::ssr::auth::require(Role::Admin).await?;
    let ctx = crate::ssr::context()?;
    let draft = match server::draft(form) {
        Ok(d) => d,
        Err(errors) => return Ok(Saved::Invalid(errors)),
    };
    let id = sluice_engine::quota::RuleId(id);
    server::saved(server::admin(&ctx).update(&id, draft, &me.username, ctx.clock.now()).await)
}

/// Turn shadow mode on or off: the rule decides and records, never blocks.
#[server(prefix = "/ui", endpoint = "limits/shadow")]
pub async fn set_shadow(id: String, shadow: bool) -> Result<RuleRow, ServerFnError> {
    let me = crate::ssr::auth::require(Role::Admin).await?;
    let ctx = crate::ssr::context()?;
    let id = sluice_engine::quota::RuleId(id);
    match server::saved(server::admin(&ctx).set_shadow(&id, shadow, &me.username, ctx.clock.now()).await)? {
        Saved::Ok(row) => Ok(row),
        Saved::Invalid(errors) => Err(ServerFnError::new(errors.into_iter().map(|e| e.message).collect::<Vec<_>>().join("; "))),
    }
}

#[server(prefix = "/ui", endpoint = "limits/delete")]
pub async fn delete_rule(id: String) -> Result<String, ServerFnError> {
    use sluice_engine::quota::admin::RuleAdminError;
    let me = crate::ssr::auth::require(Role::Admin).await?;
    let ctx = crate::ssr::context()?;
    let id = sluice_engine::quota::RuleId(id);
    match server::admin(&ctx).delete(&id, &me.username, ctx.clock.now()).await {
        Ok(rule) => Ok(rule.id.to_string()),
        Err(e @ RuleAdminError::NotFound(_)) => Err(ServerFnError::new(e.to_string())),
        Err(e) => Err(crate::ssr::internal("deleting the limit rule", e)),
    }
}

/// A rule's changes, newest first.
#[server(prefix = "/ui", endpoint = "limits/history")]
pub async fn rule_history(id: String) -> Result<Vec<HistoryRow>, ServerFnError> {
    crate::ssr::auth::require(Role::Viewer).await?;
    let ctx = crate::ssr::context()?;
    let id = sluice_engine::quota::RuleId(id);
    let entries = ctx.rules.history(&id, 50).await.map_err(|e| server::repo_error("reading the rule history", e))?;
    Ok(entries.into_iter().map(server::history_row).collect())
}

/// Which rule governs a request: the limiter's own resolver, on the rule set
/// this instance enforces right now.
#[server(prefix = "/ui", endpoint = "limits/resolve")]
pub async fn resolve_rule(scope: String, method: String, path: String) -> Result<Resolved, ServerFnError> {
    crate::ssr::auth::require(Role::Viewer).await?;
    let ctx = crate::ssr::context()?;
    let mut errors = Vec::new();
    if scope.trim().is_empty() {
        errors.push(FieldError::new("scope", "required"));
    }
    if !path.trim().starts_with('/') {
        errors.push(FieldError::new("path", "must start with '/'"));
    }
    if !errors.is_empty() {
        return Ok(Resolved::Invalid(errors));
    }
    let method = method.trim().to_ascii_uppercase();
    Ok(match ctx.limiter.resolve(scope.trim(), &method, path.trim()) {
        Some(rule) => Resolved::Rule(server::row(&rule)),
        None => Resolved::NoRule,
    })
}

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
    let rules = Resource::new(move || writes.get(), |_| list_rules());
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
    }
}

#[component]
fn RulesTable(rows: Vec<RuleRow>, admin: bool, shadow: ServerAction<SetShadow>) -> impl IntoView {
    if rows.is_empty() {
        return view! { <p class="muted">"No rules: every request is refused with reason no_rule."</p> }.into_any();
    }
    view! {
        <div class="table-scroll">
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

#[component]
fn NewRule(action: ServerAction<CreateRule>) -> impl IntoView {
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
fn EditRule(id: String, action: ServerAction<UpdateRule>) -> impl IntoView {
    // Keyed on the id only: a failed submit must not reset what was typed.
    let rule_id = id.clone();
    let rule = Resource::new(move || rule_id.clone(), get_rule);
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
fn RuleHistory(id: String) -> impl IntoView {
    let rule_id = id.clone();
    let history = Resource::new(move || rule_id.clone(), rule_history);
    view! {
        <section class="card" data-testid="rule-history">
            <h2>"History of " <span class="mono">{id}</span></h2>
            <Suspense fallback=|| view! { <p class="muted">"Loading…"</p> }>
                {move || history.get().map(|h| match h {
                    Err(e) => view! { <p class="error">{error_text(&e)}</p> }.into_any(),
                    Ok(rows) if rows.is_empty() => view! { <p class="muted">"No recorded changes."</p> }.into_any(),
                    Ok(rows) => view! {
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
                    }.into_any(),
                })}
            </Suspense>
            <A href="/limits">"Close"</A>
        </section>
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
