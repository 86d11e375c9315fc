//! The Limits page's retry profiles: which retry policy each scope's calls
//! use (its own profile, `*`'s, or the default), and, for admins, a form to
//! set one from a preset with any field changed, and a button to remove one.
//! Writes go through the engine's `ProfileAdmin`, like the HTTP API's, so
//! both validate and audit alike and apply at once on this instance.

use leptos::prelude::*;
use serde::{Deserialize, Serialize};

use crate::auth::{error_text, use_role, ForRole, Role};
use crate::format;
use crate::model::{error_for, FieldError};

/// One scope's retry profile as the page shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProfileRow {
    pub scope: String,
    /// `default`, `wb`, `vtex` or `custom`.
    pub name: String,
    /// `scope` (stored for it), `global` (from `*`) or `default`.
    pub source: String,
    pub max_attempts: u32,
    pub base_delay_ms: u64,
    pub max_delay_ms: Option<u64>,
    pub jitter: String,
    pub retry_on: Vec<String>,
    pub retry_after: String,
    pub total_budget_ms: u64,
    pub updated: Option<(String, i64)>,
}

/// The profiles section's data: one row per scope with a rule or a profile,
/// and the preset names with their notes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProfilesView {
    pub rows: Vec<ProfileRow>,
    pub presets: Vec<(String, String)>,
}

/// The form as typed: every value a string, empty = keep the preset's.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProfileForm {
    pub scope: String,
    #[serde(default)]
    pub preset: String,
    #[serde(default)]
    pub max_attempts: String,
    #[serde(default)]
    pub base_delay_ms: String,
    /// `none` for no cap.
    #[serde(default)]
    pub max_delay_ms: String,
    #[serde(default)]
    pub jitter: String,
    /// Comma-separated: `429, 503`, `5xx`, `network`.
    #[serde(default)]
    pub retry_on: String,
    #[serde(default)]
    pub retry_after: String,
    #[serde(default)]
    pub total_budget_ms: String,
}

/// The answer to the form.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ProfileSaved {
    Ok(ProfileRow),
    /// Nothing was written; one message per invalid field.
    Invalid(Vec<FieldError>),
}

#[cfg(feature = "ssr")]
fn row(scope: &str, name: &str, source: &str, policy: sluice_engine::retry::RetryPolicy, updated: Option<(String, i64)>) -> ProfileRow {
    let c = sluice_engine::retry::RetryPolicyConfig::from(policy);
    ProfileRow {
        scope: scope.to_owned(),
        name: name.to_owned(),
        source: source.to_owned(),
        max_attempts: c.max_attempts,
        base_delay_ms: c.base_delay_ms,
        max_delay_ms: c.max_delay_ms,
        jitter: c.jitter.as_str().to_owned(),
        retry_on: c.retry_on,
        retry_after: c.retry_after.as_str().to_owned(),
        total_budget_ms: c.total_budget_ms,
        updated,
    }
}

#[cfg(feature = "ssr")]
fn stored_row(p: &sluice_engine::retry::RetryProfile) -> ProfileRow {
    row(&p.scope, &p.name, "scope", p.policy, Some((p.updated_by.clone(), p.updated_at.as_millis())))
}

/// Every scope that has a rule or a profile, with the profile its calls use.
#[server(prefix = "/ui", endpoint = "limits/retry-profiles")]
pub async fn list_profiles() -> Result<ProfilesView, ServerFnError> {
    use sluice_engine::retry::profiles::{self, ProfileSource};
    crate::ssr::auth::require(Role::Viewer).await?;
    let ctx = crate::ssr::context()?;
    let set = ctx.retry_profiles.snapshot();
    let rules = ctx.rules.list().await.map_err(|e| crate::ssr::internal("listing limit rules", e))?;
    let mut scopes: Vec<String> = rules.into_iter().map(|r| r.scope).chain(set.profiles().iter().map(|p| p.scope.clone())).collect();
    scopes.sort();
    scopes.dedup();
    let rows = scopes
        .iter()
        .map(|scope| match set.get(scope) {
            Some(p) => stored_row(p),
            None => {
                let r = ctx.retry_profiles.resolve(scope);
                let source = if r.source == ProfileSource::Global { "global" } else { "default" };
                row(scope, &r.name, source, r.policy, None)
            }
        })
        .collect();
    let presets = profiles::PRESETS.iter().map(|p| ((*p).to_owned(), profiles::preset_note(p).to_owned())).collect();
    Ok(ProfilesView { rows, presets })
}

