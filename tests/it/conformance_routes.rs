//! The store conformance suite for routes: an entry is delivered through each of
//! its routes on its own (a delivery per route, with its own status, attempts,
//! budget, lease and dead letter), and claims, completions, replays, discards,
//! pauses, listings, statistics and retention follow each delivery. One
//! backend-agnostic function per behaviour, run against every backend, as in
//! `conformance` (whose helpers it shares).

use hookgate::clock::system_now_ms as now_ms;
use hookgate::store::{
    Attempt, AuditEvent, Claim, Completion, Control, Delivery, Entry, ListQuery, NewEntry,
    PauseTarget, RouteStats, SourceStats, Status, Store, Transition,
};

use crate::conformance::{
    DEADLINE, LEASE, accept_new, entry, entry_at, next, page_through, stored,
};
use crate::support::{Backend, StoreHandle, wait_until_ok};
use crate::{for_each_fresh_store, for_each_store};

// ---------------------------------------------------------------------------
// Helpers.
// ---------------------------------------------------------------------------

fn routes(names: &[&str]) -> Vec<String> {
    names.iter().map(|r| r.to_string()).collect()
}

/// A new entry of `source` with event id `key`, delivered through `names`.
fn routed(source: &str, key: &str, names: &[&str]) -> NewEntry {
    NewEntry {
        routes: routes(names),
        ordering: Vec::new(),
        ..entry(source, key)
    }
}

/// As [`routed`], received at `ms` (its id carrying that time).
fn routed_at(source: &str, key: &str, names: &[&str], ms: i64) -> NewEntry {
    NewEntry {
        routes: routes(names),
        ordering: Vec::new(),
        ..entry_at(source, key, ms, "x")
    }
}

fn attempt(route: &str, n: u32, at: i64, status_code: Option<u16>) -> Attempt {
    Attempt {
        route: route.to_string(),
        n,
        at,
        status_code,
        error: None,
        latency_ms: 9,
    }
}

/// What a worker makes of a claimed delivery in these tests.
#[derive(Debug, Clone, Copy)]
enum Outcome {
    /// Answered 200.
    Delivered,
    /// Answered 400: dead, "refused".
    Refused,
    /// Answered 503: retry at this time.
    RetryAt(i64),
}

/// The completion of `outcome` for the claim `c`, its attempt started at `at` and
/// numbered after the delivery's earlier ones.
fn completion(c: &Claim, outcome: Outcome, at: i64) -> Completion {
    let route = &c.delivery.route;
    let n = c.delivery.attempts + 1;
    match outcome {
        Outcome::Delivered => Completion::Delivered {
            attempt: attempt(route, n, at, Some(200)),
        },
        Outcome::Refused => Completion::Dead {
            attempt: Some(attempt(route, n, at, Some(400))),
            reason: "refused".into(),
        },
        Outcome::RetryAt(next) => Completion::Retry {
            attempt: attempt(route, n, at, Some(503)),
            at: next,
        },
    }
}

/// Every due delivery through `route` of `source` at `now` (up to 100).
async fn claims(
    store: &dyn Store,
    source: &str,
    route: &str,
    worker: &str,
    now: i64,
) -> Vec<Claim> {
    let got = store
        .claim(source, route, worker, now, 100, LEASE)
        .await
        .unwrap();
    for c in &got {
        assert_eq!(c.delivery.route, route, "a claim through {route}");
        assert_eq!(c.entry.source, source);
        assert_eq!(
            c.entry.delivery(route),
            Some(&c.delivery),
            "the claim's entry holds the claimed delivery as claimed"
        );
    }
    got
}

/// The ids of the entries a claim through `route` of `source` at `now` hands out
/// (the claims are given back untouched).
async fn claimable(store: &dyn Store, source: &str, route: &str, now: i64) -> Vec<String> {
    let mut ids = Vec::new();
    for c in claims(store, source, route, "probe", now).await {
        let at = c.delivery.next_attempt_at.unwrap_or(now);
        assert!(
            store
                .complete(&c, "probe", Completion::Release { at }, now)
                .await
                .unwrap()
        );
        ids.push(c.entry.id);
    }
    ids.sort();
    ids
}

/// Claim the delivery of `id` through `route` at `now`; every other delivery the
/// claim hands out is given back untouched (due when it was).
async fn claim_of(
    store: &dyn Store,
    source: &str,
    route: &str,
    id: &str,
    worker: &str,
    now: i64,
) -> Claim {
    let mut found = None;
    for c in claims(store, source, route, worker, now).await {
        if c.entry.id == id && found.is_none() {
            found = Some(c);
            continue;
        }
        let at = c.delivery.next_attempt_at.unwrap_or(now);
        assert!(
            store
                .complete(&c, worker, Completion::Release { at }, now)
                .await
                .unwrap()
        );
    }
    found.unwrap_or_else(|| panic!("{id} is not claimable through {route} at {now}"))
}

