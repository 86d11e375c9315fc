//! `GET /api/v1/buckets`: quota usage per (account, rule).

use std::collections::BTreeMap;

use axum::extract::State;
use serde::Serialize;
use sluice_engine::quota::RefusalReason;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::auth::Caller;
use super::error::{ApiError, ErrorOut, Json};
use super::permits::ceil_millis;
use crate::state::AppState;
use sluice_engine::tokens::ApiScope;

/// At most this many buckets per answer (each costs a store round trip).
const MAX_BUCKETS: usize = 500;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(list_buckets))
}

#[derive(Debug, Serialize, ToSchema)]
pub struct BucketOut {
    pub account: String,
    pub scope: String,
    pub rule: String,
    /// Tokens a request could take now; absent when the rule is gone.
    pub remaining: Option<u64>,
    pub capacity: Option<u64>,
    /// How long a cost-1 request arriving now would wait.
    pub next_in_ms: Option<u64>,
    pub grants: u64,
    /// Grants that had to wait.
    pub waited: u64,
    pub penalties: u64,
    /// Refusals by reason.
    pub refusals: BTreeMap<String, u64>,
    pub last_at_ms: i64,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct BucketsOut {
    pub buckets: Vec<BucketOut>,
    /// True when there were more than the answer holds.
    pub truncated: bool,
}

#[utoipa::path(get, path = "/api/v1/buckets", tag = "quota", security(("bearer" = [])),
    responses((status = 200, description = "Usage per bucket", body = BucketsOut),
        (status = 503, description = "Quota store unavailable", body = ErrorOut)))]
pub async fn list_buckets(State(state): State<AppState>, caller: Caller) -> Result<Json<BucketsOut>, ApiError> {
    caller.require(ApiScope::Worker)?;
    let keys = state.limiter.list_buckets().await?;
    let truncated = keys.len() > MAX_BUCKETS;
    let mut buckets = Vec::with_capacity(keys.len().min(MAX_BUCKETS));
    for key in keys.into_iter().take(MAX_BUCKETS) {
        let usage = state.limiter.peek_bucket(&key).await?;
        let stats = state.limiter.stats(&key).await?;
        let refusals = RefusalReason::ALL
            .iter()
            .zip(stats.refusals)
            .filter(|(_, n)| *n > 0)
            .map(|(r, n)| (r.as_str().to_owned(), n))
            .collect();
        buckets.push(BucketOut {
            account: key.account,
            scope: key.scope,
            rule: key.rule.0,
            remaining: usage.map(|u| u.remaining),
            capacity: usage.map(|u| u.capacity),
            next_in_ms: usage.map(|u| ceil_millis(u.next_in)),
            grants: stats.grants,
            waited: stats.waited,
            penalties: stats.penalties,
            refusals,
            last_at_ms: stats.last_at_ms,
        });
    }
    Ok(Json(BucketsOut { buckets, truncated }))
}
