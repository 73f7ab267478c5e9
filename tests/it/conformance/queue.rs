//! The `Queue` part of the store contract, on every backend: accepts and their
//! dedupe, replays and discards, pauses, the controls they announce, the work signal,
//! and the purge of what ended. Claims, completions and probes are in `queue_claims`,
//! ordered lines in `queue_lines`, per-route deliveries in `queue_routes` and
//! `queue_routes_operators`.

use std::sync::Arc;
use std::time::Duration;

use hookgate::clock::system_now_ms as now_ms;
use hookgate::store::{Accepted, Completion, Control, SourceStats, Status, Store, Transition};

use super::{
    DEADLINE, accept_new, attempt, claim_at, claim_one, delivered_at, discard_done, entry,
    entry_with_status, next, refused_at, status_of, stored,
};
use crate::support::{Backend, StoreHandle};
use crate::{for_each_fresh_store, for_each_store};

// ---------------------------------------------------------------------------
// Accept and dedupe.
// ---------------------------------------------------------------------------

async fn accept_then_duplicate(store: &dyn Store) {
    let first = entry("s", "evt_1");
    let id = first.id.clone();
    assert_eq!(
        store.accept(first).await.unwrap(),
        Accepted::New(id.clone())
    );
    let again = entry("s", "evt_1");
    assert_eq!(
        store.accept(again).await.unwrap(),
        Accepted::Duplicate(id.clone())
    );
    assert_eq!(store.count("s").await.unwrap(), 1);
    // The same event id on another source is a different event.
    let other = entry("t", "evt_1");
    assert!(matches!(
        store.accept(other).await.unwrap(),
        Accepted::New(_)
    ));
}
for_each_fresh_store!(
    accept_then_duplicate_stores_once,
    super::accept_then_duplicate
);

async fn dedupe_ttl_expires(store: &dyn Store) {
    let mut e = entry("s", "evt_ttl");
    e.dedupe_ttl = Duration::from_millis(300);
    let first = store.accept(e).await.unwrap();
    // Until the TTL runs out the event is a duplicate; then it is new.
    let second = crate::support::wait_until_ok(
        "the dedupe key expires",
        Duration::from_secs(5),
        async || {
            let mut e2 = entry("s", "evt_ttl");
            e2.dedupe_ttl = Duration::from_millis(300);
            match store.accept(e2).await.unwrap() {
                new @ Accepted::New(_) => Ok(new),
                dup => Err(format!("{dup:?}")),
            }
        },
    )
    .await;
    assert_ne!(first.id(), second.id());
    assert_eq!(store.count("s").await.unwrap(), 2);
}
for_each_fresh_store!(dedupe_key_expires_after_its_ttl, super::dedupe_ttl_expires);

async fn concurrent_same_key(backend: Backend) {
    let h = StoreHandle::new(backend);
    let store: Arc<dyn Store> = h.open().await;
    let mut tasks = Vec::new();
    for _ in 0..50 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            store.accept(entry("s", "evt_race")).await.unwrap()
        }));
    }
    let mut results = Vec::new();
    for t in tasks {
        results.push(t.await.unwrap());
    }
    let new: Vec<_> = results
        .iter()
        .filter(|r| matches!(r, Accepted::New(_)))
        .collect();
    assert_eq!(new.len(), 1, "exactly one new entry: {results:?}");
    let id = new[0].id().to_string();
    assert!(results.iter().all(|r| r.id() == id));
    assert_eq!(store.count("s").await.unwrap(), 1);
}
for_each_store!(
    concurrent_accepts_of_one_event_store_one,
    super::concurrent_same_key
);

// ---------------------------------------------------------------------------
// Replay and discard.
// ---------------------------------------------------------------------------

