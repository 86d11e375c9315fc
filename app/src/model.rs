//! Values that travel between server and browser. Plain serde structs: the
//! wasm build must not depend on the engine's types.

use serde::{Deserialize, Serialize};

/// State of one dependency, as the Overview page and `/readyz` report it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ComponentState {
    /// Reachable and answering.
    Up,
    /// Not configured in this deployment (e.g. Redis in embedded mode).
    NotConfigured,
    /// Configured but not answering; the text says why.
    Down(String),
}

impl ComponentState {
    pub fn is_ready(&self) -> bool {
        !matches!(self, ComponentState::Down(_))
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HealthView {
    /// `postgres` or `sqlite`.
    pub database_backend: String,
    pub database: ComponentState,
    /// `memory` (embedded) or `redis`.
    pub quota_store: String,
    pub redis: ComponentState,
    /// The limiter's own view: `healthy`, `degraded` (local fallback share
    /// while Redis is down) or `unavailable` (failing closed).
    pub quota_mode: String,
    pub version: String,
}

impl HealthView {
    pub fn is_ready(&self) -> bool {
        self.database.is_ready() && self.redis.is_ready()
    }
}

/// How long data is kept, in days (the retention settings), for the pages
/// that say so.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetentionDays {
    pub delivered: u64,
    pub failed: u64,
    pub audit: u64,
}

#[cfg(feature = "ssr")]
impl From<&sluice_engine::retention::RetentionConfig> for RetentionDays {
    fn from(c: &sluice_engine::retention::RetentionConfig) -> Self {
        let days = |d: std::time::Duration| d.as_secs() / 86_400;
        RetentionDays { delivered: days(c.delivered), failed: days(c.failed), audit: days(c.audit) }
    }
}

/// One form field the server refused, and why: shown next to that field.
/// Every form answers with one per invalid field, all at once.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FieldError {
    pub field: String,
    pub message: String,
}

impl FieldError {
    pub fn new(field: &str, message: impl Into<String>) -> FieldError {
        FieldError { field: field.to_owned(), message: message.into() }
    }
}

/// The message for `field` among `errors`, if any.
pub fn error_for(errors: &[FieldError], field: &str) -> Option<String> {
    errors.iter().find(|e| e.field == field).map(|e| e.message.clone())
}

/// What a person may do: `viewer` < `support` < `admin` (the engine's roles,
/// mirrored here because the wasm build does not link the engine).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Viewer,
    Support,
    Admin,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Support => "support",
            Role::Admin => "admin",
        }
    }

    pub fn allows(self, needed: Role) -> bool {
        self >= needed
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The signed-in person, as pages see them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionUser {
    pub username: String,
    pub role: Role,
}
