//! The `Reads` part of the store contract, on every backend: what the admin API
//! shows. An entry as stored, listings and their pages, a source's statistics, an
//! entry's attempts and its audit trail. The console's reads are in `reads_console`,
//! listings and statistics by route in `reads_routes`.

use bytes::Bytes;
use hookgate::clock::system_now_ms as now_ms;
use hookgate::failure::Failure;
use hookgate::store::{
    Accepted, Actor, Attempt, AuditEvent, Completion, Header, ListQuery, SourceStats, Status,
    Store, Transition,
};

use super::{
    accept_new, attempt, claim_at, claim_one, delivered_at, discard_done, entry, entry_at,
    entry_with_status, page_through, refused_at, stored,
};
use crate::for_each_fresh_store;
use crate::support::{first_page_of_source, first_page_with_status};

// ---------------------------------------------------------------------------
// An entry as stored.
// ---------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------
// Listings.
// ---------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------
// Statistics.
// ---------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------
// Attempts and the audit trail.
// ---------------------------------------------------------------------------

async fn attempts_in_order(store: &dyn Store) {
    let id = accept_new(store, entry("s", "evt_attempts")).await;
    let t = now_ms();
    let recorded = vec![
        Attempt {
            route: "default".into(),
            n: 1,
            at: t,
            status_code: None,
            failure: Some(Failure::Connect),
            error: Some("connect timeout".into()),
            latency_ms: 5_000,
            answer: None,
        },
        Attempt {
            route: "default".into(),
            n: 2,
            at: t + 1_000,
            status_code: Some(502),
            failure: Some(Failure::Status(502)),
            error: None,
            latency_ms: 40,
            answer: None,
        },
        Attempt {
            route: "default".into(),
            n: 3,
            at: t + 3_000,
            status_code: Some(500),
            failure: Some(Failure::Status(500)),
            error: Some("body read failed".into()),
            latency_ms: 7,
            answer: None,
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
    assert_eq!(e.deliveries[0].last_failure, Some(Failure::Status(500)));
}
for_each_fresh_store!(
    attempts_come_oldest_first_as_recorded,
    super::attempts_in_order
);

/// Every failure kind is kept with its attempt, the last one as the delivery's
/// (and its dead letter's): a completion without a kind leaves it as it was.
async fn failure_kinds_are_kept(store: &dyn Store) {
    use hookgate::failure::TransformFailure;
    let id = accept_new(store, entry("s", "evt_kinds")).await;
    let kinds = [
        Failure::Timeout,
        Failure::Connect,
        Failure::Tls,
        Failure::Io,
        Failure::AuthRefused,
        Failure::NotFound,
        Failure::TooLarge,
        Failure::Transform(TransformFailure::BadOutput),
        Failure::LeaseExpired,
        Failure::Nacked,
        Failure::Erased,
        Failure::Cancelled,
        Failure::Status(418),
    ];
    let mut now = now_ms();
    let mut recorded = Vec::new();
    for (i, kind) in kinds.iter().enumerate() {
        let c = claim_one(store, "s", "w", now).await;
        let a = Attempt {
            failure: Some(*kind),
            error: Some(format!("attempt {i}")),
            ..attempt(u32::try_from(i + 1).unwrap(), now, kind.status())
        };
        recorded.push(a.clone());
        now += 10;
        let retry = Completion::Retry {
            attempt: a,
            at: now,
        };
        assert!(store.complete(&c, "w", retry, now).await.unwrap());
        let e = stored(store, &id).await;
        assert_eq!(e.deliveries[0].last_failure, Some(*kind), "after {kind}");
    }
    assert_eq!(store.attempts(&id).await.unwrap(), recorded);
    // Released without an attempt, then dead without one: the kind stays the last
    // attempt's, and the dead letter is grouped by it.
    let c = claim_one(store, "s", "w", now).await;
    let release = Completion::Release { at: now };
    assert!(store.complete(&c, "w", release, now).await.unwrap());
    let c = claim_one(store, "s", "w", now).await;
    let dead = Completion::Dead {
        attempt: None,
        reason: "gave up".into(),
    };
    assert!(store.complete(&c, "w", dead, now).await.unwrap());
    let e = stored(store, &id).await;
    assert_eq!(e.status, Status::Dead);
    assert_eq!(e.deliveries[0].last_failure, Some(Failure::Status(418)));
    let letters = store.dead_letters("s", "default", 10).await.unwrap();
    let letter = letters
        .iter()
        .find(|d| d.id == id)
        .expect("its dead letter");
    assert_eq!(letter.failure, Some(Failure::Status(418)));
    assert_eq!(letter.last_error.as_deref(), Some("gave up"));
    // Replayed and delivered: the attempt has no kind, the last failure stays.
    assert_eq!(
        store
            .replay(&id, None, now, &"alice".into(), now)
            .await
            .unwrap(),
        Transition::Done
    );
    let c = claim_one(store, "s", "w", now).await;
    let done = Completion::Delivered {
        attempt: attempt(u32::try_from(kinds.len() + 1).unwrap(), now, Some(200)),
    };
    assert!(store.complete(&c, "w", done, now).await.unwrap());
    let e = stored(store, &id).await;
    assert_eq!(e.status, Status::Delivered);
    assert_eq!(e.deliveries[0].last_failure, Some(Failure::Status(418)));
    assert_eq!(
        store.attempts(&id).await.unwrap().last().unwrap().failure,
        None
    );
}
for_each_fresh_store!(
    failure_kinds_are_kept_with_attempts_deliveries_and_dead_letters,
    super::failure_kinds_are_kept
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
