//! The `Queue` part of the store contract for routes, on every backend: an entry is
//! delivered through each of its routes on its own (a delivery per route, with its
//! own status, attempts, budget, lease and dead letter): accepts, claims,
//! completions, probes and the purge follow each delivery. What operators do to a
//! delivery (replays, discards, pauses) is in `queue_routes_operators`.

use hookgate::clock::system_now_ms as now_ms;
use hookgate::store::{
    Claim, Completion, ListQuery, RouteStats, SourceStats, Status, Store, Transition,
};

use super::{
    DEADLINE, LEASE, Outcome, accept_new, claim_of, claimable, claims, completion, delivery,
    expect_statuses, got, route_attempt, routed, routed_at, settle, statuses,
};
use crate::for_each_fresh_store;
use crate::support::wait_until_ok;

// ---------------------------------------------------------------------------
// Accept.
// ---------------------------------------------------------------------------

async fn accept_stores_a_delivery_per_route(store: &dyn Store) {
    for names in [["a", "b", "c"], ["zeta", "alpha", "mid"]] {
        let e = routed("s", &format!("evt_{}", names[0]), &names);
        let received_at = e.received_at;
        let id = accept_new(store, e).await;
        let got = got(store, &id).await;
        assert_eq!(got.status, Status::Pending);
        assert_eq!(got.attempts, 0);
        let order: Vec<&str> = got.deliveries.iter().map(|d| d.route.as_str()).collect();
        assert_eq!(order, names, "deliveries in the order of the routes");
        for d in &got.deliveries {
            assert_eq!(d.status, Status::Pending, "{d:?}");
            assert_eq!((d.attempts, d.budget_attempts), (0, 0), "{d:?}");
            assert_eq!(d.budget_start, received_at, "{d:?}");
            assert_eq!(d.last_error, None, "{d:?}");
            assert!(
                d.next_attempt_at.is_some_and(|t| t <= now_ms()),
                "due at once: {d:?}"
            );
        }
        // Due at once through each route, and through no other.
        for r in names {
            assert!(
                claimable(store, "s", r, now_ms()).await.contains(&id),
                "{r}"
            );
        }
        assert!(!claimable(store, "s", "other", now_ms()).await.contains(&id));
    }
    assert_eq!(store.count_status("s", Status::Pending).await.unwrap(), 2);
    assert_eq!(store.stats("s").await.unwrap().pending, 2);
}
for_each_fresh_store!(
    accept_stores_one_pending_delivery_per_route_in_route_order,
    super::accept_stores_a_delivery_per_route
);

/// A delivery its route's transform skipped is `filtered`, with the reason, no
/// attempt and no lease, and never handed out again; the entry is `filtered` when
/// every delivery is, and follows the others' otherwise.
async fn a_skipped_delivery_is_filtered(store: &dyn Store) {
    let skip = || Completion::Filtered {
        reason: "transform: empty".into(),
    };
    // One route, skipped: the entry is filtered.
    let one = accept_new(store, routed("s", "evt_skip_one", &["a"])).await;
    let now = now_ms();
    let c = claim_of(store, "s", "a", &one, "w", now).await;
    assert!(store.complete(&c, "w", skip(), now).await.unwrap());
    let d = delivery(store, &one, "a").await;
    assert_eq!(d.status, Status::Filtered);
    assert_eq!(d.attempts, 0);
    assert_eq!(d.last_error.as_deref(), Some("transform: empty"));
    assert_eq!(got(store, &one).await.status, Status::Filtered);
    assert!(
        !claimable(store, "s", "a", now_ms() + 3_600_000)
            .await
            .contains(&one)
    );
    // A repeat of the same completion changes nothing.
    assert!(!store.complete(&c, "w", skip(), now).await.unwrap());
    // Two routes: one skipped, the other delivered: the entry is delivered.
    let two = accept_new(store, routed("s", "evt_skip_two", &["a", "b"])).await;
    let now = now_ms();
    let c = claim_of(store, "s", "a", &two, "w", now).await;
    assert!(store.complete(&c, "w", skip(), now).await.unwrap());
    assert_eq!(got(store, &two).await.status, Status::Pending);
    settle(store, "s", &two, "b", Outcome::Delivered, now).await;
    assert_eq!(
        statuses(store, &two).await,
        expect_statuses(&[("a", Status::Filtered), ("b", Status::Delivered)])
    );
    assert_eq!(got(store, &two).await.status, Status::Delivered);
    // Both skipped: filtered.
    let both = accept_new(store, routed("s", "evt_skip_both", &["a", "b"])).await;
    let now = now_ms();
    for r in ["a", "b"] {
        let c = claim_of(store, "s", r, &both, "w", now).await;
        assert!(store.complete(&c, "w", skip(), now).await.unwrap());
    }
    assert_eq!(got(store, &both).await.status, Status::Filtered);
    assert_eq!(store.count_status("s", Status::Filtered).await.unwrap(), 2);
}
for_each_fresh_store!(
    a_delivery_its_transform_skipped_is_filtered_and_never_handed_out,
    super::a_skipped_delivery_is_filtered
);

