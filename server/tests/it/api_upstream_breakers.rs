//! The upstream breaker over HTTP: admit, report, list, reset (audited), and
//! the permit endpoint's `breaker_open` refusal, on the embedded default and
//! on PostgreSQL + Redis. The probe timings (30 s, 3 probes) run on a manual
//! clock in the engine's tests; here the wiring and the contract.

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use sluice_engine::audit;

use crate::api::{assert_error, spawn_api, spawn_api_with, Api};
use crate::helpers::Mode;

fn pricing_permit(account: &str) -> Value {
    json!({"account": account, "scope": "vtex_pricing", "method": "PUT", "path": "/api/pricing/prices/1"})
}

async fn report(api: &Api, account: &str, outcome: Value) -> (StatusCode, Value) {
    let mut body = json!({"account": account, "scope": "vtex_pricing"});
    body.as_object_mut().expect("object").extend(outcome.as_object().expect("object").clone());
    let (status, _, out) = api.post("/api/v1/upstream-breakers/report", body).await;
    (status, out)
}

async fn open_breaker(api: &Api, account: &str) {
    for i in 1..=5 {
        let (status, out) = report(api, account, json!({"status": 503})).await;
        assert_eq!(status, StatusCode::OK, "{out}");
        assert_eq!(out["counted_as"], "failure");
        let want = if i < 5 { "closed" } else { "open" };
        assert_eq!(out["breaker"]["state"], want, "after {i} failures: {out}");
    }
}

async fn five_failures_open_the_breaker_and_permits_are_refused_with_breaker_open(mode: Mode) {
    let api = spawn_api(mode).await;
    let account = format!("acct{}", ulid::Ulid::new());
    let (status, _, out) = api.post("/api/v1/upstream-breakers/admit", json!({"account": account, "scope": "vtex_pricing"})).await;
    assert_eq!(status, StatusCode::OK, "{out}");
    assert_eq!((out["decision"].as_str(), out["allowed"].as_bool()), (Some("closed"), Some(true)), "{out}");

    // A 429 and a 404 prove the upstream answers: they reset the count.
    open_breaker(&api, &account).await;
    let (status, out) = report(&api, &account, json!({"status": 429})).await;
    assert_eq!((status, out["counted_as"].as_str()), (StatusCode::OK, Some("success")), "{out}");
    assert_eq!(out["breaker"]["state"], "open", "a late answer does not close an open breaker");

    let (status, headers, out) =
        api.post("/api/v1/upstream-breakers/admit", json!({"account": account, "scope": "vtex_pricing"})).await;
    assert_eq!(status, StatusCode::OK, "{out}");
    assert_eq!((out["decision"].as_str(), out["allowed"].as_bool()), (Some("open"), Some(false)), "{out}");
    let retry_ms = out["retry_after_ms"].as_u64().expect("retry_after_ms");
    assert!(retry_ms > 25_000 && retry_ms <= 30_000, "{retry_ms}");
    assert_eq!(headers["retry-after"].to_str().expect("ascii"), retry_ms.div_ceil(1000).to_string());
    let breaker = &out["breaker"];
    assert_eq!((breaker["consecutive_failures"].as_u64(), breaker["trips"].as_u64()), (Some(5), Some(1)), "{out}");
    let opened = breaker["opened_at_ms"].as_i64().expect("opened_at_ms");
    assert_eq!(breaker["next_probe_at_ms"].as_i64(), Some(opened + 30_000));

    let (status, headers, out) = api.post("/api/v1/permits", pricing_permit(&account)).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{out}");
    assert_eq!((out["granted"].as_bool(), out["reason"].as_str()), (Some(false), Some("breaker_open")), "{out}");
    let retry_ms = out["retry_after_ms"].as_u64().expect("retry_after_ms");
    assert!(retry_ms > 25_000 && retry_ms <= 30_000, "{retry_ms}");
    assert_eq!(headers["retry-after"].to_str().expect("ascii"), retry_ms.div_ceil(1000).to_string());

    // Another account's breaker, and the same account on another scope, are closed.
    let (status, _, out) = api.post("/api/v1/permits", pricing_permit("someone-else")).await;
    assert_eq!((status, out["probe"].as_bool()), (StatusCode::OK, Some(false)), "{out}");
    let feeds = json!({"account": account, "scope": "wb_feeds", "method": "GET", "path": "/feeds/1"});
    assert_eq!(api.post("/api/v1/permits", feeds).await.0, StatusCode::OK);

    // The refused permit spent no quota and is counted with the bucket's refusals.
    let (_, _, buckets) = api.call(Method::GET, "/api/v1/buckets", Some(&api.worker), None).await;
    let bucket = buckets["buckets"]
        .as_array()
        .expect("buckets")
        .iter()
        .find(|b| b["account"] == account.as_str() && b["scope"] == "vtex_pricing")
        .unwrap_or_else(|| panic!("the refusal is recorded on the bucket: {buckets}"))
        .clone();
    assert_eq!(bucket["refusals"]["breaker_open"], 1, "{bucket}");

    let (status, _, list) = api.call(Method::GET, "/api/v1/upstream-breakers", Some(&api.worker), None).await;
    assert_eq!(status, StatusCode::OK, "{list}");
    let mine: Vec<&Value> = list["breakers"].as_array().expect("breakers").iter().filter(|b| b["account"] == account.as_str()).collect();
    assert_eq!(mine.len(), 1, "{list}");
    assert_eq!((mine[0]["scope"].as_str(), mine[0]["state"].as_str()), (Some("vtex_pricing"), Some("open")));
}

