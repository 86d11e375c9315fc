//! The Quotas pages: every (account, rule) bucket with its usage and
//! counters ([`list`], `/quotas`), and one account's buckets with charts of
//! usage and 429 penalties over time ([`account`], `/quotas/{account}`).
//!
//! This module holds what both pages share: the wire types, the server
//! functions and the bucket table. Numbers are read on the server by
//! [`server`] (ssr only), which the live stream (`GET /ui/stream/quotas`)
//! uses too, so a streamed update and a server-rendered page agree.

mod account;
mod list;
#[cfg(feature = "ssr")]
pub mod server;

pub use account::QuotaAccountPage;
pub use list::QuotasPage;

use leptos::prelude::*;
use serde::{Deserialize, Serialize};

use crate::format;

/// Rows per page: a page's numbers cost two store reads per row.
pub const PAGE_SIZE: usize = 50;

/// One (account, rule) bucket.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BucketRow {
    pub account: String,
    pub scope: String,
    pub rule: String,
    /// Tokens a request could take now; `None` when the rule is gone.
    pub remaining: Option<u64>,
    pub capacity: Option<u64>,
    /// How long a cost-1 request arriving now would wait, ms.
    pub next_in_ms: Option<u64>,
    /// Permits granted since the bucket's counters started.
    pub grants: u64,
    /// Average over the last 5 minutes of history; `None` without history.
    pub per_minute: Option<f64>,
    pub wait_p50_ms: Option<u64>,
    pub wait_p95_ms: Option<u64>,
    /// Non-zero refusal counts by reason (`wait_ceiling_exceeded`, …).
    pub refusals: Vec<(String, u64)>,
    /// Upstream 429s reported for the bucket.
    pub penalties: u64,
    /// Last decision, Unix ms.
    pub last_at_ms: i64,
    /// Per priority lane (high, normal, low), once a request named high or
    /// low; empty while every request was normal.
    pub lanes: Vec<LaneRow>,
}

/// One priority lane of a bucket: its share of the bucket's counters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LaneRow {
    /// `high`, `normal` or `low`.
    pub lane: String,
    pub grants: u64,
    pub wait_p95_ms: Option<u64>,
    pub refusals: u64,
}

impl BucketRow {
    /// Tokens in use (capacity − remaining).
    pub fn used(&self) -> Option<u64> {
        Some(self.capacity?.saturating_sub(self.remaining?))
    }
}

/// One page of the Quotas table.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct QuotasView {
    /// The account search the page answers.
    pub account: String,
    pub page: u32,
    pub pages: u32,
    /// Buckets matching the search (all pages).
    pub total: u64,
    pub rows: Vec<BucketRow>,
    /// When the numbers were read, Unix ms.
    pub at_ms: i64,
    /// The limiter's store: `healthy`, `degraded` or `unavailable`.
    pub quota_mode: String,
}

/// The per-account page: the account's buckets and two charts (SVG drawn on
/// the server with plotters).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AccountView {
    pub account: String,
    pub hours: u32,
    /// Sampling slots in the period (0: no history yet).
    pub samples: u64,
    pub usage_svg: String,
    pub penalties_svg: String,
    pub table: QuotasView,
}

#[server(prefix = "/ui", endpoint = "quotas/list")]
pub async fn list_quotas(account: Option<String>, page: Option<u32>) -> Result<QuotasView, ServerFnError> {
    crate::ssr::auth::require(crate::auth::Role::Viewer).await?;
    let ctx = crate::ssr::context()?;
    let q = server::TableQuery::parse(account.as_deref(), false, page);
    server::table(&ctx, &q).await
}

/// Charts cover 1, 6 or 24 hours.
pub fn chart_hours(asked: Option<u32>) -> u32 {
    match asked {
        Some(h) if h >= 24 => 24,
        Some(h) if h >= 6 => 6,
        _ => 1,
    }
}

