//! The `Lifecycle` part of the store contract, on every backend: a healthy store
//! answers `ping` and never stops, and what a closed store leased is delivered after
//! it is opened again.

use hookgate::clock::system_now_ms as now_ms;
use hookgate::store::{Completion, HousekeepingPass, Status, Store};

use super::{accept_new, attempt, claim_one, claim_when_due, entry, status_of};
use crate::support::{Backend, StoreHandle};
use crate::{for_each_fresh_store, for_each_store};

async fn healthy_store(store: &dyn Store) {
    let stopped = store.stopped();
    store.ping().await.unwrap();
    accept_new(store, entry("s", "evt_ping")).await;
    store.ping().await.unwrap();
    assert!(!*stopped.borrow());
    assert!(!*store.stopped().borrow());
}
for_each_fresh_store!(
    a_healthy_store_answers_ping_and_never_stops,
    super::healthy_store
);

async fn leases_of_a_previous_run(backend: Backend) {
    let h = StoreHandle::new(backend);
    let store = h.open().await;
    let id = accept_new(&*store, entry("s", "evt_restart")).await;
    let c = claim_one(&*store, "s", "w1", now_ms()).await;
    assert_eq!(c.entry.id, id);
    // The process stops with the entry leased.
    store.close().await;
    drop(store);
    let store = h.open().await;
    // What a serving process does when its forwarder starts.
    store
        .housekeeping(HousekeepingPass::Start, &["s".to_string()])
        .await
        .unwrap();
    let c = claim_when_due(&*store, "s", "w2").await;
    assert_eq!(c.entry.id, id);
    let t = now_ms();
    let done = Completion::Delivered {
        attempt: attempt(1, t, Some(200)),
    };
    assert!(store.complete(&c, "w2", done, t).await.unwrap());
    assert_eq!(status_of(&*store, &id).await, Status::Delivered);
    store.close().await;
}
for_each_store!(
    work_leased_by_a_previous_run_is_delivered_after_a_restart,
    super::leases_of_a_previous_run
);
