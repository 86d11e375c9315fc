//! Web sessions: tower-sessions with its records in Sluice's own database
//! (the `sessions` table), so every instance sees every session and a
//! restart logs nobody out.
//!
//! Cookies are HttpOnly and SameSite=Strict; `Secure` follows the
//! `session_secure_cookie` setting (on behind TLS, off for plain-HTTP
//! loopback). Sessions expire after 12 hours without a request.

use async_trait::async_trait;
use sluice_engine::db::Db;
use sqlx::Row;
use tower_sessions::cookie::SameSite;
use tower_sessions::session::{Id, Record};
use tower_sessions::session_store::{Error as StoreError, ExpiredDeletion, Result as StoreResult};
use tower_sessions::{Expiry, SessionManagerLayer, SessionStore};

/// Name of the session cookie.
pub const COOKIE_NAME: &str = "sluice_session";
/// Inactivity after which a session ends.
pub const IDLE_EXPIRY: tower_sessions::cookie::time::Duration = tower_sessions::cookie::time::Duration::hours(12);

/// A [`SessionStore`] over [`Db`] (PostgreSQL or SQLite).
#[derive(Clone, Debug)]
pub struct DbSessionStore {
    db: Db,
}

impl DbSessionStore {
    pub fn new(db: Db) -> Self {
        DbSessionStore { db }
    }
}

fn backend(e: impl std::fmt::Display) -> StoreError {
    StoreError::Backend(e.to_string())
}

fn expires_ms(record: &Record) -> i64 {
    record.expiry_date.unix_timestamp() * 1000 + i64::from(record.expiry_date.millisecond())
}

impl DbSessionStore {
    /// Write `record`; `on_conflict` says what an existing row with its id gets.
    /// Returns whether a row was written.
    async fn write(&self, record: &Record, on_conflict: &str) -> StoreResult<bool> {
        let json = serde_json::to_string(record).map_err(|e| StoreError::Encode(e.to_string()))?;
        let done = sqlx::query(&format!(
            "INSERT INTO sessions (id, record_json, expires_at) VALUES ($1, $2, $3) ON CONFLICT (id) {on_conflict}"
        ))
        .bind(record.id.to_string())
        .bind(json)
        .bind(expires_ms(record))
        .execute(self.db.pool())
        .await
        .map_err(backend)?;
        Ok(done.rows_affected() == 1)
    }
}

#[async_trait]
impl SessionStore for DbSessionStore {
    async fn create(&self, record: &mut Record) -> StoreResult<()> {
        // Ids are 128 random bits; on the impossible collision, draw again.
        while !self.write(record, "DO NOTHING").await? {
            record.id = Id::default();
        }
        Ok(())
    }

    async fn save(&self, record: &Record) -> StoreResult<()> {
        self.write(record, "DO UPDATE SET record_json = excluded.record_json, expires_at = excluded.expires_at").await?;
        Ok(())
    }

    async fn load(&self, id: &Id) -> StoreResult<Option<Record>> {
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or_default();
        let row = sqlx::query("SELECT record_json FROM sessions WHERE id = $1 AND expires_at > $2")
            .bind(id.to_string())
            .bind(now_ms)
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
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or_default();
        sqlx::query("DELETE FROM sessions WHERE expires_at <= $1").bind(now_ms).execute(self.db.pool()).await.map_err(backend)?;
        Ok(())
    }
}

/// The session layer for the router.
pub fn layer(db: Db, secure: bool) -> SessionManagerLayer<DbSessionStore> {
    // Cookies are not signed: the id is 128 random bits and means nothing
    // without its row in the database.
    SessionManagerLayer::new(DbSessionStore::new(db))
        .with_name(COOKIE_NAME)
        .with_http_only(true)
        .with_same_site(SameSite::Strict)
        .with_secure(secure)
        .with_path("/")
        .with_expiry(Expiry::OnInactivity(IDLE_EXPIRY))
}
