-- What each attempt sent and what the merchant answered (docs/delivery.md,
-- "Attempt data"): the request headers sent (JSON object, signature values
-- included, never the secret), the answer's headers (JSON object, credentials
-- redacted), and whether `response_body` (at most 4 KiB of text) was cut.
-- Attempts recorded before this migration have none of them.
-- The flag is INTEGER 0/1 (the Any driver cannot decode SQLite BOOLEAN).
ALTER TABLE attempts ADD COLUMN request_headers TEXT;
ALTER TABLE attempts ADD COLUMN response_headers TEXT;
ALTER TABLE attempts ADD COLUMN response_truncated INTEGER NOT NULL DEFAULT 0;
