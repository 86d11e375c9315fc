//! `sluice demo`: Sluice on the embedded default with live traffic, so every
//! page shows moving numbers within seconds.
//!
//! - [`upstream`]: a mock marketplace API that enforces its own per-account
//!   limit (fixed windows) and answers 429 with `application/problem+json`
//!   and no `Retry-After`, like the Wildberries feeds, plus VTEX-style
//!   `X-RateLimit-*` headers on success; one seller's shard has an outage
//!   now and then ([`demo_upstream`]);
//! - [`traffic`]: worker tasks calling it through the retry middleware, the
//!   shared limiter and the upstream breaker, and an event generator handing
//!   webhook events over;
//! - [`merchants`]: mock merchant endpoints: healthy, flaky (5xx), down, and one
//!   that answers 4xx to money events.
//!
//! The mock servers are real HTTP servers on loopback, reused by the tests
//! and the benchmark harness (`server/examples/quota_bench.rs`).
//!
//! The demo signs in as `demo` (an admin) with a password generated at every
//! start and printed with the URL, and delivers with [`timing::demo_timing`]: the
//! product's ladders and breaker, sped up so each step shows within minutes.

pub mod merchants;
pub mod timing;
pub mod traffic;
pub mod upstream;

use std::time::Duration;

use anyhow::Context;
use sluice_engine::audit::{self, AuditAction, AuditEntry};
use sluice_engine::clock::Timestamp;
use sluice_engine::db::Db;
use sluice_engine::users::{self, Role, UserError};
use tokio::task::JoinSet;

use crate::config::{DeliveryTiming, Settings};
use crate::startup::{shutdown_signal, Application};

/// The demo's own limit rule scope, and the upstream's real limit.
pub const DEMO_SCOPE: &str = "demo_market";
pub const UPSTREAM_LIMIT_PER_SECOND: u32 = 10;

/// The demo's sign-in (an admin, so every page and control is open).
pub const DEMO_USER: &str = "demo";

/// The sellers whose workers call the mock marketplace, and how many each.
pub const DEMO_ACCOUNTS: [&str; 3] = ["seller-1", "seller-2", "seller-3"];
pub const WORKERS_PER_ACCOUNT: usize = 2;
/// The seller whose shard of the marketplace goes down now and then.
pub const OUTAGE_ACCOUNT: &str = "seller-3";

/// The mock marketplace of the demo, on the system clock:
/// - every 20th second another client of the sellers has used half the
///   window before Sluice's workers get to it: a 429 penalty now and then;
/// - [`OUTAGE_ACCOUNT`]'s shard is down from second 10 for 10 s, and again
///   every 2 minutes, then answers slowly (2 s) for 30 s while it warms up.
///   Its workers' upstream breaker opens within a second or two (5 failures
///   in a row), lets a probe through 30 s later, while the shard warms up,
///   so each of the three probes takes 2 s, and closes: the whole cycle is
///   on the Breakers page within a minute of starting.
pub fn demo_upstream() -> upstream::UpstreamConfig {
    let foreign = upstream::ForeignUse { every: 20, requests: UPSTREAM_LIMIT_PER_SECOND / 2 };
    let outage = upstream::Outage {
        accounts: vec![OUTAGE_ACCOUNT.to_owned()],
        first_after: Duration::from_secs(10),
        every: Duration::from_secs(120),
        lasts: Duration::from_secs(10),
        warm_up: Duration::from_secs(30),
        slow: Duration::from_secs(2),
    };
    upstream::UpstreamConfig::new(UPSTREAM_LIMIT_PER_SECOND, Duration::from_secs(1)).foreign(foreign).outage(outage)
}

