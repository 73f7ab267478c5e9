//! The store conformance suite: the store contract (`hookgate::store::Store`, the sum
//! of its parts `Queue`, `Reads`, `Search`, `Records`, `Rejections`, `Pacing`,
//! `Membership`, `Reconciling` and `Lifecycle`) held on every backend of
//! `support::backends` (the embedded store, a private redis-server, a private
//! PostgreSQL server). One backend-agnostic function per behaviour, run once
//! per backend by `for_each_store!` / `for_each_fresh_store!`; one file per part of
//! the contract (a part with much to hold takes more than one, named after it). This
//! module holds the fixtures and helpers that several of those files share.

mod lifecycle;
mod membership;
mod pacing;
mod queue;
mod queue_claims;
mod queue_lines;
mod queue_routes;
mod queue_routes_operators;
mod reads;
mod reads_console;
mod reads_routes;
mod reconcile;
mod records;
mod rejections;
mod search;

use std::time::Duration;

use bytes::Bytes;
use hookgate::clock::system_now_ms as now_ms;
use hookgate::store::{
    Accepted, Attempt, Claim, Completion, Control, Delivery, Entry, Header, ListQuery, NewEntry,
    Origin, Status, Store, Transition,
};

use crate::support::assert_listed_as_stored;

// ---------------------------------------------------------------------------
// Entries.
// ---------------------------------------------------------------------------

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
        index: Vec::new(),
        origin: Origin::Received,
    }
}

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

pub(crate) async fn accept_new(store: &dyn Store, e: NewEntry) -> String {
    match store.accept(e).await.unwrap() {
        Accepted::New(id) => id,
        other => panic!("expected a new entry, got {other:?}"),
    }
}

/// The stored entry `id`, which must exist.
pub(crate) async fn stored(store: &dyn Store, id: &str) -> Entry {
    store.get(id).await.unwrap().expect("the entry")
}

pub(crate) async fn status_of(store: &dyn Store, id: &str) -> Status {
    stored(store, id).await.status
}

