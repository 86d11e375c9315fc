-- Background jobs that one instance at a time runs (data retention): the
-- instance `holder` runs job `name` until `expires_at` (Unix milliseconds)
-- and renews the lease while it works; once it has expired any instance may
-- take it over. Taken and renewed by one conditional upsert
-- (engine/src/job_lease.rs).
CREATE TABLE job_leases (
    name       TEXT PRIMARY KEY,
    holder     TEXT NOT NULL,
    expires_at BIGINT NOT NULL
);
