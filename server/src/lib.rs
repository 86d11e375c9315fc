//! The `sluice` server: one binary that serves the web application, the
//! worker HTTP API, metrics and health, and runs the background workers.
//!
//! [`startup::Application`] wires everything from validated
//! [`config::Settings`]; tests build one on port 0 and talk to it over HTTP.

pub mod config;
pub mod demo;
pub mod health;
pub mod http;
pub mod sessions;
pub mod startup;
pub mod state;
pub mod telemetry;
