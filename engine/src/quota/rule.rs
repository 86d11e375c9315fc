//! Limit rules as validated values, and the presets the vendors publish.
//!
//! A [`Rule`] says which requests it covers (`scope`, optional `method`,
//! optional `path` which may be a template) and how many of them may pass
//! ([`Limit`]: algorithm, tokens per interval, burst). Rules are parsed once
//! ([`Rule::validate`]) and trusted afterwards; every invalid field gets an
//! error of its own so forms and the API can point at it.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::clock::Timestamp;

/// The scope of the global default rule: it applies to every scope that has
/// no default of its own.
pub const GLOBAL_SCOPE: &str = "*";

/// Default configured wait ceiling when neither the call nor the rule sets one.
pub const DEFAULT_MAX_WAIT: Duration = Duration::from_secs(30);

/// A rule id: `rule_<ulid>` for rules created in the UI, or a stable
/// hand-written name (`vtex_pricing_write`) for presets.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RuleId(pub String);

impl RuleId {
    pub fn generate() -> RuleId {
        RuleId(format!("rule_{}", ulid::Ulid::new().to_string().to_lowercase()))
    }
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for RuleId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// How a bucket counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Algorithm {
    /// GCRA: continuous refill at `tokens / interval`, capacity `burst`.
    #[default]
    TokenBucket,
    /// At most `tokens` per window; windows aligned to multiples of
    /// `interval` since the Unix epoch.
    FixedWindow,
    /// Exact: at most `tokens` in any interval of length `interval`.
    SlidingLog,
}

impl Algorithm {
    pub fn as_str(self) -> &'static str {
        match self {
            Algorithm::TokenBucket => "token_bucket",
            Algorithm::FixedWindow => "fixed_window",
            Algorithm::SlidingLog => "sliding_log",
        }
    }
}

impl FromStr for Algorithm {
    type Err = RuleError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "token_bucket" => Ok(Algorithm::TokenBucket),
            "fixed_window" => Ok(Algorithm::FixedWindow),
            "sliding_log" => Ok(Algorithm::SlidingLog),
            other => Err(RuleError::Algorithm(other.to_owned())),
        }
    }
}

/// The counting part of a rule: everything a decision needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limit {
    pub algorithm: Algorithm,
    /// Tokens per interval (≥ 1).
    pub tokens: u32,
    /// Interval (> 0, whole milliseconds when persisted).
    #[serde(with = "duration_ms")]
    pub interval: Duration,
    /// Token-bucket capacity (≥ 1); for the window algorithms it equals `tokens`.
    pub burst: u32,
}

impl Limit {
    pub fn token_bucket(tokens: u32, interval: Duration, burst: u32) -> Limit {
        Limit { algorithm: Algorithm::TokenBucket, tokens, interval, burst }
    }
    pub fn fixed_window(tokens: u32, interval: Duration) -> Limit {
        Limit { algorithm: Algorithm::FixedWindow, tokens, interval, burst: tokens }
    }
    pub fn sliding_log(tokens: u32, interval: Duration) -> Limit {
        Limit { algorithm: Algorithm::SlidingLog, tokens, interval, burst: tokens }
    }

    /// The largest cost one request may have: a bucket never holds more.
    pub fn capacity(&self) -> u32 {
        match self.algorithm {
            Algorithm::TokenBucket => self.burst,
            Algorithm::FixedWindow | Algorithm::SlidingLog => self.tokens,
        }
    }

    /// How long the bucket takes to earn one token back.
    pub fn refill_one(&self) -> Duration {
        self.interval / self.tokens.max(1)
    }

    /// The effective wait ceiling: max(configured, interval + 5 s), or
    /// max(configured, 2 × interval + 5 s) when `tokens == 1` (the loser of a
    /// race for a 1-per-window slot must live to the next window, as on the
    /// Wildberries feeds).
    pub fn wait_ceiling(&self, configured: Duration) -> Duration {
        let windows = if self.tokens == 1 { 2 } else { 1 };
        configured.max(self.interval * windows + Duration::from_secs(5))
    }

    pub fn validate(&self) -> Result<(), RuleError> {
        self.errors().into_iter().next().map_or(Ok(()), Err)
    }

