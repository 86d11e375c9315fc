//! Typed settings: the commented defaults file `sluice.default.toml` (compiled
//! in), an optional file of the operator's, then environment variables.
//! Everything is validated once at startup; afterwards the values are trusted.

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use figment::providers::{Env, Format, Serialized, Toml};
use figment::Figment;
use serde::{Deserialize, Serialize};
use sluice_engine::db::Backend;
use sluice_engine::quota::StorePolicy;

const DEFAULTS: &str = include_str!("../sluice.default.toml");

/// Settings as read, before validation.
#[derive(Clone, Serialize, Deserialize)]
struct RawSettings {
    listen: String,
    data_dir: PathBuf,
    database_url: String,
    database_max_connections: u32,
    redis_url: String,
    redis_prefix: String,
    site_root: PathBuf,
    log: String,
    log_format: String,
    quota_store_down: String,
    quota_expected_instances: u32,
    redis_cluster: bool,
    redis_timeout_ms: u64,
    delivery_allow_networks: String,
    delivery_worker: bool,
    delivery_batch_size: u32,
    delivery_concurrency: u32,
    delivery_steps: u32,
    delivery_require_https: bool,
    trusted_proxies: String,
    session_secure_cookie: bool,
    session_idle_secs: u64,
    session_absolute_secs: u64,
    quota_sample_every_secs: u64,
    quota_idle_retention_secs: u64,
    api_token_cache_secs: u64,
    upstream_breaker_ignore_rules: String,
    retention_delivered_days: u64,
    retention_failed_days: u64,
    retention_audit_days: u64,
}

/// Validated settings.
#[derive(Clone)]
pub struct Settings {
    pub listen: SocketAddr,
    pub data_dir: PathBuf,
    pub database_url: String,
    pub database_max_connections: u32,
    pub redis_url: Option<String>,
    pub redis_prefix: String,
    pub site_root: PathBuf,
    pub log: String,
    pub log_format: LogFormat,
    pub quota_store_down: StorePolicy,
    pub redis_cluster: bool,
    /// How long one Redis call (connect or command) may take before the
    /// store counts as down and `quota_store_down` applies.
    pub redis_timeout: std::time::Duration,
    /// CIDRs webhook deliveries may reach despite the SSRF guard.
    pub delivery_allow_networks: Vec<ipnet::IpNet>,
    /// Peers whose `X-Forwarded-For` names the client (TLS-terminating
    /// proxies, load balancers); empty: the TCP peer is the client.
    pub trusted_proxies: Vec<ipnet::IpNet>,
    pub delivery_worker: bool,
    /// Due deliveries one worker step claims.
    pub delivery_batch_size: u32,
    /// Requests one worker step has in flight at once.
    pub delivery_concurrency: u32,
    /// Worker steps running at once in this instance (resolved from 0 by
    /// database: 8 on PostgreSQL, 1 on SQLite).
    pub delivery_steps: u32,
    /// Merchant URLs must be https: plain http is refused on create and
    /// edit, and merchants that still have one are held (not delivered to).
    pub delivery_require_https: bool,
    /// Mark the session cookie `Secure` (set when served over HTTPS).
    pub session_secure_cookie: bool,
    /// A web session ends after this long without a request.
    pub session_idle: std::time::Duration,
    /// A web session ends this long after sign-in, however busy.
    pub session_absolute: std::time::Duration,
    /// How often the quota history sampler records the limiter's counters.
    pub quota_sample_every: std::time::Duration,
    /// How long an idle quota bucket's statistics are kept after its last
    /// decision (in-process buckets and Redis stats keys alike).
    pub quota_idle_retention: std::time::Duration,
    /// How long a live API token is trusted without reading the database
    /// (zero: every request reads it).
    pub api_token_cache: std::time::Duration,
    /// Limit rules whose permits are not refused while the upstream breaker
    /// of their account and scope is open (every other rule's are).
    pub upstream_breaker_ignore_rules: Vec<String>,
    /// How long delivered and failed deliveries and audit rows are kept
    /// (the rest of the config is the engine's default pacing).
    pub retention: sluice_engine::retention::RetentionConfig,
    /// The delivery worker's ladder and breaker timings. Not read from files or
    /// the environment: only `sluice demo` switches to [`DeliveryTiming::Demo`].
    pub delivery_timing: DeliveryTiming,
}

