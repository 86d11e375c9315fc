//! Demo traffic: worker tasks that call the mock marketplace through the
//! retry middleware (so every call takes a permit from the shared limiter and
//! asks the upstream breaker first), and an event generator that hands
//! webhook events to the outbox.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use sluice_engine::clock::SharedClock;
use sluice_engine::delivery::ops::create_merchant;
use sluice_engine::delivery::ssrf::SsrfPolicy;
use sluice_engine::delivery::{EventIn, MerchantId, MerchantIn, SigningScheme};
use sluice_engine::quota::{Limit, Limiter, Rule};
use sluice_engine::retry::middleware::{Account, RetryMiddleware, Scope};
use sluice_engine::retry::{RetryExecutor, RetryProfiles};
use sluice_engine::upstream_breaker::UpstreamBreaker;
use tokio::task::JoinSet;

use super::merchants::MockMerchants;
use super::{DEMO_SCOPE, UPSTREAM_LIMIT_PER_SECOND};
use crate::state::AppState;

const ACTOR: &str = "demo";

/// The demo scope's rule: the upstream's documented limit as a token bucket.
/// The upstream counts fixed windows, so the local model is slightly
/// optimistic at window edges and a 429 penalty shows up now and then, as in
/// production (the Wildberries feeds).
pub fn demo_rule() -> Rule {
    let limit = Limit::token_bucket(UPSTREAM_LIMIT_PER_SECOND, Duration::from_secs(1), UPSTREAM_LIMIT_PER_SECOND);
    let mut rule = Rule::new(DEMO_SCOPE, None, None, limit).with_id("demo_market");
    rule.note = "Demo marketplace: 10 requests per second per account".into();
    rule
}

/// Create [`demo_rule`] unless it exists.
pub async fn ensure_demo_rule(state: &AppState) -> anyhow::Result<()> {
    let rule = demo_rule();
    if state.rules.get(&rule.id).await?.is_none() {
        state.rules.create(rule, ACTOR, state.clock.now()).await.context("creating the demo rule")?;
        // Apply at once rather than on the reloader's next poll.
        state.limiter.replace_rules(state.rules.load().await?);
    }
    Ok(())
}

/// One merchant per mock endpoint, created once (by name) and pointed at this
/// run's ports.
pub async fn ensure_demo_merchants(state: &AppState, mocks: &MockMerchants) -> anyhow::Result<Vec<MerchantId>> {
    let ssrf = SsrfPolicy { allow: super::loopback_networks(), require_https: false };
    let existing = state.deliveries.list_merchants(state.clock.now(), &Default::default()).await?;
    let mut ids = Vec::new();
    for (name, url) in mocks.endpoints() {
        if let Some(m) = existing.iter().find(|m| m.merchant.name == name) {
            if m.merchant.url != url {
                sluice_engine::delivery::ops::update_merchant_url(
                    &state.deliveries,
                    &m.merchant.id,
                    &url,
                    &ssrf,
                    sluice_engine::delivery::ops::Actor::named(ACTOR),
                    state.clock.now(),
                )
                .await
                .context("pointing a demo merchant at this run's port")?;
            }
            ids.push(m.merchant.id.clone());
            continue;
        }
        let input = MerchantIn { name: name.to_owned(), url, scheme: SigningScheme::Sluice, secret: None };
        let merchant = create_merchant(&state.deliveries, input, &ssrf, &Default::default(), sluice_engine::delivery::ops::Actor::named(ACTOR), state.clock.now())
            .await
            .with_context(|| format!("creating demo merchant {name}"))?;
        ids.push(merchant.id);
    }
    Ok(ids)
}

/// Pause of a worker whose call gave up (wait ceiling, open breaker), so it
/// does not spin.
const PAUSE_AFTER_GIVING_UP: Duration = Duration::from_secs(1);

/// Builds the demo's workers: one HTTP client through the retry middleware,
/// whose executor takes permits from `limiter` and asks `breakers` first.
#[derive(Clone)]
pub struct DemoWorkers {
    client: reqwest_middleware::ClientWithMiddleware,
    upstream: String,
    clock: SharedClock,
}

