//! Retry profiles over HTTP: listed and resolved for workers, set and
//! removed by admins (validated field by field, audited), and kept in step
//! on every instance by the reloader the server runs.

use std::time::{Duration, Instant};

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use sluice_engine::audit::{self, AuditAction};
use sluice_engine::clock::Timestamp;
use sluice_engine::retry::profiles;
use sluice_engine::retry::profiles_repo::ProfilesRepo;

use crate::api::{assert_error, spawn_api, Api};
use crate::helpers::Mode;

async fn profile(api: &Api, scope: &str) -> Value {
    let (status, _, body) = api.call(Method::GET, &format!("/api/v1/retry-profiles/{scope}"), Some(&api.worker), None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body
}

async fn put(api: &Api, token: &str, scope: &str, body: Value) -> (StatusCode, Value) {
    let (status, _, out) = api.call(Method::PUT, &format!("/api/v1/retry-profiles/{scope}"), Some(token), Some(body)).await;
    (status, out)
}

async fn profiles_are_listed_resolved_set_and_removed_by_admins_and_audited(mode: Mode) {
    let api = spawn_api(mode).await;
    let (status, _, list) = api.call(Method::GET, "/api/v1/retry-profiles", Some(&api.worker), None).await;
    assert_eq!(status, StatusCode::OK, "{list}");
    let presets: Vec<&str> = list["presets"].as_array().expect("presets").iter().map(|p| p["name"].as_str().expect("name")).collect();
    assert_eq!(presets, ["default", "wb", "vtex"]);
    let seeded: Vec<(&str, &str)> = list["profiles"]
        .as_array()
        .expect("profiles")
        .iter()
        .map(|p| (p["scope"].as_str().expect("scope"), p["name"].as_str().expect("name")))
        .collect();
    assert_eq!(seeded, [("vtex_orders", "vtex"), ("vtex_pricing", "vtex"), ("wb_feeds", "wb")], "the preset rules' scopes");

    let vtex = profile(&api, "vtex_pricing").await;
    assert_eq!((vtex["name"].as_str(), vtex["source"].as_str()), (Some("vtex"), Some("scope")), "{vtex}");
    assert_eq!(vtex["policy"], json!({"max_attempts": 6, "base_delay_ms": 1000, "max_delay_ms": 60000, "jitter": "equal",
        "retry_on": ["429", "503"], "retry_after": "honour", "wait_ceiling_ms": null, "total_budget_ms": 180000}));
    let other = profile(&api, "acme_api").await;
    assert_eq!((other["name"].as_str(), other["source"].as_str()), (Some("default"), Some("default")), "{other}");
    assert_eq!(other["policy"]["jitter"], "additive");

    let (status, out) = put(&api, &api.worker, "*", json!({"preset": "vtex"})).await;
    assert_error(status, &out, StatusCode::FORBIDDEN, "forbidden");
    let (status, out) = put(&api, &api.admin, "*", json!({"preset": "vtex", "jitter": "full", "max_delay_ms": null})).await;
    assert_eq!(status, StatusCode::OK, "{out}");
    assert_eq!((out["name"].as_str(), out["policy"]["jitter"].as_str(), out["updated_by"].as_str()), (Some("custom"), Some("full"), Some("admin-1")));
    assert_eq!(out["policy"]["max_delay_ms"], Value::Null);
    let other = profile(&api, "acme_api").await;
    assert_eq!((other["name"].as_str(), other["source"].as_str()), (Some("custom"), Some("global")), "applied at once: {other}");

    let (status, _, _) = api.call(Method::DELETE, "/api/v1/retry-profiles/*", Some(&api.admin), None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _, out) = api.call(Method::DELETE, "/api/v1/retry-profiles/*", Some(&api.admin), None).await;
    assert_error(status, &out, StatusCode::NOT_FOUND, "not_found");
    assert_eq!(profile(&api, "acme_api").await["source"], "default");

    let rows = audit::recent(&api.app.db.db(), &[AuditAction::RetryProfileSet, AuditAction::RetryProfileDelete], 20).await.expect("audit");
    let by_admin: Vec<(&str, &str)> = rows.iter().filter(|r| r.actor == "admin-1").map(|r| (r.action.as_str(), r.target.as_str())).collect();
    assert_eq!(by_admin, [("retry_profile.delete", "*"), ("retry_profile.set", "*")]);
    let set = rows.iter().find(|r| r.action == "retry_profile.set" && r.actor == "admin-1").expect("set row");
    assert_eq!(set.after.as_ref().map(|a| a["policy"]["jitter"].clone()), Some(json!("full")), "{set:?}");
}

#[tokio::test]
async fn profiles_are_listed_resolved_set_and_removed_by_admins_and_audited_embedded() {
    profiles_are_listed_resolved_set_and_removed_by_admins_and_audited(Mode::Embedded).await;
}

#[tokio::test]
async fn profiles_are_listed_resolved_set_and_removed_by_admins_and_audited_distributed() {
    profiles_are_listed_resolved_set_and_removed_by_admins_and_audited(Mode::Distributed).await;
}

#[tokio::test]
async fn bad_profiles_are_422_naming_each_field_and_change_nothing() {
    let api = spawn_api(Mode::Embedded).await;
    let before = profile(&api, "vtex_pricing").await;
    let (status, out) = put(&api, &api.admin, "vtex_pricing", json!({"max_attempts": 0, "jitter": "gaussian", "retry_on": ["4xx"], "retry_after": "obey"})).await;
    assert_error(status, &out, StatusCode::UNPROCESSABLE_ENTITY, "invalid_retry_profile");
    let fields: Vec<&str> = out["fields"].as_array().expect("fields").iter().map(|f| f["field"].as_str().expect("field")).collect();
    assert_eq!(fields, ["jitter", "retry_after", "max_attempts", "retry_on"], "{out}");
    let (status, out) = put(&api, &api.admin, "vtex_pricing", json!({"base_delay_ms": 2000, "max_delay_ms": 1000})).await;
    assert_error(status, &out, StatusCode::UNPROCESSABLE_ENTITY, "invalid_retry_profile");
    assert_eq!(out["fields"][0]["field"], "max_delay_ms", "{out}");
    let (status, out) = put(&api, &api.admin, "vtex_pricing", json!({"preset": "aws"})).await;
    assert_eq!((status, out["fields"][0]["field"].as_str()), (StatusCode::UNPROCESSABLE_ENTITY, Some("preset")), "{out}");
    let (status, out) = put(&api, &api.admin, "bad%20scope", json!({"preset": "vtex"})).await;
    assert_eq!((status, out["fields"][0]["field"].as_str()), (StatusCode::UNPROCESSABLE_ENTITY, Some("scope")), "{out}");
    let (status, out) = put(&api, &api.admin, "vtex_pricing", json!({"attempts": 3})).await;
    assert_error(status, &out, StatusCode::UNPROCESSABLE_ENTITY, "invalid_body");
    assert_eq!(profile(&api, "vtex_pricing").await, before, "nothing changed");
}

/// An edit written by another instance (here: straight through the
/// repository, which this instance's own writes never call) reaches this
/// one through the reloader its server runs: the test fails if nobody polls.
#[tokio::test]
async fn an_edit_made_elsewhere_reaches_a_running_instance_through_its_reloader() {
    let api = spawn_api(Mode::Distributed).await;
    assert_eq!(profile(&api, "acme_api").await["source"], "default");
    let elsewhere = ProfilesRepo::new(api.app.db.db());
    let vtex = profiles::preset("vtex").expect("vtex");
    elsewhere.put("acme_api", "vtex", vtex, "other-instance", Timestamp::from_millis(0)).await.expect("put");
    // The reloader polls every second; give it ten before calling it absent.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let now = profile(&api, "acme_api").await;
        if now["source"] == "scope" {
            assert_eq!((now["name"].as_str(), now["updated_by"].as_str()), (Some("vtex"), Some("other-instance")));
            break;
        }
        assert!(Instant::now() < deadline, "the running instance never reloaded its retry profiles: {now}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn the_limits_page_shows_each_scopes_profile_and_admins_set_them_with_field_errors() {
    let api = spawn_api(Mode::Embedded).await;
    let viewer = api.app.signed_in(crate::helpers::Role::Viewer).await;
    let page = viewer.get(api.app.url("/limits")).send().await.expect("page").text().await.expect("html");
    assert!(page.contains("data-testid=\"retry-profiles\""), "the section is on the page");
    for scope in ["vtex_pricing", "wb_feeds"] {
        assert!(page.contains(&format!("data-scope=\"{scope}\"")), "{scope} has a row");
    }
    let form = [("scope", "acme_api"), ("preset", "vtex"), ("jitter", "full")];
    let refused = api.app.call(&viewer, "/ui/limits/retry-profiles/set", &form).await;
    assert_eq!(refused.status(), StatusCode::FORBIDDEN, "only admins write");

    let admin = api.app.signed_in(crate::helpers::Role::Admin).await;
    let bad = [("scope", "bad scope"), ("preset", "vtex"), ("max_attempts", "many"), ("base_delay_ms", "0"), ("retry_on", "4xx")];
    let answer: Value = api.app.call(&admin, "/ui/limits/retry-profiles/set", &bad).await.json().await.expect("json");
    let fields: Vec<&str> = answer["Invalid"].as_array().expect("invalid").iter().map(|f| f["field"].as_str().expect("field")).collect();
    assert_eq!(fields, ["max_attempts", "scope", "base_delay_ms", "retry_on"], "every problem in one answer: {answer}");
    let bad = [("scope", "acme_api"), ("retry_after", "obey")];
    let answer: Value = api.app.call(&admin, "/ui/limits/retry-profiles/set", &bad).await.json().await.expect("json");
    assert_eq!(answer["Invalid"][0]["field"], "retry_after", "{answer}");
    assert_eq!(profile(&api, "acme_api").await["source"], "default", "nothing was written");

    let answer: Value = api.app.call(&admin, "/ui/limits/retry-profiles/set", &form).await.json().await.expect("json");
    assert_eq!((answer["Ok"]["name"].as_str(), answer["Ok"]["jitter"].as_str()), (Some("custom"), Some("full")), "{answer}");
    assert_eq!(profile(&api, "acme_api").await["policy"]["jitter"], "full", "the API sees the page's write at once");
    let gone = api.app.call(&admin, "/ui/limits/retry-profiles/delete", &[("scope", "acme_api")]).await;
    assert_eq!(gone.status(), StatusCode::OK);
    assert_eq!(profile(&api, "acme_api").await["source"], "default");
    let rows = audit::recent(&api.app.db.db(), &[AuditAction::RetryProfileSet, AuditAction::RetryProfileDelete], 20).await.expect("audit");
    assert_eq!(rows.iter().filter(|r| r.target == "acme_api").count(), 2, "set and removed, both audited");
}
