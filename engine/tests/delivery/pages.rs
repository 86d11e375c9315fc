//! What the Deliveries page needs from the store: pages in both directions
//! by keyset cursor, and a bulk retry that walks a whole filtered set in
//! batches.

use std::collections::HashSet;
use std::time::Duration;

use sluice_engine::delivery::ops::bulk_retry_after;
use sluice_engine::delivery::*;

use crate::receiver::Reply;
use crate::{contract, Harness, NowTs};

contract!(
    previous_pages_walk_back_over_the_rows_next_pages_showed,
    a_batched_bulk_retry_touches_every_matching_row_once,
    rows_in_flight_are_listed_and_counted_among_the_others
);

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

/// The listing indexes leave DELIVERING rows out
/// (migrations/*/0015_listing_indexes.sql); a list or count without a status
/// must still show them, in their place, in both directions.
async fn rows_in_flight_are_listed_and_counted_among_the_others(db: sluice_engine::db::testing::TestDb) {
    let h = Harness::new(db, Reply::Status(200)).await;
    let lease = Duration::from_secs(60);
    let mut ids = Vec::new();
    for round in 0..4 {
        for _ in 0..3 {
            ids.push(h.event("payment.status_changed", "paid").await);
        }
        match round {
            // Another worker holds the oldest waiting two: DELIVERING.
            0 | 2 => assert_eq!(h.store.claim(&format!("elsewhere-{round}"), h.clock.now_ts(), lease, 2).await.expect("claim").len(), 2),
            // This worker delivers what is left waiting: DELIVERED.
            1 => assert!(h.step().await.delivered >= 1),
            _ => {} // the last three stay PENDING
        }
        if round % 2 == 0 {
            h.clock.advance(Duration::from_secs(1)); // the others share a created_at
        }
    }
    let mut expected = Vec::new();
    for id in &ids {
        expected.push(h.delivery(id).await);
    }
    expected.sort_by(|a, b| (b.created_at, &b.id).cmp(&(a.created_at, &a.id)));
    let in_flight: Vec<DeliveryId> = expected.iter().filter(|d| d.status == DeliveryStatus::Delivering).map(|d| d.id.clone()).collect();
    assert_eq!(in_flight.len(), 4, "two claims of two");
    assert!(expected.iter().any(|d| d.status == DeliveryStatus::Delivered) && expected.iter().any(|d| d.status == DeliveryStatus::Pending));
    let expected: Vec<DeliveryId> = expected.into_iter().map(|d| d.id).collect();

    let all = DeliveryFilter::default();
    let by_merchant = DeliveryFilter { merchant_id: Some(h.merchant.id.clone()), ..DeliveryFilter::default() };
    for filter in [&all, &by_merchant] {
        let mut pages: Vec<Vec<DeliveryId>> = Vec::new();
        let mut after = None;
        loop {
            let page = h.store.list_deliveries(filter, after.as_ref(), 5).await.expect("page");
            pages.push(page.items.iter().map(|d| d.id.clone()).collect());
            match page.next {
                Some(c) => after = Some(c),
                None => break,
            }
        }
        assert_eq!(pages.concat(), expected, "every row once, newest first, the ones in flight in their place");
        // Back from the last page's first row: the pages before it, in reverse.
        let first = &pages[pages.len() - 1][0];
        let d = h.delivery(first).await;
        let (items, newer) = h.store.list_deliveries_before(filter, &Cursor { created_at: d.created_at, id: d.id }, 5).await.expect("previous page");
        assert_eq!(items.iter().map(|d| d.id.clone()).collect::<Vec<_>>(), pages[pages.len() - 2]);
        assert!(newer);
        assert_eq!(h.store.count_deliveries(filter).await.expect("count"), 12);
    }
    let delivering = DeliveryFilter { status: Some(DeliveryStatus::Delivering), ..DeliveryFilter::default() };
    assert_eq!(h.store.list_deliveries(&delivering, None, 100).await.expect("list").items.into_iter().map(|d| d.id).collect::<Vec<_>>(), in_flight);
    assert_eq!(h.store.count_deliveries(&delivering).await.expect("count"), 4);
    assert_eq!(h.store.status_counts().await.expect("counts").delivering, 4);
}
