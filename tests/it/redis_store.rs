//! Behaviour of the Redis store that the conformance suite cannot see: what it does
//! with data an earlier version left in Redis, and reaching Redis through its Unix socket.

use redis::AsyncCommands;

use crate::util::{Backend, StoreHandle};

/// A Redis store handle (not opened yet) and a plain connection to its Redis, to
/// write what an earlier version would have left there.
async fn redis_store() -> (StoreHandle, redis::aio::MultiplexedConnection) {
    let h = StoreHandle::new(Backend::Redis);
    let url = h.redis.as_ref().expect("redis").url();
    let client = redis::Client::open(url).expect("client");
    let c = client
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    (h, c)
}

/// The first page (up to 10) of a source's entries, newest first.
async fn list_source(store: &dyn hookgate::store::Store, source: &str) -> hookgate::store::Page {
    store
        .list(&hookgate::store::ListQuery {
            source: Some(source.into()),
            limit: 10,
            ..Default::default()
        })
        .await
        .expect("list")
}

/// Earlier versions also kept every id in `hg:{src}:idx`; listing now merges the
/// status sets, and opening the store drops that set. Entries stay listable.
#[tokio::test]
async fn opening_drops_the_legacy_index_and_keeps_entries_listable() {
    let (h, mut c) = redis_store().await;
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
    let page = list_source(&*store, "s").await;
    assert_eq!(page.entries.len(), 1);
    assert_eq!(page.entries[0].id, id);
    assert_eq!(page.entries[0].attempts, 0);
    assert_eq!(store.count("s").await.expect("count"), 1);
    store.close().await;
}

/// Entries written by earlier versions hold every field on its own in the hash; new
/// ones pack the fields written once into `d`. Both read the same.
#[tokio::test]
async fn entries_in_the_earlier_layout_read_as_before_and_new_ones_are_packed() {
    let (h, mut c) = redis_store().await;
    let old_id = "0197a000-0000-7000-8000-0000000000aa";
    let _: () = c.sadd("hg:sources", "s").await.expect("sadd");
    let _: () = c
        .hset_multiple(
            format!("hg:{{s}}:e:{old_id}"),
            &[
                ("source", "s"),
                ("event_id", "evt_old"),
                ("event_type", "invoice.paid"),
                ("dedupe_key", "id:evt_old"),
                ("received_at", "1700000000000"),
                ("status", "pending"),
                ("next_attempt_at", "1700000000500"),
                ("attempts", "2"),
                ("last_error", "HTTP 503"),
                ("headers", r#"[["content-type","application/json"]]"#),
                ("body", "{\"old\":\n1}"),
            ],
        )
        .await
        .expect("hset");
    let _: () = c.zadd("hg:{s}:st:pending", old_id, 0).await.expect("zadd");

    let store = h.open().await;
    let old = store.get(old_id).await.expect("get").expect("old entry");
    assert_eq!(old.source, "s");
    assert_eq!(old.event_id.as_deref(), Some("evt_old"));
    assert_eq!(old.event_type.as_deref(), Some("invoice.paid"));
    assert_eq!(old.dedupe_key, "id:evt_old");
    assert_eq!(old.received_at, 1_700_000_000_000);
    assert_eq!(old.budget_start, 1_700_000_000_000);
    assert_eq!(old.next_attempt_at, Some(1_700_000_000_500));
    assert_eq!(old.attempts, 2);
    assert_eq!(old.last_error.as_deref(), Some("HTTP 503"));
    assert_eq!(old.headers.len(), 1);
    assert_eq!(old.headers[0].name, "content-type");
    assert_eq!(&old.body[..], b"{\"old\":\n1}");

    // A new entry whose body holds newlines and bytes that are not UTF-8, and a header
    // value that is not UTF-8 either.
    let body: &[u8] = b"{\"a\":\n\"\xff\xfe\"}\n\n";
    let e = hookgate::store::NewEntry {
        id: uuid::Uuid::now_v7().to_string(),
        source: "s".into(),
        event_id: Some("evt_new".into()),
        event_type: None,
        dedupe_key: "id:evt_new".into(),
        dedupe_ttl: std::time::Duration::from_secs(60),
        received_at: 1_700_000_001_000,
        headers: vec![hookgate::store::Header {
            name: "x-raw".into(),
            value: vec![0xff, b'\n', 0x00],
        }],
        body: bytes::Bytes::from_static(body),
    };
    let id = e.id.clone();
    store.accept(e).await.expect("accept");
    let fields: Vec<String> = c.hkeys(format!("hg:{{s}}:e:{id}")).await.expect("hkeys");
    assert!(fields.contains(&"d".to_string()), "{fields:?}");
    assert!(!fields.contains(&"body".to_string()), "{fields:?}");
    let new = store.get(&id).await.expect("get").expect("new entry");
    assert_eq!(new.source, "s");
    assert_eq!(new.event_id.as_deref(), Some("evt_new"));
    assert_eq!(new.event_type, None);
    assert_eq!(new.dedupe_key, "id:evt_new");
    assert_eq!(new.received_at, 1_700_000_001_000);
    assert_eq!(new.budget_start, 1_700_000_001_000);
    assert_eq!(new.attempts, 0);
    assert_eq!(new.headers[0].value, vec![0xff, b'\n', 0x00]);
    assert_eq!(&new.body[..], body);

    let page = list_source(&*store, "s").await;
    let ids: Vec<&str> = page.entries.iter().map(|e| e.id.as_str()).collect();
    assert_eq!(ids, vec![id.as_str(), old_id]);
    store.close().await;
}

/// Redis on the gateway's own host can be reached through its Unix socket
/// (`redis+unix://`): webhooks are acknowledged, deduplicated and stored as over TCP.
#[tokio::test]
async fn the_gateway_stores_through_a_unix_socket() {
    let h = StoreHandle::new(Backend::Redis);
    let redis = h.redis.as_ref().expect("redis");
    let text = format!(
        "[store]\nkind = \"redis\"\nurl = \"{}\"\n{}",
        redis.unix_url(),
        crate::util::sources_toml()
    );
    let cfg = hookgate::config::from_toml_str(&text, &|_| None).expect("config");
    let gw = crate::util::Gateway::start(cfg).await;
    let client = crate::util::http();
    let body = crate::util::event_body("stripe", "evt_unix_1");

    let (status, first) =
        crate::util::post_signed(&client, &gw, "stripe", &body, "evt_unix_1").await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(first["duplicate"], false);
    let (status, again) =
        crate::util::post_signed(&client, &gw, "stripe", &body, "evt_unix_1").await;
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["duplicate"], true);
    assert_eq!(again["id"], first["id"]);
    gw.stop().await;

    // Stored in that Redis: the same store read over TCP holds the entry and its body.
    let store = h.open().await;
    let page = list_source(store.as_ref(), "stripe").await;
    assert_eq!(page.entries.len(), 1);
    let id = first["id"].as_str().expect("id");
    let entry = store.get(id).await.expect("get").expect("stored");
    assert_eq!(entry.body.as_ref(), body.as_slice());
}
