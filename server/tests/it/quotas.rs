//! The Quotas pages, the Overview's quota numbers and the live stream, with
//! permits taken through the worker API.

use std::time::Duration;

use serde_json::{json, Value};
use sluice_engine::clock::{Clock, SystemClock};
use sluice_engine::tokens::{create_token, ApiScope};

use crate::helpers::{spawn_app, spawn_app_with, without_markers, Mode, Role, TestApp};

async fn worker_token(app: &TestApp) -> String {
    let (_, secret) = create_token(&app.db.db(), "quota-worker", ApiScope::Worker, SystemClock.now()).await.expect("token");
    secret.expose().to_owned()
}

fn unique(name: &str) -> String {
    format!("{name}-{}", ulid::Ulid::new().to_string().to_lowercase())
}

/// One permit for `account` on `scope` (preset rules), returning the answer.
async fn permit(app: &TestApp, token: &str, account: &str, scope: &str) -> (u16, Value) {
    let resp = app
        .client
        .post(app.url("/api/v1/permits"))
        .bearer_auth(token)
        .json(&json!({ "account": account, "scope": scope, "method": "PUT", "path": "/pricing/1" }))
        .send()
        .await
        .expect("permit request");
    let status = resp.status().as_u16();
    (status, resp.json().await.expect("permit json"))
}

async fn penalty(app: &TestApp, token: &str, account: &str, scope: &str, retry_after: &str) {
    let resp = app
        .client
        .post(app.url("/api/v1/penalties"))
        .bearer_auth(token)
        .json(&json!({ "account": account, "scope": scope, "method": "PUT", "path": "/pricing/1",
                       "status_429": true, "retry_after": retry_after }))
        .send()
        .await
        .expect("penalty request");
    assert!(resp.status().is_success(), "penalty: {} {}", resp.status(), resp.text().await.unwrap_or_default());
}

/// The `<tr>` of one bucket in a page's HTML.
fn bucket_row<'a>(html: &'a str, account: &str, rule: &str) -> Option<&'a str> {
    let start = html.find(&format!("data-account=\"{account}\" data-rule=\"{rule}\""))?;
    let end = html[start..].find("</tr>")? + start;
    Some(&html[start..end])
}

fn cell(row: &str, testid: &str) -> Option<String> {
    let start = row.find(&format!("data-testid=\"{testid}\""))?;
    let open = row[start..].find('>')? + start + 1;
    let close = row[open..].find("</td>")? + open;
    Some(without_markers(&row[open..close]).trim().to_owned())
}

#[tokio::test]
async fn the_quotas_page_shows_each_buckets_numbers_in_the_server_html() {
    let app = spawn_app(Mode::Distributed).await;
    let token = worker_token(&app).await;
    let acct = unique("acme");
    // wb_feeds: 1 permit per minute. Two permits are granted (the second
    // booked a minute out), a 429 with Retry-After 3600 s blocks the bucket,
    // so the third is refused: the wait is beyond the ceiling.
    assert_eq!(permit(&app, &token, &acct, "wb_feeds").await.0, 200);
    let (status, second) = permit(&app, &token, &acct, "wb_feeds").await;
    assert_eq!(status, 200, "{second}");
    // wb_feeds is a fixed window aligned to the minute: the second permit
    // waits for the next minute to begin, which is anything from a few ms
    // to 60 s away depending on when the test runs.
    let waited_ms = second["wait_ms"].as_u64().expect("wait_ms");
    penalty(&app, &token, &acct, "wb_feeds", "3600").await;
    let (status, body) = permit(&app, &token, &acct, "wb_feeds").await;
    assert_eq!(status, 429, "{body}");

    let resp = app.get_as(Role::Viewer, "/quotas").await;
    assert_eq!(resp.status(), 200);
    let html = resp.text().await.expect("html");
    assert!(html.contains("<h1>Quotas</h1>"), "{html}");
    let row = bucket_row(&html, &acct, "wb_feeds").unwrap_or_else(|| panic!("no row for {acct}: {html}"));
    assert_eq!(cell(row, "grants").as_deref(), Some("2"), "{row}");
    assert_eq!(cell(row, "penalties").as_deref(), Some("1"), "{row}");
    assert_eq!(cell(row, "refusals").as_deref(), Some("wait_ceiling_exceeded 1"), "{row}");
    assert_eq!(cell(row, "used").as_deref(), Some("1 / 1"), "the 429 blocks the bucket: {row}");
    assert_eq!(cell(row, "remaining").as_deref(), Some("0"), "{row}");
    // One grant went at once, one waited up to a minute: p50 is under 1 ms,
    // p95 the histogram bucket of the wait (at most 2× above it, never under).
    assert_eq!(cell(row, "wait-p50").as_deref(), Some("1 ms"), "{row}");
    let p95 = cell(row, "wait-p95").unwrap_or_default();
    if waited_ms >= 1000 {
        assert!(p95.ends_with(" s") || p95.ends_with(" min"), "waited {waited_ms} ms: {row}");
    } else {
        assert!(p95.ends_with(" ms") || p95.ends_with(" s"), "waited {waited_ms} ms: {row}");
    }
    // The account links to its own page.
    assert!(row.contains(&format!("href=\"/quotas/{acct}\"")), "{row}");
}

