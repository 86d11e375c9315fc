//! The delivery worker: claim due deliveries, ask the merchant's breaker,
//! send, record the attempt, apply the ladder decision.
//!
//! [`Worker::run_once`] is one step at the clock's `now` (tests drive it with
//! a `ManualClock`); [`Worker::run`] loops until its shutdown future resolves,
//! finishing the batch in hand first. Several instances may run against one
//! PostgreSQL: the claim hands each row to one instance, and a row whose
//! worker died comes back once its lease has run out — to be sent again with
//! the same `X-Webhook-Id` (delivery is at least once; receivers deduplicate).

use std::future::Future;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::stream::{self, StreamExt};
use reqwest::redirect::Policy;

use super::handoff::{Handed, Handoff};
use super::merchant_breaker::{self, MerchantAdmission, MerchantBreakerConfig};
use super::ladder::{self, LadderConfig, LadderState};
use super::model::*;
use super::{capture, signing};
use super::ssrf::{GuardedResolver, SsrfPolicy};
use super::store::{AttemptRecord, DeliveryStore, Job, StoreError};
use super::wake::Wake;
use crate::clock::{SharedClock, Timestamp};

/// Worker settings. Defaults are the product's policy.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// Names this instance in leases (`lease_owner`).
    pub instance_id: String,
    /// Deliveries claimed per step.
    pub batch_size: u32,
    /// Requests in flight at once within a step.
    pub concurrency: usize,
    /// How long a claim holds; must exceed `request_timeout` comfortably.
    pub lease: Duration,
    /// Whole-request timeout (10 s).
    pub request_timeout: Duration,
    /// Pause between steps when nothing was due.
    pub idle_poll: Duration,
    /// How long a step woken by new work waits before it claims, and how
    /// long a write-back of a part batch waits for the step's other sends,
    /// so that a steady stream of single events is claimed and written back
    /// in groups instead of one database round trip each. Adds up to twice
    /// this to a delivery's latency; zero turns it off. Wall time, not the
    /// engine's clock.
    pub gather: Duration,
    /// Response bodies are kept up to this many bytes (as text, secrets
    /// redacted: `capture`).
    pub max_response_bytes: usize,
    pub ladder: LadderConfig,
    pub breaker: MerchantBreakerConfig,
    pub ssrf: SsrfPolicy,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            instance_id: format!("worker-{}", ulid::Ulid::new()),
            batch_size: 64,
            concurrency: 32,
            lease: Duration::from_secs(60),
            request_timeout: Duration::from_secs(10),
            idle_poll: Duration::from_millis(500),
            gather: DEFAULT_GATHER,
            max_response_bytes: RESPONSE_SNIPPET_BYTES,
            ladder: LadderConfig::default(),
            breaker: MerchantBreakerConfig::default(),
            ssrf: SsrfPolicy::strict(),
        }
    }
}

