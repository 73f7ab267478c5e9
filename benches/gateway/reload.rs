//! Scenario `reload`: what reloading the configuration every second costs ingest,
//! in the production shape (the gateway delivering to a sink while it ingests).
//!
//! Each round runs two variants on fresh gateways (embedded store), the order
//! rotated from one round to the next: `steady` (no reload) and `reloading` (a
//! task rewrites the configuration file every second, alternating the file the
//! gateway started with and the same plus a second source with a route of its own,
//! and calls `POST /admin/config/reload`: each call compiles and swaps a new route
//! table, and starts or stops a route loop). Both take an open loop at a fixed rate
//! (`HOOKGATE_BENCH_RATE`, default 200 a second, the issue's load) for the duration,
//! latency measured from each request's due time. The figure is the p99 of
//! `reloading` against `steady`'s, per round and as the median of the rounds.
//!
//! ```text
//! cargo bench --bench gateway -- reload                 # 3 rounds of 10 s
//! cargo bench --bench gateway -- reload --duration 60   # a minute per run
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use crate::load::{addr, closed_loop, prepare};
use crate::measure::median;
use crate::open::open_loop;
use crate::procs::Store;
use crate::scenarios::{Forwarding, Subject, percentiles};
use crate::{Report, Settings};

/// The second source the `reloading` variant adds and removes.
const EXTRA: &str = "\n[[sources]]\nname = \"extra\"\nprovider = \"stripe\"\nsecret = \"whsec_extra\"\ndestination = \"http://127.0.0.1:9/\"\n";

pub async fn reload(report: &mut Report, s: Settings) {
    let rate = std::env::var("HOOKGATE_BENCH_RATE")
        .ok()
        .and_then(|r| r.parse::<f64>().ok())
        .unwrap_or(200.0);
    let mut p99 = [Vec::new(), Vec::new()];
    let mut errors = [0u64, 0u64];
    let mut reloads = Vec::new();
    for round in 0..s.rounds {
        let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        for variant in order {
            let reloading = variant == 1;
            let subject = Subject::start(Store::Embedded, Forwarding::On).await;
            let port = subject.gw.port;
            // The warm-up: connections, the store's first pages.
            let _ = closed_loop(
                addr(port),
                "/ingest/bench",
                Arc::new(prepare(2_000, &format!("rl{round}{variant}w"), None)),
                4,
                Duration::from_millis(500),
                false,
            )
            .await;
            let stop = Arc::new(AtomicBool::new(false));
            let done = Arc::new(AtomicU64::new(0));
            let reloader = reloading.then(|| {
                let (stop, done) = (stop.clone(), done.clone());
                let cfg = subject.config_path();
                let admin = subject.gw.admin;
                tokio::spawn(async move { reload_every_second(cfg, admin, stop, done).await })
            });
            let n = ((rate * s.duration.as_secs_f64()) as usize + 10).max(10);
            let open = open_loop(
                addr(port),
                "/ingest/bench",
                Arc::new(prepare(n, &format!("rl{round}{variant}o"), None)),
                s.connections.min(16),
                rate,
                s.duration,
                None,
            )
            .await;
            stop.store(true, Ordering::SeqCst);
            if let Some(task) = reloader {
                let _ = task.await;
                reloads.push(done.load(Ordering::SeqCst) as f64);
            }
            println!(
                "  round {round}, {}: open loop at {rate:.0}/s: {} ({} errors){}",
                if reloading { "reloading" } else { "steady" },
                percentiles(&open.hist),
                open.errors,
                if reloading {
                    format!(", {} reloads", done.load(Ordering::SeqCst))
                } else {
                    String::new()
                }
            );
            p99[variant].push(open.pct(0.99));
            errors[variant] += open.errors;
        }
    }
    let ratios: Vec<String> = p99[1]
        .iter()
        .zip(&p99[0])
        .map(|(r, s)| format!("{:.2}", r / s.max(1e-9)))
        .collect();
    report.add(format!(
        "reload, embedded: open loop at {rate:.0}/s, {} s per run, {} rounds: steady p99 {:.2} ms ({} errors); reloading every second ({} reloads per run) p99 {:.2} ms ({} errors): {:.2}× steady (rounds {})",
        s.duration.as_secs_f64(),
        s.rounds,
        median(p99[0].clone()),
        errors[0],
        median(reloads.clone()),
        median(p99[1].clone()),
        errors[1],
        median(p99[1].clone()) / median(p99[0].clone()).max(1e-9),
        ratios.join(", ")
    ));
}

/// Alternate the file at `cfg` between its first text and that plus [`EXTRA`],
/// and reload, every second until `stop`; count the reloads applied in `done`.
async fn reload_every_second(
    cfg: std::path::PathBuf,
    admin: u16,
    stop: Arc<AtomicBool>,
    done: Arc<AtomicU64>,
) {
    let first = std::fs::read_to_string(&cfg).expect("the gateway's configuration");
    let client = reqwest::Client::new();
    let mut with_extra = true;
    while !stop.load(Ordering::SeqCst) {
        let text = match with_extra {
            true => format!("{first}{EXTRA}"),
            false => first.clone(),
        };
        std::fs::write(&cfg, text).expect("write the configuration");
        let r = client
            .post(format!("http://127.0.0.1:{admin}/admin/config/reload"))
            .send()
            .await
            .expect("reload");
        assert!(r.status().is_success(), "reload: {}", r.status());
        done.fetch_add(1, Ordering::SeqCst);
        with_extra = !with_extra;
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}