#[tokio::test]
async fn the_quotas_page_shows_grants_waits_and_refusals_per_lane() {
    let app = spawn_app(Mode::Embedded).await;
    let token = worker_token(&app).await;
    let acct = unique("lanes");
    let ask = |priority: &'static str| {
        let (app, token, acct) = (&app, &token, &acct);
        async move {
            let body = json!({ "account": acct, "scope": "wb_feeds", "method": "PUT", "path": "/pricing/1", "priority": priority });
            let resp = app.client.post(app.url("/api/v1/permits")).bearer_auth(token).json(&body).send().await.expect("permit");
            resp.status().as_u16()
        }
    };
    // wb_feeds: one a minute. Low takes this minute's, a second low is
    // refused (nothing free now), high books the next window.
    assert_eq!(ask("low").await, 200);
    assert_eq!(ask("low").await, 429);
    assert_eq!(ask("high").await, 200);
    let html = app.get_as(Role::Viewer, "/quotas").await.text().await.expect("html");
    let row = bucket_row(&html, &acct, "wb_feeds").unwrap_or_else(|| panic!("no row for {acct}: {html}"));
    let lanes = cell(row, "lanes").unwrap_or_default();
    let lane = |name: &str| {
        let start = lanes.find(&format!("data-lane=\"{name}\"")).and_then(|i| lanes[i..].find('>').map(|j| i + j + 1));
        start.and_then(|s| lanes[s..].find("</span>").map(|e| lanes[s..s + e].to_owned())).unwrap_or_default()
    };
    // High waited for the next window: its p95 is that wait's histogram bucket.
    assert!(lane("high").starts_with("high 1 · p95 ") && lane("high").ends_with(" · 0 refused"), "{row}");
    assert_eq!(lane("normal"), "normal 0 · p95 — · 0 refused", "{row}");
    assert_eq!(lane("low"), "low 1 · p95 1 ms · 1 refused", "{row}");
    // A bucket only ever asked in the normal lane says so.
    let other = unique("plain");
    assert_eq!(permit(&app, &token, &other, "wb_feeds").await.0, 200);
    let html = app.get_as(Role::Viewer, "/quotas").await.text().await.expect("html");
    let row = bucket_row(&html, &other, "wb_feeds").unwrap_or_else(|| panic!("no row for {other}: {html}"));
    assert_eq!(cell(row, "lanes").as_deref().map(|c| c.contains("normal only")), Some(true), "{row}");
}