async fn transitions_by_status(store: &dyn Store) {
    let t = now_ms();
    let pending = entry_with_status(store, "p", "evt", Status::Pending).await;
    let delivered = entry_with_status(store, "d", "evt", Status::Delivered).await;
    let dead = entry_with_status(store, "x", "evt", Status::Dead).await;
    let discarded = entry_with_status(store, "z", "evt", Status::Discarded).await;

    assert_eq!(
        store
            .replay(&pending, None, t, &"ops".into(), t)
            .await
            .unwrap(),
        Transition::Conflict(Status::Pending)
    );
    assert_eq!(
        store
            .discard(&delivered, None, &"ops".into(), "n", t)
            .await
            .unwrap(),
        Transition::Conflict(Status::Delivered)
    );
    assert_eq!(
        store
            .discard(&discarded, None, &"ops".into(), "n", t)
            .await
            .unwrap(),
        Transition::Conflict(Status::Discarded)
    );
    // A refused transition changes nothing and leaves no audit.
    assert_eq!(status_of(store, &pending).await, Status::Pending);
    assert_eq!(status_of(store, &delivered).await, Status::Delivered);
    assert!(store.audit(&pending).await.unwrap().is_empty());
    assert!(store.audit(&delivered).await.unwrap().is_empty());
    assert_eq!(store.audit(&discarded).await.unwrap().len(), 1);

    discard_done(store, &dead, t).await;
    assert_eq!(status_of(store, &dead).await, Status::Discarded);
    discard_done(store, &pending, t).await;
    assert_eq!(status_of(store, &pending).await, Status::Discarded);
}
for_each_fresh_store!(
    replay_and_discard_answer_by_status,
    super::transitions_by_status
);

async fn unknown_ids_are_not_found(store: &dyn Store) {
    // A store with something in it, so that the lookups have somewhere to look.
    accept_new(store, entry("s", "evt_known")).await;
    let t = now_ms();
    for id in ["no-such-id", &uuid::Uuid::now_v7().to_string(), ""] {
        assert!(store.get(id).await.unwrap().is_none(), "{id:?}");
        assert_eq!(
            store.replay(id, None, t, &"ops".into(), t).await.unwrap(),
            Transition::NotFound
        );
        assert_eq!(
            store
                .discard(id, None, &"ops".into(), "n", t)
                .await
                .unwrap(),
            Transition::NotFound
        );
        assert!(store.attempts(id).await.unwrap().is_empty());
        assert!(store.audit(id).await.unwrap().is_empty());
    }
    assert_eq!(store.count("nowhere").await.unwrap(), 0);
    assert_eq!(
        store
            .count_status("nowhere", Status::Pending)
            .await
            .unwrap(),
        0
    );
    assert_eq!(
        store.stats("nowhere").await.unwrap(),
        SourceStats::default()
    );
}
for_each_fresh_store!(unknown_ids_are_not_found, super::unknown_ids_are_not_found);

async fn replay_queues_with_a_fresh_budget(store: &dyn Store) {
    for from in [Status::Dead, Status::Discarded, Status::Delivered] {
        let source = format!("from-{}", from.as_str());
        let id = entry_with_status(store, &source, "evt", from).await;
        let before = stored(store, &id).await;
        let now = now_ms() + 10;
        let at = now + 1_000;
        assert_eq!(
            store
                .replay(&id, None, at, &"ops".into(), now)
                .await
                .unwrap(),
            Transition::Done,
            "replay of a {from:?} entry"
        );
        let e = stored(store, &id).await;
        assert_eq!(e.id, id);
        assert_eq!(e.status, Status::Pending);
        assert_eq!(e.next_attempt_at, Some(at));
        let d = e.delivery("default").unwrap();
        assert_eq!(d.budget_start, now);
        assert_eq!(e.attempts, before.attempts);
        assert_eq!(d.budget_attempts, before.attempts);
        assert_eq!(e.body, before.body);
        assert_eq!(store.count(&source).await.unwrap(), 1);
        assert_eq!(
            store.count_status(&source, Status::Pending).await.unwrap(),
            1
        );
        assert_eq!(store.count_status(&source, from).await.unwrap(), 0);
        // Due at `at`, not before; then delivered like any other.
        assert!(claim_at(store, &source, "w", at - 1).await.is_empty());
        let c = claim_one(store, &source, "w", at).await;
        assert_eq!(c.entry.id, id);
        assert_eq!(c.delivery.budget_start, now);
        let n = before.attempts + 1;
        let done = Completion::Delivered {
            attempt: attempt(n, at, Some(200)),
        };
        assert!(store.complete(&c, "w", done, at).await.unwrap());
        let e = stored(store, &id).await;
        assert_eq!((e.status, e.attempts), (Status::Delivered, n));
    }
}
for_each_fresh_store!(
    replay_queues_the_same_entry_again_with_a_fresh_budget,
    super::replay_queues_with_a_fresh_budget
);

