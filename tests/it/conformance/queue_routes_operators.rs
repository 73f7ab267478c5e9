//! The `Queue` part of the store contract for routes, on every backend: what
//! operators do to an entry's deliveries. A replay or a discard names one route or
//! takes every delivery it applies to; a pause holds a source or one of its routes,
//! and outlives a restart.

use hookgate::clock::system_now_ms as now_ms;
use hookgate::store::{AuditEvent, Control, PauseTarget, Status, Store, Transition};

use super::{
    Outcome, accept_new, claim_of, claimable, claims, completion, delivery, expect_statuses, got,
    next, routed, settle, statuses,
};
use crate::support::{Backend, StoreHandle};
use crate::{for_each_fresh_store, for_each_store};

/// What a control channel holds now, sorted (controls of one operation may come in
/// any order).
fn drain(rx: &mut tokio::sync::broadcast::Receiver<Control>) -> Vec<Control> {
    let mut got = Vec::new();
    while let Ok(c) = rx.try_recv() {
        got.push(c);
    }
    got.sort_by_key(|c| format!("{c:?}"));
    got
}

fn discarded(id: &str, route: &str) -> Control {
    Control::Discarded {
        id: id.to_string(),
        route: route.to_string(),
    }
}

fn paused(source: &str, route: Option<&str>, paused: bool) -> Control {
    Control::Paused {
        source: source.to_string(),
        route: route.map(str::to_string),
        paused,
    }
}

fn target(source: &str, route: Option<&str>) -> PauseTarget {
    PauseTarget {
        source: source.to_string(),
        route: route.map(str::to_string),
    }
}

// ---------------------------------------------------------------------------
// Replay and discard.
// ---------------------------------------------------------------------------

async fn replay_one_route(store: &dyn Store) {
    let id = accept_new(store, routed("s", "evt_rp", &["a", "b", "c"])).await;
    let t = now_ms();
    settle(store, "s", &id, "a", Outcome::Refused, t).await;
    settle(store, "s", &id, "b", Outcome::Delivered, t).await;
    settle(store, "s", &id, "c", Outcome::Refused, t).await;
    let before = got(store, &id).await;
    assert_eq!(before.status, Status::Dead);

    let now = now_ms() + 10;
    let at = now + 1_000;
    assert_eq!(
        store
            .replay(&id, Some("a"), at, &"alice".into(), now)
            .await
            .unwrap(),
        Transition::Done
    );
    let e = got(store, &id).await;
    let a = e.delivery("a").unwrap();
    assert_eq!(a.status, Status::Pending);
    assert_eq!(a.next_attempt_at, Some(at));
    assert_eq!((a.budget_start, a.budget_attempts, a.attempts), (now, 1, 1));
    for route in ["b", "c"] {
        assert_eq!(
            e.delivery(route),
            before.delivery(route),
            "{route} unchanged"
        );
    }
    assert_eq!((e.status, e.next_attempt_at), (Status::Pending, Some(at)));
    assert_eq!(e.attempts, 3);

    // A pending delivery, a route the entry lacks, an entry that does not exist.
    assert_eq!(
        store
            .replay(&id, Some("a"), at, &"ops".into(), now)
            .await
            .unwrap(),
        Transition::Conflict(Status::Pending)
    );
    assert_eq!(
        store
            .replay(&id, Some("zzz"), at, &"ops".into(), now)
            .await
            .unwrap(),
        Transition::NoSuchRoute
    );
    let unknown = uuid::Uuid::now_v7().to_string();
    assert_eq!(
        store
            .replay(&unknown, Some("a"), at, &"ops".into(), now)
            .await
            .unwrap(),
        Transition::NotFound
    );
    assert_eq!(
        store.audit(&id).await.unwrap(),
        vec![AuditEvent {
            at: now,
            action: "replay".into(),
            actor: "alice".into(),
            note: None,
            route: Some("a".into()),
            session: None,
            client: None,
        }],
        "only the replay that was done, with its route"
    );

    // Due through a at `at` with its fresh budget; c stays dead.
    assert!(claims(store, "s", "a", "w", at - 1).await.is_empty());
    assert!(claims(store, "s", "c", "w", at).await.is_empty());
    let c = claim_of(store, "s", "a", &id, "w", at).await;
    assert_eq!(
        (c.delivery.budget_start, c.delivery.budget_attempts),
        (now, 1)
    );
    assert!(
        store
            .complete(&c, "w", completion(&c, Outcome::Delivered, at), at)
            .await
            .unwrap()
    );
    assert_eq!(
        got(store, &id).await.status,
        Status::Dead,
        "c is still dead"
    );
    // A delivered delivery is sent again when named.
    assert_eq!(
        store
            .replay(&id, Some("b"), at, &"ops".into(), at)
            .await
            .unwrap(),
        Transition::Done
    );
    let b = delivery(store, &id, "b").await;
    assert_eq!(
        (b.status, b.budget_start, b.budget_attempts),
        (Status::Pending, at, 1)
    );
    assert_eq!(delivery(store, &id, "c").await.status, Status::Dead);
}
for_each_fresh_store!(
    a_replay_through_a_route_queues_that_delivery_alone,
    super::replay_one_route
);

