//! Server-sent events for live pages: `GET /ui/stream/quotas?account=…&page=…`
//! sends the Quotas table (the same JSON the `quotas/list` server function
//! answers) every [`STREAM_EVERY`] while the browser listens. Viewer and up;
//! the session is checked when the stream opens and again on every update,
//! so a removed user's stream ends.

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use futures::Stream;
use serde::Deserialize;
use sluice_app::ssr::auth::SESSION_USER_ID;
use sluice_app::pages::quotas::server::{table, TableQuery};
use sluice_app::ssr::AppContext;
use sluice_engine::users;
use tower_sessions::Session;

use crate::state::AppState;

/// How often a stream sends the table.
pub const STREAM_EVERY: Duration = Duration::from_secs(2);

pub fn router() -> Router<AppState> {
    Router::new().route("/ui/stream/quotas", get(stream_quotas))
}

#[derive(Debug, Deserialize)]
pub struct QuotasStreamIn {
    pub account: Option<String>,
    #[serde(default)]
    pub exact: bool,
    pub page: Option<u32>,
}

/// Whether the session belongs to an existing user (every role may watch).
async fn signed_in(ctx: &AppContext, session: &Session) -> Result<bool, Response> {
    let id: Option<String> = session.get(SESSION_USER_ID).await.map_err(|e| {
        tracing::error!(error = %e, "reading the session");
        StatusCode::INTERNAL_SERVER_ERROR.into_response()
    })?;
    let Some(id) = id else { return Ok(false) };
    match users::get_user(&ctx.db, &id).await {
        Ok(user) => Ok(user.is_some()),
        Err(e) => {
            tracing::error!(error = %e, "reading the user");
            Err(StatusCode::INTERNAL_SERVER_ERROR.into_response())
        }
    }
}

pub async fn stream_quotas(
    State(state): State<AppState>,
    session: Session,
    Query(q): Query<QuotasStreamIn>,
) -> Response {
    let ctx = state.app_context.clone();
    match signed_in(&ctx, &session).await {
        Ok(true) => {}
        Ok(false) => return (StatusCode::UNAUTHORIZED, "not signed in").into_response(),
        Err(resp) => return resp,
    }
    let query = TableQuery::parse(q.account.as_deref(), q.exact, q.page);
    Sse::new(updates(ctx, session, query)).keep_alive(KeepAlive::default()).into_response()
}

/// The table now, then every [`STREAM_EVERY`], until the session ends.
fn updates(ctx: AppContext, session: Session, query: TableQuery) -> impl Stream<Item = Result<Event, Infallible>> {
    futures::stream::unfold((ctx, session, query, true), |(ctx, session, query, first)| async move {
        if !first {
            tokio::time::sleep(STREAM_EVERY).await;
            if !matches!(signed_in(&ctx, &session).await, Ok(true)) {
                return None;
            }
        }
        let event = match table(&ctx, &query).await {
            Ok(view) => Event::default().event("quotas").json_data(&view).unwrap_or_else(|e| {
                tracing::error!(error = %e, "encoding a quotas update");
                Event::default().event("failed").data("could not encode the update")
            }),
            // `table` logged the cause; the browser keeps the last numbers.
            Err(_) => Event::default().event("failed").data("could not read the quotas"),
        };
        Some((Ok(event), (ctx, session, query, false)))
    })
}
