//! The webhook pages: Deliveries, one delivery, Merchants and
//! Breakers, through real HTTP with real sessions. Merchants are real HTTP
//! servers on 127.0.0.1; deliveries are sent by a delivery `Worker` the test
//! drives step by step (`run_once`) on a `ManualClock` — the application's
//! own worker is switched off so nothing moves behind the test's back.

use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode as AxumStatus;
use serde_json::Value;
use sluice_engine::audit;
use sluice_engine::upstream_breaker::redis::RedisBreakerStore;
use sluice_engine::upstream_breaker::{BreakerKey, UpstreamBreaker, UpstreamBreakerConfig};
use sluice_engine::clock::{Clock, ManualClock, SharedClock, SystemClock};
use sluice_engine::delivery::merchant_breaker::MerchantBreakerConfig;
use sluice_engine::delivery::model::{BreakerStatus, DeliveryFilter, DeliveryId, DeliveryStatus, EventIn, Merchant, MerchantIn, SigningScheme};
use sluice_engine::delivery::ops;
use sluice_engine::delivery::ssrf::SsrfPolicy;
use sluice_engine::delivery::{DeliveryStore, Worker, WorkerConfig};
use tokio::sync::oneshot;

use crate::helpers::{spawn_app_with, test_redis_url, Mode, Role, TestApp};

/// The app's own worker off; loopback merchants allowed.
const SETTINGS: &[(&str, &str)] = &[("SLUICE_DELIVERY_WORKER", "false"), ("SLUICE_DELIVERY_ALLOW_NETWORKS", "127.0.0.0/8")];

/// A merchant endpoint on loopback that always answers `status`.
struct Endpoint {
    url: String,
    _stop: oneshot::Sender<()>,
}

async fn endpoint(status: u16) -> Endpoint {
    let code = AxumStatus::from_u16(status).expect("status");
    serve(axum::Router::new().fallback(move || async move { code })).await
}

/// Serve `router` on a free loopback port until the endpoint is dropped.
async fn serve(router: axum::Router) -> Endpoint {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}/webhooks", listener.local_addr().expect("addr"));
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(async move {
        let _ = axum::serve(listener, router)
            .with_graceful_shutdown(async move {
                let _ = stopped.await;
            })
            .await;
    });
    Endpoint { url, _stop: stop }
}

struct World {
    app: TestApp,
    store: DeliveryStore,
    clock: Arc<ManualClock>,
    worker: Worker,
}

impl World {
    async fn new(mode: Mode, extra: &[(&str, &str)]) -> World {
        let settings: Vec<(&str, &str)> = SETTINGS.iter().chain(extra).copied().collect();
        let app = spawn_app_with(mode, &settings).await;
        let store = DeliveryStore::new(app.db.db());
        // The pages stamp operations with the system clock; the worker's
        // manual clock starts there and only moves when a test says so.
        let clock = Arc::new(ManualClock::new(SystemClock.now()));
        let shared: SharedClock = clock.clone();
        let config = WorkerConfig { ssrf: loopback(), ..WorkerConfig::default() };
        let worker = Worker::new(store.clone(), shared, config).expect("worker");
        World { app, store, clock, worker }
    }

    async fn merchant(&self, name: &str, url: &str) -> Merchant {
        let input = MerchantIn { name: name.into(), url: url.into(), scheme: SigningScheme::Sluice, secret: None };
        ops::create_merchant(&self.store, input, &loopback(), &MerchantBreakerConfig::default(), sluice_engine::delivery::ops::Actor::named("test"), self.clock.now()).await.expect("merchant")
    }

    async fn event(&self, m: &Merchant, event_type: &str, status: &str) -> DeliveryId {
        let e = EventIn {
            merchant_id: m.id.clone(),
            event_type: event_type.into(),
            status: None,
            payload: serde_json::json!({ "status": status, "order": "o-1" }),
            idempotency_key: ulid::Ulid::new().to_string(),
        };
        self.store.accept_event(&e, self.clock.now()).await.expect("accept").delivery_ids.remove(0)
    }

    async fn step(&self) {
        self.worker.run_once().await.expect("worker step");
    }

    async fn status(&self, id: &DeliveryId) -> DeliveryStatus {
        self.store.delivery(id).await.expect("delivery").status
    }

