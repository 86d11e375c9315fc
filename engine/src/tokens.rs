//! API tokens: created by admins (`sluice token add`), stored hashed, checked
//! on every API request.
//!
//! Tokens are 256 bits from the OS RNG, so a plain SHA-256 is enough to store
//! them: slow password hashes (argon2) exist to stop guessing low-entropy
//! secrets, and nobody can guess 2^256 values. A fast hash also lets the
//! lookup be one indexed equality query instead of a hash per stored token.

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;
use std::sync::Mutex;
use std::time::Duration;

use sha2::{Digest, Sha256};
use crate::clock::Timestamp;
use crate::db::Db;
use sqlx::Row;

/// Prefix of every token, so a leaked one is easy to recognise (secret scanners).
const TOKEN_PREFIX: &str = "slk_";
/// How stale `last_used_at` may get before a request writes it again: one
/// write per token per minute, not one per request.
const LAST_USED_EVERY_MS: i64 = 60_000;

/// What a token may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum ApiScope {
    /// Permits, penalties, events, leases and reads.
    Worker,
    /// Everything a worker may do, plus limit writes.
    Admin,
}

impl ApiScope {
    pub fn as_str(self) -> &'static str {
        match self {
            ApiScope::Worker => "worker",
            ApiScope::Admin => "admin",
        }
    }

    /// Whether a token of this scope may do what `needed` allows.
    pub fn allows(self, needed: ApiScope) -> bool {
        self >= needed
    }
}

impl fmt::Display for ApiScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ApiScope {
    type Err = TokenError;
    fn from_str(s: &str) -> Result<Self, TokenError> {
        match s {
            "worker" => Ok(ApiScope::Worker),
            "admin" => Ok(ApiScope::Admin),
            other => Err(TokenError::Scope(other.chars().take(40).collect())),
        }
    }
}

/// A stored token, without its secret.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiToken {
    pub id: String,
    pub name: String,
    pub scope: ApiScope,
    pub created_at: Timestamp,
}

/// The secret of a new token. Shown once; `Debug` does not print it.
pub struct TokenSecret(String);

impl TokenSecret {
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for TokenSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TokenSecret(<redacted>)")
    }
}

#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error("scope must be 'worker' or 'admin', got '{0}'")]
    Scope(String),
    #[error("name must be 1–100 characters")]
    Name,
    #[error("a token named '{0}' already exists")]
    Duplicate(String),
    #[error("database error")]
    Db(#[from] sqlx::Error),
}

fn hash(secret: &str) -> String {
    hex::encode(Sha256::digest(secret.as_bytes()))
}

/// Tokens this process authenticated recently, so that a busy worker's
/// permits do not each read the database (docs/decisions.md, "API token
/// cache"). A token found live is trusted for `ttl`; unknown and revoked
/// tokens are never cached, so a wrong token is always checked afresh.
///
/// The price is revocation delay: a token revoked by another instance or by
/// `sluice token revoke` keeps working here for at most `ttl`. Revocations
/// made through this process ([`TokenCache::forget`]) apply at once. A zero
/// `ttl` turns the cache off.
#[derive(Debug)]
pub struct TokenCache {
    ttl: Duration,
    capacity: usize,
    /// SHA-256 of the secret → the token and when the database last said so.
    entries: Mutex<HashMap<[u8; 32], (ApiToken, Timestamp)>>,
}

impl TokenCache {
    /// Tokens trusted for `ttl`; at most `capacity` of them (the cache is
    /// emptied when it would grow past that: live tokens are few).
    pub fn new(ttl: Duration, capacity: usize) -> TokenCache {
        TokenCache { ttl, capacity: capacity.max(1), entries: Mutex::new(HashMap::new()) }
    }

