//! The OpenAPI 3 document of the worker API, served at `/api/openapi.json`.
//!
//! Paths come from the routers themselves (`utoipa_axum::routes!` registers a
//! handler and its `#[utoipa::path]` together), so a served route cannot be
//! missing from the document.
//!
//! Clients are generated from this document, so it must list every status a
//! route can answer. A route's `#[utoipa::path]` lists what its handler
//! decides (200, 404, 409, 429, 503, …); [`document_common_responses`] adds,
//! to every operation, what the shared extractors answer before a handler
//! runs (a bad token, a body that is not JSON, a query that does not parse),
//! so a new route gets them without writing them down.

use utoipa::openapi::path::{Operation, ParameterIn};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{ContentBuilder, Ref, RefOr, Response, ResponseBuilder};
use utoipa::{Modify, OpenApi};

use super::error::{ErrorOut, FieldError, ValidationErrorOut};

#[derive(OpenApi)]
#[openapi(
    info(title = "Sluice worker API", description = "Shared API quotas and webhook deliveries. \
        Authenticate with `Authorization: Bearer <token>` (`sluice token add`). Errors are \
        `{\"code\", \"message\"}` with stable codes; a 422 also carries `fields`, one \
        `{\"field\", \"message\"}` per invalid field of the request."),
    components(schemas(ErrorOut, ValidationErrorOut, FieldError)),
    modifiers(&BearerAuth)
)]
pub struct ApiDoc;

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme("bearer", SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()));
    }
}

/// Add to every operation the answers of the shared extractors (see the
/// module docs). Responses a route documents itself are kept as written.
/// Run on the finished document: `ApiDoc`'s own modifiers run before the
/// routers' paths are merged in.
pub fn document_common_responses(doc: &mut utoipa::openapi::OpenApi) {
    for item in doc.paths.paths.values_mut() {
        let operations = [&mut item.get, &mut item.put, &mut item.post, &mut item.delete, &mut item.patch];
        for operation in operations.into_iter().flatten() {
            add_common_responses(operation);
        }
    }
}

fn add_common_responses(op: &mut Operation) {
    let params = |place: ParameterIn| op.parameters.iter().flatten().any(|p| p.parameter_in == place);
    let (in_query, in_path) = (params(ParameterIn::Query), params(ParameterIn::Path));
    let secured = op.security.as_ref().is_some_and(|s| !s.is_empty());
    let has_body = op.request_body.is_some();
    let responses = &mut op.responses.responses;
    let mut add = |status: &str, response: Response| {
        responses.entry(status.to_owned()).or_insert(RefOr::T(response));
    };
    if secured {
        add("401", error("Missing, malformed, unknown or revoked bearer token (`unauthorized`)"));
        // Checking the token reads the database.
        add(
            "503",
            error(
                "The database is unreachable (`database_unavailable`) or a store is down (`store_unavailable`); \
                 nothing was changed: retry after `Retry-After` seconds",
            ),
        );
    }
    if has_body {
        add("400", error("The body is not JSON (`invalid_json`)"));
        add("413", error("The body is larger than 256 KiB (`payload_too_large`)"));
        add("415", error("The body is not sent as `Content-Type: application/json` (`unsupported_media_type`)"));
        add(
            "422",
            validation_error("A field is missing, of the wrong type or invalid (`invalid_body`, …); `fields` names each"),
        );
    }
    if in_query {
        add("400", error("A query parameter is malformed (`invalid_query`)"));
    }
    if in_path {
        add("400", error("A path parameter is not valid UTF-8 once decoded (`invalid_path`)"));
    }
}

/// A response whose body is [`ErrorOut`].
fn error(description: &str) -> Response {
    json_response(description, "ErrorOut")
}

/// A 422 response whose body is [`ValidationErrorOut`].
fn validation_error(description: &str) -> Response {
    json_response(description, "ValidationErrorOut")
}

fn json_response(description: &str, schema: &str) -> Response {
    ResponseBuilder::new()
        .description(description)
        .content("application/json", ContentBuilder::new().schema(Some(Ref::from_schema_name(schema))).build())
        .build()
}

#[cfg(test)]
mod tests {
    use utoipa::openapi::path::Operation;
    use utoipa::openapi::{RefOr, Required};

    fn document() -> utoipa::openapi::OpenApi {
        let (_, mut doc) = super::super::documented_router().split_for_parts();
        super::document_common_responses(&mut doc);
        doc
    }

    fn operations(doc: &utoipa::openapi::OpenApi) -> Vec<(String, &Operation)> {
        let mut out = Vec::new();
        for (path, item) in &doc.paths.paths {
            let ops = [("GET", &item.get), ("PUT", &item.put), ("POST", &item.post), ("DELETE", &item.delete), ("PATCH", &item.patch)];
            for (method, op) in ops {
                if let Some(op) = op {
                    out.push((format!("{method} {path}"), op));
                }
            }
        }
        out
    }

    /// The schema a response's JSON body refers to, if any.
    fn body_schema(response: &RefOr<utoipa::openapi::Response>) -> Option<String> {
        let RefOr::T(response) = response else { return None };
        let content = response.content.get("application/json")?;
        match content.schema.as_ref()? {
            RefOr::Ref(r) => Some(r.ref_location.rsplit('/').next()?.to_owned()),
            RefOr::T(_) => Some("inline".to_owned()),
        }
    }

    #[test]
    fn every_operation_documents_what_its_extractors_can_answer() {
        let doc = document();
        for (name, op) in operations(&doc) {
            let has = |status: &str| op.responses.responses.contains_key(status);
            assert!(has("401"), "{name} is secured and must document 401");
            assert!(has("503"), "{name} reads its token from the database and must document 503");
            if op.request_body.is_some() {
                for status in ["400", "413", "415", "422"] {
                    assert!(has(status), "{name} takes a body and must document {status}");
                }
            }
        }
    }

    #[test]
    fn every_error_response_has_the_error_body_and_every_422_names_fields() {
        let doc = document();
        for (name, op) in operations(&doc) {
            for (status, response) in &op.responses.responses {
                let schema = body_schema(response);
                match status.as_str() {
                    "422" => assert_eq!(schema.as_deref(), Some("ValidationErrorOut"), "{name} {status}"),
                    // A refused permit has its own body (granted: false, reason).
                    "429" | "503" if name == "POST /api/v1/permits" => {}
                    s if s.starts_with('4') || s.starts_with('5') => {
                        assert_eq!(schema.as_deref(), Some("ErrorOut"), "{name} {status}")
                    }
                    _ => {}
                }
            }
        }
    }

    #[test]
    fn every_request_body_carries_an_example() {
        let doc = document();
        let schemas = &doc.components.as_ref().expect("components").schemas;
        for (name, op) in operations(&doc) {
            let Some(body) = &op.request_body else { continue };
            assert!(matches!(body.required, Some(Required::True)), "{name}: the body is required");
            let content = body.content.get("application/json").unwrap_or_else(|| panic!("{name}: JSON body"));
            let example = content.example.is_some()
                || !content.examples.is_empty()
                || match &content.schema {
                    Some(RefOr::Ref(r)) => {
                        let schema_name = r.ref_location.rsplit('/').next().unwrap_or_default();
                        let schema = serde_json::to_value(&schemas[schema_name]).expect("schema as JSON");
                        schema.get("example").is_some() || schema.get("examples").is_some()
                    }
                    _ => false,
                };
            assert!(example, "{name}: the request body has no example");
        }
    }
}