// ---------------------------------------------------------------------------
// Pauses and controls.
// ---------------------------------------------------------------------------

async fn pause_is_durable(backend: Backend) {
    let h = StoreHandle::new(backend);
    let store = h.open().await;
    assert!(crate::support::paused_sources(&*store).await.is_empty());
    store.set_paused("a", None, true).await.unwrap();
    store.set_paused("b", None, true).await.unwrap();
    store.set_paused("b", None, false).await.unwrap();
    assert_eq!(
        crate::support::paused_sources(&*store).await,
        vec!["a".to_string()]
    );
    store.ping().await.unwrap();
    store.close().await;
    drop(store);
    let reopened = h.open().await;
    assert_eq!(
        crate::support::paused_sources(&*reopened).await,
        vec!["a".to_string()]
    );
}
for_each_store!(pause_state_survives_reopen, super::pause_is_durable);

async fn paused_source_is_accepted_not_claimed(store: &dyn Store) {
    store.set_paused("s", None, true).await.unwrap();
    assert_eq!(
        crate::support::paused_sources(store).await,
        vec!["s".to_string()]
    );
    let id = accept_new(store, entry("s", "evt_paused")).await;
    assert_eq!(store.count("s").await.unwrap(), 1);
    let t = now_ms();
    assert!(claim_at(store, "s", "w", t).await.is_empty());
    // Other sources go on.
    let other = accept_new(store, entry("t", "evt_other")).await;
    assert_eq!(claim_one(store, "t", "w", now_ms()).await.entry.id, other);
    store.set_paused("s", None, false).await.unwrap();
    assert!(crate::support::paused_sources(store).await.is_empty());
    assert_eq!(claim_one(store, "s", "w", now_ms()).await.entry.id, id);
}
for_each_fresh_store!(
    a_paused_source_is_accepted_but_not_claimed,
    super::paused_source_is_accepted_not_claimed
);

async fn controls_announce_changes(store: &dyn Store) {
    let id = accept_new(store, entry("s", "evt_ctl")).await;
    let mut rx = store.controls();
    store.set_paused("s", None, true).await.unwrap();
    assert_eq!(
        next(&mut rx).await,
        Control::Paused {
            route: None,
            source: "s".into(),
            paused: true
        }
    );
    store.set_paused("s", None, false).await.unwrap();
    assert_eq!(
        next(&mut rx).await,
        Control::Paused {
            route: None,
            source: "s".into(),
            paused: false
        }
    );
    let t = now_ms();
    discard_done(store, &id, t).await;
    assert_eq!(
        next(&mut rx).await,
        Control::Discarded {
            id: id.clone(),
            route: "default".into()
        }
    );
    // A refused discard announces nothing.
    assert_eq!(
        store
            .discard(&id, None, &"ops".into(), "n", t)
            .await
            .unwrap(),
        Transition::Conflict(Status::Discarded)
    );
    assert!(matches!(
        rx.try_recv(),
        Err(tokio::sync::broadcast::error::TryRecvError::Empty)
    ));
}
for_each_fresh_store!(
    controls_announce_pauses_and_discards,
    super::controls_announce_changes
);

