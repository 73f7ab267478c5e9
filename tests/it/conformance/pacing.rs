//! The `Pacing` part of the store contract, on every backend: send slots keep one
//! pace per route, a hold opens none before it ends, and on Redis every process
//! shares both.

use std::time::Duration;

use hookgate::store::Store;

use crate::for_each_fresh_store;
use crate::support::{Backend, StoreHandle};

/// Ask for a send slot of `route` every millisecond from `t0` for `ms` milliseconds;
/// the times (ms after `t0`) at which one was granted.
async fn granted_slots(store: &dyn Store, route: &str, t0: i64, ms: i64) -> Vec<i64> {
    let spacing = Duration::from_millis(50);
    let mut granted = Vec::new();
    for t in 0..ms {
        let slot = store.take_send_slot("s", route, t0 + t, spacing, 2).await;
        if slot.expect("take a send slot").is_none() {
            granted.push(t);
        }
    }
    granted
}

async fn send_slots(store: &dyn Store) {
    let spacing = Duration::from_millis(50);
    let t0 = 1_700_000_000_000;
    let take = async |source: &str, route: &str, now: i64| {
        store
            .take_send_slot(source, route, now, spacing, 2)
            .await
            .expect("take a send slot")
    };
    // The burst goes at once; then the next slot is announced and nothing is taken.
    assert_eq!(take("s", "a", t0).await, None);
    assert_eq!(take("s", "a", t0).await, None);
    assert_eq!(take("s", "a", t0).await, Some(t0 + 50));
    assert_eq!(take("s", "a", t0 + 49).await, Some(t0 + 50));
    assert_eq!(take("s", "a", t0 + 50).await, None);
    // Another route, and the same route of another source, keep their own pace.
    assert_eq!(take("s", "b", t0).await, None);
    assert_eq!(take("t", "a", t0).await, None);
    // Asked every millisecond for two seconds: the burst, then one per 50 ms, and
    // never more than the pace plus the burst (20 + 2) in any one second.
    let granted = granted_slots(store, "c", t0, 2_000).await;
    assert_eq!(&granted[..4], &[0, 1, 50, 100]);
    for w in 0..1_000 {
        let in_window = granted.iter().filter(|&&t| t >= w && t < w + 1_000).count();
        assert!(in_window <= 22, "{in_window} sends in [{w}, {w} + 1000) ms");
    }
    assert_eq!(granted.len(), 41, "{granted:?}");
}
for_each_fresh_store!(send_slots_keep_one_pace_per_route, super::send_slots);

/// Two gateways on one Redis: their sends to one route share one pace.
#[tokio::test]
async fn send_slots_are_shared_by_every_process_on_redis() {
    let h = StoreHandle::new(Backend::Redis);
    let (one, two) = (h.open().await, h.open().await);
    let spacing = Duration::from_millis(50);
    let t0 = 1_700_000_000_000;
    let mut granted = 0;
    for t in 0..1_000 {
        for store in [&one, &two] {
            let slot = store.take_send_slot("s", "r", t0 + t, spacing, 2).await;
            if slot.expect("take a send slot").is_none() {
                granted += 1;
            }
        }
    }
    // As one process alone would: the burst, then one per 50 ms.
    assert_eq!(granted, 21);
    one.close().await;
    two.close().await;
}

