//! Server-side rendering of the web application.

use crate::helpers::{spawn_app, Mode, Role};

#[tokio::test]
async fn the_overview_is_rendered_on_the_server_with_live_health() {
    let app = spawn_app(Mode::Distributed).await;
    let resp = app.get_as(Role::Viewer, "/").await;
    assert_eq!(resp.status(), 200);
    let html = resp.text().await.expect("html");
    assert!(html.contains("<h1>Overview</h1>"), "{html}");
    // SsrMode::Async: the health numbers are in the HTML, not a loading placeholder.
    assert!(html.contains("postgres"), "{html}");
    assert!(!html.contains("Loading…"), "{html}");
    // The hydration script and the stylesheet are referenced.
    assert!(html.contains("/pkg/sluice.js"), "{html}");
    assert!(html.contains("/pkg/sluice.css"), "{html}");
}

#[tokio::test]
async fn an_unknown_page_answers_404_with_the_app_frame() {
    let app = spawn_app(Mode::Embedded).await;
    let resp = app.get_as(Role::Viewer, "/no/such/page").await;
    assert_eq!(resp.status(), 404);
    let html = resp.text().await.expect("html");
    assert!(html.contains("There is no page at this address."), "{html}");
}