async fn filtered_entry_is_never_delivered(store: &dyn Store) {
    let e = routed("s", "evt_filtered", &[]);
    let received_at = e.received_at;
    let id = accept_new(store, e).await;
    let e = got(store, &id).await;
    assert_eq!(e.status, Status::Filtered);
    assert!(e.deliveries.is_empty());
    assert_eq!(
        (e.attempts, e.next_attempt_at, e.last_error),
        (0, None, None)
    );
    // Never claimable, through any route, whenever asked.
    let later = now_ms() + 3_600_000;
    for route in ["default", "a"] {
        assert!(claims(store, "s", route, "w", later).await.is_empty());
    }
    assert_eq!(store.count("s").await.unwrap(), 1);
    assert_eq!(store.count_status("s", Status::Filtered).await.unwrap(), 1);
    assert_eq!(store.count_status("s", Status::Pending).await.unwrap(), 0);
    assert_eq!(
        store.stats("s").await.unwrap(),
        SourceStats {
            received: 1,
            filtered: 1,
            ..Default::default()
        }
    );
    assert_eq!(
        store.route_stats("s", "default").await.unwrap(),
        RouteStats::default()
    );
    // Listed with its status, whether asked for it or not.
    let q = |status| ListQuery {
        source: Some("s".into()),
        status,
        limit: 10,
        ..Default::default()
    };
    for status in [None, Some(Status::Filtered)] {
        let page = store.list(&q(status)).await.unwrap();
        assert_eq!(page.entries.len(), 1, "{status:?}");
        assert_eq!(page.entries[0].id, id);
        assert_eq!(page.entries[0].status, Status::Filtered);
        assert_eq!(page.entries[0].received_at, received_at);
    }
    assert!(
        store
            .list(&q(Some(Status::Pending)))
            .await
            .unwrap()
            .entries
            .is_empty()
    );
    // Nothing to replay or discard, as a whole or through a route.
    let t = now_ms();
    assert_eq!(
        store.replay(&id, None, t, &"ops".into(), t).await.unwrap(),
        Transition::Conflict(Status::Filtered)
    );
    assert_eq!(
        store
            .discard(&id, None, &"ops".into(), "n", t)
            .await
            .unwrap(),
        Transition::Conflict(Status::Filtered)
    );
    assert_eq!(
        store
            .replay(&id, Some("default"), t, &"ops".into(), t)
            .await
            .unwrap(),
        Transition::NoSuchRoute
    );
    assert_eq!(
        store
            .discard(&id, Some("default"), &"ops".into(), "n", t)
            .await
            .unwrap(),
        Transition::NoSuchRoute
    );
    assert!(store.audit(&id).await.unwrap().is_empty());
    assert_eq!(got(store, &id).await.status, Status::Filtered);
}
for_each_fresh_store!(
    an_entry_no_route_selected_is_filtered_and_never_delivered,
    super::filtered_entry_is_never_delivered
);

