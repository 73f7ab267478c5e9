//! The store conformance suite: one backend-agnostic function per behaviour, run
//! against every backend of `support::backends` (the embedded store, a private
//! redis-server).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use hookgate::clock::system_now_ms as now_ms;
use hookgate::store::{
    Accepted, Actor, Attempt, AuditEvent, Claim, Completion, Control, Entry, Header,
    HousekeepingPass, ListQuery, NewEntry, SourceStats, Status, Store, Transition,
};

use crate::support::{
    Backend, StoreHandle, assert_listed_as_stored, first_page_of_source, first_page_with_status,
};
use crate::{for_each_fresh_store, for_each_store};

/// A new entry of `source` with event id `key`.
pub(crate) fn entry(source: &str, key: &str) -> NewEntry {
    NewEntry {
        id: uuid::Uuid::now_v7().to_string(),
        source: source.to_string(),
        event_id: Some(key.to_string()),
        event_type: Some("thing.happened".to_string()),
        dedupe_key: format!("id:{key}"),
        dedupe_ttl: Duration::from_secs(3600),
        received_at: hookgate::clock::system_now_ms(),
        headers: vec![Header {
            name: "content-type".into(),
            value: b"application/json".to_vec(),
        }],
        body: Bytes::from(format!("{{\"id\":\"{key}\"}}")),
        routes: vec!["default".into()],
        ordering: Vec::new(),
    }
}

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

async fn entry_round_trip(store: &dyn Store) {
    let mut e = entry("s", "evt_rt");
    e.event_id = None;
    e.event_type = None;
    e.dedupe_key = "body-sha256:abc".into();
    e.headers.push(Header {
        name: "x-binary".into(),
        value: vec![0xff, 0x00, 0x80],
    });
    e.body = Bytes::from_static(&[0xde, 0xad, 0xbe, 0xef, 0x00, 0xff]);
    let id = e.id.clone();
    store.accept(e.clone()).await.unwrap();
    let got = stored(store, &id).await;
    assert_eq!(got.id, id);
    assert_eq!(got.source, "s");
    assert_eq!(got.event_id, None);
    assert_eq!(got.event_type, None);
    assert_eq!(got.dedupe_key, "body-sha256:abc");
    assert_eq!(got.received_at, e.received_at);
    assert_eq!(got.status, Status::Pending);
    assert_eq!(got.attempts, 0);
    assert_eq!(got.headers, e.headers);
    assert_eq!(got.body, e.body);
    assert!(store.get("no-such-id").await.unwrap().is_none());
}
for_each_fresh_store!(entries_round_trip_byte_for_byte, super::entry_round_trip);