/// Make sure `demo` exists as an admin and give it a fresh random password
/// (a demo database is reused between runs; the old password is unknown).
/// Returns the password to print. The change is audited like `sluice user passwd`.
pub async fn ensure_demo_login(db: &Db, now: Timestamp) -> anyhow::Result<String> {
    let password = users::generate_password();
    let (action, user) = match users::create_user(db, DEMO_USER, &password, Role::Admin, now).await {
        Ok(user) => (AuditAction::UserCreate, user),
        Err(UserError::Duplicate(_)) => {
            users::set_password(db, DEMO_USER, &password, None).await.context("resetting the demo password")?;
            let (_, user) = users::set_role(db, DEMO_USER, Role::Admin, None).await.context("making the demo user an admin")?;
            (AuditAction::UserPassword, user)
        }
        Err(e) => return Err(e).context("creating the demo user"),
    };
    let entry = AuditEntry { actor: "demo", action, target: &user.id, before: None::<&users::User>, after: None, reason: None };
    audit::record(db, entry, now).await.context("auditing the demo sign-in")?;
    Ok(password)
}

/// The networks the demo's mock merchants live on: IPv4 and IPv6 loopback.
pub(crate) fn loopback_networks() -> Vec<ipnet::IpNet> {
    vec![
        ipnet::IpNet::V4(ipnet::Ipv4Net::new(std::net::Ipv4Addr::LOCALHOST, 8).unwrap_or_default()),
        ipnet::IpNet::V6(ipnet::Ipv6Net::new(std::net::Ipv6Addr::LOCALHOST, 128).unwrap_or_default()),
    ]
}

/// Serve `router` on a free loopback port until the returned sender fires
/// (or is dropped).
pub(crate) async fn serve_on_loopback(
    router: axum::Router,
) -> std::io::Result<(std::net::SocketAddr, tokio::sync::oneshot::Sender<()>)> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let _ = axum::serve(listener, router)
            .with_graceful_shutdown(async move {
                let _ = stopped.await;
            })
            .await;
    });
    Ok((address, stop))
}

/// Run the demo until Ctrl-C.
pub async fn run(mut settings: Settings) -> anyhow::Result<()> {
    // The mock merchants live on loopback, which the SSRF guard refuses by
    // default: the demo allows loopback explicitly, and says so.
    for net in loopback_networks() {
        if !settings.delivery_allow_networks.contains(&net) {
            settings.delivery_allow_networks.push(net);
        }
    }
    // Its mock merchants answer plain http on loopback.
    settings.delivery_require_https = false;
    tracing::warn!("demo mode: webhook deliveries to loopback addresses and plain http are allowed");
    settings.delivery_timing = DeliveryTiming::Demo;
    let app = Application::build(settings).await?;
    let state = app.state().clone();
    let password = ensure_demo_login(&state.db, state.clock.now()).await?;
    let upstream = upstream::MockUpstream::start_with(demo_upstream())
        .await
        .context("starting the mock marketplace API")?;
    let merchants = merchants::MockMerchants::start().await.context("starting the mock merchant endpoints")?;
    traffic::ensure_demo_rule(&state).await?;
    let merchant_ids = traffic::ensure_demo_merchants(&state, &merchants).await?;

    let mut tasks = JoinSet::new();
    traffic::spawn_workers(&mut tasks, &state, upstream.base_url(), &DEMO_ACCOUNTS, WORKERS_PER_ACCOUNT)?;
    tasks.spawn(traffic::generate_events(state.clone(), merchant_ids, Duration::from_millis(400)));

    println!("Sluice demo is running at http://{}", app.address());
    println!("  sign in as:           {DEMO_USER} / {password}   (admin; a new password every start)");
    println!("  mock marketplace API: {}", upstream.base_url());
    println!("  mock merchants:       {}", merchants.base_url());
    println!("  delivery timings:     sped up for the demo (slow ladder ÷ 60, breaker pause 20 s)");
    println!("  upstream outages:     {OUTAGE_ACCOUNT} gets 503s from second 10 for 10 s, every 2 min (upstream breaker)");
    println!("Press Ctrl-C to stop.");
    let result = app.run_until_stopped(shutdown_signal()).await;
    tasks.abort_all();
    while tasks.join_next().await.is_some() {}
    upstream.stop();
    merchants.stop();
    result
}
