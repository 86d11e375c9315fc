-- The index of DELIVERING rows by lease expiry goes: the take-back of
-- expired claims reads the rows in flight through deliveries_in_flight,
-- which has the same predicate (docs/decisions.md, "One index of rows in
-- flight"). Both indexes held every delivery in flight; the planner picked
-- either for the take-back, whose `lease_until <= now OR lease_owner = me`
-- reads them all in any order. A step loop takes back now and then, not at
-- every claim, so the extra entry each new delivery wrote here bought
-- nothing. Dropping an index is quick and takes no rows' locks for long.
DROP INDEX deliveries_lease;
