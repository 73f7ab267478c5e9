//! Scale-out on Redis Cluster: three masters, two gateway processes. Ingest, dedupe,
//! delivery, the DLQ and replay all work, each entry is delivered exactly once, and
//! nothing crashes.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::admin::{Admin, TOKEN};
use crate::forward::{FAST, FAST_RETRY, ingest_many, source};
use crate::upstream::Upstream;
use crate::util::*;

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
