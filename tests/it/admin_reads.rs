//! Admin reads are bounded: a listing never reads bodies or headers (the gateway's
//! memory stays flat under `limit=1000` of 1 MiB bodies), bulk operations page ids
//! only, and `/readyz` answers while listings run.

use std::time::{Duration, Instant};

use bytes::Bytes;
use hookgate::clock::system_now_ms as now_ms;
use hookgate::store::{Completion, ListQuery, NewEntry, Status, Store};

use crate::conformance::entry;
use crate::for_each_fresh_store;
use crate::support::*;

/// A new entry of `source` with event id `key`, of `event_type`, holding `body`.
fn new_entry(source: &str, key: &str, event_type: &str, body: Bytes) -> NewEntry {
    NewEntry {
        event_type: Some(event_type.to_string()),
        body,
        ..entry(source, key)
    }
}

/// Every page of `list` and of `list_ids` for `query`, with `limit` per page.
async fn pages(store: &dyn Store, query: &ListQuery) -> (Vec<Vec<String>>, Vec<Vec<String>>) {
    let mut listed = Vec::new();
    let mut q = query.clone();
    loop {
        let page = store.list(&q).await.unwrap();
        listed.push(page.entries.iter().map(|e| e.id.clone()).collect());
        assert_listed_as_stored(store, &page.entries).await;
        match page.next_cursor {
            Some(c) => q.cursor = Some(c),
            None => break,
        }
    }
    let mut ids = Vec::new();
    let mut q = query.clone();
    loop {
        let page = store.list_ids(&q).await.unwrap();
        ids.push(page.ids);
        match page.next_cursor {
            Some(c) => q.cursor = Some(c),
            None => break,
        }
    }
    (listed, ids)
}

async fn listings_and_id_pages_agree(store: &dyn Store) {
    for i in 0..30 {
        let source = if i % 3 == 0 { "a" } else { "b" };
        let kind = if i % 2 == 0 { "even" } else { "odd" };
        let e = new_entry(source, &format!("evt_{i}"), kind, Bytes::from_static(b"{}"));
        store.accept(e).await.unwrap();
    }
    // A few of "b" die, with an attempt and a reason.
    let claims = store
        .claim("b", "default", "w", now_ms(), 4, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(claims.len(), 4);
    for c in &claims {
        let done = Completion::Dead {
            attempt: Some(hookgate::store::Attempt {
                route: "default".into(),
                n: 1,
                at: now_ms(),
                status_code: Some(404),
                failure: Some(hookgate::failure::Failure::Status(404)),
                error: None,
                latency_ms: 3,
                answer: None,
            }),
            reason: "HTTP 404".into(),
        };
        assert!(store.complete(c, "w", done, now_ms()).await.unwrap());
    }
    let queries = [
        ListQuery::default(),
        ListQuery {
            source: Some("a".into()),
            ..Default::default()
        },
        ListQuery {
            status: Some(Status::Dead),
            ..Default::default()
        },
        ListQuery {
            event_type: Some("odd".into()),
            ..Default::default()
        },
        ListQuery {
            source: Some("b".into()),
            status: Some(Status::Pending),
            event_type: Some("even".into()),
            ..Default::default()
        },
    ];
    for mut q in queries {
        q.limit = 7;
        let (listed, ids) = pages(store, &q).await;
        assert_eq!(listed, ids, "list and list_ids page alike for {q:?}");
        assert!(listed.iter().all(|p| p.len() <= 7));
    }
    let dead = first_page_with_status(store, Status::Dead, 10).await;
    assert_eq!(dead.entries.len(), 4);
    for e in &dead.entries {
        assert_eq!(e.attempts, 1);
        assert_eq!(e.last_error.as_deref(), Some("HTTP 404"));
        assert!(
            e.event_id
                .as_deref()
                .is_some_and(|id| id.starts_with("evt_"))
        );
    }
}
for_each_fresh_store!(
    listed_entries_and_id_pages_agree,
    super::listings_and_id_pages_agree
);

/// The kB figures of `/proc/<pid>/status` lines `VmRSS` and `VmHWM` (peak).
fn memory_kib(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or_else(|| panic!("{name} in /proc/{pid}/status"))
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// `n` entries of 1 MiB each, then `limit=1000` listings on a child gateway: its
/// peak memory grows by far less than the bodies, and `/readyz` answers within 1 s
/// throughout.
async fn a_large_listing_stays_small(backend: Backend, n: usize) {
    let h = StoreHandle::new(backend);
    {
        let store = h.open().await;
        let body = Bytes::from(vec![b'x'; 1024 * 1024]);
        let mut tasks = Vec::new();
        for w in 0..8 {
            let store = store.clone();
            let body = body.clone();
            tasks.push(tokio::spawn(async move {
                for i in (w..n).step_by(8) {
                    let e = new_entry("big", &format!("evt_big_{i}"), "big", body.clone());
                    store.accept(e).await.unwrap();
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        store.close().await;
    }
    let dir = tempfile::tempdir().unwrap();
    // "big" is not a configured source: nothing delivers (or claims) its entries.
    let config = config_file(&h, dir.path());
    let gw = ChildGateway::spawn(&config, &[], &dir.path().join("stderr.log"));
    let pid = gw.child.id();
    let client = http();
    let (rss_before, _) = memory_kib(pid);

    let admin = gw.admin.clone();
    let lister = {
        let client = client.clone();
        tokio::spawn(async move {
            for _ in 0..3 {
                let resp = client
                    .get(format!("{admin}/admin/entries?limit=1000"))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(resp.status(), 200);
                let list: serde_json::Value = resp.json().await.unwrap();
                assert_eq!(list["entries"].as_array().map(Vec::len), Some(n.min(1000)));
            }
        })
    };
    let mut probes = 0;
    loop {
        let started = Instant::now();
        let resp = tokio::time::timeout(
            Duration::from_secs(1),
            client.get(format!("{}/readyz", gw.admin)).send(),
        )
        .await
        .expect("/readyz answers within 1 s while a listing runs")
        .unwrap();
        assert_eq!(resp.status(), 200, "after {:?}", started.elapsed());
        probes += 1;
        if lister.is_finished() {
            break;
        }
    }
    lister.await.unwrap();
    let (_, peak) = memory_kib(pid);
    eprintln!(
        "{probes} /readyz probes during the listings; peak {peak} KiB, before {rss_before} KiB"
    );
    let growth_mib = peak.saturating_sub(rss_before) / 1024;
    assert!(
        growth_mib < 64,
        "listing {n} entries of 1 MiB grew the gateway by {growth_mib} MiB"
    );
    drop(gw);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listing_of_1000_large_entries_reads_no_bodies_embedded() {
    a_large_listing_stays_small(Backend::Embedded, 1000).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listing_of_300_large_entries_reads_no_bodies_redis() {
    a_large_listing_stays_small(Backend::Redis, 300).await;
}
