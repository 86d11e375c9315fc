//! What permits and penalties share: the request description and the mapping
//! of limiter errors to API errors.

use axum::http::StatusCode;
use serde::Deserialize;
use sluice_engine::quota::{QuotaError, QuotaRequest};
use utoipa::ToSchema;

use super::error::ApiError;

/// Which upstream call is meant: resolves to one limit rule.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TargetIn {
    /// Upstream account; without it the `_global` bucket is used.
    pub account: Option<String>,
    /// API domain, e.g. `vtex_pricing`.
    pub scope: String,
    /// HTTP method of the upstream call; without it only rules for any method match.
    pub method: Option<String>,
    /// Concrete path of the upstream call.
    pub path: String,
}

impl TargetIn {
    pub fn to_request(&self) -> Result<QuotaRequest, ApiError> {
        if self.scope.is_empty() || self.scope.len() > 64 {
            return Err(ApiError::invalid("invalid_input", "scope must be 1–64 characters"));
        }
        if !self.path.starts_with('/') || self.path.len() > 2048 {
            return Err(ApiError::invalid("invalid_input", "path must start with '/' and be at most 2048 characters"));
        }
        let method = self.method.as_deref().unwrap_or("").to_ascii_uppercase();
        let mut req = QuotaRequest::new(&self.scope, method, &self.path);
        if let Some(account) = &self.account {
            req = req.account(account);
        }
        Ok(req)
    }
}

pub fn no_rule(target: &TargetIn) -> ApiError {
    ApiError::new(
        StatusCode::UNPROCESSABLE_ENTITY,
        "no_rule",
        format!("no limit rule matches scope '{}' {} {}", target.scope, target.method.as_deref().unwrap_or("(any method)"), target.path),
    )
}

impl From<QuotaError> for ApiError {
    fn from(e: QuotaError) -> ApiError {
        match &e {
            QuotaError::InvalidCost { .. } => ApiError::invalid("invalid_cost", e.to_string()),
            QuotaError::InvalidAccount => ApiError::invalid("invalid_account", e.to_string()),
            QuotaError::Store(_) => ApiError::store_unavailable(&e),
        }
    }
}
