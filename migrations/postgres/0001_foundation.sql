-- Foundation. Conventions (docs/architecture.md): instants are BIGINT Unix
-- milliseconds, ids TEXT, JSON documents TEXT.

-- Every mutation made through the UI or the API: who, when, what, before/after.
CREATE TABLE audit_log (
    id          TEXT PRIMARY KEY,
    at          BIGINT NOT NULL,
    actor       TEXT NOT NULL,
    action      TEXT NOT NULL,
    target      TEXT NOT NULL,
    before_json TEXT,
    after_json  TEXT,
    reason      TEXT
);
CREATE INDEX audit_log_at ON audit_log (at DESC, id DESC);
CREATE INDEX audit_log_target ON audit_log (target, at DESC);