/// Claim the delivery of `id` through `route` and complete it with `outcome`,
/// attempted at `at` (claimed then, or now if later); the store applies it.
async fn settle(store: &dyn Store, source: &str, id: &str, route: &str, outcome: Outcome, at: i64) {
    let c = claim_of(store, source, route, id, "settle", now_ms().max(at)).await;
    let done = completion(&c, outcome, at);
    assert!(
        store.complete(&c, "settle", done, at).await.unwrap(),
        "{outcome:?} of {id} through {route}"
    );
}

/// The stored entry `id`, whose summary must be the one its deliveries make.
async fn got(store: &dyn Store, id: &str) -> Entry {
    let e = stored(store, id).await;
    assert_eq!(
        (
            e.status,
            e.attempts,
            e.next_attempt_at,
            e.last_error.clone()
        ),
        Entry::summary(&e.deliveries),
        "the entry's summary follows its deliveries: {e:?}"
    );
    e
}

/// The delivery of `id` through `route`, which must exist.
async fn delivery(store: &dyn Store, id: &str, route: &str) -> Delivery {
    got(store, id)
        .await
        .delivery(route)
        .cloned()
        .unwrap_or_else(|| panic!("{id} has no delivery through {route}"))
}

/// Each delivery's route and status, in route order.
async fn statuses(store: &dyn Store, id: &str) -> Vec<(String, Status)> {
    got(store, id)
        .await
        .deliveries
        .iter()
        .map(|d| (d.route.clone(), d.status))
        .collect()
}

fn expect_statuses(want: &[(&str, Status)]) -> Vec<(String, Status)> {
    want.iter().map(|(r, s)| (r.to_string(), *s)).collect()
}

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
            attempt("b", 1, t + 1, Some(400)),
            attempt("a", 1, t + 2, Some(200)),
            attempt("c", 1, t + 3, Some(200)),
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
            attempt("a", 1, t, Some(503)),
            attempt("a", 2, t, Some(200)),
            attempt("b", 1, t, Some(200)),
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
        vec![attempt("a", 1, t, Some(200))],
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

// ---------------------------------------------------------------------------
// Listings, statistics, retention.
// ---------------------------------------------------------------------------

async fn list_by_route(store: &dyn Store) {
    let base = now_ms() - 60_000;
    let at = |i: i64| base + 1_000 * i;
    let t = now_ms();
    // e1: a delivered, b pending (pending); e2: a pending; e3: b dead (dead);
    // e4: filtered; e5: a dead, b delivered (dead); e6: another source, a pending.
    let e1 = accept_new(store, routed_at("s", "e1", &["a", "b"], at(1))).await;
    let e2 = accept_new(store, routed_at("s", "e2", &["a"], at(2))).await;
    let e3 = accept_new(store, routed_at("s", "e3", &["b"], at(3))).await;
    let e4 = accept_new(store, routed_at("s", "e4", &[], at(4))).await;
    let e5 = accept_new(store, routed_at("s", "e5", &["a", "b"], at(5))).await;
    let e6 = accept_new(store, routed_at("t", "e6", &["a"], at(6))).await;
    settle(store, "s", &e1, "a", Outcome::Delivered, t).await;
    settle(store, "s", &e3, "b", Outcome::Refused, t).await;
    settle(store, "s", &e5, "a", Outcome::Refused, t).await;
    settle(store, "s", &e5, "b", Outcome::Delivered, t).await;

    let ids = |v: &[&String]| -> Vec<String> { v.iter().map(|s| s.to_string()).collect() };
    let q = |source: Option<&str>, route: Option<&str>, status: Option<Status>| ListQuery {
        source: source.map(str::to_string),
        route: route.map(str::to_string),
        status,
        limit: 1,
        ..Default::default()
    };
    let cases: Vec<(&str, ListQuery, Vec<String>)> = vec![
        (
            "route a of s",
            q(Some("s"), Some("a"), None),
            ids(&[&e5, &e2, &e1]),
        ),
        (
            "route a anywhere",
            q(None, Some("a"), None),
            ids(&[&e6, &e5, &e2, &e1]),
        ),
        (
            "route b of s",
            q(Some("s"), Some("b"), None),
            ids(&[&e5, &e3, &e1]),
        ),
        (
            "delivered through a, pending overall",
            q(Some("s"), Some("a"), Some(Status::Delivered)),
            ids(&[&e1]),
        ),
        (
            "pending through a",
            q(Some("s"), Some("a"), Some(Status::Pending)),
            ids(&[&e2]),
        ),
        (
            "dead through a",
            q(Some("s"), Some("a"), Some(Status::Dead)),
            ids(&[&e5]),
        ),
        (
            "pending through b",
            q(None, Some("b"), Some(Status::Pending)),
            ids(&[&e1]),
        ),
        (
            "delivered through b, dead overall",
            q(Some("s"), Some("b"), Some(Status::Delivered)),
            ids(&[&e5]),
        ),
        (
            "dead through b",
            q(Some("s"), Some("b"), Some(Status::Dead)),
            ids(&[&e3]),
        ),
        (
            "the entry's status without a route",
            q(Some("s"), None, Some(Status::Dead)),
            ids(&[&e5, &e3]),
        ),
        (
            "pending entries without a route",
            q(Some("s"), None, Some(Status::Pending)),
            ids(&[&e2, &e1]),
        ),
        (
            "filtered entries",
            q(None, None, Some(Status::Filtered)),
            ids(&[&e4]),
        ),
        (
            "filtered through a route",
            q(None, Some("a"), Some(Status::Filtered)),
            Vec::new(),
        ),
        ("a route nobody has", q(None, Some("c"), None), Vec::new()),
        (
            "route a of a source without it",
            q(Some("u"), Some("a"), None),
            Vec::new(),
        ),
    ];
    for (name, query, want) in cases {
        assert_eq!(page_through(store, &query).await, want, "{name}");
        let wide = ListQuery {
            limit: 100,
            ..query.clone()
        };
        assert_eq!(page_through(store, &wide).await, want, "{name}, one page");
    }
    // With the other filters.
    let since = ListQuery {
        since: Some(at(2)),
        until: Some(at(5)),
        ..q(Some("s"), Some("a"), None)
    };
    assert_eq!(page_through(store, &since).await, ids(&[&e2]));
}
for_each_fresh_store!(
    listings_by_route_filter_by_that_delivery,
    super::list_by_route
);

