//! The upstream circuit breaker: one per (account, scope), shared by every
//! worker and instance through a store.
//!
//! The transitions are pure ([`decision::decide`], [`decision::record`]); a
//! store only loads a state (with the store's own clock reading and a version)
//! and writes it back if nobody wrote in between. [`UpstreamBreaker`] runs that
//! load → decide → compare-and-set loop, so the memory and Redis backends
//! cannot disagree on the logic.
//!
//! This breaker protects an upstream API (a marketplace) from our workers.
//! Merchant webhook endpoints have their own, differently shaped breaker in the
//! delivery module.

pub mod admin;
pub mod decision;
pub mod lazy;
pub mod memory;
pub mod permits;
pub mod redis;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use crate::clock::Timestamp;
pub use decision::{UpstreamAdmission, UpstreamBreakerConfig, BreakerState, Phase};

/// Which breaker: an account's calls to one API scope.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct BreakerKey {
    account: String,
    scope: String,
}

pub use crate::quota::stats::GLOBAL_ACCOUNT;

impl BreakerKey {
    /// `account` `None` (or empty) means [`GLOBAL_ACCOUNT`]; otherwise it
    /// follows [`crate::account::ACCOUNT_RULE`], as for quotas. The scope
    /// must be 1–128 visible ASCII characters without braces (it ends up in
    /// Redis keys, where braces mark the hash tag).
    pub fn new(account: Option<&str>, scope: &str) -> Result<Self, BreakerError> {
        let account = crate::account::parse_account(account)?;
        let ok = (1..=128).contains(&scope.len()) && scope.bytes().all(|b| b.is_ascii_graphic() && b != b'{' && b != b'}');
        if !ok {
            return Err(BreakerError::InvalidKey { what: "scope", value: scope.to_owned() });
        }
        Ok(BreakerKey { account, scope: scope.to_owned() })
    }

    pub fn account(&self) -> &str {
        &self.account
    }

    pub fn scope(&self) -> &str {
        &self.scope
    }
}

impl fmt::Display for BreakerKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.account, self.scope)
    }
}

/// A stored state as loaded: the state, its version for compare-and-set, and
/// the store's clock at the time of loading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Loaded {
    pub state: BreakerState,
    pub version: u64,
    pub now: Timestamp,
}

/// Failures of a breaker store.
#[derive(Debug, thiserror::Error)]
pub enum BreakerError {
    #[error("invalid breaker {what} {value:?}")]
    InvalidKey { what: &'static str, value: String },
    #[error(transparent)]
    InvalidAccount(#[from] crate::account::InvalidAccount),
    #[error("breaker store unavailable")]
    Store(#[source] Box<dyn std::error::Error + Send + Sync>),
    #[error("breaker store holds an unreadable state for {key}: {detail}")]
    Corrupt { key: String, detail: String },
    #[error("breaker {key} changed under us {attempts} times in a row")]
    Contention { key: String, attempts: u32 },
}

/// Where breaker states live. Implementations only load and conditionally
/// store; all decisions are made by [`UpstreamBreaker`].
#[async_trait::async_trait]
pub trait BreakerStore: Send + Sync + fmt::Debug {
    /// The current state (a fresh closed one if absent), its version (0 if
    /// absent) and the store's clock.
    async fn load(&self, key: &BreakerKey) -> Result<Loaded, BreakerError>;

    /// Store `state` if the version is still `version`; the stored version
    /// becomes `version + 1` and the key lives `ttl` longer. `false` if another
    /// writer came first.
    async fn compare_and_set(
        &self,
        key: &BreakerKey,
        version: u64,
        state: &BreakerState,
        ttl: Duration,
    ) -> Result<bool, BreakerError>;

    /// Every breaker the store holds, with the store's clock.
    async fn list(&self) -> Result<(Vec<(BreakerKey, BreakerState)>, Timestamp), BreakerError>;

    /// Forget a breaker (it reads as closed afterwards).
    async fn reset(&self, key: &BreakerKey) -> Result<(), BreakerError>;
}

/// A breaker as the UI, the API and the audit log show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BreakerView {
    pub account: String,
    pub scope: String,
    pub phase: Phase,
    pub consecutive_failures: u32,
    pub opened_at: Option<Timestamp>,
    pub next_probe_at: Option<Timestamp>,
    pub probe_successes: u32,
    pub trips: u64,
}

impl BreakerView {
    pub fn new(key: &BreakerKey, s: &BreakerState) -> BreakerView {
        BreakerView {
            account: key.account.clone(),
            scope: key.scope.clone(),
            phase: s.phase,
            consecutive_failures: s.consecutive_failures,
            opened_at: s.opened_at,
            next_probe_at: s.next_probe_at,
            probe_successes: s.probe_successes,
            trips: s.trips,
        }
    }
}

/// An admission with the state it left behind and the store's clock, for
/// callers that tell a worker how long to wait (HTTP).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Admitted {
    pub admission: UpstreamAdmission,
    pub state: BreakerState,
    pub now: Timestamp,
}

impl Admitted {
    /// How long a rejected caller should wait (zero when admitted).
    pub fn retry_after(&self) -> Duration {
        match self.admission {
            UpstreamAdmission::Rejected { retry_at } => retry_at.saturating_duration_since(self.now),
            _ => Duration::ZERO,
        }
    }
}

/// The upstream breakers of one deployment: a store and the thresholds.
#[derive(Debug, Clone)]
pub struct UpstreamBreaker {
    store: Arc<dyn BreakerStore>,
    config: UpstreamBreakerConfig,
}

/// How often `admit` / `record` reload after losing a compare-and-set race.
/// Every round has a winner, so N writers racing on one breaker all finish
/// within N rounds; this allows for dozens of workers failing at once.
const CAS_ATTEMPTS: u32 = 64;

impl UpstreamBreaker {
    pub fn new(store: Arc<dyn BreakerStore>, config: UpstreamBreakerConfig) -> Self {
        UpstreamBreaker { store, config }
    }

