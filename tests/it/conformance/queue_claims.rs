//! The `Queue` part of the store contract, on every backend: claims, the leases they
//! hold, and completions (delivered, retried, dead, released, stale, repeated), and
//! the probes of a half-open breaker.

use hookgate::clock::system_now_ms as now_ms;
use hookgate::store::{Claim, Completion, Status, Store, Transition};

use super::{
    DEADLINE, LEASE, accept_new, attempt, claim_at, claim_one, claim_when_due, delivered_at,
    discard_done, entry, entry_at, status_of, stored,
};
use crate::for_each_fresh_store;
use crate::support::first_page_with_status;

/// A new entry of `s` with event id `key`, claimed by `w1` at once: its id, the time
/// of the claim, and the claim.
async fn accepted_and_claimed(store: &dyn Store, key: &str) -> (String, i64, Claim) {
    let id = accept_new(store, entry("s", key)).await;
    let t = now_ms();
    let c = claim_one(store, "s", "w1", t).await;
    (id, t, c)
}

// ---------------------------------------------------------------------------
// Claims and completions.
// ---------------------------------------------------------------------------

async fn delivered_completion_ends_the_entry(store: &dyn Store) {
    let (id, t, c) = accepted_and_claimed(store, "evt_d").await;
    assert_eq!(c.entry.id, id);
    assert_eq!(c.entry.status, Status::Pending);
    assert_eq!(c.entry.attempts, 0);
    // Leased: nobody else claims it meanwhile.
    assert!(claim_at(store, "s", "w2", t).await.is_empty());
    assert!(
        store
            .complete(&c, "w1", delivered_at(t), t + 5)
            .await
            .unwrap()
    );
    let e = stored(store, &id).await;
    assert_eq!(e.status, Status::Delivered);
    assert_eq!(e.attempts, 1);
    assert_eq!(e.next_attempt_at, None);
    assert_eq!(
        store.attempts(&id).await.unwrap(),
        vec![attempt(1, t, Some(200))]
    );
    // Never handed out again, whenever asked.
    assert!(claim_at(store, "s", "w2", t + 3_600_000).await.is_empty());
    assert_eq!(store.count_status("s", Status::Delivered).await.unwrap(), 1);
    assert_eq!(store.count_status("s", Status::Pending).await.unwrap(), 0);
}
for_each_fresh_store!(
    a_delivered_completion_ends_the_entry,
    super::delivered_completion_ends_the_entry
);

/// A queue destination's answer (no HTTP status) is kept with its attempt, and an
/// attempt without one reads back without one.
async fn a_brokers_answer_is_kept_with_its_attempt(store: &dyn Store) {
    let (id, t, c) = accepted_and_claimed(store, "k-answer").await;
    let mut published = attempt(1, t, None);
    published.answer = Some("stream HOOKS seq 7 (duplicate)".into());
    let done = Completion::Delivered {
        attempt: published.clone(),
    };
    assert!(store.complete(&c, "w1", done, t + 5).await.unwrap());
    assert_eq!(stored(store, &id).await.status, Status::Delivered);
    assert_eq!(store.attempts(&id).await.unwrap(), vec![published]);
    let (other, t, c) = accepted_and_claimed(store, "k-plain").await;
    assert!(
        store
            .complete(&c, "w1", delivered_at(t), t + 5)
            .await
            .unwrap()
    );
    assert_eq!(store.attempts(&other).await.unwrap()[0].answer, None);
}
for_each_fresh_store!(
    a_brokers_answer_is_kept_with_its_attempt,
    super::a_brokers_answer_is_kept_with_its_attempt
);

