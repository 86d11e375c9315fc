//! Retry profiles in the database (`retry_profiles`, migration 0014) and
//! their hot reload.
//!
//! Every change runs in one transaction that writes the profile, bumps
//! `retry_profiles_version` and writes its audit row (`retry_profile.set`,
//! `retry_profile.delete`). Each instance runs a [`RetryProfileReloader`]
//! that polls the version (every ≤ 1 s) and, when it moved, loads the whole
//! set into the shared [`RetryProfiles`]: the executor, the API and the pages
//! read the new profile on their next call, without a restart.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use sqlx::any::AnyRow;
use sqlx::Row;

use super::jitter::Jitter;
use super::policy::{PolicyError, RetryAfterMode, RetryPolicy, RetryPolicyConfig};
use super::profiles::{self, ProfileSet, RetryProfile, RetryProfiles};
use crate::audit::{self, AuditAction, AuditEntry, AuditError};
use crate::clock::Timestamp;
use crate::db::Db;
use crate::periodic::{Reloader, VersionedSet};

#[derive(Debug, thiserror::Error)]
pub enum ProfilesRepoError {
    #[error("scope: must be 1–64 characters of letters, digits, '_', '-', '.', or '*' for every scope")]
    Scope,
    #[error("no retry profile for scope '{0}'")]
    NotFound(String),
    #[error("stored retry profile of scope '{scope}' is unreadable")]
    Corrupt {
        scope: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("database error")]
    Db(#[from] sqlx::Error),
    #[error("writing the audit log")]
    Audit(#[source] AuditError),
}

/// A change, for the audit log and the caller: the profile before and after.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ProfileChange {
    pub before: Option<RetryProfile>,
    pub after: Option<RetryProfile>,
}

/// What the audit log keeps of a profile: the policy in its serialized form.
#[derive(Serialize)]
struct Audited<'a> {
    scope: &'a str,
    name: &'a str,
    policy: RetryPolicyConfig,
}

impl<'a> From<&'a RetryProfile> for Audited<'a> {
    fn from(p: &'a RetryProfile) -> Self {
        Audited { scope: &p.scope, name: &p.name, policy: p.policy.into() }
    }
}

/// The profiles table.
#[derive(Clone, Debug)]
pub struct ProfilesRepo {
    db: Db,
}

const SELECT: &str = "SELECT scope, name, policy_json, updated_by, updated_at FROM retry_profiles";

impl ProfilesRepo {
    pub fn new(db: Db) -> ProfilesRepo {
        ProfilesRepo { db }
    }

    pub async fn list(&self) -> Result<Vec<RetryProfile>, ProfilesRepoError> {
        let rows = sqlx::query(&format!("{SELECT} ORDER BY scope")).fetch_all(self.db.pool()).await?;
        rows.iter().map(profile_from_row).collect()
    }

    pub async fn get(&self, scope: &str) -> Result<Option<RetryProfile>, ProfilesRepoError> {
        let row = sqlx::query(&format!("{SELECT} WHERE scope = $1")).bind(scope).fetch_optional(self.db.pool()).await?;
        row.as_ref().map(profile_from_row).transpose()
    }

    /// The version counter, bumped by every change.
    pub async fn version(&self) -> Result<i64, ProfilesRepoError> {
        Ok(sqlx::query("SELECT version FROM retry_profiles_version WHERE id = 1")
            .fetch_one(self.db.pool())
            .await?
            .try_get::<i64, _>(0)?)
    }

    /// The whole set, tagged with the version read *before* it (a change in
    /// between makes the next poll load again, never miss it).
    pub async fn load(&self) -> Result<ProfileSet, ProfilesRepoError> {
        let version = self.version().await?;
        Ok(ProfileSet::new(self.list().await?, version))
    }