    /// Every invalid field, at most one error per field (tokens, interval,
    /// burst), so a form can mark them all at once.
    pub fn errors(&self) -> Vec<RuleError> {
        let mut errors = Vec::new();
        if self.tokens < 1 {
            errors.push(RuleError::Tokens);
        } else if self.algorithm == Algorithm::SlidingLog && self.tokens > 100_000 {
            errors.push(RuleError::LogTooLarge);
        }
        if self.interval.is_zero() {
            errors.push(RuleError::Interval);
        } else if self.interval > Duration::from_secs(366 * 24 * 3600) {
            errors.push(RuleError::IntervalTooLong);
        } else if u128::from(self.burst.max(self.tokens)) * self.interval.as_micros() >= 1 << 52 {
            // The Lua script computes in doubles: keep burst × interval (µs) exact.
            errors.push(RuleError::TooLarge);
        }
        if self.burst < 1 {
            errors.push(RuleError::Burst);
        } else if self.algorithm != Algorithm::TokenBucket && self.burst != self.tokens && self.tokens >= 1 {
            errors.push(RuleError::BurstOnWindow);
        }
        errors
    }
}

/// A limit rule, as stored and as the registry resolves it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Rule {
    pub id: RuleId,
    /// API domain (`pricing`, `content`), or [`GLOBAL_SCOPE`] for the global default.
    pub scope: String,
    /// Upper-case HTTP method; `None` = any method.
    pub method: Option<String>,
    /// Exact path (`/api/pricing/prices`) or template (`/api/pricing/prices/{sku}`,
    /// `/feeds/*`); `None` = the scope's default rule.
    pub path: Option<String>,
    #[serde(flatten)]
    pub limit: Limit,
    /// Max requests in flight (a separate lease set; never replaces the rate).
    pub concurrency: Option<u32>,
    /// Configured wait ceiling (default [`DEFAULT_MAX_WAIT`]); the floor of
    /// [`Limit::wait_ceiling`] still applies.
    #[serde(with = "opt_duration_ms")]
    pub max_wait: Option<Duration>,
    /// Minimum back-off after an upstream 429 (VTEX Orders: 1 min). Not in the
    /// SPEC's field list; needed by its Orders preset.
    #[serde(with = "opt_duration_ms")]
    pub min_penalty: Option<Duration>,
    /// Decide and record, never block.
    pub shadow: bool,
    /// Disabled rules are skipped by the resolver.
    pub enabled: bool,
    pub note: String,
    pub updated_by: String,
    pub updated_at: Timestamp,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RuleError {
    #[error("scope: must be 1–64 characters of letters, digits, '_', '-', '.', or '*' for the global default")]
    Scope,
    #[error("method: must be an HTTP method such as GET, POST, PUT, PATCH, DELETE")]
    Method,
    #[error(
        "path: must start with '/', contain no '?' or '#', and use only {{param}} or * as whole template segments"
    )]
    Path,
    #[error("path: the global default rule (scope '*') cannot have a method or a path")]
    GlobalWithPath,
    #[error("algorithm: unknown algorithm '{0}' (token_bucket, fixed_window, sliding_log)")]
    Algorithm(String),
    #[error("tokens: must be at least 1")]
    Tokens,
    #[error("interval: must be greater than zero")]
    Interval,
    #[error("interval: must be at most one year")]
    IntervalTooLong,
    #[error("interval: burst × interval is too large (at most about 140 years of microseconds)")]
    TooLarge,
    #[error("burst: must be at least 1")]
    Burst,
    #[error("burst: window algorithms have no burst; it must equal tokens")]
    BurstOnWindow,
    #[error("tokens: a sliding log holds at most 100000 tokens per interval")]
    LogTooLarge,
    #[error("concurrency: must be at least 1 when set")]
    Concurrency,
    #[error("max_wait: must be at most one hour")]
    MaxWait,
    #[error("min_penalty: must be at most one day")]
    MinPenalty,
    #[error("note: must be at most 1000 characters")]
    Note,
}

