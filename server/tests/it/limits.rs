//! The Limits, Simulator and Audit log pages' server functions: who may
//! write, what validation answers, that an edit is what `/api/v1/permits`
//! enforces (here at once, on another instance within 2 s), the audit trail,
//! the simulator's four-workers numbers and the audit log's pages.

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::Value;
use sluice_engine::audit::{self, AuditEntry};
use sluice_engine::clock::{Clock, SystemClock, Timestamp};
use sluice_engine::quota::{RuleId, RulesRepo};
use sluice_engine::tokens::{create_token, ApiScope};

use crate::helpers::{spawn_app, spawn_app_with, Mode, Role, TestApp};

async fn json(resp: reqwest::Response) -> (StatusCode, Value) {
    let status = resp.status();
    let text = resp.text().await.expect("body");
    (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
}

/// A rule form as the page posts it.
fn form<'a>(scope: &'a str, tokens: &'a str, interval: &'a str) -> Vec<(&'a str, &'a str)> {
    vec![
        ("scope", scope),
        ("method", ""),
        ("path", ""),
        ("algorithm", "token_bucket"),
        ("tokens", tokens),
        ("interval", interval),
        ("burst", ""),
        ("concurrency", ""),
        ("max_wait", ""),
        ("min_penalty", ""),
        ("enabled", "on"),
        ("note", "set by a test"),
    ]
}

fn unique_scope(tag: &str) -> String {
    format!("{tag}_{}", ulid::Ulid::new()).to_lowercase()
}

async fn create(app: &TestApp, admin: &reqwest::Client, fields: &[(&str, &str)]) -> String {
    let (status, body) = json(app.call(admin, "/ui/limits/create", fields).await).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body["Ok"]["id"].as_str().unwrap_or_else(|| panic!("a created rule: {body}")).to_owned()
}

async fn rules_snapshot(app: &TestApp) -> Vec<sluice_engine::quota::Rule> {
    RulesRepo::new(app.db.db()).list().await.expect("list rules")
}

#[tokio::test]
async fn only_admins_write_limits_and_refusals_change_nothing() {
    let app = spawn_app(Mode::Embedded).await;
    let admin = app.signed_in(Role::Admin).await;
    let scope = unique_scope("matrix");
    let id = create(&app, &admin, &form(&scope, "5", "1m")).await;
    let before = rules_snapshot(&app).await;
    let update = {
        let mut f = form(&scope, "1", "1s");
        f.push(("id", &id));
        f
    };
    let writes: [(&str, Vec<(&str, &str)>); 4] = [
        ("/ui/limits/create", form("matrix_new", "5", "1m")),
        ("/ui/limits/update", update),
        ("/ui/limits/delete", vec![("id", id.as_str())]),
        ("/ui/limits/shadow", vec![("id", id.as_str()), ("shadow", "true")]),
    ];
    let anonymous = reqwest::Client::builder()
        .cookie_store(true)
        .default_headers(
            [(reqwest::header::ORIGIN, app.url("").parse().expect("origin"))].into_iter().collect(),
        )
        .build()
        .expect("client");
    let viewer = app.signed_in(Role::Viewer).await;
    let support = app.signed_in(Role::Support).await;
    for (endpoint, fields) in &writes {
        let resp = app.call(&anonymous, endpoint, fields).await;
        assert_eq!(resp.status(), StatusCode::UNAUTHORIZED, "{endpoint} without a session");
        for (who, client) in [("viewer", &viewer), ("support", &support)] {
            let resp = app.call(client, endpoint, fields).await;
            assert_eq!(resp.status(), StatusCode::FORBIDDEN, "{endpoint} as {who}");
        }
    }
    assert_eq!(rules_snapshot(&app).await, before, "refused writes changed nothing");
    // Viewers do read the rules, ask the tester and see history.
    let (status, body) = json(app.call(&viewer, "/ui/limits/list", &[]).await).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body.as_array().expect("rows").iter().any(|r| r["id"] == id.as_str()));
    let (status, _) = json(app.call(&viewer, "/ui/limits/history", &[("id", id.as_str())]).await).await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn invalid_input_gets_one_message_per_field_and_writes_nothing() {
    let app = spawn_app(Mode::Embedded).await;
    let admin = app.signed_in(Role::Admin).await;
    let before = rules_snapshot(&app).await;
    let mut fields = form("bad scope!", "0", "");
    fields.retain(|(k, _)| *k != "path" && *k != "burst");
    fields.push(("path", "/prices/{sku"));
    fields.push(("burst", "lots"));
    let (status, body) = json(app.call(&admin, "/ui/limits/create", &fields).await).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let errors = body["Invalid"].as_array().unwrap_or_else(|| panic!("field errors: {body}"));
    let mut by_field: Vec<&str> = errors.iter().map(|e| e["field"].as_str().expect("field")).collect();
    by_field.sort_unstable();
    assert_eq!(by_field, ["burst", "interval", "path", "scope", "tokens"], "{body}");
    let tokens = errors.iter().find(|e| e["field"] == "tokens").expect("tokens error");
    assert_eq!(tokens["message"], "must be at least 1");
    assert_eq!(rules_snapshot(&app).await, before);

    // A duplicate scope/method/path is a field error too, not a 500.
    let scope = unique_scope("dup");
    create(&app, &admin, &form(&scope, "5", "1m")).await;
    let (status, body) = json(app.call(&admin, "/ui/limits/create", &form(&scope, "7", "1m")).await).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["Invalid"][0]["field"], "path", "{body}");
}