// ---------------------------------------------------------------------------
// Claims and completions, per delivery.
// ---------------------------------------------------------------------------

/// The routes of one entry completed at the same time (each route has its own
/// workers, and on a shared store its own processes): the entry's status follows
/// them all, whatever order they land in. Twenty entries of three routes each, each
/// entry's three completions sent at once.
async fn concurrent_completions_of_one_entry(store: &dyn Store) {
    let names = ["a", "b", "c"];
    let mut ids = Vec::new();
    for n in 0..20 {
        ids.push(accept_new(store, routed("s", &format!("evt_cc_{n}"), &names)).await);
    }
    let at = now_ms();
    let mut by_route: Vec<Vec<Claim>> = Vec::new();
    for r in names {
        by_route.push(claims(store, "s", r, "w", at).await);
    }
    for id in &ids {
        let mine: Vec<&Claim> = by_route
            .iter()
            .map(|cs| cs.iter().find(|c| &c.entry.id == id).expect("claimed"))
            .collect();
        let done = futures_util::future::join_all(
            mine.iter()
                .map(|c| store.complete(c, "w", completion(c, Outcome::Delivered, at), at)),
        )
        .await;
        assert!(done.into_iter().all(|d| d.unwrap()), "{id}");
    }
    for id in &ids {
        assert_eq!(got(store, id).await.status, Status::Delivered, "{id}");
    }
    assert_eq!(store.count_status("s", Status::Pending).await.unwrap(), 0);
    assert_eq!(store.stats("s").await.unwrap().delivered, 20);
}
for_each_fresh_store!(
    an_entrys_routes_completed_at_once_leave_it_delivered,
    super::concurrent_completions_of_one_entry
);

async fn deliveries_are_claimed_independently(store: &dyn Store) {
    let id = accept_new(store, routed("s", "evt_ind", &["a", "b", "c"])).await;
    let t = now_ms();
    let a = claims(store, "s", "a", "w1", t).await;
    assert_eq!(a.len(), 1);
    assert_eq!(
        (a[0].entry.id.as_str(), a[0].delivery.route.as_str()),
        (id.as_str(), "a")
    );
    assert_eq!(
        a[0].entry.deliveries.len(),
        3,
        "the claim carries the whole entry"
    );
    // Leased through a: not again through a, but b and c are free.
    assert!(claims(store, "s", "a", "w2", t).await.is_empty());
    let b = claims(store, "s", "b", "w2", t).await;
    assert_eq!(b.len(), 1);
    assert_eq!(b[0].entry.id, id);
    assert_ne!(a[0].token, b[0].token);
    let c = claims(store, "s", "c", "w3", t).await;
    assert_eq!(c.len(), 1);

    // a delivered: the entry stays pending while b and c are.
    let done = completion(&a[0], Outcome::Delivered, t + 2);
    assert!(store.complete(&a[0], "w1", done, t + 2).await.unwrap());
    assert_eq!(
        statuses(store, &id).await,
        expect_statuses(&[
            ("a", Status::Delivered),
            ("b", Status::Pending),
            ("c", Status::Pending)
        ])
    );
    assert_eq!(got(store, &id).await.status, Status::Pending);
    assert_eq!(store.count_status("s", Status::Pending).await.unwrap(), 1);
    // b dead: still pending (c is).
    let dead = completion(&b[0], Outcome::Refused, t + 1);
    assert!(store.complete(&b[0], "w2", dead, t + 1).await.unwrap());
    assert_eq!(got(store, &id).await.status, Status::Pending);
    // c delivered: one dead delivery makes the entry dead.
    let done = completion(&c[0], Outcome::Delivered, t + 3);
    assert!(store.complete(&c[0], "w3", done, t + 3).await.unwrap());
    let e = got(store, &id).await;
    assert_eq!((e.status, e.attempts), (Status::Dead, 3));
    assert_eq!(e.next_attempt_at, None);
    assert_eq!(e.last_error.as_deref(), Some("refused"));
    for (route, attempts) in [("a", 1), ("b", 1), ("c", 1)] {
        assert_eq!(e.delivery(route).unwrap().attempts, attempts, "{route}");
    }
    // Every route's attempts, oldest first.
    assert_eq!(
        store.attempts(&id).await.unwrap(),
        vec![
            route_attempt("b", 1, t + 1, Some(400)),
            route_attempt("a", 1, t + 2, Some(200)),
            route_attempt("c", 1, t + 3, Some(200)),
        ]
    );
    assert_eq!(store.count_status("s", Status::Dead).await.unwrap(), 1);
    for route in ["a", "b", "c"] {
        assert!(
            claims(store, "s", route, "w", t + 3_600_000)
                .await
                .is_empty()
        );
    }

    // Every delivery delivered: the entry is delivered.
    let id2 = accept_new(store, routed("s", "evt_all", &["a", "b", "c"])).await;
    for route in ["c", "a", "b"] {
        settle(store, "s", &id2, route, Outcome::Delivered, now_ms()).await;
        let status = got(store, &id2).await.status;
        let want = if route == "b" {
            Status::Delivered
        } else {
            Status::Pending
        };
        assert_eq!(status, want, "after {route}");
    }
    assert_eq!(got(store, &id2).await.attempts, 3);
    assert_eq!(store.count_status("s", Status::Delivered).await.unwrap(), 1);
}
for_each_fresh_store!(
    deliveries_are_claimed_and_completed_independently,
    super::deliveries_are_claimed_independently
);