/// Which ladder and breaker timings the delivery worker runs with.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DeliveryTiming {
    /// The product's delivery policy (docs/delivery.md).
    #[default]
    Product,
    /// `sluice demo`: the same shape, sped up so every step shows within
    /// minutes (see `demo::timing::demo_timing`).
    Demo,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

/// One bad value: the key, what was wrong, what was expected.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("config file {path} could not be read: {source}")]
    File {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("configuration is malformed: {0}")]
    Malformed(#[from] Box<figment::Error>),
    #[error("invalid settings:\n{}", .0.iter().map(|e| format!("  - {e}")).collect::<Vec<_>>().join("\n"))]
    Invalid(Vec<String>),
}

impl Settings {
    /// Read defaults, then `file` (if given; it must exist), then the
    /// environment: `DATABASE_URL` and `REDIS_URL`, then every `SLUICE_*`
    /// variable (which win). Values parse as figment reads environment
    /// variables: `4` is a number, `true` a bool, `"4"` (quoted) a string.
    pub fn load(file: Option<&Path>) -> Result<Settings, ConfigError> {
        let figment = Self::files(file)?
            .merge(Env::raw().only(&["database_url", "redis_url"]))
            .merge(Env::prefixed("SLUICE_").ignore(&["config"]));
        Self::extract(figment)
    }