impl RuleError {
    /// The field the error is about, for forms.
    pub fn field(&self) -> &'static str {
        match self {
            RuleError::Scope => "scope",
            RuleError::Method => "method",
            RuleError::Path | RuleError::GlobalWithPath => "path",
            RuleError::Algorithm(_) => "algorithm",
            RuleError::Tokens | RuleError::LogTooLarge => "tokens",
            RuleError::Interval | RuleError::IntervalTooLong | RuleError::TooLarge => "interval",
            RuleError::Burst | RuleError::BurstOnWindow => "burst",
            RuleError::Concurrency => "concurrency",
            RuleError::MaxWait => "max_wait",
            RuleError::MinPenalty => "min_penalty",
            RuleError::Note => "note",
        }
    }

    /// What is wrong, without the field's name (`must be at least 1`): what a
    /// form shows next to the field, and the API next to its name.
    pub fn message(&self) -> String {
        let full = self.to_string();
        match full.strip_prefix(self.field()).and_then(|rest| rest.strip_prefix(": ")) {
            Some(message) => message.to_owned(),
            None => full,
        }
    }
}

const METHODS: &[&str] = &["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"];

impl Rule {
    /// A new enabled, enforcing rule with defaults for everything optional.
    pub fn new(scope: &str, method: Option<&str>, path: Option<&str>, limit: Limit) -> Rule {
        Rule {
            id: RuleId::generate(),
            scope: scope.to_owned(),
            method: method.map(str::to_ascii_uppercase),
            path: path.map(str::to_owned),
            limit,
            concurrency: None,
            max_wait: None,
            min_penalty: None,
            shadow: false,
            enabled: true,
            note: String::new(),
            updated_by: "system".to_owned(),
            updated_at: Timestamp::EPOCH,
        }
    }

    pub fn with_id(mut self, id: &str) -> Rule {
        self.id = RuleId(id.to_owned());
        self
    }

    /// Check every field; the first invalid one is reported.
    pub fn validate(&self) -> Result<(), RuleError> {
        self.errors().into_iter().next().map_or(Ok(()), Err)
    }

    /// Every invalid field, at most one error per field, in form order.
    pub fn errors(&self) -> Vec<RuleError> {
        let mut errors = Vec::new();
        if let Err(e) = validate_scope(&self.scope) {
            errors.push(e);
        }
        if self.method.as_ref().is_some_and(|m| !METHODS.contains(&m.as_str())) {
            errors.push(RuleError::Method);
        }
        if let Some(Err(e)) = self.path.as_deref().map(validate_path) {
            errors.push(e);
        } else if self.scope == GLOBAL_SCOPE && (self.method.is_some() || self.path.is_some()) {
            errors.push(RuleError::GlobalWithPath);
        }
        errors.extend(self.limit.errors());
        if self.concurrency == Some(0) {
            errors.push(RuleError::Concurrency);
        }
        if self.max_wait.is_some_and(|w| w > Duration::from_secs(3600)) {
            errors.push(RuleError::MaxWait);
        }
        if self.min_penalty.is_some_and(|w| w > Duration::from_secs(86_400)) {
            errors.push(RuleError::MinPenalty);
        }
        if self.note.chars().count() > 1000 {
            errors.push(RuleError::Note);
        }
        errors
    }

    /// The wait ceiling for a call that asks for `call_max_wait` (if any).
    pub fn wait_ceiling(&self, call_max_wait: Option<Duration>) -> Duration {
        self.limit.wait_ceiling(call_max_wait.or(self.max_wait).unwrap_or(DEFAULT_MAX_WAIT))
    }

    /// The earliest next permit after a 429 is `now + penalty_floor()` (or
    /// later, if Retry-After says so).
    pub fn penalty_floor(&self) -> Duration {
        self.limit.refill_one().max(self.min_penalty.unwrap_or_default())
    }
}

pub(crate) fn validate_scope(scope: &str) -> Result<(), RuleError> {
    let ok_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.');
    if scope == GLOBAL_SCOPE || (!scope.is_empty() && scope.len() <= 64 && scope.chars().all(ok_char)) {
        Ok(())
    } else {
        Err(RuleError::Scope)
    }
}

fn validate_path(path: &str) -> Result<(), RuleError> {
    if !path.starts_with('/') || path.contains(['?', '#']) || path.len() > 512 {
        return Err(RuleError::Path);
    }
    for seg in path.split('/').skip(1) {
        let templ = seg.starts_with('{') && seg.ends_with('}') && seg.len() > 2;
        if !templ && seg != "*" && seg.contains(['{', '}', '*']) {
            return Err(RuleError::Path);
        }
    }
    Ok(())
}

