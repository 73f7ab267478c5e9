//! The embedded store's drain, without HTTP: `n` entries accepted, then claimed and
//! completed by `workers` tasks, 64 at a time, as the forwarder does. Prints the wall
//! time and the writer thread's CPU time per delivery: what a change to the store's
//! SQL costs, measured on the one thread every write goes through.
//!
//! `cargo run --release --example store_drain -- 50000 ordered`

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use hookgate::clock::Clock;
use hookgate::config::{EmbeddedConfig, StoreConfig};
use hookgate::store::{Attempt, Completion, NewEntry, Origin, RouteOrder, Store};

/// The CPU time (user and system) of the store's writer thread so far, in seconds.
fn writer_cpu_secs() -> f64 {
    let mut total = 0.0;
    for t in std::fs::read_dir("/proc/self/task")
        .into_iter()
        .flatten()
        .flatten()
    {
        let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        if comm.trim() != "hg-sqlite-write" {
            continue;
        }
        let stat = std::fs::read_to_string(t.path().join("stat")).unwrap_or_default();
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let f: Vec<&str> = rest.split_whitespace().collect();
        let field = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
        total += field(11) + field(12);
    }
    // SAFETY: sysconf only reads a system constant.
    total / (unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64).max(1.0)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(20_000);
    let ordered = args.get(2).is_some_and(|a| a == "ordered");
    let dir = tempfile::tempdir().unwrap();
    let cfg = StoreConfig::Embedded(EmbeddedConfig {
        path: dir.path().to_path_buf(),
        batch_max: 256,
        min_free_bytes: 0,
        timeout: Duration::from_secs(30),
    });
    let store: Arc<dyn Store> = hookgate::store::open(&cfg, &Clock::system()).await.unwrap();
    let mut tasks = Vec::new();
    for c in 0..64 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            for i in (c..n).step_by(64) {
                let key = format!("evt_{i}");
                let e = NewEntry {
                    id: uuid::Uuid::now_v7().to_string(),
                    source: "s".into(),
                    event_id: Some(key.clone()),
                    event_type: Some("thing.happened".into()),
                    dedupe_key: format!("id:{key}"),
                    dedupe_ttl: Duration::from_secs(3600),
                    received_at: hookgate::clock::system_now_ms(),
                    headers: Vec::new(),
                    body: Bytes::from(format!(
                        "{{\"id\":\"{key}\",\"pad\":\"{}\"}}",
                        "x".repeat(1500)
                    )),
                    routes: vec!["default".into()],
                    ordering: if ordered {
                        vec![RouteOrder {
                            route: "default".into(),
                            key: key.clone(),
                            block: true,
                        }]
                    } else {
                        Vec::new()
                    },
                    index: Vec::new(),
                    origin: Origin::Received,
                };
                store.accept(e).await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let cpu = writer_cpu_secs();
    let start = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..4 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let worker = format!("w{w}");
            let mut done = 0usize;
            loop {
                let now = hookgate::clock::system_now_ms();
                let claims = store
                    .claim("s", "default", &worker, now, 64, Duration::from_secs(60))
                    .await
                    .unwrap();
                if claims.is_empty() {
                    return done;
                }
                let mut completions = Vec::new();
                for c in claims {
                    let store = store.clone();
                    let worker = worker.clone();
                    completions.push(tokio::spawn(async move {
                        let attempt = Attempt {
                            route: "default".into(),
                            n: 1,
                            at: now,
                            status_code: Some(200),
                            failure: None,
                            error: None,
                            latency_ms: 1,
                            answer: None,
                        };
                        store
                            .complete(&c, &worker, Completion::Delivered { attempt }, now)
                            .await
                            .unwrap()
                    }));
                }
                for c in completions {
                    assert!(c.await.unwrap());
                    done += 1;
                }
            }
        }));
    }
    let mut done = 0;
    for t in tasks {
        done += t.await.unwrap();
    }
    let secs = start.elapsed().as_secs_f64();
    let writer = writer_cpu_secs() - cpu;
    println!(
        "{} {done} deliveries in {secs:.2} s = {:.0}/s, writer {:.1} µs per delivery",
        if ordered { "ordered" } else { "unordered" },
        done as f64 / secs,
        writer * 1e6 / done as f64
    );
}