async fn claims_hand_out_each_entry_once(store: &dyn Store) {
    let mut ids = Vec::new();
    for key in ["a", "b", "c"] {
        ids.push(accept_new(store, entry("s", key)).await);
    }
    let t = now_ms();
    let first = store
        .claim("s", "default", "w1", t, 2, LEASE)
        .await
        .unwrap();
    assert_eq!(first.len(), 2, "the limit holds");
    let second = store
        .claim("s", "default", "w2", t, 2, LEASE)
        .await
        .unwrap();
    assert_eq!(second.len(), 1, "only what nobody holds");
    assert!(
        store
            .claim("s", "default", "w3", t, 2, LEASE)
            .await
            .unwrap()
            .is_empty()
    );
    let mut claimed: Vec<String> = first
        .iter()
        .chain(&second)
        .map(|c| c.entry.id.clone())
        .collect();
    claimed.sort();
    ids.sort();
    assert_eq!(claimed, ids, "each entry once");
    let mut tokens: Vec<&str> = first
        .iter()
        .chain(&second)
        .map(|c| c.token.as_str())
        .collect();
    tokens.sort();
    tokens.dedup();
    assert_eq!(tokens.len(), 3, "a token per claim");
    // Claims are per source.
    assert!(
        store
            .claim("t", "default", "w1", t, 2, LEASE)
            .await
            .unwrap()
            .is_empty()
    );
}
for_each_fresh_store!(
    claims_hand_out_each_due_entry_once_up_to_the_limit,
    super::claims_hand_out_each_entry_once
);

async fn retry_is_due_again_at_its_time(store: &dyn Store) {
    let (id, t, c) = accepted_and_claimed(store, "evt_r").await;
    let at = t + 60_000;
    let retry = Completion::Retry {
        attempt: attempt(1, t, Some(503)),
        at,
    };
    assert!(store.complete(&c, "w1", retry, t + 5).await.unwrap());
    let e = stored(store, &id).await;
    assert_eq!(e.status, Status::Pending);
    assert_eq!(e.attempts, 1);
    assert_eq!(e.next_attempt_at, Some(at));
    assert_eq!(e.last_error.as_deref(), Some("HTTP 503"));
    // Not before `at`, from `at` on.
    assert!(claim_at(store, "s", "w1", t + 10).await.is_empty());
    assert!(claim_at(store, "s", "w1", at - 1).await.is_empty());
    let again = claim_one(store, "s", "w2", at).await;
    assert_eq!(again.entry.id, id);
    assert_eq!(again.entry.attempts, 1);
    let done = Completion::Delivered {
        attempt: attempt(2, at, Some(200)),
    };
    assert!(store.complete(&again, "w2", done, at + 5).await.unwrap());
    let e = stored(store, &id).await;
    assert_eq!(e.status, Status::Delivered);
    assert_eq!(e.attempts, 2);
}
for_each_fresh_store!(
    a_retry_is_due_again_at_its_time_and_not_before,
    super::retry_is_due_again_at_its_time
);

async fn dead_completion_lists_the_entry_as_dead(store: &dyn Store) {
    let (id, t, c) = accepted_and_claimed(store, "evt_dead").await;
    let dead = Completion::Dead {
        attempt: Some(attempt(1, t, Some(410))),
        reason: "HTTP 410: gone for good".into(),
    };
    assert!(store.complete(&c, "w1", dead, t + 5).await.unwrap());
    let e = stored(store, &id).await;
    assert_eq!(e.status, Status::Dead);
    assert_eq!(e.attempts, 1);
    assert_eq!(e.next_attempt_at, None);
    assert_eq!(e.last_error.as_deref(), Some("HTTP 410: gone for good"));
    let listed = first_page_with_status(store, Status::Dead, 10).await;
    assert_eq!(listed.entries, vec![e.listed()]);
    let st = store.stats("s").await.unwrap();
    assert_eq!((st.dead, st.pending, st.delivered), (1, 0, 0));
    assert!(claim_at(store, "s", "w1", t + 3_600_000).await.is_empty());

    // Dead without an attempt (refused before any was made) records none.
    let (id2, t, c) = accepted_and_claimed(store, "evt_dead2").await;
    let dead = Completion::Dead {
        attempt: None,
        reason: "no route".into(),
    };
    assert!(store.complete(&c, "w1", dead, t).await.unwrap());
    let e = stored(store, &id2).await;
    assert_eq!((e.status, e.attempts), (Status::Dead, 0));
    assert!(store.attempts(&id2).await.unwrap().is_empty());
    assert_eq!(store.stats("s").await.unwrap().dead, 2);
}
for_each_fresh_store!(
    a_dead_completion_lists_the_entry_as_dead,
    super::dead_completion_lists_the_entry_as_dead
);

