//! Several workers on one outbox, and a worker process killed mid-send.

use std::collections::HashSet;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use sluice_engine::clock::{Clock, SharedClock, SystemClock};
use sluice_engine::db::testing::TestDb;
use sluice_engine::db::{Db, PoolSettings};
use sluice_engine::delivery::*;

use crate::receiver::Reply;
use crate::{contract, test_config, Harness};

const CHILD_DB_ENV: &str = "SLUICE_TEST_CHILD_DB_URL";

contract!(
    two_workers_on_one_database_never_send_the_same_delivery_at_once,
    a_worker_takes_back_its_own_claims_at_once_and_others_wait_for_the_lease,
    the_step_after_a_failed_one_takes_its_claims_back_at_once
);

/// A step that failed half way (the database went away between the claim
/// and the write-back) leaves claims behind. The same worker, stepping
/// again once the database answers, delivers them at once instead of
/// waiting out its own lease; another instance still waits for the lease.
async fn a_worker_takes_back_its_own_claims_at_once_and_others_wait_for_the_lease(db: TestDb) {
    let h = Harness::new(db, Reply::Status(200)).await;
    let id = h.event("order.created", "created").await;
    let lease = test_config("w1").lease;
    let claimed = h.store.claim("w1", h.clock.now(), lease, 10).await.expect("claim");
    assert_eq!(claimed, vec![id.clone()], "w1 claims the delivery, then its step fails");

    let other = Worker::new(h.store.clone(), h.clock.clone(), test_config("w2")).expect("worker");
    assert_eq!(other.run_once().await.expect("step").claimed, 0, "w1's lease holds for other instances");

    let report = h.step().await;
    assert_eq!((report.claimed, report.delivered), (1, 1), "w1 takes its own claim back at once");
    assert_eq!(h.receiver.received().len(), 1);
    assert_eq!(h.delivery(&id).await.status, DeliveryStatus::Delivered);
}

/// The same when the failure is the worker's own step: a step loop looks
/// for expired claims only every tenth of a lease, but the step after a
/// failed one looks at once, although the clock has not moved.
async fn the_step_after_a_failed_one_takes_its_claims_back_at_once(db: TestDb) {
    let h = Harness::new(db, Reply::Status(200)).await;
    assert_eq!(h.step().await.claimed, 0, "nothing yet; expired claims looked for just now");
    let id = h.event("order.created", "created").await;
    // The write-back fails: the attempts table is away.
    sqlx::query("ALTER TABLE attempts RENAME TO attempts_away").execute(h.db.pool()).await.expect("rename");
    assert!(h.worker.run_once().await.is_err(), "the write-back failed");
    sqlx::query("ALTER TABLE attempts_away RENAME TO attempts").execute(h.db.pool()).await.expect("rename back");
    let d = h.delivery(&id).await;
    assert_eq!((d.status, d.lease_owner.as_deref()), (DeliveryStatus::Delivering, Some(h.worker.config().instance_id.as_str())));

    let report = h.step().await;
    assert_eq!((report.claimed, report.delivered), (1, 1), "taken back at once");
    assert_eq!(h.receiver.received().len(), 2, "sent again, with the same id");
    assert_eq!(h.delivery(&id).await.status, DeliveryStatus::Delivered);
}

/// PostgreSQL: two instances; SQLite (one node): two workers in one process.
async fn two_workers_on_one_database_never_send_the_same_delivery_at_once(db: TestDb) {
    let h = Harness::new(db, Reply::Status(200)).await;
    let mut ids = HashSet::new();
    for _ in 0..60 {
        ids.insert(h.event("payment.status_changed", "paid").await.to_string());
    }
    let workers: Vec<Worker> = ["w1", "w2"]
        .iter()
        .map(|name| Worker::new(h.store.clone(), h.clock.clone(), WorkerConfig { batch_size: 7, concurrency: 4, ..test_config(name) }).expect("worker"))
        .collect();
    let runs = workers.into_iter().map(|w| {
        tokio::spawn(async move {
            let mut delivered = 0;
            loop {
                let r = w.run_once().await.expect("step");
                delivered += r.delivered;
                if r.claimed == 0 {
                    return delivered;
                }
            }
        })
    });
    let per_worker: Vec<usize> = futures::future::join_all(runs).await.into_iter().map(|r| r.expect("task")).collect();
    assert_eq!(per_worker.iter().sum::<usize>(), 60, "{per_worker:?}");
    let got = h.receiver.received();
    assert_eq!(got.len(), 60, "each delivery sent exactly once");
    assert_eq!(got.iter().map(|r| r.id.clone()).collect::<HashSet<_>>(), ids);
    assert!(h.receiver.overlaps().is_empty());
}

/// Run by the test below as a separate OS process: one worker step with the
/// system clock against the database it is given. The receiver never
/// answers, so this process is mid-send when it is killed.
#[tokio::test]
#[ignore = "run as a child process by a_worker_killed_mid_send_loses_nothing_and_the_redelivery_carries_the_same_id"]
async fn child_worker_process() {
    let Ok(url) = std::env::var(CHILD_DB_ENV) else { return };
    let db = Db::connect(&url, &PoolSettings::default()).await.expect("child connects");
    let clock: SharedClock = Arc::new(SystemClock);
    let worker = Worker::new(DeliveryStore::new(db), clock, test_config("child")).expect("worker");
    let report = worker.run_once().await.expect("child step");
    eprintln!("child worker finished a step it should not have finished: {report:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_mid_send_loses_nothing_and_the_redelivery_carries_the_same_id() {
    let h = Harness::new(TestDb::postgres().await, Reply::Hang).await;
    // The child runs on the system clock: create the event "now" for it.
    h.clock.set(SystemClock.now());
    let id = h.event("payment.status_changed", "paid").await;
    let mut arrivals = h.receiver.arrivals();
    let mut child = Command::new(std::env::current_exe().expect("test binary"))
        .args(["--exact", "crash::child_worker_process", "--ignored", "--nocapture"])
        .env(CHILD_DB_ENV, &h.db.url)
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn child worker");
    // Wait (event-driven; the timeout is only a safety net) for the child's request.
    let first = tokio::time::timeout(Duration::from_secs(30), arrivals.recv()).await.expect("child sent in time").expect("arrival");
    assert_eq!(first, id.as_str());
    child.kill().expect("SIGKILL the child");
    let status = child.wait().expect("reap child");
    assert!(!status.success());

    // The row is still there, claimed by the dead worker.
    let d = h.delivery(&id).await;
    assert_eq!((d.status, d.lease_owner.as_deref()), (DeliveryStatus::Delivering, Some("child")));
    let lease_until = d.lease_until.expect("lease");
    // Before the lease runs out nobody else may take it.
    h.clock.set(lease_until - Duration::from_secs(1));
    assert_eq!(h.step().await.claimed, 0);
    // Right after it, a step loop that took back expired claims a moment
    // ago does not look again yet: it does so every tenth of a lease.
    h.receiver.set(Reply::Status(200));
    let after = lease_until.max(SystemClock.now()) + Duration::from_secs(1);
    h.clock.set(after);
    assert_eq!(h.step().await.claimed, 0);
    // A tenth of a lease later, it sends it again, with the same id.
    h.clock.set(after + WorkerConfig::default().lease / 10);
    assert_eq!(h.step().await.delivered, 1);
    let got = h.receiver.received();
    assert_eq!(got.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(), [id.as_str(), id.as_str()]);
    let d = h.delivery(&id).await;
    assert_eq!((d.status, d.fast_attempts), (DeliveryStatus::Delivered, 0));
}
