//! People who log in to the web application: usernames, argon2id password
//! hashes and roles.
//!
//! Roles are ordered: `viewer` < `support` < `admin`; a check asks for the
//! least role an action needs ([`Role::allows`]). Passwords are hashed with
//! argon2id and a random salt; verification costs the same whether or not the
//! user exists, so timing does not reveal usernames.

use std::fmt;
use std::str::FromStr;
use std::sync::LazyLock;

use argon2::password_hash::rand_core::OsRng;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::Argon2;
use serde::{Deserialize, Serialize};
use sqlx::Row;

use crate::clock::Timestamp;
use crate::db::Db;

/// Shortest password accepted for a new user.
pub const MIN_PASSWORD_CHARS: usize = 10;

/// What a person may do in the web application.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Reads every page.
    Viewer,
    /// Also resets breakers and retries deliveries.
    Support,
    /// Also edits limits, merchants, users and API tokens.
    Admin,
}

impl Role {
    pub const ALL: [Role; 3] = [Role::Viewer, Role::Support, Role::Admin];

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Support => "support",
            Role::Admin => "admin",
        }
    }

    /// Whether someone with this role may do what `needed` allows.
    pub fn allows(self, needed: Role) -> bool {
        self >= needed
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Role {
    type Err = UserError;
    fn from_str(s: &str) -> Result<Role, UserError> {
        match s {
            "viewer" => Ok(Role::Viewer),
            "support" => Ok(Role::Support),
            "admin" => Ok(Role::Admin),
            other => Err(UserError::Role(other.chars().take(40).collect())),
        }
    }
}

/// A user, without the password hash.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct User {
    pub id: String,
    pub username: String,
    pub role: Role,
    pub created_at: Timestamp,
    pub last_login_at: Option<Timestamp>,
}

#[derive(Debug, thiserror::Error)]
pub enum UserError {
    #[error("role must be 'viewer', 'support' or 'admin', got '{0}'")]
    Role(String),
    #[error("username must be 1–64 characters of letters, digits, '.', '_', '-' or '@'")]
    Username,
    #[error("password must be at least {MIN_PASSWORD_CHARS} characters")]
    WeakPassword,
    #[error("a user named '{0}' already exists")]
    Duplicate(String),
    #[error("no user named '{0}'")]
    NotFound(String),
    #[error("the last admin cannot be removed or demoted")]
    LastAdmin,
    #[error("password hashing failed")]
    Hash,
    #[error("database error")]
    Db(#[from] sqlx::Error),
}

/// Validate a username: what people type, nothing that needs escaping.
pub fn validate_username(name: &str) -> Result<&str, UserError> {
    let name = name.trim();
    let ok = !name.is_empty()
        && name.chars().count() <= 64
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '@'));
    if ok {
        Ok(name)
    } else {
        Err(UserError::Username)
    }
}

fn hash_password(password: &str) -> Result<String, UserError> {
    if password.chars().count() < MIN_PASSWORD_CHARS {
        return Err(UserError::WeakPassword);
    }
    let salt = SaltString::generate(&mut OsRng);
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(|_| UserError::Hash)
}

/// A hash of a password nobody has, verified against when the user does not
/// exist so that a wrong username costs as much time as a wrong password.
static DUMMY_HASH: LazyLock<String> =
    LazyLock::new(|| hash_password("not-a-real-password-at-all").unwrap_or_default());

fn verify_password(password: &str, hash: &str) -> bool {
    PasswordHash::new(hash)
        .map(|parsed| Argon2::default().verify_password(password.as_bytes(), &parsed).is_ok())
        .unwrap_or(false)
}

/// A random password for generated accounts (first admin, demo): 20
/// characters from an unambiguous alphabet, about 110 bits.
pub fn generate_password() -> String {
    const ALPHABET: &[u8] = b"abcdefghijkmnpqrstuvwxyzACDEFGHJKLMNPQRSTUVWXYZ23456789";
    (0..20).map(|_| ALPHABET[rand::random_range(0..ALPHABET.len())] as char).collect()
}

fn user_from_row(row: &sqlx::any::AnyRow) -> Result<User, UserError> {
    let role: String = row.try_get("role")?;
    Ok(User {
        id: row.try_get("id")?,
        username: row.try_get("username")?,
        role: role.parse()?,
        created_at: Timestamp::from_millis(row.try_get("created_at")?),
        last_login_at: row.try_get::<Option<i64>, _>("last_login_at")?.map(Timestamp::from_millis),
    })
}