#[tokio::test]
async fn the_account_search_filters_on_the_server_and_pages_stay_bounded() {
    let app = spawn_app(Mode::Embedded).await;
    let token = worker_token(&app).await;
    let alpha = unique("Alpha");
    let beta = unique("beta");
    for a in [&alpha, &beta] {
        assert_eq!(permit(&app, &token, a, "vtex_pricing").await.0, 200);
    }
    let viewer = app.signed_in(Role::Viewer).await;
    let get = |path: String| {
        let viewer = viewer.clone();
        let url = app.url(&path);
        async move { viewer.get(url).send().await.expect("page").text().await.expect("html") }
    };
    let html = get("/quotas?account=ALPHA".to_owned()).await;
    assert!(bucket_row(&html, &alpha, "vtex_pricing_put").is_some(), "case-insensitive match: {html}");
    assert!(bucket_row(&html, &beta, "vtex_pricing_put").is_none(), "{html}");
    assert!(html.contains("1–1 of 1 buckets"), "{html}");
    // The search box keeps what was searched.
    assert!(html.contains("value=\"ALPHA\""), "{html}");

    let html = get("/quotas?account=no-such-account".to_owned()).await;
    assert!(html.contains("No bucket of an account matching"), "{html}");
    assert!(!html.contains("data-testid=\"bucket-row\""), "{html}");

    // 120 buckets of accounts matching the search: the first page holds 50,
    // the third the last 20. (Searched, so Sluice's own buckets, like the
    // sign-in throttle's per address, are not in the count.)
    for i in 0..120 {
        assert_eq!(permit(&app, &token, &format!("bulk-{i:03}"), "vtex_pricing").await.0, 200);
    }
    let html = get("/quotas?account=bulk-".to_owned()).await;
    assert_eq!(html.matches("data-testid=\"bucket-row\"").count(), 50);
    assert!(html.contains("1–50 of 120 buckets") && html.contains("page 1 of 3"), "{html}");
    assert!(html.contains("href=\"/quotas?account=bulk-&amp;page=2\""), "the pager keeps the search: {html}");
    let html = get("/quotas?account=bulk-&page=3".to_owned()).await;
    assert_eq!(html.matches("data-testid=\"bucket-row\"").count(), 20, "{html}");
    // A page past the end shows the last one.
    let html = get("/quotas?account=bulk-&page=99".to_owned()).await;
    assert_eq!(html.matches("data-testid=\"bucket-row\"").count(), 20, "{html}");
    // Unsearched, every bucket is counted: Alpha, beta, the 120 and the
    // sign-in throttle's bucket for this address.
    let html = get("/quotas".to_owned()).await;
    assert!(html.contains("1–50 of 123 buckets"), "{html}");
}

#[tokio::test]
async fn the_live_stream_sends_new_numbers_after_new_permits() {
    let app = spawn_app(Mode::Distributed).await;
    let token = worker_token(&app).await;
    let acct = unique("live");
    assert_eq!(permit(&app, &token, &acct, "vtex_pricing").await.0, 200);
    let viewer = app.signed_in(Role::Viewer).await;
    let mut resp = viewer
        .get(app.url(&format!("/ui/stream/quotas?account={acct}")))
        .send()
        .await
        .expect("stream");
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "text/event-stream");

    let mut buffer = String::new();
    let mut next_grants = async || -> u64 {
        loop {
            if let Some(end) = buffer.find("\n\n") {
                let event: String = buffer.drain(..end + 2).collect();
                if !event.contains("event: quotas") {
                    continue;
                }
                let data = event.lines().find_map(|l| l.strip_prefix("data: ")).expect("data line");
                let view: Value = serde_json::from_str(data).expect("json");
                return view["rows"][0]["grants"].as_u64().expect("grants");
            }
            let chunk = tokio::time::timeout(Duration::from_secs(10), resp.chunk())
                .await
                .expect("an update within 10 s")
                .expect("stream chunk")
                .expect("stream still open");
            buffer.push_str(&String::from_utf8_lossy(&chunk));
        }
    };
    assert_eq!(next_grants().await, 1, "the first update comes at once");
    assert_eq!(permit(&app, &token, &acct, "vtex_pricing").await.0, 200);
    assert_eq!(permit(&app, &token, &acct, "vtex_pricing").await.0, 200);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let grants = next_grants().await;
        if grants == 3 {
            break;
        }
        assert!(grants < 3 && tokio::time::Instant::now() < deadline, "grants {grants}");
    }
}

#[tokio::test]
async fn without_a_session_pages_redirect_and_data_answers_401() {
    let app = spawn_app(Mode::Embedded).await;
    let resp = app.get("/quotas?account=x").await;
    assert!(resp.status().is_redirection(), "{}", resp.status());
    assert_eq!(resp.headers()["location"], "/login?next=%2Fquotas%3Faccount%3Dx");
    let resp = app.get("/quotas/acme").await;
    assert!(resp.status().is_redirection(), "{}", resp.status());
    assert_eq!(app.get("/ui/stream/quotas").await.status(), 401);
    let resp = app.client.post(app.url("/ui/quotas/list")).form(&[("account", "")]).send().await.expect("call");
    assert_eq!(resp.status(), 401);
    let resp = app.client.post(app.url("/ui/quotas/account")).form(&[("account", "x")]).send().await.expect("call");
    assert_eq!(resp.status(), 401);
    let resp = app.client.post(app.url("/ui/overview/attention")).form(&Vec::<(String, String)>::new()).send().await.expect("call");
    assert_eq!(resp.status(), 401);
}

