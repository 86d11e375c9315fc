//! Server-side rendering of the web application.

use crate::helpers::{spawn_app, without_markers, Mode, Role};

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
    // The hydration script and the stylesheet are referenced (by the names
    // the site build gave them; tests/it/assets.rs checks the names).
    assert!(html.contains(r#"<link rel="modulepreload" href="/pkg/sluice."#), "{html}");
    assert!(html.contains(r#"<link rel="stylesheet" id="sluice" href="/pkg/sluice."#), "{html}");
}

#[tokio::test]
async fn an_unknown_page_answers_404_with_the_app_frame() {
    let app = spawn_app(Mode::Embedded).await;
    let resp = app.get_as(Role::Viewer, "/no/such/page").await;
    assert_eq!(resp.status(), 404);
    let html = resp.text().await.expect("html");
    assert!(html.contains("There is no page at this address."), "{html}");
}

#[tokio::test]
async fn the_overview_draws_its_dashboard_for_the_chosen_period() {
    let app = spawn_app(Mode::Embedded).await;
    let html = without_markers(&app.get_as(Role::Viewer, "/?hours=6").await.text().await.expect("html"));
    assert!(html.contains(r#"data-testid="dashboard""#), "{html}");
    // Both charts are server-drawn SVG with their titles and units.
    for text in ["Permits", "per minute", "Delivery attempts", "attempts / min", "time (UTC)"] {
        assert!(html.contains(text), "{text} missing: {html}");
    }
    assert!(html.matches("<svg").count() >= 2, "{html}");
    // The 6 h period is the current one; nothing is pending or open yet.
    assert!(html.contains(r#"class="current">6 h</a>"#), "{html}");
    assert!(html.contains(r#"href="/?hours=6" aria-current="page""#), "{html}");
    assert!(html.contains("none pending"), "{html}");
    assert!(html.contains("None open."), "{html}");
}
