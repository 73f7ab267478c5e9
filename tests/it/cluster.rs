//! Scale-out on Redis Cluster: three masters, two gateway processes. Ingest, dedupe,
//! delivery, the DLQ and replay all work, each entry is delivered exactly once, and
//! nothing crashes. And the store's routes on a cluster: every script of the routes
//! layout, and the migration of a Redis written before routes.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::time::Duration;

use hookgate::clock::system_now_ms as now_ms;
use hookgate::store::{
    Accepted, Attempt, Completion, ListQuery, NewEntry, Status, Store, Transition,
};

use crate::admin::{Admin, TOKEN};
use crate::forward::{FAST, FAST_RETRY, ingest_many, source};
use crate::support::*;
use crate::upstream::Upstream;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_gateways_on_a_three_master_cluster() {
    let cluster = RedisCluster::start();
    let ok = Upstream::ok().await;
    let (flaky, fixed) = Upstream::failing_until_fixed(404).await;
    let names = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot"];
    let mut sources = String::new();
    for n in names {
        sources.push_str(&source(n, &ok.url, ""));
    }
    sources.push_str(&source("dlq", &flaky.url, FAST_RETRY));
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "[store]\nkind = \"redis\"\nurl = \"{}\"\ntimeout = \"3s\"\n{FAST}\n{sources}",
        cluster.url()
    );
    let quiet = quiet_window(&hookgate::config::from_toml_str(&text, &|_| None).unwrap());
    let cfg_path = write_config(dir.path(), &text);
    let env = [("HOOKGATE_ADMIN_TOKEN", TOKEN)];
    let gw1 = ChildGateway::spawn(&cfg_path, &env, &dir.path().join("log1"));
    let gw2 = ChildGateway::spawn(&cfg_path, &env, &dir.path().join("log2"));

    // Ingest through both gateways; the same events sent to both are deduped.
    let mut expected: HashMap<String, String> = HashMap::new();
    for n in names {
        let a = ingest_many(&gw1.ingest, n, &format!("evt_{n}"), 100).await;
        let b = ingest_many(&gw2.ingest, n, &format!("evt_{n}"), 100).await;
        assert_eq!(
            a, b,
            "{n}: redeliveries through the other gateway got other ids"
        );
        expected.extend(a.into_iter().map(|(e, id)| (format!("{n}/{e}"), id)));
    }
    let dead_ids = ingest_many(&gw2.ingest, "dlq", "evt_dlq", 20).await;
    ok.wait_for(Duration::from_secs(60), "600 deliveries", |r| {
        r.len() >= 600
    })
    .await;
    quiet_for("no entry delivered twice", quiet, async || {
        ok.count() == 600
    })
    .await;
    let got = ok.webhook_ids(None);
    let unique: HashSet<&String> = got.iter().collect();
    assert_eq!(got.len(), 600, "each entry delivered exactly once");
    assert_eq!(unique.len(), 600);
    assert!(expected.values().all(|id| unique.contains(id)));

    // The DLQ, then a replay through the admin API once the destination is fixed.
    let (admin1, admin2) = (Admin::at(&gw1.admin), Admin::at(&gw2.admin));
    wait_until_ok("all 20 entries dead", Duration::from_secs(20), async || {
        let st = admin1.get("/admin/stats").await;
        let dlq = st["sources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["source"] == "dlq")
            .unwrap()
            .clone();
        if dlq["dead"] == 20 { Ok(()) } else { Err(dlq) }
    })
    .await;
    fixed.store(true, Ordering::SeqCst);
    let (_, r) = admin2
        .call(
            "POST",
            "/admin/replay",
            Some(serde_json::json!({"source": "dlq"})),
        )
        .await;
    assert_eq!(r["queued"], 20, "{r}");
    flaky
        .wait_for(Duration::from_secs(30), "replayed entries delivered", |r| {
            r.iter().filter(|x| x.answered == 200).count() >= 20
        })
        .await;
    quiet_for("no replay delivered twice", quiet, async || {
        flaky
            .received()
            .iter()
            .filter(|x| x.answered == 200)
            .count()
            == 20
    })
    .await;
    let replayed = flaky.webhook_ids(Some(200));
    let unique: HashSet<&String> = replayed.iter().collect();
    assert_eq!(replayed.len(), 20, "each replay delivered once");
    assert!(dead_ids.values().all(|id| unique.contains(id)));
    // Both gateways are still up.
    let c = http();
    for gw in [&gw1, &gw2] {
        let r = c.get(format!("{}/readyz", gw.admin)).send().await.unwrap();
        assert_eq!(r.status(), 200);
    }
}

/// A new entry of `source` with event id `key`, delivered through `routes`.
fn routed(source: &str, key: &str, routes: &[&str]) -> NewEntry {
    NewEntry {
        routes: routes.iter().map(|r| r.to_string()).collect(),
        ordering: Vec::new(),
        ..crate::conformance::entry(source, key)
    }
}

/// Claim through `route` of `source` now: the ids claimed and the claims.
async fn claim_now(store: &dyn Store, source: &str, route: &str) -> Vec<hookgate::store::Claim> {
    let mut claims = store
        .claim(source, route, "w", now_ms(), 10, Duration::from_secs(30))
        .await
        .unwrap();
    claims.sort_by(|a, b| a.entry.id.cmp(&b.entry.id));
    claims
}

/// An attempt through the claim's route, answered `code`.
fn answered(c: &hookgate::store::Claim, code: u16) -> Attempt {
    Attempt {
        route: c.delivery.route.clone(),
        n: c.delivery.attempts + 1,
        at: now_ms(),
        status_code: Some(code),
        failure: None,
        error: None,
        latency_ms: 3,
        answer: None,
    }
}

