//! Building and running the application from validated settings.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use leptos::prelude::LeptosOptions;
use sluice_app::ssr::AppContext;
use sluice_engine::upstream_breaker::admin::UpstreamBreakerAdmin;
use sluice_engine::upstream_breaker::lazy::LazyRedisBreakerStore;
use sluice_engine::upstream_breaker::memory::MemoryBreakerStore;
use sluice_engine::upstream_breaker::permits::{BreakerGate, PermitGateConfig};
use sluice_engine::upstream_breaker::{BreakerStore, UpstreamBreaker, UpstreamBreakerConfig};
use sluice_engine::clock::{SharedClock, SystemClock};
use sluice_engine::db::{Backend, Db, PoolSettings};
use sluice_engine::delivery::ssrf::SsrfPolicy;
use sluice_engine::delivery::merchant_breaker::MerchantBreakerConfig;
use sluice_engine::delivery::ladder::LadderConfig;
use sluice_engine::delivery::handoff::Handoff;
use sluice_engine::delivery::intake::{DEFAULT_MAX_BATCH, DEFAULT_MAX_IN_FLIGHT};
use sluice_engine::delivery::{DeliveryStore, Intake, Wake, Worker, WorkerConfig};
use sluice_engine::quota::history::{HistoryConfig, QuotaHistory};
use sluice_engine::quota::rules_repo::RELOAD_EVERY;
use sluice_engine::retention::Retention;
use sluice_engine::retry::profiles_repo::{self, ProfilesRepo, RetryProfileReloader};
use sluice_engine::retry::RetryProfiles;
use sluice_engine::tokens::TokenCache;
use sluice_engine::quota::{
    FallbackStore, LazyRedisStore, Limiter, LimiterConfig, MemoryStore, QuotaStore, RedisSettings, RuleId,
    RuleReloader, RuleRegistry, RulesRepo,
};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::config::{redact_url, DeliveryTiming, Settings};
use crate::health::{Health, RedisProbe};
use crate::state::{AppState, Shared};

/// How often expired web sessions are deleted.
const SESSION_SWEEP_EVERY: Duration = Duration::from_secs(600);
/// How often idle in-process quota buckets are looked for and forgotten.
const FORGET_IDLE_EVERY: Duration = Duration::from_secs(10);
/// How often the Prometheus recorder folds recorded histogram samples into
/// its buckets (see `telemetry::prometheus`).
const METRICS_UPKEEP_EVERY: Duration = Duration::from_secs(5);
/// Live API tokens one instance keeps checked at most (there are few).
const API_TOKEN_CACHE_CAPACITY: usize = 10_000;

/// On a database without users, create `admin` with a random password and
/// return the credentials so the caller can print them once. Later starts
/// return `None`; more users come from `sluice user add` or the Users page.
pub async fn ensure_first_admin(db: &Db, now: sluice_engine::clock::Timestamp) -> anyhow::Result<Option<(String, String)>> {
    use sluice_engine::users;
    if users::count_users(db).await.context("counting users")? > 0 {
        return Ok(None);
    }
    let password = users::generate_password();
    match users::create_user(db, "admin", &password, users::Role::Admin, now).await {
        Ok(_) => Ok(Some(("admin".to_owned(), password))),
        // Another instance starting at the same moment created it first.
        Err(users::UserError::Duplicate(_)) => Ok(None),
        Err(e) => Err(e).context("creating the first admin"),
    }
}

/// A built application: connected, migrated and bound, not yet serving.
pub struct Application {
    listener: TcpListener,
    address: SocketAddr,
    state: AppState,
}

