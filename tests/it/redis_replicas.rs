//! `store.min_replicas` on real servers: a private master with a private replica
//! (both AOF `always`). Without its replica the gateway answers 503 in time and
//! `/readyz` says why; with it, a SIGKILL of the master under load and the promotion
//! of the replica lose no webhook that was answered 2xx. And on a Redis Cluster the
//! `WAIT` reaches the master that ran the accept.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hookgate::store::StoreError;

use crate::forward::source;
use crate::support::*;
use crate::upstream::{Upstream, reached};

/// `store.timeout` of these gateways: a 503 comes within it plus half a second.
const STORE_TIMEOUT: Duration = Duration::from_secs(1);

/// Masters here start a replica's sync at once (Redis waits 5 s by default for more
/// replicas to share a diskless sync).
const NO_SYNC_DELAY: &[&str] = &["--repl-diskless-sync-delay", "0"];

/// A gateway config in `dir` on the Redis at `url`, waiting for one replica, with
/// short leases so that what the old gateway had claimed is claimed again soon.
fn gateway_config(dir: &Path, url: &str, upstream: &str) -> std::path::PathBuf {
    std::fs::create_dir_all(dir).expect("config dir");
    write_config(
        dir,
        &format!(
            "[store]\nkind = \"redis\"\nurl = \"{url}\"\ntimeout = \"{}ms\"\nmin_replicas = 1\n\
             [forwarder]\npoll_interval = \"50ms\"\nmaintenance_interval = \"200ms\"\n\
             lease = \"3s\"\n{}",
            STORE_TIMEOUT.as_millis(),
            source("stripe", upstream, "[sources.delivery]\ntimeout = \"1s\"\n")
        ),
    )
}

/// A connection to the Redis on `port`.
async fn connect(port: u16) -> redis::aio::MultiplexedConnection {
    redis::Client::open(format!("redis://127.0.0.1:{port}"))
        .expect("client")
        .get_multiplexed_async_connection()
        .await
        .expect("connect")
}

/// Wait until the master on `port` lists `n` replicas online (in sync).
async fn wait_replicas_online(port: u16, n: usize) {
    let mut c = connect(port).await;
    wait_until_ok(
        &format!("{n} replica(s) online at the master on port {port}"),
        Duration::from_secs(30),
        async || {
            let text: String = redis::cmd("INFO")
                .arg("replication")
                .query_async(&mut c)
                .await
                .map_err(|e| e.to_string())?;
            let online = text
                .lines()
                .filter(|l| l.starts_with("slave") && l.contains("state=online"))
                .count();
            if online == n { Ok(()) } else { Err(text) }
        },
    )
    .await;
}

/// `/readyz` of `gw`: its status and the `status` of its body.
async fn readyz(client: &reqwest::Client, gw: &ChildGateway) -> (u16, String) {
    let resp = client
        .get(format!("{}/readyz", gw.admin))
        .send()
        .await
        .expect("readyz");
    let status = resp.status().as_u16();
    let body: serde_json::Value = resp.json().await.unwrap_or_default();
    (
        status,
        body["status"].as_str().unwrap_or_default().to_string(),
    )
}

/// Wait until the log at `path` holds `needle`.
async fn wait_logged(path: &Path, needle: &str) {
    wait_until_ok(
        &format!("the log to say {needle:?}"),
        Duration::from_secs(10),
        async || {
            let text = std::fs::read_to_string(path).unwrap_or_default();
            if text.contains(needle) {
                Ok(())
            } else {
                Err(format!("the log:\n{text}"))
            }
        },
    )
    .await;
}

/// Clients that send webhooks at a steady pace until told to stop, and keep the
/// entry id of every one answered 200, by event.
struct Load {
    stop: Arc<AtomicBool>,
    acked: Arc<Mutex<HashMap<String, String>>>,
    tasks: Vec<tokio::task::JoinHandle<u32>>,
}

