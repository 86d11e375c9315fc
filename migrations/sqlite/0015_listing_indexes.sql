-- The Deliveries list's indexes leave out the rows a delivery only passes
-- through (docs/decisions.md, "Listing indexes leave out deliveries in
-- flight"): DELIVERING rows are in none of them but their own
-- deliveries_in_flight, DELIVERED rows are not in the status index (the
-- created index with a filter finds them: they are most rows) and
-- fast-ladder rows are not in the ladder index. A delivery that intake
-- stores claimed and the first attempt delivers then writes four index
-- entries when stored and six when finished, not nine and eight.
-- The list's queries repeat these predicates word for word
-- (engine/src/delivery/row.rs, `push_filter`), which is what lets SQLite
-- and PostgreSQL use a partial index.
-- Rebuilding them blocks writes to deliveries for a few seconds per million
-- rows, once, while this migration runs.
DROP INDEX deliveries_created;
DROP INDEX deliveries_status_created;
DROP INDEX deliveries_merchant_created;
DROP INDEX deliveries_type_created;
DROP INDEX deliveries_money_created;
DROP INDEX deliveries_ladder_created;
CREATE INDEX deliveries_created ON deliveries (created_at DESC, id DESC) WHERE status <> 'DELIVERING';
CREATE INDEX deliveries_status_created ON deliveries (status, created_at DESC, id DESC)
    WHERE status <> 'DELIVERING' AND status <> 'DELIVERED';
CREATE INDEX deliveries_merchant_created ON deliveries (merchant_id, created_at DESC, id DESC) WHERE status <> 'DELIVERING';
CREATE INDEX deliveries_type_created ON deliveries (event_type, created_at DESC, id DESC) WHERE status <> 'DELIVERING';
CREATE INDEX deliveries_money_created ON deliveries (is_money, created_at DESC, id DESC) WHERE status <> 'DELIVERING';
CREATE INDEX deliveries_ladder_created ON deliveries (ladder, created_at DESC, id DESC)
    WHERE status <> 'DELIVERING' AND ladder <> 'fast';
-- The rows in flight, newest first: the list without a status merges them in.
CREATE INDEX deliveries_in_flight ON deliveries (created_at DESC, id DESC) WHERE status = 'DELIVERING';