    async fn audit_count(&self) -> usize {
        let actions = [sluice_engine::audit::AuditAction::DeliveryRedeliver, sluice_engine::audit::AuditAction::DeliveryRetryNow, sluice_engine::audit::AuditAction::DeliveryBulkRetry, sluice_engine::audit::AuditAction::MerchantBreakerReset, sluice_engine::audit::AuditAction::UpstreamBreakerReset, sluice_engine::audit::AuditAction::MerchantCreate, sluice_engine::audit::AuditAction::MerchantUpdateUrl, sluice_engine::audit::AuditAction::MerchantRotateSecret];
        // Merchants the fixture made are audited as actor `test`; count the pages' writes.
        audit::recent(&self.app.db.db(), &actions, 1000).await.expect("audit").iter().filter(|r| r.actor != "test").count()
    }

    async fn json(&self, client: &reqwest::Client, endpoint: &str, form: &[(&str, &str)]) -> Value {
        let resp = self.app.call(client, endpoint, form).await;
        assert_eq!(resp.status(), 200, "{endpoint}");
        resp.json().await.expect("json")
    }
}

/// The test receivers: plain http on loopback.
fn loopback() -> SsrfPolicy {
    SsrfPolicy::allowing(&["127.0.0.0/8"]).expect("allow-list").plain_http_allowed()
}

/// A merchant whose breaker is open: five deliveries to a refused port.
async fn open_breaker(w: &World) -> (Merchant, Vec<DeliveryId>) {
    let down = w.merchant("Down Shop", &format!("http://127.0.0.1:{}/webhooks", crate::helpers::closed_port())).await;
    let mut ids = Vec::new();
    for _ in 0..5 {
        ids.push(w.event(&down, "order.created", "new").await);
    }
    w.step().await;
    assert_eq!(w.store.breaker(&down.id).await.expect("breaker").status, BreakerStatus::Open);
    (down, ids)
}

#[tokio::test]
async fn every_mutation_needs_a_session_and_its_role_and_changes_nothing_otherwise() {
    let w = World::new(Mode::Embedded, &[]).await;
    let gone = endpoint(410).await;
    let shop = w.merchant("Gone Shop", &gone.url).await;
    let failed = w.event(&shop, "order.created", "new").await;
    w.step().await;
    assert_eq!(w.status(&failed).await, DeliveryStatus::Failed);
    let (down, pending) = open_breaker(&w).await;
    let before_merchant = w.store.merchant(&shop.id).await.expect("merchant");
    let merchants_before = w.store.merchant_names().await.expect("names").len();

    let anonymous = w.app.client.clone();
    let viewer = w.app.signed_in(Role::Viewer).await;
    let support = w.app.signed_in(Role::Support).await;
    let (f, p, s, d) = (failed.to_string(), pending[0].to_string(), shop.id.to_string(), down.id.to_string());
    let support_ops: Vec<(&str, Vec<(&str, &str)>)> = vec![
        ("/ui/deliveries/redeliver", vec![("id", &f)]),
        ("/ui/deliveries/retry_now", vec![("id", &p)]),
        ("/ui/deliveries/bulk_count", vec![]),
        ("/ui/deliveries/bulk_retry", vec![]),
        ("/ui/breakers/reset_merchant", vec![("merchant_id", &d), ("reason", "try")]),
        ("/ui/breakers/reset_upstream", vec![("account", "acme"), ("scope", "orders"), ("reason", "try")]),
    ];
    let admin_ops: Vec<(&str, Vec<(&str, &str)>)> = vec![
        ("/ui/merchants/create", vec![("name", "New"), ("url", "http://127.0.0.1:9/x"), ("scheme", "sluice")]),
        ("/ui/merchants/url", vec![("id", &s), ("url", "http://127.0.0.1:9/moved")]),
        ("/ui/merchants/rotate", vec![("id", &s)]),
    ];
    for (endpoint, form) in support_ops.iter().chain(&admin_ops) {
        assert_eq!(w.app.call(&anonymous, endpoint, form).await.status(), 401, "{endpoint} without a session");
        assert_eq!(w.app.call(&viewer, endpoint, form).await.status(), 403, "{endpoint} as viewer");
    }
    for (endpoint, form) in &admin_ops {
        assert_eq!(w.app.call(&support, endpoint, form).await.status(), 403, "{endpoint} as support");
    }
    // Nothing changed.
    assert_eq!(w.status(&failed).await, DeliveryStatus::Failed);
    let still = w.store.delivery(&pending[0]).await.expect("pending");
    assert!(still.next_attempt_at > w.clock.now(), "not made due");
    assert_eq!(w.store.breaker(&down.id).await.expect("breaker").status, BreakerStatus::Open);
    assert_eq!(w.store.merchant(&shop.id).await.expect("merchant"), before_merchant, "URL and secret unchanged");
    assert_eq!(w.store.merchant_names().await.expect("names").len(), merchants_before);
    assert_eq!(w.audit_count().await, 0);

    // The roles that may, can.
    assert_eq!(w.app.call(&support, "/ui/deliveries/redeliver", &[("id", &f)]).await.status(), 200);
    assert_eq!(w.status(&failed).await, DeliveryStatus::Pending);
    assert_eq!(w.app.call(&support, "/ui/deliveries/retry_now", &[("id", &p)]).await.status(), 200);
    // A second redelivery of the now PENDING row is refused with the reason.
    let again = w.app.call(&support, "/ui/deliveries/redeliver", &[("id", &f)]).await;
    assert_eq!(again.status(), 409);
    assert!(again.text().await.expect("body").contains("PENDING"));
    assert_eq!(w.audit_count().await, 2);
}