    /// The same store with other thresholds.
    pub fn new_like(other: &UpstreamBreaker, config: UpstreamBreakerConfig) -> Self {
        UpstreamBreaker { store: other.store.clone(), config }
    }

    pub fn config(&self) -> &UpstreamBreakerConfig {
        &self.config
    }

    /// May a call to `key` go out now?
    pub async fn admit(&self, key: &BreakerKey) -> Result<UpstreamAdmission, BreakerError> {
        Ok(self.admit_with_state(key).await?.admission)
    }

    /// [`UpstreamBreaker::admit`], with the state after it and the store's clock.
    pub async fn admit_with_state(&self, key: &BreakerKey) -> Result<Admitted, BreakerError> {
        self.update(key, |state, now, config| {
            let (admission, next) = decision::decide(state, now, config);
            (Admitted { admission, state: next, now }, next)
        })
        .await
    }

    /// The breaker as it stands, without changing it.
    pub async fn view(&self, key: &BreakerKey) -> Result<BreakerView, BreakerError> {
        Ok(BreakerView::new(key, &self.store.load(key).await?.state))
    }

    /// Report how a call to `key` went (`failed`: 5xx, timeout, network error).
    pub async fn record(&self, key: &BreakerKey, failed: bool) -> Result<BreakerState, BreakerError> {
        self.update(key, |state, now, config| {
            let next = decision::record(state, failed, now, config);
            (next, next)
        })
        .await
    }

    /// A probe admitted by [`UpstreamBreaker::admit`] was never sent.
    pub async fn abandon_probe(&self, key: &BreakerKey) -> Result<(), BreakerError> {
        self.update(key, |state, _now, _config| ((), decision::abandon_probe(state))).await
    }

    /// Every known breaker, for the UI, ordered by account and scope.
    pub async fn list(&self) -> Result<Vec<BreakerView>, BreakerError> {
        let (mut all, _now) = self.store.list().await?;
        all.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(all.iter().map(|(key, s)| BreakerView::new(key, s)).collect())
    }

    /// Forget a breaker: it reads as closed afterwards. Support staff reset
    /// through [`admin::UpstreamBreakerAdmin`], which audits it.
    pub async fn reset(&self, key: &BreakerKey) -> Result<(), BreakerError> {
        self.store.reset(key).await
    }

    async fn update<T>(
        &self,
        key: &BreakerKey,
        step: impl Fn(&BreakerState, Timestamp, &UpstreamBreakerConfig) -> (T, BreakerState),
    ) -> Result<T, BreakerError> {
        for _ in 0..CAS_ATTEMPTS {
            let loaded = self.store.load(key).await?;
            let (answer, next) = step(&loaded.state, loaded.now, &self.config);
            // Unchanged states are not written: the common path (closed, no
            // failures) costs one round trip.
            if next == loaded.state
                || self.store.compare_and_set(key, loaded.version, &next, self.config.key_ttl).await?
            {
                return Ok(answer);
            }
            tokio::task::yield_now().await;
        }
        Err(BreakerError::Contention { key: key.to_string(), attempts: CAS_ATTEMPTS })
    }
}
