//! The Overview's numbers, read on the server (ssr only).

use std::time::Duration;

use leptos::prelude::ServerFnError;

use super::Attention;
use crate::ssr::{internal, AppContext};

/// The Overview's "where to look" numbers: breakers, FAILED deliveries and
/// the quota history's last hour.
pub async fn attention(ctx: &AppContext) -> Result<Attention, ServerFnError> {
    let now = ctx.clock.now();
    let open_breakers = ctx.deliveries.open_breakers().await.map_err(|e| internal("reading breakers", e))?.len();
    let counts = ctx.deliveries.status_counts().await.map_err(|e| internal("counting deliveries", e))?;
    let hour = ctx
        .history
        .totals_since(now - Duration::from_secs(3600))
        .await
        .map_err(|e| internal("reading quota history", e))?;
    Ok(Attention {
        open_breakers: open_breakers as u64,
        failed_deliveries: counts.failed,
        penalties_1h: hour.penalties,
        refusals_1h: hour.refusals,
        grants_1h: hour.grants,
        wait_p95_ms_1h: if hour.grants == 0 { None } else { hour.wait_percentile(0.95).map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)) },
        history_slots: hour.slots,
        // A store that does not answer must not hide the other numbers.
        live_buckets: ctx.limiter.live_buckets().await.ok().map(|counts| counts.iter().map(|(_, n)| n).sum()),
    })
}
