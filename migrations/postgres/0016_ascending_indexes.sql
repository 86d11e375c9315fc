-- The listing indexes in ascending order. New deliveries have the newest
-- created_at, so in a (… created_at DESC, id DESC) index every new entry
-- went to the left end of its range, where a full page splits in half and
-- the half left behind never fills again: these indexes were about half
-- empty and split twice as often as needed (docs/decisions.md, "Listing
-- indexes are ascending"). In ascending order new entries go to the
-- right end, where a split leaves the full page behind.
-- The list reads them backwards for "newest first" just as fast; the
-- predicates stay word for word as in 0015 (engine/src/delivery/row.rs).
-- Rebuilding them blocks writes to deliveries for a few seconds per million
-- rows, once, while this migration runs.
DROP INDEX deliveries_created;
DROP INDEX deliveries_status_created;
DROP INDEX deliveries_merchant_created;
DROP INDEX deliveries_type_created;
DROP INDEX deliveries_money_created;
DROP INDEX deliveries_ladder_created;
DROP INDEX deliveries_in_flight;
CREATE INDEX deliveries_created ON deliveries (created_at, id) WHERE status <> 'DELIVERING';
CREATE INDEX deliveries_status_created ON deliveries (status, created_at, id)
    WHERE status <> 'DELIVERING' AND status <> 'DELIVERED';
CREATE INDEX deliveries_merchant_created ON deliveries (merchant_id, created_at, id) WHERE status <> 'DELIVERING';
CREATE INDEX deliveries_type_created ON deliveries (event_type, created_at, id) WHERE status <> 'DELIVERING';
CREATE INDEX deliveries_money_created ON deliveries (is_money, created_at, id) WHERE status <> 'DELIVERING';
CREATE INDEX deliveries_ladder_created ON deliveries (ladder, created_at, id)
    WHERE status <> 'DELIVERING' AND ladder <> 'fast';
CREATE INDEX deliveries_in_flight ON deliveries (created_at, id) WHERE status = 'DELIVERING';