/// Ask for a permit without waiting; the answer's `wait_ms` is the booked
/// wait (0: send now).
async fn permit(app: &TestApp, token: &str, scope: &str, account: &str) -> (StatusCode, Value) {
    let body = serde_json::json!({"account": account, "scope": scope, "method": "GET", "path": "/things", "max_wait_ms": 0});
    json(app.client.post(app.url("/api/v1/permits")).bearer_auth(token).json(&body).send().await.expect("permit")).await
}

/// Permits that may go now, out of `n` asked for.
async fn immediate(app: &TestApp, token: &str, scope: &str, account: &str, n: usize) -> usize {
    let mut now = 0;
    for _ in 0..n {
        let (status, body) = permit(app, token, scope, account).await;
        if status == StatusCode::OK && body["wait_ms"] == 0 {
            now += 1;
        }
    }
    now
}

async fn an_edit_in_the_ui_is_what_the_permits_api_enforces(mode: Mode) {
    let app = spawn_app_with(mode, &[("SLUICE_DELIVERY_WORKER", "false")]).await;
    let (_, worker) = create_token(&app.db.db(), "worker-ui", ApiScope::Worker, SystemClock.now()).await.expect("token");
    let worker = worker.expose().to_owned();
    let admin = app.signed_in(Role::Admin).await;
    let scope = unique_scope("edit");
    let id = create(&app, &admin, &form(&scope, "2", "1h")).await;
    assert_eq!(immediate(&app, &worker, &scope, "a", 2).await, 2);
    let (status, third) = permit(&app, &worker, &scope, "a").await;
    assert!(
        status == StatusCode::TOO_MANY_REQUESTS || third["wait_ms"].as_u64().is_some_and(|w| w > 1_000_000),
        "2 per hour: the third must wait about 30 min: {status} {third}"
    );

    let mut update = form(&scope, "4", "1h");
    update.push(("id", &id));
    let (status, body) = json(app.call(&admin, "/ui/limits/update", &update).await).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["Ok"]["tokens"], 4, "{body}");
    // A fresh bucket under the edited rule: four go now, not two.
    assert_eq!(immediate(&app, &worker, &scope, "b", 5).await, 4);

    // Shadow: decide and record, never block.
    let (status, body) = json(app.call(&admin, "/ui/limits/shadow", &[("id", id.as_str()), ("shadow", "true")]).await).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["shadow"], true);
    let (status, shadowed) = permit(&app, &worker, &scope, "b").await;
    assert_eq!((status, shadowed["wait_ms"].as_u64(), shadowed["shadow"].as_bool()), (StatusCode::OK, Some(0), Some(true)), "a shadow rule never blocks: {shadowed}");

    let (status, _) = json(app.call(&admin, "/ui/limits/delete", &[("id", id.as_str())]).await).await;
    assert_eq!(status, StatusCode::OK);
    let resp = app.client.post(app.url("/api/v1/permits")).bearer_auth(&worker)
        .json(&serde_json::json!({"scope": scope, "method": "GET", "path": "/things"})).send().await.expect("permit");
    assert_eq!(resp.status(), StatusCode::UNPROCESSABLE_ENTITY, "no rule left: refused, never unlimited");

    // Every write is audited with before/after, under the API's action names.
    let rows: Vec<(String, String, Option<String>, Option<String>)> =
        sqlx::query_as("SELECT actor, action, before_json, after_json FROM audit_log WHERE target = $1 ORDER BY at, id")
            .bind(&id)
            .fetch_all(app.db.db().pool())
            .await
            .expect("audit rows");
    let actions: Vec<&str> = rows.iter().map(|r| r.1.as_str()).collect();
    assert_eq!(actions, ["limit.create", "limit.update", "limit.update", "limit.delete"]);
    assert!(rows.iter().all(|r| r.0.starts_with("admin-")));
    let update_row = &rows[1];
    let before: Value = serde_json::from_str(update_row.2.as_deref().expect("before")).expect("json");
    let after: Value = serde_json::from_str(update_row.3.as_deref().expect("after")).expect("json");
    assert_eq!((before["tokens"].clone(), after["tokens"].clone()), (Value::from(2), Value::from(4)));
    assert!(rows[0].2.is_none() && rows[3].3.is_none(), "create has no before, delete no after");
    // The rule's own history has the same four changes.
    let history = RulesRepo::new(app.db.db()).history(&RuleId(id), 10).await.expect("history");
    assert_eq!(history.len(), 4);
}

