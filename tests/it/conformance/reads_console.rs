//! The `Reads` part of the store contract that the console stands on, on every
//! backend: event-id search in listings, a route's dead letters, and the per-minute
//! activity counters.

use hookgate::clock::system_now_ms as now_ms;
use hookgate::store::{
    Attempt, Claim, Completion, ListQuery, MinuteActivity, NewEntry, Store, Transition,
};

use super::{LEASE, accept_new, entry};
use crate::for_each_fresh_store;

const MINUTE: i64 = 60_000;

fn failed(route: &str, at: i64, code: u16) -> Attempt {
    Attempt {
        route: route.into(),
        n: 1,
        at,
        status_code: Some(code),
        failure: None,
        error: None,
        latency_ms: 3,
        answer: None,
    }
}

/// Every due delivery of `route` of `source`, claimed at `now`.
async fn claim_all(store: &dyn Store, source: &str, route: &str, now: i64) -> Vec<Claim> {
    store
        .claim(source, route, "w1", now, 100, LEASE)
        .await
        .unwrap()
}

async fn event_id_search(store: &dyn Store) {
    let mut wanted = String::new();
    for i in 0..30 {
        let id = accept_new(store, entry("s", &format!("evt_{i:02}"))).await;
        if i == 17 {
            wanted = id;
        }
        accept_new(store, entry("t", &format!("evt_{i:02}"))).await;
    }
    let q = |source: Option<&str>, event: &str, limit: usize| ListQuery {
        source: source.map(str::to_string),
        event_id: Some(event.to_string()),
        limit,
        ..ListQuery::default()
    };
    let page = store.list(&q(Some("s"), "evt_17", 10)).await.unwrap();
    let ids: Vec<&str> = page.entries.iter().map(|e| e.id.as_str()).collect();
    assert_eq!(ids, [wanted.as_str()]);
    assert_eq!(page.next_cursor, None);
    assert_eq!(
        store
            .list_ids(&q(Some("s"), "evt_17", 10))
            .await
            .unwrap()
            .ids,
        [wanted.clone()]
    );
    // Without a source: the event of both sources, newest first, one per page.
    let first = store.list(&q(None, "evt_17", 1)).await.unwrap();
    assert_eq!(first.entries.len(), 1);
    assert_eq!(first.entries[0].source, "t");
    let second = store
        .list(&ListQuery {
            cursor: first.next_cursor.clone(),
            ..q(None, "evt_17", 1)
        })
        .await
        .unwrap();
    assert_eq!(second.entries[0].id, wanted);
    // An event id nobody sent finds nothing.
    assert!(
        store
            .list(&q(None, "evt_99", 10))
            .await
            .unwrap()
            .entries
            .is_empty()
    );
}
for_each_fresh_store!(event_id_search_finds_the_entry, super::event_id_search);

/// A new entry of `s` through routes `a` and `b`.
fn two_routes(key: &str) -> NewEntry {
    NewEntry {
        routes: vec!["a".into(), "b".into()],
        ..entry("s", key)
    }
}

async fn dead_letters_of_a_route(store: &dyn Store) {
    let mut ids = Vec::new();
    for i in 0..4 {
        ids.push(accept_new(store, two_routes(&format!("evt_dl{i}"))).await);
    }
    let t = now_ms();
    // Route a: 0 and 2 dead of a 422, 1 dead of a 503, 3 delivered.
    for c in claim_all(store, "s", "a", t).await {
        let i = ids.iter().position(|x| *x == c.entry.id).unwrap();
        let done = match i {
            3 => Completion::Delivered {
                attempt: failed("a", t, 200),
            },
            _ => {
                let code = if i == 1 { 503 } else { 422 };
                Completion::Dead {
                    attempt: Some(failed("a", t, code)),
                    reason: format!("not retryable: HTTP {code}"),
                }
            }
        };
        assert!(
            store
                .complete(&c, "w1", done, t + 10 + i as i64)
                .await
                .unwrap()
        );
    }
    // Route b: only 1 dead.
    for c in claim_all(store, "s", "b", t).await {
        if c.entry.id == ids[1] {
            let dead = Completion::Dead {
                attempt: Some(failed("b", t, 500)),
                reason: "retry budget exhausted: 1 attempts; last: HTTP 500".into(),
            };
            assert!(store.complete(&c, "w1", dead, t + 50).await.unwrap());
        }
    }
    let a = store.dead_letters("s", "a", 10).await.unwrap();
    let got: Vec<(&str, Option<&str>)> = a
        .iter()
        .map(|d| (d.id.as_str(), d.last_error.as_deref()))
        .collect();
    assert_eq!(
        got,
        [
            (ids[2].as_str(), Some("not retryable: HTTP 422")),
            (ids[1].as_str(), Some("not retryable: HTTP 503")),
            (ids[0].as_str(), Some("not retryable: HTTP 422")),
        ],
        "newest first, each with its route's error"
    );
    assert_eq!(a[0].dead_at, t + 12);
    assert_eq!(a[2].dead_at, t + 10);
    assert_eq!(a[0].attempts, 1);
    assert_eq!(a[0].event_id.as_deref(), Some("evt_dl2"));
    assert_eq!(a[0].event_type.as_deref(), Some("thing.happened"));
    assert!(a[0].received_at <= t);
    // The limit keeps the newest.
    let two = store.dead_letters("s", "a", 2).await.unwrap();
    assert_eq!(two.len(), 2);
    assert_eq!(two[0].id, ids[2]);
    // Route b has its own.
    let b = store.dead_letters("s", "b", 10).await.unwrap();
    assert_eq!(b.len(), 1);
    assert_eq!(
        (b[0].id.as_str(), b[0].last_error.as_deref(), b[0].dead_at),
        (
            ids[1].as_str(),
            Some("retry budget exhausted: 1 attempts; last: HTTP 500"),
            t + 50
        )
    );
    // A replayed one is no longer dead; other sources and routes have none.
    let done = store
        .replay(&ids[0], Some("a"), t + 100, &"op".into(), t + 100)
        .await
        .unwrap();
    assert_eq!(done, Transition::Done);
    let a = store.dead_letters("s", "a", 10).await.unwrap();
    assert_eq!(a.len(), 2);
    assert!(a.iter().all(|d| d.id != ids[0]));
    assert!(store.dead_letters("t", "a", 10).await.unwrap().is_empty());
    assert!(store.dead_letters("s", "zzz", 10).await.unwrap().is_empty());
}
for_each_fresh_store!(
    dead_letters_are_per_route_newest_first,
    super::dead_letters_of_a_route
);

