//! Scenario `reconcile`: reconciling a large history with the provider, in the
//! production shape (the gateway delivering to a sink while it ingests).
//!
//! A fake Stripe API in this process lists `HOOKGATE_BENCH_RECONCILE_EVENTS`
//! (default 100,000) events, 100 a page, newest first; the gateway stored all but
//! `HOOKGATE_BENCH_RECONCILE_MISSING` (default 1,000) of them, received as signed
//! webhooks before the measurement. Each round runs two variants on the same
//! gateway, the order rotated from one round to the next: `steady` (an open loop of
//! new webhooks at a fixed rate, `HOOKGATE_BENCH_RATE`, default 200 a second) and
//! `reconciling` (the same open loop while `POST /admin/sources/bench/reconcile`
//! judges the whole history: every page listed, every event's dedupe key looked up,
//! the missing ones admitted and delivered). The figures: how long the pass took and
//! what it admitted, and the ingest p99 while reconciling against `steady`'s.
//!
//! ```text
//! cargo bench --bench gateway -- reconcile                   # embedded store, 3 rounds
//! HOOKGATE_BENCH_RECONCILE_STORES=embedded,redis,postgres cargo bench --bench gateway -- reconcile
//! ```

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{Query, State};
use axum::response::IntoResponse;
use axum::routing::get;

use crate::load::{Prepared, addr, closed_loop, prepare};
use crate::measure::median;
use crate::open::open_loop;
use crate::procs::Store;
use crate::scenarios::{Forwarding, Subject, percentiles};
use crate::{Report, Settings};

/// The history the fake API lists, newest first, and where each id is in it.
struct History {
    bodies: Vec<String>,
    index: std::collections::HashMap<String, usize>,
    /// Listed only once the gateway stored its part (its pass at start sees none).
    listed: std::sync::atomic::AtomicBool,
}