const USER_COLUMNS: &str = "id, username, role, created_at, last_login_at";

/// Create a user with a password.
pub async fn create_user(db: &Db, username: &str, password: &str, role: Role, now: Timestamp) -> Result<User, UserError> {
    let username = validate_username(username)?;
    let hash = hash_password(password)?;
    let user = User {
        id: format!("usr_{}", ulid::Ulid::new().to_string().to_lowercase()),
        username: username.to_owned(),
        role,
        created_at: now,
        last_login_at: None,
    };
    sqlx::query("INSERT INTO users (id, username, password_hash, role, created_at) VALUES ($1, $2, $3, $4, $5)")
        .bind(&user.id)
        .bind(&user.username)
        .bind(hash)
        .bind(role.as_str())
        .bind(now.as_millis())
        .execute(db.pool())
        .await
        .map_err(|e| match &e {
            sqlx::Error::Database(d) if d.is_unique_violation() => UserError::Duplicate(user.username.clone()),
            _ => UserError::Db(e),
        })?;
    Ok(user)
}

/// The user with this username and password, or `None`; notes the login.
/// Runs one argon2 verification either way.
pub async fn verify_login(db: &Db, username: &str, password: &str, now: Timestamp) -> Result<Option<User>, UserError> {
    let row = sqlx::query(&format!("SELECT {USER_COLUMNS}, password_hash FROM users WHERE username = $1"))
        .bind(username.trim())
        .fetch_optional(db.pool())
        .await?;
    let Some(row) = row else {
        let _ = verify_password(password, &DUMMY_HASH);
        return Ok(None);
    };
    let hash: String = row.try_get("password_hash")?;
    if !verify_password(password, &hash) {
        return Ok(None);
    }
    let mut user = user_from_row(&row)?;
    sqlx::query("UPDATE users SET last_login_at = $1 WHERE id = $2")
        .bind(now.as_millis())
        .bind(&user.id)
        .execute(db.pool())
        .await?;
    user.last_login_at = Some(now);
    Ok(Some(user))
}

/// A user by id (sessions store the id, so a deleted user's session dies).
pub async fn get_user(db: &Db, id: &str) -> Result<Option<User>, UserError> {
    let row = sqlx::query(&format!("SELECT {USER_COLUMNS} FROM users WHERE id = $1"))
        .bind(id)
        .fetch_optional(db.pool())
        .await?;
    row.as_ref().map(user_from_row).transpose()
}

/// Every user, by username.
pub async fn list_users(db: &Db) -> Result<Vec<User>, UserError> {
    let rows = sqlx::query(&format!("SELECT {USER_COLUMNS} FROM users ORDER BY username"))
        .fetch_all(db.pool())
        .await?;
    rows.iter().map(user_from_row).collect()
}

pub async fn count_users(db: &Db) -> Result<i64, UserError> {
    let row = sqlx::query("SELECT CAST(COUNT(*) AS BIGINT) AS n FROM users").fetch_one(db.pool()).await?;
    Ok(row.try_get("n")?)
}

async fn count_admins(db: &Db) -> Result<i64, UserError> {
    let row = sqlx::query("SELECT CAST(COUNT(*) AS BIGINT) AS n FROM users WHERE role = 'admin'")
        .fetch_one(db.pool())
        .await?;
    Ok(row.try_get("n")?)
}

async fn by_username(db: &Db, username: &str) -> Result<User, UserError> {
    let row = sqlx::query(&format!("SELECT {USER_COLUMNS} FROM users WHERE username = $1"))
        .bind(username)
        .fetch_optional(db.pool())
        .await?;
    match row {
        Some(row) => user_from_row(&row),
        None => Err(UserError::NotFound(username.to_owned())),
    }
}

/// Change a user's role; returns (before, after). The last admin stays admin.
/// Every session of the user ends except `keep_session` (the session of
/// someone changing their own role), so a lowered role cannot linger in a
/// session opened before.
pub async fn set_role(db: &Db, username: &str, role: Role, keep_session: Option<&str>) -> Result<(User, User), UserError> {
    let before = by_username(db, username).await?;
    if before.role == Role::Admin && role != Role::Admin && count_admins(db).await? <= 1 {
        return Err(UserError::LastAdmin);
    }
    let mut tx = db.pool().begin().await?;
    sqlx::query("UPDATE users SET role = $1 WHERE id = $2").bind(role.as_str()).bind(&before.id).execute(&mut *tx).await?;
    end_sessions_in(&mut tx, &before.id, keep_session).await?;
    tx.commit().await?;
    let after = User { role, ..before.clone() };
    Ok((before, after))
}

