//! Webhook delivery: a durable outbox of events, delivered to merchants with
//! two retry ladders and a per-merchant circuit breaker (the long form with
//! a worked timeline is `docs/delivery.md`).
//!
//! Layout:
//! - pure decisions, no IO and no clock: [`money`] (which events move money),
//!   [`ladder`] (what happens after an attempt), [`merchant_breaker`] (the merchant
//!   breaker's transitions), [`signing`] (headers and the receiver's verify
//!   helper), [`ssrf`] (which addresses a request may reach), [`capture`]
//!   (what an attempt keeps of the exchange, credentials redacted);
//! - IO: [`store`] (the repository over `Db`, PostgreSQL or SQLite),
//!   [`queries`] (reads for the UI and API), [`ops`] (support operations that
//!   return before/after for the audit log), [`worker`] (claim, send, record),
//!   [`intake`] (group commit) and [`handoff`] (intake to steps, in memory).
//!
//! Life of a delivery: intake ([`store::DeliveryStore::accept_events`]) stores
//! the event and one PENDING delivery in one transaction, idempotent by
//! `(merchant_id, idempotency_key)`; on an instance that also delivers,
//! intake stores it already claimed for its own steps ([`handoff`]). A
//! worker claims due rows (DELIVERING with a lease), asks the breaker, sends, writes the attempt and the
//! ladder's decision (PENDING again with a new `next_attempt_at`, DELIVERED
//! or FAILED) in one transaction. A worker that dies leaves its rows
//! DELIVERING; once the lease runs out any worker claims them again and sends
//! with the same `X-Webhook-Id`: delivery is at least once, never lost.
//!
//! Routing: an event names its one merchant (`EventIn::merchant_id`); the
//! tables allow one delivery per (event, merchant) should fan-out to several
//! merchants ever be needed.

pub mod batch;
pub mod capture;
pub mod handoff;
pub mod intake;
pub mod merchant_breaker;
pub mod ladder;
pub mod model;
pub mod money;
pub mod ops;
pub mod queries;
pub(crate) mod row;
pub mod signing;
pub mod ssrf;
pub mod store;
pub mod wake;
pub mod worker;

pub use model::*;
pub use intake::Intake;
pub use store::{DeliveryStore, StoreError};
pub use wake::Wake;
pub use worker::{StepReport, Worker, WorkerConfig, WorkerError};