/// Connect to the database named by the settings, creating the embedded
/// data directory if needed, and run migrations. A failed migration is an
/// error: Sluice must not serve on a half-migrated schema.
pub async fn connect_and_migrate(settings: &Settings) -> anyhow::Result<Db> {
    if Backend::from_url(&settings.database_url) == Some(Backend::Sqlite) {
        std::fs::create_dir_all(&settings.data_dir)
            .with_context(|| format!("creating data directory {}", settings.data_dir.display()))?;
    }
    let pool = PoolSettings { max_connections: settings.database_max_connections, ..PoolSettings::default() };
    let db = Db::connect(&settings.database_url, &pool)
        .await
        .with_context(|| format!("connecting to {}", redact_url(&settings.database_url)))?;
    db.migrate().await.context("database migration failed; refusing to start")?;
    Ok(db)
}

impl Application {
    pub async fn build(settings: Settings) -> anyhow::Result<Application> {
        Application::build_with_clock(settings, Arc::new(SystemClock)).await
    }

    /// [`Application::build`] with the clock every part reads (the limiter,
    /// the API's `Retry-After` dates, the workers); tests pass a `ManualClock`.
    pub async fn build_with_clock(settings: Settings, clock: SharedClock) -> anyhow::Result<Application> {
        let db = connect_and_migrate(&settings).await?;
        let redis = match &settings.redis_url {
            Some(url) => Some(Arc::new(RedisProbe::new(
                redis::Client::open(url.as_str()).context("opening Redis client")?,
            ))),
            None => None,
        };
        let store = build_quota_store(&settings, &clock);
        // Connect to Redis (if configured) before serving: the lazy store fails a
        // call made while its first connect is in flight as if Redis were down,
        // and a sign-in racing the background tasks' first call was refused.
        // A Redis that is down costs one timeout here; start-up goes on.
        if let Err(e) = store.list_buckets().await {
            tracing::warn!(error = %e, "quota store not reachable at start-up; continuing");
        }
        let limiter = build_limiter(store.clone(), &db, &clock).await?;
        let login_limiter = Limiter::new(
            store,
            RuleRegistry::new(sluice_app::ssr::auth::login_rules()),
            clock.clone(),
            LimiterConfig::default(),
        );
        let health = Arc::new(Health::new(db.clone(), redis, limiter.clone()));
        let listener = TcpListener::bind(settings.listen)
            .await
            .with_context(|| format!("binding {}", settings.listen))?;
        let address = listener.local_addr().context("reading the bound address")?;
        // The site build names the client's files by content and lists the
        // hashes in hash.txt; without that file (no site built) the plain
        // names stand. Leptos joins the hash file's path to the binary's
        // directory, so it must be absolute.
        let hash_file = std::path::absolute(settings.site_root.join("hash.txt")).context("resolving the site root")?;
        let leptos_options = LeptosOptions::builder()
            .output_name("sluice")
            .site_root(settings.site_root.to_string_lossy().into_owned())
            .site_pkg_dir("pkg")
            .site_addr(address)
            .hash_files(hash_file.is_file())
            .hash_file(std::sync::Arc::<str>::from(hash_file.to_string_lossy()))
            .build();
        let rules = RulesRepo::new(db.clone());
        let (profiles_repo, retry_profiles) = load_retry_profiles(&db, &clock).await?;
        let deliveries = DeliveryStore::new(db.clone());
        let wake = Wake::default();
        // On PostgreSQL an instance that delivers takes what its own intake
        // stores straight to its steps, claimed (docs/decisions.md, "Intake
        // hands its deliveries to its own steps"); one batch per step can
        // wait there. On SQLite a claim is cheap and the one step does better
        // claiming whole batches (measured).
        let handoff = (settings.delivery_worker && db.backend() == Backend::Postgres).then(|| {
            let lease = worker_config(&settings).lease;
            let capacity = settings.delivery_batch_size as usize * settings.delivery_steps as usize;
            Handoff::new(format!("intake-{}", ulid::Ulid::new()), capacity, lease)
        });
        let intake = Intake::start(deliveries.clone(), wake.clone(), DEFAULT_MAX_BATCH, DEFAULT_MAX_IN_FLIGHT, handoff.clone());
        let upstream_breakers = build_upstream_breakers(&settings, &clock);
        let gate_config = PermitGateConfig {
            ignored_rules: settings.upstream_breaker_ignore_rules.iter().map(|id| RuleId(id.clone())).collect(),
            store_down: settings.quota_store_down,
        };
        let permits = BreakerGate::new(limiter.clone(), upstream_breakers.clone(), gate_config);
        let upstream_breaker_admin = UpstreamBreakerAdmin::new(db.clone(), upstream_breakers.clone());
        let app_context = AppContext {
            health: health.clone(),
            db: db.clone(),
            clock: clock.clone(),
            limiter: limiter.clone(),
            rules: rules.clone(),
            retry_profiles: retry_profiles.clone(),
            profiles_repo: profiles_repo.clone(),
            deliveries: deliveries.clone(),
            ssrf: delivery_url_policy(&settings),
            upstream_breakers: upstream_breakers.clone(),
            upstream_breaker_admin: upstream_breaker_admin.clone(),
            delivery_ladder: delivery_timing(&settings).0,
            delivery_breaker: delivery_timing(&settings).1,
            login_limiter,
            history: QuotaHistory::new(
                db.clone(),
                HistoryConfig {
                    every: settings.quota_sample_every,
                    idle_retention: settings.quota_idle_retention,
                    ..HistoryConfig::default()
                },
            ),
            api_tokens: Arc::new(TokenCache::new(settings.api_token_cache, API_TOKEN_CACHE_CAPACITY)),
            retention: settings.retention.clone(),
        };
        let state = AppState::new(Shared {
            settings: Arc::new(settings),
            rules,
            retry_profiles,
            profiles_repo,
            deliveries,
            intake,
            wake,
            handoff,
            db,
            clock,
            limiter,
            permits,
            upstream_breakers,
            upstream_breaker_admin,
            health,
            leptos_options,
            prometheus: crate::telemetry::prometheus(),
            app_context,
        });
        Ok(Application { listener, address, state })
    }

