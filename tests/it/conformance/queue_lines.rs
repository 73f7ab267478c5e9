//! The `Queue` part of the store contract for ordered routes, on every backend: the
//! deliveries of one ordering key go one at a time, in arrival order, whatever
//! happens to them (retries, leases that run out, dead heads with `skip` or `block`,
//! replays, discards, a replay that puts a delivery back before the head); other
//! keys and unordered deliveries are not held back.

use hookgate::clock::system_now_ms as now_ms;
use hookgate::store::{
    Attempt, Claim, Completion, NewEntry, RouteOrder, SKIP_ACTOR, Store, Transition,
};

use super::{DEADLINE, LEASE, accept_new, discard_done, entry};
use crate::for_each_fresh_store;

const ROUTE: &str = "default";

/// A new entry of source `s` (event id `event`) whose ordering key is `key` (`None`:
/// unordered), `block`ing its line when dead.
fn keyed(event: &str, key: Option<&str>, block: bool) -> NewEntry {
    NewEntry {
        ordering: key
            .map(|k| RouteOrder {
                route: ROUTE.into(),
                key: k.into(),
                block,
            })
            .into_iter()
            .collect(),
        ..entry("s", event)
    }
}

/// Accept `n` entries of `key`, in order; their ids.
async fn line(store: &dyn Store, key: &str, n: usize, block: bool) -> Vec<String> {
    let mut ids = Vec::new();
    for i in 0..n {
        ids.push(accept_new(store, keyed(&format!("evt_{key}{i}"), Some(key), block)).await);
    }
    ids
}

fn attempt(c: &Claim, at: i64, status_code: u16) -> Attempt {
    Attempt {
        route: ROUTE.into(),
        n: c.delivery.attempts + 1,
        at,
        status_code: Some(status_code),
        failure: None,
        error: None,
        latency_ms: 3,
        answer: None,
    }
}

/// Every delivery a claim at `now` hands out, sorted by entry id.
async fn claim_all(store: &dyn Store, now: i64) -> Vec<Claim> {
    let mut got = store.claim("s", ROUTE, "w", now, 100, LEASE).await.unwrap();
    got.sort_by(|a, b| a.entry.id.cmp(&b.entry.id));
    got
}

fn ids(claims: &[Claim]) -> Vec<String> {
    claims.iter().map(|c| c.entry.id.clone()).collect()
}

async fn deliver(store: &dyn Store, c: &Claim, now: i64) {
    let done = Completion::Delivered {
        attempt: attempt(c, now, 200),
    };
    assert!(store.complete(c, "w", done, now).await.unwrap());
}

async fn kill(store: &dyn Store, c: &Claim, now: i64) {
    let done = Completion::Dead {
        attempt: Some(attempt(c, now, 400)),
        reason: "refused".into(),
    };
    assert!(store.complete(c, "w", done, now).await.unwrap());
}

/// Only the head of each key's line is handed out; other keys and unordered
/// deliveries go at once; each delivery lets the next of its key go.
async fn only_the_head_of_a_line_is_handed_out(store: &dyn Store) {
    let a = line(store, "a", 3, false).await;
    let b = line(store, "b", 2, false).await;
    let u = accept_new(store, keyed("evt_u", None, false)).await;
    let now = now_ms();
    let first = claim_all(store, now).await;
    let mut want = vec![a[0].clone(), b[0].clone(), u.clone()];
    want.sort();
    assert_eq!(
        ids(&first),
        want,
        "the heads of a and b, and the unordered one"
    );
    // Nothing more while the heads are in flight.
    assert!(claim_all(store, now).await.is_empty());
    for c in &first {
        assert_eq!(
            c.delivery.order.as_ref().map(|o| o.key.as_str()),
            if c.entry.id == u {
                None
            } else if a.contains(&c.entry.id) {
                Some("a")
            } else {
                Some("b")
            }
        );
        deliver(store, c, now).await;
    }
    let second = claim_all(store, now).await;
    assert_eq!(ids(&second), vec![a[1].clone(), b[1].clone()]);
    assert_eq!(
        store.order_line("s", ROUTE, "a").await.unwrap(),
        vec![a[1].clone(), a[2].clone()],
        "the line of a: its head in flight, then the rest"
    );
    for c in &second {
        deliver(store, c, now).await;
    }
    assert_eq!(ids(&claim_all(store, now).await), vec![a[2].clone()]);
}
for_each_fresh_store!(
    only_the_head_of_a_line_is_handed_out,
    super::only_the_head_of_a_line_is_handed_out
);

