-- What each attempt sent and what the merchant answered (docs/delivery.md,
-- "Attempt data"): the request headers sent (JSON object, signature values
-- included, never the secret), the answer's headers (JSON object, credentials
-- redacted), and whether `response_body` (at most 4 KiB of text) was cut.
-- Attempts recorded before this migration have none of them.
ALTER TABLE attempts ADD COLUMN request_headers TEXT;
ALTER TABLE attempts ADD COLUMN response_headers TEXT;
ALTER TABLE attempts ADD COLUMN response_truncated BOOLEAN NOT NULL DEFAULT FALSE;
