//! The store conformance suite: one backend-agnostic function per behaviour, run
//! against the embedded store and against a private redis-server.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use hookgate::store::{Accepted, Header, ListQuery, NewEntry, Status, Store};

use crate::both_stores;
use crate::util::{Backend, StoreHandle};

fn entry(source: &str, key: &str) -> NewEntry {
    NewEntry {
        id: uuid::Uuid::now_v7().to_string(),
        source: source.to_string(),
        event_id: Some(key.to_string()),
        event_type: Some("thing.happened".to_string()),
        dedupe_key: format!("id:{key}"),
        dedupe_ttl: Duration::from_secs(3600),
        received_at: hookgate::store::now_ms(),
        headers: vec![Header {
            name: "content-type".into(),
            value: b"application/json".to_vec(),
        }],
        body: Bytes::from(format!("{{\"id\":\"{key}\"}}")),
    }
}

async fn accept_then_duplicate(backend: Backend) {
    let h = StoreHandle::new(backend);
    let store = h.open().await;
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
    store.close().await;
}
both_stores!(
    accept_then_duplicate_stores_once,
    super::accept_then_duplicate
);

async fn dedupe_ttl_expires(backend: Backend) {
    let h = StoreHandle::new(backend);
    let store = h.open().await;
    let mut e = entry("s", "evt_ttl");
    e.dedupe_ttl = Duration::from_millis(300);
    let first = store.accept(e).await.unwrap();
    tokio::time::sleep(Duration::from_millis(600)).await;
    let mut e2 = entry("s", "evt_ttl");
    e2.dedupe_ttl = Duration::from_millis(300);
    let second = store.accept(e2).await.unwrap();
    assert!(matches!(second, Accepted::New(_)), "{second:?}");
    assert_ne!(first.id(), second.id());
    assert_eq!(store.count("s").await.unwrap(), 2);
}
both_stores!(dedupe_key_expires_after_its_ttl, super::dedupe_ttl_expires);

async fn entry_round_trip(backend: Backend) {
    let h = StoreHandle::new(backend);
    let store = h.open().await;
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
    let got = store.get(&id).await.unwrap().expect("stored entry");
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
both_stores!(entries_round_trip_byte_for_byte, super::entry_round_trip);

async fn list_pages(backend: Backend) {
    let h = StoreHandle::new(backend);
    let store = h.open().await;
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

    let a = store
        .list(&ListQuery {
            source: Some("a".into()),
            limit: 100,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(a.entries.len(), 13);
    assert!(a.entries.iter().all(|e| e.source == "a"));
    assert!(a.next_cursor.is_none());

    let pending = store
        .list(&ListQuery {
            status: Some(Status::Pending),
            limit: 100,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(pending.entries.len(), 25);
    let dead = store
        .list(&ListQuery {
            status: Some(Status::Dead),
            limit: 100,
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(dead.entries.is_empty());
}
both_stores!(list_is_newest_first_with_stable_cursors, super::list_pages);

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
both_stores!(
    concurrent_accepts_of_one_event_store_one,
    super::concurrent_same_key
);

async fn pause_is_durable(backend: Backend) {
    let h = StoreHandle::new(backend);
    let store = h.open().await;
    assert!(store.paused_sources().await.unwrap().is_empty());
    store.set_paused("a", true).await.unwrap();
    store.set_paused("b", true).await.unwrap();
    store.set_paused("b", false).await.unwrap();
    assert_eq!(store.paused_sources().await.unwrap(), vec!["a".to_string()]);
    store.ping().await.unwrap();
    store.close().await;
    drop(store);
    let reopened = h.open().await;
    assert_eq!(
        reopened.paused_sources().await.unwrap(),
        vec!["a".to_string()]
    );
}
both_stores!(pause_state_survives_reopen, super::pause_is_durable);