async fn held_send_slots(store: &dyn Store) {
    let spacing = Duration::from_millis(50);
    let t0 = 1_700_000_000_000;
    let take = async |route: &str, now: i64| {
        store
            .take_send_slot("s", route, now, spacing, 2)
            .await
            .expect("take a send slot")
    };
    let hold = async |now: i64, until: i64| {
        store
            .hold_send_slots("s", "h", now, until, spacing, 2)
            .await
            .expect("hold the send slots")
    };
    // A 429 with `Retry-After: 2`: no slot for two seconds, then the pace as before
    // (one slot, the next one spacing later: the burst is not given back at once).
    hold(t0, t0 + 2_000).await;
    assert_eq!(take("h", t0).await, Some(t0 + 2_000));
    assert_eq!(take("h", t0 + 1_999).await, Some(t0 + 2_000));
    assert_eq!(take("h", t0 + 2_000).await, None);
    assert_eq!(take("h", t0 + 2_000).await, Some(t0 + 2_050));
    // A shorter hold shortens nothing; the other routes never waited.
    hold(t0 + 2_000, t0 + 2_010).await;
    assert_eq!(take("h", t0 + 2_049).await, Some(t0 + 2_050));
    assert_eq!(take("other", t0).await, None);
}
for_each_fresh_store!(
    a_held_route_opens_no_send_slot_before_the_hold_ends,
    super::held_send_slots
);

/// Two gateways on one Redis: a hold one of them learns of holds the other too.
#[tokio::test]
async fn a_hold_is_shared_by_every_process_on_redis() {
    let h = StoreHandle::new(Backend::Redis);
    let (one, two) = (h.open().await, h.open().await);
    let spacing = Duration::from_millis(50);
    let t0 = 1_700_000_000_000;
    one.hold_send_slots("s", "r", t0, t0 + 2_000, spacing, 2)
        .await
        .expect("hold");
    let slot = two.take_send_slot("s", "r", t0 + 10, spacing, 2).await;
    assert_eq!(slot.expect("take a send slot"), Some(t0 + 2_000));
    let slot = two.take_send_slot("s", "r", t0 + 2_000, spacing, 2).await;
    assert_eq!(slot.expect("take a send slot"), None);
    one.close().await;
    two.close().await;
}

/// A source's request slots (`[sources.limits]`): one pace per source, apart from
/// every route's, the burst at once and then one per spacing.
async fn request_slots(store: &dyn Store) {
    let spacing = Duration::from_millis(10);
    let t0 = 1_700_000_000_000;
    let take = async |source: &str, now: i64| {
        store
            .take_request_slot(source, now, spacing, 3)
            .await
            .expect("take a request slot")
    };
    for _ in 0..3 {
        assert_eq!(take("s", t0).await, None);
    }
    assert_eq!(take("s", t0).await, Some(t0 + 10));
    assert_eq!(take("s", t0 + 10).await, None);
    // Another source, and every route of this one, keep their own pace.
    assert_eq!(take("t", t0).await, None);
    let route = store
        .take_send_slot("s", "default", t0, spacing, 1)
        .await
        .expect("take a send slot");
    assert_eq!(route, None);
    assert_eq!(take("s", t0 + 10).await, Some(t0 + 20));
}
for_each_fresh_store!(request_slots_keep_one_pace_per_source, super::request_slots);

/// Two gateways on one store: a source's request limit is theirs together.
async fn request_slots_shared(backend: Backend) {
    let h = StoreHandle::new(backend);
    let (one, two) = (h.open().await, h.open().await);
    let spacing = Duration::from_millis(10);
    let t0 = 1_700_000_000_000;
    for store in [&one, &two] {
        let slot = store.take_request_slot("s", t0, spacing, 2).await;
        assert_eq!(slot.expect("take a request slot"), None);
    }
    // Alone, each would take another slot at t0 + 10; together the second is over.
    let a = one.take_request_slot("s", t0 + 10, spacing, 2).await;
    let b = two.take_request_slot("s", t0 + 10, spacing, 2).await;
    assert_eq!(a.expect("take a request slot"), None);
    assert_eq!(b.expect("take a request slot"), Some(t0 + 20));
    one.close().await;
    two.close().await;
}

#[tokio::test]
async fn request_slots_are_shared_by_every_process_on_redis() {
    request_slots_shared(Backend::Redis).await;
}

#[tokio::test]
async fn request_slots_are_shared_by_every_process_on_postgres() {
    request_slots_shared(Backend::Postgres).await;
}
