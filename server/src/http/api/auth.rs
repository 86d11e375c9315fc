//! `Authorization: Bearer <token>`: who is calling and what they may do.

use axum::extract::FromRequestParts;
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;

use super::error::ApiError;
use crate::state::AppState;
use sluice_engine::tokens::{ApiScope, ApiToken};

/// The authenticated caller. Taking it as an argument makes a route need a
/// live token; [`Caller::require`] checks the scope.
#[derive(Debug, Clone)]
pub struct Caller(pub ApiToken);

impl Caller {
    pub fn require(&self, needed: ApiScope) -> Result<(), ApiError> {
        if self.0.scope.allows(needed) {
            Ok(())
        } else {
            Err(ApiError::forbidden(format!("this needs a token with the '{needed}' scope; this one has '{}'", self.0.scope)))
        }
    }

    /// The name written to the audit log.
    pub fn actor(&self) -> String {
        self.0.name.clone()
    }
}

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        let header = parts
            .headers
            .get(AUTHORIZATION)
            .ok_or_else(|| ApiError::unauthorized("missing 'Authorization: Bearer <token>' header"))?;
        let secret = header
            .to_str()
            .ok()
            .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")))
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .ok_or_else(|| ApiError::unauthorized("the Authorization header must be 'Bearer <token>'"))?;
        match state.app_context.api_tokens.authenticate(&state.db, secret, state.clock.now()).await {
            Ok(Some(token)) => Ok(Caller(token)),
            Ok(None) => Err(ApiError::unauthorized("unknown or revoked token")),
            Err(e) => Err(ApiError::internal("checking an API token", &e)),
        }
    }
}

/// A caller with an admin token. Checked before the body is read, so a
/// worker token gets 403 whatever it sends.
#[derive(Debug, Clone)]
pub struct AdminCaller(pub Caller);

impl FromRequestParts<AppState> for AdminCaller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        let caller = Caller::from_request_parts(parts, state).await?;
        caller.require(ApiScope::Admin)?;
        Ok(AdminCaller(caller))
    }
}
