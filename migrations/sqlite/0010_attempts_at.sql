-- The Overview's chart of delivery attempts by outcome reads the attempts of
-- the last hours across every merchant: an index on the time alone.
CREATE INDEX attempts_at ON attempts (at);