impl WorkerConfig {
    /// Settings that cannot work together are refused at startup.
    pub fn validate(&self) -> Result<(), WorkerError> {
        let bad = |why: &'static str| Err(WorkerError::Config(why));
        if self.batch_size == 0 || self.concurrency == 0 {
            return bad("batch_size and concurrency must be at least 1");
        }
        if self.request_timeout.is_zero() {
            return bad("request_timeout must be positive");
        }
        if self.lease <= self.request_timeout * 2 {
            return bad("lease must exceed twice the request timeout, or live deliveries would be claimed twice");
        }
        if self.ladder.fast_attempts == 0 {
            return bad("the fast ladder needs at least one attempt");
        }
        Ok(())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    #[error("invalid worker settings: {0}")]
    Config(&'static str),
    #[error("building the HTTP client failed")]
    Client(#[source] reqwest::Error),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What one step did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StepReport {
    pub claimed: usize,
    pub delivered: usize,
    pub retrying: usize,
    pub failed: usize,
    pub deferred: usize,
    /// Put back unsent: the merchant's URL is plain http while https is required.
    pub held: usize,
    /// Rows whose lease another instance took over meanwhile.
    pub lost: usize,
}

/// How long a held delivery (plain-http merchant while https is required)
/// waits before it is looked at again: a fixed URL is delivered to within
/// this time.
pub const HOLD_RECHECK: Duration = Duration::from_secs(30);

/// [`WorkerConfig::gather`]'s default.
pub const DEFAULT_GATHER: Duration = Duration::from_millis(5);

/// Deliveries handled, by result (`/metrics`; a no-op without a recorder).
pub const RESULTS_METRIC: &str = "sluice_delivery_results_total";

impl StepReport {
    fn count(&mut self, r: JobResult) {
        match r {
            JobResult::Delivered => self.delivered += 1,
            JobResult::Retrying => self.retrying += 1,
            JobResult::Failed => self.failed += 1,
            JobResult::Deferred => self.deferred += 1,
            JobResult::Held => self.held += 1,
            JobResult::Lost => self.lost += 1,
        }
    }

    fn record_metrics(&self) {
        let results = [
            ("delivered", self.delivered),
            ("retrying", self.retrying),
            ("failed", self.failed),
            ("deferred", self.deferred),
            ("held", self.held),
            ("lost", self.lost),
        ];
        for (result, n) in results {
            if n > 0 {
                metrics::counter!(RESULTS_METRIC, "result" => result).increment(n as u64);
            }
        }
    }
}

/// One claimed delivery after [`Worker::process`]: settled without a send
/// (deferred, failed at a ceiling, lost), or sent and waiting to be written back.
// Lives for one step of one delivery and is unpacked at once; boxing the
// record would add an allocation per delivery to save stack space.
#[allow(clippy::large_enum_variant)]
enum Processed {
    Done(JobResult),
    Sent(AttemptRecord, Holder),
}

/// Whose lease a delivery in a step is under: the step's own claim, or
/// intake's hand-off (see [`super::handoff`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Holder {
    Step,
    Handoff,
}

enum JobResult {
    Delivered,
    Retrying,
    Failed,
    Deferred,
    Held,
    Lost,
}

/// Sends deliveries. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Worker {
    store: DeliveryStore,
    clock: SharedClock,
    client: reqwest::Client,
    config: Arc<WorkerConfig>,
    wake: Option<Wake>,
    handoff: Option<Handoff>,
    /// This step loop's own, fresh for each loop ([`Worker::sibling`]).
    looked: Arc<Looked>,
}

/// When one step loop last looked in the database. A new loop starts with
/// [`Looked::default`]: no claim yet, and expired claims owed a look.
#[derive(Debug)]
struct Looked {
    /// When it last claimed (Unix ms).
    claim: AtomicI64,
    /// When it last took back expired claims (Unix ms), or
    /// [`TAKE_BACK_OWED`].
    take_back: AtomicI64,
}

/// `Looked::take_back` when the next claim takes back expired claims
/// whatever the time: at start and after a failed step.
const TAKE_BACK_OWED: i64 = i64::MIN;

impl Default for Looked {
    fn default() -> Looked {
        Looked { claim: AtomicI64::new(0), take_back: AtomicI64::new(TAKE_BACK_OWED) }
    }
}

impl Worker {
    pub fn new(store: DeliveryStore, clock: SharedClock, config: WorkerConfig) -> Result<Worker, WorkerError> {
        config.validate()?;
        let client = reqwest::Client::builder()
            .redirect(Policy::none())
            .timeout(config.request_timeout)
            .connect_timeout(config.request_timeout)
            .no_proxy()
            .dns_resolver(Arc::new(GuardedResolver::new(Arc::new(config.ssrf.clone()))))
            .build()
            .map_err(WorkerError::Client)?;
        Ok(Worker {
            store,
            clock,
            client,
            config: Arc::new(config),
            wake: None,
            handoff: None,
            looked: Arc::default(),
        })
    }

    pub fn config(&self) -> &WorkerConfig {
        &self.config
    }

    /// Another step loop of the same instance, claiming under `instance_id`:
    /// it shares this worker's HTTP client (so its connections to merchants),
    /// store, clock and wake, and differs only in its lease owner name.
    pub fn sibling(&self, instance_id: String) -> Worker {
        let config = WorkerConfig { instance_id, ..(*self.config).clone() };
        Worker { config: Arc::new(config), looked: Arc::default(), ..self.clone() }
    }