#[tokio::test]
async fn filtered_pages_follow_cursors_both_ways_without_gaps_or_repeats() {
    let w = World::new(Mode::Distributed, &[]).await;
    let ok = endpoint(200).await;
    let a = w.merchant("Alpha", &ok.url).await;
    let b = w.merchant("Beta", &ok.url).await;
    let mut alpha = Vec::new();
    for i in 0..123 {
        alpha.push(w.event(&a, if i % 2 == 0 { "payment.status_changed" } else { "order.created" }, "paid").await);
        w.event(&b, "order.created", "new").await;
        if i % 4 == 0 {
            w.clock.advance(Duration::from_millis(1500)); // many rows share a created_at
        }
    }
    let viewer = w.app.signed_in(Role::Viewer).await;
    let merchant = a.id.to_string();
    let filter = [("filter[merchant]", merchant.as_str())];
    let mut pages: Vec<Vec<String>> = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let mut form = filter.to_vec();
        if let Some(c) = &after {
            form.push(("after", c));
        }
        let page = w.json(&viewer, "/ui/deliveries/list", &form).await;
        assert_eq!(page["invalid"], serde_json::json!([]));
        let ids: Vec<String> = page["rows"].as_array().expect("rows").iter().map(|r| r["id"].as_str().expect("id").to_owned()).collect();
        assert!(page["rows"].as_array().expect("rows").iter().all(|r| r["merchant_id"] == merchant.as_str()));
        pages.push(ids);
        match page["next"].as_str() {
            Some(c) => after = Some(c.to_owned()),
            None => break,
        }
    }
    let seen: Vec<&String> = pages.iter().flatten().collect();
    assert_eq!(seen.len(), 123, "no gaps");
    let unique: std::collections::HashSet<&&String> = seen.iter().collect();
    assert_eq!(unique.len(), 123, "no repeats");
    let mut expected: Vec<String> = alpha.iter().map(|d| d.to_string()).collect();
    expected.sort();
    let mut got: Vec<String> = seen.iter().map(|s| s.to_string()).collect();
    got.sort();
    assert_eq!(got, expected);
    assert_eq!(pages.len(), 3, "50 + 50 + 23");

    // Back from the last page with "before": the same pages again.
    let last_first = w.store.delivery(&DeliveryId::parse(&pages[2][0]).expect("id")).await.expect("delivery");
    let mut before = Some(format!("{}.{}", last_first.created_at.as_millis(), last_first.id));
    for expected in pages.iter().rev().skip(1) {
        let mut form = filter.to_vec();
        let c = before.take().expect("a previous page");
        form.push(("before", &c));
        let page = w.json(&viewer, "/ui/deliveries/list", &form).await;
        let ids: Vec<String> = page["rows"].as_array().expect("rows").iter().map(|r| r["id"].as_str().expect("id").to_owned()).collect();
        assert_eq!(&ids, expected);
        before = page["prev"].as_str().map(str::to_owned);
    }
    assert!(before.is_none(), "nothing newer than the first page");

    // Narrower filters combine; a bad one names its field.
    let money = w.json(&viewer, "/ui/deliveries/list", &[("filter[merchant]", &merchant), ("filter[money]", "money")]).await;
    assert_eq!(money["rows"].as_array().expect("rows").len(), 50);
    assert!(money["rows"].as_array().expect("rows").iter().all(|r| r["is_money"] == true));
    let bad = w.json(&viewer, "/ui/deliveries/list", &[("filter[status]", "LOST"), ("filter[from]", "yesterday")]).await;
    let fields: Vec<&str> = bad["invalid"].as_array().expect("invalid").iter().map(|e| e["field"].as_str().expect("field")).collect();
    assert_eq!(fields, ["status", "from"]);
    assert_eq!(bad["rows"], serde_json::json!([]));

    // The page itself is server-rendered with the filter applied: a link works without JS.
    let html = viewer.get(w.app.url(&format!("/deliveries?merchant={merchant}&money=money"))).send().await.expect("page").text().await.expect("html");
    assert!(html.contains(alpha[122].as_str()), "the newest money delivery of Alpha is listed");
    assert!(!html.contains(alpha[121].as_str()), "non-money rows are filtered out");
    assert!(html.contains("Older →"));
}

