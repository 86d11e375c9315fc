//! Server integration tests: one binary, each test with its own application
//! on port 0 and its own database.

mod accounts;
mod api;
mod assets;
mod api_contract;
mod api_retry_profiles;
mod api_upstream_breakers;
mod api_webhooks;
mod auth;
mod cli;
mod deliveries_ui;
mod demo;
mod faults;
mod helpers;
mod limits;
mod ops;
mod pages;
mod quotas;
mod security;
mod sessions;