    /// Take deliveries that this instance's intake stored claimed
    /// ([`super::handoff`]) before claiming from the database.
    pub fn with_handoff(mut self, handoff: Handoff) -> Worker {
        self.handoff = Some(handoff);
        self
    }

    /// Wake this worker's idle pause early when `wake` is notified (new
    /// work stored, by this instance or, through PostgreSQL, another).
    pub fn with_wake(mut self, wake: Wake) -> Worker {
        self.wake = Some(wake);
        self
    }

    /// One step at the clock's current time: claim a batch, read it in one
    /// round trip, send with up to `concurrency` requests in flight, and
    /// write back the answers in groups (one transaction per group of
    /// finished sends: those in when the first arrives and, when the batch
    /// was not full, those that follow within `gather`, so a slow merchant
    /// holds back the write-back of fast ones by `gather` at most).
    ///
    /// The sends run on a task of their own. A write-back holds a database
    /// transaction; if the sends were polled only between write-backs, one
    /// paused half way through its own short transaction (a deferral's, a
    /// breaker update's) would hold a lock the write-back waits for, and
    /// neither would move: SQLite answers "database is locked" after its
    /// busy timeout, PostgreSQL waits for ever.
    ///
    /// With a hand-off, the step first takes what intake handed over and
    /// claims from the database only for the rest of the batch when nothing
    /// was handed over, or when it last claimed `idle_poll` ago or longer
    /// (then it leaves half the batch to the claim): rows intake could not
    /// hand over, retries and other instances' work are never starved by a
    /// busy hand-off. If the step fails half way, what it took goes back to
    /// the hand-off; rows finished meanwhile are left out when read again.
    pub async fn run_once(&self) -> Result<StepReport, WorkerError> {
        let now = self.clock.now();
        let batch = self.config.batch_size as usize;
        let (handed, claim) = match &self.handoff {
            None => (Vec::new(), true),
            Some(h) => {
                let idle_poll = i64::try_from(self.config.idle_poll.as_millis()).unwrap_or(i64::MAX);
                let claim_due = now.as_millis().saturating_sub(self.looked.claim.load(Ordering::Relaxed)) >= idle_poll;
                let handed = h.take(if claim_due { (batch / 2).max(1) } else { batch }, now);
                let claim = claim_due || handed.is_empty();
                (handed, claim)
            }
        };
        let result = self.step(now, &handed, claim).await;
        if result.is_err() {
            // What it claimed itself is taken back by its next claim.
            self.looked.take_back.store(TAKE_BACK_OWED, Ordering::Relaxed);
        }
        if result.is_err() && !handed.is_empty() {
            if let Some(h) = &self.handoff {
                h.put_back(handed);
            }
        }
        result
    }