async fn activity_per_minute(store: &dyn Store) {
    let t = now_ms();
    let minute = t - t.rem_euclid(MINUTE);
    // Received in the minute of their arrival time, whatever the clock says now.
    let arriving = |source: &str, key: &str| NewEntry {
        received_at: minute + 1,
        ..entry(source, key)
    };
    for i in 0..3 {
        accept_new(store, arriving("s", &format!("evt_act{i}"))).await;
    }
    // A duplicate is not received again.
    store.accept(arriving("s", "evt_act0")).await.unwrap();
    accept_new(store, arriving("other", "evt_act0")).await;
    let claims = claim_all(store, "s", "default", t).await;
    assert_eq!(claims.len(), 3);
    // Counted in the minute of the completion's time: the next minute.
    let later = minute + MINUTE + 5;
    let completions = [
        Completion::Delivered {
            attempt: failed("default", later, 200),
        },
        Completion::Retry {
            attempt: failed("default", later, 503),
            at: later + 1,
        },
        Completion::Dead {
            attempt: Some(failed("default", later, 400)),
            reason: "not retryable: HTTP 400".into(),
        },
    ];
    for (c, done) in claims.iter().zip(completions) {
        assert!(store.complete(c, "w1", done, later).await.unwrap());
    }
    // A completion that no longer holds its lease counts nothing.
    let stale = store
        .complete(
            &claims[0],
            "w1",
            Completion::Delivered {
                attempt: failed("default", later, 200),
            },
            later,
        )
        .await
        .unwrap();
    assert!(!stale);
    // A release counts nothing either.
    let retried = claim_all(store, "s", "default", later + 1).await;
    assert_eq!(retried.len(), 1);
    assert!(
        store
            .complete(
                &retried[0],
                "w1",
                Completion::Release { at: later + 2 },
                later
            )
            .await
            .unwrap()
    );

    let got = store
        .activity("s", minute - 10 * MINUTE, minute + 10 * MINUTE)
        .await
        .unwrap();
    let got_at = |m: i64| got.iter().find(|x| x.minute == m).copied();
    assert_eq!(
        got_at(minute),
        Some(MinuteActivity {
            minute,
            received: 3,
            delivered: 0,
            failed: 0
        }),
        "{got:?}"
    );
    assert_eq!(
        got_at(minute + MINUTE),
        Some(MinuteActivity {
            minute: minute + MINUTE,
            received: 0,
            delivered: 1,
            failed: 2
        }),
        "{got:?}"
    );
    assert_eq!(got.len(), 2, "only minutes with something: {got:?}");
    assert!(
        got.windows(2).all(|w| w[0].minute < w[1].minute),
        "oldest first"
    );
    assert!(got.iter().all(|m| m.minute % MINUTE == 0));
    assert!(
        got.iter().all(|m| m.received + m.delivered + m.failed > 0),
        "only minutes with something"
    );
    // The window is half-open, and other sources count on their own.
    let before = store
        .activity("s", minute - 10 * MINUTE, minute)
        .await
        .unwrap();
    assert!(before.iter().all(|m| m.minute < minute));
    assert_eq!(before.iter().map(|m| m.received).sum::<u64>(), 0);
    let only_next = store
        .activity("s", minute + MINUTE, minute + 2 * MINUTE)
        .await
        .unwrap();
    assert_eq!(only_next.len(), 1);
    assert_eq!(only_next[0].received, 0);
    let other = store
        .activity("other", minute - MINUTE, minute + 2 * MINUTE)
        .await
        .unwrap();
    assert_eq!(other.iter().map(|m| m.received).sum::<u64>(), 1);
    assert_eq!(other.iter().map(|m| m.delivered + m.failed).sum::<u64>(), 0);
    assert!(
        store
            .activity("nobody", 0, t + MINUTE)
            .await
            .unwrap()
            .is_empty()
    );
}
for_each_fresh_store!(activity_counts_each_minute, super::activity_per_minute);