async fn events(
    State(h): State<Arc<History>>,
    Query(q): Query<Vec<(String, String)>>,
) -> impl IntoResponse {
    let after = q
        .iter()
        .find(|(k, _)| k == "starting_after")
        .and_then(|(_, v)| h.index.get(v))
        .map_or(0, |i| i + 1);
    let end = if h.listed.load(std::sync::atomic::Ordering::SeqCst) {
        (after + 100).min(h.bodies.len())
    } else {
        0
    };
    let mut out = String::with_capacity(100 * 4096);
    out.push_str(r#"{"object":"list","url":"/v1/events","has_more":"#);
    out.push_str(if end < h.bodies.len() {
        "true"
    } else {
        "false"
    });
    out.push_str(r#","data":["#);
    for (n, b) in h.bodies[after.min(end)..end].iter().enumerate() {
        if n > 0 {
            out.push(',');
        }
        out.push_str(b);
    }
    out.push_str("]}");
    ([("content-type", "application/json")], out)
}

async fn endpoint() -> impl IntoResponse {
    axum::Json(serde_json::json!({
        "id": "we_bench", "object": "webhook_endpoint", "enabled_events": ["*"],
        "livemode": false, "status": "enabled", "url": "https://hooks.example.com/ingest/bench"
    }))
}

/// Serve the fake API; its base URL.
async fn fake_stripe(history: Arc<History>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind the fake API");
    let url = format!("http://{}", listener.local_addr().expect("address"));
    let router = Router::new()
        .route("/v1/events", get(events))
        .route("/v1/webhook_endpoints/we_bench", get(endpoint))
        .with_state(history);
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    url
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

pub async fn reconcile(report: &mut Report, store: Store, s: Settings, smoke: bool) {
    let total = env_usize(
        "HOOKGATE_BENCH_RECONCILE_EVENTS",
        if smoke { 2_000 } else { 100_000 },
    );
    let missing = env_usize(
        "HOOKGATE_BENCH_RECONCILE_MISSING",
        if smoke { 20 } else { 1_000 },
    );
    let rate = std::env::var("HOOKGATE_BENCH_RATE")
        .ok()
        .and_then(|r| r.parse::<f64>().ok())
        .unwrap_or(200.0);
    // The history: the prepared events, listed newest first (they share their
    // creation second, so the order is the list's own).
    let prepared = prepare(total, "rc", None);
    let bodies: Vec<String> = prepared
        .iter()
        .rev()
        .map(|p| String::from_utf8_lossy(&p.body).into_owned())
        .collect();
    let index = bodies
        .iter()
        .enumerate()
        .filter_map(|(i, b)| {
            let v: serde_json::Value = serde_json::from_str(b).ok()?;
            Some((v["id"].as_str()?.to_string(), i))
        })
        .collect();
    let history = Arc::new(History {
        bodies,
        index,
        listed: std::sync::atomic::AtomicBool::new(false),
    });
    let api = fake_stripe(history.clone()).await;
    let keys = tempfile::tempdir().expect("tempdir");
    let key = keys.path().join("stripe.key");
    std::fs::write(&key, "sk_test_bench").expect("write the key");
    let subject = Subject::start_source(
        store,
        Forwarding::On,
        None,
        "",
        &format!(
            "[sources.reconcile]\napi_key_file = \"{}\"\nendpoint = \"we_bench\"\napi_base = \"{api}\"\ninterval = \"24h\"\nsettle = \"0s\"\n",
            key.display()
        ),
    )
    .await;
    let port = subject.gw.port;
    // Every event but the first `missing` arrives as Stripe sends it.
    let delivered: Vec<Prepared> = prepared.into_iter().skip(missing).collect();
    let stored = delivered.len();
    let started = Instant::now();
    let fill = closed_loop(
        addr(port),
        "/ingest/bench",
        Arc::new(delivered),
        16,
        Duration::from_secs(3600),
        false,
    )
    .await;
    assert_eq!(fill.errors, 0, "the history was not all stored");
    println!(
        "  {}: {stored} of {total} events stored as webhooks in {:.1} s",
        store.name(),
        started.elapsed().as_secs_f64()
    );
    history
        .listed
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let client = reqwest::Client::new();
    let mut p99 = [Vec::new(), Vec::new()];
    let mut passes = Vec::new();
    let mut admitted_first = 0;
    for round in 0..s.rounds {
        let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        for variant in order {
            let reconciling = variant == 1;
            let n = ((rate * s.duration.as_secs_f64() * 6.0) as usize + 10).max(10);
            let requests = Arc::new(prepare(n, &format!("rco{round}{variant}"), None));
            let pass = reconciling.then(|| {
                let client = client.clone();
                let admin = subject.gw.admin;
                tokio::spawn(async move {
                    let t = Instant::now();
                    let r = client
                        .post(format!(
                            "http://127.0.0.1:{admin}/admin/sources/bench/reconcile"
                        ))
                        .json(&serde_json::json!({"since": "1d"}))
                        .send()
                        .await
                        .expect("reconcile");
                    let status = r.status();
                    let body: serde_json::Value = r.json().await.unwrap_or_default();
                    assert!(status.is_success(), "reconcile: {status} {body}");
                    (t.elapsed(), body)
                })
            });
            // The open loop covers the pass: as long as a pass takes (at most six
            // times the duration), the same length for `steady`.
            let length = match passes.last() {
                Some(d) => Duration::from_secs_f64(*d).max(s.duration),
                None => s.duration * 3,
            };
            let open = open_loop(
                addr(port),
                "/ingest/bench",
                requests,
                s.connections.min(16),
                rate,
                length,
                None,
            )
            .await;
            let mut said = String::new();
            if let Some(task) = pass {
                let (took, body) = task.await.expect("the pass");
                passes.push(took.as_secs_f64());
                if admitted_first == 0 {
                    admitted_first = body["admitted"].as_u64().unwrap_or(0);
                }
                said = format!(
                    ", pass {:.1} s: listed {}, stored {}, admitted {}",
                    took.as_secs_f64(),
                    body["listed"],
                    body["stored"],
                    body["admitted"]
                );
            }
            println!(
                "  round {round}, {}: open loop at {rate:.0}/s for {:.0} s: {} ({} errors){said}",
                if reconciling { "reconciling" } else { "steady" },
                length.as_secs_f64(),
                percentiles(&open.hist),
                open.errors,
            );
            p99[variant].push(open.pct(0.99));
        }
    }
    report.add(format!(
        "reconcile, {}: {total} events listed 100 a page, {missing} missing: the first pass admitted {admitted_first} in {:.1} s (later passes, all stored: median {:.1} s); ingest p99 at {rate:.0}/s while reconciling {:.2} ms vs steady {:.2} ms: {:.2}×",
        store.name(),
        passes.first().copied().unwrap_or(0.0),
        if passes.len() > 1 {
            median(passes.iter().skip(1).copied().collect())
        } else {
            0.0
        },
        median(p99[1].clone()),
        median(p99[0].clone()),
        median(p99[1].clone()) / median(p99[0].clone()).max(1e-9),
    ));
}
