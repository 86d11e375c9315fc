//! Retry profiles: named retry policies, chosen per scope (the scopes of the
//! limit rules), so one deployment retries each marketplace by its own
//! vendor's rules.
//!
//! Presets:
//!
//! - `default`: the policy Sluice has always had (3 attempts, base 500 ms,
//!   `base × 2^(n−1) + U[0, base)`, no cap, 429 / 5xx / network retried,
//!   `Retry-After` honoured, 180 s budget).
//! - `wb`: the Wildberries ADR "rate limit and retry for the WB API":
//!   `WB_API_RETRY_ATTEMPTS = 3` (1 + 2 retries), `WB_API_RETRY_BASE_MS = 500`,
//!   5xx and network `base × 2^(attempt−1) + jitter [0, base)`, 429 retried
//!   with `min(max(Retry-After, one token's refill, backoff), ceiling)` where
//!   the ceiling is the bucket's wait ceiling (30 s, or a window + 5 s, two
//!   windows + 5 s for one-request windows: the limit rule's). Not retried:
//!   401/403/404. These are the default's numbers (the default was written
//!   from that ADR); `wb` pins them for WB scopes should the default move.
//! - `vtex`: VTEX's "API rate limits and resilience" guide: only 429 and 503
//!   are retried, `maxRetries: 5` (6 attempts in all), `delay =
//!   min(maxDelay, baseDelay × 2^attempt) × (0.5 + random(0, 0.5))` with
//!   `baseDelay` 1 s and `maxDelay` 60 s (the `equal` shape), and on a 429 the
//!   greater of `Retry-After` and that backoff.
//!
//! A scope without a profile of its own uses the profile of scope `*` if one
//! is stored, else the caller's own policy (the built-in default).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use serde::{Deserialize, Serialize};

use super::jitter::Jitter;
use super::policy::{RetryAfterMode, RetryOn, RetryPolicy};
use crate::clock::Timestamp;

/// The scope whose profile applies to every scope without one.
pub const GLOBAL_SCOPE: &str = "*";

/// The name of a stored profile that matches no preset.
pub const CUSTOM: &str = "custom";

/// The preset names, in the order they are offered.
pub const PRESETS: [&str; 3] = ["default", "wb", "vtex"];

/// The policy of preset `name`, if there is one.
pub fn preset(name: &str) -> Option<RetryPolicy> {
    let second = Duration::from_secs(1);
    match name {
        "default" => Some(RetryPolicy::default()),
        "wb" => RetryPolicy::new(3, Duration::from_millis(500), RetryPolicy::DEFAULT_BUDGET).ok(),
        "vtex" => {
            let retry_on = RetryOn::none().status(429).and_then(|on| on.status(503)).ok()?;
            RetryPolicy::new(6, second, RetryPolicy::DEFAULT_BUDGET)
                .and_then(|p| p.with_backoff(Jitter::Equal, Some(60 * second)))
                .and_then(|p| p.with_retry_on(retry_on))
                .map(|p| p.with_retry_after(RetryAfterMode::Honour))
                .ok()
        }
        _ => None,
    }
}

/// One line about each preset, for the UI and the API.
pub fn preset_note(name: &str) -> &'static str {
    match name {
        "default" => "Sluice's default: 3 attempts, 500 ms × 2^(n−1) + up to 500 ms, 429/5xx/network",
        "wb" => "Wildberries API ADR: 3 attempts, 500 ms × 2^(n−1) + jitter, 429 waits Retry-After/one refill up to the bucket's ceiling",
        "vtex" => "VTEX rate-limit guide: 429 and 503 only, 5 retries, min(60 s, 1 s × 2^attempt) × U(0.5, 1), Retry-After wins when longer",
        _ => "",
    }
}

/// The profile stored for one scope.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetryProfile {
    pub scope: String,
    /// The preset it was set from, or `custom` when its numbers were changed.
    pub name: String,
    pub policy: RetryPolicy,
    pub updated_by: String,
    pub updated_at: Timestamp,
}

/// Where a scope's policy came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProfileSource {
    /// Stored for this scope.
    Scope,
    /// Stored for scope `*`.
    Global,
    /// Nothing stored: the built-in default.
    Default,
}

/// A scope's policy as it applies now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    pub name: String,
    pub policy: RetryPolicy,
    pub source: ProfileSource,
}

/// Every stored profile, by scope; replaced whole on reload.
#[derive(Debug, Default, Clone)]
pub struct ProfileSet {
    by_scope: HashMap<String, RetryProfile>,
    /// The database version the set was loaded at.
    pub version: i64,
}

impl ProfileSet {
    pub fn new(profiles: impl IntoIterator<Item = RetryProfile>, version: i64) -> ProfileSet {
        ProfileSet { by_scope: profiles.into_iter().map(|p| (p.scope.clone(), p)).collect(), version }
    }

    /// Sorted by scope.
    pub fn profiles(&self) -> Vec<&RetryProfile> {
        let mut all: Vec<&RetryProfile> = self.by_scope.values().collect();
        all.sort_by(|a, b| a.scope.cmp(&b.scope));
        all
    }

    pub fn get(&self, scope: &str) -> Option<&RetryProfile> {
        self.by_scope.get(scope)
    }
}

/// The live profiles of this instance, shared by the executor, the API and
/// the pages; the reloader swaps in each new set atomically.
#[derive(Debug, Clone, Default)]
pub struct RetryProfiles {
    set: Arc<ArcSwap<ProfileSet>>,
}