/// A head that is retrying holds its line: the ones behind it wait, without an
/// attempt, until it is delivered.
async fn a_retrying_head_holds_its_line(store: &dyn Store) {
    let a = line(store, "a", 2, false).await;
    let now = now_ms();
    let c = claim_all(store, now).await;
    assert_eq!(ids(&c), vec![a[0].clone()]);
    let later = now + 60_000;
    let retry = Completion::Retry {
        attempt: attempt(&c[0], now, 503),
        at: later,
    };
    assert!(store.complete(&c[0], "w", retry, now).await.unwrap());
    assert!(
        claim_all(store, now + 1).await.is_empty(),
        "the second waits behind the retrying head"
    );
    let again = claim_all(store, later).await;
    assert_eq!(ids(&again), vec![a[0].clone()], "the head goes again first");
    deliver(store, &again[0], later).await;
    let next = claim_all(store, later).await;
    assert_eq!(ids(&next), vec![a[1].clone()]);
    assert_eq!(next[0].delivery.attempts, 0, "it burnt no attempt waiting");
}
for_each_fresh_store!(
    a_retrying_head_holds_its_line,
    super::a_retrying_head_holds_its_line
);

/// A head whose lease ran out (its worker died) is handed out again, before the
/// rest of its line.
async fn a_reclaimed_head_stays_the_head(store: &dyn Store) {
    let a = line(store, "a", 2, false).await;
    let now = now_ms();
    let c = claim_all(store, now).await;
    assert_eq!(ids(&c), vec![a[0].clone()]);
    // Nothing until the lease runs out (the store decides when: Redis counts a
    // message's idle time from its own delivery of it); then the head, alone.
    let again = crate::support::wait_until_ok(
        "the head handed out again once its lease ran out",
        DEADLINE,
        async || {
            let got = claim_all(store, now_ms()).await;
            if got.is_empty() {
                Err("nothing yet".to_string())
            } else {
                Ok(got)
            }
        },
    )
    .await;
    assert_eq!(ids(&again), vec![a[0].clone()], "the reclaimed head, alone");
    // The first worker's late completion changes nothing.
    let stale = Completion::Delivered {
        attempt: attempt(&c[0], now, 200),
    };
    assert!(!store.complete(&c[0], "w", stale, now_ms()).await.unwrap());
    assert!(claim_all(store, now_ms()).await.is_empty());
    deliver(store, &again[0], now_ms()).await;
    assert_eq!(ids(&claim_all(store, now_ms()).await), vec![a[1].clone()]);
}
for_each_fresh_store!(
    a_reclaimed_head_stays_the_head,
    super::a_reclaimed_head_stays_the_head
);

/// With `skip` (the default), a dead head lets the next go, and its audit trail
/// says so.
async fn a_dead_head_is_skipped_and_says_so(store: &dyn Store) {
    let a = line(store, "a", 2, false).await;
    let now = now_ms();
    let c = claim_all(store, now).await;
    kill(store, &c[0], now).await;
    assert_eq!(ids(&claim_all(store, now).await), vec![a[1].clone()]);
    let trail = store.audit(&a[0]).await.unwrap();
    assert!(
        trail.iter().any(|e| e.action == "skip"
            && e.actor == SKIP_ACTOR
            && e.route.as_deref() == Some(ROUTE)),
        "{trail:?}"
    );
    assert_eq!(store.route_stats("s", ROUTE).await.unwrap().blocked_keys, 0);
}
for_each_fresh_store!(
    a_dead_head_is_skipped_and_says_so,
    super::a_dead_head_is_skipped_and_says_so
);

/// With `block`, a dead head holds its key (counted as blocked) until it is
/// replayed, and then goes first; other keys go on meanwhile.
async fn a_blocking_dead_head_waits_for_a_replay(store: &dyn Store) {
    let a = line(store, "a", 2, true).await;
    let b = line(store, "b", 1, true).await;
    let now = now_ms();
    let c = claim_all(store, now).await;
    assert_eq!(ids(&c), vec![a[0].clone(), b[0].clone()]);
    kill(store, &c[0], now).await;
    deliver(store, &c[1], now).await;
    assert!(claim_all(store, now).await.is_empty(), "a is blocked");
    assert_eq!(store.route_stats("s", ROUTE).await.unwrap().blocked_keys, 1);
    assert_eq!(
        store.order_line("s", ROUTE, "a").await.unwrap(),
        a,
        "the dead head, then the one it holds back"
    );
    assert!(
        store
            .audit(&a[0])
            .await
            .unwrap()
            .iter()
            .all(|e| e.action != "skip")
    );
    assert_eq!(
        store
            .replay(&a[0], Some(ROUTE), now, &"op".into(), now)
            .await
            .unwrap(),
        Transition::Done
    );
    assert_eq!(store.route_stats("s", ROUTE).await.unwrap().blocked_keys, 0);
    let again = claim_all(store, now).await;
    assert_eq!(ids(&again), vec![a[0].clone()], "the replayed head first");
    deliver(store, &again[0], now).await;
    assert_eq!(ids(&claim_all(store, now).await), vec![a[1].clone()]);
}
for_each_fresh_store!(
    a_blocking_dead_head_waits_for_a_replay,
    super::a_blocking_dead_head_waits_for_a_replay
);

