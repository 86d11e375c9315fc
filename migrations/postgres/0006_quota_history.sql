-- Quota history (engine/src/quota/history.rs, docs/decisions.md "Quota
-- history"): per-slot deltas of the limiter's cumulative counters, sampled by
-- one instance per slot. Conventions (docs/architecture.md): instants BIGINT
-- Unix ms; counters BIGINT; the wait histogram as comma-separated TEXT.

-- One row per sampling slot. Inserting it claims the slot for one instance;
-- `wait_hist` stays '' until that instance has written the slot's totals.
CREATE TABLE quota_history_slots (
    at          BIGINT PRIMARY KEY,
    span_ms     BIGINT NOT NULL,
    claimed_by  TEXT NOT NULL,
    buckets     BIGINT NOT NULL,
    grants      BIGINT NOT NULL,
    penalties   BIGINT NOT NULL,
    refusals    BIGINT NOT NULL,
    wait_hist   TEXT NOT NULL
);

-- What each bucket did in a slot; only buckets that changed get a row.
CREATE TABLE quota_history (
    account    TEXT NOT NULL,
    rule_id    TEXT NOT NULL,
    at         BIGINT NOT NULL,
    scope      TEXT NOT NULL,
    span_ms    BIGINT NOT NULL,
    grants     BIGINT NOT NULL,
    penalties  BIGINT NOT NULL,
    refusals   BIGINT NOT NULL,
    PRIMARY KEY (account, rule_id, at)
);
-- Retention deletes by age.
CREATE INDEX quota_history_at ON quota_history (at);

-- The cumulative counters last seen per bucket: the next delta's base.
CREATE TABLE quota_history_latest (
    account    TEXT NOT NULL,
    rule_id    TEXT NOT NULL,
    at         BIGINT NOT NULL,
    grants     BIGINT NOT NULL,
    penalties  BIGINT NOT NULL,
    refusals   BIGINT NOT NULL,
    wait_hist  TEXT NOT NULL,
    PRIMARY KEY (account, rule_id)
);
CREATE INDEX quota_history_latest_at ON quota_history_latest (at);
