//! Web sessions: tower-sessions with its records in Sluice's own database
//! (the `sessions` table), so every instance sees every session and a
//! restart logs nobody out.
//!
//! Cookies are HttpOnly and SameSite=Strict; `Secure` follows the
//! `session_secure_cookie` setting (on behind TLS, off for plain-HTTP
//! loopback). A session ends after `session_idle_secs` without a request and
//! `session_absolute_secs` after sign-in however busy it is (OWASP Session
//! Management Cheat Sheet, "Session Expiration"). Both are decided here, on
//! the engine's clock, from the row's `created_at` and `expires_at`: the
//! expiry tower-sessions writes into a record (from the wall clock) is not
//! used. Each row names its user, so signing out, a role change or a new
//! password can end all of that user's sessions
//! ([`sluice_engine::users::end_sessions`]).

use std::time::Duration;

use async_trait::async_trait;
use sluice_app::ssr::auth::SESSION_USER_ID;
use sluice_engine::clock::SharedClock;
use sluice_engine::db::Db;
use sqlx::Row;
use tower_sessions::cookie::SameSite;
use tower_sessions::session::{Id, Record};
use tower_sessions::session_store::{Error as StoreError, ExpiredDeletion, Result as StoreResult};
use tower_sessions::{Expiry, SessionManagerLayer, SessionStore};

/// Name of the session cookie.
pub const COOKIE_NAME: &str = "sluice_session";
/// A busy session's expiry is pushed out only when that gains more than
/// this, so a burst of requests costs one write, not one each.
const EXTEND_STEP_MS: i64 = 60_000;

/// How long sessions live.
#[derive(Clone, Copy, Debug)]
pub struct Lifetimes {
    /// Without a request.
    pub idle: Duration,
    /// After sign-in, whatever happens.
    pub absolute: Duration,
}

/// A [`SessionStore`] over [`Db`] (PostgreSQL or SQLite).
#[derive(Clone)]
pub struct DbSessionStore {
    db: Db,
    clock: SharedClock,
    lifetimes: Lifetimes,
}

impl std::fmt::Debug for DbSessionStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DbSessionStore").field("lifetimes", &self.lifetimes).finish_non_exhaustive()
    }
}

fn backend(e: impl std::fmt::Display) -> StoreError {
    StoreError::Backend(e.to_string())
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// The signed-in user a record belongs to, if any.
fn user_of(record: &Record) -> Option<&str> {
    record.data.get(SESSION_USER_ID).and_then(|v| v.as_str())
}

fn encode(record: &Record) -> StoreResult<String> {
    serde_json::to_string(record).map_err(|e| StoreError::Encode(e.to_string()))
}

impl DbSessionStore {
    pub fn new(db: Db, clock: SharedClock, lifetimes: Lifetimes) -> Self {
        DbSessionStore { db, clock, lifetimes }
    }

    fn now_ms(&self) -> i64 {
        self.clock.now().as_millis()
    }
}

#[async_trait]
impl SessionStore for DbSessionStore {
    /// A new session (tower-sessions creates one at sign-in, after cycling
    /// the id): its absolute lifetime starts now.
    async fn create(&self, record: &mut Record) -> StoreResult<()> {
        let now = self.now_ms();
        let expires = now + millis(self.lifetimes.idle).min(millis(self.lifetimes.absolute));
        loop {
            let done = sqlx::query(
                "INSERT INTO sessions (id, record_json, expires_at, user_id, created_at) VALUES ($1, $2, $3, $4, $5) \
                 ON CONFLICT (id) DO NOTHING",
            )
            .bind(record.id.to_string())
            .bind(encode(record)?)
            .bind(expires)
            .bind(user_of(record))
            .bind(now)
            .execute(self.db.pool())
            .await
            .map_err(backend)?;
            if done.rows_affected() == 1 {
                return Ok(());
            }
            // Ids are 128 random bits; on the impossible collision, draw again.
            record.id = Id::default();
        }
    }

    /// A request of a live session: new data, and the idle expiry pushed out
    /// (never past the absolute one). An UPDATE only: a session ended
    /// meanwhile (signed out elsewhere, role changed) stays ended even if a
    /// request that read it before is still running.
    async fn save(&self, record: &Record) -> StoreResult<()> {
        let now = self.now_ms();
        let idle_until = now + millis(self.lifetimes.idle);
        sqlx::query(
            "UPDATE sessions SET record_json = $2, user_id = $3, \
             expires_at = CASE WHEN created_at + $4 < $5 THEN created_at + $4 ELSE $5 END \
             WHERE id = $1 AND expires_at > $6 AND (record_json <> $2 OR expires_at < $5 - $7)",
        )
        .bind(record.id.to_string())
        .bind(encode(record)?)
        .bind(user_of(record))
        .bind(millis(self.lifetimes.absolute))
        .bind(idle_until)
        .bind(now)
        .bind(EXTEND_STEP_MS)
        .execute(self.db.pool())
        .await
        .map_err(backend)?;
        Ok(())
    }

    async fn load(&self, id: &Id) -> StoreResult<Option<Record>> {
        let row = sqlx::query("SELECT record_json FROM sessions WHERE id = $1 AND expires_at > $2")
            .bind(id.to_string())
            .bind(self.now_ms())
            .fetch_optional(self.db.pool())
            .await
            .map_err(backend)?;
        match row {
            None => Ok(None),
            Some(row) => {
                let json: String = row.try_get("record_json").map_err(backend)?;
                Ok(Some(serde_json::from_str(&json).map_err(|e| StoreError::Decode(e.to_string()))?))
            }
        }
    }

    async fn delete(&self, id: &Id) -> StoreResult<()> {
        sqlx::query("DELETE FROM sessions WHERE id = $1").bind(id.to_string()).execute(self.db.pool()).await.map_err(backend)?;
        Ok(())
    }
}

#[async_trait]
impl ExpiredDeletion for DbSessionStore {
    async fn delete_expired(&self) -> StoreResult<()> {
        sqlx::query("DELETE FROM sessions WHERE expires_at <= $1")
            .bind(self.now_ms())
            .execute(self.db.pool())
            .await
            .map_err(backend)?;
        Ok(())
    }
}

/// The store for this instance's settings and clock.
pub fn store(state: &crate::state::AppState) -> DbSessionStore {
    let lifetimes = Lifetimes { idle: state.settings.session_idle, absolute: state.settings.session_absolute };
    DbSessionStore::new(state.db.clone(), state.clock.clone(), lifetimes)
}

/// The session layer for the router.
pub fn layer(store: DbSessionStore, secure: bool) -> SessionManagerLayer<DbSessionStore> {
    let idle = tower_sessions::cookie::time::Duration::seconds(i64::try_from(store.lifetimes.idle.as_secs()).unwrap_or(i64::MAX));
    // Cookies are not signed: the id is 128 random bits and means nothing
    // without its row in the database.
    SessionManagerLayer::new(store)
        .with_name(COOKIE_NAME)
        .with_http_only(true)
        .with_same_site(SameSite::Strict)
        .with_secure(secure)
        .with_path("/")
        // The browser forgets the cookie after the idle time too.
        .with_expiry(Expiry::OnInactivity(idle))
        // Every request of a signed-in session reaches the store, which
        // pushes out its idle expiry (see `save`).
        .with_always_save(true)
}