/// With `block`, discarding the dead head lets its line go on.
async fn discarding_a_blocking_dead_head_lets_its_line_go(store: &dyn Store) {
    let a = line(store, "a", 2, true).await;
    let now = now_ms();
    let c = claim_all(store, now).await;
    kill(store, &c[0], now).await;
    assert!(claim_all(store, now).await.is_empty());
    assert_eq!(
        store
            .discard(&a[0], Some(ROUTE), &"op".into(), "known bad", now)
            .await
            .unwrap(),
        Transition::Done
    );
    assert_eq!(store.route_stats("s", ROUTE).await.unwrap().blocked_keys, 0);
    assert_eq!(ids(&claim_all(store, now).await), vec![a[1].clone()]);
}
for_each_fresh_store!(
    discarding_a_blocking_dead_head_lets_its_line_go,
    super::discarding_a_blocking_dead_head_lets_its_line_go
);

/// A delivered entry replayed while a later one of its key is in flight waits for
/// it, then goes before the rest of the line (its place is its arrival).
async fn a_replay_takes_its_place_in_the_line(store: &dyn Store) {
    let a = line(store, "a", 3, false).await;
    let now = now_ms();
    let first = claim_all(store, now).await;
    deliver(store, &first[0], now).await;
    let second = claim_all(store, now).await;
    assert_eq!(ids(&second), vec![a[1].clone()]);
    assert_eq!(
        store
            .replay(&a[0], None, now, &"op".into(), now)
            .await
            .unwrap(),
        Transition::Done
    );
    assert!(
        claim_all(store, now).await.is_empty(),
        "the replayed one waits for the one in flight"
    );
    assert_eq!(
        store.order_line("s", ROUTE, "a").await.unwrap(),
        a,
        "back in its place, before the ones that arrived after it"
    );
    deliver(store, &second[0], now).await;
    let third = claim_all(store, now).await;
    assert_eq!(
        ids(&third),
        vec![a[0].clone()],
        "the replayed one goes next"
    );
    deliver(store, &third[0], now).await;
    assert_eq!(ids(&claim_all(store, now).await), vec![a[2].clone()]);
}
for_each_fresh_store!(
    a_replay_takes_its_place_in_the_line,
    super::a_replay_takes_its_place_in_the_line
);

/// A delivery discarded while its attempt is in flight holds its line until the
/// attempt is recorded.
async fn a_discard_in_flight_holds_the_line_until_the_attempt_ends(store: &dyn Store) {
    let a = line(store, "a", 2, false).await;
    let now = now_ms();
    let c = claim_all(store, now).await;
    assert_eq!(
        store
            .discard(&a[0], Some(ROUTE), &"op".into(), "stop it", now)
            .await
            .unwrap(),
        Transition::Done
    );
    assert!(
        claim_all(store, now).await.is_empty(),
        "the next waits for the attempt in flight"
    );
    let done = Completion::Delivered {
        attempt: attempt(&c[0], now, 200),
    };
    assert!(!store.complete(&c[0], "w", done, now).await.unwrap());
    assert_eq!(ids(&claim_all(store, now).await), vec![a[1].clone()]);
}
for_each_fresh_store!(
    a_discard_in_flight_holds_the_line_until_the_attempt_ends,
    super::a_discard_in_flight_holds_the_line_until_the_attempt_ends
);

/// The only delivery of the line a claim at `now` hands out, which must be `want`.
async fn only_head(store: &dyn Store, now: i64, want: &str) -> Claim {
    let mut got = claim_all(store, now).await;
    assert_eq!(ids(&got), vec![want.to_string()], "the head alone");
    got.remove(0)
}

async fn blocked(store: &dyn Store) -> u64 {
    store.route_stats("s", ROUTE).await.unwrap().blocked_keys
}