#[tokio::test]
async fn a_bulk_retry_changes_exactly_the_counted_set_and_audits_it() {
    let w = World::new(Mode::Distributed, &[]).await;
    let gone = endpoint(410).await;
    let shop = w.merchant("Gone Shop", &gone.url).await;
    let mut failed = Vec::new();
    for _ in 0..9 {
        failed.push(w.event(&shop, "kyc.status_changed", "rejected").await);
    }
    let other = w.event(&shop, "order.created", "new").await;
    w.step().await;
    assert_eq!(w.status(&other).await, DeliveryStatus::Failed, "another type, also failed");
    let support = w.app.signed_in(Role::Support).await;
    let filter = [("filter[event_type]", "kyc.status_changed"), ("filter[status]", "FAILED")];
    let count = w.json(&support, "/ui/deliveries/bulk_count", &filter).await;
    assert_eq!((count["failed"].as_u64(), count["pending"].as_u64()), (Some(9), Some(0)));
    let mut changed = 0;
    let mut after: Option<String> = None;
    loop {
        let mut form = filter.to_vec();
        if let Some(c) = &after {
            form.push(("after", c));
        }
        let batch = w.json(&support, "/ui/deliveries/bulk_retry", &form).await;
        changed += batch["redelivered"].as_u64().expect("n") + batch["retried"].as_u64().expect("n");
        match batch["next"].as_str() {
            Some(c) => after = Some(c.to_owned()),
            None => break,
        }
    }
    assert_eq!(changed, 9, "the count shown is the count retried");
    for id in &failed {
        assert_eq!(w.status(id).await, DeliveryStatus::Pending);
    }
    assert_eq!(w.status(&other).await, DeliveryStatus::Failed, "outside the filter");
    let rows = audit::recent(&w.app.db.db(), &[sluice_engine::audit::AuditAction::DeliveryBulkRetry], 10).await.expect("audit");
    assert_eq!(rows.len(), 1);
    assert!(rows[0].after.as_ref().expect("after").to_string().contains(failed[0].as_str()));
    assert!(rows[0].target.contains("kyc.status_changed"));
    // A refused filter is a clear 422, never a retry of everything.
    let bad = w.app.call(&support, "/ui/deliveries/bulk_retry", &[("filter[ladder]", "sideways")]).await;
    assert_eq!(bad.status(), 422);
    assert!(bad.text().await.expect("body").contains("ladder"));
    assert_eq!(w.store.count_deliveries(&DeliveryFilter { status: Some(DeliveryStatus::Failed), ..DeliveryFilter::default() }).await.expect("n"), 1);
}