async fn attempts_of_every_route(store: &dyn Store) {
    // Route order b, a; attempts numbered per route; ties by route, then n.
    let id = accept_new(store, routed("s", "evt_att", &["b", "a"])).await;
    let t = now_ms();
    let a1 = claim_of(store, "s", "a", &id, "w", t).await;
    assert_eq!(a1.delivery.attempts, 0);
    assert!(
        store
            .complete(&a1, "w", completion(&a1, Outcome::RetryAt(t + 10), t), t)
            .await
            .unwrap()
    );
    let b1 = claim_of(store, "s", "b", &id, "w", t).await;
    assert!(
        store
            .complete(&b1, "w", completion(&b1, Outcome::Delivered, t), t)
            .await
            .unwrap()
    );
    let a2 = claim_of(store, "s", "a", &id, "w", t + 10).await;
    assert_eq!(a2.delivery.attempts, 1, "the route's own attempts");
    assert_eq!(a2.entry.attempts, 2, "every route's attempts");
    assert!(
        store
            .complete(&a2, "w", completion(&a2, Outcome::Delivered, t), t + 10)
            .await
            .unwrap()
    );
    let e = got(store, &id).await;
    assert_eq!((e.status, e.attempts), (Status::Delivered, 3));
    assert_eq!(
        (
            e.delivery("a").unwrap().attempts,
            e.delivery("b").unwrap().attempts
        ),
        (2, 1)
    );
    assert_eq!(
        store.attempts(&id).await.unwrap(),
        vec![
            route_attempt("a", 1, t, Some(503)),
            route_attempt("a", 2, t, Some(200)),
            route_attempt("b", 1, t, Some(200)),
        ]
    );
}
for_each_fresh_store!(
    attempts_of_every_route_come_oldest_first_numbered_per_route,
    super::attempts_of_every_route
);

