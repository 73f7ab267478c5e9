//! Scenario `search`: payload search over a large store, and what an index costs
//! an accept.
//!
//! Per store: entries are accepted through the store's own `accept` (the gateway's
//! ingest path below HTTP, 256 at once), first in alternating batches without and
//! with one indexed value (the accept cost of an index, as a ratio of the two
//! rates in the same run), then up to `HOOKGATE_BENCH_SEARCH_ENTRIES` (default
//! 1,000,000) in all, each a small Stripe event whose `/data/object/customer` is
//! one of 100,000 customers (so each has ten entries). Then a gateway starts on
//! that store with `[sources.index] customer = "/data/object/customer"` and
//! answers searches through the admin API: 200 by a random indexed customer
//! (latency percentiles; the bound is under 50 ms) and a few by an unindexed
//! pointer, which read their 10,000-entry budget and say where they stopped.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use hdrhistogram::Histogram;
use hookgate::store::search::extract;
use hookgate::store::{Header, NewEntry, Origin};

use crate::procs::{Store, start_gateway, start_postgres, start_redis, store_toml};
use crate::scenarios::percentiles;
use crate::{Report, SECRET};

/// Customers the entries are spread over.
const CUSTOMERS: usize = 100_000;
/// Accepts in flight while seeding.
const CONCURRENCY: usize = 256;
/// Entries per batch of the accept-cost comparison.
const COST_BATCH: usize = 25_000;
const INDEX: (&str, &str) = ("customer", "/data/object/customer");

fn entry(i: usize, indexed: bool, ts: i64) -> NewEntry {
    let body = format!(
        r#"{{"id":"evt_s{i}","object":"event","type":"charge.succeeded","created":{ts},"data":{{"object":{{"id":"ch_{i}","customer":"cus_{}","amount":{}}}}}}}"#,
        i % CUSTOMERS,
        i % 997
    );
    let body = Bytes::from(body);
    let index = if indexed {
        extract(&[(INDEX.0.to_string(), INDEX.1.to_string())], &body)
    } else {
        Vec::new()
    };
    NewEntry {
        id: uuid::Uuid::now_v7().to_string(),
        source: "bench".into(),
        event_id: Some(format!("evt_s{i}")),
        event_type: Some("charge.succeeded".into()),
        dedupe_key: format!("id:evt_s{i}"),
        dedupe_ttl: Duration::from_secs(3600),
        received_at: hookgate::clock::system_now_ms(),
        headers: vec![Header {
            name: "content-type".into(),
            value: b"application/json".to_vec(),
        }],
        body,
        routes: vec!["default".into()],
        ordering: Vec::new(),
        index,
        origin: Origin::Received,
    }
}