    /// Store `policy` as the profile of `scope` (created or replaced), named
    /// after the preset it came from while it still equals it.
    pub async fn put(
        &self,
        scope: &str,
        preset: &str,
        policy: RetryPolicy,
        actor: &str,
        now: Timestamp,
    ) -> Result<ProfileChange, ProfilesRepoError> {
        validate_scope(scope)?;
        let after = RetryProfile {
            scope: scope.to_owned(),
            name: profiles::name_for(preset, &policy),
            policy,
            updated_by: actor.to_owned(),
            // Stored in milliseconds; keep the value equal to what a reload reads.
            updated_at: Timestamp::from_millis(now.as_millis()),
        };
        let json = serde_json::to_string(&RetryPolicyConfig::from(policy))
            .map_err(|e| ProfilesRepoError::Corrupt { scope: scope.to_owned(), source: Box::new(e) })?;
        let before = self.get(scope).await?;
        let mut tx = self.db.pool().begin().await?;
        sqlx::query(
            "INSERT INTO retry_profiles (scope, name, policy_json, updated_by, updated_at) VALUES ($1, $2, $3, $4, $5) \
             ON CONFLICT (scope) DO UPDATE SET name = $2, policy_json = $3, updated_by = $4, updated_at = $5",
        )
        .bind(scope)
        .bind(after.name.as_str())
        .bind(json)
        .bind(actor)
        .bind(after.updated_at.as_millis())
        .execute(&mut *tx)
        .await?;
        let change = ProfileChange { before, after: Some(after) };
        record(&mut tx, &change, scope, actor, now, AuditAction::RetryProfileSet).await?;
        tx.commit().await?;
        Ok(change)
    }

    /// Remove the profile of `scope`: it falls back to `*`'s, or the default.
    pub async fn delete(&self, scope: &str, actor: &str, now: Timestamp) -> Result<ProfileChange, ProfilesRepoError> {
        let before = self.get(scope).await?.ok_or_else(|| ProfilesRepoError::NotFound(scope.to_owned()))?;
        let mut tx = self.db.pool().begin().await?;
        let done = sqlx::query("DELETE FROM retry_profiles WHERE scope = $1").bind(scope).execute(&mut *tx).await?;
        if done.rows_affected() == 0 {
            return Err(ProfilesRepoError::NotFound(scope.to_owned()));
        }
        let change = ProfileChange { before: Some(before), after: None };
        record(&mut tx, &change, scope, actor, now, AuditAction::RetryProfileDelete).await?;
        tx.commit().await?;
        Ok(change)
    }

    /// On a database that never had a profile (version 0), give the preset
    /// limit rules' scopes their vendor's profile; returns how many were set.
    pub async fn seed_presets(&self, actor: &str, now: Timestamp) -> Result<usize, ProfilesRepoError> {
        if self.version().await? != 0 {
            return Ok(0);
        }
        let mut created = 0;
        for (scope, name) in profiles::preset_assignments() {
            let Some(policy) = profiles::preset(name) else { continue };
            if self.get(scope).await?.is_none() {
                self.put(scope, name, policy, actor, now).await?;
                created += 1;
            }
        }
        Ok(created)
    }
}

/// Scopes as the limit rules spell them, or `*`.
pub fn validate_scope(scope: &str) -> Result<(), ProfilesRepoError> {
    crate::quota::rule::validate_scope(scope).map_err(|_| ProfilesRepoError::Scope)
}

async fn record(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    change: &ProfileChange,
    scope: &str,
    actor: &str,
    now: Timestamp,
    action: AuditAction,
) -> Result<(), ProfilesRepoError> {
    sqlx::query("UPDATE retry_profiles_version SET version = version + 1 WHERE id = 1").execute(&mut **tx).await?;
    let before = change.before.as_ref().map(Audited::from);
    let after = change.after.as_ref().map(Audited::from);
    // The audit row commits with the profile or not at all.
    let entry = AuditEntry { actor, action, target: scope, before: before.as_ref(), after: after.as_ref(), reason: None };
    audit::record_in(tx, entry, now).await.map_err(ProfilesRepoError::Audit)
}