async fn route_stats_count_deliveries(store: &dyn Store) {
    let base = now_ms() - 60_000;
    let at = |i: i64| base + 1_000 * i;
    let t = now_ms();
    // e1: a delivered, b pending; e2: a dead, b discarded; e3: a pending;
    // e4: b pending; e5: filtered; another source: a pending.
    let e1 = accept_new(store, routed_at("s", "e1", &["a", "b"], at(1))).await;
    let e2 = accept_new(store, routed_at("s", "e2", &["a", "b"], at(2))).await;
    let e3 = accept_new(store, routed_at("s", "e3", &["a"], at(3))).await;
    accept_new(store, routed_at("s", "e4", &["b"], at(4))).await;
    accept_new(store, routed_at("s", "e5", &[], at(5))).await;
    accept_new(store, routed_at("t", "e6", &["a"], at(0))).await;
    settle(store, "s", &e1, "a", Outcome::Delivered, t).await;
    settle(store, "s", &e2, "a", Outcome::Refused, t).await;
    assert_eq!(
        store
            .discard(&e2, Some("b"), &"ops".into(), "n", t)
            .await
            .unwrap(),
        Transition::Done
    );
    assert_eq!(
        store.route_stats("s", "a").await.unwrap(),
        RouteStats {
            pending: 1,
            delivered: 1,
            dead: 1,
            discarded: 0,
            oldest_pending_at: Some(at(3)),
            blocked_keys: 0,
        }
    );
    assert_eq!(
        store.route_stats("s", "b").await.unwrap(),
        RouteStats {
            pending: 2,
            delivered: 0,
            dead: 0,
            discarded: 1,
            oldest_pending_at: Some(at(1)),
            blocked_keys: 0,
        }
    );
    assert_eq!(
        store.route_stats("t", "a").await.unwrap(),
        RouteStats {
            pending: 1,
            oldest_pending_at: Some(at(0)),
            ..Default::default()
        }
    );
    assert_eq!(
        store.route_stats("s", "c").await.unwrap(),
        RouteStats::default()
    );
    assert_eq!(
        store.route_stats("u", "a").await.unwrap(),
        RouteStats::default()
    );
    // The source's stats count entries, by their derived status.
    assert_eq!(
        store.stats("s").await.unwrap(),
        SourceStats {
            received: 5,
            pending: 3,
            dead: 1,
            filtered: 1,
            oldest_pending_at: Some(at(1)),
            ..Default::default()
        }
    );
    assert_eq!(store.count_status("s", Status::Discarded).await.unwrap(), 0);
    // e3 delivered: nothing pending through a.
    settle(store, "s", &e3, "a", Outcome::Delivered, t).await;
    let a = store.route_stats("s", "a").await.unwrap();
    assert_eq!((a.pending, a.delivered, a.oldest_pending_at), (0, 2, None));
}
for_each_fresh_store!(
    route_stats_count_each_routes_deliveries_by_status,
    super::route_stats_count_deliveries
);

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
