//! The API's one error type and its JSON bodies.
//!
//! Every error is `{"code", "message"}`; a 422 also carries `fields`, one
//! entry per invalid field of the request (the same messages the Limits page
//! shows next to its inputs), empty when no single field is to blame. Codes
//! are stable (clients branch on them); messages are for people. Causes of
//! internal errors are logged once here and never sent to the client.

use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use sluice_engine::log_throttle::{self, LogThrottle};
use utoipa::ToSchema;

/// The body of every API error but a 422.
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({"code": "unauthorized", "message": "missing 'Authorization: Bearer <token>' header"}))]
pub struct ErrorOut {
    /// Stable machine-readable code, e.g. `unauthorized`, `invalid_json`, `no_rule`.
    pub code: &'static str,
    /// What went wrong, for people.
    pub message: String,
}

/// The body of a 422: the request was well-formed JSON with values that make no sense.
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({
    "code": "invalid_rule",
    "message": "tokens: must be at least 1; interval_ms: must be greater than zero",
    "fields": [
        {"field": "tokens", "message": "must be at least 1"},
        {"field": "interval_ms", "message": "must be greater than zero"}
    ]
}))]
pub struct ValidationErrorOut {
    /// Stable machine-readable code, e.g. `invalid_body`, `invalid_rule`, `no_rule`.
    pub code: &'static str,
    /// Every problem in one line, for logs and people.
    pub message: String,
    /// One entry per invalid field; empty when the request as a whole is refused (`no_rule`).
    pub fields: Vec<FieldError>,
}

/// What is wrong with one field of the request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct FieldError {
    /// The field as the request named it; nested fields are dotted (`payload.id`).
    pub field: String,
    /// What is wrong with it, without the field's name (`must be at least 1`).
    pub message: String,
}

impl FieldError {
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> FieldError {
        FieldError { field: field.into(), message: message.into() }
    }
}

#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
    fields: Vec<FieldError>,
    /// Seconds, sent as `Retry-After` (503s).
    retry_after: Option<u64>,
}

/// How long a client waits before retrying when the database or a store is
/// unreachable: long enough not to hammer a restarting server, short enough
/// that service resumes within seconds of it answering again.
pub const UNAVAILABLE_RETRY_AFTER_SECS: u64 = 1;

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError { status, code, message: message.into(), fields: Vec::new(), retry_after: None }
    }

    pub fn unauthorized(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", message)
    }

    pub fn forbidden(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::FORBIDDEN, "forbidden", message)
    }

    /// Well-formed JSON that cannot be acted on as a whole (422, no field to blame).
    pub fn invalid(code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, code, message)
    }

    /// One field's value makes no sense (422).
    pub fn invalid_field(code: &'static str, field: impl Into<String>, message: impl Into<String>) -> ApiError {
        ApiError::invalid_fields(code, vec![FieldError::new(field, message)])
    }

    /// Several fields' values make no sense (422): all of them are reported at once.
    pub fn invalid_fields(code: &'static str, fields: Vec<FieldError>) -> ApiError {
        let message = fields.iter().map(|f| format!("{}: {}", f.field, f.message)).collect::<Vec<_>>().join("; ");
        ApiError { status: StatusCode::UNPROCESSABLE_ENTITY, code, message, fields, retry_after: None }
    }

    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    /// The quota store is down: retry later.
    pub fn store_unavailable(err: &(dyn std::error::Error + 'static)) -> ApiError {
        static THROTTLE: LogThrottle = LogThrottle::new(log_throttle::DEFAULT_PERIOD);
        THROTTLE.warn("quota store unavailable", err);
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "store_unavailable", "the quota store is unavailable; retry shortly")
            .retry_after(UNAVAILABLE_RETRY_AFTER_SECS)
    }

    /// A fault on our side. The cause is logged here, once, and not sent.
    /// When the cause is that the database cannot be reached (it is
    /// restarting, or the pool is exhausted), the answer is a 503
    /// `database_unavailable` with `Retry-After` instead: nothing was stored,
    /// and the same request will work shortly.
    pub fn internal(context: &str, err: &(dyn std::error::Error + 'static)) -> ApiError {
        if sluice_engine::db::is_unreachable(err) {
            // Every call fails alike while the database is down: one
            // warning per period, not one error per request.
            log_throttle::database_unreachable(context, err);
            return ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "database_unavailable",
                "the database is unreachable; nothing was stored, retry shortly",
            )
            .retry_after(UNAVAILABLE_RETRY_AFTER_SECS);
        }
        log_cause(context, err);
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", "internal error; it has been logged")
    }

    /// Send `Retry-After: secs` with the answer.
    pub fn retry_after(mut self, secs: u64) -> ApiError {
        self.retry_after = Some(secs);
        self
    }

    pub fn status(&self) -> StatusCode {
        self.status
    }

    pub fn code(&self) -> &'static str {
        self.code
    }

    pub fn fields(&self) -> &[FieldError] {
        &self.fields
    }
}