fn profile_from_row(row: &AnyRow) -> Result<RetryProfile, ProfilesRepoError> {
    let scope: String = row.try_get("scope")?;
    let corrupt = |e: Box<dyn std::error::Error + Send + Sync>| ProfilesRepoError::Corrupt { scope: scope.clone(), source: e };
    let json: String = row.try_get("policy_json")?;
    let config: RetryPolicyConfig = serde_json::from_str(&json).map_err(|e| corrupt(Box::new(e)))?;
    let policy = config.validate().map_err(|mut e: Vec<PolicyError>| corrupt(Box::new(e.remove(0))))?;
    Ok(RetryProfile {
        scope: scope.clone(),
        name: row.try_get("name")?,
        policy,
        updated_by: row.try_get("updated_by")?,
        updated_at: Timestamp::from_millis(row.try_get("updated_at")?),
    })
}

/// The default poll interval: an edit is live everywhere within about 1 s,
/// like the limit rules'.
pub const RELOAD_EVERY: Duration = Duration::from_secs(1);

/// The retry profiles in the database and the copy this instance's
/// executor, API and pages read.
#[derive(Debug)]
pub struct ProfilesInForce {
    repo: ProfilesRepo,
    profiles: RetryProfiles,
}

impl VersionedSet for ProfilesInForce {
    type Error = ProfilesRepoError;
    const WHAT: &'static str = "retry profiles";

    async fn version(&self) -> Result<i64, ProfilesRepoError> {
        self.repo.version().await
    }

    async fn install(&self) -> Result<i64, ProfilesRepoError> {
        let set = self.repo.load().await?;
        let version = set.version;
        self.profiles.replace(set);
        Ok(version)
    }
}

/// Keeps one instance's [`RetryProfiles`] in step with the database.
pub type RetryProfileReloader = Reloader<ProfilesInForce>;

impl RetryProfileReloader {
    /// Call [`Reloader::run_once`] (or `run`) to load the first set.
    pub fn new(repo: ProfilesRepo, profiles: RetryProfiles) -> RetryProfileReloader {
        Reloader::of(ProfilesInForce { repo, profiles })
    }
}

/// A profile as an admin writes it (the API's body, the Limits page's
/// form): a preset to start from (`default` when absent) and any fields to
/// change. Absent fields keep the preset's value; `max_delay_ms` and
/// `wait_ceiling_ms` may be `null` (no cap, the rule's ceiling).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileDraft {
    pub preset: Option<String>,
    pub max_attempts: Option<u32>,
    pub base_delay_ms: Option<u64>,
    #[serde(default, deserialize_with = "present")]
    pub max_delay_ms: Option<Option<u64>>,
    pub jitter: Option<String>,
    pub retry_on: Option<Vec<String>>,
    pub retry_after: Option<String>,
    #[serde(default, deserialize_with = "present")]
    pub wait_ceiling_ms: Option<Option<u64>>,
    pub total_budget_ms: Option<u64>,
}

/// A field that was given, even as `null` (absent stays `None`).
fn present<'de, D: serde::Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(d).map(Some)
}

/// One invalid field of a draft, named as the draft names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DraftError {
    pub field: &'static str,
    pub message: String,
}