impl Load {
    /// `clients` clients, each sending one webhook every `every` to `base`.
    fn start(base: &str, clients: usize, every: Duration) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let acked: Arc<Mutex<HashMap<String, String>>> = Arc::default();
        let client = http_builder()
            .timeout(Duration::from_secs(10))
            .build()
            .expect("client");
        let tasks = (0..clients)
            .map(|worker| {
                let (stop, acked, client) = (stop.clone(), acked.clone(), client.clone());
                let base = base.to_string();
                tokio::spawn(async move {
                    let mut pace = tokio::time::interval(every);
                    pace.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                    let mut refused = 0;
                    for n in 0.. {
                        pace.tick().await;
                        if stop.load(Ordering::SeqCst) {
                            break;
                        }
                        let event = format!("evt_failover_{worker}_{n}");
                        match post_stripe(&client, &base, &event).await {
                            (200, json) => {
                                let id = json["id"].as_str().expect("an id").to_string();
                                acked.lock().unwrap().insert(event, id);
                            }
                            (503, _) => refused += 1,
                            (other, json) => panic!("{event}: answered {other}: {json}"),
                        }
                    }
                    refused
                })
            })
            .collect();
        Load { stop, acked, tasks }
    }

    fn acked(&self) -> usize {
        self.acked.lock().unwrap().len()
    }

    /// Stop every client; what was answered 200, and how many were answered 503.
    async fn stop(self) -> (HashMap<String, String>, u32) {
        self.stop.store(true, Ordering::SeqCst);
        let mut refused = 0;
        for t in self.tasks {
            refused += t.await.expect("client task");
        }
        let acked = self.acked.lock().unwrap().clone();
        (acked, refused)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn min_replicas_refuses_without_its_replica_and_a_failover_loses_no_acknowledged_webhook() {
    let _alone = TIMED_ALONE.lock().await;
    let mut master = RedisServer::start_with_args(true, NO_SYNC_DELAY);
    let mut replica = RedisServer::start_replica_of(master.port, NO_SYNC_DELAY);
    wait_replicas_online(master.port, 1).await;
    let up = Upstream::ok().await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = gateway_config(&dir.path().join("before"), &master.url(), &up.url);
    let log = dir.path().join("gateway1.log");
    let mut gw = ChildGateway::spawn(&cfg, &[("RUST_LOG", "info")], &log);
    let client = http_builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();

    // (a) The replica gone: /readyz answers 503 from its own probe, before any
    // webhook is refused, and says why in the log.
    replica.stop();
    wait_until_ok(
        "/readyz to answer 503 without the replica",
        Duration::from_secs(10),
        async || match readyz(&client, &gw).await {
            (503, status) if status == "store has too few replicas online" => Ok(()),
            other => Err(format!("{other:?}")),
        },
    )
    .await;
    wait_logged(&log, "0 replicas online, store.min_replicas asks for 1").await;
    // A webhook is answered 503 within store.timeout + 0.5 s: too few replicas
    // acknowledged it, not a timeout. Twice: the first accept on a fresh Redis
    // finds its script unknown, and is refused without being stored; the provider's
    // retry is stored on the master, and refused all the same.
    for _ in 0..2 {
        let started = Instant::now();
        let (status, json) = post_stripe(&client, &gw.ingest, "evt_alone").await;
        let took = started.elapsed();
        assert_eq!(status, 503, "{json}");
        assert!(
            took <= STORE_TIMEOUT + Duration::from_millis(500),
            "answered after {took:?}"
        );
    }
    wait_logged(
        &log,
        "0 of the 1 replicas store.min_replicas asks for acknowledged the write in time",
    )
    .await;

    // The replica back and in sync: the provider's next retry is answered 200, as
    // a duplicate of what the master stored meanwhile, and /readyz is 200 again.
    replica.restart();
    wait_replicas_online(master.port, 1).await;
    let retried = wait_until_ok(
        "the retry of the refused webhook to be answered 200",
        Duration::from_secs(10),
        async || match post_stripe(&client, &gw.ingest, "evt_alone").await {
            (200, json) => Ok(json),
            other => Err(format!("{other:?}")),
        },
    )
    .await;
    assert_eq!(retried["duplicate"], true, "{retried}");
    wait_until_ok(
        "/readyz to answer 200 with the replica back",
        Duration::from_secs(10),
        async || match readyz(&client, &gw).await {
            (200, _) => Ok(()),
            other => Err(format!("{other:?}")),
        },
    )
    .await;

    // (b) Webhooks from several clients at a steady pace; SIGKILL the master in the
    // middle of it.
    let load = Load::start(&gw.ingest, 8, Duration::from_millis(25));
    wait_until_ok(
        "300 webhooks acknowledged before the master is killed",
        Duration::from_secs(60),
        async || match load.acked() {
            n if n >= 300 => Ok(()),
            n => Err(format!("{n} acknowledged")),
        },
    )
    .await;
    master.stop();
    let (acked, refused) = load.stop().await;

    // The operator's failover: promote the replica, give it a replica of its own
    // (min_replicas = 1 holds after the failover too), and restart the gateway on
    // it. Redis URLs name one host, so the gateway follows a new master only when
    // pointed at it: here a restart with a new store.url.
    let mut promoted = connect(replica.port).await;
    let _: () = redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query_async(&mut promoted)
        .await
        .expect("REPLICAOF NO ONE");
    let _new_replica = RedisServer::start_replica_of(replica.port, NO_SYNC_DELAY);
    wait_replicas_online(replica.port, 1).await;
    gw.kill();

    // Every webhook answered 200 is on the promoted replica: not only delivered
    // before the kill.
    let reads = hookgate::config::from_toml_str(
        &format!("[store]\nkind = \"redis\"\nurl = \"{}\"\n", replica.url()),
        &|_| None,
    )
    .expect("config");
    let store = hookgate::store::open(&reads.store, &hookgate::clock::Clock::system())
        .await
        .expect("open the promoted replica");
    let mut missing = Vec::new();
    for (event, id) in &acked {
        match store.get(id).await.expect("get") {
            Some(e) => assert_eq!(e.event_id.as_deref(), Some(event.as_str())),
            None => missing.push(event.clone()),
        }
    }
    assert!(missing.is_empty(), "acknowledged but lost: {missing:?}");
    store.close().await;
    drop(store);

    let cfg = gateway_config(&dir.path().join("after"), &replica.url(), &up.url);
    let gw = ChildGateway::spawn(&cfg, &[], &dir.path().join("gateway2.log"));

    // And reaches the app, and its dedupe key survived: a
    // provider's retry through the new master is a duplicate of the same entry.
    up.wait_for(
        Duration::from_secs(60),
        "every acknowledged webhook delivered after the failover",
        |r| reached(r, acked.values()),
    )
    .await;
    for (event, id) in acked.iter().take(20) {
        let (status, json) = post_stripe(&client, &gw.ingest, event).await;
        assert_eq!(status, 200, "{event}: {json}");
        assert_eq!(json["duplicate"], true, "{event}: {json}");
        assert_eq!(json["id"], id.as_str(), "{event}");
    }
    eprintln!(
        "{} acknowledged before the master's SIGKILL, {refused} answered 503 after it, none lost",
        acked.len()
    );
}

/// On a Redis Cluster the accept's `WAIT` goes with its script to the master that
/// owns the source's slot, and counts that master's replicas: none here, so the
/// accept is refused as too few replicas (not a routing error), and the probe says
/// which master lacks them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_without_replicas_min_replicas_refuses_the_accept() {
    let cluster = RedisCluster::start();
    let cfg = hookgate::config::from_toml_str(
        &format!(
            "[store]\nkind = \"redis\"\nurl = \"{}\"\ntimeout = \"1s\"\nmin_replicas = 1\n",
            cluster.url()
        ),
        &|_| None,
    )
    .expect("config");
    let store = hookgate::store::open(&cfg.store, &hookgate::clock::Clock::system())
        .await
        .expect("open the store");
    // The first accept finds the script unknown to the fresh cluster (refused, not
    // stored); the next one runs it (refused, stored on the master all the same, so
    // that the provider's retry is deduplicated).
    let mut ids = Vec::new();
    for key in ["evt_cluster_1", "evt_cluster_2"] {
        let entry = crate::conformance::entry("alpha", key);
        ids.push(entry.id.clone());
        match store.accept(entry).await {
            Err(StoreError::TooFewReplicas {
                wanted: 1,
                acknowledged: 0,
            }) => {}
            other => panic!("{key}: expected too few replicas, got {other:?}"),
        }
    }
    assert!(store.get(&ids[1]).await.expect("get").is_some());
    match store.ping().await {
        Err(StoreError::ReplicasMissing {
            node: Some(_),
            wanted: 1,
            online: 0,
        }) => {}
        other => panic!("expected replicas missing, got {other:?}"),
    }
    store.close().await;
}