/// A rule as a person or a client writes it, before validation: what the
/// HTTP API's JSON and the Limits page's form both become, so the two accept
/// and refuse exactly the same rules.
#[derive(Clone, Debug, PartialEq)]
pub struct RuleDraft {
    pub scope: String,
    /// Empty or absent: any method.
    pub method: Option<String>,
    /// Empty or absent: the scope's default rule.
    pub path: Option<String>,
    /// Absent: `token_bucket`.
    pub algorithm: Option<String>,
    pub tokens: u32,
    pub interval: Duration,
    /// Absent: `tokens`.
    pub burst: Option<u32>,
    pub concurrency: Option<u32>,
    pub max_wait: Option<Duration>,
    pub min_penalty: Option<Duration>,
    pub shadow: bool,
    pub enabled: bool,
    pub note: String,
}

impl RuleDraft {
    /// The validated rule with id `id`, or every invalid field's error
    /// (one per field).
    pub fn into_rule(self, id: RuleId) -> Result<Rule, Vec<RuleError>> {
        let given = |s: Option<String>| s.map(|s| s.trim().to_owned()).filter(|s| !s.is_empty());
        let algorithm = given(self.algorithm).map_or(Ok(Algorithm::TokenBucket), |a| a.parse::<Algorithm>());
        let limit = Limit {
            algorithm: *algorithm.as_ref().unwrap_or(&Algorithm::TokenBucket),
            tokens: self.tokens,
            interval: self.interval,
            burst: self.burst.unwrap_or(self.tokens),
        };
        let method = given(self.method);
        let path = given(self.path);
        let mut rule = Rule::new(self.scope.trim(), method.as_deref(), path.as_deref(), limit);
        rule.id = id;
        rule.concurrency = self.concurrency;
        rule.max_wait = self.max_wait;
        rule.min_penalty = self.min_penalty;
        rule.shadow = self.shadow;
        rule.enabled = self.enabled;
        rule.note = self.note.trim().to_owned();
        let mut errors = rule.errors();
        if self.burst.is_none() {
            // Burst defaulted to tokens: a problem there is the tokens' problem.
            errors.retain(|e| e.field() != "burst");
        }
        if let Err(e) = algorithm {
            // Burst rules depend on the algorithm: report the algorithm alone.
            errors.retain(|e| e.field() != "burst");
            errors.insert(0, e);
        }
        if errors.is_empty() {
            Ok(rule)
        } else {
            Err(errors)
        }
    }
}

/// The limits the vendors publish (VTEX, Wildberries), created at first start.
/// Ids are stable so re-seeding is idempotent.
pub fn presets() -> Vec<Rule> {
    let second = Duration::from_secs(1);
    let minute = Duration::from_secs(60);
    let mut rules = Vec::new();
    for method in ["PUT", "POST"] {
        let mut r = Rule::new("vtex_pricing", Some(method), None, Limit::token_bucket(40, second, 1000))
            .with_id(&format!("vtex_pricing_{}", method.to_ascii_lowercase()));
        r.note = "VTEX Pricing API: PUT/POST 40 req/s per account, burst credits 1000 (VTEX developer docs: API rate limits)".into();
        rules.push(r);
    }
    let mut del = Rule::new("vtex_pricing", Some("DELETE"), None, Limit::token_bucket(16, second, 300))
        .with_id("vtex_pricing_delete");
    del.note = "VTEX Pricing API: DELETE 16 req/s per account, burst credits 300 (VTEX developer docs: API rate limits)".into();
    rules.push(del);
    let mut orders = Rule::new("vtex_orders", None, None, Limit::token_bucket(10, second, 10)).with_id("vtex_orders");
    orders.min_penalty = Some(minute);
    orders.note = "VTEX Orders API: platform limits; back off 1 min after a 429 (VTEX developer docs: API rate limits)".into();
    rules.push(orders);
    let mut feeds = Rule::new("wb_feeds", None, None, Limit::fixed_window(1, minute)).with_id("wb_feeds");
    feeds.note = "Wildberries seller API feeds: 1 request per minute per account (Wildberries API docs, rate limits)".into();
    rules.push(feeds);
    rules
}

mod duration_ms {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;
    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        Ok(Duration::from_millis(u64::deserialize(d)?))
    }
}

mod opt_duration_ms {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;
    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_some(&u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            None => s.serialize_none(),
        }
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        Ok(Option::<u64>::deserialize(d)?.map(Duration::from_millis))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(limit: Limit) -> Rule {
        Rule::new("pricing", None, None, limit)
    }

