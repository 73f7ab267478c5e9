//! Behaviour of the Redis store that the conformance suite cannot see: how an entry
//! is laid out in Redis, and reaching Redis through its Unix socket.

use redis::AsyncCommands;

use crate::util::{Backend, StoreHandle};

/// A Redis store handle (not opened yet) and a plain connection to its Redis, to
/// look at what the store wrote.
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

/// An entry packs the fields written once into `record` (a JSON line, then the raw body),
/// whatever bytes its body and headers hold, and reads back the same.
#[tokio::test]
async fn entries_are_packed_and_read_back_byte_for_byte() {
    let (h, mut c) = redis_store().await;
    let store = h.open().await;
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
    assert!(fields.contains(&"record".to_string()), "{fields:?}");
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
    assert_eq!(ids, vec![id.as_str()]);
    assert_eq!(page.entries[0].event_id.as_deref(), Some("evt_new"));
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
