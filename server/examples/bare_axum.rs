//! The reference for the permits load benchmark (docs/benchmarks.md,
//! `scripts/bench-permits.sh`): a bare axum handler on `POST /api/v1/permits`
//! that parses the same JSON body and answers the same JSON shape as Sluice,
//! with no token check, no limiter, no middleware. Sluice's number is quoted
//! as a share of this one, measured in the same run.
//!
//! `cargo run --release -p sluice --example bare_axum -- 127.0.0.1:3901`

use axum::routing::post;
use axum::{Json, Router};
use serde::{Deserialize, Serialize};

#[derive(Deserialize)]
#[allow(dead_code)] // parsed like Sluice's body, then unused
struct PermitIn {
    account: Option<String>,
    scope: String,
    method: Option<String>,
    path: String,
    cost: Option<u32>,
    max_wait_ms: Option<u64>,
    #[serde(default)]
    hold: bool,
}

#[derive(Serialize)]
struct PermitOut {
    granted: bool,
    wait_ms: u64,
    held_ms: u64,
    lease_id: Option<String>,
    shadow: bool,
    probe: bool,
}

async fn create_permit(Json(_input): Json<PermitIn>) -> Json<PermitOut> {
    Json(PermitOut { granted: true, wait_ms: 0, held_ms: 0, lease_id: None, shadow: false, probe: false })
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let addr = std::env::args().nth(1).unwrap_or_else(|| "127.0.0.1:3901".to_owned());
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    eprintln!("bare axum permits handler on http://{}", listener.local_addr()?);
    axum::serve(listener, Router::new().route("/api/v1/permits", post(create_permit))).await
}
