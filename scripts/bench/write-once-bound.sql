-- An upper bound for "a delivery row written once" (docs/delivery.md,
-- "A delivery row written once"), measured with the same binary:
--
--   scripts/bench/pairs.sh 2 120000 "pg20 pg1000" \
--     main=/tmp/sluice-main bound=/tmp/sluice-main:scripts/bench/write-once-bound.sql
--
-- Not a schema Sluice can ship: without these indexes the Deliveries page
-- scans, and without the keys nothing refuses a hand-run delete. What it
-- takes away from each delivered event is PostgreSQL work of about the size
-- the design would: the in-flight row's index entries at intake and the
-- listing entries the finishing update adds (five B-tree entries of
-- sixteen), and the two foreign key checks (with their row locks) on the
-- outbox's hot statements. It is the size of the lever, not a forecast:
-- the design's hot path, prototyped (write-once-prototype.patch), kept
-- those entries and checks and did not gain (docs/benchmarks.md).
DROP INDEX deliveries_created, deliveries_status_created, deliveries_merchant_created,
    deliveries_type_created, deliveries_money_created, deliveries_ladder_created, deliveries_in_flight;
ALTER TABLE deliveries DROP CONSTRAINT deliveries_event_id_fkey;
ALTER TABLE attempts DROP CONSTRAINT attempts_delivery_id_fkey;