#[tokio::test]
async fn a_breaker_reset_needs_a_reason_and_writes_it_to_the_audit_log() {
    let prefix = format!("t:{}", ulid::Ulid::new());
    let w = World::new(Mode::Distributed, &[("SLUICE_REDIS_PREFIX", prefix.as_str())]).await;
    let (down, mut ids) = open_breaker(&w).await;
    // An event arriving while the breaker is open is held back, not sent.
    ids.push(w.event(&down, "order.updated", "paid").await);
    w.step().await;
    let support = w.app.signed_in(Role::Support).await;
    let d = down.id.to_string();
    let html = support.get(w.app.url("/breakers")).send().await.expect("page").text().await.expect("html");
    assert!(html.contains("Down Shop") && html.contains(">open<"), "{html}");
    let blank = w.app.call(&support, "/ui/breakers/reset_merchant", &[("merchant_id", &d), ("reason", "  ")]).await;
    assert_eq!(blank.status(), 422);
    assert_eq!(w.store.breaker(&down.id).await.expect("breaker").status, BreakerStatus::Open);
    // The open breaker holds back the merchant's other deliveries (deferred,
    // due again in about 30 s); a reset releases that queue at once.
    let mut held_back = Vec::new();
    for id in &ids {
        let d = w.store.delivery(id).await.expect("delivery");
        if d.deferred {
            assert!(d.next_attempt_at > SystemClock.now(), "a deferred delivery waits for the breaker");
            held_back.push(id.clone());
        }
    }
    assert!(!held_back.is_empty(), "the open breaker held deliveries back");
    let done = w.app.call(&support, "/ui/breakers/reset_merchant", &[("merchant_id", &d), ("reason", "endpoint fixed, ticket 481")]).await;
    assert_eq!(done.status(), 200);
    assert_eq!(w.store.breaker(&down.id).await.expect("breaker").status, BreakerStatus::Closed);
    for id in &held_back {
        let d = w.store.delivery(id).await.expect("delivery");
        assert!(!d.deferred && d.next_attempt_at <= SystemClock.now(), "the held-back queue is due again");
    }
    let rows = audit::recent(&w.app.db.db(), &[sluice_engine::audit::AuditAction::MerchantBreakerReset], 10).await.expect("audit");
    assert_eq!(rows.len(), 1);
    assert_eq!((rows[0].target.as_str(), rows[0].reason.as_deref()), (d.as_str(), Some("endpoint fixed, ticket 481")));
    assert!(rows[0].actor.starts_with("support-"));
    let html = support.get(w.app.url("/breakers")).send().await.expect("page").text().await.expect("html");
    assert!(html.contains("endpoint fixed, ticket 481"), "the page shows the audited reset");

    // Upstream breakers live in Redis under the deployment's prefix.
    let conn = redis::Client::open(test_redis_url()).expect("client").get_connection_manager().await.expect("redis");
    let upstream = UpstreamBreaker::new(Arc::new(RedisBreakerStore::new(conn, prefix.clone())), UpstreamBreakerConfig::default());
    let key = BreakerKey::new(Some("acme"), "orders").expect("key");
    for _ in 0..5 {
        upstream.record(&key, true).await.expect("record");
    }
    let html = support.get(w.app.url("/breakers")).send().await.expect("page").text().await.expect("html");
    assert!(html.contains("acme") && html.contains("orders"), "{html}");
    let done = w.app.call(&support, "/ui/breakers/reset_upstream", &[("account", "acme"), ("scope", "orders"), ("reason", "upstream recovered")]).await;
    assert_eq!(done.status(), 200);
    let listed = upstream.list().await.expect("list");
    assert!(listed.iter().all(|b| b.account != "acme" || b.phase == sluice_engine::upstream_breaker::Phase::Closed));
    let rows = audit::recent(&w.app.db.db(), &[sluice_engine::audit::AuditAction::UpstreamBreakerReset], 10).await.expect("audit");
    assert_eq!((rows.len(), rows[0].reason.as_deref()), (1, Some("upstream recovered")));
}

#[tokio::test]
async fn the_upstream_breakers_show_unavailable_when_redis_is_down() {
    let port = crate::helpers::closed_port();
    let redis_url = format!("redis://127.0.0.1:{port}");
    let w = World::new(Mode::Distributed, &[("SLUICE_REDIS_URL", redis_url.as_str()), ("SLUICE_QUOTA_STORE_DOWN", "local_fallback")]).await;
    let viewer = w.app.signed_in(Role::Viewer).await;
    let html = viewer.get(w.app.url("/breakers")).send().await.expect("page").text().await.expect("html");
    assert!(html.contains("unavailable"), "{html}");
    assert!(html.contains("Merchant delivery breakers"), "the rest of the page still works");
}

