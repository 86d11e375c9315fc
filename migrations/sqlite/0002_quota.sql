-- Quota (docs/limiter.md): limit rules, their edit history, and the version
-- counter every instance polls to hot-reload the rule set. Conventions
-- (docs/architecture.md): instants BIGINT Unix ms, ids TEXT, JSON TEXT.

CREATE TABLE limit_rules (
    id             TEXT PRIMARY KEY,
    scope          TEXT NOT NULL,
    method         TEXT,
    path           TEXT,
    algorithm      TEXT NOT NULL,
    tokens         BIGINT NOT NULL,
    interval_ms    BIGINT NOT NULL,
    burst          BIGINT NOT NULL,
    concurrency    BIGINT,
    max_wait_ms    BIGINT,
    min_penalty_ms BIGINT,
    shadow         BOOLEAN NOT NULL,
    enabled        BOOLEAN NOT NULL,
    note           TEXT NOT NULL,
    updated_by     TEXT NOT NULL,
    updated_at     BIGINT NOT NULL
);
-- One rule per (scope, method, path): the resolver's precedence needs no tie-break.
CREATE UNIQUE INDEX limit_rules_match ON limit_rules (scope, COALESCE(method, ''), COALESCE(path, ''));

-- Every create/update/delete of a rule: who, when, before/after (JSON).
CREATE TABLE limit_rule_history (
    id          TEXT PRIMARY KEY,
    rule_id     TEXT NOT NULL,
    at          BIGINT NOT NULL,
    actor       TEXT NOT NULL,
    action      TEXT NOT NULL,
    before_json TEXT,
    after_json  TEXT
);
CREATE INDEX limit_rule_history_rule ON limit_rule_history (rule_id, at DESC, id DESC);

-- Bumped in the same transaction as every rule change; instances poll it.
CREATE TABLE limit_rules_version (
    id      BIGINT PRIMARY KEY,
    version BIGINT NOT NULL
);
INSERT INTO limit_rules_version (id, version) VALUES (1, 0);
