//! A real local HTTP receiver for the delivery tests: an axum server on
//! 127.0.0.1:0 whose answer the test sets (a status, hang, drop the
//! connection), recording every request it gets.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use tokio::sync::mpsc;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reply {
    Status(u16),
    /// Never answer (until the client gives up or dies).
    Hang,
    /// Redirect to /elsewhere (which records a hit if followed).
    Redirect,
}

#[derive(Debug, Clone)]
pub struct Received {
    pub id: String,
    pub headers: HeaderMap,
    pub body: Bytes,
}

#[derive(Default)]
struct Inner {
    reply: Option<Reply>,
    received: Vec<Received>,
    in_flight: HashSet<String>,
    overlaps: Vec<String>,
    followed_redirects: usize,
}

#[derive(Clone)]
pub struct Receiver {
    inner: Arc<Mutex<Inner>>,
    arrivals: Arc<Mutex<Option<mpsc::UnboundedSender<String>>>>,
    pub addr: SocketAddr,
}

impl Receiver {
    pub async fn start(reply: Reply) -> Receiver {
        let inner = Arc::new(Mutex::new(Inner { reply: Some(reply), ..Inner::default() }));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind receiver");
        let addr = listener.local_addr().expect("receiver address");
        let r = Receiver { inner, arrivals: Arc::new(Mutex::new(None)), addr };
        let app = Router::new().route("/hook", post(hook)).route("/elsewhere", post(elsewhere)).with_state(r.clone());
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        r
    }

    pub fn url(&self) -> String {
        format!("http://{}/hook", self.addr)
    }

    pub fn set(&self, reply: Reply) {
        self.inner.lock().expect("receiver lock").reply = Some(reply);
    }

    pub fn received(&self) -> Vec<Received> {
        self.inner.lock().expect("receiver lock").received.clone()
    }

    pub fn overlaps(&self) -> Vec<String> {
        self.inner.lock().expect("receiver lock").overlaps.clone()
    }

    pub fn followed_redirects(&self) -> usize {
        self.inner.lock().expect("receiver lock").followed_redirects
    }

    /// A channel that gets each request's webhook id as it arrives.
    pub fn arrivals(&self) -> mpsc::UnboundedReceiver<String> {
        let (tx, rx) = mpsc::unbounded_channel();
        *self.arrivals.lock().expect("arrivals lock") = Some(tx);
        rx
    }
}

fn webhook_id(headers: &HeaderMap) -> String {
    headers
        .get("x-webhook-id")
        .or_else(|| headers.get("webhook-id"))
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned()
}

async fn hook(State(r): State<Receiver>, headers: HeaderMap, body: Bytes) -> Response {
    let id = webhook_id(&headers);
    let reply = {
        let mut inner = r.inner.lock().expect("receiver lock");
        if !inner.in_flight.insert(id.clone()) {
            inner.overlaps.push(id.clone());
        }
        inner.received.push(Received { id: id.clone(), headers, body });
        inner.reply
    };
    if let Some(tx) = r.arrivals.lock().expect("arrivals lock").as_ref() {
        let _ = tx.send(id.clone());
    }
    // Give a concurrent duplicate the chance to overlap before we answer.
    tokio::task::yield_now().await;
    let resp = match reply {
        Some(Reply::Hang) => std::future::pending::<Response>().await,
        Some(Reply::Redirect) => (StatusCode::FOUND, [("location", "/elsewhere")], "moved").into_response(),
        Some(Reply::Status(code)) => (StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR), format!("answer {code}")).into_response(),
        None => StatusCode::OK.into_response(),
    };
    r.inner.lock().expect("receiver lock").in_flight.remove(&id);
    resp
}

async fn elsewhere(State(r): State<Receiver>) -> StatusCode {
    r.inner.lock().expect("receiver lock").followed_redirects += 1;
    StatusCode::OK
}

/// A listener that accepts connections and drops them at once, without an answer.
pub async fn start_resetting() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("address");
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            drop(stream);
        }
    });
    addr
}