async fn release_records_no_attempt(store: &dyn Store) {
    let (id, t, c) = accepted_and_claimed(store, "evt_rel").await;
    let at = t + 1_000;
    assert!(
        store
            .complete(&c, "w1", Completion::Release { at }, t)
            .await
            .unwrap()
    );
    let e = stored(store, &id).await;
    assert_eq!(e.status, Status::Pending);
    assert_eq!(e.attempts, 0);
    assert_eq!(e.next_attempt_at, Some(at));
    assert!(store.attempts(&id).await.unwrap().is_empty());
    assert!(claim_at(store, "s", "w1", at - 1).await.is_empty());
    let again = claim_one(store, "s", "w2", at).await;
    assert_eq!(
        (again.entry.id.as_str(), again.entry.attempts),
        (id.as_str(), 0)
    );
}
for_each_fresh_store!(
    a_release_records_no_attempt_and_is_due_again,
    super::release_records_no_attempt
);

async fn stale_completion_changes_nothing(store: &dyn Store) {
    let (id, _, first) = accepted_and_claimed(store, "evt_stale").await;
    // w1 stalls; its lease expires and w2 takes the entry.
    let second = claim_when_due(store, "s", "w2").await;
    assert_eq!(second.entry.id, id);
    assert_ne!(second.token, first.token);
    let t = now_ms();
    for late in [
        delivered_at(t),
        Completion::Dead {
            attempt: Some(attempt(1, t, Some(400))),
            reason: "late".into(),
        },
        Completion::Retry {
            attempt: attempt(1, t, Some(500)),
            at: t + 1,
        },
        Completion::Release { at: t + 1 },
    ] {
        assert!(!store.complete(&first, "w1", late, t).await.unwrap());
        let e = stored(store, &id).await;
        assert_eq!((e.status, e.attempts), (Status::Pending, 0));
        assert!(store.attempts(&id).await.unwrap().is_empty());
    }
    // The new holder's lease is intact.
    assert!(
        store
            .complete(&second, "w2", delivered_at(t), t + 5)
            .await
            .unwrap()
    );
    let e = stored(store, &id).await;
    assert_eq!((e.status, e.attempts), (Status::Delivered, 1));
    assert_eq!(store.attempts(&id).await.unwrap().len(), 1);
}
for_each_fresh_store!(
    a_stale_completion_changes_nothing_for_the_new_holder,
    super::stale_completion_changes_nothing
);

async fn abandoned_lease_is_claimed_again(store: &dyn Store) {
    // w1 claims and dies: it never completes.
    let (id, _, gone) = accepted_and_claimed(store, "evt_dies").await;
    drop(gone);
    let c = claim_when_due(store, "s", "w2").await;
    assert_eq!((c.entry.id.as_str(), c.entry.attempts), (id.as_str(), 0));
    let t = now_ms();
    let done = Completion::Delivered {
        attempt: attempt(1, t, Some(204)),
    };
    assert!(store.complete(&c, "w2", done, t).await.unwrap());
    assert_eq!(status_of(store, &id).await, Status::Delivered);
}
for_each_fresh_store!(
    an_abandoned_lease_is_claimed_again_and_delivered,
    super::abandoned_lease_is_claimed_again
);

async fn repeated_completion_records_nothing_more(store: &dyn Store) {
    // Delivered, then the same call again (its reply was lost).
    let (id, t, c) = accepted_and_claimed(store, "evt_twice").await;
    assert!(store.complete(&c, "w1", delivered_at(t), t).await.unwrap());
    assert!(
        !store
            .complete(&c, "w1", delivered_at(t), t + 1)
            .await
            .unwrap()
    );
    let e = stored(store, &id).await;
    assert_eq!((e.status, e.attempts), (Status::Delivered, 1));
    assert_eq!(store.attempts(&id).await.unwrap().len(), 1);

    // A retry, repeated: still one attempt, still due at its time, once.
    let (id, t, c) = accepted_and_claimed(store, "evt_twice_retry").await;
    let at = t + 60_000;
    let retry = || Completion::Retry {
        attempt: attempt(1, t, None),
        at,
    };
    assert!(store.complete(&c, "w1", retry(), t).await.unwrap());
    assert!(!store.complete(&c, "w1", retry(), t + 1).await.unwrap());
    let e = stored(store, &id).await;
    assert_eq!((e.status, e.attempts), (Status::Pending, 1));
    assert_eq!(e.next_attempt_at, Some(at));
    assert_eq!(store.attempts(&id).await.unwrap().len(), 1);
    assert!(claim_at(store, "s", "w1", at - 1).await.is_empty());
    let again = claim_one(store, "s", "w1", at).await;
    assert_eq!(again.entry.id, id);

    // Dead, repeated: dead once.
    let t = now_ms().max(at);
    let dead = || Completion::Dead {
        attempt: Some(attempt(2, t, Some(400))),
        reason: "refused".into(),
    };
    assert!(store.complete(&again, "w1", dead(), t).await.unwrap());
    assert!(!store.complete(&again, "w1", dead(), t + 1).await.unwrap());
    let e = stored(store, &id).await;
    assert_eq!((e.status, e.attempts), (Status::Dead, 2));
    assert_eq!(store.attempts(&id).await.unwrap().len(), 2);
    assert_eq!(store.stats("s").await.unwrap().dead, 1);
}
for_each_fresh_store!(
    a_repeated_completion_records_nothing_more,
    super::repeated_completion_records_nothing_more
);