/// A replayed delivery goes before a later one that became the head meanwhile and
/// is not in flight: a dead head with `skip` let the next go, and the replay of the
/// dead one puts it back first.
async fn a_replay_goes_before_a_later_head_not_in_flight(store: &dyn Store) {
    let a = line(store, "a", 2, false).await;
    let now = now_ms();
    let c = only_head(store, now, &a[0]).await;
    kill(store, &c, now).await;
    assert_eq!(
        store
            .replay(&a[0], Some(ROUTE), now, &"op".into(), now)
            .await
            .unwrap(),
        Transition::Done
    );
    assert_eq!(store.order_line("s", ROUTE, "a").await.unwrap(), a);
    let again = only_head(store, now, &a[0]).await;
    deliver(store, &again, now).await;
    only_head(store, now, &a[1]).await;
}
for_each_fresh_store!(
    a_replay_goes_before_a_later_head_not_in_flight,
    super::a_replay_goes_before_a_later_head_not_in_flight
);

/// With `block`, a replay of a delivery that arrived before the dead head goes
/// first, and the key is not blocked while it does: a dead delivery blocks its key
/// only as the line's head. It blocks again once the replayed one is delivered.
async fn a_replay_before_a_blocking_dead_head_unblocks_until_it_is_the_head_again(
    store: &dyn Store,
) {
    let a = line(store, "a", 2, true).await;
    let now = now_ms();
    let first = only_head(store, now, &a[0]).await;
    deliver(store, &first, now).await;
    let second = only_head(store, now, &a[1]).await;
    kill(store, &second, now).await;
    assert_eq!(blocked(store).await, 1);
    assert_eq!(
        store
            .replay(&a[0], None, now, &"op".into(), now)
            .await
            .unwrap(),
        Transition::Done
    );
    assert_eq!(blocked(store).await, 0, "the line's head is pending");
    assert_eq!(store.order_line("s", ROUTE, "a").await.unwrap(), a);
    let again = only_head(store, now, &a[0]).await;
    deliver(store, &again, now).await;
    assert_eq!(blocked(store).await, 1, "the dead one is the head again");
    assert!(claim_all(store, now).await.is_empty());
    assert_eq!(
        store.order_line("s", ROUTE, "a").await.unwrap(),
        vec![a[1].clone()]
    );
}
for_each_fresh_store!(
    a_replay_before_a_blocking_dead_head_unblocks_its_key_until_it_is_the_head_again,
    super::a_replay_before_a_blocking_dead_head_unblocks_until_it_is_the_head_again
);

/// Two deliveries of key `key` (`block`ing when dead): the first delivered, the
/// second claimed, and the first replayed while the second is in flight. The ids,
/// the claim of the second, and the time of it all.
async fn replayed_behind_a_head_in_flight(
    store: &dyn Store,
    key: &str,
    block: bool,
) -> (Vec<String>, Claim, i64) {
    let a = line(store, key, 2, block).await;
    let now = now_ms();
    let first = only_head(store, now, &a[0]).await;
    deliver(store, &first, now).await;
    let second = only_head(store, now, &a[1]).await;
    assert_eq!(
        store
            .replay(&a[0], None, now, &"op".into(), now)
            .await
            .unwrap(),
        Transition::Done
    );
    assert!(
        claim_all(store, now).await.is_empty(),
        "the replayed one waits for the one in flight"
    );
    assert_eq!(store.order_line("s", ROUTE, key).await.unwrap(), a);
    (a, second, now)
}

/// A replayed delivery waiting behind a head in flight goes first once that head's
/// attempt ends in a retry: the head waits behind it, retrying when its turn comes.
async fn a_replay_goes_before_a_head_that_retries(store: &dyn Store) {
    let (a, second, now) = replayed_behind_a_head_in_flight(store, "a", false).await;
    let retry = Completion::Retry {
        attempt: attempt(&second, now, 503),
        at: now,
    };
    assert!(store.complete(&second, "w", retry, now).await.unwrap());
    let replayed = only_head(store, now, &a[0]).await;
    deliver(store, &replayed, now).await;
    let retried = only_head(store, now, &a[1]).await;
    assert_eq!(retried.delivery.attempts, 1);
}
for_each_fresh_store!(
    a_replay_goes_before_a_head_that_retries,
    super::a_replay_goes_before_a_head_that_retries
);