    async fn step(&self, now: Timestamp, handed: &[Handed], claim: bool) -> Result<StepReport, WorkerError> {
        let owner = self.config.instance_id.as_str();
        let mut ids: Vec<DeliveryId> = handed.iter().map(|h| h.id.clone()).collect();
        if claim {
            self.looked.claim.store(now.as_millis(), Ordering::Relaxed);
            let left = (self.config.batch_size as usize).saturating_sub(ids.len());
            // Expired claims are taken back at the first claim, after a
            // failed step, and then every tenth of a lease: a dead
            // instance's deliveries wait at most that much longer than
            // their lease (see `DeliveryStore::claim_taking_back`).
            let every = i64::try_from(self.config.lease.as_millis() / 10).unwrap_or(i64::MAX);
            let take_back = now.as_millis().saturating_sub(self.looked.take_back.load(Ordering::Relaxed)) >= every;
            if take_back {
                self.looked.take_back.store(now.as_millis(), Ordering::Relaxed);
            }
            let left = u32::try_from(left).unwrap_or(u32::MAX);
            ids.extend(self.store.claim_taking_back(owner, now, self.config.lease, left, take_back).await?);
        }
        let mut report = StepReport { claimed: ids.len(), ..StepReport::default() };
        // A handed-over row is ours while it is still DELIVERING under the
        // hand-off's name: one put back after a failed step may have been
        // finished meanwhile, or (after half its lease) reclaimed elsewhere.
        let handoff_owner = self.handoff.as_ref().map(Handoff::owner);
        let jobs: Vec<_> = self
            .store
            .jobs(&ids)
            .await?
            .into_iter()
            .filter_map(|(job, breaker)| {
                let d = &job.delivery;
                let holder = match d.lease_owner.as_deref() {
                    _ if d.status != DeliveryStatus::Delivering => return None,
                    Some(o) if o == owner => Holder::Step,
                    Some(o) if Some(o) == handoff_owner => Holder::Handoff,
                    _ => return None,
                };
                Some((job, breaker, holder))
            })
            .collect();
        // Rows left out above send nothing: a write-back waits for these only.
        let sending = jobs.len();
        let (results, mut finished) = tokio::sync::mpsc::unbounded_channel();
        let worker = self.clone();
        // A JoinSet, so a step dropped half way (shutdown) stops its sends.
        let mut sends = tokio::task::JoinSet::new();
        sends.spawn(async move {
            stream::iter(jobs)
                .map(|(job, breaker, holder)| worker.process(job, breaker, holder))
                .buffer_unordered(worker.config.concurrency.max(1))
                .for_each(|r| {
                    // The receiver only goes away with this step.
                    let _ = results.send(r);
                    std::future::ready(())
                })
                .await;
        });
        let mut first_error = None;
        let mut chunk = Vec::new();
        let mut outstanding = sending;
        // A part batch is a trickle of new work: the sends still out get a
        // moment to join a write-back. A full one is a backlog, where
        // writing back while the rest are sent keeps the step short.
        let gather = if ids.len() < self.config.batch_size as usize { self.config.gather } else { Duration::ZERO };
        while finished.recv_many(&mut chunk, ids.len().max(1)).await > 0 {
            let deadline = tokio::time::Instant::now() + gather;
            while chunk.len() < outstanding {
                match tokio::time::timeout_at(deadline, finished.recv_many(&mut chunk, ids.len())).await {
                    Ok(n) if n > 0 => {}
                    _ => break,
                }
            }
            outstanding = outstanding.saturating_sub(chunk.len());
            let mut sent = Vec::new();
            for r in chunk.drain(..) {
                match r {
                    Ok(Processed::Done(result)) => report.count(result),
                    Ok(Processed::Sent(rec, holder)) => sent.push((rec, holder)),
                    Err(e) => {
                        first_error.get_or_insert(e);
                    }
                }
            }
            // Answers already in are written back even when a sibling
            // failed: the attempts happened.
            if let Err(e) = self.write_back(sent, &mut report).await {
                first_error.get_or_insert(e);
            }
        }
        while let Some(done) = sends.join_next().await {
            if let Err(e) = done {
                if e.is_panic() {
                    std::panic::resume_unwind(e.into_panic());
                }
            }
        }
        report.record_metrics();
        match first_error {
            Some(e) => Err(e),
            None => Ok(report),
        }
    }

    /// Record finished sends (attempt rows and ladder steps in one
    /// transaction per lease owner; a step holds at most two), then the
    /// breaker accounting they call for.
    async fn write_back(&self, sent: Vec<(AttemptRecord, Holder)>, report: &mut StepReport) -> Result<(), WorkerError> {
        if sent.is_empty() {
            return Ok(());
        }
        let done = self.clock.now();
        let (own, handed): (Vec<_>, Vec<_>) = sent.into_iter().partition(|(_, h)| *h == Holder::Step);
        let mut sent = Vec::new();
        for (holder, recs) in [(Holder::Step, own), (Holder::Handoff, handed)] {
            if recs.is_empty() {
                continue;
            }
            let recs: Vec<AttemptRecord> = recs.into_iter().map(|(r, _)| r).collect();
            let ours = self.store.finish_attempts(&recs, self.owner(holder), done).await?;
            for (rec, ours) in recs.iter().zip(&ours) {
                let a = &rec.attempt;
                if let ladder::Decision::Failed { reason, .. } = rec.decision {
                    tracing::warn!(delivery = %a.delivery_id, merchant = %a.merchant_id, %reason, outcome = ?a.outcome, "delivery FAILED");
                }
                report.count(match (ours, rec.decision) {
                    (false, _) => JobResult::Lost,
                    (true, ladder::Decision::Delivered) => JobResult::Delivered,
                    (true, ladder::Decision::Retry { .. }) => JobResult::Retrying,
                    (true, ladder::Decision::Failed { .. }) => JobResult::Failed,
                });
            }
            sent.extend(recs);
        }
        // Only a probe's result or a failure can move the breaker. A probe
        // is accounted on its own; failures once per merchant, since the
        // window read counts every attempt just written.
        let mut failing = std::collections::HashSet::new();
        for a in sent.iter().map(|r| &r.attempt) {
            if a.probe || (a.outcome.is_breaker_failure() && failing.insert(a.merchant_id.clone())) {
                self.record_breaker(&a.merchant_id, &a.delivery_id, a.outcome, done).await?;
            }
        }
        Ok(())
    }