#[tokio::test]
async fn five_failures_open_the_breaker_and_permits_are_refused_with_breaker_open_embedded() {
    five_failures_open_the_breaker_and_permits_are_refused_with_breaker_open(Mode::Embedded).await;
}

#[tokio::test]
async fn five_failures_open_the_breaker_and_permits_are_refused_with_breaker_open_distributed() {
    five_failures_open_the_breaker_and_permits_are_refused_with_breaker_open(Mode::Distributed).await;
}

#[tokio::test]
async fn rules_listed_as_ignored_grant_permits_while_their_breaker_is_open() {
    let api = spawn_api_with(Mode::Embedded, &[("SLUICE_UPSTREAM_BREAKER_IGNORE_RULES", "vtex_pricing_put, wb_feeds")]).await;
    open_breaker(&api, "acct1").await;
    let (status, _, out) = api.post("/api/v1/permits", pricing_permit("acct1")).await;
    assert_eq!((status, out["granted"].as_bool()), (StatusCode::OK, Some(true)), "{out}");
}

#[tokio::test]
async fn reports_and_admissions_with_bad_input_are_422_and_change_nothing() {
    let api = spawn_api(Mode::Embedded).await;
    for outcome in [json!({}), json!({"status": 503, "error": "timeout"}), json!({"status": 99}), json!({"status": 600})] {
        let (status, out) = report(&api, "acct1", outcome.clone()).await;
        assert_error(status, &out, StatusCode::UNPROCESSABLE_ENTITY, "invalid_input");
    }
    let (status, out) = report(&api, "acct1", json!({"error": "meltdown"})).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{out}");
    // An account id is refused as on every other endpoint (`invalid_account`).
    let bad = [
        (json!({"account": "a{b", "scope": "vtex_pricing"}), "invalid_account"),
        (json!({"scope": ""}), "invalid_input"),
        (json!({"scope": "x".repeat(129)}), "invalid_input"),
    ];
    for (body, code) in bad {
        let (status, _, out) = api.post("/api/v1/upstream-breakers/admit", body.clone()).await;
        assert_error(status, &out, StatusCode::UNPROCESSABLE_ENTITY, code);
        let message = out["message"].as_str().expect("message");
        assert!(message.starts_with("account:") || message.starts_with("scope:"), "names the field: {message}");
    }
    let (_, _, list) = api.call(Method::GET, "/api/v1/upstream-breakers", Some(&api.worker), None).await;
    assert_eq!(list["breakers"], json!([]), "nothing was recorded");
    // An error counts as a failure, not_sent frees a probe and counts nothing.
    let (_, out) = report(&api, "acct1", json!({"error": "timeout"})).await;
    assert_eq!((out["counted_as"].as_str(), out["breaker"]["consecutive_failures"].as_u64()), (Some("failure"), Some(1)));
    let (_, out) = report(&api, "acct1", json!({"error": "not_sent"})).await;
    assert_eq!((out["counted_as"].as_str(), out["breaker"]["consecutive_failures"].as_u64()), (Some("not_sent"), Some(1)));
}

async fn a_reset_needs_an_admin_token_and_a_reason_and_is_audited(mode: Mode) {
    let api = spawn_api(mode).await;
    open_breaker(&api, "acct9").await;
    let reset = |reason: &str| json!({"account": "acct9", "scope": "vtex_pricing", "reason": reason});
    let (status, _, out) = api.post("/api/v1/upstream-breakers/reset", reset("worker tries")).await;
    assert_error(status, &out, StatusCode::FORBIDDEN, "forbidden");
    for reason in ["", "   ", &"x".repeat(501)] {
        let (status, _, out) = api.call(Method::POST, "/api/v1/upstream-breakers/reset", Some(&api.admin), Some(reset(reason))).await;
        assert_error(status, &out, StatusCode::UNPROCESSABLE_ENTITY, "invalid_input");
    }
    let (_, _, out) = api.post("/api/v1/upstream-breakers/admit", json!({"account": "acct9", "scope": "vtex_pricing"})).await;
    assert_eq!(out["decision"], "open", "refused resets changed nothing: {out}");

    let (status, _, out) =
        api.call(Method::POST, "/api/v1/upstream-breakers/reset", Some(&api.admin), Some(reset(" upstream is back "))).await;
    assert_eq!(status, StatusCode::OK, "{out}");
    assert_eq!((out["before"]["state"].as_str(), out["after"]["state"].as_str()), (Some("open"), Some("closed")), "{out}");
    let (_, _, out) = api.post("/api/v1/upstream-breakers/admit", json!({"account": "acct9", "scope": "vtex_pricing"})).await;
    assert_eq!(out["decision"], "closed", "{out}");
    assert_eq!(api.post("/api/v1/permits", pricing_permit("acct9")).await.0, StatusCode::OK);

    let rows = audit::recent(&api.app.db.db(), &[sluice_engine::audit::AuditAction::UpstreamBreakerReset], 10).await.expect("audit");
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!((rows[0].actor.as_str(), rows[0].target.as_str()), ("admin-1", "acct9/vtex_pricing"));
    assert_eq!(rows[0].reason.as_deref(), Some("upstream is back"));
}

#[tokio::test]
async fn a_reset_needs_an_admin_token_and_a_reason_and_is_audited_embedded() {
    a_reset_needs_an_admin_token_and_a_reason_and_is_audited(Mode::Embedded).await;
}

#[tokio::test]
async fn a_reset_needs_an_admin_token_and_a_reason_and_is_audited_distributed() {
    a_reset_needs_an_admin_token_and_a_reason_and_is_audited(Mode::Distributed).await;
}
