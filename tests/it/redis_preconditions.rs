//! What Redis must guarantee, checked: a Redis that may evict keys is refused at
//! open (the store and `hookgate serve`), one whose policy changes at runtime makes
//! `/readyz` answer 503 until it is set back, one without AOF opens with a WARN, and
//! one whose CONFIG command is disabled opens with a WARN that the check could not
//! be made.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use hookgate::config;
use hookgate::store::StoreError;

use crate::support::*;

fn redis_toml(url: &str, extra: &str) -> String {
    format!("[store]\nkind = \"redis\"\nurl = \"{url}\"\ntimeout = \"2s\"\n{extra}\n")
}

async fn open(url: &str) -> Result<std::sync::Arc<dyn hookgate::store::Store>, StoreError> {
    let cfg = config::from_toml_str(&redis_toml(url, ""), &|_| None).expect("config");
    hookgate::store::open(&cfg.store, &hookgate::clock::Clock::system()).await
}

/// A config file in `dir` for `redis` (its `[store]` with `extra` after it) and the
/// standard sources.
fn config_file(dir: &Path, redis: &RedisServer, extra: &str) -> PathBuf {
    write_config(
        dir,
        &format!("{}{}", redis_toml(&redis.url(), extra), sources_toml()),
    )
}

fn redis_cli(port: u16, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .arg("-p")
        .arg(port.to_string())
        .args(args)
        .output()
        .expect("redis-cli");
    assert!(out.status.success(), "redis-cli {args:?}");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Set the `maxmemory-policy` of the Redis on `port` at runtime.
fn set_maxmemory_policy(port: u16, policy: &str) {
    assert_eq!(
        redis_cli(port, &["CONFIG", "SET", "maxmemory-policy", policy]),
        "OK",
        "CONFIG SET maxmemory-policy {policy}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_that_may_evict_keys_is_refused_at_open() {
    for policy in ["allkeys-lru", "volatile-ttl"] {
        let redis = RedisServer::start_with_args(true, &["--maxmemory-policy", policy]);
        match open(&redis.url()).await {
            Err(StoreError::Evicting { policy: p, node }) => {
                assert_eq!(p, policy);
                assert_eq!(node, None);
            }
            Err(other) => panic!("{policy}: another error: {other}"),
            Ok(_) => panic!("{policy}: opened"),
        }
    }
    let fine = RedisServer::start_with_args(true, &["--maxmemory-policy", "noeviction"]);
    let store = open(&fine.url()).await.expect("noeviction opens");
    store.ping().await.expect("ready");
}

#[test]
fn hookgate_serve_exits_naming_the_policy() {
    let redis = RedisServer::start_with_args(true, &["--maxmemory-policy", "allkeys-lru"]);
    let dir = tempfile::tempdir().unwrap();
    let config_path = config_file(dir.path(), &redis, "");
    let (status, stderr) = serve_until_it_exits(&config_path, "on an allkeys-lru redis");
    assert!(!status.success(), "{stderr}");
    assert!(
        stderr.contains("maxmemory-policy allkeys-lru")
            && stderr.contains("CONFIG SET maxmemory-policy noeviction"),
        "{stderr}"
    );
}

/// The JSON log lines of a child gateway.
fn json_lines(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// The lines of `lines` whose message contains `text`.
fn saying<'a>(lines: &'a [serde_json::Value], text: &str) -> Vec<&'a serde_json::Value> {
    lines
        .iter()
        .filter(|l| l["message"].as_str().is_some_and(|m| m.contains(text)))
        .collect()
}

/// Poll `/readyz` until it answers `want` (bounded).
async fn wait_ready_status(client: &reqwest::Client, admin: &str, want: u16) {
    let url = format!("{admin}/readyz");
    wait_until_ok(
        &format!("/readyz to answer {want}"),
        Duration::from_secs(10),
        async || {
            let got = client
                .get(&url)
                .send()
                .await
                .map(|r| r.status().as_u16())
                .unwrap_or(0);
            if got == want {
                Ok(())
            } else {
                Err(format!("it answers {got}"))
            }
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_eviction_policy_set_at_runtime_makes_readyz_503_until_set_back() {
    let redis = RedisServer::start();
    let text = format!(
        "{}[forwarder]\npoll_interval = \"50ms\"\nmaintenance_interval = \"100ms\"\n{}",
        redis_toml(&redis.url(), ""),
        sources_toml()
    );
    let cfg = config::from_toml_str(&text, &|_| None).unwrap();
    let gw = Gateway::start(cfg).await;
    let client = http();

    set_maxmemory_policy(redis.port, "volatile-lru");
    wait_ready_status(&client, &gw.admin, 503).await;
    let answer = get_json(&client, &format!("{}/readyz", gw.admin)).await;
    assert_eq!(answer["status"], "store may evict keys");
    // Still accepting meanwhile: only readiness says something is wrong.
    let body = event_body("stripe", "evt_evicting");
    let (status, json) = post_signed(&client, &gw, "stripe", &body, "evt_evicting").await;
    assert_eq!(status, 200, "{json}");

    set_maxmemory_policy(redis.port, "noeviction");
    wait_ready_status(&client, &gw.admin, 200).await;
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_without_aof_opens_with_a_warning() {
    let redis = RedisServer::start_with(false);
    let dir = tempfile::tempdir().unwrap();
    let config_path = config_file(dir.path(), &redis, "");
    let log = dir.path().join("stderr.log");
    let gw = ChildGateway::spawn(&config_path, &[("HOOKGATE_LOG__FORMAT", "json")], &log);
    let lines = json_lines(&log);
    let warning = *saying(&lines, "appendonly yes + appendfsync always")
        .first()
        .unwrap_or_else(|| panic!("no AOF warning in {lines:#?}"));
    assert_eq!(warning["level"], "WARN", "{warning}");
    assert_eq!(warning["appendonly"], "no", "{warning}");
    drop(gw);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_without_config_opens_with_one_warning() {
    let redis = RedisServer::start_with_args(true, &["--rename-command", "CONFIG", ""]);
    let dir = tempfile::tempdir().unwrap();
    let forwarder = "[forwarder]\nmaintenance_interval = \"100ms\"\n";
    let config_path = config_file(dir.path(), &redis, forwarder);
    let log = dir.path().join("stderr.log");
    let gw = ChildGateway::spawn(&config_path, &[("HOOKGATE_LOG__FORMAT", "json")], &log);
    // An entry its destination refuses stays pending: each maintenance pass moves its
    // age gauge. Three moves, three passes that found CONFIG unreadable again.
    let client = http();
    let (status, json) = post_stripe(&client, &gw.ingest, "evt_noconfig").await;
    assert_eq!(status, 200, "{json}");
    let mut ages = std::collections::BTreeSet::new();
    let metrics = format!("{}/metrics", gw.admin);
    wait_until(
        "three maintenance passes",
        Duration::from_secs(15),
        async || {
            let text = get_text(&client, &metrics).await;
            if let Some(age) = text
                .lines()
                .find(|l| l.starts_with("hookgate_oldest_pending_age_seconds{source=\"stripe\"}"))
                .and_then(|l| l.rsplit_once(' '))
                .and_then(|(_, v)| v.parse::<f64>().ok())
                .filter(|v| *v > 0.0)
            {
                ages.insert(age.to_bits());
            }
            ages.len() >= 3
        },
    )
    .await;
    let lines = json_lines(&log);
    let warnings = saying(&lines, "cannot read the redis settings");
    assert_eq!(warnings.len(), 1, "{lines:#?}");
    assert_eq!(warnings[0]["level"], "WARN");
    drop(gw);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_cluster_master_is_checked() {
    let cluster = RedisCluster::start();
    let target = cluster.nodes[2].port;
    set_maxmemory_policy(target, "allkeys-lfu");
    match open(&cluster.url()).await {
        Err(StoreError::Evicting { policy, node }) => {
            assert_eq!(policy, "allkeys-lfu");
            assert!(
                node.as_deref()
                    .is_some_and(|n| n.ends_with(&format!(":{target}"))),
                "{node:?}"
            );
        }
        Err(other) => panic!("another error: {other}"),
        Ok(_) => panic!("a cluster with an evicting master opened"),
    }
    set_maxmemory_policy(target, "noeviction");
    open(&cluster.url()).await.expect("every master noeviction");
}
