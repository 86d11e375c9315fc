-- People who log in to the web application (SPEC §7) and their sessions.
-- Passwords are argon2id PHC strings; roles are viewer < support < admin.
CREATE TABLE users (
    id            TEXT PRIMARY KEY,
    username      TEXT NOT NULL UNIQUE,
    password_hash TEXT NOT NULL,
    role          TEXT NOT NULL CHECK (role IN ('viewer', 'support', 'admin')),
    created_at    BIGINT NOT NULL,
    last_login_at BIGINT
);

-- tower-sessions records, one JSON document per session. The id is rotated
-- at login; expired rows are deleted by the server's session sweeper.
CREATE TABLE sessions (
    id          TEXT PRIMARY KEY,
    record_json TEXT NOT NULL,
    expires_at  BIGINT NOT NULL
);
CREATE INDEX sessions_expires_at ON sessions (expires_at);