    /// Step until `shutdown` resolves. The batch in hand is finished first;
    /// anything claimed and not finished is picked up again after its lease.
    /// Database errors are logged and retried after the idle pause.
    pub async fn run(&self, shutdown: impl Future<Output = ()>) {
        tokio::pin!(shutdown);
        loop {
            if let Some(w) = &self.wake {
                w.claiming();
            }
            let pause = match self.run_once().await {
                Ok(r) if r.claimed as u32 >= self.config.batch_size => {
                    // More may be due: bring in a sibling step that is idle.
                    if let Some(w) = &self.wake {
                        w.notify();
                    }
                    Duration::ZERO
                }
                Ok(_) => self.config.idle_poll,
                Err(e) => {
                    // Its claims are taken back by its next step (see
                    // `DeliveryStore::claim`), not after their lease.
                    if crate::db::is_unreachable(&e) {
                        crate::log_throttle::database_unreachable("delivery step", &e);
                    } else {
                        tracing::error!(error = &e as &dyn std::error::Error, "delivery step failed");
                    }
                    self.config.idle_poll
                }
            };
            let woken = async {
                match &self.wake {
                    Some(w) => w.notified().await,
                    None => std::future::pending().await,
                }
            };
            let woken = tokio::select! {
                biased;
                _ = &mut shutdown => break,
                _ = self.clock.sleep(pause) => false,
                _ = woken => true,
            };
            // Only a step that was idle waits: after a full batch the
            // wake-up is the step's own call for a sibling (and a zero sleep
            // is not ready at once), and the backlog goes on at once.
            if woken && !pause.is_zero() && !self.config.gather.is_zero() {
                // Let the stores right behind this one join its claim
                // (their wake-ups are absorbed meanwhile, see `Wake`). Wall
                // time on purpose: a batching window, not the engine's time.
                tokio::select! {
                    biased;
                    _ = &mut shutdown => break,
                    _ = tokio::time::sleep(self.config.gather) => {}
                }
            }
        }
    }

    /// One claimed delivery. Time is read at the edges: when it is picked up
    /// (ceilings, breaker, signature timestamp, attempt time) and when the
    /// answer is in (the next attempt counts its pause from there).
    async fn process(&self, job: Job, breaker: merchant_breaker::MerchantBreaker, holder: Holder) -> Result<Processed, WorkerError> {
        let owner = self.owner(holder);
        let now = self.clock.now();
        let d = &job.delivery;
        let id = &d.id;
        if self.config.ssrf.holds(&job.merchant.url) {
            // Neither sent nor failed, whatever its ceilings say: it waits for
            // an https URL and is looked at again after `HOLD_RECHECK`.
            let ours = self.store.hold(id, owner, now + HOLD_RECHECK, now).await?;
            return Ok(Processed::Done(if ours { JobResult::Held } else { JobResult::Lost }));
        }
        let state = ladder_state(d);
        if let Some(reason) = ladder::ceiling_reached(&state, now, &self.config.ladder) {
            let ours = self.store.fail_unsent(id, owner, reason, now).await?;
            return Ok(Processed::Done(if ours { JobResult::Failed } else { JobResult::Lost }));
        }
        let probe = match self.admit(&job, breaker, now).await? {
            Admitted::Send { probe } => probe,
            Admitted::Defer { until } => {
                // Deferral spends nothing, but never carries a delivery past a ceiling.
                let (ours, result) = match ladder::ceiling_reached(&state, until, &self.config.ladder) {
                    Some(reason) => (self.store.fail_unsent(id, owner, reason, now).await?, JobResult::Failed),
                    None => (self.store.defer(id, owner, until, now).await?, JobResult::Deferred),
                };
                return Ok(Processed::Done(if ours { result } else { JobResult::Lost }));
            }
        };
        let Sent { outcome, status_code, error, response_body, response_truncated, request_headers, response_headers, latency_ms } =
            self.send(&job, now).await;
        let done = self.clock.now();
        let decision = ladder::decide(&state, outcome, done, &self.config.ladder);
        Ok(Processed::Sent(AttemptRecord {
            attempt: Attempt {
                id: AttemptId::generate(),
                delivery_id: id.clone(),
                merchant_id: d.merchant_id.clone(),
                at: now,
                ladder: d.ladder,
                outcome,
                status_code,
                latency_ms,
                error,
                response_body,
                response_truncated,
                request_headers,
                response_headers,
                probe,
            },
            decision,
        }, holder))
    }

