//! The `sluice` binary itself: configuration errors and failed migrations
//! stop it with a clear message and a non-zero exit code.

use std::process::Command;

fn sluice() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sluice"));
    // A clean environment: only what the test sets.
    for (k, _) in std::env::vars() {
        if k.starts_with("SLUICE_") || k == "DATABASE_URL" || k == "REDIS_URL" {
            cmd.env_remove(k);
        }
    }
    cmd
}

#[test]
fn a_port_out_of_range_stops_startup_with_the_key_named() {
    let out = sluice().env("SLUICE_LISTEN", "127.0.0.1:99999").arg("serve").output().expect("run sluice");
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("listen (SLUICE_LISTEN)"), "{stderr}");
}

#[test]
fn a_bad_database_url_stops_startup_without_leaking_the_password() {
    let out = sluice().env("DATABASE_URL", "oracle://scott:tiger@db/orcl").arg("migrate").output().expect("run");
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("database_url (DATABASE_URL)"), "{stderr}");
    assert!(!stderr.contains("tiger"), "{stderr}");
}

#[test]
fn a_missing_config_file_stops_startup() {
    let out = sluice().args(["--config", "/nonexistent/sluice.toml", "serve"]).output().expect("run");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/sluice.toml"));
}

#[test]
fn migrate_creates_the_embedded_database_in_the_data_dir() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let out = sluice().env("SLUICE_DATA_DIR", &data).arg("migrate").output().expect("run");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(data.join("sluice.db").exists());
}

#[test]
fn a_failed_migration_stops_the_process() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("broken.db");
    // A table in the way of migration 0001: the migration must fail, and the
    // server must refuse to start rather than serve a half-migrated schema.
    let status = Command::new("python3")
        .args(["-c", "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); c.execute('CREATE TABLE audit_log (x INTEGER)'); c.commit()"])
        .arg(&file)
        .status()
        .expect("python3 creates the conflicting table");
    assert!(status.success());
    let url = format!("sqlite://{}", file.display());
    for cmd in ["migrate", "serve"] {
        let out = sluice()
            .env("DATABASE_URL", &url)
            .env("SLUICE_DATA_DIR", dir.path())
            .env("SLUICE_LISTEN", "127.0.0.1:0")
            .arg(cmd).output().expect("run");
        assert_eq!(out.status.code(), Some(1), "{cmd} should fail");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("migration failed"), "{cmd}: {stderr}");
    }
}

/// The binary runs on jemalloc and says on `/metrics` what it holds; the
/// library alone (what the other tests run) has no allocator to ask.
#[tokio::test]
async fn the_binary_reports_its_allocator_on_metrics() {
    let dir = tempfile::tempdir().expect("tempdir");
    let port = crate::helpers::closed_port();
    let child = sluice()
        .env("SLUICE_DATA_DIR", dir.path())
        .env("SLUICE_LISTEN", format!("127.0.0.1:{port}"))
        .env("SLUICE_DELIVERY_WORKER", "false")
        .env("SLUICE_LOG", "warn")
        .arg("serve")
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("start sluice serve");
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _stop = Kill(child);
    let client = reqwest::Client::new();
    let url = format!("http://127.0.0.1:{port}");
    let mut text = None;
    for _ in 0..300 {
        if let Ok(r) = client.get(format!("{url}/metrics")).send().await {
            text = Some(r.text().await.expect("metrics body"));
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let text = text.expect("sluice serve answered within 15 s");
    let bytes = |kind: &str| -> f64 {
        let label = format!("kind=\"{kind}\"");
        crate::helpers::sample(&text, "sluice_allocator_bytes", &[&label])
            .unwrap_or_else(|| panic!("no sluice_allocator_bytes{{{label}}} in {text}"))
    };
    let (allocated, active, metadata, resident) = (bytes("allocated"), bytes("active"), bytes("metadata"), bytes("resident"));
    assert!(allocated > 100_000.0, "a running server has allocated something: {allocated}");
    assert!(active >= allocated, "pages in use hold what is allocated: {active} < {allocated}");
    assert!(metadata > 0.0, "{metadata}");
    assert!(resident >= active, "what is resident includes the active pages: {resident} < {active}");
    bytes("retained");
}