/// Set a new password for a user. Every session of the user ends except
/// `keep_session`: whoever knew the old password is signed out.
pub async fn set_password(db: &Db, username: &str, password: &str, keep_session: Option<&str>) -> Result<User, UserError> {
    let user = by_username(db, username).await?;
    let hash = hash_password(password)?;
    let mut tx = db.pool().begin().await?;
    sqlx::query("UPDATE users SET password_hash = $1 WHERE id = $2").bind(hash).bind(&user.id).execute(&mut *tx).await?;
    end_sessions_in(&mut tx, &user.id, keep_session).await?;
    tx.commit().await?;
    Ok(user)
}

/// End every web session of the user with `user_id` but `keep_session`
/// (signing out ends them all); returns how many ended.
pub async fn end_sessions(db: &Db, user_id: &str, keep_session: Option<&str>) -> Result<u64, UserError> {
    let mut conn = db.pool().acquire().await?;
    end_sessions_in(&mut conn, user_id, keep_session).await
}

async fn end_sessions_in(conn: &mut sqlx::AnyConnection, user_id: &str, keep_session: Option<&str>) -> Result<u64, UserError> {
    let done = sqlx::query("DELETE FROM sessions WHERE user_id = $1 AND id <> $2")
        .bind(user_id)
        // No session id is empty.
        .bind(keep_session.unwrap_or_default())
        .execute(&mut *conn)
        .await?;
    Ok(done.rows_affected())
}

/// Remove a user and end their sessions. The last admin cannot be removed.
pub async fn delete_user(db: &Db, username: &str) -> Result<User, UserError> {
    let user = by_username(db, username).await?;
    if user.role == Role::Admin && count_admins(db).await? <= 1 {
        return Err(UserError::LastAdmin);
    }
    let mut tx = db.pool().begin().await?;
    sqlx::query("DELETE FROM users WHERE id = $1").bind(&user.id).execute(&mut *tx).await?;
    end_sessions_in(&mut tx, &user.id, None).await?;
    tx.commit().await?;
    Ok(user)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::testing::TestDb;

    #[tokio::test]
    async fn login_checks_the_password_and_roles_are_ordered() {
        for db in TestDb::each().await {
            let now = Timestamp::from_millis(1_000);
            create_user(&db, "ana", "correct horse battery", Role::Support, now).await.expect("create");
            assert!(verify_login(&db, "ana", "wrong password!!", now).await.expect("verify").is_none());
            assert!(verify_login(&db, "nobody", "correct horse battery", now).await.expect("verify").is_none());
            let user = verify_login(&db, "ana", "correct horse battery", now).await.expect("verify").expect("user");
            assert_eq!(user.role, Role::Support);
            assert_eq!(get_user(&db, &user.id).await.expect("get").expect("some").last_login_at, Some(now));
            assert!(Role::Admin.allows(Role::Support) && !Role::Viewer.allows(Role::Support));
            assert!(matches!(
                create_user(&db, "ana", "another long one", Role::Viewer, now).await,
                Err(UserError::Duplicate(_))
            ));
            assert!(matches!(create_user(&db, "bo", "short", Role::Viewer, now).await, Err(UserError::WeakPassword)));
            assert!(matches!(create_user(&db, "bad name", "long enough pw", Role::Viewer, now).await, Err(UserError::Username)));
        }
    }

    #[tokio::test]
    async fn the_last_admin_stays() {
        for db in TestDb::each().await {
            let now = Timestamp::from_millis(1_000);
            create_user(&db, "root", "long enough pw", Role::Admin, now).await.expect("create");
            assert!(matches!(set_role(&db, "root", Role::Viewer, None).await, Err(UserError::LastAdmin)));
            assert!(matches!(delete_user(&db, "root").await, Err(UserError::LastAdmin)));
            create_user(&db, "second", "long enough pw", Role::Admin, now).await.expect("create");
            let (before, after) = set_role(&db, "root", Role::Viewer, None).await.expect("demote");
            assert_eq!((before.role, after.role), (Role::Admin, Role::Viewer));
            assert_eq!(count_users(&db).await.expect("count"), 2);
        }
    }
}
