//! The OpenAPI 3 document of the worker API, served at `/api/openapi.json`.
//!
//! Paths come from the routers themselves (`utoipa_axum::routes!` registers a
//! handler and its `#[utoipa::path]` together), so a served route cannot be
//! missing from the document.

use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

#[derive(OpenApi)]
#[openapi(
    info(title = "Sluice worker API", description = "Shared API quotas and webhook deliveries. \
        Authenticate with `Authorization: Bearer <token>` (`sluice token add`). Errors are \
        `{\"code\", \"message\"}` with stable codes."),
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