/// An entry of `source` driven to `status` through the store's own operations (the
/// source has no other pending entry).
pub(crate) async fn entry_with_status(
    store: &dyn Store,
    source: &str,
    key: &str,
    status: Status,
) -> String {
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

// ---------------------------------------------------------------------------
// Claims, completions and controls.
// ---------------------------------------------------------------------------

/// The lease of every claim in this suite: short, so that an abandoned one expires
/// within the test; waits loop on what the store shows, up to `DEADLINE`.
pub(crate) const LEASE: Duration = Duration::from_millis(200);
pub(crate) const DEADLINE: Duration = Duration::from_secs(10);

pub(crate) fn attempt(n: u32, at: i64, status_code: Option<u16>) -> Attempt {
    Attempt {
        route: "default".into(),
        n,
        at,
        status_code,
        failure: None,
        error: None,
        latency_ms: 12,
        answer: None,
    }
}

/// A first attempt at `at`, answered 200: the entry is delivered.
pub(crate) fn delivered_at(at: i64) -> Completion {
    Completion::Delivered {
        attempt: attempt(1, at, Some(200)),
    }
}

/// A first attempt at `at`, answered 400: the entry is dead, "refused".
pub(crate) fn refused_at(at: i64) -> Completion {
    Completion::Dead {
        attempt: Some(attempt(1, at, Some(400))),
        reason: "refused".into(),
    }
}

pub(crate) async fn claim_at(
    store: &dyn Store,
    source: &str,
    worker: &str,
    now: i64,
) -> Vec<Claim> {
    store
        .claim(source, "default", worker, now, 10, LEASE)
        .await
        .unwrap()
}

/// The one claim a claim at `now` returns.
pub(crate) async fn claim_one(store: &dyn Store, source: &str, worker: &str, now: i64) -> Claim {
    let mut claims = claim_at(store, source, worker, now).await;
    assert_eq!(claims.len(), 1, "one claim at {now}");
    claims.remove(0)
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

/// Discard `id` at `at`, which the store does.
pub(crate) async fn discard_done(store: &dyn Store, id: &str, at: i64) {
    assert_eq!(
        store
            .discard(id, None, &"ops".into(), "n", at)
            .await
            .unwrap(),
        Transition::Done,
        "discard {id}"
    );
}

pub(crate) async fn next(rx: &mut tokio::sync::broadcast::Receiver<Control>) -> Control {
    tokio::time::timeout(DEADLINE, rx.recv())
        .await
        .expect("a control within the deadline")
        .expect("the control channel open")
}

// ---------------------------------------------------------------------------
// Listings.
// ---------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------
// Per-route deliveries.
// ---------------------------------------------------------------------------

fn routes(names: &[&str]) -> Vec<String> {
    names.iter().map(|r| r.to_string()).collect()
}

/// A new entry of `source` with event id `key`, delivered through `names`.
pub(crate) fn routed(source: &str, key: &str, names: &[&str]) -> NewEntry {
    NewEntry {
        routes: routes(names),
        ordering: Vec::new(),
        ..entry(source, key)
    }
}

/// As [`routed`], received at `ms` (its id carrying that time).
pub(crate) fn routed_at(source: &str, key: &str, names: &[&str], ms: i64) -> NewEntry {
    NewEntry {
        routes: routes(names),
        ordering: Vec::new(),
        ..entry_at(source, key, ms, "x")
    }
}

pub(crate) fn route_attempt(route: &str, n: u32, at: i64, status_code: Option<u16>) -> Attempt {
    Attempt {
        route: route.to_string(),
        n,
        at,
        status_code,
        failure: None,
        error: None,
        latency_ms: 9,
        answer: None,
    }
}

/// What a worker makes of a claimed delivery in these tests.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Outcome {
    /// Answered 200.
    Delivered,
    /// Answered 400: dead, "refused".
    Refused,
    /// Answered 503: retry at this time.
    RetryAt(i64),
}

/// The completion of `outcome` for the claim `c`, its attempt started at `at` and
/// numbered after the delivery's earlier ones.
pub(crate) fn completion(c: &Claim, outcome: Outcome, at: i64) -> Completion {
    let route = &c.delivery.route;
    let n = c.delivery.attempts + 1;
    match outcome {
        Outcome::Delivered => Completion::Delivered {
            attempt: route_attempt(route, n, at, Some(200)),
        },
        Outcome::Refused => Completion::Dead {
            attempt: Some(route_attempt(route, n, at, Some(400))),
            reason: "refused".into(),
        },
        Outcome::RetryAt(next) => Completion::Retry {
            attempt: route_attempt(route, n, at, Some(503)),
            at: next,
        },
    }
}

/// Every due delivery through `route` of `source` at `now` (up to 100).
pub(crate) async fn claims(
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
pub(crate) async fn claimable(
    store: &dyn Store,
    source: &str,
    route: &str,
    now: i64,
) -> Vec<String> {
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
pub(crate) async fn claim_of(
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
pub(crate) async fn settle(
    store: &dyn Store,
    source: &str,
    id: &str,
    route: &str,
    outcome: Outcome,
    at: i64,
) {
    let c = claim_of(store, source, route, id, "settle", now_ms().max(at)).await;
    let done = completion(&c, outcome, at);
    assert!(
        store.complete(&c, "settle", done, at).await.unwrap(),
        "{outcome:?} of {id} through {route}"
    );
}

/// The stored entry `id`, whose summary must be the one its deliveries make.
pub(crate) async fn got(store: &dyn Store, id: &str) -> Entry {
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
pub(crate) async fn delivery(store: &dyn Store, id: &str, route: &str) -> Delivery {
    got(store, id)
        .await
        .delivery(route)
        .cloned()
        .unwrap_or_else(|| panic!("{id} has no delivery through {route}"))
}

/// Each delivery's route and status, in route order.
pub(crate) async fn statuses(store: &dyn Store, id: &str) -> Vec<(String, Status)> {
    got(store, id)
        .await
        .deliveries
        .iter()
        .map(|d| (d.route.clone(), d.status))
        .collect()
}

pub(crate) fn expect_statuses(want: &[(&str, Status)]) -> Vec<(String, Status)> {
    want.iter().map(|(r, s)| (r.to_string(), *s)).collect()
}