/// With `block`, a head in flight that dies behind a replayed delivery that arrived
/// before it blocks nothing while that one goes first; it blocks its key once it is
/// the head again.
async fn a_replay_goes_before_a_head_that_dies(store: &dyn Store) {
    let (a, second, now) = replayed_behind_a_head_in_flight(store, "a", true).await;
    kill(store, &second, now).await;
    assert_eq!(blocked(store).await, 0, "the line's head is pending");
    let replayed = only_head(store, now, &a[0]).await;
    deliver(store, &replayed, now).await;
    assert_eq!(blocked(store).await, 1);
    assert!(claim_all(store, now).await.is_empty());
}
for_each_fresh_store!(
    a_replay_goes_before_a_head_that_dies,
    super::a_replay_goes_before_a_head_that_dies
);

/// A replayed delivery waiting behind a head in flight goes first once that head's
/// lease runs out (its worker died): the first claim that hands anything out hands
/// out the replayed one, alone.
async fn a_replay_goes_before_an_abandoned_head(store: &dyn Store) {
    let (a, gone, _) = replayed_behind_a_head_in_flight(store, "a", false).await;
    drop(gone);
    let again = crate::support::wait_until_ok(
        "a claim once the head's lease ran out",
        DEADLINE,
        async || {
            let got = claim_all(store, now_ms()).await;
            match got.is_empty() {
                true => Err("nothing yet".to_string()),
                false => Ok(got),
            }
        },
    )
    .await;
    assert_eq!(ids(&again), vec![a[0].clone()], "the replayed one, alone");
    deliver(store, &again[0], now_ms()).await;
    let last = only_head(store, now_ms(), &a[1]).await;
    assert_eq!(last.delivery.attempts, 0);
}
for_each_fresh_store!(
    a_replay_goes_before_an_abandoned_head,
    super::a_replay_goes_before_an_abandoned_head
);

/// A replay at a time past the head's lease puts the replayed delivery first at
/// once: the head is no longer in flight. Its worker's late completion still counts
/// (no other claim took the delivery since), and the line goes on.
async fn a_replay_goes_before_a_head_whose_lease_ran_out(store: &dyn Store) {
    let a = line(store, "a", 2, false).await;
    let now = now_ms();
    let first = only_head(store, now, &a[0]).await;
    deliver(store, &first, now).await;
    let late = only_head(store, now, &a[1]).await;
    let after = now + i64::try_from(LEASE.as_millis()).unwrap() + 1;
    assert_eq!(
        store
            .replay(&a[0], None, after, &"op".into(), after)
            .await
            .unwrap(),
        Transition::Done
    );
    let replayed = only_head(store, after, &a[0]).await;
    deliver(store, &late, after).await;
    deliver(store, &replayed, after).await;
    assert!(claim_all(store, after).await.is_empty());
    assert!(store.order_line("s", ROUTE, "a").await.unwrap().is_empty());
}
for_each_fresh_store!(
    a_replay_goes_before_a_head_whose_lease_ran_out,
    super::a_replay_goes_before_a_head_whose_lease_ran_out
);

/// A head discarded once its lease ran out lets its line go at once; its worker's
/// late completion records the attempt and changes nothing else.
async fn discarding_a_head_whose_lease_ran_out_lets_its_line_go(store: &dyn Store) {
    let a = line(store, "a", 2, false).await;
    let now = now_ms();
    let late = only_head(store, now, &a[0]).await;
    let after = now + i64::try_from(LEASE.as_millis()).unwrap() + 1;
    discard_done(store, &a[0], after).await;
    let next = only_head(store, after, &a[1]).await;
    let done = Completion::Delivered {
        attempt: attempt(&late, after, 200),
    };
    assert!(!store.complete(&late, "w", done, after).await.unwrap());
    deliver(store, &next, after).await;
    assert!(claim_all(store, after).await.is_empty());
}
for_each_fresh_store!(
    discarding_a_head_whose_lease_ran_out_lets_its_line_go,
    super::discarding_a_head_whose_lease_ran_out_lets_its_line_go
);

/// A head its route's transform skipped (`filtered`) leaves its line as a delivered
/// one does: the next of its key goes.
async fn a_skipped_head_lets_its_line_go(store: &dyn Store) {
    let a = line(store, "a", 2, true).await;
    let now = now_ms();
    let first = claim_all(store, now).await;
    assert_eq!(ids(&first), vec![a[0].clone()]);
    let skip = Completion::Filtered {
        reason: "transform: empty".into(),
    };
    assert!(store.complete(&first[0], "w", skip, now).await.unwrap());
    assert_eq!(ids(&claim_all(store, now).await), vec![a[1].clone()]);
    assert_eq!(
        store.order_line("s", ROUTE, "a").await.unwrap(),
        vec![a[1].clone()]
    );
}
for_each_fresh_store!(
    a_skipped_head_lets_its_line_go,
    super::a_skipped_head_lets_its_line_go
);
