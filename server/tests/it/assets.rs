//! The browser client's files: named by content, precompressed, cached.

use crate::helpers::{spawn_app_with, Mode, Role};

const HASH_JS: &str = "0123456789abcdef";
const HASH_WASM: &str = "fedcba9876543210";
const HASH_CSS: &str = "00112233aabbccdd";

/// A built site as `build_site` leaves it: hashed names, `.br`/`.gz`
/// siblings, `hash.txt`. The compressed files hold marker bytes, so a test
/// can tell which one the server sent.
fn site() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    let pkg = dir.path().join("pkg");
    std::fs::create_dir(&pkg).expect("pkg dir");
    let write = |name: &str, body: &str| std::fs::write(pkg.join(name), body).expect("write");
    write(&format!("sluice.{HASH_JS}.js"), "plain js");
    write(&format!("sluice.{HASH_JS}.js.br"), "brotli js");
    write(&format!("sluice.{HASH_JS}.js.gz"), "gzip js");
    write(&format!("sluice.{HASH_WASM}.wasm"), "plain wasm");
    write(&format!("sluice.{HASH_CSS}.css"), "body {}");
    write("unhashed.css", "p {}");
    std::fs::write(dir.path().join("hash.txt"), format!("js: {HASH_JS}\nwasm: {HASH_WASM}\ncss: {HASH_CSS}\n"))
        .expect("hash.txt");
    dir
}

#[tokio::test]
async fn pages_name_the_hashed_files_and_the_server_sends_them_precompressed_and_cached_for_a_year() {
    let site = site();
    let root = site.path().display().to_string();
    let app = spawn_app_with(Mode::Embedded, &[("SLUICE_SITE_ROOT", &root)]).await;

    let html = app.get_as(Role::Viewer, "/").await.text().await.expect("html");
    assert!(html.contains(&format!("/pkg/sluice.{HASH_JS}.js")), "{html}");
    assert!(html.contains(&format!("/pkg/sluice.{HASH_WASM}.wasm")), "{html}");
    assert!(html.contains(&format!("/pkg/sluice.{HASH_CSS}.css")), "{html}");

    let js = format!("/pkg/sluice.{HASH_JS}.js");
    let get = |encoding: &'static str| {
        let req = app.client.get(app.url(&js));
        async move { req.header("accept-encoding", encoding).send().await.expect("request") }
    };
    for (accept, encoding, body) in
        [("br, gzip", Some("br"), "brotli js"), ("gzip", Some("gzip"), "gzip js"), ("identity", None, "plain js")]
    {
        let resp = get(accept).await;
        assert_eq!(resp.status(), 200, "{accept}");
        let header = |name: &str| resp.headers().get(name).map(|v| v.to_str().expect("ascii").to_owned());
        assert_eq!(header("content-encoding").as_deref(), encoding, "{accept}");
        assert_eq!(header("cache-control").as_deref(), Some("public, max-age=31536000, immutable"), "{accept}");
        assert_eq!(header("vary").as_deref(), Some("accept-encoding"), "{accept}");
        assert!(header("content-type").expect("content type").contains("javascript"), "{accept}");
        assert_eq!(resp.text().await.expect("body"), body, "{accept}");
    }

    // A file without a content hash in its name is revalidated on every use.
    let resp = app.get("/pkg/unhashed.css").await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers().get("cache-control").expect("cache-control"), "no-cache");
    // A missing file is a 404 that no browser keeps.
    let resp = app.get(&format!("/pkg/sluice.{HASH_CSS}.js")).await;
    assert_eq!(resp.status(), 404);
    assert_eq!(resp.headers().get("cache-control").expect("cache-control"), "no-store");
}

#[tokio::test]
async fn without_a_hash_file_pages_name_the_plain_files() {
    let site = tempfile::tempdir().expect("temp dir");
    let root = site.path().display().to_string();
    let app = spawn_app_with(Mode::Embedded, &[("SLUICE_SITE_ROOT", &root)]).await;
    let html = app.get_as(Role::Viewer, "/").await.text().await.expect("html");
    assert!(html.contains("/pkg/sluice.js"), "{html}");
    assert!(html.contains("/pkg/sluice_bg.wasm"), "{html}");
    assert!(html.contains("/pkg/sluice.css"), "{html}");
}
