//! Server integration tests: one binary, each test with its own application
//! on port 0 and its own database.

mod api;
mod auth;
mod cli;
mod helpers;
mod ops;
mod pages;
mod quotas;
