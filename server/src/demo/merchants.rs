//! Mock merchant webhook endpoints on loopback:
//! - `/healthy`: always 200;
//! - `/flaky`: every third request 503, the rest 200;
//! - `/rejects-money`: 400 to money events, 200 to the rest (slow ladder);
//! - a "down" merchant points at a loopback port nobody listens on.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use axum::Router;
use sluice_engine::delivery::money::is_money_event;
use tokio::sync::oneshot;

pub struct MockMerchants {
    address: SocketAddr,
    down_url: String,
    stop: Option<oneshot::Sender<()>>,
}

impl MockMerchants {
    pub async fn start() -> std::io::Result<MockMerchants> {
        let counter = Arc::new(AtomicU64::new(0));
        let router = Router::new()
            .route("/healthy", post(|| async { StatusCode::OK }))
            .route("/flaky", post(flaky))
            .route("/rejects-money", post(rejects_money))
            .with_state(counter);
        let (address, stop) = super::serve_on_loopback(router).await?;
        // A port that was free a moment ago and that nobody listens on.
        let down = std::net::TcpListener::bind("127.0.0.1:0")?;
        let down_url = format!("http://{}/webhooks", down.local_addr()?);
        drop(down);
        Ok(MockMerchants { address, down_url, stop: Some(stop) })
    }

    pub fn base_url(&self) -> String {
        format!("http://{}", self.address)
    }

    /// (name, url) of each mock merchant.
    pub fn endpoints(&self) -> Vec<(&'static str, String)> {
        vec![
            ("Healthy Shop", format!("{}/healthy", self.base_url())),
            ("Flaky Shop", format!("{}/flaky", self.base_url())),
            ("Strict Shop", format!("{}/rejects-money", self.base_url())),
            ("Down Shop", self.down_url.clone()),
        ]
    }

    pub fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

async fn flaky(State(counter): State<Arc<AtomicU64>>) -> StatusCode {
    if counter.fetch_add(1, Ordering::Relaxed) % 3 == 2 {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::OK
    }
}

async fn rejects_money(body: String) -> StatusCode {
    let event: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
    let kind = event["type"].as_str().unwrap_or_default();
    let status = event["status"].as_str();
    if is_money_event(kind, status) {
        StatusCode::BAD_REQUEST
    } else {
        StatusCode::OK
    }
}
