//! The API's one error type and its JSON body `{"code", "message"}`.
//!
//! Codes are stable (clients branch on them); messages are for people. Causes
//! of internal errors are logged once here and never sent to the client.

use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;

/// The body of every API error.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorOut {
    /// Stable machine-readable code, e.g. `unauthorized`, `invalid_json`, `no_rule`.
    pub code: &'static str,
    /// What went wrong, for people.
    pub message: String,
}

#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError { status, code, message: message.into() }
    }

    pub fn unauthorized(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", message)
    }

    pub fn forbidden(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::FORBIDDEN, "forbidden", message)
    }

    /// Well-formed JSON whose values make no sense (422).
    pub fn invalid(code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, code, message)
    }

    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    /// The quota store is down: retry later.
    pub fn store_unavailable(err: &(dyn std::error::Error + 'static)) -> ApiError {
        log_cause("quota store unavailable", err);
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "store_unavailable", "the quota store is unavailable; retry shortly")
    }

    /// A fault on our side. The cause is logged here, once, and not sent.
    pub fn internal(context: &str, err: &(dyn std::error::Error + 'static)) -> ApiError {
        log_cause(context, err);
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", "internal error; it has been logged")
    }

    pub fn status(&self) -> StatusCode {
        self.status
    }

    pub fn code(&self) -> &'static str {
        self.code
    }
}

fn log_cause(context: &str, err: &(dyn std::error::Error + 'static)) {
    let mut chain = err.to_string();
    let mut source = err.source();
    while let Some(s) = source {
        chain.push_str(": ");
        chain.push_str(&s.to_string());
        source = s.source();
    }
    tracing::error!(error = chain, "{context}");
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, axum::Json(ErrorOut { code: self.code, message: self.message })).into_response()
    }
}

impl From<JsonRejection> for ApiError {
    fn from(rejection: JsonRejection) -> ApiError {
        let (status, code) = match &rejection {
            JsonRejection::JsonDataError(_) => (StatusCode::UNPROCESSABLE_ENTITY, "invalid_body"),
            JsonRejection::JsonSyntaxError(_) => (StatusCode::BAD_REQUEST, "invalid_json"),
            JsonRejection::MissingJsonContentType(_) => (StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type"),
            _ if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE => (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large"),
            _ => (StatusCode::BAD_REQUEST, "invalid_body"),
        };
        // body_text() names the field and the problem ("cost: invalid value: -1…").
        ApiError::new(status, code, rejection.body_text())
    }
}

impl From<QueryRejection> for ApiError {
    fn from(rejection: QueryRejection) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "invalid_query", rejection.body_text())
    }
}

impl From<PathRejection> for ApiError {
    fn from(rejection: PathRejection) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "invalid_path", rejection.body_text())
    }
}

/// `axum::Json`, with rejections in the API's error format.
#[derive(Debug, Clone, Copy, Default, axum::extract::FromRequest)]
#[from_request(via(axum::Json), rejection(ApiError))]
pub struct Json<T>(pub T);

impl<T: Serialize> IntoResponse for Json<T> {
    fn into_response(self) -> Response {
        axum::Json(self.0).into_response()
    }
}

/// `axum::extract::Query`, with rejections in the API's error format.
#[derive(Debug, Clone, Copy, Default, axum::extract::FromRequestParts)]
#[from_request(via(axum::extract::Query), rejection(ApiError))]
pub struct Query<T>(pub T);

/// `axum::extract::Path`, with rejections in the API's error format.
#[derive(Debug, Clone, Copy, Default, axum::extract::FromRequestParts)]
#[from_request(via(axum::extract::Path), rejection(ApiError))]
pub struct Path<T>(pub T);
