//! Sluice's engine: the parts that decide, and the adapters that store.
//!
//! Decision code (quota math, retry delays, ladder steps, breaker transitions)
//! is pure: a function of `(state, now, config)` that performs no IO and never
//! reads a clock. Time comes from a [`clock::Clock`] that callers read once and
//! pass down; tests use [`clock::ManualClock`] and advance it by hand.
//!
//! This crate knows nothing of HTTP servers or HTML. IO lives in adapters
//! behind traits, one file per backend.

pub mod account;
pub mod clock;
pub mod db;
pub mod quota;
pub mod simulator;
pub mod upstream_breaker;
pub mod retry;
pub mod delivery;
pub mod periodic;
pub mod freed_memory;
pub mod log_throttle;
pub mod job_lease;
pub mod retention;
pub mod audit;
pub mod tokens;
pub mod users;
mod lazy_connect;
pub mod redis_conn;