    /// The address actually bound (port 0 in tests becomes a real port).
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    pub fn state(&self) -> &AppState {
        &self.state
    }

    /// Serve and run the background workers until `shutdown` completes, then
    /// finish in-flight requests and let the workers end their current step.
    pub async fn run_until_stopped(self, shutdown: impl Future<Output = ()> + Send + 'static) -> anyhow::Result<()> {
        let state = self.state.clone();
        let (stop_tx, stop_rx) = watch::channel(false);
        let stopped = move || {
            let mut rx = stop_rx.clone();
            async move {
                let _ = rx.wait_for(|stop| *stop).await;
            }
        };
        let mut background = JoinSet::new();
        let reloader = RuleReloader::new(state.rules.clone(), state.limiter.clone());
        background.spawn(reloader.run(RELOAD_EVERY, stopped()));
        // Profile edits made on other instances (or straight in the database)
        // reach this one's executor, API and pages within a second.
        let profiles = RetryProfileReloader::new(state.profiles_repo.clone(), state.retry_profiles.clone());
        background.spawn(profiles.run(profiles_repo::RELOAD_EVERY, stopped()));
        // Every instance runs the sampler; the slot claim lets one of them
        // record each interval.
        let instance = format!("sluice_{}", ulid::Ulid::new().to_string().to_lowercase());
        let history = state.app_context.history.clone();
        let retention = Retention::new(state.db.clone(), state.clock.clone(), state.settings.retention.clone(), &instance);
        background.spawn(history.run(state.limiter.clone(), instance, stopped()));
        // Every instance runs the retention task; its database lease lets one
        // of them delete at a time.
        background.spawn(retention.run(stopped()));
        // Histogram samples queue in the recorder until an upkeep folds them
        // into buckets; without one they pile up for as long as nobody
        // scrapes /metrics (about 1 KB per hundred requests, for ever).
        let prometheus = state.prometheus.clone();
        background.spawn(sluice_engine::periodic::every(METRICS_UPKEEP_EVERY, stopped(), move || {
            prometheus.run_upkeep();
            std::future::ready(())
        }));
        // The login throttle shares the store, so this sweeps its buckets too.
        background.spawn(state.limiter.clone().run_forgetting(FORGET_IDLE_EVERY, stopped()));
        if state.settings.delivery_worker {
            let worker = Worker::new(state.deliveries.clone(), state.clock.clone(), worker_config(&state.settings))
                .context("delivery worker settings")?
                .with_wake(state.wake.clone());
            let worker = match &state.handoff {
                Some(h) => worker.with_handoff(h.clone()),
                None => worker,
            };
            // Each step loop claims under its own name: a loop takes back
            // its own unfinished claims at once, never a sibling's in flight.
            for n in 0..state.settings.delivery_steps {
                let step = worker.sibling(format!("{}.{n}", worker.config().instance_id));
                let until = stopped();
                background.spawn(async move { step.run(until).await });
            }
            if state.db.backend() == Backend::Postgres {
                // Other instances' intake wakes this worker through PostgreSQL.
                let listen = sluice_engine::delivery::wake::listen(state.settings.database_url.clone(), state.wake.clone(), stopped());
                background.spawn(listen);
            }
        }
        let sessions = crate::sessions::store(&state);
        let until = stopped();
        background.spawn(async move {
            use tower_sessions::session_store::ExpiredDeletion;
            tokio::pin!(until);
            loop {
                if let Err(e) = sessions.delete_expired().await {
                    tracing::warn!(error = %e, "deleting expired sessions failed");
                }
                tokio::select! {
                    () = &mut until => break,
                    () = tokio::time::sleep(SESSION_SWEEP_EVERY) => {}
                }
            }
        });
        let router = crate::http::router(state.clone());
        let signal_tx = stop_tx.clone();
        // TCP_NODELAY on every connection: hyper writes a response's head and
        // a file's body separately, and with Nagle's algorithm the body then
        // waits for the client's delayed ACK (~40 ms) on a kept-alive
        // connection (docs/decisions.md, "Each page group is a chunk of the
        // browser client").
        let listener = axum::serve::ListenerExt::tap_io(self.listener, |tcp: &mut tokio::net::TcpStream| {
            if let Err(e) = tcp.set_nodelay(true) {
                tracing::debug!(error = %e, "could not set TCP_NODELAY");
            }
        });
        let served = axum::serve(listener, router.into_make_service_with_connect_info::<SocketAddr>())
            .with_graceful_shutdown(async move {
                shutdown.await;
                let _ = signal_tx.send(true);
            })
            .await
            .context("HTTP server failed");
        let _ = stop_tx.send(true);
        while background.join_next().await.is_some() {}
        if let Some(h) = &state.handoff {
            // The steps have stopped and intake with the HTTP server: what
            // still waits in the hand-off goes back to PENDING for the other
            // instances (or this one's next start), not after its lease.
            match state.deliveries.release_claims(h.owner(), state.clock.now()).await {
                Ok(0) => {}
                Ok(n) => tracing::info!(deliveries = n, "hand-off released at shutdown"),
                Err(e) => tracing::warn!(error = &e as &dyn std::error::Error, "releasing the hand-off at shutdown failed; its rows are delivered after their lease"),
            }
        }
        state.db.close().await;
        served
    }
}

