-- Webhook delivery (SPEC §5, docs/delivery.md). Conventions (docs/architecture.md):
-- instants are BIGINT Unix milliseconds, ids TEXT, JSON documents TEXT.
-- Flags are INTEGER 0/1 here, not BOOLEAN: sqlx's Any driver cannot decode
-- SQLite's BOOLEAN column type ("Any driver does not support the SQLite type
-- Bool"), while it decodes INTEGER; PostgreSQL keeps BOOLEAN.
-- The same file, statement for statement, lives in migrations/postgres.

-- A merchant: where its webhooks go and how they are signed.
-- During a secret rotation `previous_secret` still signs (both signatures are
-- sent) until `previous_secret_expires_at`.
CREATE TABLE merchants (
    id                         TEXT PRIMARY KEY,
    name                       TEXT NOT NULL,
    url                        TEXT NOT NULL,
    scheme                     TEXT NOT NULL,
    secret                     TEXT NOT NULL,
    previous_secret            TEXT,
    previous_secret_expires_at BIGINT,
    created_at                 BIGINT NOT NULL,
    updated_at                 BIGINT NOT NULL
);

-- The per-merchant circuit breaker, shared by every instance. Transitions are
-- conditional updates on `version` (compare-and-set). The sliding window is
-- read from `attempts` since max(now - 5 min, counters_since).
CREATE TABLE merchant_breakers (
    merchant_id       TEXT PRIMARY KEY REFERENCES merchants (id),
    state             TEXT NOT NULL,
    version           BIGINT NOT NULL,
    pause_ms          BIGINT NOT NULL,
    failed_probes     BIGINT NOT NULL,
    opened_at         BIGINT,
    next_probe_at     BIGINT,
    probe_delivery_id TEXT,
    probe_started_at  BIGINT,
    counters_since    BIGINT NOT NULL,
    updated_at        BIGINT NOT NULL
);

-- An accepted event. Idempotent by (merchant_id, idempotency_key).
CREATE TABLE events (
    id              TEXT PRIMARY KEY,
    merchant_id     TEXT NOT NULL REFERENCES merchants (id),
    event_type      TEXT NOT NULL,
    status          TEXT,
    is_money        INTEGER NOT NULL,
    payload         TEXT NOT NULL,
    idempotency_key TEXT NOT NULL,
    created_at      BIGINT NOT NULL,
    UNIQUE (merchant_id, idempotency_key)
);

-- One delivery per (event, merchant). `id` is the X-Webhook-Id, stable
-- across every attempt and redelivery. Filter columns are copied from the
-- event so the UI's list never joins.
CREATE TABLE deliveries (
    id               TEXT PRIMARY KEY,
    event_id         TEXT NOT NULL REFERENCES events (id),
    merchant_id      TEXT NOT NULL REFERENCES merchants (id),
    event_type       TEXT NOT NULL,
    is_money         INTEGER NOT NULL,
    status           TEXT NOT NULL,
    ladder           TEXT NOT NULL,
    fast_attempts    BIGINT NOT NULL,
    slow_steps       BIGINT NOT NULL,
    slow_started_at  BIGINT,
    cycle_started_at BIGINT NOT NULL,
    next_attempt_at  BIGINT NOT NULL,
    lease_owner      TEXT,
    lease_until      BIGINT,
    deferred         INTEGER NOT NULL,
    deferrals        BIGINT NOT NULL,
    last_deferred_at BIGINT,
    last_status_code BIGINT,
    last_error       TEXT,
    failed_reason    TEXT,
    created_at       BIGINT NOT NULL,
    updated_at       BIGINT NOT NULL,
    finished_at      BIGINT,
    UNIQUE (event_id, merchant_id)
);
-- The worker's claim: due PENDING rows, and DELIVERING rows whose lease ran out.
CREATE INDEX deliveries_due ON deliveries (next_attempt_at) WHERE status = 'PENDING';
CREATE INDEX deliveries_lease ON deliveries (lease_until) WHERE status = 'DELIVERING';
-- The UI's list: newest first, keyset by (created_at, id), one index per filter.
CREATE INDEX deliveries_created ON deliveries (created_at DESC, id DESC);
CREATE INDEX deliveries_status_created ON deliveries (status, created_at DESC, id DESC);
CREATE INDEX deliveries_merchant_created ON deliveries (merchant_id, created_at DESC, id DESC);
CREATE INDEX deliveries_type_created ON deliveries (event_type, created_at DESC, id DESC);
CREATE INDEX deliveries_money_created ON deliveries (is_money, created_at DESC, id DESC);
CREATE INDEX deliveries_ladder_created ON deliveries (ladder, created_at DESC, id DESC);
-- Draining a merchant's deferred queue when its breaker closes.
CREATE INDEX deliveries_merchant_deferred ON deliveries (merchant_id) WHERE deferred = TRUE;

-- One row per request sent (or refused before sending).
CREATE TABLE attempts (
    id            TEXT PRIMARY KEY,
    delivery_id   TEXT NOT NULL REFERENCES deliveries (id),
    merchant_id   TEXT NOT NULL,
    at            BIGINT NOT NULL,
    ladder        TEXT NOT NULL,
    outcome       TEXT NOT NULL,
    status_code   BIGINT,
    latency_ms    BIGINT NOT NULL,
    error         TEXT,
    response_body TEXT,
    probe         INTEGER NOT NULL
);
CREATE INDEX attempts_delivery ON attempts (delivery_id, at);
-- The breaker's sliding window.
CREATE INDEX attempts_merchant_at ON attempts (merchant_id, at);