// ---------------------------------------------------------------------------
// Work signal.
// ---------------------------------------------------------------------------

async fn work_signal_moves(store: &dyn Store) {
    let mut signal = store.work_signal("s", "default");
    let mut other_route = store.work_signal("s", "other");
    let mut other_source = store.work_signal("s3", "default");
    signal.borrow_and_update();
    let id = accept_new(store, entry("s", "evt_signal")).await;
    tokio::time::timeout(DEADLINE, signal.changed())
        .await
        .expect("the signal moved after an accept")
        .unwrap();
    // Only the route the entry went to was woken: the other routes' loops sleep on.
    assert!(!other_route.has_changed().unwrap(), "another route woke");
    assert!(!other_source.has_changed().unwrap(), "another source woke");
    let mut two = entry("s", "evt_signal_two_routes");
    two.routes = vec!["default".into(), "other".into()];
    signal.borrow_and_update();
    accept_new(store, two).await;
    tokio::time::timeout(DEADLINE, other_route.changed())
        .await
        .expect("each route of the entry was woken")
        .unwrap();
    assert!(signal.has_changed().unwrap());
    assert!(!other_source.has_changed().unwrap(), "another source woke");
    // A replay is new work too.
    let mut replayed = store.work_signal("s2", "default");
    let id2 = entry_with_status(store, "s2", "evt_signal_2", Status::Dead).await;
    replayed.borrow_and_update();
    let t = now_ms();
    assert_eq!(
        store.replay(&id2, None, t, &"ops".into(), t).await.unwrap(),
        Transition::Done
    );
    tokio::time::timeout(DEADLINE, replayed.changed())
        .await
        .expect("the signal moved after a replay")
        .unwrap();
    assert!(store.get(&id).await.unwrap().is_some());
    other_source.borrow_and_update();
}
for_each_fresh_store!(
    work_signal_moves_after_an_accept_and_a_replay,
    super::work_signal_moves
);

// ---------------------------------------------------------------------------
// Purge.
// ---------------------------------------------------------------------------

/// Claim the one pending entry of `s` (it is due) and complete it at `now`.
async fn complete_at(store: &dyn Store, id: &str, completion: Completion, now: i64) {
    let c = claim_one(store, "s", "w", now_ms()).await;
    assert_eq!(c.entry.id, id);
    assert!(store.complete(&c, "w", completion, now).await.unwrap());
}