impl ProfileDraft {
    /// The preset it starts from and the validated policy; every invalid
    /// field at once otherwise.
    pub fn into_policy(self) -> Result<(String, RetryPolicy), Vec<DraftError>> {
        let preset_name = self.preset.as_deref().map(str::trim).filter(|p| !p.is_empty()).unwrap_or("default").to_owned();
        let Some(preset) = profiles::preset(&preset_name) else {
            let message = format!("'{preset_name}' is not a preset; use one of {}", profiles::PRESETS.join(", "));
            return Err(vec![DraftError { field: "preset", message }]);
        };
        let mut errors = Vec::new();
        let mut config = RetryPolicyConfig::from(preset);
        if let Some(n) = self.max_attempts {
            config.max_attempts = n;
        }
        if let Some(ms) = self.base_delay_ms {
            config.base_delay_ms = ms;
        }
        if let Some(cap) = self.max_delay_ms {
            config.max_delay_ms = cap;
        }
        if let Some(j) = self.jitter.as_deref() {
            match j.trim().parse::<Jitter>() {
                Ok(j) => config.jitter = j,
                Err(message) => errors.push(DraftError { field: "jitter", message }),
            }
        }
        if let Some(on) = self.retry_on {
            config.retry_on = on;
        }
        if let Some(mode) = self.retry_after.as_deref() {
            match mode.trim().parse::<RetryAfterMode>() {
                Ok(m) => config.retry_after = m,
                Err(message) => errors.push(DraftError { field: "retry_after", message }),
            }
        }
        if let Some(ceiling) = self.wait_ceiling_ms {
            config.wait_ceiling_ms = ceiling;
        }
        if let Some(ms) = self.total_budget_ms {
            config.total_budget_ms = ms;
        }
        match config.validate() {
            Ok(policy) if errors.is_empty() => Ok((preset_name, policy)),
            Ok(_) => Err(errors),
            Err(invalid) => {
                errors.extend(invalid.iter().map(|e| DraftError { field: e.field(), message: e.to_string() }));
                Err(errors)
            }
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ProfileAdminError {
    /// The draft or the scope is invalid; one error per invalid field.
    #[error("invalid retry profile: {}", .0.iter().map(|e| format!("{}: {}", e.field, e.message)).collect::<Vec<_>>().join("; "))]
    Invalid(Vec<DraftError>),
    #[error("no retry profile for scope '{0}'")]
    NotFound(String),
    #[error("writing the retry profile")]
    Repo(#[source] ProfilesRepoError),
}

impl From<ProfilesRepoError> for ProfileAdminError {
    fn from(e: ProfilesRepoError) -> Self {
        match e {
            ProfilesRepoError::Scope => ProfileAdminError::Invalid(vec![DraftError { field: "scope", message: e.to_string() }]),
            ProfilesRepoError::NotFound(scope) => ProfileAdminError::NotFound(scope),
            e => ProfileAdminError::Repo(e),
        }
    }
}

/// Audited writes of retry profiles, applied to this instance at once; the
/// HTTP API and the Limits page both call it. Other instances follow
/// through their [`RetryProfileReloader`] within its period.
#[derive(Clone, Debug)]
pub struct ProfileAdmin {
    repo: ProfilesRepo,
    profiles: RetryProfiles,
}

impl ProfileAdmin {
    pub fn new(repo: ProfilesRepo, profiles: RetryProfiles) -> ProfileAdmin {
        ProfileAdmin { repo, profiles }
    }

    /// Set the profile of `scope` from `draft`.
    pub async fn put(&self, scope: &str, draft: ProfileDraft, actor: &str, now: Timestamp) -> Result<RetryProfile, ProfileAdminError> {
        let scope = scope.trim();
        let scope_error = validate_scope(scope).err().map(|e| DraftError { field: "scope", message: e.to_string() });
        let (preset, policy) = match (draft.into_policy(), scope_error) {
            (Ok(p), None) => p,
            (Ok(_), Some(e)) => return Err(ProfileAdminError::Invalid(vec![e])),
            (Err(mut errors), e) => {
                if let Some(e) = e {
                    errors.insert(0, e);
                }
                return Err(ProfileAdminError::Invalid(errors));
            }
        };
        let change = self.repo.put(scope, &preset, policy, actor, now).await?;
        self.applied().await;
        change.after.ok_or_else(|| ProfileAdminError::NotFound(scope.to_owned()))
    }

    /// Remove the profile of `scope`; returns it as it was.
    pub async fn delete(&self, scope: &str, actor: &str, now: Timestamp) -> Result<RetryProfile, ProfileAdminError> {
        let change = self.repo.delete(scope, actor, now).await?;
        self.applied().await;
        change.before.ok_or_else(|| ProfileAdminError::NotFound(scope.to_owned()))
    }

    /// Reload this instance's profiles after a write. A failed reload is not
    /// an error: the background reloader retries within a second.
    async fn applied(&self) {
        if let Err(e) = RetryProfileReloader::new(self.repo.clone(), self.profiles.clone()).run_once().await {
            tracing::warn!(error = &e as &dyn std::error::Error, "reloading retry profiles after a write; the reloader will retry");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::testing::TestDb;
    use crate::retry::jitter::Jitter;
    use crate::retry::profiles::ProfileSource;

    const NOW: Timestamp = Timestamp::from_millis(1_764_000_000_000);

    async fn round_trip(db: TestDb) {
        let repo = ProfilesRepo::new(db.db());
        assert_eq!(repo.seed_presets("sluice", NOW).await.expect("seed"), 3);
        assert_eq!(repo.seed_presets("sluice", NOW).await.expect("seed again"), 0, "seeded once");
        let vtex = repo.get("vtex_pricing").await.expect("get").expect("seeded");
        assert_eq!((vtex.name.as_str(), vtex.policy), ("vtex", profiles::preset("vtex").expect("preset")));

        // Another instance's live set follows through its reloader.
        let live = RetryProfiles::default();
        let reloader = RetryProfileReloader::new(ProfilesRepo::new(db.db()), live.clone());
        assert!(reloader.run_once().await.expect("load"));
        assert!(!reloader.run_once().await.expect("poll"), "nothing moved");
        assert_eq!(live.resolve("wb_feeds").name, "wb");

        let custom = profiles::preset("vtex").expect("vtex").with_backoff(Jitter::Full, None).expect("valid");
        let change = repo.put("*", "vtex", custom, "alice", NOW).await.expect("put");
        assert_eq!((change.before, change.after.as_ref().map(|p| p.name.as_str())), (None, Some("custom")));
        assert!(reloader.run_once().await.expect("reload"));
        let other = live.resolve("elsewhere");
        assert_eq!((other.source, other.policy.jitter()), (ProfileSource::Global, Jitter::Full));

        repo.delete("*", "alice", NOW).await.expect("delete");
        assert!(matches!(repo.delete("*", "alice", NOW).await, Err(ProfilesRepoError::NotFound(_))));
        assert!(matches!(repo.put("bad scope", "default", RetryPolicy::default(), "alice", NOW).await, Err(ProfilesRepoError::Scope)));
        assert!(reloader.run_once().await.expect("reload"));
        assert_eq!(live.resolve("elsewhere").source, ProfileSource::Default);

        let rows = audit::recent(&db.db(), &[AuditAction::RetryProfileSet, AuditAction::RetryProfileDelete], 10).await.expect("audit");
        let actions: Vec<&str> = rows.iter().map(|r| r.action.as_str()).collect();
        assert_eq!(actions.iter().filter(|a| **a == "retry_profile.delete").count(), 1, "{actions:?}");
        assert_eq!(actions.iter().filter(|a| **a == "retry_profile.set").count(), 4, "{actions:?}");
    }

    #[test]
    fn a_draft_starts_from_its_preset_and_names_every_bad_field() {
        let (preset, p) = ProfileDraft { preset: Some("vtex".into()), ..ProfileDraft::default() }.into_policy().expect("valid");
        assert_eq!((preset.as_str(), p), ("vtex", profiles::preset("vtex").expect("vtex")));
        let draft: ProfileDraft = serde_json::from_value(serde_json::json!({"preset": "vtex", "max_delay_ms": null, "jitter": "full"})).expect("json");
        let (_, p) = draft.into_policy().expect("valid");
        assert_eq!((p.max_delay(), p.jitter(), p.max_attempts()), (None, Jitter::Full, 6));
        let bad = ProfileDraft {
            max_attempts: Some(0),
            jitter: Some("gaussian".into()),
            retry_on: Some(vec!["4xx".into()]),
            retry_after: Some("obey".into()),
            ..ProfileDraft::default()
        };
        let fields: Vec<&str> = bad.into_policy().expect_err("invalid").iter().map(|e| e.field).collect();
        assert_eq!(fields, ["jitter", "retry_after", "max_attempts", "retry_on"]);
        let unknown = ProfileDraft { preset: Some("aws".into()), ..ProfileDraft::default() }.into_policy().expect_err("unknown");
        assert_eq!(unknown[0].field, "preset");
        assert!(serde_json::from_value::<ProfileDraft>(serde_json::json!({"attempts": 3})).is_err(), "unknown fields are refused");
    }

    #[tokio::test]
    async fn profiles_are_stored_seeded_audited_and_reloaded_on_sqlite() {
        round_trip(TestDb::sqlite().await).await;
    }

    #[tokio::test]
    async fn profiles_are_stored_seeded_audited_and_reloaded_on_postgres() {
        round_trip(TestDb::postgres().await).await;
    }
}