/// The quota store for this deployment: in-process buckets in embedded mode;
/// in distributed mode Redis, behind the configured store-down policy and
/// connected lazily so an instance can start while Redis is down.
fn build_quota_store(settings: &Settings, clock: &SharedClock) -> Arc<dyn QuotaStore> {
    match redis_settings(settings) {
        None => Arc::new(MemoryStore::with_idle_retention(clock.clone(), settings.quota_idle_retention)),
        Some(redis) => Arc::new(
            FallbackStore::new(
                Arc::new(LazyRedisStore::new(redis)),
                settings.quota_store_down,
                clock.clone(),
                Duration::from_millis(500),
            )
            .with_idle_retention(settings.quota_idle_retention, clock.clone()),
        ),
    }
}

/// The deployment's Redis (one node or a cluster), if it has one.
fn redis_settings(settings: &Settings) -> Option<RedisSettings> {
    settings.redis_url.as_deref().map(|url| {
        let mut redis = RedisSettings::single(url, &settings.redis_prefix);
        redis.cluster = settings.redis_cluster;
        redis.timeout = settings.redis_timeout;
        redis.idle_retention = settings.quota_idle_retention;
        redis
    })
}

/// The upstream circuit breakers: in memory when embedded; in Redis when
/// distributed (the same node or cluster as the quotas), so every instance
/// sees the same states, connected lazily so an instance starts (and shows
/// the Breakers page) while Redis is down.
fn build_upstream_breakers(settings: &Settings, clock: &SharedClock) -> UpstreamBreaker {
    let store: Arc<dyn BreakerStore> = match redis_settings(settings) {
        None => Arc::new(MemoryBreakerStore::new(clock.clone())),
        Some(redis) => Arc::new(LazyRedisBreakerStore::new(redis)),
    };
    UpstreamBreaker::new(store, UpstreamBreakerConfig::default())
}

