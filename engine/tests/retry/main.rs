//! Retry executor, upstream breaker and middleware: scenario tests on a manual
//! clock, HTTP tests against a local axum server, and the breaker contract
//! suite run on every store. One binary, to link once.

mod breaker_contract;
mod fake_gate;
mod http_server;
mod permits;
mod quota;
mod scenarios;
