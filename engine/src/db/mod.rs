//! The relational database, as every part of Sluice sees it.
//!
//! One handle, [`Db`], over an `sqlx::AnyPool`, so the same queries run on
//! PostgreSQL (distributed mode) and SQLite (embedded mode). The conventions
//! that make that work are written down in `docs/architecture.md`:
//! instants are `BIGINT` Unix milliseconds, ids are `TEXT`, JSON is `TEXT`,
//! placeholders are `$1, $2, …`. Where the dialects really differ (row locks,
//! for instance) code asks [`Db::backend`].
//!
//! Migrations live in `migrations/postgres` and `migrations/sqlite` at the
//! workspace root and are compiled into the binary; [`Db::migrate`] runs the
//! set for the connected backend and any failure is returned, so the caller
//! can refuse to start.

#[cfg(any(test, feature = "testing"))]
pub mod testing;

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use sqlx::any::{AnyConnectOptions, AnyPoolOptions};
use sqlx::migrate::Migrator;
use sqlx::AnyPool;

static POSTGRES_MIGRATIONS: Migrator = sqlx::migrate!("../migrations/postgres");
static SQLITE_MIGRATIONS: Migrator = sqlx::migrate!("../migrations/sqlite");

/// Whether `err`, or any error it was caused by, says the database cannot be
/// reached right now (connection refused or dropped, pool exhausted, the
/// server shutting down or starting up) rather than that a query is wrong:
/// callers answer "retry shortly" for these, never a bare internal error.
pub fn is_unreachable(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(err);
    while let Some(e) = next {
        if let Some(sqlx_err) = e.downcast_ref::<sqlx::Error>() {
            return sqlx_unreachable(sqlx_err);
        }
        next = e.source();
    }
    false
}

fn sqlx_unreachable(err: &sqlx::Error) -> bool {
    match err {
        sqlx::Error::Io(_) | sqlx::Error::Tls(_) | sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed => true,
        sqlx::Error::WorkerCrashed => true,
        // SQLSTATE class 08 (connection exception), 57P01-57P03 (admin or
        // crash shutdown, cannot connect now): PostgreSQL restarting.
        sqlx::Error::Database(db) => db
            .code()
            .is_some_and(|c| c.starts_with("08") || matches!(c.as_ref(), "57P01" | "57P02" | "57P03")),
        _ => false,
    }
}

/// `$s, $s+1, …`: a list of `n` placeholders for `IN (…)`.
pub(crate) fn placeholder_list(n: usize, start: usize) -> String {
    (start..start + n).map(|i| format!("${i}")).collect::<Vec<_>>().join(", ")
}

/// `($s, $s+1, …), (…)`: `rows` tuples of `cols` placeholders, numbered from `start`.
pub(crate) fn value_rows(rows: usize, cols: usize, start: usize) -> String {
    let mut out = String::with_capacity(rows * cols * 5);
    for r in 0..rows {
        if r > 0 {
            out.push_str(", ");
        }
        out.push('(');
        for c in 0..cols {
            if c > 0 {
                out.push_str(", ");
            }
            out.push_str(&format!("${}", start + r * cols + c));
        }
        out.push(')');
    }
    out
}

/// Which database engine a [`Db`] talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Backend {
    Postgres,
    Sqlite,
}