#[tokio::test]
async fn secrets_are_shown_once_and_never_in_page_html() {
    let w = World::new(Mode::Embedded, &[]).await;
    let ok = endpoint(200).await;
    let admin = w.app.signed_in(Role::Admin).await;
    let created = w.json(&admin, "/ui/merchants/create", &[("name", "Gamma"), ("url", &ok.url), ("scheme", "standard_webhooks")]).await;
    let first = created["Ok"]["secret"].as_str().expect("the secret, once").to_owned();
    assert!(first.starts_with("whsec_"));
    let id = created["Ok"]["id"].as_str().expect("id").to_owned();
    let rotated = w.json(&admin, "/ui/merchants/rotate", &[("id", &id), ("overlap_hours", "2")]).await;
    let second = rotated["Ok"]["secret"].as_str().expect("the new secret, once").to_owned();
    assert_ne!(first, second);
    let merchant = w.store.merchant(&sluice_engine::delivery::model::MerchantId::parse(&id).expect("id")).await.expect("merchant");
    assert_eq!((merchant.secret.as_str(), merchant.previous_secret.as_deref()), (second.as_str(), Some(first.as_str())));
    let delivery = w.event(&merchant, "order.created", "new").await;
    w.step().await;
    for path in ["/merchants".to_owned(), "/breakers".to_owned(), "/deliveries".to_owned(), format!("/deliveries/{delivery}")] {
        let html = admin.get(w.app.url(&path)).send().await.expect("page").text().await.expect("html");
        assert!(html.contains("Gamma"), "{path} shows the merchant");
        for secret in [&first, &second] {
            let body = secret.trim_start_matches("whsec_");
            assert!(!html.contains(body), "{path} leaks a secret");
        }
    }
    let list = w.json(&admin, "/ui/merchants/list", &[]).await;
    assert!(!list.to_string().contains(second.trim_start_matches("whsec_")));
    let audit_rows = audit::recent(&w.app.db.db(), &[sluice_engine::audit::AuditAction::MerchantCreate, sluice_engine::audit::AuditAction::MerchantRotateSecret], 10).await.expect("audit");
    assert_eq!(audit_rows.len(), 2);
    assert!(audit_rows.iter().all(|r| !format!("{:?}", r).contains(second.trim_start_matches("whsec_"))), "no secret in the audit log");

    // URLs are checked against SSRF: the metadata address is refused, field named.
    let refused = w.json(&admin, "/ui/merchants/url", &[("id", &id), ("url", "http://169.254.169.254/latest")]).await;
    assert_eq!(refused["Invalid"][0]["field"], "url");
    assert_eq!(w.store.merchant(&merchant.id).await.expect("merchant").url, ok.url);
    let blank = w.json(&admin, "/ui/merchants/create", &[("name", " "), ("url", &ok.url), ("scheme", "sluice")]).await;
    assert_eq!(blank["Invalid"][0]["field"], "name");
}

#[tokio::test]
async fn a_delivery_page_shows_its_ladder_timeline() {
    let w = World::new(Mode::Distributed, &[]).await;
    let failing = endpoint(503).await;
    let shop = w.merchant("Flaky Shop", &failing.url).await;
    let id = w.event(&shop, "payment.status_changed", "paid").await;
    w.step().await;
    w.clock.advance(Duration::from_secs(1));
    w.step().await;
    let viewer = w.app.signed_in(Role::Viewer).await;
    let html = viewer.get(w.app.url(&format!("/deliveries/{id}"))).send().await.expect("page").text().await.expect("html");
    assert_eq!(html.matches("data-testid=\"attempt\"").count(), 2, "two attempts made");
    assert!(html.contains(">503<"), "with their HTTP code");
    assert_eq!(html.matches("data-testid=\"planned\"").count(), 8, "attempts 3..10 still to come");
    assert!(html.contains("30 days (age)"));
    assert!(html.contains("fast 2 of 10 attempts"));
    assert!(html.contains("&quot;status&quot;") || html.contains("\"status\""), "the payload is summarised");
    let missing = viewer.get(w.app.url("/deliveries/msg_nope")).send().await.expect("page").text().await.expect("html");
    assert!(missing.contains("There is no delivery with this id."));
}

/// A merchant endpoint on loopback that answers `status` with `body` and a
/// session cookie (a credential header the attempt must not keep).
async fn answering(status: u16, body: String) -> Endpoint {
    let code = AxumStatus::from_u16(status).expect("status");
    serve(axum::Router::new().fallback(move || {
        let body = body.clone();
        async move { (code, [("content-type", "text/plain; charset=utf-8"), ("set-cookie", "sid=cookie-value-123")], body) }
    }))
    .await
}