#[server(prefix = "/ui", endpoint = "quotas/account")]
pub async fn account_quotas(account: String, hours: Option<u32>) -> Result<AccountView, ServerFnError> {
    crate::ssr::auth::require(crate::auth::Role::Viewer).await?;
    let ctx = crate::ssr::context()?;
    server::account(&ctx, account.trim(), chart_hours(hours)).await
}

fn quotas_url(account: &str, page: u32) -> String {
    match (account.is_empty(), page) {
        (true, 1) => "/quotas".to_owned(),
        (true, p) => format!("/quotas?page={p}"),
        (false, 1) => format!("/quotas?account={}", format::percent_encode(account)),
        (false, p) => format!("/quotas?account={}&page={p}", format::percent_encode(account)),
    }
}

/// The bucket table, shared by the Quotas and per-account pages.
#[component]
pub fn BucketTable(rows: Vec<BucketRow>, link_accounts: bool) -> impl IntoView {
    let body = rows
        .into_iter()
        .map(|r| {
            let account_cell = if link_accounts {
                view! { <a href=format!("/quotas/{}", format::percent_encode(&r.account))>{r.account.clone()}</a> }.into_any()
            } else {
                view! { <span>{r.account.clone()}</span> }.into_any()
            };
            let refusals = if r.refusals.is_empty() {
                "0".to_owned()
            } else {
                r.refusals.iter().map(|(why, n)| format!("{why} {n}")).collect::<Vec<_>>().join(", ")
            };
            let refused_class = if r.refusals.is_empty() { "num" } else { "num warn" };
            let lanes = if r.lanes.is_empty() {
                view! { <span class="muted">"normal only"</span> }.into_any()
            } else {
                r.lanes
                    .iter()
                    .map(|l| {
                        let text = format!(
                            "{} {} · p95 {} · {} refused",
                            l.lane,
                            l.grants,
                            format::duration_fine(l.wait_p95_ms),
                            l.refusals
                        );
                        view! { <span class="lane" data-lane=l.lane.clone()>{text}</span> }
                    })
                    .collect_view()
                    .into_any()
            };
            let penalty_class = if r.penalties == 0 { "num" } else { "num warn" };
            view! {
                <tr data-testid="bucket-row" data-account=r.account.clone() data-rule=r.rule.clone()>
                    <td>{account_cell}</td>
                    <td>{r.scope.clone()}</td>
                    <td><code>{r.rule.clone()}</code></td>
                    <td class="num" data-testid="used">{format!("{} / {}", format::count(r.used()), format::count(r.capacity))}</td>
                    <td class="num" data-testid="remaining">{format::count(r.remaining)}</td>
                    <td class="num" data-testid="grants">{r.grants}</td>
                    <td class="num" data-testid="per-minute">{format::rate(r.per_minute)}</td>
                    <td class="num" data-testid="wait-p50">{format::duration_fine(r.wait_p50_ms)}</td>
                    <td class="num" data-testid="wait-p95">{format::duration_fine(r.wait_p95_ms)}</td>
                    <td class=refused_class data-testid="refusals">{refusals}</td>
                    <td class=penalty_class data-testid="penalties">{r.penalties}</td>
                    <td class="lanes" data-testid="lanes">{lanes}</td>
                </tr>
            }
        })
        .collect_view();
    view! {
        <div class="table-scroll" tabindex="0">
        <table class="buckets">
            <thead>
                <tr>
                    <th>"Account"</th>
                    <th>"Scope"</th>
                    <th>"Rule"</th>
                    <th class="num" title="tokens in use / capacity">"Used"</th>
                    <th class="num">"Remaining"</th>
                    <th class="num" title="permits granted since the counters started">"Permits"</th>
                    <th class="num" title="average over the last 5 minutes">"Permits/min"</th>
                    <th class="num">"Wait p50"</th>
                    <th class="num">"Wait p95"</th>
                    <th class="num">"Refusals"</th>
                    <th class="num" title="upstream 429s reported">"429 penalties"</th>
                    <th title="per priority lane: permits, p95 booked wait, refusals">"Lanes"</th>
                </tr>
            </thead>
            <tbody>{body}</tbody>
        </table>
        </div>
    }
}
