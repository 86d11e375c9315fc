//! The shared-quota limiter (docs/limiter.md).
//!
//! Many worker processes share one per-account quota of an upstream API. Before
//! each upstream call a worker asks for a permit; the limiter answers "go now",
//! "go after this wait" (the slot is already booked) or "refused, retry after".
//!
//! # Shape
//!
//! - [`rule`]: [`Rule`] and [`Limit`] as validated values; [`rule::presets`].
//! - [`registry`]: [`RuleRegistry::resolve`], the one resolver.
//! - [`decision`]: the pure quota math, `decide(state, now, &limit, cost, ceiling)`.
//! - [`lane`]: [`Priority`] and how far ahead each lane may book.
//! - [`store`]: the [`QuotaStore`] trait; [`memory`] (embedded default),
//!   [`redis`] (distributed; `lua/quota.lua`), [`fallback`] (Redis with a
//!   bounded local share when Redis is down).
//! - [`limiter`]: [`Limiter`], what callers use: `reserve`, `acquire`,
//!   `penalize`, `observe`, `peek`, `release`, `stats`, `list_buckets`.
//! - [`stats`]: per-bucket counters and the wait histogram.
//! - [`rules_repo`]: rules in the database, their history, hot reload.
//! - [`history`]: the counters sampled into per-slot deltas in the database,
//!   for the Quotas charts and the Overview's last hour.
//!
//! # Resolution precedence
//!
//! exact method + path, exact path any method, most specific template, scope
//! default (method-specific first), global default (scope `*`). No match is a
//! refusal with reason `no_rule`, never "unlimited". Disabled rules are skipped.
//!
//! # Algorithms
//!
//! - `token_bucket` (default): GCRA, continuous refill at `tokens/interval`,
//!   capacity `burst`. Over any span `t`, at most `burst + tokens·t/interval`.
//! - `fixed_window`: at most `tokens` per window; windows are aligned to
//!   multiples of `interval` since the Unix epoch (so "from second zero").
//! - `sliding_log`: at most `tokens` in any half-open interval `(t − interval, t]`.
//! - concurrency: a rule's optional `concurrency` is a separate lease set next
//!   to its rate bucket (rate and concurrency are independent limits); leases
//!   expire `lease_ttl` after their booked start, so a dead holder's lease is
//!   reclaimed. A full lease set refuses at once (`concurrency_limit`): leases
//!   are not queued, because their release time is unknown.
//!
//! All algorithms book by reservation: the store computes the earliest slot at
//! or after the last booking (FIFO), books it and returns the wait. Nothing is
//! booked when the wait exceeds the ceiling: max(configured max wait — the
//! call's, else the rule's, else 30 s — , interval + 5 s), or
//! 2 × interval + 5 s for rules with `tokens == 1`. The refusal's
//! `retry_after` is the full time until the free slot. A request's priority
//! lane ([`lane`]) moves that horizon and nothing else: `high` one reserved
//! slot beyond the ceiling, `low` to zero (only a slot free now; on a token
//! bucket, never the last free token).
//!
//! A 429 ([`Limiter::penalize`]) blocks the bucket until max(now + one token's
//! refill or the rule's `min_penalty`, now + Retry-After); for the token
//! bucket it also drains the burst, so after the block permits come at the
//! steady rate. Headers ([`Limiter::observe`]) can only lower a bucket;
//! `Remaining: 0` blocks until the reset. Shadow rules book and record exactly
//! like enforcing ones, but the caller always gets a permit with zero wait;
//! the would-be waits and refusals show in the stats (`shadow_blocks`).
//!
//! # Keys, TTL and eviction (Redis)
//!
//! One bucket per (account, rule): `{prefix}:rl:{<account>}:<scope>:<rule>` (a
//! hash), with `…:log` (sliding log, a sorted set), `…:leases` (sorted set) and
//! `…:stats` (hash) next to it; all share the `{account}` hash tag, so one
//! script touches one Cluster slot. Calls without an account use `_global`.
//! Every key gets a TTL: bucket keys expire when their state no longer matters
//! (a full bucket), plus a margin; stats keys the idle retention
//! ([`RedisSettings::idle_retention`], default an hour) after the last decision.
//! An evicted or expired bucket key reads as a full bucket: under memory
//! pressure Redis may therefore allow one extra burst — the upstream's 429 and
//! [`Limiter::penalize`] are the backstop. The known buckets are indexed in
//! `{prefix}:rl-index` (a sorted set by last use, written at most once a
//! minute per bucket per process, `lua/index.lua`) for the Quotas dashboard;
//! entries past the idle retention are dropped in batches.
//!
//! # Forgetting (memory)
//!
//! The in-process store forgets a bucket once it reads as full again, holds
//! no live lease, and its last decision is older than the idle retention
//! ([`MemoryStore::forget_idle`], run every few seconds by the server), so
//! memory follows the accounts active within the retention, not every
//! account ever seen. Forgetting never changes a decision.
//!
//! # Store-down policies and how to pick a store
//!
//! - Embedded (one node): [`MemoryStore`]. No outage possible.
//! - Distributed: [`RedisStore`], wrapped in [`FallbackStore`] with
//!   [`StorePolicy::FailClosed`] (refuse with `store_unavailable`) or
//!   [`StorePolicy::LocalFallback`] (each instance gets `tokens / expected
//!   instances` from an in-process limiter; [`Limiter::health`] reports
//!   `degraded`). Redis calls time out after a short deadline (default
//!   250 ms) and the store retries Redis by itself, so it recovers without a
//!   restart.
//!
//! Redis decisions use Redis `TIME`, so worker clock skew does not matter; the
//! memory store uses the injected [`crate::clock::Clock`].
//!
//! # Hot reload
//!
//! Rules live in the database ([`RulesRepo`]); every change bumps a version
//! counter in the same transaction. A [`RuleReloader`] per instance polls it
//! every [`rules_repo::RELOAD_EVERY`] (1 s) and swaps the whole set into the
//! limiter (`ArcSwap`), so an edit is live everywhere within about a second.
//! Buckets are keyed by rule id: their state carries over an edit.
//!
//! # Testing
//!
//! `engine/tests/quota/`: one contract suite run against the memory store,
//! Redis and a 3-node Redis Cluster. Redis keeps its own time, so the cases
//! never advance time; they assert booked waits (which real time can only
//! shorten, by at most the test's run time) and counts, with intervals of
//! minutes or hours. Time-dependent scenarios run on the memory store with a
//! `ManualClock`. A parity test feeds the same pseudo-random operations to the
//! Rust and the Lua math and compares every answer.

pub mod admin;
pub mod decision;
pub mod fallback;
pub mod history;
pub mod lane;
pub mod lazy;
pub mod limiter;
pub mod memory;
pub mod metrics;
pub mod outcome;
pub mod redis;
pub mod registry;
pub mod rule;
pub mod rules_repo;
pub mod stats;
pub mod store;

pub use admin::{RuleAdmin, RuleAdminError};
pub use decision::{BucketState, Decision, Usage};
pub use fallback::{FallbackStore, StorePolicy};
pub use lane::Priority;
pub use lazy::LazyRedisStore;
pub use limiter::{Limiter, LimiterConfig, QuotaError, QuotaRequest, RateLimitHeaders};
pub use outcome::{Lease, Outcome, Permit, Refusal};
pub use memory::MemoryStore;
pub use redis::{RedisSettings, RedisStore};
pub use registry::RuleRegistry;
pub use rule::{Algorithm, Limit, Rule, RuleDraft, RuleError, RuleId};
pub use rules_repo::{RuleChange, RuleHistoryEntry, RuleReloader, RulesRepo, RulesRepoError};
pub use stats::{BucketKey, BucketStats, LaneStats, RefusalReason};
pub use store::{QuotaStore, StoreError, StoreHealth};
