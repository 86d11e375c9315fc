//! What permits and penalties share: the request description and the mapping
//! of limiter errors to API errors.

use axum::http::StatusCode;
use serde::Deserialize;
use sluice_engine::quota::{Priority, QuotaError, QuotaRequest};
use utoipa::ToSchema;

use super::error::{ApiError, FieldError};

/// Which upstream call is meant: resolves to one limit rule.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TargetIn {
    #[schema(schema_with = super::quota_input::account_schema)]
    pub account: Option<String>,
    /// API domain, e.g. `vtex_pricing`.
    pub scope: String,
    /// HTTP method of the upstream call; without it only rules for any method match.
    pub method: Option<String>,
    /// Concrete path of the upstream call.
    pub path: String,
    #[schema(schema_with = super::quota_input::priority_schema)]
    pub priority: Option<String>,
}

impl TargetIn {
    /// Every invalid field of the target, for a 422 that names them all.
    pub fn problems(&self) -> Vec<FieldError> {
        let mut problems = Vec::new();
        if self.scope.is_empty() || self.scope.len() > 64 {
            problems.push(FieldError::new("scope", "must be 1–64 characters"));
        }
        if !self.path.starts_with('/') || self.path.len() > 2048 {
            problems.push(FieldError::new("path", "must start with '/' and be at most 2048 characters"));
        }
        if parse_priority(self.priority.as_deref()).is_err() {
            problems.push(priority_problem());
        }
        problems
    }

    /// The limiter's request, once [`TargetIn::problems`] found none.
    pub fn request(&self) -> QuotaRequest {
        let method = self.method.as_deref().unwrap_or("").to_ascii_uppercase();
        let priority = parse_priority(self.priority.as_deref()).unwrap_or_default();
        let mut req = QuotaRequest::new(&self.scope, method, &self.path).priority(priority);
        if let Some(account) = &self.account {
            req = req.account(account);
        }
        req
    }
}

/// 422 naming every field in `problems`, or nothing when there are none.
pub fn reject(problems: Vec<FieldError>) -> Result<(), ApiError> {
    if problems.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid_fields("invalid_input", problems))
    }
}

/// The schema of every `account` field: a string, described by the one
/// account rule the engine enforces (`sluice_engine::account`).
pub fn account_schema() -> utoipa::openapi::Object {
    utoipa::openapi::ObjectBuilder::new()
        .schema_type(utoipa::openapi::schema::Type::String)
        .description(Some(format!(
            "The upstream account (a seller, a shop) whose quota this spends. {}",
            sluice_engine::account::ACCOUNT_RULE
        )))
        .build()
}

/// The lane a request names; `normal` when it names none.
pub fn parse_priority(priority: Option<&str>) -> Result<Priority, sluice_engine::quota::lane::InvalidPriority> {
    priority.map_or(Ok(Priority::Normal), str::parse)
}

pub fn priority_problem() -> FieldError {
    FieldError::new("priority", "must be one of high, normal, low")
}

/// The schema of every `priority` field.
pub fn priority_schema() -> utoipa::openapi::Object {
    utoipa::openapi::ObjectBuilder::new()
        .schema_type(utoipa::openapi::schema::Type::String)
        .enum_values(Some(Priority::ALL.map(Priority::as_str)))
        .default(Some(serde_json::json!("normal")))
        .description(Some(
            "The lane of the request (docs/limiter.md, Priority lanes): `normal` books ahead up to the wait \
             ceiling, `high` one slot beyond it, `low` takes a permit only when one is free now \
             (and, on a token bucket, never the last free token). Accepted and \
             ignored where it does not apply (penalties, breaker reports).",
        ))
        .build()
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
            QuotaError::InvalidCost { capacity, .. } => {
                ApiError::invalid_field("invalid_cost", "cost", format!("must be between 1 and the rule's capacity {capacity}"))
            }
            QuotaError::InvalidAccount(why) => invalid_account(why),
            QuotaError::Store(_) => ApiError::store_unavailable(&e),
        }
    }
}

/// The 422 for an account id the engine's one rule refuses (permits,
/// penalties, leases and breaker keys alike).
pub fn invalid_account(why: &sluice_engine::account::InvalidAccount) -> ApiError {
    ApiError::invalid_field("invalid_account", "account", format!("{}; {}", why.problem, sluice_engine::account::ACCOUNT_RULE))
}
