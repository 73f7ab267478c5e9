//! Behaviour of the Redis store that the conformance suite cannot see: how an entry
//! is laid out in Redis, reaching Redis through its Unix socket, and the migration of
//! a Redis written before routes existed (and the refusal of one a newer release wrote).

use std::collections::HashMap;

use redis::AsyncCommands;

use crate::support::{Backend, StoreHandle};

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
        routes: vec!["default".into()],
        ordering: Vec::new(),
        index: Vec::new(),
        origin: hookgate::store::Origin::Received,
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
    assert_eq!(
        new.delivery("default").unwrap().budget_start,
        1_700_000_001_000
    );
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
        crate::support::sources_toml()
    );
    let cfg = hookgate::config::from_toml_str(&text, &|_| None).expect("config");
    let gw = crate::support::Gateway::start(cfg).await;
    let client = crate::support::http();
    let body = crate::support::event_body("stripe", "evt_unix_1");

    let (status, first) =
        crate::support::post_signed(&client, &gw, "stripe", &body, "evt_unix_1").await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(first["duplicate"], false);
    let (status, again) =
        crate::support::post_signed(&client, &gw, "stripe", &body, "evt_unix_1").await;
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

/// How many times Redis ran each command, from `INFO commandstats` (commands a
/// script runs count too).
async fn command_calls(c: &mut redis::aio::MultiplexedConnection) -> HashMap<String, u64> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(c)
        .await
        .unwrap();
    info.lines()
        .filter_map(|l| l.strip_prefix("cmdstat_"))
        .filter_map(|l| {
            let (name, rest) = l.split_once(':')?;
            let calls = rest.strip_prefix("calls=")?.split(',').next()?;
            Some((name.to_string(), calls.parse().ok()?))
        })
        .collect()
}

/// What accepting one entry costs Redis: `SET NX` (dedupe), `HSET` (the entry),
/// `ZADD st:pending`, and per route an `XADD` to its work stream and a `ZADD` to its
/// pending index; `HINCRBY received` and the activity counter's `HINCRBY` (one per
/// minute of arrival) are per batch. The entry hash holds the record,
/// the routes, the status and one stream message per route, nothing more: every
/// other field means its default. A filtered entry writes no message.
#[tokio::test]
async fn accept_writes_one_message_and_one_index_entry_per_route() {
    let (h, mut c) = redis_store().await;
    let store = h.open().await;
    let routed = |key: &str, routes: &[&str]| {
        let mut e = crate::conformance::entry("s", key);
        e.routes = routes.iter().map(|r| r.to_string()).collect();
        e
    };
    // The source's first accept also registers it.
    store.accept(routed("evt_first", &["a"])).await.unwrap();
    for routes in [vec!["a"], vec!["a", "b"], vec!["a", "b", "c"]] {
        let before = command_calls(&mut c).await;
        let e = routed(&format!("evt_{}", routes.len()), &routes);
        let id = e.id.clone();
        store.accept(e).await.unwrap();
        let after = command_calls(&mut c).await;
        let ran = |cmd: &str| after.get(cmd).unwrap_or(&0) - before.get(cmd).unwrap_or(&0);
        let k = routes.len() as u64;
        assert_eq!(
            (
                ran("set"),
                ran("hset"),
                ran("xadd"),
                ran("zadd"),
                ran("hincrby")
            ),
            (1, 1, k, 1 + k, 2),
            "{routes:?}"
        );
        let mut fields: Vec<String> = c.hkeys(format!("hg:{{s}}:e:{id}")).await.unwrap();
        fields.sort();
        let mut want = vec!["record", "routes", "status"];
        let msgs: Vec<String> = routes.iter().map(|r| format!("{r}:msg")).collect();
        want.extend(msgs.iter().map(String::as_str));
        want.sort();
        assert_eq!(fields, want);
        for r in &routes {
            let pending: Vec<String> = c
                .zrange(format!("hg:{{s}}:rst:{r}:pending"), 0, -1)
                .await
                .unwrap();
            assert!(pending.contains(&id), "{r}");
        }
    }
    let before = command_calls(&mut c).await;
    store.accept(routed("evt_none", &[])).await.unwrap();
    let after = command_calls(&mut c).await;
    assert_eq!(
        after.get("xadd"),
        before.get("xadd"),
        "a filtered entry queues nothing"
    );
    store.close().await;
}

/// An entry hash of the layout before routes: the packed record of an entry of
/// source `old` with event id `key`, received at `at`, and its delivery fields.
fn old_entry_fields(key: &str, at: i64, fields: &[(&str, String)]) -> Vec<(String, Vec<u8>)> {
    let meta = serde_json::json!({
        "source": "old",
        "event_id": key,
        "event_type": "thing.happened",
        "dedupe_key": format!("id:{key}"),
        "received_at": at,
        "headers": [["content-type", "application/json"]],
    });
    let mut record = serde_json::to_vec(&meta).unwrap();
    record.push(b'\n');
    record.extend_from_slice(format!("{{\"id\":\"{key}\"}}").as_bytes());
    let mut out = vec![("record".to_string(), record)];
    out.extend(
        fields
            .iter()
            .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec())),
    );
    out
}