    /// Defaults, then `file`, then `overrides` by setting name (`listen`,
    /// `redis_prefix`, …), in place of the environment: for tests, which run
    /// many differently configured instances in one process.
    pub fn load_with(
        file: Option<&Path>,
        overrides: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Settings, ConfigError> {
        let overrides: serde_json::Map<String, serde_json::Value> =
            overrides.into_iter().map(|(k, v)| (k, serde_json::Value::String(v))).collect();
        Self::extract(Self::files(file)?.merge(Serialized::defaults(serde_json::Value::Object(overrides))))
    }

    /// The compiled-in defaults and the operator's file.
    fn files(file: Option<&Path>) -> Result<Figment, ConfigError> {
        let mut figment = Figment::from(Toml::string(DEFAULTS));
        if let Some(path) = file {
            let text = std::fs::read_to_string(path)
                .map_err(|source| ConfigError::File { path: path.to_owned(), source })?;
            figment = figment.merge(Toml::string(&text));
        }
        Ok(figment)
    }

    fn extract(figment: Figment) -> Result<Settings, ConfigError> {
        // Lossy: numbers and flags given as strings (overrides) are read as such.
        let raw: RawSettings = figment.extract_lossy().map_err(|e| ConfigError::Malformed(Box::new(e)))?;
        raw.validate()
    }
}

impl RawSettings {
    fn validate(self) -> Result<Settings, ConfigError> {
        let mut errors = Vec::new();
        let listen = match self.listen.parse::<SocketAddr>() {
            Ok(a) => Some(a),
            Err(_) => {
                errors.push(format!(
                    "listen (SLUICE_LISTEN): '{}' is not an address:port with a port from 0 to 65535, e.g. 127.0.0.1:3000",
                    self.listen
                ));
                None
            }
        };
        let database_url = if self.database_url.trim().is_empty() {
            format!("sqlite://{}?mode=rwc", self.data_dir.join("sluice.db").display())
        } else {
            self.database_url.trim().to_owned()
        };
        match url::Url::parse(&database_url) {
            Err(e) => errors.push(format!("database_url (DATABASE_URL): not a valid URL ({e}): {}", redact_url(&database_url))),
            Ok(_) if Backend::from_url(&database_url).is_none() => errors.push(format!(
                "database_url (DATABASE_URL): unsupported scheme in {}; use postgres:// or sqlite://",
                redact_url(&database_url)
            )),
            Ok(_) => {}
        }
        if self.database_max_connections == 0 {
            errors.push("database_max_connections: must be at least 1".to_owned());
        }
        let redis_url = match self.redis_url.trim() {
            "" => None,
            url => {
                match url::Url::parse(url) {
                    Err(e) => errors.push(format!("redis_url (REDIS_URL): not a valid URL ({e}): {}", redact_url(url))),
                    Ok(u) if !matches!(u.scheme(), "redis" | "rediss") => errors.push(format!(
                        "redis_url (REDIS_URL): unsupported scheme '{}'; use redis:// or rediss://",
                        u.scheme()
                    )),
                    Ok(u) if u.host_str().is_none_or(str::is_empty) => {
                        errors.push("redis_url (REDIS_URL): the URL names no host".to_owned())
                    }
                    Ok(_) => {}
                }
                Some(url.to_owned())
            }
        };
        if self.redis_prefix.is_empty() || self.redis_prefix.contains(['{', '}', ' ']) {
            errors.push(format!(
                "redis_prefix (SLUICE_REDIS_PREFIX): '{}' must be non-empty, without braces or spaces",
                self.redis_prefix
            ));
        }
        let log_format = match self.log_format.as_str() {
            "text" => LogFormat::Text,
            "json" => LogFormat::Json,
            other => {
                errors.push(format!("log_format (SLUICE_LOG_FORMAT): '{other}' is neither 'text' nor 'json'"));
                LogFormat::Text
            }
        };
        if let Err(e) = tracing_subscriber::EnvFilter::try_new(&self.log) {
            errors.push(format!("log (SLUICE_LOG): '{}' is not a valid filter: {e}", self.log));
        }
        if self.quota_expected_instances == 0 {
            errors.push("quota_expected_instances (SLUICE_QUOTA_EXPECTED_INSTANCES): must be at least 1".to_owned());
        }
        let quota_store_down = match self.quota_store_down.as_str() {
            "fail_closed" => StorePolicy::FailClosed,
            "local_fallback" => StorePolicy::LocalFallback { expected_instances: self.quota_expected_instances.max(1) },
            other => {
                errors.push(format!(
                    "quota_store_down (SLUICE_QUOTA_STORE_DOWN): '{other}' is neither 'fail_closed' nor 'local_fallback'"
                ));
                StorePolicy::FailClosed
            }
        };
        if !(1..=3600).contains(&self.quota_sample_every_secs) {
            errors.push(format!(
                "quota_sample_every_secs (SLUICE_QUOTA_SAMPLE_EVERY_SECS): {} is not between 1 and 3600",
                self.quota_sample_every_secs
            ));
        }
        // At least two sampling intervals, so the history has recorded a
        // bucket's last counters before they are forgotten.
        let min_retention = (2 * self.quota_sample_every_secs).max(60);
        if !(min_retention..=30 * 86_400).contains(&self.quota_idle_retention_secs) {
            errors.push(format!(
                "quota_idle_retention_secs (SLUICE_QUOTA_IDLE_RETENTION_SECS): {} is not between {min_retention} \
                 (60 s, and twice quota_sample_every_secs) and 2592000 (30 days)",
                self.quota_idle_retention_secs
            ));
        }
        if !(10..=10_000).contains(&self.redis_timeout_ms) {
            errors.push(format!(
                "redis_timeout_ms (SLUICE_REDIS_TIMEOUT_MS): {} is not between 10 and 10000",
                self.redis_timeout_ms
            ));
        }
        if self.api_token_cache_secs > 300 {
            errors.push(format!(
                "api_token_cache_secs (SLUICE_API_TOKEN_CACHE_SECS): {} is more than 300 (a revoked token would work that long)",
                self.api_token_cache_secs
            ));
        }
        let days = |key: &str, value: u64, max: u64, errors: &mut Vec<String>| {
            if !(1..=max).contains(&value) {
                errors.push(format!("{key} (SLUICE_{}): {value} is not between 1 and {max} (days)", key.to_uppercase()));
            }
            std::time::Duration::from_secs(value.clamp(1, max) * 86_400)
        };
        let retention = sluice_engine::retention::RetentionConfig {
            delivered: days("retention_delivered_days", self.retention_delivered_days, 3650, &mut errors),
            failed: days("retention_failed_days", self.retention_failed_days, 3650, &mut errors),
            audit: days("retention_audit_days", self.retention_audit_days, 36_500, &mut errors),
            ..sluice_engine::retention::RetentionConfig::default()
        };
        if !(60..=30 * 86_400).contains(&self.session_idle_secs) {
            errors.push(format!(
                "session_idle_secs (SLUICE_SESSION_IDLE_SECS): {} is not between 60 and 2592000 (30 days)",
                self.session_idle_secs
            ));
        }
        if !(self.session_idle_secs.max(60)..=90 * 86_400).contains(&self.session_absolute_secs) {
            errors.push(format!(
                "session_absolute_secs (SLUICE_SESSION_ABSOLUTE_SECS): {} is not between session_idle_secs ({}) and \
                 7776000 (90 days)",
                self.session_absolute_secs, self.session_idle_secs
            ));
        }
        let mut within = |key: &str, value: u32, range: std::ops::RangeInclusive<u32>| {
            if !range.contains(&value) {
                errors.push(format!(
                    "{key} (SLUICE_{}): {value} is not between {} and {}",
                    key.to_ascii_uppercase(),
                    range.start(),
                    range.end()
                ));
            }
        };
        within("delivery_batch_size", self.delivery_batch_size, 1..=1000);
        within("delivery_concurrency", self.delivery_concurrency, 1..=1000);
        within("delivery_steps", self.delivery_steps, 0..=16);
        let delivery_steps = match (self.delivery_steps, Backend::from_url(&database_url)) {
            (0, Some(Backend::Postgres)) => 8,
            (0, _) => 1,
            (n, _) => n,
        };
        let delivery_allow_networks = cidrs("delivery_allow_networks", &self.delivery_allow_networks, &mut errors);
        let trusted_proxies = cidrs("trusted_proxies", &self.trusted_proxies, &mut errors);
        let mut upstream_breaker_ignore_rules = Vec::new();
        for id in self.upstream_breaker_ignore_rules.split(',').map(str::trim).filter(|c| !c.is_empty()) {
            if id.len() > 128 || !id.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')) {
                errors.push(format!(
                    "upstream_breaker_ignore_rules (SLUICE_UPSTREAM_BREAKER_IGNORE_RULES): '{id}' is not a rule id such as vtex_pricing_put"
                ));
            } else {
                upstream_breaker_ignore_rules.push(id.to_owned());
            }
        }
        match (errors.is_empty(), listen) {
            (true, Some(listen)) => Ok(Settings {
                listen,
                data_dir: self.data_dir,
                database_url,
                database_max_connections: self.database_max_connections,
                redis_url,
                redis_prefix: self.redis_prefix,
                site_root: self.site_root,
                log: self.log,
                log_format,
                quota_store_down,
                redis_cluster: self.redis_cluster,
                redis_timeout: std::time::Duration::from_millis(self.redis_timeout_ms),
                delivery_allow_networks,
                trusted_proxies,
                delivery_worker: self.delivery_worker,
                delivery_batch_size: self.delivery_batch_size,
                delivery_concurrency: self.delivery_concurrency,
                delivery_steps,
                delivery_require_https: self.delivery_require_https,
                session_secure_cookie: self.session_secure_cookie,
                session_idle: std::time::Duration::from_secs(self.session_idle_secs),
                session_absolute: std::time::Duration::from_secs(self.session_absolute_secs),
                quota_sample_every: std::time::Duration::from_secs(self.quota_sample_every_secs),
                quota_idle_retention: std::time::Duration::from_secs(self.quota_idle_retention_secs),
                api_token_cache: std::time::Duration::from_secs(self.api_token_cache_secs),
                upstream_breaker_ignore_rules,
                retention,
                delivery_timing: DeliveryTiming::Product,
            }),
            _ => Err(ConfigError::Invalid(errors)),
        }
    }
}

