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

/// A PostgreSQL server of a test's own (`initdb` in a temporary directory, a
/// spare loopback port, trust auth), for fault tests that stop and restart
/// the database under load: the shared test server is never stopped. Killed
/// (immediate shutdown) on drop.
///
/// Needs the server binaries (`initdb`, `pg_ctl`; Debian's
/// `/usr/lib/postgresql/<version>/bin`). As root they run as the `postgres`
/// user, since PostgreSQL refuses to run as root.
pub struct OwnPostgres {
    pub port: u16,
    bin: std::path::PathBuf,
    dir: tempfile::TempDir,
    as_postgres_user: bool,
}

impl OwnPostgres {
    /// Create the cluster and start it. Blocking (a second or two).
    pub fn start() -> OwnPostgres {
        let bin = postgres_bin_dir().expect("PostgreSQL server binaries (initdb, pg_ctl) are installed");
        let dir = tempfile::tempdir().expect("temp dir for a PostgreSQL cluster");
        let as_postgres_user = is_root();
        if as_postgres_user {
            run(std::process::Command::new("chown").args(["-R", "postgres:postgres"]).arg(dir.path()));
        }
        let pg = OwnPostgres { port: crate::redis_conn::testing::free_port(), bin, dir, as_postgres_user };
        run(pg
            .command("initdb")
            .args(["-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync", "-D"])
            .arg(pg.data_dir()));
        pg.start_again();
        pg
    }

    /// `postgres://postgres@127.0.0.1:<port>/postgres`.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// Start the stopped server again on the same port; returns once it accepts connections.
    pub fn start_again(&self) {
        let options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off",
            self.port,
            self.dir.path().display()
        );
        run(self
            .command("pg_ctl")
            .args(["-w", "-t", "30", "-l"])
            .arg(self.dir.path().join("server.log"))
            .arg("-D")
            .arg(self.data_dir())
            .args(["-o", &options, "start"]));
    }

    /// Stop the server (fast shutdown: open connections are ended).
    pub fn stop(&self) {
        run(self.command("pg_ctl").args(["-w", "-m", "fast", "-D"]).arg(self.data_dir()).arg("stop"));
    }

    fn data_dir(&self) -> std::path::PathBuf {
        self.dir.path().join("data")
    }

    fn command(&self, program: &str) -> std::process::Command {
        let path = self.bin.join(program);
        if self.as_postgres_user {
            let mut c = std::process::Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(path);
            c
        } else {
            std::process::Command::new(path)
        }
    }
}

impl Drop for OwnPostgres {
    fn drop(&mut self) {
        let _ = self
            .command("pg_ctl")
            .args(["-m", "immediate", "-D"])
            .arg(self.data_dir())
            .arg("stop")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status();
    }
}

fn run(cmd: &mut std::process::Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("running {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn is_root() -> bool {
    std::process::Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// The newest `/usr/lib/postgresql/<version>/bin` with `initdb`, or the
/// directory `pg_config --bindir` names.
fn postgres_bin_dir() -> Option<std::path::PathBuf> {
    let mut versions: Vec<(u32, std::path::PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let version = e.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").exists().then_some((version, bin))
        })
        .collect();
    versions.sort();
    if let Some((_, bin)) = versions.pop() {
        return Some(bin);
    }
    let out = std::process::Command::new("pg_config").arg("--bindir").output().ok()?;
    let bin = std::path::PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    bin.join("initdb").exists().then_some(bin)
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