#[tokio::test]
async fn an_edit_in_the_ui_is_what_the_permits_api_enforces_embedded() {
    an_edit_in_the_ui_is_what_the_permits_api_enforces(Mode::Embedded).await;
}

#[tokio::test]
async fn an_edit_in_the_ui_is_what_the_permits_api_enforces_distributed() {
    an_edit_in_the_ui_is_what_the_permits_api_enforces(Mode::Distributed).await;
}

#[tokio::test]
async fn an_edit_reaches_another_instance_on_the_same_database_within_two_seconds() {
    let first = spawn_app_with(Mode::Distributed, &[("SLUICE_DELIVERY_WORKER", "false")]).await;
    let second = spawn_app_with(
        Mode::Distributed,
        &[("SLUICE_DELIVERY_WORKER", "false"), ("SLUICE_DATABASE_URL", first.db.url.as_str())],
    )
    .await;
    let admin = first.signed_in(Role::Admin).await;
    let (_, worker) = create_token(&first.db.db(), "worker-2", ApiScope::Worker, SystemClock.now()).await.expect("token");
    let worker = worker.expose().to_owned();
    let scope = unique_scope("spread");
    let (status, body) = permit(&second, &worker, &scope, "a").await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "no rule yet on the second instance: {body}");

    create(&first, &admin, &form(&scope, "9", "1m")).await;
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let (status, body) = permit(&second, &worker, &scope, "a").await;
        if status == StatusCode::OK {
            break;
        }
        assert!(Instant::now() < deadline, "the second instance still answers {status} {body} 2 s after the edit");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn the_tester_names_the_rule_by_precedence_or_says_refused() {
    let app = spawn_app(Mode::Embedded).await;
    let admin = app.signed_in(Role::Admin).await;
    let viewer = app.signed_in(Role::Viewer).await;
    let scope = unique_scope("prec");
    let default = create(&app, &admin, &form(&scope, "10", "1s")).await;
    let mut template = form(&scope, "3", "1s");
    template.retain(|(k, _)| *k != "path");
    template.push(("path", "/prices/{sku}"));
    let template = create(&app, &admin, &template).await;
    let ask = |path: &'static str| {
        let scope = scope.clone();
        let app = &app;
        let viewer = &viewer;
        async move {
            let (status, body) =
                json(app.call(viewer, "/ui/limits/resolve", &[("scope", scope.as_str()), ("method", "put"), ("path", path)]).await).await;
            assert_eq!(status, StatusCode::OK, "{body}");
            body
        }
    };
    assert_eq!(ask("/prices/42").await["Rule"]["id"], template.as_str());
    assert_eq!(ask("/stock/42").await["Rule"]["id"], default.as_str());
    let (_, body) = json(app.call(&viewer, "/ui/limits/resolve", &[("scope", "nobody_here"), ("method", "GET"), ("path", "/x")]).await).await;
    assert_eq!(body, Value::String("NoRule".into()));
}

