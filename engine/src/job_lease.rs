//! Leases for background jobs that one instance at a time runs (data
//! retention), shared through the database (`job_leases`, migration 0012).
//!
//! [`JobLease::acquire`] takes the lease or renews it with one conditional
//! upsert: it succeeds when nobody holds the job, when this holder already
//! does, or when the other holder's lease has expired. An instance that dies
//! holding a lease blocks the job for at most the lease's length. Time comes
//! from the caller (the engine clock), never from the database.

use std::time::Duration;

use sqlx::Row;

use crate::clock::Timestamp;
use crate::db::Db;

/// One named job's lease, as seen by one holder.
#[derive(Debug, Clone)]
pub struct JobLease {
    db: Db,
    name: String,
    holder: String,
    ttl: Duration,
}

impl JobLease {
    /// `holder` names this instance; `ttl` is how long a taken lease lasts
    /// without renewal.
    pub fn new(db: Db, name: impl Into<String>, holder: impl Into<String>, ttl: Duration) -> Self {
        JobLease { db, name: name.into(), holder: holder.into(), ttl }
    }

    pub fn holder(&self) -> &str {
        &self.holder
    }

    /// Take or renew the lease until `now + ttl`. True when this holder has it.
    pub async fn acquire(&self, now: Timestamp) -> Result<bool, sqlx::Error> {
        let row = sqlx::query(
            "INSERT INTO job_leases (name, holder, expires_at) VALUES ($1, $2, $3) \
             ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at \
             WHERE job_leases.holder = excluded.holder OR job_leases.expires_at <= $4 \
             RETURNING holder",
        )
        .bind(&self.name)
        .bind(&self.holder)
        .bind((now + self.ttl).as_millis())
        .bind(now.as_millis())
        .fetch_optional(self.db.pool())
        .await?;
        Ok(match row {
            Some(r) => r.try_get::<String, _>("holder")? == self.holder,
            None => false,
        })
    }

    /// Give the lease up (at shutdown), so another instance need not wait
    /// for it to expire. A lease held by someone else is left alone.
    pub async fn release(&self) -> Result<(), sqlx::Error> {
        sqlx::query("UPDATE job_leases SET expires_at = 0 WHERE name = $1 AND holder = $2")
            .bind(&self.name)
            .bind(&self.holder)
            .execute(self.db.pool())
            .await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::testing::TestDb;

    async fn one_holder_at_a_time(db: &Db) {
        let ttl = Duration::from_secs(60);
        let a = JobLease::new(db.clone(), "retention", "a", ttl);
        let b = JobLease::new(db.clone(), "retention", "b", ttl);
        let t0 = Timestamp::from_millis(1_000_000);
        assert!(a.acquire(t0).await.expect("a takes"));
        assert!(!b.acquire(t0 + Duration::from_secs(1)).await.expect("b refused"));
        // a renews: b still waits past a's first expiry.
        assert!(a.acquire(t0 + Duration::from_secs(50)).await.expect("a renews"));
        assert!(!b.acquire(t0 + Duration::from_secs(70)).await.expect("b refused after renewal"));
        // a stops renewing: b takes over once the lease has expired, and a is out.
        assert!(b.acquire(t0 + Duration::from_secs(111)).await.expect("b takes over"));
        assert!(!a.acquire(t0 + Duration::from_secs(112)).await.expect("a refused"));
        // Released: the other takes it at once.
        b.release().await.expect("release");
        assert!(a.acquire(t0 + Duration::from_secs(113)).await.expect("a after release"));
        // Another job's lease is independent.
        let other = JobLease::new(db.clone(), "other", "b", ttl);
        assert!(other.acquire(t0 + Duration::from_secs(113)).await.expect("other job"));
    }

    #[tokio::test]
    async fn sqlite_lease_has_one_holder_at_a_time() {
        let t = TestDb::sqlite().await;
        one_holder_at_a_time(&t.db()).await;
    }

    #[tokio::test]
    async fn postgres_lease_has_one_holder_at_a_time() {
        let t = TestDb::postgres().await;
        one_holder_at_a_time(&t.db()).await;
    }
}
