//! SQLite's memory goes back when asked (`Db::release_idle_memory`, run once
//! a minute by the quota history sampler): idle connections but one close,
//! and the page caches of all go. A binary of its own: it reads SQLite's process-wide
//! memory counter, which other tests' databases would move.

use sluice_engine::db::testing::TestDb;

fn sqlite_memory() -> i64 {
    // SAFETY: a plain read of SQLite's global statistics; no pointers.
    #[allow(unsafe_code)]
    unsafe {
        libsqlite3_sys::sqlite3_memory_used()
    }
}

/// A dropped pool connection goes back by a task of its own, which waits
/// for SQLite's worker thread: let it run, for up to ten seconds of wall
/// time (a count of yields was not enough on a busy machine: the worker
/// thread had not been scheduled yet).
async fn back_in_pool(pool: &sqlx::AnyPool, idle: usize) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while pool.num_idle() < idle {
        assert!(std::time::Instant::now() < deadline, "{idle} connections should be back in the pool, {} are", pool.num_idle());
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
}

#[tokio::test]
async fn the_page_caches_of_all_pooled_connections_are_given_back() {
    let test = TestDb::sqlite().await;
    let db = test.db();
    let pool = db.pool();
    sqlx::query("CREATE TABLE filler (id INTEGER PRIMARY KEY, v TEXT NOT NULL)").execute(pool).await.unwrap();
    // About 6 MB of rows, more than one connection's cache (2 MB by default).
    let mut tx = pool.begin().await.unwrap();
    for i in 0..24_000 {
        sqlx::query("INSERT INTO filler (id, v) VALUES ($1, $2)")
            .bind(i64::from(i))
            .bind("x".repeat(240))
            .execute(&mut *tx)
            .await
            .unwrap();
    }
    tx.commit().await.unwrap();

    // Three connections at once, each reading the whole table: each cache fills.
    let mut held = Vec::new();
    for _ in 0..3 {
        let mut conn = pool.acquire().await.unwrap();
        let (n,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM filler WHERE v <> ''").fetch_one(&mut *conn).await.unwrap();
        assert_eq!(n, 24_000);
        held.push(conn);
    }
    drop(held);
    back_in_pool(pool, 3).await;

    let before = sqlite_memory();
    assert_eq!(pool.size(), 3);
    db.release_idle_memory().await;
    let after = sqlite_memory();
    assert!(
        before - after >= 5_000_000,
        "three connections' caches (~2 MB each) should be given back: {before} -> {after} bytes"
    );
    back_in_pool(pool, 1).await;
    assert_eq!((pool.size(), pool.num_idle()), (1, 1), "two of the three idle connections were closed");

    // The connections still answer, reading their pages again.
    let (n,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM filler WHERE v <> ''").fetch_one(pool).await.unwrap();
    assert_eq!(n, 24_000);
    assert!(sqlite_memory() > after + 1_000_000, "a scan fills a cache again");
}

