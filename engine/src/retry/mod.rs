//! Retrying upstream calls: classify each attempt, wait by the policy, and go
//! through the shared-quota limiter and the upstream breaker every time.
//!
//! - [`outcome`]: 2xx / 429 / 5xx / network / non-retryable.
//! - [`retry_after`]: RFC 9110 `Retry-After` (seconds and all three date forms),
//!   the one parser of the header, also used by the HTTP API.
//! - [`policy`]: the validated [`RetryPolicy`] and the pure delay function;
//!   [`jitter`]: the backoff shapes (`additive`, `none`, `full`, `equal`,
//!   `decorrelated`).
//! - [`profiles`]: named policies (presets `default`, `wb`, `vtex`) chosen per
//!   scope; [`profiles_repo`]: stored in `retry_profiles`, hot-reloaded.
//! - [`gate`]: what the executor needs from the limiter ([`QuotaGate`]);
//!   [`quota_gate`] implements it for the shared-quota [`Limiter`](crate::quota::Limiter).
//! - [`executor`]: the loop ([`RetryExecutor::run`]) and its give-up reasons.
//! - [`middleware`]: the same as `reqwest-middleware`, for Rust workers.
//!
//! A worker calling a marketplace API; every attempt takes a permit from the
//! shared limiter, a 429 penalizes the bucket, a 2xx's `X-RateLimit-*`
//! headers are observed, and a give-up says why. Add `.with_breaker(..)` to
//! the executor for the upstream breaker.
//!
//! ```no_run
//! # use std::sync::Arc; use sluice_engine::retry::{*, middleware::*};
//! # async fn worker(limiter: sluice_engine::quota::Limiter, clock: sluice_engine::clock::SharedClock) -> anyhow::Result<()> {
//! let retry = RetryMiddleware::new(Arc::new(RetryExecutor::new(Arc::new(limiter), clock)))
//!     .scope_for_host("marketplace-api.wildberries.ru", "marketplace");
//! let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new()).with(retry).build();
//! let orders = client.get("https://marketplace-api.wildberries.ru/api/v3/orders/new")
//!     .with_extension(Account::new("seller-42"))
//!     .send().await?;
//! # let _ = orders; Ok(()) }
//! ```

pub mod executor;
pub mod gate;
pub mod jitter;
pub mod middleware;
pub mod outcome;
pub mod policy;
pub mod profiles;
pub mod profiles_repo;
pub mod quota_gate;
pub mod retry_after;
#[cfg(any(test, feature = "testing"))]
pub mod retry_after_cases;

pub use executor::{
    Call, Completed, GiveUpReason, LastAttempt, RetryError, RetryExecutor, SendAttempt, TransportError,
    UpstreamResponse,
};
pub use gate::{CallTarget, GateError, GatePermit, GateRefusal, QuotaGate};
pub use outcome::{NetworkFailure, Outcome};
pub use jitter::Jitter;
pub use policy::{PolicyError, RateLimitFacts, RetryAfterMode, RetryOn, RetryPolicy, RetryPolicyConfig};
pub use profiles::{RetryProfile, RetryProfiles};
