-- API tokens for workers and admins (SPEC §8). Only a SHA-256 hash of each
-- token is stored; the token itself is shown once, when it is created.
CREATE TABLE api_tokens (
    id           TEXT PRIMARY KEY,
    name         TEXT NOT NULL UNIQUE,
    scope        TEXT NOT NULL CHECK (scope IN ('worker', 'admin')),
    token_hash   TEXT NOT NULL UNIQUE,
    created_at   BIGINT NOT NULL,
    revoked_at   BIGINT,
    last_used_at BIGINT
);
