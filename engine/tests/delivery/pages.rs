//! What the Deliveries page needs from the store: pages in both directions
//! by keyset cursor, and a bulk retry that walks a whole filtered set in
//! batches.

use std::collections::HashSet;
use std::time::Duration;

use sluice_engine::delivery::ops::bulk_retry_after;
use sluice_engine::delivery::*;

use crate::receiver::Reply;
use crate::{contract, Harness, NowTs};

contract!(previous_pages_walk_back_over_the_rows_next_pages_showed, a_batched_bulk_retry_touches_every_matching_row_once);

async fn previous_pages_walk_back_over_the_rows_next_pages_showed(db: sluice_engine::db::testing::TestDb) {
    let h = Harness::new(db, Reply::Status(200)).await;
    for i in 0..8 {
        h.event("payment.status_changed", "paid").await;
        if i % 3 != 0 {
            h.clock.advance(Duration::from_secs(1)); // some share a created_at
        }
    }
    let all = DeliveryFilter::default();
    let mut pages: Vec<Vec<DeliveryId>> = Vec::new();
    let mut after = None;
    loop {
        let page = h.store.list_deliveries(&all, after.as_ref(), 3).await.expect("page");
        pages.push(page.items.iter().map(|d| d.id.clone()).collect());
        match page.next {
            Some(c) => after = Some(c),
            None => break,
        }
    }
    assert_eq!(pages.iter().map(Vec::len).collect::<Vec<_>>(), [3, 3, 2]);
    // From the first row of the last page, walk back: the same pages, in reverse.
    let last = h.store.list_deliveries(&all, None, 100).await.expect("all").items;
    let mut cursor = last.iter().find(|d| d.id == pages[2][0]).map(|d| Cursor { created_at: d.created_at, id: d.id.clone() });
    for expected in [&pages[1], &pages[0]] {
        let c = cursor.take().expect("a cursor");
        let (items, newer) = h.store.list_deliveries_before(&all, &c, 3).await.expect("previous page");
        assert_eq!(&items.iter().map(|d| d.id.clone()).collect::<Vec<_>>(), expected);
        if newer {
            cursor = items.first().map(|d| Cursor { created_at: d.created_at, id: d.id.clone() });
        }
    }
    assert!(cursor.is_none(), "the first page has nothing newer");
}

async fn a_batched_bulk_retry_touches_every_matching_row_once(db: sluice_engine::db::testing::TestDb) {
    let h = Harness::new(db, Reply::Status(410)).await;
    let mut failed = HashSet::new();
    for _ in 0..7 {
        failed.insert(h.event("kyc.status_changed", "rejected").await);
    }
    h.step().await; // non-money answered 410: FAILED at once
    let other = h.event("order.created", "new").await; // PENDING, another type
    let filter = DeliveryFilter { event_type: Some("kyc.status_changed".into()), ..DeliveryFilter::default() };
    assert_eq!(h.store.count_deliveries(&DeliveryFilter { status: Some(DeliveryStatus::Failed), ..filter.clone() }).await.expect("count"), 7);
    let mut seen = Vec::new();
    let mut after = None;
    let mut batches = 0;
    loop {
        let batch = bulk_retry_after(&h.store, &filter, after.as_ref(), 3, sluice_engine::delivery::ops::Actor::named("test"), h.clock.now_ts()).await.expect("batch");
        batches += 1;
        assert!(batch.done.retried.is_empty(), "nothing PENDING matched before this run");
        seen.extend(batch.done.redelivered.iter().cloned());
        match batch.next {
            Some(c) => after = Some(c),
            None => break,
        }
        assert!(batches < 10, "the walk ends");
    }
    assert_eq!(seen.len(), 7, "each row once, though redelivered rows are PENDING and still match");
    assert_eq!(seen.iter().cloned().collect::<HashSet<_>>(), failed);
    assert_eq!(h.delivery(&other).await.fast_attempts, 0, "a row outside the filter is untouched");
    assert!(h.store.list_deliveries(&filter, None, 100).await.expect("list").items.iter().all(|d| d.status == DeliveryStatus::Pending));
}