async fn retry_through_one_route(store: &dyn Store) {
    let id = accept_new(store, routed("s", "evt_retry", &["a", "b"])).await;
    let b_before = delivery(store, &id, "b").await;
    let t = now_ms();
    let at = t + 60_000;
    let a = claim_of(store, "s", "a", &id, "w", t).await;
    assert!(
        store
            .complete(&a, "w", completion(&a, Outcome::RetryAt(at), t), t)
            .await
            .unwrap()
    );
    let d = delivery(store, &id, "a").await;
    assert_eq!((d.status, d.attempts), (Status::Pending, 1));
    assert_eq!(d.next_attempt_at, Some(at));
    assert_eq!(d.last_error.as_deref(), Some("HTTP 503"));
    // The other route is untouched, and still due now.
    assert_eq!(delivery(store, &id, "b").await, b_before);
    let e = got(store, &id).await;
    assert_eq!((e.status, e.attempts), (Status::Pending, 1));
    assert_eq!(e.last_error.as_deref(), Some("HTTP 503"));
    assert!(claims(store, "s", "a", "w", t + 10).await.is_empty());
    let b = claim_of(store, "s", "b", &id, "w", t + 10).await;
    assert_eq!(b.delivery.attempts, 0);
    // b dead: a (first in route order, not delivered) still names the last error.
    assert!(
        store
            .complete(&b, "w", completion(&b, Outcome::Refused, t + 10), t + 10)
            .await
            .unwrap()
    );
    let e = got(store, &id).await;
    assert_eq!(e.status, Status::Pending);
    assert_eq!(
        e.next_attempt_at,
        Some(at),
        "the pending delivery's next attempt"
    );
    assert_eq!(e.last_error.as_deref(), Some("HTTP 503"));
    // a is due at its time, not before.
    assert!(claims(store, "s", "a", "w", at - 1).await.is_empty());
    let a = claim_of(store, "s", "a", &id, "w", at).await;
    assert!(
        store
            .complete(&a, "w", completion(&a, Outcome::Delivered, at), at)
            .await
            .unwrap()
    );
    let e = got(store, &id).await;
    assert_eq!((e.status, e.attempts), (Status::Dead, 3));
    assert_eq!(e.last_error.as_deref(), Some("refused"), "a was delivered");
    assert_eq!(e.next_attempt_at, None);
}
for_each_fresh_store!(
    a_retry_through_one_route_leaves_the_others_alone,
    super::retry_through_one_route
);

async fn stale_completion_per_delivery(store: &dyn Store) {
    let id = accept_new(store, routed("s", "evt_stale", &["a", "b"])).await;
    let t = now_ms();
    let a1 = claim_of(store, "s", "a", &id, "w1", t).await;
    let b1 = claim_of(store, "s", "b", &id, "w1", t).await;
    // w1 stalls; its lease through a expires and w2 takes a.
    let a2 = wait_until_ok("w2 claims a again", DEADLINE, async || {
        let mut got = claims(store, "s", "a", "w2", now_ms()).await;
        match got.len() {
            1 => Ok(got.remove(0)),
            n => Err(format!("{n} claims")),
        }
    })
    .await;
    assert_ne!(a2.token, a1.token);
    let t = now_ms();
    assert!(
        !store
            .complete(&a1, "w1", completion(&a1, Outcome::Delivered, t), t)
            .await
            .unwrap(),
        "a stale lease completes nothing"
    );
    let d = delivery(store, &id, "a").await;
    assert_eq!((d.status, d.attempts), (Status::Pending, 0));
    assert!(store.attempts(&id).await.unwrap().is_empty());
    // A lease through a completes nothing through b, whose lease stays.
    let forged = Claim {
        token: a2.token.clone(),
        ..b1.clone()
    };
    assert!(
        !store
            .complete(&forged, "w2", completion(&b1, Outcome::Refused, t), t)
            .await
            .unwrap()
    );
    assert_eq!(delivery(store, &id, "b").await.status, Status::Pending);
    // b's lease ran out but nobody took b: its holder still completes it.
    assert!(
        store
            .complete(&b1, "w1", completion(&b1, Outcome::Delivered, t), t)
            .await
            .unwrap()
    );
    // The new holder of a completes it.
    assert!(
        store
            .complete(&a2, "w2", completion(&a2, Outcome::Delivered, t + 1), t + 1)
            .await
            .unwrap()
    );
    let e = got(store, &id).await;
    assert_eq!((e.status, e.attempts), (Status::Delivered, 2));
    assert_eq!(store.attempts(&id).await.unwrap().len(), 2);
}
for_each_fresh_store!(
    a_stale_completion_changes_nothing_per_delivery,
    super::stale_completion_per_delivery
);

