//! Audit log: every mutation made through the UI or the API — who, when,
//! what, the record before and after (as a field-by-field diff) and the
//! reason — newest first, filtered by actor, action or target, paged by
//! keyset. Support staff and admins read it (docs/decisions.md: viewers do
//! not see who administers the deployment).

use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::components::A;
use leptos_router::hooks::use_query_map;
use serde::{Deserialize, Serialize};

use crate::auth::error_text;
use crate::format;
use crate::model::RetentionDays;

/// Rows per page.
pub const PAGE_SIZE: u32 = 50;

/// One changed field.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangeRow {
    pub field: String,
    pub before: Option<String>,
    pub after: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditRow {
    pub id: String,
    pub at_ms: i64,
    pub actor: String,
    pub action: String,
    pub target: String,
    pub reason: Option<String>,
    pub changes: Vec<ChangeRow>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditView {
    pub rows: Vec<AuditRow>,
    /// Cursor of the next (older) page.
    pub next: Option<String>,
    /// How long entries are kept.
    pub retention: RetentionDays,
}

#[cfg(feature = "ssr")]
pub(crate) fn change_row(c: sluice_engine::audit::FieldChange) -> ChangeRow {
    ChangeRow { field: c.field, before: c.before, after: c.after }
}

/// A page of the audit log, newest first. `before` is the cursor a previous
/// page returned; empty filters match everything.
#[server(prefix = "/ui", endpoint = "audit/list")]
pub async fn list_audit(
    #[server(default)] actor: String,
    #[server(default)] action: String,
    #[server(default)] target: String,
    #[server(default)] before: String,
) -> Result<AuditView, ServerFnError> {
    use sluice_engine::audit::{self, AuditCursor, AuditFilter};
    crate::ssr::auth::require(crate::auth::Role::Support).await?;
    let ctx = crate::ssr::context()?;
    let cursor = if before.is_empty() {
        None
    } else {
        Some(AuditCursor::parse(&before).ok_or_else(|| ServerFnError::new("that page link is not valid; start from the newest entries"))?)
    };
    let given = |s: String| Some(s.trim().to_owned()).filter(|s| !s.is_empty());
    let filter = AuditFilter { actor: given(actor), action: given(action), target: given(target) };
    let page = audit::list(&ctx.db, &filter, cursor.as_ref(), PAGE_SIZE)
        .await
        .map_err(|e| crate::ssr::internal("reading the audit log", e))?;
    Ok(AuditView {
        rows: page
            .records
            .into_iter()
            .map(|r| AuditRow {
                changes: audit::diff(r.before.as_ref(), r.after.as_ref()).into_iter().map(change_row).collect(),
                id: r.id,
                at_ms: r.at_ms,
                actor: r.actor,
                action: r.action,
                target: r.target,
                reason: r.reason,
            })
            .collect(),
        next: page.next.map(|c| c.token()),
        retention: (&ctx.retention).into(),
    })
}

/// A field-by-field diff: `tokens 3 → 2`.
#[component]
pub fn ChangeList(changes: Vec<ChangeRow>) -> impl IntoView {
    if changes.is_empty() {
        return view! { <span class="muted">"no field changed"</span> }.into_any();
    }
    view! {
        <ul class="changes">
            {changes.into_iter().map(|c| view! {
                <li data-field=c.field.clone()>
                    <span class="field">{c.field.clone()}</span>" "
                    {match (c.before, c.after) {
                        (None, Some(a)) => view! { <ins>{a}</ins> }.into_any(),
                        (Some(b), None) => view! { <del>{b}</del> }.into_any(),
                        (Some(b), Some(a)) => view! { <del>{b}</del>" → "<ins>{a}</ins> }.into_any(),
                        (None, None) => ().into_any(),
                    }}
                </li>
            }).collect_view()}
        </ul>
    }
    .into_any()
}

/// How long the log keeps its entries.
#[component]
fn RetentionNote(days: u64) -> impl IntoView {
    view! { <p class="muted" data-testid="retention">{format!("Entries are kept {days} days, then deleted.")}</p> }
}

#[component]
pub fn AuditPage() -> impl IntoView {
    let query = use_query_map();
    let get = move |name: &'static str| query.with(|q| q.get(name)).unwrap_or_default();
    let page = crate::codec::resource(
        move || (get("actor"), get("action"), get("target"), get("before")),
        |(actor, action, target, before)| list_audit(actor, action, target, before),
    );
    let older = move |cursor: String| {
        let mut q = vec![("before", cursor)];
        for name in ["actor", "action", "target"] {
            let v = get(name);
            if !v.is_empty() {
                q.push((name, v));
            }
        }
        let qs: Vec<String> = q.into_iter().map(|(k, v)| format!("{k}={}", format::percent_encode(&v))).collect();
        format!("/audit?{}", qs.join("&"))
    };
    view! {
        <Title text="Audit log"/>
        <header class="page-header"><h1>"Audit log"</h1></header>
        <form method="get" action="/audit" class="form inline toolbar" data-testid="audit-filter">
            <label>"Actor"<input type="text" name="actor" value=get("actor") placeholder="username or token"/></label>
            <label>"Action"<input type="text" name="action" value=get("action") placeholder="limit or limit.update"/></label>
            <label>"Target"<input type="text" name="target" value=get("target") placeholder="id"/></label>
            <button type="submit">"Filter"</button>
            <A href="/audit">"Clear"</A>
        </form>
        <Transition fallback=|| view! { <p class="muted">"Loading…"</p> }>
            {move || page.get().map(|p| match p {
                Err(e) => view! { <p class="error">{error_text(&e)}</p> }.into_any(),
                Ok(view) if view.rows.is_empty() => view! { <p class="muted">"No entries."</p> <RetentionNote days=view.retention.audit/> }.into_any(),
                Ok(view) => view! {
                    <RetentionNote days=view.retention.audit/>
                    <div class="table-scroll" tabindex="0">
                    <table data-testid="audit" class="audit">
                        <thead><tr><th>"When"</th><th>"Who"</th><th>"Action"</th><th>"Target"</th><th>"Before → after"</th><th>"Reason"</th></tr></thead>
                        <tbody>
                            {view.rows.into_iter().map(|r| view! {
                                <tr data-testid="audit-row">
                                    <td class="nowrap">{format::date_time(r.at_ms)}</td>
                                    <td>{r.actor}</td>
                                    <td><span class="pill muted">{r.action}</span></td>
                                    <td class="mono">{r.target}</td>
                                    <td><ChangeList changes=r.changes/></td>
                                    <td>{r.reason.unwrap_or_default()}</td>
                                </tr>
                            }).collect_view()}
                        </tbody>
                    </table>
                    </div>
                    {view.next.map(|c| view! { <p class="pager"><A href=older(c) attr:data-testid="older">"Older entries →"</A></p> })}
                }.into_any(),
            })}
        </Transition>
    }
}