/// Set a scope's profile (admin) from a preset and the fields typed.
#[server(prefix = "/ui", endpoint = "limits/retry-profiles/set")]
pub async fn set_profile(#[server(flatten)] form: ProfileForm) -> Result<ProfileSaved, ServerFnError> {
    use sluice_engine::retry::profiles_repo::{validate_scope, ProfileAdmin, ProfileAdminError, ProfileDraft};
    let me = crate::ssr::auth::require(Role::Admin).await?;
    let ctx = crate::ssr::context()?;
    let mut errors = Vec::new();
    let text = |s: &str| Some(s.trim().to_owned()).filter(|s| !s.is_empty());
    let mut number = |field: &'static str, s: &str| -> Option<u64> {
        let s = text(s)?;
        match s.parse::<u64>() {
            Ok(n) => Some(n),
            Err(_) => {
                errors.push(FieldError::new(field, format!("'{s}' is not a whole number")));
                None
            }
        }
    };
    let max_attempts = number("max_attempts", &form.max_attempts).map(|n| u32::try_from(n).unwrap_or(u32::MAX));
    let base_delay_ms = number("base_delay_ms", &form.base_delay_ms);
    let max_delay_ms = match text(&form.max_delay_ms) {
        Some(s) if s.eq_ignore_ascii_case("none") => Some(None),
        Some(s) => number("max_delay_ms", &s).map(Some),
        None => None,
    };
    let total_budget_ms = number("total_budget_ms", &form.total_budget_ms);
    let retry_on = text(&form.retry_on).map(|s| s.split(',').map(|e| e.trim().to_owned()).filter(|e| !e.is_empty()).collect());
    let draft = ProfileDraft {
        preset: text(&form.preset),
        max_attempts,
        base_delay_ms,
        max_delay_ms,
        jitter: text(&form.jitter),
        retry_on,
        retry_after: text(&form.retry_after),
        wait_ceiling_ms: None,
        total_budget_ms,
    };
    if !errors.is_empty() {
        // Nothing is written; the engine's checks still run, so one submit
        // shows every problem.
        if let Err(e) = validate_scope(form.scope.trim()) {
            errors.push(FieldError::new("scope", e.to_string()));
        }
        for e in draft.into_policy().err().unwrap_or_default() {
            if !errors.iter().any(|f| f.field == e.field) {
                errors.push(FieldError::new(e.field, e.message));
            }
        }
        return Ok(ProfileSaved::Invalid(errors));
    }
    let admin = ProfileAdmin::new(ctx.profiles_repo.clone(), ctx.retry_profiles.clone());
    match admin.put(&form.scope, draft, &me.username, ctx.clock.now()).await {
        Ok(p) => Ok(ProfileSaved::Ok(stored_row(&p))),
        Err(ProfileAdminError::Invalid(errors)) => {
            Ok(ProfileSaved::Invalid(errors.into_iter().map(|e| FieldError::new(e.field, e.message)).collect()))
        }
        Err(e) => Err(crate::ssr::internal("saving the retry profile", e)),
    }
}

/// Remove a scope's profile (admin): it falls back to `*`'s or the default.
#[server(prefix = "/ui", endpoint = "limits/retry-profiles/delete")]
pub async fn delete_profile(scope: String) -> Result<String, ServerFnError> {
    use sluice_engine::retry::profiles_repo::{ProfileAdmin, ProfileAdminError};
    let me = crate::ssr::auth::require(Role::Admin).await?;
    let ctx = crate::ssr::context()?;
    let admin = ProfileAdmin::new(ctx.profiles_repo.clone(), ctx.retry_profiles.clone());
    match admin.delete(&scope, &me.username, ctx.clock.now()).await {
        Ok(p) => Ok(p.scope),
        Err(e @ ProfileAdminError::NotFound(_)) => Err(ServerFnError::new(e.to_string())),
        Err(e) => Err(crate::ssr::internal("removing the retry profile", e)),
    }
}

fn summary(r: &ProfileRow) -> String {
    let cap = r.max_delay_ms.map(format::duration_input).unwrap_or_else(|| "no cap".into());
    format!(
        "{} attempts · base {} · {} · jitter {} · Retry-After {} · budget {}",
        r.max_attempts,
        format::duration_input(r.base_delay_ms),
        cap,
        r.jitter,
        r.retry_after,
        format::duration_input(r.total_budget_ms)
    )
}