/// The limiter over `store`, with the rule set from the database (the vendors'
/// presets on a fresh database).
async fn build_limiter(store: Arc<dyn QuotaStore>, db: &Db, clock: &SharedClock) -> anyhow::Result<Limiter> {
    let rules = RulesRepo::new(db.clone());
    if rules.version().await.context("reading limit rules")? == 0 {
        let seeded = rules.seed_presets("sluice", clock.now()).await.context("seeding preset limit rules")?;
        tracing::info!(seeded, "fresh database: preset limit rules created");
    }
    let registry = rules.load().await.context("loading limit rules")?;
    Ok(Limiter::new(store, registry, clock.clone(), LimiterConfig::default()))
}

/// The retry profiles from the database (the vendors' presets for the preset
/// scopes on a database that never had any), loaded before serving.
async fn load_retry_profiles(db: &Db, clock: &SharedClock) -> anyhow::Result<(ProfilesRepo, RetryProfiles)> {
    let repo = ProfilesRepo::new(db.clone());
    let seeded = repo.seed_presets("sluice", clock.now()).await.context("seeding preset retry profiles")?;
    if seeded > 0 {
        tracing::info!(seeded, "preset retry profiles set for the vendors' scopes");
    }
    let set = repo.load().await.context("loading retry profiles")?;
    Ok((repo, RetryProfiles::new(set)))
}

fn worker_config(settings: &Settings) -> WorkerConfig {
    let (ladder, breaker) = delivery_timing(settings);
    WorkerConfig {
        ssrf: delivery_url_policy(settings),
        ladder,
        breaker,
        batch_size: settings.delivery_batch_size,
        concurrency: settings.delivery_concurrency as usize,
        ..WorkerConfig::default()
    }
}

/// Which merchant URLs this instance accepts and delivers to. The allow-list
/// was parsed and validated with the rest of the settings.
fn delivery_url_policy(settings: &Settings) -> SsrfPolicy {
    SsrfPolicy { allow: settings.delivery_allow_networks.clone(), require_https: settings.delivery_require_https }
}

/// The ladder and breaker timings this instance delivers with; operations
/// that build or reset a breaker use the same ones.
pub fn delivery_timing(settings: &Settings) -> (LadderConfig, MerchantBreakerConfig) {
    match settings.delivery_timing {
        DeliveryTiming::Product => (LadderConfig::default(), MerchantBreakerConfig::default()),
        DeliveryTiming::Demo => crate::demo::timing::demo_timing(),
    }
}

/// Completes on Ctrl-C or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
    tracing::info!("shutting down");
}