#[tokio::test]
async fn the_account_page_charts_sampled_usage_and_the_overview_sums_the_last_hour() {
    // Sample every second so the history fills while the test runs.
    let app = spawn_app_with(Mode::Distributed, &[("SLUICE_QUOTA_SAMPLE_EVERY_SECS", "1")]).await;
    let token = worker_token(&app).await;
    let acct = unique("charted");
    let viewer = app.signed_in(Role::Viewer).await;
    // Keep traffic flowing until a sample has charged it to the account.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let html = loop {
        assert_eq!(permit(&app, &token, &acct, "vtex_pricing").await.0, 200);
        let html = viewer.get(app.url(&format!("/quotas/{acct}"))).send().await.expect("page").text().await.expect("html");
        if html.contains("vtex_pricing_put (vtex_pricing)") {
            break html;
        }
        assert!(tokio::time::Instant::now() < deadline, "no sampled usage on the account page: {html}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    assert!(bucket_row(&html, &acct, "vtex_pricing_put").is_some(), "{html}");
    assert_eq!(html.matches("<svg").count(), 2, "usage and penalties charts: {html}");
    assert!(html.contains("permits / min"), "{html}");

    // A 429 now (after the sampler's baseline, which the chart proves) is
    // counted in the overview's last hour, with the breakers and FAILED counts.
    penalty(&app, &token, &acct, "vtex_pricing", "1").await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let html = viewer.get(app.url("/")).send().await.expect("page").text().await.expect("html");
        let penalties = html
            .split("data-testid=\"penalties-1h\"")
            .nth(1)
            .and_then(|s| s.split('>').nth(1))
            .and_then(|s| s.split('<').next())
            .map(str::trim)
            .map(str::to_owned);
        if penalties.as_deref() == Some("1") {
            assert!(html.contains("href=\"/quotas\""), "{html}");
            assert!(html.contains("data-testid=\"open-breakers\""), "{html}");
            assert!(html.contains("data-testid=\"failed-deliveries\""), "{html}");
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "penalty not on the overview: {html}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Not a test: seeds 10,000 buckets through the worker API and times the
/// Quotas page (docs/benchmarks.md, "Quotas page with 10,000 buckets"). Run by
/// hand: `cargo test -p sluice --test it quotas_page_with_10000_buckets -- --ignored --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark, run by hand"]
async fn quotas_page_with_10000_buckets() {
    use futures::StreamExt;
    use std::time::Instant;

    let app = spawn_app(Mode::Distributed).await;
    let token = worker_token(&app).await;
    let seeding = Instant::now();
    futures::stream::iter(0..10_000)
        .map(|i| {
            let (app, token) = (&app, &token);
            async move { permit(app, token, &format!("bench-{i:05}"), "vtex_pricing").await.0 }
        })
        .buffer_unordered(32)
        .for_each(|status| async move { assert_eq!(status, 200) })
        .await;
    println!("seeded 10,000 buckets in {:?}", seeding.elapsed());
    let viewer = app.signed_in(Role::Viewer).await;
    let html = viewer.get(app.url("/quotas")).send().await.expect("page").text().await.expect("html");
    assert!(html.contains("of 10000 buckets"), "{html}");
    for path in ["/quotas", "/quotas?page=120", "/quotas?account=bench-0421", "/quotas?account=no-such", "/quotas/bench-04210"] {
        let url = app.url(path);
        for _ in 0..5 {
            viewer.get(&url).send().await.expect("warm-up").text().await.expect("html");
        }
        let mut times = Vec::with_capacity(100);
        for _ in 0..100 {
            let started = Instant::now();
            let resp = viewer.get(&url).send().await.expect("page");
            assert_eq!(resp.status(), 200);
            resp.text().await.expect("html");
            times.push(started.elapsed());
        }
        times.sort();
        println!("{path:32} p50 {:>8.2?}  p95 {:>8.2?}  max {:>8.2?}", times[49], times[94], times[99]);
    }
}
