//! Limits: the rules the shared-quota limiter enforces. Everyone signed in
//! reads them and asks "which rule applies to this request?"; admins create,
//! edit, delete and shadow them. Writes go through the engine's
//! [`RuleAdmin`](sluice_engine::quota::admin::RuleAdmin), like the HTTP API's,
//! so both validate and audit alike and apply at once on this instance
//! (others follow within a second through their reloader).

//!
//! [`list`] is the page (the rules table, shadow switch, delete, and the
//! "which rule applies?" tester), [`edit`] the create / edit forms and a
//! rule's history; this module holds the wire types and server functions,
//! and [`server`] the ssr-only parsing and engine calls.

mod edit;
mod list;
pub mod profiles;
#[cfg(feature = "ssr")]
pub(crate) mod server;

pub use list::LimitsPage;

use leptos::prelude::*;
use serde::{Deserialize, Serialize};

#[cfg(feature = "ssr")]
use crate::auth::Role;
use crate::model::FieldError;
use crate::pages::audit::ChangeRow;

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