fn log_cause(context: &str, err: &(dyn std::error::Error + 'static)) {
    tracing::error!(error = log_throttle::error_chain(err), "{context}");
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = if self.status == StatusCode::UNPROCESSABLE_ENTITY {
            let body = ValidationErrorOut { code: self.code, message: self.message, fields: self.fields };
            (self.status, axum::Json(body)).into_response()
        } else {
            (self.status, axum::Json(ErrorOut { code: self.code, message: self.message })).into_response()
        };
        if let Some(secs) = self.retry_after {
            response.headers_mut().insert(axum::http::header::RETRY_AFTER, axum::http::HeaderValue::from(secs));
        }
        response
    }
}

impl From<JsonRejection> for ApiError {
    fn from(rejection: JsonRejection) -> ApiError {
        match &rejection {
            JsonRejection::JsonDataError(_) => match serde_error(&rejection) {
                Some(e) => ApiError::invalid_fields("invalid_body", vec![field_of(e)]),
                None => ApiError::invalid("invalid_body", rejection.body_text()),
            },
            JsonRejection::JsonSyntaxError(_) => ApiError::new(StatusCode::BAD_REQUEST, "invalid_json", rejection.body_text()),
            JsonRejection::MissingJsonContentType(_) => ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                "send the body as JSON with 'Content-Type: application/json'",
            ),
            _ if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE => {
                ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large", rejection.body_text())
            }
            _ => ApiError::new(StatusCode::BAD_REQUEST, "invalid_body", rejection.body_text()),
        }
    }
}

type SerdeError = serde_path_to_error::Error<serde_json::Error>;

/// The serde error inside axum's rejection, which knows the field's path.
fn serde_error(rejection: &JsonRejection) -> Option<&SerdeError> {
    let mut source = std::error::Error::source(rejection);
    while let Some(e) = source {
        if let Some(found) = e.downcast_ref::<SerdeError>() {
            return Some(found);
        }
        source = e.source();
    }
    None
}

/// The field a deserialization error is about, and what is wrong with it
/// without serde's "at line 1 column 9".
fn field_of(e: &SerdeError) -> FieldError {
    let inner = e.inner();
    let mut message = inner.to_string();
    let position = format!(" at line {} column {}", inner.line(), inner.column());
    if let Some(stripped) = message.strip_suffix(&position) {
        message = stripped.to_owned();
    }
    let path = e.path().to_string();
    // A missing field is reported at its parent; serde names it in
    // backticks ("missing field `scope`"). An unknown one is in the path.
    let missing = message.strip_prefix("missing field `").and_then(|rest| rest.split_once('`')).map(|(name, _)| name.to_owned());
    let field = match (missing, path.as_str()) {
        (Some(name), ".") => name,
        (Some(name), parent) => format!("{parent}.{name}"),
        (None, ".") => String::new(),
        (None, path) => path.to_owned(),
    };
    FieldError { field, message }
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

#[cfg(test)]
mod tests {
    use super::*;
    use axum::extract::FromRequest;
    use serde::Deserialize;

    #[allow(dead_code)]
    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Body {
        scope: String,
        cost: Option<u32>,
        inner: Option<Inner>,
    }

    #[allow(dead_code)]
    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Inner {
        n: u32,
    }

    async fn reject(body: &str) -> ApiError {
        let req = axum::http::Request::builder()
            .header("content-type", "application/json")
            .body(axum::body::Body::from(body.to_owned()))
            .expect("request");
        match Json::<Body>::from_request(req, &()).await {
            Ok(_) => panic!("{body} was accepted"),
            Err(e) => e,
        }
    }

    #[tokio::test]
    async fn a_wrongly_typed_missing_or_unknown_field_is_named() {
        let e = reject(r#"{"scope": "s", "cost": -1}"#).await;
        assert_eq!((e.status(), e.code()), (StatusCode::UNPROCESSABLE_ENTITY, "invalid_body"));
        assert_eq!(e.fields().len(), 1);
        assert_eq!(e.fields()[0].field, "cost");
        assert!(e.fields()[0].message.starts_with("invalid value: integer `-1`"), "{:?}", e.fields());
        assert!(!e.fields()[0].message.contains("line 1"), "{:?}", e.fields());

        let e = reject(r#"{"cost": 1}"#).await;
        assert_eq!(e.fields(), [FieldError::new("scope", "missing field `scope`")]);

        let e = reject(r#"{"scope": "s", "colour": 1}"#).await;
        assert_eq!(e.fields()[0].field, "colour");

        let e = reject(r#"{"scope": "s", "inner": {"n": "x"}}"#).await;
        assert_eq!(e.fields()[0].field, "inner.n");
    }

    #[tokio::test]
    async fn broken_json_is_400_not_a_field_error() {
        let e = reject(r#"{"scope": "#).await;
        assert_eq!((e.status(), e.code()), (StatusCode::BAD_REQUEST, "invalid_json"));
    }

    #[test]
    fn field_errors_are_joined_into_the_message_too() {
        let e = ApiError::invalid_fields("invalid_rule", vec![FieldError::new("tokens", "must be at least 1"), FieldError::new("burst", "must be at least 1")]);
        assert_eq!(e.message, "tokens: must be at least 1; burst: must be at least 1");
    }
}