    /// The lease owner name of `holder`'s rows.
    fn owner(&self, holder: Holder) -> &str {
        match (holder, &self.handoff) {
            (Holder::Handoff, Some(h)) => h.owner(),
            _ => &self.config.instance_id,
        }
    }

    /// Whether the merchant's breaker lets this delivery go now. `b` is the
    /// breaker as read with the job; re-read only after a lost CAS.
    async fn admit(&self, job: &Job, mut b: merchant_breaker::MerchantBreaker, now: Timestamp) -> Result<Admitted, WorkerError> {
        loop {
            match merchant_breaker::admit(&b, &job.delivery.id, now, &self.config.breaker) {
                MerchantAdmission::Send => return Ok(Admitted::Send { probe: false }),
                MerchantAdmission::Defer { until } => return Ok(Admitted::Defer { until }),
                MerchantAdmission::Probe(next) => {
                    if self.store.cas_breaker(&next).await? {
                        return Ok(Admitted::Send { probe: true });
                    }
                    b = self.store.breaker(&job.merchant.id).await?;
                }
            }
        }
    }

    async fn record_breaker(&self, merchant: &MerchantId, id: &DeliveryId, outcome: AttemptOutcome, now: Timestamp) -> Result<(), WorkerError> {
        loop {
            let b = self.store.breaker(merchant).await?;
            let window = self.store.window(merchant, b.window_start(now, &self.config.breaker)).await?;
            let Some(next) = merchant_breaker::record(&b, id, outcome, window, now, &self.config.breaker) else {
                return Ok(());
            };
            if self.store.cas_breaker(&next).await? {
                tracing::info!(merchant = %merchant, from = %b.status, to = %next.status, pause_s = next.pause.as_secs(), "merchant breaker moved");
                if next.status == BreakerStatus::Closed {
                    self.store.drain_deferred(merchant, now).await?;
                }
                return Ok(());
            }
        }
    }