async fn attempt_while_discarded_is_recorded(store: &dyn Store) {
    let (id, t, c) = accepted_and_claimed(store, "evt_disc_run").await;
    // The attempt is running when an operator discards the entry.
    assert_eq!(
        store
            .discard(&id, None, &"ops".into(), "wrong tenant", t + 1)
            .await
            .unwrap(),
        Transition::Done
    );
    assert!(
        !store
            .complete(&c, "w1", delivered_at(t), t + 2)
            .await
            .unwrap()
    );
    let e = stored(store, &id).await;
    assert_eq!(e.status, Status::Discarded);
    assert_eq!(e.attempts, 1);
    assert_eq!(
        store.attempts(&id).await.unwrap(),
        vec![attempt(1, t, Some(200))]
    );
    assert_eq!(store.count_status("s", Status::Discarded).await.unwrap(), 1);
    assert_eq!(store.count_status("s", Status::Delivered).await.unwrap(), 0);
    // Nothing to claim, now or later.
    assert!(claim_at(store, "s", "w2", t + 3_600_000).await.is_empty());
}
for_each_fresh_store!(
    an_attempt_that_ran_while_discarded_is_recorded_and_stays_discarded,
    super::attempt_while_discarded_is_recorded
);

/// Deliveries that no longer wait (discarded while waiting: on Redis their work
/// stream messages stand for nothing any more) take no place in a claim: a claim of
/// one reads past them to the next that waits.
async fn claims_read_past_what_no_longer_waits(store: &dyn Store) {
    for key in ["evt_gone0", "evt_gone1"] {
        let id = accept_new(store, entry("s", key)).await;
        discard_done(store, &id, now_ms()).await;
    }
    let waiting = accept_new(store, entry("s", "evt_waits")).await;
    let got = store
        .claim("s", "default", "w1", now_ms(), 1, LEASE)
        .await
        .unwrap();
    let got: Vec<&str> = got.iter().map(|c| c.entry.id.as_str()).collect();
    assert_eq!(got, vec![waiting.as_str()]);
}
for_each_fresh_store!(
    a_claim_reads_past_deliveries_that_no_longer_wait,
    super::claims_read_past_what_no_longer_waits
);

/// The same for leases that ran out: w1 claims three and dies, the first is
/// discarded meanwhile (its lease kept), and once the leases run out one claim of
/// two hands out the other two.
async fn reclaims_read_past_what_no_longer_waits(store: &dyn Store) {
    let mut ids = Vec::new();
    for key in ["evt_r0", "evt_r1", "evt_r2"] {
        ids.push(accept_new(store, entry("s", key)).await);
    }
    let t = now_ms();
    assert_eq!(
        store
            .claim("s", "default", "w1", t, 3, LEASE)
            .await
            .unwrap()
            .len(),
        3
    );
    discard_done(store, &ids[0], t).await;
    let mut again: Vec<String> =
        crate::support::wait_until_ok("a claim once the leases ran out", DEADLINE, async || {
            let got = store
                .claim("s", "default", "w2", now_ms(), 2, LEASE)
                .await
                .unwrap();
            match got.is_empty() {
                true => Err("nothing yet".to_string()),
                false => Ok(got.into_iter().map(|c| c.entry.id).collect()),
            }
        })
        .await;
    again.sort();
    assert_eq!(again, ids[1..].to_vec(), "the two that wait, in one claim");
}
for_each_fresh_store!(
    a_claim_of_expired_leases_reads_past_deliveries_that_no_longer_wait,
    super::reclaims_read_past_what_no_longer_waits
);