impl Backend {
    /// The backend a connection URL names, or `None` for an unsupported scheme.
    pub fn from_url(url: &str) -> Option<Backend> {
        let scheme = url.split(':').next()?;
        match scheme {
            "postgres" | "postgresql" => Some(Backend::Postgres),
            "sqlite" => Some(Backend::Sqlite),
            _ => None,
        }
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Backend::Postgres => "postgres",
            Backend::Sqlite => "sqlite",
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum DbError {
    #[error("unsupported database URL scheme (expected postgres:// or sqlite://)")]
    UnsupportedScheme,
    #[error("could not connect to the {backend} database")]
    Connect {
        backend: Backend,
        #[source]
        source: sqlx::Error,
    },
    #[error("migrating the {backend} database failed")]
    Migrate {
        backend: Backend,
        #[source]
        source: sqlx::migrate::MigrateError,
    },
}

/// Pool settings that matter in production.
#[derive(Debug, Clone)]
pub struct PoolSettings {
    pub max_connections: u32,
    pub acquire_timeout: Duration,
}

impl Default for PoolSettings {
    fn default() -> Self {
        PoolSettings { max_connections: 16, acquire_timeout: Duration::from_secs(5) }
    }
}

/// How long a SQLite connection may sit unused in the pool before it is
/// closed (reopening one is a file open and three pragmas).
pub const SQLITE_IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// A pooled connection idle at least this long is pinged before it is
/// handed out; one in steady use is not (docs/decisions.md, "Pooled
/// connections are pinged only after they sat idle"). A connection whose
/// server went away (a restart, which takes longer than this) was idle for
/// at least the time it was away, so it is pinged, found broken and
/// replaced before a statement fails on it.
pub const PING_IDLE_AFTER: Duration = Duration::from_millis(50);

/// Ping `conn` when it sat unused (`idle_for`) for [`PING_IDLE_AFTER`] or
/// longer: the one rule for the pool's hand-out and for a connection a
/// caller keeps itself (intake's).
pub(crate) async fn ping_if_idle(conn: &mut sqlx::AnyConnection, idle_for: Duration) -> Result<(), sqlx::Error> {
    if idle_for >= PING_IDLE_AFTER {
        sqlx::Connection::ping(conn).await?;
    }
    Ok(())
}

/// A pooled connection to PostgreSQL or SQLite.
#[derive(Clone)]
pub struct Db {
    pool: AnyPool,
    backend: Backend,
}

impl fmt::Debug for Db {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never print the URL: it may carry a password.
        f.debug_struct("Db").field("backend", &self.backend).finish_non_exhaustive()
    }
}

impl Db {
    /// Connect to `url` (`postgres://…` or `sqlite://path?mode=rwc`).
    pub async fn connect(url: &str, settings: &PoolSettings) -> Result<Db, DbError> {
        sqlx::any::install_default_drivers();
        let backend = Backend::from_url(url).ok_or(DbError::UnsupportedScheme)?;
        let options =
            AnyConnectOptions::from_str(url).map_err(|source| DbError::Connect { backend, source })?;
        let mut pool = AnyPoolOptions::new()
            .max_connections(settings.max_connections)
            .acquire_timeout(settings.acquire_timeout)
            // sqlx pings every connection it hands out by default: a round
            // trip before each statement. One released (and pinged on its
            // release) moments ago is handed out without it; see
            // `PING_IDLE_AFTER`.
            .test_before_acquire(false)
            .before_acquire(|conn, meta| {
                Box::pin(async move {
                    ping_if_idle(conn, meta.idle_for).await?;
                    Ok(true)
                })
            });
        if backend == Backend::Sqlite {
            // SQLite allows one writer at a time; a small pool plus WAL and a
            // busy timeout keeps writers queueing instead of failing.
            // A connection unused for a minute is closed: its page cache and
            // prepared statements (C heap, up to megabytes) go with it, so an
            // idle server holds one connection's, not the busiest minute's.
            pool = pool.max_connections(settings.max_connections.min(8)).idle_timeout(SQLITE_IDLE_TIMEOUT).after_connect(|conn, _| {
                Box::pin(async move {
                    sqlx::query("PRAGMA busy_timeout = 10000").execute(&mut *conn).await?;
                    sqlx::query("PRAGMA foreign_keys = ON").execute(&mut *conn).await?;
                    sqlx::query("PRAGMA synchronous = NORMAL").execute(&mut *conn).await?;
                    Ok(())
                })
            });
        }
        let pool = pool.connect_with(options).await.map_err(|source| DbError::Connect { backend, source })?;
        if backend == Backend::Sqlite {
            sqlx::query("PRAGMA journal_mode = WAL")
                .execute(&pool)
                .await
                .map_err(|source| DbError::Connect { backend, source })?;
        }
        Ok(Db { pool, backend })
    }

    /// Apply every pending migration for this backend.
    pub async fn migrate(&self) -> Result<(), DbError> {
        let migrator = match self.backend {
            Backend::Postgres => &POSTGRES_MIGRATIONS,
            Backend::Sqlite => &SQLITE_MIGRATIONS,
        };
        migrator.run(&self.pool).await.map_err(|source| DbError::Migrate { backend: self.backend, source })
    }

