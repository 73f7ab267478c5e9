//! Scenario `rejection-flood`: what a flood of forged webhooks costs the genuine
//! ones, and what the rejection log keeps of it.
//!
//! Per store, a gateway delivering to a sink (the production shape) takes an open
//! loop of genuine webhooks at a fixed rate (`HOOKGATE_BENCH_RATE`, default 300 a
//! second) twice in one run: alone, then while 32 connections send forgeries (a
//! Stripe signature with one character changed) as fast as they are answered for
//! the whole window, at least 10,000 of them. Reported: both runs' latency
//! percentiles, the p99 ratio (the bound: within 2×), the forgeries sent,
//! and the rows and counts the rejection log holds afterwards.

use std::sync::Arc;
use std::time::Duration;

use crate::load::{Prepared, addr, closed_loop, prepare};
use crate::open::open_loop;
use crate::procs::Store;
use crate::scenarios::{Forwarding, Subject, percentiles};
use crate::{Report, Settings};

/// Connections sending forgeries.
const FLOOD_CONNECTIONS: usize = 32;

pub async fn rejection_flood(report: &mut Report, store: Store, s: Settings) {
    let rate = std::env::var("HOOKGATE_BENCH_RATE")
        .ok()
        .and_then(|r| r.parse::<f64>().ok())
        .unwrap_or(300.0);
    let subject = Subject::start(store, Forwarding::On).await;
    let port = subject.gw.port;
    let genuine = |tag: &str| {
        Arc::new(prepare(
            ((rate * s.duration.as_secs_f64()) as usize + 10).max(10),
            tag,
            None,
        ))
    };
    let alone = open_loop(
        addr(port),
        "/ingest/bench",
        genuine("calm"),
        8,
        rate,
        s.duration,
        None,
    )
    .await;
    let forged: Arc<Vec<Prepared>> = Arc::new(
        prepare(2_000, "forged", None)
            .into_iter()
            .map(|mut p| {
                // One character of the signature changed: verification fails.
                let last = p.signature.pop().unwrap_or('0');
                p.signature.push(if last == 'a' { 'b' } else { 'a' });
                p
            })
            .collect(),
    );
    let flood = tokio::spawn(closed_loop(
        addr(port),
        "/ingest/bench",
        forged,
        FLOOD_CONNECTIONS,
        s.duration + Duration::from_millis(200),
        true,
    ));
    let during = open_loop(
        addr(port),
        "/ingest/bench",
        genuine("flood"),
        8,
        rate,
        s.duration,
        None,
    )
    .await;
    let flood = flood.await.expect("flood");
    // The log reaches the store within a second (a flush).
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let admin = format!("http://127.0.0.1:{}", subject.gw.admin);
    let client = reqwest::Client::new();
    let get = |path: String| {
        let client = client.clone();
        async move {
            client
                .get(path)
                .send()
                .await
                .expect("admin")
                .json::<serde_json::Value>()
                .await
                .expect("json")
        }
    };
    let groups = get(format!("{admin}/admin/rejections/groups")).await;
    let counted: u64 = groups["groups"]
        .as_array()
        .map(|g| g.iter().filter_map(|g| g["count"].as_u64()).sum())
        .unwrap_or(0);
    let rows = get(format!("{admin}/admin/rejections?limit=500")).await;
    let kept = rows["rejections"].as_array().map_or(0, Vec::len);
    let name = store.name();
    report.add(format!(
        "rejection flood, {name}: genuine webhooks at {rate:.0}/s alone: {} ({} errors); while {} forgeries arrived over {FLOOD_CONNECTIONS} connections ({:.0}/s): {} ({} errors); p99 {:.2}× alone",
        percentiles(&alone.hist),
        alone.errors,
        flood.requests,
        flood.rate(),
        percentiles(&during.hist),
        during.errors,
        during.pct(0.99) / alone.pct(0.99).max(0.001),
    ));
    report.add(format!(
        "rejection flood, {name}: the log counted {counted} refusals and keeps {kept} rows (at most {} per source and reason)",
        hookgate::store::REJECTIONS_KEEP
    ));
}