async fn replay_every_route(store: &dyn Store) {
    let t = now_ms();
    // a dead, b delivered, c discarded: a and c are replayed, b is not.
    let id = accept_new(store, routed("s", "evt_all_rp", &["a", "b", "c"])).await;
    settle(store, "s", &id, "a", Outcome::Refused, t).await;
    settle(store, "s", &id, "b", Outcome::Delivered, t).await;
    assert_eq!(
        store
            .discard(&id, Some("c"), &"ops".into(), "n", t)
            .await
            .unwrap(),
        Transition::Done
    );
    let before = got(store, &id).await;
    assert_eq!(before.status, Status::Dead);
    let now = now_ms() + 10;
    let at = now + 500;
    assert_eq!(
        store
            .replay(&id, None, at, &"bob".into(), now)
            .await
            .unwrap(),
        Transition::Done
    );
    let e = got(store, &id).await;
    assert_eq!(
        e.delivery("b"),
        before.delivery("b"),
        "delivered stays delivered"
    );
    for (route, attempts) in [("a", 1), ("c", 0)] {
        let d = e.delivery(route).unwrap();
        assert_eq!(d.status, Status::Pending, "{route}");
        assert_eq!(d.next_attempt_at, Some(at), "{route}");
        assert_eq!(
            (d.budget_start, d.budget_attempts),
            (now, attempts),
            "{route}"
        );
    }
    assert_eq!(e.status, Status::Pending);
    let trail = store.audit(&id).await.unwrap();
    assert_eq!(trail.len(), 2, "{trail:?}");
    assert_eq!(trail[0].route.as_deref(), Some("c"));
    assert_eq!(
        trail[1],
        AuditEvent {
            at: now,
            action: "replay".into(),
            actor: "bob".into(),
            note: None,
            route: None,
            session: None,
            client: None,
        }
    );

    // Every delivery delivered: every one is sent again.
    let all = accept_new(store, routed("s", "evt_all_done", &["a", "b"])).await;
    let t = now_ms();
    settle(store, "s", &all, "a", Outcome::Delivered, t).await;
    settle(store, "s", &all, "b", Outcome::Delivered, t).await;
    let now = now_ms() + 10;
    assert_eq!(
        store
            .replay(&all, None, now, &"ops".into(), now)
            .await
            .unwrap(),
        Transition::Done
    );
    for d in got(store, &all).await.deliveries {
        assert_eq!(
            (d.status, d.budget_start, d.budget_attempts),
            (Status::Pending, now, 1),
            "{d:?}"
        );
    }

    // Pending through a, delivered through b, nothing dead: nothing to replay.
    let busy = accept_new(store, routed("s", "evt_busy", &["a", "b"])).await;
    settle(store, "s", &busy, "b", Outcome::Delivered, now_ms()).await;
    let before = got(store, &busy).await;
    assert_eq!(
        store
            .replay(&busy, None, now, &"ops".into(), now)
            .await
            .unwrap(),
        Transition::Conflict(Status::Pending)
    );
    assert_eq!(got(store, &busy).await, before);
    assert!(store.audit(&busy).await.unwrap().is_empty());
    // Delivered through both, sent again through both; then dead through b while
    // pending through a: b alone is replayed.
    settle(store, "s", &busy, "a", Outcome::Delivered, now_ms()).await;
    assert_eq!(
        store
            .replay(&busy, Some("b"), now, &"ops".into(), now)
            .await
            .unwrap(),
        Transition::Done
    );
    assert_eq!(
        store
            .replay(&busy, Some("a"), now, &"ops".into(), now)
            .await
            .unwrap(),
        Transition::Done
    );
    let b = claim_of(store, "s", "b", &busy, "w", now_ms().max(now)).await;
    assert!(
        store
            .complete(&b, "w", completion(&b, Outcome::Refused, now), now)
            .await
            .unwrap()
    );
    assert_eq!(
        statuses(store, &busy).await,
        expect_statuses(&[("a", Status::Pending), ("b", Status::Dead)])
    );
    let now = now_ms() + 20;
    assert_eq!(
        store
            .replay(&busy, None, now, &"ops".into(), now)
            .await
            .unwrap(),
        Transition::Done
    );
    assert_eq!(
        statuses(store, &busy).await,
        expect_statuses(&[("a", Status::Pending), ("b", Status::Pending)])
    );
    assert_eq!(delivery(store, &busy, "b").await.budget_start, now);
    assert_ne!(
        delivery(store, &busy, "a").await.budget_start,
        now,
        "a was not replayed"
    );
}
for_each_fresh_store!(
    a_replay_without_a_route_queues_every_dead_or_discarded_delivery,
    super::replay_every_route
);