    /// [`authenticate`], answered from the cache while the entry is fresh.
    pub async fn authenticate(&self, db: &Db, secret: &str, now: Timestamp) -> Result<Option<ApiToken>, TokenError> {
        if self.ttl.is_zero() {
            return authenticate(db, secret, now).await;
        }
        let key: [u8; 32] = Sha256::digest(secret.as_bytes()).into();
        if let Some((token, checked)) = self.lock().get(&key) {
            if now < *checked + self.ttl && *checked <= now {
                return Ok(Some(token.clone()));
            }
        }
        let found = authenticate(db, secret, now).await?;
        let mut entries = self.lock();
        match &found {
            Some(token) => {
                if entries.len() >= self.capacity && !entries.contains_key(&key) {
                    entries.clear();
                }
                entries.insert(key, (token.clone(), now));
            }
            None => {
                entries.remove(&key);
            }
        }
        Ok(found)
    }

    /// Drop the named token: call after revoking it in this process.
    pub fn forget(&self, name: &str) {
        self.lock().retain(|_, (token, _)| token.name != name);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<[u8; 32], (ApiToken, Timestamp)>> {
        // Entries are replaced whole; a panic elsewhere cannot leave one half-written.
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Create a token; the secret is returned once and only its hash is stored.
pub async fn create_token(db: &Db, name: &str, scope: ApiScope, now: Timestamp) -> Result<(ApiToken, TokenSecret), TokenError> {
    let name = name.trim();
    if name.is_empty() || name.chars().count() > 100 {
        return Err(TokenError::Name);
    }
    // ThreadRng is a CSPRNG seeded from the OS.
    let bytes: [u8; 32] = rand::random();
    let secret = TokenSecret(format!("{TOKEN_PREFIX}{}", hex::encode(bytes)));
    let token = ApiToken {
        id: format!("tok_{}", ulid::Ulid::new().to_string().to_lowercase()),
        name: name.to_owned(),
        scope,
        created_at: now,
    };
    sqlx::query("INSERT INTO api_tokens (id, name, scope, token_hash, created_at) VALUES ($1, $2, $3, $4, $5)")
        .bind(&token.id)
        .bind(&token.name)
        .bind(scope.as_str())
        .bind(hash(secret.expose()))
        .bind(now.as_millis())
        .execute(db.pool())
        .await
        .map_err(|e| match &e {
            sqlx::Error::Database(d) if d.is_unique_violation() => TokenError::Duplicate(token.name.clone()),
            _ => TokenError::Db(e),
        })?;
    Ok((token, secret))
}

/// The live (not revoked) token with this secret, if any; notes its use.
pub async fn authenticate(db: &Db, secret: &str, now: Timestamp) -> Result<Option<ApiToken>, TokenError> {
    let row = sqlx::query(
        "SELECT id, name, scope, created_at, last_used_at FROM api_tokens WHERE token_hash = $1 AND revoked_at IS NULL",
    )
    .bind(hash(secret))
    .fetch_optional(db.pool())
    .await?;
    let Some(row) = row else { return Ok(None) };
    let scope: String = row.try_get("scope")?;
    let Ok(scope) = scope.parse() else { return Ok(None) };
    let token = ApiToken {
        id: row.try_get("id")?,
        name: row.try_get("name")?,
        scope,
        created_at: Timestamp::from_millis(row.try_get("created_at")?),
    };
    // Written at most once a minute, and only then: an UPDATE that matches
    // nothing still takes SQLite's write lock, which serialised every API
    // call behind it (measured: docs/benchmarks.md, "Worker API").
    let last_used: Option<i64> = row.try_get("last_used_at")?;
    if last_used.is_none_or(|at| at < now.as_millis() - LAST_USED_EVERY_MS) {
        sqlx::query("UPDATE api_tokens SET last_used_at = $1 WHERE id = $2 AND (last_used_at IS NULL OR last_used_at < $3)")
            .bind(now.as_millis())
            .bind(&token.id)
            .bind(now.as_millis() - LAST_USED_EVERY_MS)
            .execute(db.pool())
            .await?;
    }
    Ok(Some(token))
}

/// Revoke a token by name; false when there is no live token of that name.
pub async fn revoke_token(db: &Db, name: &str, now: Timestamp) -> Result<bool, TokenError> {
    let done = sqlx::query("UPDATE api_tokens SET revoked_at = $1 WHERE name = $2 AND revoked_at IS NULL")
        .bind(now.as_millis())
        .bind(name)
        .execute(db.pool())
        .await?;
    Ok(done.rows_affected() > 0)
}

/// A token as the admin page lists it (never the secret or its hash).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenInfo {
    pub token: ApiToken,
    pub last_used_at: Option<Timestamp>,
    pub revoked_at: Option<Timestamp>,
}

/// Every token, live ones first, newest first.
pub async fn list_tokens(db: &Db) -> Result<Vec<TokenInfo>, TokenError> {
    let rows = sqlx::query(
        "SELECT id, name, scope, created_at, last_used_at, revoked_at FROM api_tokens \
         ORDER BY CASE WHEN revoked_at IS NULL THEN 0 ELSE 1 END, created_at DESC, id DESC",
    )
    .fetch_all(db.pool())
    .await?;
    rows.iter()
        .map(|row| {
            let scope: String = row.try_get("scope")?;
            Ok(TokenInfo {
                token: ApiToken {
                    id: row.try_get("id")?,
                    name: row.try_get("name")?,
                    scope: scope.parse()?,
                    created_at: Timestamp::from_millis(row.try_get("created_at")?),
                },
                last_used_at: row.try_get::<Option<i64>, _>("last_used_at")?.map(Timestamp::from_millis),
                revoked_at: row.try_get::<Option<i64>, _>("revoked_at")?.map(Timestamp::from_millis),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::testing::TestDb;

    #[tokio::test]
    async fn a_cached_token_is_trusted_for_the_ttl_and_forgotten_on_revocation_here() {
        for db in TestDb::each().await {
            let t0 = Timestamp::from_millis(1_700_000_000_000);
            let ttl = Duration::from_secs(5);
            let cache = TokenCache::new(ttl, 100);
            let (_, secret) = create_token(&db, "w", ApiScope::Worker, t0).await.expect("create");
            let token = cache.authenticate(&db, secret.expose(), t0).await.expect("auth").expect("live");
            assert_eq!((token.name.as_str(), token.scope), ("w", ApiScope::Worker));
            assert!(cache.authenticate(&db, "slk_wrong", t0).await.expect("auth").is_none());

            // Revoked by another process: trusted until the entry is ttl old.
            assert!(revoke_token(&db, "w", t0).await.expect("revoke"));
            let almost = t0 + ttl - Duration::from_millis(1);
            assert!(cache.authenticate(&db, secret.expose(), almost).await.expect("auth").is_some());
            assert!(cache.authenticate(&db, secret.expose(), t0 + ttl).await.expect("auth").is_none());

            // Revoked through this process: gone at once.
            let (_, second) = create_token(&db, "w2", ApiScope::Admin, t0).await.expect("create");
            assert!(cache.authenticate(&db, second.expose(), t0).await.expect("auth").is_some());
            assert!(revoke_token(&db, "w2", t0).await.expect("revoke"));
            cache.forget("w2");
            assert!(cache.authenticate(&db, second.expose(), t0).await.expect("auth").is_none());

            // A zero ttl is no cache: revocation elsewhere applies at once.
            let off = TokenCache::new(Duration::ZERO, 100);
            let (_, third) = create_token(&db, "w3", ApiScope::Worker, t0).await.expect("create");
            assert!(off.authenticate(&db, third.expose(), t0).await.expect("auth").is_some());
            assert!(revoke_token(&db, "w3", t0).await.expect("revoke"));
            assert!(off.authenticate(&db, third.expose(), t0).await.expect("auth").is_none());
        }
    }
}
