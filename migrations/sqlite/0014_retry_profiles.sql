-- Retry profiles (docs/retry.md): the retry policy chosen for a scope (the
-- scopes of the limit rules; '*' for every scope without its own), and the
-- version counter every instance polls to hot-reload them. Conventions
-- (docs/architecture.md): instants BIGINT Unix ms, JSON TEXT.

CREATE TABLE retry_profiles (
    scope       TEXT PRIMARY KEY,
    -- The preset it was set from ('default', 'wb', 'vtex') or 'custom'.
    name        TEXT NOT NULL,
    -- The whole policy (engine RetryPolicyConfig as JSON).
    policy_json TEXT NOT NULL,
    updated_by  TEXT NOT NULL,
    updated_at  BIGINT NOT NULL
);

-- Bumped in the same transaction as every profile change; instances poll it.
CREATE TABLE retry_profiles_version (
    id      BIGINT PRIMARY KEY,
    version BIGINT NOT NULL
);
INSERT INTO retry_profiles_version (id, version) VALUES (1, 0);