#[tokio::test]
async fn the_delivery_page_and_the_api_show_what_the_merchant_answered_without_secrets() {
    use sluice_engine::tokens::{create_token, ApiScope};
    const SECRET: &str = "merchant-secret-6f1c0a9e4b7d2c5f8a3e";
    let w = World::new(Mode::Embedded, &[]).await;
    // The merchant echoes the secret it was given and a bearer token: neither may be kept.
    let said = format!("merchant says: unknown sku 4711 (secret {SECRET}, Authorization: Bearer tok_live_abc123)");
    let bad = answering(400, said).await;
    let long = answering(400, format!("{}{}", "x".repeat(5000), "END-OF-LONG-BODY")).await;
    let input = |name: &str, url: &str| MerchantIn { name: name.into(), url: url.into(), scheme: SigningScheme::Sluice, secret: Some(SECRET.into()) };
    let policy = MerchantBreakerConfig::default();
    let shop = ops::create_merchant(&w.store, input("Strict Shop", &bad.url), &loopback(), &policy, ops::Actor::named("test"), w.clock.now()).await.expect("merchant");
    let chatty = ops::create_merchant(&w.store, input("Chatty Shop", &long.url), &loopback(), &policy, ops::Actor::named("test"), w.clock.now()).await.expect("merchant");
    let refused = w.event(&shop, "order.created", "new").await;
    let cut = w.event(&chatty, "order.created", "new").await;
    w.step().await;
    assert_eq!(w.status(&refused).await, DeliveryStatus::Failed, "a non-money 4xx fails at once");

    let viewer = w.app.signed_in(Role::Viewer).await;
    let html = viewer.get(w.app.url(&format!("/deliveries/{refused}"))).send().await.expect("page").text().await.expect("html");
    assert!(html.contains("merchant says: unknown sku 4711"), "the answer's body is on the page");
    assert!(html.contains("HTTP 400"));
    assert!(html.contains("x-webhook-signature"), "the headers sent are listed");
    assert!(html.contains("data-testid=\"attempt-id\""), "the attempt id with a copy button");
    assert!(html.contains("Retention deletes this delivery"), "the page says how long it is kept");
    for leak in [SECRET, "tok_live_abc123", "cookie-value-123"] {
        assert!(!html.contains(leak), "the page leaks {leak}");
    }

    let (_, token) = create_token(&w.app.db.db(), "reader", ApiScope::Worker, w.clock.now()).await.expect("token");
    let api = |id: DeliveryId| {
        let (client, url, token) = (w.app.client.clone(), w.app.url(&format!("/api/v1/deliveries/{id}")), token.expose().to_owned());
        async move {
            let resp = client.get(url).bearer_auth(token).send().await.expect("api");
            assert_eq!(resp.status(), 200);
            resp.json::<Value>().await.expect("json")
        }
    };
    let body = api(refused.clone()).await;
    let attempt = &body["attempts"][0];
    assert_eq!(attempt["status_code"], 400);
    assert!(attempt["id"].as_str().is_some_and(|id| id.starts_with("att_")));
    assert!(attempt["response_body"].as_str().expect("body").starts_with("merchant says: unknown sku 4711"));
    assert_eq!(attempt["response_truncated"], false);
    assert!(attempt["latency_ms"].as_i64().is_some());
    let sig = attempt["request_headers"]["x-webhook-signature"].as_str().expect("signature sent");
    assert_eq!(sig.len(), 64, "one hex HMAC-SHA256");
    assert_eq!(attempt["request_headers"]["x-webhook-id"], refused.to_string());
    assert_eq!(attempt["response_headers"]["set-cookie"], "[redacted]");
    assert_eq!(attempt["response_headers"]["content-type"], "text/plain; charset=utf-8");
    for leak in [SECRET, "tok_live_abc123", "cookie-value-123"] {
        assert!(!body.to_string().contains(leak), "the API leaks {leak}");
    }

    // A body past 4 KiB is cut there and marked.
    let body = api(cut.clone()).await;
    let attempt = &body["attempts"][0];
    let text = attempt["response_body"].as_str().expect("body");
    assert_eq!(text.len(), 4096);
    assert!(!text.contains("END-OF-LONG-BODY"));
    assert_eq!(attempt["response_truncated"], true);
    let html = viewer.get(w.app.url(&format!("/deliveries/{cut}"))).send().await.expect("page").text().await.expect("html");
    assert!(html.contains("data-testid=\"attempt-response-cut\""));
}