async fn discard_during_an_attempt_per_delivery(store: &dyn Store) {
    let id = accept_new(store, routed("s", "evt_disc_run", &["a", "b"])).await;
    let t = now_ms();
    let a = claim_of(store, "s", "a", &id, "w", t).await;
    let b = claim_of(store, "s", "b", &id, "w", t).await;
    // Both attempts run when an operator discards the delivery through a.
    assert_eq!(
        store
            .discard(&id, Some("a"), &"ops".into(), "wrong", t + 1)
            .await
            .unwrap(),
        Transition::Done
    );
    assert_eq!(
        got(store, &id).await.status,
        Status::Pending,
        "b is pending"
    );
    assert!(
        !store
            .complete(&a, "w", completion(&a, Outcome::Delivered, t), t + 2)
            .await
            .unwrap()
    );
    let d = delivery(store, &id, "a").await;
    assert_eq!((d.status, d.attempts), (Status::Discarded, 1));
    assert_eq!(
        store.attempts(&id).await.unwrap(),
        vec![route_attempt("a", 1, t, Some(200))],
        "the attempt that ran is recorded"
    );
    // b's attempt is b's own.
    assert!(
        store
            .complete(&b, "w", completion(&b, Outcome::Delivered, t + 1), t + 2)
            .await
            .unwrap()
    );
    let e = got(store, &id).await;
    assert_eq!((e.status, e.attempts), (Status::Discarded, 2));
    assert_eq!(
        statuses(store, &id).await,
        expect_statuses(&[("a", Status::Discarded), ("b", Status::Delivered)])
    );
    for route in ["a", "b"] {
        assert!(
            claims(store, "s", route, "w", t + 3_600_000)
                .await
                .is_empty()
        );
    }
}
for_each_fresh_store!(
    an_attempt_through_a_discarded_route_is_recorded_and_stays_discarded,
    super::discard_during_an_attempt_per_delivery
);

/// The probe `worker` claims through `route` of `source` at `now`.
async fn probe(
    store: &dyn Store,
    source: &str,
    route: &str,
    worker: &str,
    now: i64,
) -> Option<Claim> {
    let got = store
        .claim_probe(source, route, worker, now, LEASE)
        .await
        .unwrap();
    if let Some(c) = &got {
        assert_eq!(c.delivery.route, route, "a probe through {route}");
        assert_eq!(c.entry.delivery(route), Some(&c.delivery));
    }
    got
}

async fn probes_are_per_route(store: &dyn Store) {
    let t = now_ms();
    let one = accept_new(store, routed_at("s", "evt_probe_1", &["a", "b"], t - 5_000)).await;
    let two = accept_new(
        store,
        routed_at("s", "evt_probe_2", &["a", "b"], t - 10_000),
    )
    .await;
    // One failed through a, two through b; both due again.
    for (id, route) in [(&one, "a"), (&two, "b")] {
        let c = claim_of(store, "s", route, id, "w0", t - 2_000).await;
        let retry = completion(&c, Outcome::RetryAt(t - 1_000), t - 2_000);
        assert!(store.complete(&c, "w0", retry, t - 2_000).await.unwrap());
    }
    // A paused route gives no probe; the other route's probe goes on.
    store.set_paused("s", Some("a"), true).await.unwrap();
    assert!(probe(store, "s", "a", "w1", t).await.is_none());
    let b = probe(store, "s", "b", "w1", t)
        .await
        .expect("a probe through b");
    assert_eq!(
        (b.entry.id.as_str(), b.delivery.attempts),
        (two.as_str(), 1)
    );
    store.set_paused("s", Some("a"), false).await.unwrap();
    // Each route's probe takes that route's retry, not a delivery that failed
    // through the other route.
    let a = probe(store, "s", "a", "w1", t)
        .await
        .expect("a probe through a");
    assert_eq!(
        (a.entry.id.as_str(), a.delivery.attempts),
        (one.as_str(), 1)
    );
    let a_new = probe(store, "s", "a", "w2", t)
        .await
        .expect("a second probe");
    assert_eq!(
        (a_new.entry.id.as_str(), a_new.delivery.attempts),
        (two.as_str(), 0)
    );
    let b_new = probe(store, "s", "b", "w2", t)
        .await
        .expect("a second probe");
    assert_eq!(
        (b_new.entry.id.as_str(), b_new.delivery.attempts),
        (one.as_str(), 0)
    );
    for route in ["a", "b"] {
        assert!(
            probe(store, "s", route, "w3", t).await.is_none(),
            "{route}: all leased"
        );
    }
    for c in [&a, &b, &a_new, &b_new] {
        let done = completion(c, Outcome::Delivered, t);
        assert!(store.complete(c, "w", done, t).await.unwrap());
    }
    for id in [&one, &two] {
        let e = got(store, id).await;
        assert_eq!((e.status, e.attempts), (Status::Delivered, 3), "{id}");
    }
}
for_each_fresh_store!(
    a_probe_takes_a_retry_of_its_own_route_only,
    super::probes_are_per_route
);