#[component]
pub fn RetryProfilesSection() -> impl IntoView {
    let set = ServerAction::<SetProfile>::new();
    let remove = ServerAction::<DeleteProfile>::new();
    let profiles = crate::codec::resource(
        move || (matches!(set.value().get(), Some(Ok(ProfileSaved::Ok(_)))), set.version().get(), remove.version().get()),
        |_| list_profiles(),
    );
    let role = use_role();
    let is_admin = move || role.get() == Some(Role::Admin);
    let errors = move || match set.value().get() {
        Some(Ok(ProfileSaved::Invalid(e))) => e,
        _ => Vec::new(),
    };
    let field_error = move |field: &'static str| {
        move || error_for(&errors(), field).map(|m| view! { <span class="field-error" data-field=field>{m}</span> })
    };
    view! {
        <section data-testid="retry-profiles">
            <h2>"Retry profiles"</h2>
            <p class="muted">"How each scope's calls are retried: the scope's own profile, else the one of scope *, else the default. Edits apply to the next call on every instance within a second."</p>
            {move || remove.value().get().and_then(|r| r.err()).map(|e| view! { <p class="notice bad" role="alert">{error_text(&e)}</p> })}
            {move || match set.value().get() {
                Some(Err(e)) => Some(view! { <p class="notice bad" role="alert">{error_text(&e)}</p> }.into_any()),
                Some(Ok(ProfileSaved::Ok(r))) => Some(view! { <p class="notice" role="status">{format!("{} now uses {}.", r.scope, r.name)}</p> }.into_any()),
                _ => None,
            }}
            <Transition fallback=|| view! { <p class="muted">"Loading…"</p> }>
                {move || profiles.get().map(|r| match r {
                    Err(e) => view! { <p class="error">{error_text(&e)}</p> }.into_any(),
                    Ok(view) => {
                        let admin = is_admin();
                        view! {
                            <div class="table-scroll" tabindex="0">
                            <table data-testid="profiles">
                                <thead><tr><th>"Scope"</th><th>"Profile"</th><th>"Retries on"</th><th>"Policy"</th><th>"Updated"</th><th></th></tr></thead>
                                <tbody>
                                    {view.rows.into_iter().map(|r| {
                                        let from = match r.source.as_str() {
                                            "scope" => String::new(),
                                            "global" => " (from *)".to_owned(),
                                            _ => " (nothing stored)".to_owned(),
                                        };
                                        let stored = r.source == "scope";
                                        let scope = r.scope.clone();
                                        view! {
                                            <tr data-testid="profile-row" data-scope=r.scope.clone()>
                                                <td>{r.scope.clone()}</td>
                                                <td><strong data-testid="profile-name">{r.name.clone()}</strong><span class="muted">{from}</span></td>
                                                <td class="mono">{r.retry_on.join(", ")}</td>
                                                <td class="small">{summary(&r)}</td>
                                                <td class="muted small">{r.updated.clone().map(|(by, at)| format!("{by} · {}", format::date_time(at))).unwrap_or_default()}</td>
                                                <td class="actions">
                                                    {(admin && stored).then(|| view! {
                                                        <ActionForm action=remove attr:class="form inline">
                                                            <input type="hidden" name="scope" value=scope/>
                                                            <button type="submit" class="danger" data-testid="remove-profile">"Remove"</button>
                                                        </ActionForm>
                                                    })}
                                                </td>
                                            </tr>
                                        }
                                    }).collect_view()}
                                </tbody>
                            </table>
                            </div>
                            <ul class="muted small">
                                {view.presets.into_iter().map(|(name, note)| view! { <li><strong>{name}</strong>": "{note}</li> }).collect_view()}
                            </ul>
                        }.into_any()
                    }
                })}
            </Transition>
            <ForRole role=Role::Admin>
                <details class="card">
                    <summary>"Set a scope's retry profile"</summary>
                    <ActionForm action=set attr:class="form" attr:data-testid="set-profile">
                        <label>"Scope (* for every scope without its own)"<input type="text" name="scope" required placeholder="vtex_pricing"/></label>
                        {field_error("scope")}
                        <label>"Start from preset"
                            <select name="preset">
                                <option value="default">"default"</option>
                                <option value="wb">"wb"</option>
                                <option value="vtex">"vtex"</option>
                            </select>
                        </label>
                        {field_error("preset")}
                        <p class="muted small">"Leave a field empty to keep the preset's value."</p>
                        <label>"Attempts (first included)"<input type="text" inputmode="numeric" name="max_attempts"/></label>
                        {field_error("max_attempts")}
                        <label>"Base delay (ms)"<input type="text" inputmode="numeric" name="base_delay_ms"/></label>
                        {field_error("base_delay_ms")}
                        <label>"Cap per pause (ms, or none)"<input type="text" name="max_delay_ms"/></label>
                        {field_error("max_delay_ms")}
                        <label>"Jitter"
                            <select name="jitter">
                                <option value="">"(preset's)"</option>
                                <option value="additive">"additive: base·2^(n−1) + U[0, base)"</option>
                                <option value="none">"none"</option>
                                <option value="full">"full: U[0, c)"</option>
                                <option value="equal">"equal: c·U(0.5, 1)"</option>
                                <option value="decorrelated">"decorrelated"</option>
                            </select>
                        </label>
                        {field_error("jitter")}
                        <label>"Retry on (comma-separated: 429, 503, 5xx, network)"<input type="text" name="retry_on"/></label>
                        {field_error("retry_on")}
                        <label>"Retry-After on a 429"
                            <select name="retry_after">
                                <option value="">"(preset's)"</option>
                                <option value="honour">"honour: wait at least as long"</option>
                                <option value="cap">"cap: at most the cap of it"</option>
                                <option value="ignore">"ignore"</option>
                            </select>
                        </label>
                        {field_error("retry_after")}
                        <label>"Total budget (ms)"<input type="text" inputmode="numeric" name="total_budget_ms"/></label>
                        {field_error("total_budget_ms")}
                        <button type="submit" class="primary">"Set profile"</button>
                    </ActionForm>
                </details>
            </ForRole>
        </section>
    }
}