async fn discard_by_route(store: &dyn Store) {
    let mut rx = store.controls();
    let id = accept_new(store, routed("s", "evt_disc", &["a", "b", "c"])).await;
    let t = now_ms();
    assert_eq!(
        store
            .discard(&id, Some("b"), &"alice".into(), "not for b", t)
            .await
            .unwrap(),
        Transition::Done
    );
    assert_eq!(next(&mut rx).await, discarded(&id, "b"));
    assert_eq!(
        statuses(store, &id).await,
        expect_statuses(&[
            ("a", Status::Pending),
            ("b", Status::Discarded),
            ("c", Status::Pending)
        ])
    );
    assert_eq!(got(store, &id).await.status, Status::Pending);
    assert!(claims(store, "s", "b", "w", t + 3_600_000).await.is_empty());
    // Refused: an ended delivery, a route the entry lacks, an unknown entry.
    assert_eq!(
        store
            .discard(&id, Some("b"), &"ops".into(), "n", t)
            .await
            .unwrap(),
        Transition::Conflict(Status::Discarded)
    );
    assert_eq!(
        store
            .discard(&id, Some("zzz"), &"ops".into(), "n", t)
            .await
            .unwrap(),
        Transition::NoSuchRoute
    );
    let unknown = uuid::Uuid::now_v7().to_string();
    assert_eq!(
        store
            .discard(&unknown, Some("a"), &"ops".into(), "n", t)
            .await
            .unwrap(),
        Transition::NotFound
    );
    settle(store, "s", &id, "a", Outcome::Delivered, t).await;
    assert_eq!(
        store
            .discard(&id, Some("a"), &"ops".into(), "n", t)
            .await
            .unwrap(),
        Transition::Conflict(Status::Delivered)
    );
    assert!(
        drain(&mut rx).is_empty(),
        "a refused discard announces nothing"
    );

    // Without a route: every pending or dead delivery (c), not the delivered one.
    assert_eq!(
        store
            .discard(&id, None, &"bob".into(), "all", t + 1)
            .await
            .unwrap(),
        Transition::Done
    );
    assert_eq!(next(&mut rx).await, discarded(&id, "c"));
    assert_eq!(
        statuses(store, &id).await,
        expect_statuses(&[
            ("a", Status::Delivered),
            ("b", Status::Discarded),
            ("c", Status::Discarded)
        ])
    );
    assert_eq!(got(store, &id).await.status, Status::Discarded);
    assert_eq!(
        store
            .discard(&id, None, &"ops".into(), "n", t)
            .await
            .unwrap(),
        Transition::Conflict(Status::Discarded)
    );
    assert!(drain(&mut rx).is_empty());
    assert_eq!(
        store.audit(&id).await.unwrap(),
        vec![
            AuditEvent {
                at: t,
                action: "discard".into(),
                actor: "alice".into(),
                note: Some("not for b".into()),
                route: Some("b".into()),
                session: None,
                client: None,
            },
            AuditEvent {
                at: t + 1,
                action: "discard".into(),
                actor: "bob".into(),
                note: Some("all".into()),
                route: None,
                session: None,
                client: None,
            },
        ]
    );

    // Dead through a, pending through b: both go, one control each.
    let two = accept_new(store, routed("s", "evt_disc_two", &["a", "b"])).await;
    settle(store, "s", &two, "a", Outcome::Refused, now_ms()).await;
    assert_eq!(
        store
            .discard(&two, None, &"ops".into(), "n", t)
            .await
            .unwrap(),
        Transition::Done
    );
    let mut got_controls = vec![next(&mut rx).await, next(&mut rx).await];
    got_controls.sort_by_key(|c| format!("{c:?}"));
    assert_eq!(
        got_controls,
        vec![discarded(&two, "a"), discarded(&two, "b")]
    );
    assert!(drain(&mut rx).is_empty());
    assert_eq!(
        statuses(store, &two).await,
        expect_statuses(&[("a", Status::Discarded), ("b", Status::Discarded)])
    );
    assert_eq!(store.count_status("s", Status::Discarded).await.unwrap(), 2);
}
for_each_fresh_store!(
    discard_ends_the_named_delivery_or_every_pending_or_dead_one,
    super::discard_by_route
);