// ---------------------------------------------------------------------------
// Purge.
// ---------------------------------------------------------------------------

async fn purge_by_derived_status(store: &dyn Store) {
    let far = now_ms() + 3_600_000;
    // The filtered entry ends when it is accepted, about a minute before `t`.
    let filtered = accept_new(store, routed("s", "evt_f", &[])).await;
    let t = now_ms() + 60_000;
    // Ended through a and b at t, pending through c.
    let pending = accept_new(store, routed("s", "evt_p", &["a", "b", "c"])).await;
    settle(store, "s", &pending, "a", Outcome::Delivered, t).await;
    settle(store, "s", &pending, "b", Outcome::Refused, t).await;
    // Delivered through a at t, dead through b at t + 10 s: dead since t + 10 s.
    let dead = accept_new(store, routed("s", "evt_d", &["a", "b"])).await;
    settle(store, "s", &dead, "a", Outcome::Delivered, t).await;
    settle(store, "s", &dead, "b", Outcome::Refused, t + 10_000).await;
    assert_eq!(got(store, &dead).await.status, Status::Dead);
    // Delivered through both at t.
    let delivered = accept_new(store, routed("s", "evt_del", &["a", "b"])).await;
    settle(store, "s", &delivered, "a", Outcome::Delivered, t).await;
    settle(store, "s", &delivered, "b", Outcome::Delivered, t).await;

    // The dead cutoff reaches neither the filtered entry nor an entry dead since
    // after it (whose first delivery ended before it).
    let p = store.purge(far, 0, t + 5_000, 100).await.unwrap();
    assert_eq!(p.entries, 0, "{p:?}");
    // The delivered cutoff takes the filtered entry.
    let p = store.purge(far, t - 30_000, t + 5_000, 100).await.unwrap();
    assert_eq!(p.entries, 1, "{p:?}");
    assert!(store.get(&filtered).await.unwrap().is_none());
    // The dead one, with the dead cutoff past its end.
    let p = store.purge(far, 0, t + 20_000, 100).await.unwrap();
    assert_eq!(p.entries, 1, "{p:?}");
    assert!(store.get(&dead).await.unwrap().is_none());
    assert!(store.attempts(&dead).await.unwrap().is_empty());
    // Everything ended: the delivered one goes, the one pending through c stays.
    let p = store.purge(far, far, far, 100).await.unwrap();
    assert_eq!(p.entries, 1, "{p:?}");
    assert!(store.get(&delivered).await.unwrap().is_none());
    let e = got(store, &pending).await;
    assert_eq!(e.status, Status::Pending);
    assert_eq!(store.attempts(&pending).await.unwrap().len(), 2);
    assert_eq!(store.count("s").await.unwrap(), 1);
    assert_eq!(
        store.purge(far, far, far, 100).await.unwrap().entries,
        0,
        "an entry pending through one route is never purged"
    );
}
for_each_fresh_store!(
    purge_goes_by_the_entrys_derived_status,
    super::purge_by_derived_status
);