    /// Sign and POST, and read at most `max_response_bytes` of the answer.
    async fn send(&self, job: &Job, now: Timestamp) -> Sent {
        let m = &job.merchant;
        let started = Instant::now();
        let elapsed = |s: Instant| i64::try_from(s.elapsed().as_millis()).unwrap_or(i64::MAX);
        if let Err(e) = self.config.ssrf.check_url(&m.url) {
            return Sent::unsent(AttemptOutcome::Network, format!("refused: {e}"), 0);
        }
        let headers = match signing::sign(m.scheme, &m.signing_secrets(now), job.delivery.id.as_str(), now.as_secs(), job.payload.as_bytes()) {
            Ok(h) => h,
            Err(e) => return Sent::unsent(AttemptOutcome::Network, format!("signing: {e}"), 0),
        };
        const USER_AGENT: &str = "Sluice-Webhooks/1";
        let sent_headers = capture::request_headers(
            [("content-type", "application/json"), ("user-agent", USER_AGENT)]
                .into_iter()
                .chain(headers.iter().map(|(k, v)| (*k, v.as_str()))),
        );
        let mut req = self.client.post(&m.url).body(job.payload.clone());
        for (name, value) in &sent_headers {
            req = req.header(name, value);
        }
        let mut resp = match req.send().await {
            Ok(r) => r,
            Err(e) => {
                let outcome = if e.is_timeout() { AttemptOutcome::Timeout } else { AttemptOutcome::Network };
                let text = match certificate_error(&e) {
                    Some(cert) => format!("TLS certificate error: {cert} ({})", error_chain(&e)),
                    None => error_chain(&e),
                };
                return Sent { request_headers: Some(sent_headers), ..Sent::unsent(outcome, text, elapsed(started)) };
            }
        };
        let code = resp.status().as_u16();
        let secrets: Vec<&str> = [Some(m.secret.as_str()), m.previous_secret.as_deref()].into_iter().flatten().collect();
        let response_headers = capture::response_headers(resp.headers(), &secrets);
        let limit = capture::read_limit(self.config.max_response_bytes);
        let mut body = Vec::new();
        let mut body_error = None;
        while body.len() < limit {
            match resp.chunk().await {
                Ok(Some(chunk)) => body.extend_from_slice(&chunk),
                Ok(None) => break,
                Err(e) => {
                    body_error = Some(error_chain(&e));
                    break;
                }
            }
        }
        let more = body.len() >= limit;
        let (text, response_truncated) = capture::body_snippet(&body, more, self.config.max_response_bytes, &secrets);
        let outcome = AttemptOutcome::from_status(code);
        let error = match outcome {
            AttemptOutcome::Success => None,
            _ => Some(body_error.unwrap_or_else(|| format!("HTTP {code}"))),
        };
        Sent {
            outcome,
            status_code: Some(code),
            error,
            response_body: (!text.is_empty()).then_some(text),
            response_truncated,
            request_headers: Some(sent_headers),
            response_headers: Some(response_headers),
            latency_ms: elapsed(started),
        }
    }
}

/// The merchant breaker's answer for one claimed delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Admitted {
    /// Send it now; `probe` when it is the half-open breaker's trial request.
    Send { probe: bool },
    /// Put it back until the breaker lets it go.
    Defer { until: Timestamp },
}

/// What one signed POST came to.
#[derive(Debug)]
struct Sent {
    outcome: AttemptOutcome,
    /// The HTTP status, when an answer came back.
    status_code: Option<u16>,
    /// Why it did not succeed: transport error, or `HTTP <code>`.
    error: Option<String>,
    /// The start of the answer's body, as text (secrets redacted).
    response_body: Option<String>,
    /// The body went on past `response_body`.
    response_truncated: bool,
    /// What was sent, when a request went out.
    request_headers: Option<Headers>,
    /// The answer's headers (credentials redacted), when one came back.
    response_headers: Option<Headers>,
    latency_ms: i64,
}

impl Sent {
    /// No answer came back (refused, not signed, network, timeout).
    fn unsent(outcome: AttemptOutcome, error: String, latency_ms: i64) -> Sent {
        Sent {
            outcome,
            status_code: None,
            error: Some(error),
            response_body: None,
            response_truncated: false,
            request_headers: None,
            response_headers: None,
            latency_ms,
        }
    }
}

pub(crate) fn ladder_state(d: &Delivery) -> LadderState {
    LadderState {
        is_money: d.is_money,
        fast_attempts: d.fast_attempts,
        slow_steps: d.slow_steps,
        slow_started_at: d.slow_started_at,
        cycle_started_at: d.cycle_started_at,
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

/// The certificate problem behind a failed connect, if that is what it was:
/// the merchant's HTTPS certificate did not verify (expired, self-signed,
/// wrong host, unknown issuer). `io::Error` does not hand out the error it
/// wraps as its `source`, so each one in the chain is looked into.
pub fn certificate_error(e: &(dyn std::error::Error + 'static)) -> Option<String> {
    const INVALID: &str = "invalid peer certificate: ";
    let mut next = Some(e);
    while let Some(err) = next {
        let tls = err
            .downcast_ref::<rustls::Error>()
            .or_else(|| err.downcast_ref::<std::io::Error>().and_then(|io| io.get_ref()).and_then(|inner| inner.downcast_ref::<rustls::Error>()));
        if let Some(rustls::Error::InvalidCertificate(reason)) = tls {
            return Some(format!("{reason:?}"));
        }
        // Layers between reqwest and rustls may hand the error on only as
        // text; rustls words every certificate error this way.
        if let Some(reason) = err.to_string().strip_prefix(INVALID) {
            return Some(reason.to_owned());
        }
        next = err.source();
    }
    None
}