/// Accept entries `from..to` (`indexed` or not), `CONCURRENCY` at once; the rate.
async fn accept_range(
    store: &Arc<dyn hookgate::store::Store>,
    from: usize,
    to: usize,
    indexed: bool,
) -> f64 {
    let started = Instant::now();
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(from));
    let ts = hookgate::clock::system_now_ms() / 1000;
    let mut tasks = Vec::new();
    for _ in 0..CONCURRENCY {
        let (store, next) = (store.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= to {
                    return;
                }
                let mut tries = 0;
                while let Err(e) = store.accept(entry(i, indexed, ts)).await {
                    tries += 1;
                    assert!(tries < 20, "accept {i}: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }));
    }
    for t in tasks {
        t.await.expect("accept task");
    }
    (to - from) as f64 / started.elapsed().as_secs_f64()
}

pub async fn search(report: &mut Report, kind: Store, smoke: bool) {
    let total = std::env::var("HOOKGATE_BENCH_SEARCH_ENTRIES")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(if smoke { 6_000 } else { 1_000_000 });
    let batch = if smoke { 500 } else { COST_BATCH };
    let dir = tempfile::tempdir().expect("tempdir");
    let redis = (kind == Store::Redis).then(start_redis);
    let pg = kind.is_postgres().then(|| start_postgres(false));
    let store_section = store_toml(kind, dir.path(), redis.as_ref(), pg.as_ref());
    let cfg = hookgate::config::from_toml_str(
        &format!(
            "{store_section}\n[[sources]]\nname = \"bench\"\nprovider = \"stripe\"\n\
             secret = \"{SECRET}\"\ndestination = \"http://127.0.0.1:9/\"\n"
        ),
        &|_| None,
    )
    .expect("config");
    let store = hookgate::store::open(&cfg.store, &hookgate::clock::Clock::system())
        .await
        .expect("open the store");
    // Nothing is delivered: the source is paused before the gateway starts.
    store.set_paused("bench", None, true).await.expect("pause");

    // The accept cost of an index: alternating batches, without then with.
    let (mut plain, mut indexed) = (Vec::new(), Vec::new());
    let mut at = 0;
    for _ in 0..4 {
        plain.push(accept_range(&store, at, at + batch, false).await);
        at += batch;
        indexed.push(accept_range(&store, at, at + batch, true).await);
        at += batch;
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    report.add(format!(
        "search {}: accepts without an index {:.0}/s, with one {:.0}/s: {:.2}× (batches of {batch}, alternating, {CONCURRENCY} at once)",
        kind.name(),
        mean(&plain),
        mean(&indexed),
        mean(&indexed) / mean(&plain)
    ));
    // The rest, indexed. (The plain batches' entries are in the store, unindexed.)
    let seeding = Instant::now();
    let rate = accept_range(&store, at, total.max(at), true).await;
    println!(
        "  seeded {} entries ({} indexed) in {:.0?} ({rate:.0}/s)",
        total.max(at),
        total.max(at) - 4 * batch,
        seeding.elapsed()
    );
    // The store's own calls, without the gateway around them: where a search's time
    // goes (`HOOKGATE_BENCH_EXPLAIN=1` prints PostgreSQL's plans as well).
    direct(&store, total.max(at)).await;
    if let (Some(pg), true) = (&pg, std::env::var_os("HOOKGATE_BENCH_EXPLAIN").is_some()) {
        explain(&pg.primary.url()).await;
    }
    store.close().await;
    drop(store);

    let gw = start_gateway(
        dir.path(),
        &store_section,
        "http://127.0.0.1:9/",
        "",
        &format!("[sources.index]\n{} = \"{}\"\n", INDEX.0, INDEX.1),
    );
    let client = reqwest::Client::new();
    let base = format!("http://127.0.0.1:{}/admin/entries?source=bench", gw.admin);
    let get = async |query: &str| -> (serde_json::Value, Duration) {
        let t = Instant::now();
        let r = client
            .get(format!("{base}&{query}"))
            .send()
            .await
            .expect("search");
        assert!(r.status().is_success(), "{query}: {}", r.status());
        let v: serde_json::Value = r.json().await.expect("json");
        (v, t.elapsed())
    };
    let mut rng = fastrand::Rng::with_seed(11);
    let mut h = Histogram::<u64>::new(3).expect("histogram");
    // The indexed entries: the second batch of each pair, and all after them.
    let mut indexed_ranges: Vec<(usize, usize)> = (0..4)
        .map(|b| ((2 * b + 1) * batch, (2 * b + 2) * batch))
        .collect();
    if total > at {
        indexed_ranges.push((at, total));
    }
    let rounds = if smoke { 20 } else { 200 };
    for _ in 0..rounds {
        let (from, to) = indexed_ranges[rng.usize(0..indexed_ranges.len())];
        let c = rng.usize(from..to) % CUSTOMERS;
        let (v, took) = get(&format!("match=/data/object/customer:cus_{c}&limit=50")).await;
        assert_eq!(v["search"]["index"], "customer", "{v}");
        assert!(
            !v["entries"].as_array().expect("entries").is_empty(),
            "cus_{c}: {v}"
        );
        h.record(took.as_micros() as u64).expect("record");
    }
    report.add(format!(
        "search {}: by the index over {} entries, {rounds} searches: {} (bound: under 50 ms)",
        kind.name(),
        total.max(at),
        percentiles(&h)
    ));
    let (v, took) = get("match=/data/object/amount:123456&limit=50").await;
    report.add(format!(
        "search {}: unindexed, read {} entries in {:.0?}, complete {}, stopped at {}",
        kind.name(),
        v["search"]["scanned"],
        took,
        v["search"]["complete"],
        v["search"]["stopped_at"]
    ));
    drop(gw);
}

/// The time of the store calls a search by index makes: `indexed` and `get_many`.
async fn direct(store: &Arc<dyn hookgate::store::Store>, total: usize) {
    let mut rng = fastrand::Rng::with_seed(5);
    let (mut lookups, mut loads) = (Vec::new(), Vec::new());
    for _ in 0..50 {
        let c = rng.usize(0..total.min(CUSTOMERS));
        let t = Instant::now();
        let ids = store
            .indexed(&hookgate::store::IndexLookup {
                source: "bench".into(),
                name: INDEX.0.into(),
                values: vec![format!("\"cus_{c}\"")],
                below: None,
                floor: None,
                limit: 51,
            })
            .await
            .expect("indexed");
        lookups.push(t.elapsed());
        let keys: Vec<(String, String)> = ids.into_iter().map(|id| ("bench".into(), id)).collect();
        let t = Instant::now();
        store.get_many(&keys).await.expect("get_many");
        loads.push(t.elapsed());
    }
    lookups.sort();
    loads.sort();
    // A scan's round: a page of 500 listed, then read whole.
    let t = Instant::now();
    let page = store
        .list(&hookgate::store::ListQuery {
            source: Some("bench".into()),
            limit: 500,
            ..Default::default()
        })
        .await
        .expect("list");
    let listed = t.elapsed();
    let keys: Vec<(String, String)> = page.entries.into_iter().map(|e| (e.source, e.id)).collect();
    let t = Instant::now();
    store.get_many(&keys).await.expect("get_many");
    println!(
        "  direct: a scan round of 500: list {listed:.2?}, get_many {:.2?}",
        t.elapsed()
    );
    println!(
        "  direct: indexed p50 {:.2?} max {:.2?}; get_many p50 {:.2?} max {:.2?}",
        lookups[25], lookups[49], loads[25], loads[49]
    );
}

/// PostgreSQL's plans of a search's statements, executed.
async fn explain(url: &str) {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("connect");
    tokio::spawn(conn);
    let schema: String = client
        .query_one(
            "SELECT table_schema::text FROM information_schema.tables WHERE table_name = 'entry_index'",
            &[],
        )
        .await
        .expect("schema")
        .get(0);
    client
        .batch_execute(&format!("SET search_path = {schema}"))
        .await
        .expect("search_path");
    for sql in [
        "EXPLAIN (ANALYZE, BUFFERS) SELECT e.id, e.source, e.event_id, e.event_type, e.received_at, e.status, \
     (SELECT coalesce(sum(x.attempts), 0)::int8 FROM deliveries x WHERE x.entry_id = e.id), \
     (SELECT min(x.next_attempt_at) FROM deliveries x \
        WHERE x.entry_id = e.id AND x.status = 'pending'), \
     (SELECT x.last_error FROM deliveries x \
        WHERE x.entry_id = e.id AND x.status <> 'delivered' AND x.last_error IS NOT NULL \
        ORDER BY x.position LIMIT 1) FROM entries e WHERE e.source = 'bench' ORDER BY e.id DESC LIMIT 501",
        "EXPLAIN (ANALYZE, BUFFERS) SELECT id, body FROM unnest(ARRAY(SELECT id FROM entries WHERE source = 'bench' ORDER BY id DESC LIMIT 500)) AS k(want) JOIN entries ON entries.id = k.want COLLATE \"C\"",
    ] {
        println!("  {sql}");
        for row in client.query(sql, &[]).await.expect("explain") {
            println!("    {}", row.get::<_, String>(0));
        }
    }
}