/// What [`write_old_layout`] wrote: source `old`, its entries received at `at`.
pub(crate) struct OldLayout {
    pub at: i64,
    /// Pending, its message read by a consumer that died without acknowledging it.
    pub leased: String,
    pub leased_message: String,
    /// Pending, its message not read yet.
    pub queued: String,
    /// Pending, waiting in the schedule for its retry (due), after one attempt.
    pub retry: String,
    /// Delivered after one attempt.
    pub delivered: String,
    /// Dead after three attempts, one of its budget.
    pub dead: String,
}

/// The key `rest` of source `old`.
fn old_key(rest: &str) -> String {
    format!("hg:{{old}}:{rest}")
}

/// Write source `old` as the gateway before routes wrote it: the work stream with its
/// consumer group, the schedule, the status and retention indexes, entry hashes with
/// their delivery state, attempts and audit records without a route.
pub(crate) async fn write_old_layout(
    c: &mut (impl redis::aio::ConnectionLike + Send + Sync),
) -> OldLayout {
    let now = hookgate::clock::system_now_ms();
    let at = now - 60_000;
    let id = |n: u64| {
        let ts = uuid::Timestamp::from_unix(uuid::NoContext, (at as u64 + n) / 1000, 0);
        uuid::Uuid::new_v7(ts).to_string()
    };
    let k = old_key;
    let old_attempt = |n: u32, code: u16| {
        serde_json::json!({"n": n, "at": at + 1_000, "status_code": code, "error": null,
            "latency_ms": 5})
        .to_string()
    };
    let old = OldLayout {
        at,
        leased: id(0),
        leased_message: String::new(),
        queued: id(1000),
        retry: id(2000),
        delivered: id(3000),
        dead: id(4000),
    };
    let _: () = c.sadd("hg:sources", "old").await.unwrap();
    let _: () = redis::cmd("XGROUP")
        .arg("CREATE")
        .arg(k("work"))
        .arg("workers")
        .arg("0")
        .arg("MKSTREAM")
        .query_async(c)
        .await
        .unwrap();
    let m_leased: String = c
        .xadd(k("work"), "*", &[("id", &old.leased)])
        .await
        .unwrap();
    // A consumer reads the first message and dies without acknowledging it.
    let _: redis::Value = redis::cmd("XREADGROUP")
        .arg("GROUP")
        .arg("workers")
        .arg("gone")
        .arg("COUNT")
        .arg(1)
        .arg("STREAMS")
        .arg(k("work"))
        .arg(">")
        .query_async(c)
        .await
        .unwrap();
    let m_queued: String = c
        .xadd(k("work"), "*", &[("id", &old.queued)])
        .await
        .unwrap();
    let s = |v: i64| v.to_string();
    let entries = [
        (
            &old.leased,
            "evt_leased",
            vec![
                ("status", "pending".into()),
                ("next_attempt_at", s(at)),
                ("msg", m_leased.clone()),
                ("lease", "token-of-the-dead".into()),
            ],
        ),
        (
            &old.queued,
            "evt_queued",
            vec![
                ("status", "pending".into()),
                ("next_attempt_at", s(at)),
                ("msg", m_queued),
            ],
        ),
        (
            &old.retry,
            "evt_retry",
            vec![
                ("status", "pending".into()),
                ("next_attempt_at", s(now - 1_000)),
                ("attempts", "1".into()),
                ("lease", String::new()),
                ("msg", String::new()),
                ("last_error", "HTTP 503".into()),
                ("updated_at", s(at + 1_000)),
            ],
        ),
        (
            &old.delivered,
            "evt_delivered",
            vec![
                ("status", "delivered".into()),
                ("next_attempt_at", String::new()),
                ("attempts", "1".into()),
                ("lease", String::new()),
                ("msg", String::new()),
                ("updated_at", s(at + 1_000)),
            ],
        ),
        (
            &old.dead,
            "evt_dead",
            vec![
                ("status", "dead".into()),
                ("next_attempt_at", String::new()),
                ("attempts", "3".into()),
                ("budget_start", s(at + 500)),
                ("budget_attempts", "1".into()),
                ("last_error", "HTTP 410".into()),
                ("updated_at", s(at + 1_000)),
            ],
        ),
    ];
    for (id, key, fields) in &entries {
        let fields = old_entry_fields(key, at, fields);
        let _: () = c
            .hset_multiple(k(&format!("e:{id}")), &fields)
            .await
            .unwrap();
        let _: () = c.set(k(&format!("d:id:{key}")), id.as_str()).await.unwrap();
    }
    for (status, ids) in [
        ("pending", vec![&old.leased, &old.queued, &old.retry]),
        ("delivered", vec![&old.delivered]),
        ("dead", vec![&old.dead]),
    ] {
        for id in ids {
            let _: () = c.zadd(k(&format!("st:{status}")), id, 0).await.unwrap();
        }
    }
    let _: () = c.zadd(k("sched"), &old.retry, now - 1_000).await.unwrap();
    let _: () = c
        .zadd(k("done:delivered"), &old.delivered, at + 1_000)
        .await
        .unwrap();
    let _: () = c.zadd(k("done:dead"), &old.dead, at + 1_000).await.unwrap();
    let _: () = c
        .rpush(k(&format!("a:{}", old.retry)), old_attempt(1, 503))
        .await
        .unwrap();
    let _: () = c
        .rpush(k(&format!("a:{}", old.delivered)), old_attempt(1, 200))
        .await
        .unwrap();
    let audit = serde_json::json!({"at": at + 900, "action": "replay", "actor": "ops",
        "note": null});
    let _: () = c
        .rpush(k(&format!("audit:{}", old.dead)), audit.to_string())
        .await
        .unwrap();
    let _: () = c.hset(k("stats"), "received", 5).await.unwrap();
    OldLayout {
        leased_message: m_leased,
        ..old
    }
}