/// A comma-separated list of CIDRs under the setting `key`; each bad one is
/// reported with the key and its environment variable.
fn cidrs(key: &str, value: &str, errors: &mut Vec<String>) -> Vec<ipnet::IpNet> {
    let mut nets = Vec::new();
    for cidr in value.split(',').map(str::trim).filter(|c| !c.is_empty()) {
        match cidr.parse::<ipnet::IpNet>() {
            Ok(net) => nets.push(net),
            Err(_) => errors.push(format!(
                "{key} (SLUICE_{}): '{cidr}' is not a CIDR such as 10.0.0.0/8",
                key.to_ascii_uppercase()
            )),
        }
    }
    nets
}

/// `scheme://user:****@host/…`: the URL without its password, for logs.
pub fn redact_url(raw: &str) -> String {
    match url::Url::parse(raw) {
        Ok(mut u) if u.password().is_some() => {
            let _ = u.set_password(Some("****"));
            u.to_string()
        }
        Ok(u) => u.to_string(),
        Err(_) => "<unparseable URL>".to_owned(),
    }
}

impl fmt::Debug for Settings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Settings")
            .field("listen", &self.listen)
            .field("data_dir", &self.data_dir)
            .field("database_url", &redact_url(&self.database_url))
            .field("database_max_connections", &self.database_max_connections)
            .field("redis_url", &self.redis_url.as_deref().map(redact_url))
            .field("redis_prefix", &self.redis_prefix)
            .field("site_root", &self.site_root)
            .field("log", &self.log)
            .field("log_format", &self.log_format)
            .field("quota_store_down", &self.quota_store_down)
            .field("redis_cluster", &self.redis_cluster)
            .field("redis_timeout", &self.redis_timeout)
            .field("delivery_allow_networks", &self.delivery_allow_networks)
            .field("trusted_proxies", &self.trusted_proxies)
            .field("delivery_worker", &self.delivery_worker)
            .field("delivery_batch_size", &self.delivery_batch_size)
            .field("delivery_concurrency", &self.delivery_concurrency)
            .field("delivery_steps", &self.delivery_steps)
            .field("delivery_require_https", &self.delivery_require_https)
            .field("session_secure_cookie", &self.session_secure_cookie)
            .field("session_idle", &self.session_idle)
            .field("session_absolute", &self.session_absolute)
            .field("quota_sample_every", &self.quota_sample_every)
            .field("quota_idle_retention", &self.quota_idle_retention)
            .field("api_token_cache", &self.api_token_cache)
            .field("upstream_breaker_ignore_rules", &self.upstream_breaker_ignore_rules)
            .field("retention", &self.retention)
            .field("delivery_timing", &self.delivery_timing)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use figment::Jail;

    use super::*;

    fn invalid(result: Result<Settings, ConfigError>) -> String {
        match result {
            Err(e @ ConfigError::Invalid(_)) => e.to_string(),
            Err(e) => panic!("expected validation errors, got {e}"),
            Ok(s) => panic!("expected validation errors, got {s:?}"),
        }
    }

    /// `Settings::load` in a jail: the process environment holds exactly
    /// `vars` (figment's `Jail` restores it afterwards and runs one at a time).
    fn load_env(file: Option<&Path>, vars: &[(&str, &str)]) -> Result<Settings, ConfigError> {
        let mut out = None;
        Jail::expect_with(|jail| {
            jail.clear_env();
            for (k, v) in vars {
                jail.set_env(k, v);
            }
            out = Some(Settings::load(file));
            Ok(())
        });
        out.expect("the jail ran")
    }

    #[test]
    fn defaults_give_the_embedded_mode_on_localhost() {
        let s = load_env(None, &[]).expect("defaults are valid");
        assert_eq!(s.listen, "127.0.0.1:3000".parse().expect("addr"));
        assert_eq!(s.database_url, "sqlite://data/sluice.db?mode=rwc");
        assert_eq!(s.redis_url, None);
        assert_eq!(s.redis_prefix, "sluice");
        assert!(s.delivery_require_https, "sluice serve requires https merchant URLs unless told otherwise");
        let s = load_env(None, &[("SLUICE_DELIVERY_REQUIRE_HTTPS", "false")]).expect("valid");
        assert!(!s.delivery_require_https);
    }

    #[test]
    fn environment_overrides_the_defaults_and_sluice_names_win() {
        let s = load_env(
            None,
            &[
                ("SLUICE_LISTEN", "127.0.0.1:0"),
                ("DATABASE_URL", "postgres://a@h/db"),
                ("REDIS_URL", "redis://127.0.0.1:6379"),
                ("SLUICE_REDIS_URL", "redis://127.0.0.1:6380"),
                ("SLUICE_DATABASE_MAX_CONNECTIONS", "4"),
                // Not a setting: ignored, not an error.
                ("SLUICE_TEST_POSTGRES_URL", "postgres://elsewhere/db"),
            ],
        )
        .expect("valid");
        assert_eq!(s.listen.port(), 0);
        assert_eq!(s.database_url, "postgres://a@h/db");
        assert_eq!(s.redis_url.as_deref(), Some("redis://127.0.0.1:6380"));
        assert_eq!(s.database_max_connections, 4);
    }

    #[test]
    fn a_port_out_of_range_is_named_with_its_key() {
        let msg = invalid(load_env(None, &[("SLUICE_LISTEN", "127.0.0.1:70000")]));
        assert!(msg.contains("listen (SLUICE_LISTEN)"), "{msg}");
        assert!(msg.contains("127.0.0.1:70000"), "{msg}");
    }

    #[test]
    fn bad_urls_are_refused_with_a_reason_and_every_error_is_listed() {
        let msg = invalid(load_env(
            None,
            &[("DATABASE_URL", "mysql://u:hunter2@h/db"), ("REDIS_URL", "not a url"), ("SLUICE_LOG_FORMAT", "xml")],
        ));
        assert!(msg.contains("unsupported scheme"), "{msg}");
        assert!(msg.contains("redis_url (REDIS_URL): not a valid URL"), "{msg}");
        assert!(msg.contains("log_format"), "{msg}");
        assert!(!msg.contains("hunter2"), "the password leaked: {msg}");
    }

    #[test]
    fn rules_whose_permits_ignore_the_upstream_breaker_are_a_list_of_rule_ids() {
        assert!(load_env(None, &[]).expect("defaults").upstream_breaker_ignore_rules.is_empty());
        let s = load_env(None, &[("SLUICE_UPSTREAM_BREAKER_IGNORE_RULES", " vtex_orders, rule_01abc ,")]).expect("valid");
        assert_eq!(s.upstream_breaker_ignore_rules, vec!["vtex_orders".to_owned(), "rule_01abc".to_owned()]);
        let msg = invalid(load_env(None, &[("SLUICE_UPSTREAM_BREAKER_IGNORE_RULES", "vtex_orders,no spaces")]));
        assert!(msg.contains("upstream_breaker_ignore_rules (SLUICE_UPSTREAM_BREAKER_IGNORE_RULES): 'no spaces'"), "{msg}");
    }

    #[test]
    fn retention_periods_default_to_30_90_and_365_days_and_are_validated() {
        let day = std::time::Duration::from_secs(86_400);
        let s = load_env(None, &[]).expect("defaults");
        assert_eq!((s.retention.delivered, s.retention.failed, s.retention.audit), (30 * day, 90 * day, 365 * day));
        let s = load_env(None, &[("SLUICE_RETENTION_DELIVERED_DAYS", "7"), ("SLUICE_RETENTION_AUDIT_DAYS", "730")]).expect("valid");
        assert_eq!((s.retention.delivered, s.retention.audit), (7 * day, 730 * day));
        let msg = invalid(load_env(None, &[("SLUICE_RETENTION_FAILED_DAYS", "0"), ("SLUICE_RETENTION_DELIVERED_DAYS", "4000")]));
        assert!(msg.contains("retention_failed_days (SLUICE_RETENTION_FAILED_DAYS): 0 is not between 1 and 3650"), "{msg}");
        assert!(msg.contains("retention_delivered_days (SLUICE_RETENTION_DELIVERED_DAYS): 4000"), "{msg}");
    }

    #[test]
    fn worker_steps_default_by_database_and_pacing_is_validated() {
        let s = load_env(None, &[]).expect("defaults");
        assert_eq!((s.delivery_batch_size, s.delivery_concurrency, s.delivery_steps), (64, 32, 1), "SQLite: one step");
        let pg = ("DATABASE_URL", "postgres://sluice@127.0.0.1/sluice");
        assert_eq!(load_env(None, &[pg]).expect("valid").delivery_steps, 8);
        let s = load_env(None, &[pg, ("SLUICE_DELIVERY_STEPS", "2"), ("SLUICE_DELIVERY_BATCH_SIZE", "200")]).expect("valid");
        assert_eq!((s.delivery_steps, s.delivery_batch_size), (2, 200));
        let msg = invalid(load_env(None, &[("SLUICE_DELIVERY_STEPS", "17"), ("SLUICE_DELIVERY_CONCURRENCY", "0")]));
        assert!(msg.contains("delivery_steps (SLUICE_DELIVERY_STEPS): 17 is not between 0 and 16"), "{msg}");
        assert!(msg.contains("delivery_concurrency (SLUICE_DELIVERY_CONCURRENCY): 0 is not between 1 and 1000"), "{msg}");
    }

    #[test]
    fn session_lifetimes_default_to_a_working_day_idle_and_a_week_in_all() {
        let s = load_env(None, &[]).expect("defaults");
        assert_eq!((s.session_idle.as_secs(), s.session_absolute.as_secs()), (8 * 3600, 7 * 86_400));
        let s = load_env(None, &[("SLUICE_SESSION_IDLE_SECS", "600"), ("SLUICE_SESSION_ABSOLUTE_SECS", "600")]).expect("valid");
        assert_eq!((s.session_idle.as_secs(), s.session_absolute.as_secs()), (600, 600));
        let msg = invalid(load_env(None, &[("SLUICE_SESSION_IDLE_SECS", "30")]));
        assert!(msg.contains("session_idle_secs (SLUICE_SESSION_IDLE_SECS): 30"), "{msg}");
        // The absolute lifetime is never shorter than the idle one.
        let msg = invalid(load_env(None, &[("SLUICE_SESSION_IDLE_SECS", "7200"), ("SLUICE_SESSION_ABSOLUTE_SECS", "3600")]));
        assert!(msg.contains("session_absolute_secs (SLUICE_SESSION_ABSOLUTE_SECS): 3600"), "{msg}");
    }

    #[test]
    fn a_missing_config_file_is_an_error_not_a_silent_default() {
        let err = load_env(Some(Path::new("/nonexistent/sluice.toml")), &[]).expect_err("missing file");
        assert!(err.to_string().contains("/nonexistent/sluice.toml"), "{err}");
    }

    #[test]
    fn a_config_file_overrides_defaults_and_env_overrides_the_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("s.toml");
        std::fs::write(&path, "listen = \"127.0.0.1:4000\"\nredis_prefix = \"blue\"\n").expect("write");
        let s = load_env(Some(&path), &[("SLUICE_REDIS_PREFIX", "green")]).expect("valid");
        assert_eq!(s.listen.port(), 4000);
        assert_eq!(s.redis_prefix, "green");
        let s = Settings::load_with(Some(&path), [("redis_prefix".to_owned(), "red".to_owned())]).expect("valid");
        assert_eq!((s.listen.port(), s.redis_prefix.as_str()), (4000, "red"));
    }

    #[test]
    fn a_number_that_is_not_a_number_is_malformed_and_names_its_variable() {
        let err = load_env(None, &[("SLUICE_DATABASE_MAX_CONNECTIONS", "many")]).expect_err("bad");
        // figment names the variable: key "DATABASE_MAX_CONNECTIONS" in `SLUICE_` environment variable(s).
        let msg = err.to_string();
        assert!(msg.contains("DATABASE_MAX_CONNECTIONS") && msg.contains("SLUICE_"), "{msg}");
        let err = Settings::load_with(None, [("database_max_connections".to_owned(), "many".to_owned())]).expect_err("bad");
        assert!(err.to_string().contains("database_max_connections"), "{err}");
    }

    #[test]
    fn store_down_policy_and_allow_list_are_validated() {
        let s = load_env(
            None,
            &[
                ("SLUICE_QUOTA_STORE_DOWN", "local_fallback"),
                ("SLUICE_QUOTA_EXPECTED_INSTANCES", "4"),
                ("SLUICE_DELIVERY_ALLOW_NETWORKS", "127.0.0.0/8, ::1/128"),
            ],
        )
        .expect("valid");
        assert_eq!(s.quota_store_down, StorePolicy::LocalFallback { expected_instances: 4 });
        let expected: Vec<ipnet::IpNet> = ["127.0.0.0/8", "::1/128"].iter().map(|c| c.parse().expect("cidr")).collect();
        assert_eq!(s.delivery_allow_networks, expected);
        let msg = invalid(load_env(
            None,
            &[("SLUICE_QUOTA_STORE_DOWN", "yolo"), ("SLUICE_DELIVERY_ALLOW_NETWORKS", "10.0.0.0/33")],
        ));
        assert!(msg.contains("quota_store_down"), "{msg}");
        assert!(msg.contains("'10.0.0.0/33' is not a CIDR"), "{msg}");
        assert!(load_env(None, &[]).expect("defaults").trusted_proxies.is_empty());
        let s = load_env(None, &[("SLUICE_TRUSTED_PROXIES", "10.0.0.0/8, fd00::/8")]).expect("valid");
        assert_eq!(s.trusted_proxies.len(), 2);
        let msg = invalid(load_env(None, &[("SLUICE_TRUSTED_PROXIES", "10.0.0.1")]));
        assert!(msg.contains("trusted_proxies (SLUICE_TRUSTED_PROXIES): '10.0.0.1' is not a CIDR"), "{msg}");
    }

    #[test]
    fn debug_output_redacts_passwords() {
        let s = load_env(None, &[("DATABASE_URL", "postgres://u:hunter2@h/db")]).expect("valid");
        let shown = format!("{s:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("u:****@h"), "{shown}");
    }
}