async fn list_pages(store: &dyn Store) {
    let mut ids = Vec::new();
    for i in 0..25 {
        let source = if i % 2 == 0 { "a" } else { "b" };
        let e = entry(source, &format!("evt_{i}"));
        ids.push(e.id.clone());
        store.accept(e).await.unwrap();
    }
    ids.reverse(); // newest first
    let mut seen = Vec::new();
    let mut cursor = None;
    loop {
        let page = store
            .list(&ListQuery {
                limit: 10,
                cursor: cursor.clone(),
                ..Default::default()
            })
            .await
            .unwrap();
        assert!(page.entries.len() <= 10);
        seen.extend(page.entries.iter().map(|e| e.id.clone()));
        match page.next_cursor {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    assert_eq!(seen, ids, "every entry exactly once, newest first");

    let a = first_page_of_source(store, "a", 100).await;
    assert_eq!(a.entries.len(), 13);
    assert!(a.entries.iter().all(|e| e.source == "a"));
    assert!(a.next_cursor.is_none());

    let pending = first_page_with_status(store, Status::Pending, 100).await;
    assert_eq!(pending.entries.len(), 25);
    let dead = first_page_with_status(store, Status::Dead, 100).await;
    assert!(dead.entries.is_empty());
}
for_each_fresh_store!(list_is_newest_first_with_stable_cursors, super::list_pages);

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

// ---------------------------------------------------------------------------
// Claims and completions.
// ---------------------------------------------------------------------------

/// The lease of every claim in this suite: short, so that an abandoned one expires
/// within the test; waits loop on what the store shows, up to `DEADLINE`.
pub(crate) const LEASE: Duration = Duration::from_millis(200);
pub(crate) const DEADLINE: Duration = Duration::from_secs(10);

/// An entry received at `ms`, its id carrying that time (as ingest's UUIDv7 ids do).
pub(crate) fn entry_at(source: &str, key: &str, ms: i64, event_type: &str) -> NewEntry {
    let ms = u64::try_from(ms).expect("a time after 1970");
    let ts = uuid::Timestamp::from_unix(
        uuid::NoContext,
        ms / 1000,
        u32::try_from(ms % 1000).unwrap() * 1_000_000,
    );
    let mut e = entry(source, key);
    e.id = uuid::Uuid::new_v7(ts).to_string();
    e.received_at = i64::try_from(ms).unwrap();
    e.event_type = Some(event_type.to_string());
    e
}

fn attempt(n: u32, at: i64, status_code: Option<u16>) -> Attempt {
    Attempt {
        route: "default".into(),
        n,
        at,
        status_code,
        error: None,
        latency_ms: 12,
    }
}

/// A first attempt at `at`, answered 200: the entry is delivered.
fn delivered_at(at: i64) -> Completion {
    Completion::Delivered {
        attempt: attempt(1, at, Some(200)),
    }
}

/// A first attempt at `at`, answered 400: the entry is dead, "refused".
fn refused_at(at: i64) -> Completion {
    Completion::Dead {
        attempt: Some(attempt(1, at, Some(400))),
        reason: "refused".into(),
    }
}

pub(crate) async fn accept_new(store: &dyn Store, e: NewEntry) -> String {
    match store.accept(e).await.unwrap() {
        Accepted::New(id) => id,
        other => panic!("expected a new entry, got {other:?}"),
    }
}

async fn claim_at(store: &dyn Store, source: &str, worker: &str, now: i64) -> Vec<Claim> {
    store
        .claim(source, "default", worker, now, 10, LEASE)
        .await
        .unwrap()
}

/// The one claim a claim at `now` returns.
async fn claim_one(store: &dyn Store, source: &str, worker: &str, now: i64) -> Claim {
    let mut claims = claim_at(store, source, worker, now).await;
    assert_eq!(claims.len(), 1, "one claim at {now}");
    claims.remove(0)
}

/// A new entry of `s` with event id `key`, claimed by `w1` at once: its id, the time
/// of the claim, and the claim.
async fn accepted_and_claimed(store: &dyn Store, key: &str) -> (String, i64, Claim) {
    let id = accept_new(store, entry("s", key)).await;
    let t = now_ms();
    let c = claim_one(store, "s", "w1", t).await;
    (id, t, c)
}

/// Claim at the current time until the store hands an entry out (a lease that has to
/// expire first), at most until `DEADLINE`.
pub(crate) async fn claim_when_due(store: &dyn Store, source: &str, worker: &str) -> Claim {
    crate::support::wait_until_ok(
        &format!("{worker} gets a claim of {source}"),
        DEADLINE,
        async || {
            let mut claims = claim_at(store, source, worker, now_ms()).await;
            match claims.len() {
                0 => Err("nothing claimable".to_string()),
                1 => Ok(claims.remove(0)),
                n => Err(format!("{n} claims, one expected")),
            }
        },
    )
    .await
}

/// The stored entry `id`, which must exist.
pub(crate) async fn stored(store: &dyn Store, id: &str) -> Entry {
    store.get(id).await.unwrap().expect("the entry")
}

async fn status_of(store: &dyn Store, id: &str) -> Status {
    stored(store, id).await.status
}

/// Discard `id` at `at`, which the store does.
async fn discard_done(store: &dyn Store, id: &str, at: i64) {
    assert_eq!(
        store
            .discard(id, None, &"ops".into(), "n", at)
            .await
            .unwrap(),
        Transition::Done,
        "discard {id}"
    );
}

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

// ---------------------------------------------------------------------------
// Operators: replay, discard, audit, pause, controls.
// ---------------------------------------------------------------------------

/// An entry of `source` driven to `status` through the store's own operations (the
/// source has no other pending entry).
async fn entry_with_status(store: &dyn Store, source: &str, key: &str, status: Status) -> String {
    let id = accept_new(store, entry(source, key)).await;
    let t = now_ms();
    match status {
        Status::Pending => {}
        Status::Discarded => {
            assert_eq!(
                store
                    .discard(&id, None, &"ops".into(), "setup", t)
                    .await
                    .unwrap(),
                Transition::Done
            );
        }
        Status::Filtered => panic!("a filtered entry is accepted as such, not driven there"),
        Status::Delivered | Status::Dead => {
            let c = claim_one(store, source, "setup", t).await;
            assert_eq!(c.entry.id, id);
            let completion = if status == Status::Delivered {
                delivered_at(t)
            } else {
                refused_at(t)
            };
            assert!(store.complete(&c, "setup", completion, t).await.unwrap());
        }
    }
    assert_eq!(status_of(store, &id).await, status);
    id
}

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

async fn audit_trail_oldest_first(store: &dyn Store) {
    let id = entry_with_status(store, "s", "evt_audit", Status::Dead).await;
    let t = now_ms();
    // A console action names its session and client.
    let bob = Actor {
        name: "bob".into(),
        session: Some("5e55".into()),
        client: Some("2001:db8::7".into()),
    };
    assert_eq!(
        store
            .replay(&id, None, t, &"alice".into(), t + 1)
            .await
            .unwrap(),
        Transition::Done
    );
    assert_eq!(
        store
            .discard(&id, None, &bob, "customer asked", t + 2)
            .await
            .unwrap(),
        Transition::Done
    );
    assert_eq!(
        store
            .replay(&id, None, t, &"carol".into(), t + 3)
            .await
            .unwrap(),
        Transition::Done
    );
    let trail = store.audit(&id).await.unwrap();
    let expect = vec![
        AuditEvent {
            at: t + 1,
            action: "replay".into(),
            actor: "alice".into(),
            note: None,
            route: None,
            session: None,
            client: None,
        },
        AuditEvent {
            at: t + 2,
            action: "discard".into(),
            actor: "bob".into(),
            note: Some("customer asked".into()),
            route: None,
            session: Some("5e55".into()),
            client: Some("2001:db8::7".into()),
        },
        AuditEvent {
            at: t + 3,
            action: "replay".into(),
            actor: "carol".into(),
            note: None,
            route: None,
            session: None,
            client: None,
        },
    ];
    assert_eq!(trail, expect);
}
for_each_fresh_store!(
    the_audit_trail_records_replays_and_discards_oldest_first,
    super::audit_trail_oldest_first
);

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

pub(crate) async fn next(rx: &mut tokio::sync::broadcast::Receiver<Control>) -> Control {
    tokio::time::timeout(DEADLINE, rx.recv())
        .await
        .expect("a control within the deadline")
        .expect("the control channel open")
}

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
// Retention, statistics, listings.
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

async fn stats_count_what_happened(store: &dyn Store) {
    let t = now_ms();
    let mut ids = Vec::new();
    for (i, key) in ["a", "b", "c", "d", "e"].iter().enumerate() {
        let at = t - 5_000 + 1_000 * i as i64;
        ids.push(accept_new(store, entry_at("s", key, at, "x")).await);
    }
    // A duplicate of a, and requests refused by verification.
    assert_eq!(
        store.accept(entry_at("s", "a", t, "x")).await.unwrap(),
        Accepted::Duplicate(ids[0].clone())
    );
    store.record_unverified("s", 2).await.unwrap();
    store.record_unverified("s", 3).await.unwrap();
    // Another source's counters are its own.
    accept_new(store, entry("t", "a")).await;
    store.record_unverified("t", 1).await.unwrap();

    let arrived = SourceStats {
        received: 5,
        duplicates: 1,
        unverified: 5,
        pending: 5,
        delivered: 0,
        dead: 0,
        discarded: 0,
        filtered: 0,
        oldest_pending_at: Some(t - 5_000),
    };
    assert_eq!(store.stats("s").await.unwrap(), arrived);

    // a delivered, b dead, c discarded; d and e still pending.
    let claims = claim_at(store, "s", "w", t).await;
    assert_eq!(claims.len(), 5);
    for c in &claims {
        let completion = if c.entry.id == ids[0] {
            delivered_at(t)
        } else if c.entry.id == ids[1] {
            refused_at(t)
        } else {
            Completion::Release { at: t }
        };
        assert!(store.complete(c, "w", completion, t).await.unwrap());
    }
    discard_done(store, &ids[2], t).await;
    // What arrived is counted as before; the rest moved.
    assert_eq!(
        store.stats("s").await.unwrap(),
        SourceStats {
            pending: 2,
            delivered: 1,
            dead: 1,
            discarded: 1,
            oldest_pending_at: Some(t - 2_000),
            ..arrived
        }
    );
    assert_eq!(store.count("s").await.unwrap(), 5);
    for (status, n) in [
        (Status::Pending, 2),
        (Status::Delivered, 1),
        (Status::Dead, 1),
        (Status::Discarded, 1),
    ] {
        assert_eq!(
            store.count_status("s", status).await.unwrap(),
            n,
            "{status:?}"
        );
    }
    let other = store.stats("t").await.unwrap();
    assert_eq!(
        (
            other.received,
            other.duplicates,
            other.unverified,
            other.pending
        ),
        (1, 0, 1, 1)
    );
    // Nothing pending: no oldest.
    for c in claim_at(store, "s", "w", t).await {
        assert!(store.complete(&c, "w", delivered_at(t), t).await.unwrap());
    }
    let st = store.stats("s").await.unwrap();
    assert_eq!(
        (st.pending, st.delivered, st.oldest_pending_at),
        (0, 3, None)
    );
}
for_each_fresh_store!(
    stats_count_what_happened_to_a_source,
    super::stats_count_what_happened
);

/// One entry of the listing fixture, as the test knows it.
struct Known {
    id: String,
    source: &'static str,
    event_type: &'static str,
    at: i64,
    status: Status,
}

/// Twelve entries a second apart: sources a/b alternating, event types x/y/z in turn,
/// the 4th and 8th discarded.
async fn listing_fixture(store: &dyn Store, base: i64) -> Vec<Known> {
    let mut known = Vec::new();
    for i in 0..12 {
        let source = ["a", "b"][i % 2];
        let event_type = ["x", "y", "z"][i % 3];
        let at = base + 1_000 * i as i64;
        let id = accept_new(store, entry_at(source, &format!("evt_{i}"), at, event_type)).await;
        let mut status = Status::Pending;
        if i == 3 || i == 7 {
            discard_done(store, &id, base).await;
            status = Status::Discarded;
        }
        known.push(Known {
            id,
            source,
            event_type,
            at,
            status,
        });
    }
    known
}

/// Every page of `query` at `limit` per page, checking each page (and that `list_ids`
/// pages the same way); the ids in order.
pub(crate) async fn page_through(store: &dyn Store, query: &ListQuery) -> Vec<String> {
    let mut seen = Vec::new();
    let mut cursor = None;
    loop {
        let q = ListQuery {
            cursor: cursor.clone(),
            ..query.clone()
        };
        let page = store.list(&q).await.unwrap();
        let ids = store.list_ids(&q).await.unwrap();
        let listed: Vec<String> = page.entries.iter().map(|e| e.id.clone()).collect();
        assert_eq!(listed, ids.ids, "list_ids pages as list does");
        assert_eq!(page.next_cursor, ids.next_cursor);
        assert!(page.entries.len() <= query.limit, "the limit holds");
        assert_listed_as_stored(store, &page.entries).await;
        seen.extend(listed);
        match page.next_cursor {
            Some(c) => {
                assert_eq!(page.entries.len(), query.limit, "only a last page is short");
                cursor = Some(c);
            }
            None => break,
        }
    }
    seen
}

async fn list_filters(store: &dyn Store) {
    let base = now_ms() - 60_000;
    let known = listing_fixture(store, base).await;
    let expect = |keep: &dyn Fn(&Known) -> bool| -> Vec<String> {
        known
            .iter()
            .rev()
            .filter(|k| keep(k))
            .map(|k| k.id.clone())
            .collect()
    };
    let q = |f: &dyn Fn(&mut ListQuery)| {
        let mut q = ListQuery {
            limit: 2,
            ..Default::default()
        };
        f(&mut q);
        q
    };
    let cases: Vec<(&str, ListQuery, Vec<String>)> = vec![
        ("everything", q(&|_| {}), expect(&|_| true)),
        (
            "source",
            q(&|q| q.source = Some("a".into())),
            expect(&|k| k.source == "a"),
        ),
        (
            "status",
            q(&|q| q.status = Some(Status::Discarded)),
            expect(&|k| k.status == Status::Discarded),
        ),
        (
            "source and status",
            q(&|q| {
                q.source = Some("b".into());
                q.status = Some(Status::Pending);
            }),
            expect(&|k| k.source == "b" && k.status == Status::Pending),
        ),
        (
            "event type",
            q(&|q| q.event_type = Some("x".into())),
            expect(&|k| k.event_type == "x"),
        ),
        (
            "event type and source",
            q(&|q| {
                q.event_type = Some("y".into());
                q.source = Some("a".into());
            }),
            expect(&|k| k.event_type == "y" && k.source == "a"),
        ),
        (
            "since and until",
            q(&|q| {
                q.since = Some(base + 4_000);
                q.until = Some(base + 9_000);
            }),
            expect(&|k| k.at >= base + 4_000 && k.at < base + 9_000),
        ),
        (
            "since alone",
            q(&|q| q.since = Some(base + 10_000)),
            expect(&|k| k.at >= base + 10_000),
        ),
        (
            "until alone",
            q(&|q| q.until = Some(base + 2_000)),
            expect(&|k| k.at < base + 2_000),
        ),
        (
            "all filters",
            q(&|q| {
                q.source = Some("a".into());
                q.status = Some(Status::Pending);
                q.event_type = Some("z".into());
                q.since = Some(base + 1_000);
                q.until = Some(base + 11_000);
            }),
            expect(&|k| {
                k.source == "a"
                    && k.status == Status::Pending
                    && k.event_type == "z"
                    && k.at >= base + 1_000
                    && k.at < base + 11_000
            }),
        ),
        (
            "nothing matches",
            q(&|q| q.event_type = Some("none".into())),
            Vec::new(),
        ),
    ];
    for (name, query, want) in cases {
        assert!(
            name == "nothing matches" || !want.is_empty(),
            "{name}: the fixture has matches"
        );
        assert_eq!(page_through(store, &query).await, want, "{name}");
    }
}
for_each_fresh_store!(
    list_filters_by_source_status_type_and_time,
    super::list_filters
);

async fn list_pages_stay_stable(store: &dyn Store) {
    let base = now_ms() - 60_000;
    let known = listing_fixture(store, base).await;
    let want: Vec<String> = known.iter().rev().map(|k| k.id.clone()).collect();
    let query = ListQuery {
        limit: 5,
        ..Default::default()
    };
    let first = store.list(&query).await.unwrap();
    assert_eq!(first.entries.len(), 5);
    let mut seen: Vec<String> = first.entries.iter().map(|e| e.id.clone()).collect();
    // Between two pages: a newer entry arrives, an entry further down changes status.
    accept_new(store, entry_at("a", "evt_late", base + 30_000, "x")).await;
    discard_done(store, &known[2].id, base).await;
    let mut cursor = first.next_cursor;
    while let Some(c) = cursor {
        let page = store
            .list(&ListQuery {
                cursor: Some(c),
                ..query.clone()
            })
            .await
            .unwrap();
        seen.extend(page.entries.iter().map(|e| e.id.clone()));
        cursor = page.next_cursor;
    }
    assert_eq!(seen, want, "every entry once, newest first, no gap");
    // A limit of 0 is taken as 1.
    let one = store
        .list(&ListQuery {
            limit: 0,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(one.entries.len(), 1);
}
for_each_fresh_store!(
    list_pages_are_stable_without_duplicates_or_gaps,
    super::list_pages_stay_stable
);

async fn attempts_in_order(store: &dyn Store) {
    let id = accept_new(store, entry("s", "evt_attempts")).await;
    let t = now_ms();
    let recorded = vec![
        Attempt {
            route: "default".into(),
            n: 1,
            at: t,
            status_code: None,
            error: Some("connect timeout".into()),
            latency_ms: 5_000,
        },
        Attempt {
            route: "default".into(),
            n: 2,
            at: t + 1_000,
            status_code: Some(502),
            error: None,
            latency_ms: 40,
        },
        Attempt {
            route: "default".into(),
            n: 3,
            at: t + 3_000,
            status_code: Some(500),
            error: Some("body read failed".into()),
            latency_ms: 7,
        },
    ];
    let mut now = t;
    for (i, a) in recorded.iter().enumerate() {
        let c = claim_one(store, "s", "w", now).await;
        let completion = if i + 1 < recorded.len() {
            now = a.at + 1_000;
            Completion::Retry {
                attempt: a.clone(),
                at: now,
            }
        } else {
            Completion::Dead {
                attempt: Some(a.clone()),
                reason: "retry budget spent".into(),
            }
        };
        assert!(store.complete(&c, "w", completion, a.at).await.unwrap());
    }
    assert_eq!(store.attempts(&id).await.unwrap(), recorded);
    let e = stored(store, &id).await;
    assert_eq!((e.status, e.attempts), (Status::Dead, 3));
}
for_each_fresh_store!(
    attempts_come_oldest_first_as_recorded,
    super::attempts_in_order
);

// ---------------------------------------------------------------------------
// Signals and health.
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