// ---------------------------------------------------------------------------
// Pauses.
// ---------------------------------------------------------------------------

async fn pause_a_route(store: &dyn Store) {
    let mut rx = store.controls();
    let id = accept_new(store, routed("s", "evt_pause", &["a", "b"])).await;
    let other = accept_new(store, routed("t", "evt_pause", &["a"])).await;
    store.set_paused("s", Some("a"), true).await.unwrap();
    assert_eq!(next(&mut rx).await, paused("s", Some("a"), true));
    assert_eq!(store.paused().await.unwrap(), vec![target("s", Some("a"))]);
    assert!(crate::support::paused_sources(store).await.is_empty());
    let t = now_ms();
    // Only that route of that source stops.
    assert!(claimable(store, "s", "a", t).await.is_empty());
    assert_eq!(claimable(store, "s", "b", t).await, vec![id.clone()]);
    assert_eq!(claimable(store, "t", "a", t).await, vec![other.clone()]);
    // The whole source: every route stops.
    store.set_paused("s", None, true).await.unwrap();
    assert_eq!(next(&mut rx).await, paused("s", None, true));
    assert_eq!(
        store.paused().await.unwrap(),
        vec![target("s", None), target("s", Some("a"))]
    );
    assert!(claimable(store, "s", "b", t).await.is_empty());
    assert!(claimable(store, "s", "a", t).await.is_empty());
    // Resuming the source leaves the paused route paused.
    store.set_paused("s", None, false).await.unwrap();
    assert_eq!(next(&mut rx).await, paused("s", None, false));
    assert_eq!(store.paused().await.unwrap(), vec![target("s", Some("a"))]);
    assert_eq!(claimable(store, "s", "b", t).await, vec![id.clone()]);
    assert!(claimable(store, "s", "a", t).await.is_empty());
    store.set_paused("s", Some("a"), false).await.unwrap();
    assert_eq!(next(&mut rx).await, paused("s", Some("a"), false));
    assert!(store.paused().await.unwrap().is_empty());
    assert_eq!(claimable(store, "s", "a", t).await, vec![id.clone()]);
    // Paused deliveries are still accepted and counted.
    assert_eq!(store.count_status("s", Status::Pending).await.unwrap(), 1);
}
for_each_fresh_store!(
    a_paused_route_yields_no_claims_and_outlives_its_source_pause,
    super::pause_a_route
);

async fn route_pauses_are_durable(backend: Backend) {
    let h = StoreHandle::new(backend);
    let store = h.open().await;
    store.set_paused("s", Some("b"), true).await.unwrap();
    store.set_paused("s", None, true).await.unwrap();
    store.set_paused("r", Some("z"), true).await.unwrap();
    store.set_paused("t", Some("a"), true).await.unwrap();
    store.set_paused("t", Some("a"), false).await.unwrap();
    store.set_paused("s", Some("a"), true).await.unwrap();
    // Pausing twice is pausing once.
    store.set_paused("s", Some("a"), true).await.unwrap();
    let want = vec![
        target("r", Some("z")),
        target("s", None),
        target("s", Some("a")),
        target("s", Some("b")),
    ];
    assert_eq!(store.paused().await.unwrap(), want, "sorted");
    store.close().await;
    drop(store);
    let store = h.open().await;
    assert_eq!(store.paused().await.unwrap(), want, "after reopening");
    let id = accept_new(&*store, routed("s", "evt_reopen", &["a", "b", "c"])).await;
    let t = now_ms();
    assert!(
        claimable(&*store, "s", "c", t).await.is_empty(),
        "the source"
    );
    store.set_paused("s", None, false).await.unwrap();
    assert_eq!(claimable(&*store, "s", "c", t).await, vec![id]);
    assert!(claimable(&*store, "s", "a", t).await.is_empty());
    assert!(claimable(&*store, "s", "b", t).await.is_empty());
    store.close().await;
}
for_each_store!(
    route_pause_state_survives_reopen,
    super::route_pauses_are_durable
);