/// What the store shows of source `old` once migrated: each entry has one delivery,
/// through the default route, holding what the entry had; nothing of the old layout
/// is left.
pub(crate) async fn assert_migrated(
    store: &dyn hookgate::store::Store,
    c: &mut (impl redis::aio::ConnectionLike + Send + Sync),
    old: &OldLayout,
) {
    use hookgate::store::Status;
    let k = old_key;
    let schema: Option<String> = c.get(k("schema")).await.unwrap();
    assert_eq!(schema.as_deref(), Some("2"));
    for (key, there) in [
        ("work", false),
        ("sched", false),
        ("work:default", true),
        ("sched:default", true),
    ] {
        let exists: bool = c.exists(k(key)).await.unwrap();
        assert_eq!(exists, there, "{key}");
    }
    let fields: HashMap<String, Vec<u8>> =
        c.hgetall(k(&format!("e:{}", old.leased))).await.unwrap();
    let text = |f: &str| {
        fields
            .get(f)
            .map(|v| String::from_utf8_lossy(v).into_owned())
    };
    assert_eq!(text("routes").as_deref(), Some("default"));
    assert_eq!(text("default:msg"), Some(old.leased_message.clone()));
    assert_eq!(text("default:status").as_deref(), Some("pending"));
    for gone in ["msg", "lease", "next_attempt_at"] {
        assert_eq!(text(gone), None, "{gone}");
    }
    for (status, want) in [
        ("pending", vec![&old.leased, &old.queued, &old.retry]),
        ("delivered", vec![&old.delivered]),
        ("dead", vec![&old.dead]),
    ] {
        let got: Vec<String> = c
            .zrange(k(&format!("rst:default:{status}")), 0, -1)
            .await
            .unwrap();
        assert_eq!(got.iter().collect::<Vec<_>>(), want, "{status}");
    }
    let e = store.get(&old.dead).await.unwrap().expect("the dead entry");
    assert_eq!((e.status, e.attempts), (Status::Dead, 3));
    assert_eq!(e.last_error.as_deref(), Some("HTTP 410"));
    assert_eq!(e.deliveries.len(), 1);
    let d = e.delivery("default").expect("a default delivery");
    assert_eq!((d.status, d.attempts), (Status::Dead, 3));
    assert_eq!((d.budget_start, d.budget_attempts), (old.at + 500, 1));
    let e = store
        .get(&old.retry)
        .await
        .unwrap()
        .expect("the retried entry");
    let d = e.delivery("default").expect("a default delivery");
    assert_eq!((d.attempts, d.budget_start), (1, old.at));
    assert_eq!(d.last_error.as_deref(), Some("HTTP 503"));
    assert_eq!(e.next_attempt_at, d.next_attempt_at);
    assert_eq!(store.audit(&old.dead).await.unwrap()[0].route, None);
    let st = store.stats("old").await.unwrap();
    assert_eq!(
        (st.received, st.pending, st.delivered, st.dead),
        (5, 3, 1, 1)
    );
    let rs = store.route_stats("old", "default").await.unwrap();
    assert_eq!(
        (rs.pending, rs.delivered, rs.dead, rs.oldest_pending_at),
        (3, 1, 1, Some(old.at))
    );
}