#[tokio::test]
async fn the_simulator_reproduces_seed_003() {
    let app = spawn_app(Mode::Embedded).await;
    let viewer = app.signed_in(Role::Viewer).await;
    let run = |mode: &'static str| {
        let app = &app;
        let viewer = &viewer;
        async move {
            let fields = [
                ("upstream_tokens", "3"), ("window", "10s"), ("workers", "4"), ("local_tokens", "3"),
                ("queue", "12"), ("pause", "0"), ("algorithm", "fixed_window"), ("mode", mode),
            ];
            let (status, body) = json(app.call(viewer, "/ui/simulator/run", &fields).await).await;
            assert_eq!(status, StatusCode::OK, "{body}");
            body["Ok"].clone()
        }
    };
    let local = run("local").await;
    assert_eq!((local["sent"].as_u64(), local["busiest_window"].as_u64(), local["over_limit"].as_u64()), (Some(12), Some(12), Some(9)));
    assert_eq!(local["drain_ms"], 0);
    assert!(local["workers"].as_array().expect("workers").iter().all(|w| w["permits_ms"] == serde_json::json!([0, 0, 0])));
    assert!(local["chart_svg"].as_str().expect("svg").starts_with("<svg"));
    let shared = run("shared").await;
    assert_eq!((shared["busiest_window"].as_u64(), shared["over_limit"].as_u64()), (Some(3), Some(0)));
    assert_eq!(shared["drain_ms"], 30_000, "12 requests at 3 per 10 s: windows at 0, 10, 20 and 30 s");

    let bad = [("upstream_tokens", "0"), ("window", "soon"), ("workers", "4"), ("local_tokens", "3"), ("queue", "12"), ("pause", "0")];
    let (_, body) = json(app.call(&viewer, "/ui/simulator/run", &bad).await).await;
    let fields: Vec<&str> = body["Invalid"].as_array().expect("errors").iter().map(|e| e["field"].as_str().expect("field")).collect();
    assert_eq!(fields, ["upstream_tokens", "window"], "{body}");
    let resp = app.call(&reqwest::Client::new(), "/ui/simulator/run", &bad).await;
    assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn the_simulator_shows_when_the_first_important_request_gets_its_permit_with_and_without_lanes() {
    let app = spawn_app(Mode::Embedded).await;
    let viewer = app.signed_in(Role::Viewer).await;
    // 3 per 10 s, one shared limiter, 12 ready, every 6th important (requests 6 and 12).
    let mut fields = vec![
        ("upstream_tokens", "3"), ("window", "10s"), ("workers", "4"), ("local_tokens", "3"), ("queue", "12"),
        ("pause", "0"), ("algorithm", "fixed_window"), ("mode", "shared"), ("important_every", "6"),
    ];
    let (status, body) = json(app.call(&viewer, "/ui/simulator/run", &fields).await).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    // In queue order the 6th request goes in the second window; with lanes in the first.
    assert_eq!((body["Ok"]["first_important_without_lanes_ms"].as_u64(), body["Ok"]["first_important_with_lanes_ms"].as_u64()), (Some(10_000), Some(0)), "{body}");
    fields.push(("lanes", "on"));
    let (_, body) = json(app.call(&viewer, "/ui/simulator/run", &fields).await).await;
    assert_eq!((body["Ok"]["over_limit"].as_u64(), body["Ok"]["drain_ms"].as_u64()), (Some(0), Some(30_000)), "the same total: {body}");
    // Lanes need the shared limiter.
    fields[7] = ("mode", "local");
    let (_, body) = json(app.call(&viewer, "/ui/simulator/run", &fields).await).await;
    assert_eq!(body["Invalid"][0]["field"], "lanes", "{body}");
}

#[tokio::test]
async fn the_audit_log_pages_newest_first_without_gaps_and_filters() {
    let app = spawn_app(Mode::Embedded).await;
    let db = app.db.db();
    // 120 entries; several share a millisecond, which the (at, id) keyset handles.
    // They are an hour old: the retention sweep forgets audit rows past a year,
    // and a fixed date in the past would be forgotten while the test pages.
    let base = SystemClock.now().as_millis() - 3_600_000;
    for n in 0..120i64 {
        let action = if n % 3 == 0 { sluice_engine::audit::AuditAction::LimitUpdate } else { sluice_engine::audit::AuditAction::MerchantBreakerReset };
        let target = format!("t{n}");
        let entry = AuditEntry::<Value> { actor: "alice", action, target: &target, before: None, after: None, reason: Some("test") };
        audit::record(&db, entry, Timestamp::from_millis(base + n / 4)).await.expect("record");
    }
    let support = app.signed_in(Role::Support).await;
    let mut seen = Vec::new();
    let mut cursor = String::new();
    let mut pages = 0;
    loop {
        let (status, body) = json(app.call(&support, "/ui/audit/list", &[("actor", "alice"), ("before", cursor.as_str())]).await).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let rows = body["rows"].as_array().expect("rows");
        seen.extend(rows.iter().map(|r| (r["at_ms"].as_i64().expect("at"), r["id"].as_str().expect("id").to_owned())));
        pages += 1;
        match body["next"].as_str() {
            Some(next) => cursor = next.to_owned(),
            None => break,
        }
    }
    assert_eq!(pages, 3, "50 + 50 + 20");
    assert_eq!(seen.len(), 120);
    let mut sorted = seen.clone();
    sorted.sort_by(|a, b| b.cmp(a));
    sorted.dedup();
    assert_eq!(seen, sorted, "newest first, no duplicates");

    let (_, body) = json(app.call(&support, "/ui/audit/list", &[("actor", "alice"), ("action", "limit")]).await).await;
    assert_eq!(body["rows"].as_array().expect("rows").len(), 40);
    let (_, body) = json(app.call(&support, "/ui/audit/list", &[("target", "t7")]).await).await;
    assert_eq!(body["rows"].as_array().expect("rows").len(), 1);
    assert_eq!(body["rows"][0]["reason"], "test");
    let viewer = app.signed_in(Role::Viewer).await;
    assert_eq!(app.call(&viewer, "/ui/audit/list", &[]).await.status(), StatusCode::FORBIDDEN);
    let (status, _) = json(app.call(&support, "/ui/audit/list", &[("before", "not-a-cursor")]).await).await;
    assert!(status.is_client_error() || status.is_server_error());
}
