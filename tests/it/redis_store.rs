//! Behaviour of the Redis store that the conformance suite cannot see: what it does
//! with data an earlier version left in Redis.

use redis::AsyncCommands;

use crate::util::{Backend, StoreHandle};

/// Earlier versions also kept every id in `hg:{src}:idx`; listing now merges the
/// status sets, and opening the store drops that set. Entries stay listable.
#[tokio::test]
async fn opening_drops_the_legacy_index_and_keeps_entries_listable() {
    let h = StoreHandle::new(Backend::Redis);
    let url = h.redis.as_ref().expect("redis").url();
    let client = redis::Client::open(url).expect("client");
    let mut c = client
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    let _: () = c.sadd("hg:sources", "s").await.expect("sadd");
    let _: () = c
        .zadd("hg:{s}:idx", "0197a000-0000-7000-8000-000000000001", 0)
        .await
        .expect("zadd");

    let store = h.open().await;
    let exists: bool = c.exists("hg:{s}:idx").await.expect("exists");
    assert!(!exists, "the legacy index is still there");

    let e = hookgate::store::NewEntry {
        id: uuid::Uuid::now_v7().to_string(),
        source: "s".into(),
        event_id: Some("evt_1".into()),
        event_type: None,
        dedupe_key: "id:evt_1".into(),
        dedupe_ttl: std::time::Duration::from_secs(60),
        received_at: hookgate::store::now_ms(),
        headers: Vec::new(),
        body: bytes::Bytes::from_static(b"{}"),
    };
    let id = e.id.clone();
    store.accept(e).await.expect("accept");
    let page = store
        .list(&hookgate::store::ListQuery {
            source: Some("s".into()),
            limit: 10,
            ..Default::default()
        })
        .await
        .expect("list");
    assert_eq!(page.entries.len(), 1);
    assert_eq!(page.entries[0].id, id);
    assert_eq!(page.entries[0].attempts, 0);
    assert_eq!(store.count("s").await.expect("count"), 1);
    store.close().await;
}
