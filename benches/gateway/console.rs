//! The `console` scenario: how long each console page takes to render with a large
//! store behind it. Per store, a gateway takes `drain_entries` webhooks (100,000 in
//! a full run) through two routes: `ok` delivers each to the sink, `refused` to the
//! sink's `/refuse` path, which answers 422 (not retried), so every entry ends with
//! one delivered and one dead delivery (the worst case for the Dead letters page: one group as large as the
//! store). Then each page is fetched `PAGE_ROUNDS` times in a row over one
//! keep-alive connection, and its median and slowest times are reported against
//! `GET /healthz` fetched the same way (the HTTP round trip with no work behind it).

use std::time::{Duration, Instant};

use crate::load::prepare;
use crate::measure::median;
use crate::procs::{Store, start_gateway, start_redis, store_toml};
use crate::scenarios::ingest_backlog;
use crate::sink::start_sink;
use crate::{Report, Settings};

/// Fetches per page.
const PAGE_ROUNDS: usize = 20;

pub async fn console(report: &mut Report, store: Store, s: Settings) {
    let sink = start_sink(None, false).await;
    let redis = matches!(store, Store::Redis).then(start_redis);
    let dir = tempfile::tempdir().expect("tempdir");
    let routes = format!(
        "[[sources.routes]]\nname = \"ok\"\ndestination = \"http://127.0.0.1:{}/hook\"\n\
         [sources.routes.delivery]\nconcurrency = 64\n\
         [[sources.routes]]\nname = \"refused\"\ndestination = \"http://127.0.0.1:{}/refuse\"\n\
         [sources.routes.delivery]\nconcurrency = 64\n",
        sink.port, sink.port
    );
    let gw = start_gateway(
        dir.path(),
        &store_toml(store, dir.path(), redis.as_ref(), None),
        "",
        "[forwarder]\npoll_interval = \"100ms\"\n",
        &routes,
    );
    let admin = format!("http://127.0.0.1:{}", gw.admin);
    hookgate::tls::install_provider();
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(1)
        .build()
        .expect("client");
    let n = s.drain_entries;
    let started = Instant::now();
    ingest_backlog(gw.port, prepare(n, "console", None), s.connections).await;
    // Every entry ends: delivered through `ok`, dead through `refused`.
    let deadline = Instant::now() + Duration::from_secs(900);
    loop {
        let stats: serde_json::Value = client
            .get(format!("{admin}/admin/stats"))
            .send()
            .await
            .expect("stats")
            .json()
            .await
            .expect("stats json");
        let routes = &stats["sources"][0]["routes"];
        if routes[0]["delivered"] == n && routes[1]["dead"] == n {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the deliveries did not end: {stats}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    println!(
        "  {} entries stored and settled in {:.1} s",
        n,
        started.elapsed().as_secs_f64()
    );
    // An entry in the middle, for its page and for the event-id search: found as a
    // user finds it, page after page (on Redis a search page looks through about
    // 10,000 entries, then answers a cursor to go on from).
    let wanted = format!("evt_console_{}", n / 2);
    let mut cursor = String::new();
    let mut search_pages = 0;
    let id = loop {
        search_pages += 1;
        let list: serde_json::Value = client
            .get(format!(
                "{admin}/admin/entries?limit=50&event_id={wanted}&cursor={cursor}"
            ))
            .send()
            .await
            .expect("entry")
            .json()
            .await
            .expect("entry json");
        if let Some(id) = list["entries"][0]["id"].as_str() {
            break id.to_string();
        }
        cursor = list["next_cursor"]
            .as_str()
            .expect("the search to go on")
            .to_string();
    };
    println!("  the event-id search found {wanted} on its page {search_pages}");
    let page: serde_json::Value = client
        .get(format!("{admin}/admin/entries?limit={}", (n / 2).min(1000)))
        .send()
        .await
        .expect("a page")
        .json()
        .await
        .expect("page json");
    let deep = page["next_cursor"].as_str().expect("a cursor").to_string();
    let pages = [
        ("healthz (baseline)", "/healthz".to_string()),
        ("overview", "/console/".to_string()),
        ("entries", "/console/entries".to_string()),
        (
            "entries, a page deep",
            format!("/console/entries?cursor={deep}"),
        ),
        (
            "entries, status dead",
            "/console/entries?status=dead".to_string(),
        ),
        (
            "entries, route and status",
            "/console/entries?route=ok&status=delivered".to_string(),
        ),
        (
            "entries, event type",
            "/console/entries?event_type=payment_intent.succeeded".to_string(),
        ),
        (
            "entries, event-id search",
            format!("/console/entries?event_id=evt_console_{}", n / 2),
        ),
        (
            "entries, live poll",
            format!("/console/entries/live?after={id}"),
        ),
        ("entry", format!("/console/entries/{id}")),
        ("dead letters", "/console/dead-letters".to_string()),
        ("sources", "/console/sources".to_string()),
    ];
    let mut baseline = 0.0;
    let label = match store {
        Store::Embedded => "embedded",
        Store::Redis => "redis",
        Store::Postgres | Store::PostgresStandby => "postgres",
    };
    for (name, path) in pages {
        let mut times = Vec::with_capacity(PAGE_ROUNDS);
        for _ in 0..PAGE_ROUNDS {
            let t = Instant::now();
            let resp = client
                .get(format!("{admin}{path}"))
                .send()
                .await
                .expect("page");
            let status = resp.status();
            let body = resp.bytes().await.expect("page body");
            assert!(status.is_success(), "{name}: {status}");
            assert!(!body.is_empty(), "{name}: empty");
            times.push(t.elapsed().as_secs_f64() * 1000.0);
        }
        let slowest = times.iter().copied().fold(0.0, f64::max);
        let p50 = median(times);
        if baseline == 0.0 {
            baseline = p50;
        }
        report.add(format!(
            "console, {label}, {n} entries: {name}: median {p50:.1} ms, slowest {slowest:.1} ms ({:.0}× the healthz round trip)",
            p50 / baseline
        ));
    }
    drop(gw);
    drop(redis);
}