impl RetryProfiles {
    pub fn new(set: ProfileSet) -> RetryProfiles {
        RetryProfiles { set: Arc::new(ArcSwap::from_pointee(set)) }
    }

    pub fn replace(&self, set: ProfileSet) {
        self.set.store(Arc::new(set));
    }

    pub fn snapshot(&self) -> Arc<ProfileSet> {
        self.set.load_full()
    }

    pub fn version(&self) -> i64 {
        self.set.load().version
    }

    /// The stored profile that governs `scope`: its own, else `*`'s.
    pub fn policy_for(&self, scope: &str) -> Option<RetryPolicy> {
        let set = self.set.load();
        set.get(scope).or_else(|| set.get(GLOBAL_SCOPE)).map(|p| p.policy)
    }

    /// The policy for `scope` with where it came from; the built-in default
    /// when nothing is stored for it or for `*`.
    pub fn resolve(&self, scope: &str) -> Resolved {
        let set = self.set.load();
        match (set.get(scope), set.get(GLOBAL_SCOPE)) {
            (Some(p), _) => Resolved { name: p.name.clone(), policy: p.policy, source: ProfileSource::Scope },
            (None, Some(p)) => Resolved { name: p.name.clone(), policy: p.policy, source: ProfileSource::Global },
            (None, None) => Resolved { name: "default".to_owned(), policy: RetryPolicy::default(), source: ProfileSource::Default },
        }
    }
}

/// The preset scopes of a fresh database: the vendors' preset limit rules
/// get their vendor's retry profile.
pub fn preset_assignments() -> [(&'static str, &'static str); 3] {
    [("vtex_pricing", "vtex"), ("vtex_orders", "vtex"), ("wb_feeds", "wb")]
}

/// The name to store for `policy` set from `requested` (a preset name):
/// the preset's name while the numbers are the preset's, else `custom`.
pub fn name_for(requested: &str, policy: &RetryPolicy) -> String {
    match preset(requested) {
        Some(p) if p == *policy => requested.to_owned(),
        _ => CUSTOM.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::retry::outcome::{NetworkFailure, Outcome};
    use crate::retry::policy::RateLimitFacts;
    use http::StatusCode;

    const MS: fn(u64) -> Duration = Duration::from_millis;

    fn profile(scope: &str, name: &str) -> RetryProfile {
        RetryProfile {
            scope: scope.into(),
            name: name.into(),
            policy: preset(name).expect("preset"),
            updated_by: "test".into(),
            updated_at: Timestamp::from_millis(0),
        }
    }

    #[test]
    fn the_default_preset_is_the_policy_sluice_always_had() {
        assert_eq!(preset("default"), Some(RetryPolicy::default()));
        assert_eq!(preset("wb"), Some(RetryPolicy::default()), "the default was written from the WB ADR");
        assert_eq!(preset("nope"), None);
        for name in PRESETS {
            assert!(preset(name).is_some() && !preset_note(name).is_empty(), "{name}");
        }
    }

    #[test]
    fn the_vtex_preset_retries_429_and_503_five_times_with_equal_jitter_capped_at_a_minute() {
        let v = preset("vtex").expect("vtex");
        assert_eq!((v.max_attempts(), v.base_delay(), v.max_delay()), (6, MS(1_000), Some(MS(60_000))));
        assert_eq!((v.jitter(), v.retry_after()), (Jitter::Equal, RetryAfterMode::Honour));
        assert_eq!(v.retry_on().entries(), ["429", "503"]);
        let s = |c| Some(StatusCode::from_u16(c).expect("status"));
        assert!(!v.retries(Outcome::ServerError, s(500)) && !v.retries(Outcome::Network(NetworkFailure::Connect), None));
        // attempt 0 of VTEX's formula: 500–1000 ms; Retry-After 30 s wins over it.
        assert_eq!(v.backoff(1, None, 0.0), MS(500));
        let facts = RateLimitFacts { retry_after: Some(MS(30_000)), refill_one_token: MS(25), rule_wait_ceiling: MS(125_000) };
        assert_eq!(v.delay_after(Outcome::RateLimited, v.backoff(1, None, 0.5), &facts), MS(30_000));
    }

    #[test]
    fn a_scope_uses_its_own_profile_then_the_global_one_then_the_default() {
        let profiles = RetryProfiles::default();
        assert_eq!(profiles.resolve("vtex_pricing").source, ProfileSource::Default);
        assert_eq!(profiles.policy_for("vtex_pricing"), None);
        profiles.replace(ProfileSet::new([profile("vtex_pricing", "vtex")], 1));
        assert_eq!(profiles.resolve("vtex_pricing").name, "vtex");
        assert_eq!(profiles.resolve("other").source, ProfileSource::Default);
        profiles.replace(ProfileSet::new([profile("vtex_pricing", "vtex"), profile("*", "wb")], 2));
        let other = profiles.resolve("other");
        assert_eq!((other.name.as_str(), other.source), ("wb", ProfileSource::Global));
        assert_eq!(profiles.resolve("vtex_pricing").source, ProfileSource::Scope);
        assert_eq!(profiles.version(), 2);
    }

    #[test]
    fn a_changed_preset_is_stored_as_custom() {
        let v = preset("vtex").expect("vtex");
        assert_eq!(name_for("vtex", &v), "vtex");
        let changed = v.with_retry_after(RetryAfterMode::Ignore);
        assert_eq!(name_for("vtex", &changed), CUSTOM);
    }
}