/// Claim the pending entries of source `old` on route "default" until all three are
/// (the one the dead consumer held once its lease is over) and deliver them; their
/// attempts, old and new, list as route "default", and the work stream is left empty.
pub(crate) async fn deliver_old_pending(
    store: &dyn hookgate::store::Store,
    c: &mut (impl redis::aio::ConnectionLike + Send + Sync),
    old: &OldLayout,
) {
    use hookgate::store::{Attempt, Completion, Status};
    let lease = std::time::Duration::from_millis(200);
    let mut claimed = Vec::new();
    crate::support::wait_until("the three pending entries claimed", DEADLINE, async || {
        let t = hookgate::clock::system_now_ms();
        for claim in store
            .claim("old", "default", "w", t, 10, lease)
            .await
            .unwrap()
        {
            assert_eq!(claim.delivery.route, "default");
            let attempt = Attempt {
                route: "default".into(),
                n: claim.delivery.attempts + 1,
                at: t,
                status_code: Some(200),
                failure: None,
                error: None,
                latency_ms: 1,
                answer: None,
            };
            let done = Completion::Delivered { attempt };
            assert!(store.complete(&claim, "w", done, t).await.unwrap());
            claimed.push(claim.entry.id.clone());
        }
        claimed.len() >= 3
    })
    .await;
    claimed.sort();
    assert_eq!(
        claimed,
        vec![old.leased.clone(), old.queued.clone(), old.retry.clone()]
    );
    for id in [&old.leased, &old.queued, &old.retry] {
        let e = store.get(id).await.unwrap().unwrap();
        assert_eq!(e.status, Status::Delivered, "{id}");
    }
    let attempts = store.attempts(&old.retry).await.unwrap();
    assert!(
        attempts.iter().all(|a| a.route == "default"),
        "{attempts:?}"
    );
    assert_eq!(attempts.iter().map(|a| a.n).collect::<Vec<_>>(), vec![1, 2]);
    assert_eq!(
        store.attempts(&old.delivered).await.unwrap()[0].route,
        "default"
    );
    let pending: redis::streams::StreamPendingReply = c
        .xpending(old_key("work:default"), "workers")
        .await
        .unwrap();
    assert_eq!(pending.count(), 0, "nothing left pending in the stream");
    let len: u64 = c.xlen(old_key("work:default")).await.unwrap();
    assert_eq!(len, 0);
    let later = hookgate::clock::system_now_ms() + 3_600_000;
    assert!(
        store
            .claim("old", "default", "w", later, 10, lease)
            .await
            .unwrap()
            .is_empty()
    );
}

/// Every key of a Redis and its serialized value: what a run changed, if anything.
async fn snapshot(c: &mut redis::aio::MultiplexedConnection) -> Vec<(String, Vec<u8>)> {
    let mut keys: Vec<String> = c.keys("*").await.unwrap();
    keys.sort();
    let mut out = Vec::new();
    for k in keys {
        let v: Vec<u8> = redis::cmd("DUMP").arg(&k).query_async(c).await.unwrap();
        out.push((k, v));
    }
    out
}

/// A Redis written before routes existed (one work stream and schedule per source,
/// the delivery state in the entry hash) is migrated once at open: each entry gets a
/// delivery through the default route holding what it had, and a second open changes
/// nothing. Its pending entries are then claimed and delivered on route "default",
/// including one whose message a consumer read and never acknowledged (claimed again
/// after the lease), and one waiting for its retry; old attempts list as route
/// "default".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_written_before_routes_is_migrated_once_and_delivers() {
    let (h, mut c) = redis_store().await;
    let old = write_old_layout(&mut c).await;
    let store = h.open().await;
    assert_migrated(&*store, &mut c, &old).await;

    // A second open changes nothing.
    store.close().await;
    drop(store);
    let before = snapshot(&mut c).await;
    let store = h.open().await;
    assert_eq!(
        snapshot(&mut c).await,
        before,
        "a second open changed the store"
    );
    deliver_old_pending(&*store, &mut c, &old).await;
}

/// How long the tests here wait for what the store shows.
const DEADLINE: std::time::Duration = std::time::Duration::from_secs(10);

/// A source a newer release migrated (its schema key names a layout this one does
/// not know) is refused at open rather than misread.
#[tokio::test]
async fn a_store_in_a_newer_layout_is_refused_at_open() {
    let (h, mut c) = redis_store().await;
    let _: () = c.sadd("hg:sources", "s").await.unwrap();
    let _: () = c.set("hg:{s}:schema", "3").await.unwrap();
    let cfg = hookgate::config::from_toml_str(&h.toml(), &|_| None).unwrap();
    let refused = hookgate::store::open(&cfg.store, &hookgate::clock::Clock::system()).await;
    let text = refused.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(text.contains("newer release"), "{text}");
    assert!(text.contains("\"3\""), "{text}");
}