// ---------------------------------------------------------------------------
// Half-open breaker probes.
// ---------------------------------------------------------------------------

/// The probe `worker` claims at `now` through the default route of `source`.
async fn probe_at(store: &dyn Store, source: &str, worker: &str, now: i64) -> Option<Claim> {
    let got = store
        .claim_probe(source, "default", worker, now, LEASE)
        .await
        .unwrap();
    if let Some(c) = &got {
        assert_eq!(c.entry.source, source);
        assert_eq!(c.delivery.route, "default");
        assert_eq!(c.entry.delivery("default"), Some(&c.delivery));
    }
    got
}

/// An entry of `s` received at `received_at`, claimed, and failed at `t` (503):
/// pending, retried at `retry_at`. Its id.
async fn failed_once(
    store: &dyn Store,
    key: &str,
    received_at: i64,
    t: i64,
    retry_at: i64,
) -> String {
    let id = accept_new(store, entry_at("s", key, received_at, "x")).await;
    let c = claim_one(store, "s", "w0", t).await;
    assert_eq!(c.entry.id, id);
    let retry = Completion::Retry {
        attempt: attempt(1, t, Some(503)),
        at: retry_at,
    };
    assert!(store.complete(&c, "w0", retry, t).await.unwrap());
    id
}

async fn probe_prefers_a_retry(store: &dyn Store) {
    let t = now_ms();
    // A retry due since t - 1000, of an entry received at t - 5000...
    let retried = failed_once(store, "evt_retried", t - 5_000, t - 2_000, t - 1_000).await;
    // ...and a new entry received before it, due since t - 10000: a claim would take
    // it first, a probe takes the retry.
    let fresh = accept_new(store, entry_at("s", "evt_fresh", t - 10_000, "x")).await;
    let first = probe_at(store, "s", "w1", t).await.expect("a probe");
    assert_eq!(first.entry.id, retried, "the delivery that failed before");
    assert_eq!(first.delivery.attempts, 1);
    // The retry is leased: the next probe takes the new one, and then there is none.
    let second = probe_at(store, "s", "w2", t).await.expect("a probe");
    assert_eq!(second.entry.id, fresh, "with no retry left, a new delivery");
    assert_eq!(second.delivery.attempts, 0);
    assert!(probe_at(store, "s", "w3", t).await.is_none());
    assert!(
        claim_at(store, "s", "w3", t).await.is_empty(),
        "both leased"
    );
    // Probes complete like any claim.
    let done = Completion::Delivered {
        attempt: attempt(2, t, Some(200)),
    };
    assert!(store.complete(&first, "w1", done, t + 5).await.unwrap());
    assert!(
        store
            .complete(&second, "w2", delivered_at(t), t + 5)
            .await
            .unwrap()
    );
    for id in [&retried, &fresh] {
        assert_eq!(status_of(store, id).await, Status::Delivered);
    }
    assert_eq!(stored(store, &retried).await.attempts, 2);
    // Never handed out again, whenever asked.
    let later = t + 3_600_000;
    assert!(probe_at(store, "s", "w4", later).await.is_none());
    assert!(claim_at(store, "s", "w4", later).await.is_empty());
}
for_each_fresh_store!(
    a_probe_takes_a_due_retry_before_a_new_delivery,
    super::probe_prefers_a_retry
);

async fn probe_waits_for_the_retry_time(store: &dyn Store) {
    let t = now_ms();
    let at = t + 60_000;
    let retried = failed_once(store, "evt_later", t - 5_000, t - 2_000, at).await;
    // Not due yet: the probe takes the new delivery rather than send the retry early.
    let fresh = accept_new(store, entry_at("s", "evt_now", t - 1_000, "x")).await;
    let c = probe_at(store, "s", "w1", t).await.expect("a probe");
    assert_eq!(c.entry.id, fresh);
    let release = Completion::Release { at: t };
    assert!(store.complete(&c, "w1", release, t).await.unwrap());
    // Both due: the retry.
    let c = probe_at(store, "s", "w1", at).await.expect("a probe");
    assert_eq!(c.entry.id, retried);
    // Nothing at all: none.
    assert!(probe_at(store, "t", "w1", at).await.is_none());
}
for_each_fresh_store!(
    a_probe_never_takes_a_retry_before_its_time,
    super::probe_waits_for_the_retry_time
);

