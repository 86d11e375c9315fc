//! Isolated databases for tests: every call gets a database of its own.
//!
//! PostgreSQL: a fresh database named `sluice_t_<ulid>` is created on the
//! server named by `SLUICE_TEST_POSTGRES_URL` (default
//! `postgres://postgres@127.0.0.1:5432/postgres`), migrated, and dropped
//! when the handle drops (the test command also drops leftovers of runs that
//! were killed half way, `scripts/test.sh`).
//! SQLite: a file in a temporary directory removed when the handle drops.
//!
//! Tests fail, rather than skip, when PostgreSQL is unreachable: a skipped
//! contract suite would report green for a backend nobody tested.

use std::ops::Deref;

use sqlx::Connection;

use super::{Db, PoolSettings};

pub const DEFAULT_TEST_POSTGRES_URL: &str = "postgres://postgres@127.0.0.1:5432/postgres";

/// The admin URL of the test PostgreSQL server.
pub fn test_postgres_url() -> String {
    std::env::var("SLUICE_TEST_POSTGRES_URL").unwrap_or_else(|_| DEFAULT_TEST_POSTGRES_URL.to_owned())
}

/// A migrated database that belongs to one test.
pub struct TestDb {
    db: Db,
    /// The URL other processes (a spawned `sluice`, a worker) can use.
    pub url: String,
    _dir: Option<tempfile::TempDir>,
}

impl Drop for TestDb {
    /// Drop a PostgreSQL test database with the test, so runs leave nothing
    /// behind. `WITH (FORCE)` ends the connections still open (this handle's
    /// pool, an app that shares it). Runs on a thread of its own: a drop may
    /// happen inside a runtime, which cannot be blocked on from within.
    fn drop(&mut self) {
        if self._dir.is_some() {
            return;
        }
        let Some(name) = self.url.rsplit('/').next().map(|n| n.split('?').next().unwrap_or(n).to_owned()) else {
            return;
        };
        if !name.starts_with("sluice_t_") {
            return;
        }
        let admin_url = test_postgres_url();
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().ok()?;
            runtime.block_on(async {
                let mut admin = sqlx::AnyConnection::connect(&admin_url).await.ok()?;
                sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).execute(&mut admin).await.ok()?;
                admin.close().await.ok()
            })
        })
        .join();
        // A database that could not be dropped is left to the test command's sweep.
        let _ = dropped;
    }
}

impl Deref for TestDb {
    type Target = Db;
    fn deref(&self) -> &Db {
        &self.db
    }
}

impl TestDb {
    pub fn db(&self) -> Db {
        self.db.clone()
    }

    /// A new, migrated SQLite database in a temporary directory.
    pub async fn sqlite() -> TestDb {
        let dir = tempfile::tempdir().expect("temp dir for the SQLite test database");
        let url = format!("sqlite://{}?mode=rwc", dir.path().join("sluice.db").display());
        let db = Db::connect(&url, &PoolSettings::default()).await.expect("open SQLite test database");
        db.migrate().await.expect("migrate SQLite test database");
        TestDb { db, url, _dir: Some(dir) }
    }

    /// A new, migrated PostgreSQL database of its own.
    pub async fn postgres() -> TestDb {
        let admin_url = test_postgres_url();
        let name = format!("sluice_t_{}", ulid::Ulid::new().to_string().to_lowercase());
        sqlx::any::install_default_drivers();
        let mut admin = sqlx::AnyConnection::connect(&admin_url)
            .await
            .unwrap_or_else(|e| panic!("PostgreSQL for tests is not reachable at {admin_url}: {e}"));
        sqlx::query(&format!("CREATE DATABASE {name}")).execute(&mut admin).await.expect("create test database");
        let _ = admin.close().await;
        let url = replace_database(&admin_url, &name);
        let db = Db::connect(&url, &PoolSettings { max_connections: 8, ..PoolSettings::default() })
            .await
            .expect("connect to test database");
        db.migrate().await.expect("migrate PostgreSQL test database");
        TestDb { db, url, _dir: None }
    }

    /// Both backends, for contract suites that must hold on each.
    pub async fn each() -> [TestDb; 2] {
        [TestDb::sqlite().await, TestDb::postgres().await]
    }
}

/// `postgres://u@h:5432/old?x=y` with the database replaced by `name`.
fn replace_database(url: &str, name: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url, None),
    };
    let scheme_end = base.find("://").map(|i| i + 3).unwrap_or(0);
    let path_start = base[scheme_end..].find('/').map(|i| i + scheme_end).unwrap_or(base.len());
    let mut out = format!("{}/{}", &base[..path_start], name);
    if let Some(q) = query {
        out.push('?');
        out.push_str(q);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::replace_database;

    #[test]
    fn the_database_name_is_replaced_and_the_rest_kept() {
        assert_eq!(replace_database("postgres://postgres@127.0.0.1:5432/postgres", "t1"), "postgres://postgres@127.0.0.1:5432/t1");
        assert_eq!(replace_database("postgres://h:5432", "t1"), "postgres://h:5432/t1");
        assert_eq!(replace_database("postgres://h/db?sslmode=disable", "t1"), "postgres://h/t1?sslmode=disable");
    }
}