/// The store on a three-master cluster (each source's keys in one slot, the sources
/// spread over the slots): a Redis written before routes is migrated at open and its
/// entries delivered on route "default"; entries with several routes are claimed,
/// retried, completed, replayed and discarded per route, paused per route, listed
/// and counted by route, and purged once every delivery ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routes_and_the_migration_on_a_three_master_cluster() {
    let cluster = RedisCluster::start();
    let seeds: Vec<String> = cluster
        .nodes
        .iter()
        .map(|n| format!("redis://127.0.0.1:{}", n.port))
        .collect();
    let mut c = redis::cluster::ClusterClient::new(seeds)
        .unwrap()
        .get_async_connection()
        .await
        .unwrap();
    let old = crate::redis_store::write_old_layout(&mut c).await;
    let text = format!(
        "[store]\nkind = \"redis\"\nurl = \"{}\"\ntimeout = \"3s\"\n",
        cluster.url()
    );
    let cfg = hookgate::config::from_toml_str(&text, &|_| None).unwrap();
    let store = hookgate::store::open(&cfg.store, &hookgate::clock::Clock::system())
        .await
        .unwrap();
    crate::redis_store::assert_migrated(&*store, &mut c, &old).await;
    crate::redis_store::deliver_old_pending(&*store, &mut c, &old).await;
    let far = now_ms() + 3_600_000;
    assert_eq!(store.purge(far, far, far, 100).await.unwrap().entries, 5);

    for s in ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot"] {
        let accept = async |key: &str, routes: &[&str]| match store
            .accept(routed(s, key, routes))
            .await
            .unwrap()
        {
            Accepted::New(id) => id,
            dup => panic!("{s}/{key}: {dup:?}"),
        };
        let both = accept("evt_both", &["a", "b"]).await;
        let only_b = accept("evt_b", &["b"]).await;
        let none = accept("evt_none", &[]).await;
        assert_eq!(
            store.get(&none).await.unwrap().unwrap().status,
            Status::Filtered
        );

        // a delivers `both`; b retries it, then both of b's go dead.
        let a = claim_now(&*store, s, "a").await;
        assert_eq!(a.len(), 1);
        let done = Completion::Delivered {
            attempt: answered(&a[0], 200),
        };
        assert!(store.complete(&a[0], "w", done, now_ms()).await.unwrap());
        let b = claim_now(&*store, s, "b").await;
        assert_eq!(b.len(), 2);
        for claim in &b {
            let completion = if claim.entry.id == both {
                Completion::Retry {
                    attempt: answered(claim, 503),
                    at: now_ms(),
                }
            } else {
                Completion::Dead {
                    attempt: Some(answered(claim, 410)),
                    reason: "gone".into(),
                }
            };
            assert!(
                store
                    .complete(claim, "w", completion, now_ms())
                    .await
                    .unwrap()
            );
        }
        let again = claim_now(&*store, s, "b").await;
        assert_eq!(again.len(), 1);
        assert_eq!(again[0].entry.id, both);
        let dead = Completion::Dead {
            attempt: Some(answered(&again[0], 400)),
            reason: "refused".into(),
        };
        assert!(
            store
                .complete(&again[0], "w", dead, now_ms())
                .await
                .unwrap()
        );
        let e = store.get(&both).await.unwrap().unwrap();
        assert_eq!((e.status, e.attempts), (Status::Dead, 3), "{s}");
        assert_eq!(store.attempts(&both).await.unwrap().len(), 3);
        let st = store.stats(s).await.unwrap();
        assert_eq!((st.dead, st.filtered, st.pending), (2, 1, 0), "{s}");
        let rb = store.route_stats(s, "b").await.unwrap();
        assert_eq!((rb.dead, rb.pending), (2, 0), "{s}");
        assert_eq!(store.route_stats(s, "a").await.unwrap().delivered, 1);
        let listed = store
            .list_ids(&ListQuery {
                source: Some(s.into()),
                route: Some("b".into()),
                status: Some(Status::Dead),
                limit: 10,
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(listed.ids, vec![only_b.clone(), both.clone()], "{s}");

        // Replay b's delivery of `both` while b is paused: queued, not claimed until
        // the route is resumed; then delivered, and the entry with it.
        let t = now_ms();
        assert_eq!(
            store
                .replay(&both, Some("b"), t, &"ops".into(), t)
                .await
                .unwrap(),
            Transition::Done
        );
        store.set_paused(s, Some("b"), true).await.unwrap();
        assert!(claim_now(&*store, s, "b").await.is_empty());
        store.set_paused(s, Some("b"), false).await.unwrap();
        let replayed = claim_now(&*store, s, "b").await;
        assert_eq!(replayed.len(), 1);
        assert_eq!(replayed[0].delivery.budget_attempts, 2);
        let done = Completion::Delivered {
            attempt: answered(&replayed[0], 200),
        };
        assert!(store.complete(&replayed[0], "w", done, t).await.unwrap());
        assert_eq!(
            store.get(&both).await.unwrap().unwrap().status,
            Status::Delivered
        );
        assert_eq!(
            store
                .discard(&only_b, None, &"ops".into(), "n", t)
                .await
                .unwrap(),
            Transition::Done
        );

        // Every entry ended: retention removes them, with their route indexes.
        let far = t + 3_600_000;
        assert_eq!(
            store.purge(far, far, far, 100).await.unwrap().entries,
            3,
            "{s}"
        );
        assert_eq!(store.count(s).await.unwrap(), 0);
        let rb = store.route_stats(s, "b").await.unwrap();
        assert_eq!(rb, hookgate::store::RouteStats::default(), "{s}");
    }
    store.close().await;
}