    #[test]
    fn each_invalid_field_gets_its_own_error() {
        let s = Duration::from_secs(1);
        assert_eq!(rule(Limit::token_bucket(0, s, 1)).validate(), Err(RuleError::Tokens));
        assert_eq!(rule(Limit::token_bucket(1, Duration::ZERO, 1)).validate(), Err(RuleError::Interval));
        assert_eq!(rule(Limit::token_bucket(1, s, 0)).validate(), Err(RuleError::Burst));
        let mut r = rule(Limit::token_bucket(1, s, 1));
        r.concurrency = Some(0);
        assert_eq!(r.validate().map_err(|e| e.field()), Err("concurrency"));
        let r = Rule::new("pricing", Some("FETCH"), None, Limit::token_bucket(1, s, 1));
        assert_eq!(r.validate(), Err(RuleError::Method));
        let r = Rule::new("pricing", None, Some("/a/{b"), Limit::token_bucket(1, s, 1));
        assert_eq!(r.validate(), Err(RuleError::Path));
        let r = Rule::new("bad scope", None, None, Limit::token_bucket(1, s, 1));
        assert_eq!(r.validate(), Err(RuleError::Scope));
        assert!(Rule::new("pricing", Some("put"), Some("/p/{sku}/*"), Limit::token_bucket(1, s, 1)).validate().is_ok());
    }

    #[test]
    fn a_draft_reports_every_invalid_field_once() {
        let draft = RuleDraft {
            scope: "bad scope".into(),
            method: Some("FETCH".into()),
            path: Some("/a/{b".into()),
            algorithm: Some("token_bucket".into()),
            tokens: 0,
            interval: Duration::ZERO,
            burst: Some(0),
            concurrency: Some(0),
            max_wait: Some(Duration::from_secs(7200)),
            min_penalty: None,
            shadow: false,
            enabled: true,
            note: String::new(),
        };
        let fields: Vec<&str> = draft.into_rule(RuleId::generate()).err().unwrap_or_default().iter().map(RuleError::field).collect();
        assert_eq!(fields, ["scope", "method", "path", "tokens", "interval", "burst", "concurrency", "max_wait"]);
    }

    #[test]
    fn a_draft_trims_and_defaults_like_a_form_expects() {
        let draft = RuleDraft {
            scope: " pricing ".into(),
            method: Some(" put ".into()),
            path: Some("".into()),
            algorithm: None,
            tokens: 40,
            interval: Duration::from_secs(1),
            burst: None,
            concurrency: None,
            max_wait: None,
            min_penalty: None,
            shadow: true,
            enabled: true,
            note: " n ".into(),
        };
        let rule = draft.clone().into_rule(RuleId("r".into())).expect("valid");
        assert_eq!((rule.scope.as_str(), rule.method.as_deref(), rule.path.as_deref()), ("pricing", Some("PUT"), None));
        assert_eq!(rule.limit, Limit::token_bucket(40, Duration::from_secs(1), 40));
        assert_eq!(rule.note, "n");
        let unknown = RuleDraft { algorithm: Some("leaky".into()), burst: Some(7), ..draft };
        let errors = unknown.into_rule(RuleId("r".into())).err().unwrap_or_default();
        assert_eq!(errors, vec![RuleError::Algorithm("leaky".into())]);
    }

    #[test]
    fn wait_ceiling_is_one_window_plus_five_seconds_or_two_for_single_token_limits() {
        let minute = Duration::from_secs(60);
        let thirty = Duration::from_secs(30);
        assert_eq!(Limit::fixed_window(1, minute).wait_ceiling(thirty), Duration::from_secs(125));
        assert_eq!(Limit::fixed_window(2, minute).wait_ceiling(thirty), Duration::from_secs(65));
        assert_eq!(Limit::token_bucket(40, Duration::from_secs(1), 1000).wait_ceiling(thirty), thirty);
    }

    #[test]
    fn presets_are_valid_and_match_the_vendor_limits() {
        let p = presets();
        assert!(p.iter().all(|r| r.validate().is_ok()));
        let put = p.iter().find(|r| r.id.as_str() == "vtex_pricing_put").map(|r| r.limit);
        assert_eq!(put, Some(Limit::token_bucket(40, Duration::from_secs(1), 1000)));
    }
}
