-- Prototype of "a delivery row written once": the table the hand-off's claims live in.
CREATE TABLE delivery_claims (
    delivery_id TEXT PRIMARY KEY,
    event_id    TEXT NOT NULL,
    merchant_id TEXT NOT NULL,
    owner       TEXT NOT NULL,
    until       BIGINT NOT NULL,
    created_at  BIGINT NOT NULL
);
