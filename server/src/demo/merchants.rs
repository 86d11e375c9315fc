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

async fn flaky(State(counter): State<Arc<AtomicU64>>) -> (StatusCode, &'static str) {
    if counter.fetch_add(1, Ordering::Relaxed) % 3 == 2 {
        (StatusCode::SERVICE_UNAVAILABLE, "upstream busy, try again shortly")
    } else {
        (StatusCode::OK, "ok")
    }
}

/// A 400 with a reason in the body, as a real merchant's validation would
/// answer (the delivery page shows it per attempt).
async fn rejects_money(body: String) -> (StatusCode, axum::Json<serde_json::Value>) {
    let event: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
    let kind = event["type"].as_str().unwrap_or_default();
    let status = event["status"].as_str();
    if is_money_event(kind, status) {
        let reason = serde_json::json!({ "error": "money events need a manual review first", "code": "review_required" });
        (StatusCode::BAD_REQUEST, axum::Json(reason))
    } else {
        (StatusCode::OK, axum::Json(serde_json::json!({ "received": true })))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn post(client: &reqwest::Client, url: &str, body: serde_json::Value) -> Result<u16, reqwest::Error> {
        Ok(client.post(url).json(&body).send().await?.status().as_u16())
    }

    #[tokio::test]
    async fn the_mock_merchants_answer_as_documented() {
        let mocks = MockMerchants::start().await.expect("start");
        let client = reqwest::Client::new();
        let url = |name: &str| mocks.endpoints().into_iter().find(|(n, _)| *n == name).map(|(_, u)| u).expect("endpoint");
        let paid = serde_json::json!({ "type": "payment.status_changed", "status": "paid" });
        let expired = serde_json::json!({ "type": "payment.status_changed", "status": "expired" });

        for _ in 0..3 {
            assert_eq!(post(&client, &url("Healthy Shop"), paid.clone()).await.expect("healthy"), 200);
        }
        // Flaky: every third request fails with a 5xx (fast ladder, breaker counts it).
        let flaky: Vec<u16> = {
            let mut out = Vec::new();
            for _ in 0..6 {
                out.push(post(&client, &url("Flaky Shop"), expired.clone()).await.expect("flaky"));
            }
            out
        };
        assert_eq!(flaky, [200, 200, 503, 200, 200, 503]);
        // Strict: a 4xx to money events only (slow ladder), 200 to the rest.
        assert_eq!(post(&client, &url("Strict Shop"), paid.clone()).await.expect("strict"), 400);
        assert_eq!(post(&client, &url("Strict Shop"), expired.clone()).await.expect("strict"), 200);
        // Down: nobody listens, a network error.
        let down = post(&client, &url("Down Shop"), paid).await.expect_err("nothing listens there");
        assert!(down.is_connect(), "{down}");
        mocks.stop();
    }
}
