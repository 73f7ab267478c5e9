//! Scenario `rejection-flood`: what a flood of forged webhooks costs the genuine
//! ones, and what the rejection log keeps of it.
//!
//! Per store, a gateway delivering to a sink (the production shape) takes an open
//! loop of genuine webhooks at a fixed rate (`HOOKGATE_BENCH_RATE`, default 300 a
//! second), after a warm-up, four times in one run: alone, while a burst of 10,000
//! forgeries (a Stripe signature with one character changed) arrives over 32
//! connections as fast as they are answered, alone again, and with forgeries for
//! the whole window (as many as 32 connections send).
//! Reported: each run's latency percentiles, the burst's p99 against the better of
//! the two runs alone (the bound: within 2×), the forgeries sent, and the
//! rows and counts the rejection log holds afterwards.

use std::sync::Arc;
use std::time::Duration;

use crate::load::{Prepared, addr, closed_loop, prepare};
use crate::open::open_loop;
use crate::procs::Store;
use crate::scenarios::{Forwarding, Subject, percentiles};
use crate::{Report, Settings};

/// Connections sending forgeries.
const FLOOD_CONNECTIONS: usize = 32;
/// The forgeries of the burst.
const BURST: usize = 10_000;

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
    let run = |tag: &'static str, duration: Duration| {
        open_loop(
            addr(port),
            "/ingest/bench",
            genuine(tag),
            8,
            rate,
            duration,
            None,
        )
    };
    let _warm = run("warm", s.duration.min(Duration::from_secs(3))).await;
    let alone = run("calm", s.duration).await;
    let forged = |n: usize| -> Arc<Vec<Prepared>> {
        Arc::new(
            prepare(n, "forged", None)
                .into_iter()
                .map(|mut p| {
                    // One character of the signature changed: verification fails.
                    let last = p.signature.pop().unwrap_or('0');
                    p.signature.push(if last == 'a' { 'b' } else { 'a' });
                    p
                })
                .collect(),
        )
    };
    // The burst: 10,000 forgeries, sent once each, starting with the window.
    let burst = tokio::spawn(closed_loop(
        addr(port),
        "/ingest/bench",
        forged(BURST),
        FLOOD_CONNECTIONS,
        s.duration,
        false,
    ));
    let during = run("burst", s.duration).await;
    let burst = burst.await.expect("burst");
    let after = run("after", s.duration).await;
    // The whole window flooded, for comparison.
    let flood = tokio::spawn(closed_loop(
        addr(port),
        "/ingest/bench",
        forged(2_000),
        FLOOD_CONNECTIONS,
        s.duration,
        true,
    ));
    let flooded = run("flood", s.duration).await;
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
    let better = alone.pct(0.99).min(after.pct(0.99)).max(0.001);
    report.add(format!(
        "rejection flood, {name}: genuine webhooks at {rate:.0}/s alone: {}; alone again: {}; during a burst of {} forgeries over {FLOOD_CONNECTIONS} connections ({:.0}/s while it lasted): {} ({} errors); p99 {:.2}× the better run alone",
        percentiles(&alone.hist),
        percentiles(&after.hist),
        burst.requests,
        burst.rate(),
        percentiles(&during.hist),
        during.errors,
        during.pct(0.99) / better,
    ));
    report.add(format!(
        "rejection flood, {name}: with forgeries for the whole window ({} at {:.0}/s): {} ({} errors); p99 {:.2}× the better run alone",
        flood.requests,
        flood.rate(),
        percentiles(&flooded.hist),
        flooded.errors,
        flooded.pct(0.99) / better,
    ));
    report.add(format!(
        "rejection flood, {name}: the log counted {counted} refusals and keeps {kept} rows (at most {} per source and reason)",
        hookgate::store::REJECTIONS_KEEP
    ));
}