    pub fn pool(&self) -> &AnyPool {
        &self.pool
    }

    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// SQLite: close the pool's idle connections but one, and hand the
    /// page caches back (`PRAGMA shrink_memory`). Each connection keeps a
    /// page cache (up to 2 MB), its schema, its prepared statements and a
    /// lookaside buffer, and the pool hands its idle connections out in
    /// turn: anything that polls (the delivery worker, every half second)
    /// keeps every connection the busiest minute opened in use, so the idle
    /// timeout ([`SQLITE_IDLE_TIMEOUT`]) never ends them. The bundled SQLite
    /// is built with `SQLITE_ENABLE_MEMORY_MANAGEMENT`, which puts the page
    /// caches of all connections in one group: one `shrink_memory` frees
    /// every page no statement is using. Called once a minute by the quota
    /// history sampler, before freed memory goes back to the system; a busy
    /// moment opens connections again (a file open and three pragmas each).
    /// PostgreSQL: nothing to do.
    pub async fn release_idle_memory(&self) {
        if self.backend != Backend::Sqlite {
            return;
        }
        let mut idle = Vec::new();
        while let Some(conn) = self.pool.try_acquire() {
            idle.push(conn);
        }
        for surplus in idle.drain(idle.len().min(1)..) {
            let _ = surplus.close().await;
        }
        // None idle: every connection is at work, and there is nothing to give back.
        if let Some(kept) = idle.first_mut() {
            if let Err(e) = sqlx::query("PRAGMA shrink_memory").execute(&mut **kept).await {
                tracing::debug!(error = &e as &dyn std::error::Error, "shrinking SQLite's page cache failed");
            }
        }
    }

    /// One cheap round trip, for readiness checks.
    pub async fn ping(&self) -> Result<(), sqlx::Error> {
        sqlx::query("SELECT 1").execute(&self.pool).await.map(|_| ())
    }

    pub async fn close(&self) {
        self.pool.close().await;
    }
}

#[cfg(test)]
mod tests {
    use super::testing::TestDb;
    use super::*;

    #[test]
    fn backend_is_read_from_the_url_scheme() {
        assert_eq!(Backend::from_url("postgres://u@h/db"), Some(Backend::Postgres));
        assert_eq!(Backend::from_url("postgresql://h/db"), Some(Backend::Postgres));
        assert_eq!(Backend::from_url("sqlite://data/sluice.db?mode=rwc"), Some(Backend::Sqlite));
        assert_eq!(Backend::from_url("mysql://h/db"), None);
        assert_eq!(Backend::from_url("nonsense"), None);
    }

    async fn round_trip_conventions(db: &Db) {
        // The conventions of docs/architecture.md, checked on each backend:
        // $N placeholders, BIGINT millis, TEXT ids and JSON, BOOLEAN.
        sqlx::query(
            "INSERT INTO audit_log (id, at, actor, action, target, before_json, after_json) \
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
        )
        .bind("aud_1")
        .bind(1_767_225_600_123_i64)
        .bind("admin")
        .bind("limit.update")
        .bind("rule:content")
        .bind(Some(r#"{"tokens":1}"#))
        .bind(None::<String>)
        .execute(db.pool())
        .await
        .expect("insert");
        let row: (String, i64, Option<String>, Option<String>) =
            sqlx::query_as("SELECT id, at, before_json, after_json FROM audit_log WHERE actor = $1")
                .bind("admin")
                .fetch_one(db.pool())
                .await
                .expect("select");
        assert_eq!(row, ("aud_1".into(), 1_767_225_600_123, Some(r#"{"tokens":1}"#.into()), None));
        let (n,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM audit_log").fetch_one(db.pool()).await.expect("count");
        assert_eq!(n, 1);
    }

    #[tokio::test]
    async fn sqlite_runs_migrations_and_the_shared_sql_conventions() {
        let db = TestDb::sqlite().await;
        round_trip_conventions(&db).await;
        // Migrating twice is a no-op, not an error.
        db.migrate().await.expect("second migrate");
    }

    #[tokio::test]
    async fn postgres_runs_migrations_and_the_shared_sql_conventions() {
        let db = TestDb::postgres().await;
        round_trip_conventions(&db).await;
        db.migrate().await.expect("second migrate");
    }
}