impl DemoWorkers {
    pub fn new(limiter: Limiter, breakers: UpstreamBreaker, profiles: RetryProfiles, clock: SharedClock, upstream: String) -> anyhow::Result<DemoWorkers> {
        // Calls are retried by their scope's profile, edited on the Limits page.
        let executor = RetryExecutor::new(Arc::new(limiter), clock.clone()).with_breaker(breakers).with_profiles(profiles);
        let client = reqwest_middleware::ClientBuilder::new(
            reqwest::Client::builder().timeout(Duration::from_secs(5)).build().context("HTTP client")?,
        )
        .with(RetryMiddleware::new(Arc::new(executor)).default_scope(DEMO_SCOPE))
        .build();
        Ok(DemoWorkers { client, upstream, clock })
    }

    /// Worker number `n` of `account` (even ones fetch orders, odd ones prices).
    pub fn worker(&self, account: &str, n: usize) -> DemoWorker {
        let resource = if n % 2 == 0 { "orders" } else { "prices" };
        DemoWorker { workers: self.clone(), account: account.to_owned(), resource, page: 0 }
    }
}

/// One simulated worker, fetching page after page of one resource.
pub struct DemoWorker {
    workers: DemoWorkers,
    account: String,
    resource: &'static str,
    page: u64,
}

impl DemoWorker {
    /// Fetch the next page (retries, permits and the breaker included) and
    /// say how long to pause before the next one.
    pub async fn run_once(&mut self) -> Duration {
        self.page += 1;
        let w = &self.workers;
        let result = w
            .client
            .get(format!("{}/api/{}/{}?page={}", w.upstream, self.account, self.resource, self.page))
            .with_extension(Account::new(self.account.clone()))
            .with_extension(Scope::new(DEMO_SCOPE))
            .send()
            .await;
        match result {
            Ok(_) => Duration::ZERO,
            Err(e) => {
                tracing::debug!(account = %self.account, error = %e, "demo worker call gave up");
                PAUSE_AFTER_GIVING_UP
            }
        }
    }

    /// Fetch forever (until the task is aborted).
    pub async fn run(mut self) {
        loop {
            let pause = self.run_once().await;
            if !pause.is_zero() {
                self.workers.clock.sleep(pause).await;
            }
        }
    }
}

/// `per_account` workers for each account, each fetching pages forever.
pub fn spawn_workers(
    tasks: &mut JoinSet<()>,
    state: &AppState,
    upstream: String,
    accounts: &[&str],
    per_account: usize,
) -> anyhow::Result<()> {
    let workers =
        DemoWorkers::new(state.limiter.clone(), state.upstream_breakers.clone(), state.retry_profiles.clone(), state.clock.clone(), upstream)?;
    for account in accounts {
        for n in 0..per_account {
            tasks.spawn(workers.worker(account, n).run());
        }
    }
    Ok(())
}

/// Event types the generator cycles through, money and not.
const EVENTS: &[(&str, Option<&str>)] = &[
    ("payment.status_changed", Some("paid")),
    ("payment.status_changed", Some("expired")),
    ("refund.completed", None),
    ("subscription.status_changed", Some("active")),
    ("withdrawal.status_changed", Some("completed")),
    ("kyc.status_changed", Some("approved")),
];

/// Hand one event to the outbox every `every`, round-robin over merchants.
pub async fn generate_events(state: AppState, merchants: Vec<MerchantId>, every: Duration) {
    let mut n: u64 = 0;
    let mut ticker = tokio::time::interval(every);
    loop {
        ticker.tick().await;
        n += 1;
        let Some(merchant) = merchants.get((n as usize) % merchants.len().max(1)) else { return };
        let (kind, status) = EVENTS[(n as usize / merchants.len().max(1)) % EVENTS.len()];
        let payload = serde_json::json!({
            "type": kind,
            "status": status,
            "payment_id": format!("pay_{n}"),
            "amount": 1000 + n,
        });
        let event = EventIn {
            merchant_id: merchant.clone(),
            event_type: kind.to_owned(),
            status: status.map(str::to_owned),
            payload,
            idempotency_key: format!("demo-{}-{n}", state.clock.now().as_millis()),
        };
        if let Err(e) = state.deliveries.accept_event(&event, state.clock.now()).await {
            tracing::warn!(error = %e, "demo event not accepted");
        }
    }
}