async fn purge_by_cutoff(store: &dyn Store) {
    let t = now_ms();
    let old_delivered = accept_new(store, entry("s", "d_old")).await;
    complete_at(store, &old_delivered, delivered_at(t), t).await;
    let new_delivered = accept_new(store, entry("s", "d_new")).await;
    complete_at(store, &new_delivered, delivered_at(t), t + 10_000).await;
    let old_dead = accept_new(store, entry("s", "x_old")).await;
    complete_at(store, &old_dead, refused_at(t), t).await;
    let old_discarded = accept_new(store, entry("s", "z_old")).await;
    discard_done(store, &old_discarded, t).await;
    let new_discarded = accept_new(store, entry("s", "z_new")).await;
    discard_done(store, &new_discarded, t + 10_000).await;
    let pending = accept_new(store, entry("s", "p")).await;
    assert_eq!(store.count("s").await.unwrap(), 6);

    // Delivered before t+5s; dead and discarded before t+1ms.
    let p = store
        .purge(t + 20_000, t + 5_000, t + 1, 100)
        .await
        .unwrap();
    assert_eq!(p.entries, 3, "{p:?}");
    for gone in [&old_delivered, &old_dead, &old_discarded] {
        assert!(store.get(gone).await.unwrap().is_none());
        assert!(store.attempts(gone).await.unwrap().is_empty());
        assert!(store.audit(gone).await.unwrap().is_empty());
    }
    for kept in [&new_delivered, &new_discarded, &pending] {
        assert!(store.get(kept).await.unwrap().is_some());
    }
    assert_eq!(store.count("s").await.unwrap(), 3);
    let st = store.stats("s").await.unwrap();
    assert_eq!(
        (st.pending, st.delivered, st.dead, st.discarded),
        (1, 1, 0, 1)
    );
    // Received counts what arrived, not what is kept.
    assert_eq!(st.received, 6);
    // Nothing more to do at the same cutoffs.
    assert_eq!(
        store
            .purge(t + 20_000, t + 5_000, t + 1, 100)
            .await
            .unwrap()
            .entries,
        0
    );
    // Each cutoff on its own: the dead cutoff does not reach delivered entries.
    let p = store.purge(t + 20_000, t, t + 20_000, 100).await.unwrap();
    assert_eq!(p.entries, 1);
    assert!(store.get(&new_discarded).await.unwrap().is_none());
    assert!(store.get(&new_delivered).await.unwrap().is_some());
    let p = store.purge(t + 20_000, t + 20_000, t, 100).await.unwrap();
    assert_eq!(p.entries, 1);
    assert!(store.get(&new_delivered).await.unwrap().is_none());
    // A pending entry is never purged.
    let p = store
        .purge(t + 3_600_000, t + 3_600_000, t + 3_600_000, 100)
        .await
        .unwrap();
    assert_eq!(p.entries, 0);
    assert_eq!(status_of(store, &pending).await, Status::Pending);
}
for_each_fresh_store!(
    purge_removes_what_ended_before_its_cutoff,
    super::purge_by_cutoff
);

async fn purge_respects_its_limit(store: &dyn Store) {
    let t = now_ms();
    for key in ["a", "b", "c"] {
        let id = accept_new(store, entry("s", key)).await;
        complete_at(store, &id, delivered_at(t), t).await;
    }
    let far = t + 3_600_000;
    assert_eq!(store.purge(far, far, far, 2).await.unwrap().entries, 2);
    assert_eq!(store.count("s").await.unwrap(), 1);
    assert_eq!(store.purge(far, far, far, 2).await.unwrap().entries, 1);
    assert_eq!(store.count("s").await.unwrap(), 0);
}
for_each_fresh_store!(
    purge_removes_at_most_its_limit,
    super::purge_respects_its_limit
);

async fn purge_lets_an_expired_event_in_again(store: &dyn Store) {
    let ttl = Duration::from_millis(200);
    let with_ttl = || {
        let mut e = entry("s", "evt_expiring");
        e.dedupe_ttl = ttl;
        e
    };
    let first = accept_new(store, with_ttl()).await;
    let mut purged_keys = 0;
    let second = crate::support::wait_until_ok(
        "the dedupe key expires and is purged",
        DEADLINE,
        async || {
            let p = store.purge(now_ms(), 0, 0, 100).await.unwrap();
            assert_eq!(p.entries, 0);
            purged_keys += p.dedupe_keys;
            match store.accept(with_ttl()).await.unwrap() {
                Accepted::New(id) => Ok(id),
                Accepted::Duplicate(id) => {
                    assert_eq!(id, first);
                    Err("still a duplicate")
                }
            }
        },
    )
    .await;
    assert_ne!(first, second);
    // At most the one expired key was there to purge.
    assert!(purged_keys <= 1, "{purged_keys}");
    assert_eq!(store.count("s").await.unwrap(), 2);
    // Both entries are intact; the second is a duplicate target now.
    assert_eq!(
        store.accept(with_ttl()).await.unwrap(),
        Accepted::Duplicate(second.clone())
    );
}
for_each_fresh_store!(
    purge_lets_an_event_in_again_once_its_dedupe_key_expired,
    super::purge_lets_an_expired_event_in_again
);