async fn probe_of_a_paused_source(store: &dyn Store) {
    let t = now_ms();
    let retried = failed_once(store, "evt_p", t - 5_000, t - 2_000, t - 1_000).await;
    accept_new(store, entry_at("s", "evt_p_new", t - 10_000, "x")).await;
    for route in [None, Some("default")] {
        store.set_paused("s", route, true).await.unwrap();
        assert!(
            probe_at(store, "s", "w1", t).await.is_none(),
            "{route:?} paused"
        );
        store.set_paused("s", route, false).await.unwrap();
    }
    let c = probe_at(store, "s", "w1", t)
        .await
        .expect("a probe after the resume");
    assert_eq!(c.entry.id, retried);
}
for_each_fresh_store!(
    a_paused_source_or_route_gives_no_probe,
    super::probe_of_a_paused_source
);

async fn probe_lease(store: &dyn Store) {
    let t = now_ms();
    let id = failed_once(store, "evt_lease", t - 5_000, t - 2_000, t - 1_000).await;
    // w1's probe dies with the lease: nothing hands the delivery out before the lease
    // ends, a claim takes it from then on.
    let gone = probe_at(store, "s", "w1", t).await.expect("a probe");
    assert_eq!(gone.entry.id, id);
    let in_lease = t + i64::try_from(LEASE.as_millis()).unwrap() / 2;
    assert!(probe_at(store, "s", "w2", in_lease).await.is_none());
    assert!(claim_at(store, "s", "w2", in_lease).await.is_empty());
    let after = t + i64::try_from(LEASE.as_millis()).unwrap() + 1;
    let taken = claim_one(store, "s", "w2", after).await;
    assert_eq!(
        (taken.entry.id.as_str(), taken.entry.attempts),
        (id.as_str(), 1)
    );
    // The dead probe's completion comes late: nothing changes for the new holder.
    let late = Completion::Delivered {
        attempt: attempt(2, after, Some(200)),
    };
    assert!(!store.complete(&gone, "w1", late, after).await.unwrap());
    assert_eq!(stored(store, &id).await.attempts, 1);
    let retry_at = after + 1_000;
    let retry = Completion::Retry {
        attempt: attempt(2, after, Some(503)),
        at: retry_at,
    };
    assert!(store.complete(&taken, "w2", retry, after).await.unwrap());

    // A probe whose lease ran out is probed again, and the late holder loses it.
    let first = probe_at(store, "s", "w3", retry_at).await.expect("a probe");
    let after = retry_at + i64::try_from(LEASE.as_millis()).unwrap() + 1;
    let second = probe_at(store, "s", "w4", after)
        .await
        .expect("probed again");
    assert_eq!(
        (first.entry.id.as_str(), second.entry.id.as_str()),
        (id.as_str(), id.as_str())
    );
    assert_ne!(first.token, second.token);
    let late = Completion::Release { at: after };
    assert!(!store.complete(&first, "w3", late, after).await.unwrap());
    // The probe fails again: due at its retry time, then delivered.
    let again = after + 60_000;
    let retry = Completion::Retry {
        attempt: attempt(3, after, Some(503)),
        at: again,
    };
    assert!(store.complete(&second, "w4", retry, after).await.unwrap());
    let e = stored(store, &id).await;
    assert_eq!(
        (e.status, e.attempts, e.next_attempt_at),
        (Status::Pending, 3, Some(again))
    );
    assert!(probe_at(store, "s", "w5", again - 1).await.is_none());
    assert!(claim_at(store, "s", "w5", again - 1).await.is_empty());
    let last = probe_at(store, "s", "w5", again).await.expect("a probe");
    let done = Completion::Delivered {
        attempt: attempt(4, again, Some(200)),
    };
    assert!(store.complete(&last, "w5", done, again).await.unwrap());
    let e = stored(store, &id).await;
    assert_eq!((e.status, e.attempts), (Status::Delivered, 4));
    assert_eq!(store.attempts(&id).await.unwrap().len(), 4);
    assert!(
        claim_at(store, "s", "w6", again + 3_600_000)
            .await
            .is_empty()
    );
}
for_each_fresh_store!(a_probe_is_leased_like_a_claim, super::probe_lease);
