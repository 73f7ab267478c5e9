//! The gateway benchmark: every figure against a bare-hyper baseline measured in the
//! same run.
//!
//! ```text
//! cargo bench --bench gateway                      # every scenario
//! cargo bench --bench gateway -- ingest-embedded   # one scenario (see SCENARIOS)
//! cargo bench --bench gateway -- --smoke           # about two minutes: proves the harness works
//! cargo bench --bench gateway -- forward-drain --drain-entries 20000  # a shorter drain
//! cargo bench --bench gateway -- ingest-postgres latency-postgres forward-drain-postgres
//! cargo bench --bench gateway -- queue-drain queue-ingest  # NATS JetStream and RabbitMQ
//! cargo bench --bench gateway -- pull-drain        # a pull route drained by `hookgate listen`, and idle long polls
//! HOOKGATE_BENCH_BEFORE_BIN=… cargo bench --bench gateway -- drain-ab  # an A/B of two builds
//! ```
//!
//! Layout: the gateway (`hookgate serve`, release build) and the baseline (this binary
//! re-executed as a bare hyper server that reads the body and answers 200) run as child
//! processes with the same runtime settings (tokio multi-thread, one worker per core);
//! the load generator and, for the forward scenarios, the sink run in this process.
//! Requests are pre-signed Stripe webhooks (`t=…,v1=…`) with unique event ids and
//! 1–4 KiB bodies, sent over keep-alive connections, either in a closed loop (fixed
//! concurrency: throughput) or an open loop (fixed rate: latency measured from each
//! request's intended send time, so coordinated omission does not hide queueing).
//! Gateway and baseline runs alternate; each figure is the median of the rounds.
//!
//! Modules: [`load`] (requests and the closed loop), [`open`] (the open loop), [`procs`] (baseline, gateway and
//! Redis processes), [`sink`] (the forward scenarios' destination), [`measure`] (CPU,
//! disk, medians), [`scenarios`] (one function per scenario), [`console`] (the
//! console's pages with a large store behind them), [`flood`] (genuine webhooks
//! while forgeries flood in), [`traces`] (what the trace exporter costs, off
//! and on, against the build before traces), [`reload`] (a configuration
//! reload every second under load), [`reconcile`] (a reconciliation of a large
//! history under load), [`drain_ab`] (the drain of this build against another,
//! alternated in one run) and [`queues`] (delivering into NATS JetStream and
//! RabbitMQ, on private servers that [`brokers`] starts, against delivering over
//! HTTP).

mod brokers;
mod console;
mod drain_ab;
mod flood;
mod load;
mod measure;
mod open;
mod pgserver;
mod procs;
mod pull;
mod queues;
mod reconcile;
mod reload;
mod scenarios;
mod search;
mod sink;
mod traces;

use std::time::Duration;

use procs::Store;
use scenarios::{
    forward_drain, forward_drain_postgres, forward_e2e, ingest, ingest_postgres, latency, profile,
    recovery,
};

const SCENARIOS: &[&str] = &[
    "ingest-embedded",
    "ingest-redis",
    "latency-embedded",
    "latency-redis",
    "ingest-postgres",
    "latency-postgres",
    "duplicates",
    "forward-drain",
    "forward-drain-postgres",
    "queue-drain",
    "queue-ingest",
    "pull-drain",
    "forward-e2e",
    "recovery",
    "console",
    "rejection-flood",
    "search",
    "traces",
    "reload",
    "reconcile",
    "drain-ab",
    "profile-embedded",
    "profile-redis",
];

const SECRET: &str = "whsec_bench_secret";

#[derive(Clone, Copy)]
struct Settings {
    duration: Duration,
    connections: usize,
    rounds: usize,
    drain_entries: usize,
    /// The backlog of `queue-drain` (`--queue-entries`).
    queue_entries: usize,
    recovery_entries: usize,
    outage: Duration,
}

impl Settings {
    fn full() -> Settings {
        Settings {
            duration: Duration::from_secs(10),
            connections: 64,
            rounds: 3,
            drain_entries: 100_000,
            queue_entries: 50_000,
            recovery_entries: 10_000,
            outage: Duration::from_secs(30),
        }
    }

    fn smoke() -> Settings {
        Settings {
            duration: Duration::from_millis(700),
            connections: 8,
            rounds: 1,
            drain_entries: 500,
            queue_entries: 300,
            recovery_entries: 200,
            outage: Duration::from_secs(2),
        }
    }
}

fn main() {
    if let Ok(port) = std::env::var("HOOKGATE_BENCH_BASELINE") {
        procs::baseline_server(port.parse().expect("port"));
        return;
    }
    if let Ok(port) = std::env::var("HOOKGATE_BENCH_SINK") {
        sink::sink_server(port.parse().expect("port"));
        return;
    }
    hookgate::tls::install_provider();
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let smoke = args.iter().any(|a| a == "--smoke");
    let mut settings = if smoke {
        Settings::smoke()
    } else {
        Settings::full()
    };
    if let Some(i) = args.iter().position(|a| a == "--duration") {
        settings.duration = Duration::from_secs(args[i + 1].parse().expect("--duration SECS"));
    }
    if let Some(i) = args.iter().position(|a| a == "--rounds") {
        settings.rounds = args[i + 1].parse().expect("--rounds N");
    }
    if let Some(i) = args.iter().position(|a| a == "--drain-entries") {
        settings.drain_entries = args[i + 1].parse().expect("--drain-entries N");
    }
    if let Some(i) = args.iter().position(|a| a == "--queue-entries") {
        settings.queue_entries = args[i + 1].parse().expect("--queue-entries N");
    }
    let picked: Vec<&str> = SCENARIOS
        .iter()
        .copied()
        .filter(|s| args.iter().any(|a| a == s))
        .collect();
    let scenarios = if picked.is_empty() {
        SCENARIOS.to_vec()
    } else {
        picked
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async move {
        let mut report = Report::default();
        // The queue scenarios' brokers, started once for the run (a RabbitMQ node
        // takes seconds to start).
        let mut brokers: Option<brokers::Brokers> = None;
        println!(
            "machine: {} cores, {}",
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1),
            cpu_model()
        );
        // The brokers stop after the last queue scenario: the scenarios after it
        // do not share the cores, or the memory, with them.
        let last_queue = scenarios.iter().rposition(|s| s.starts_with("queue-"));
        for (k, s) in scenarios.into_iter().enumerate() {
            println!("\n== {s}");
            match s {
                "ingest-embedded" => ingest(&mut report, Store::Embedded, settings, false).await,
                "ingest-redis" => ingest(&mut report, Store::Redis, settings, false).await,
                "latency-embedded" => latency(&mut report, Store::Embedded, settings).await,
                "latency-redis" => latency(&mut report, Store::Redis, settings).await,
                "ingest-postgres" => ingest_postgres(&mut report, settings).await,
                "latency-postgres" => latency(&mut report, Store::Postgres, settings).await,
                "forward-drain-postgres" => forward_drain_postgres(&mut report, settings).await,
                "duplicates" => ingest(&mut report, Store::Embedded, settings, true).await,
                "forward-drain" => forward_drain(&mut report, settings).await,
                "queue-drain" => {
                    let b = started(&mut brokers).await;
                    queues::queue_drain(&mut report, settings, b, smoke).await
                }
                "queue-ingest" => {
                    let b = started(&mut brokers).await;
                    queues::queue_ingest(&mut report, settings, b).await
                }
                "pull-drain" => pull::pull_drain_scenario(&mut report, settings).await,
                "forward-e2e" => forward_e2e(&mut report, settings).await,
                "recovery" => recovery(&mut report, settings).await,
                "profile-embedded" => profile(&mut report, Store::Embedded, settings).await,
                "profile-redis" => profile(&mut report, Store::Redis, settings).await,
                "rejection-flood" => {
                    for store in [Store::Embedded, Store::Redis, Store::Postgres] {
                        flood::rejection_flood(&mut report, store, settings).await;
                    }
                }
                "search" => {
                    // `HOOKGATE_BENCH_SEARCH_STORES=postgres` runs one store's.
                    let only = std::env::var("HOOKGATE_BENCH_SEARCH_STORES").unwrap_or_default();
                    for store in [Store::Embedded, Store::Redis, Store::Postgres] {
                        if only.is_empty() || only.split(',').any(|s| s == store.name()) {
                            search::search(&mut report, store, smoke).await;
                        }
                    }
                }
                "reload" => reload::reload(&mut report, settings).await,
                "reconcile" => {
                    // `HOOKGATE_BENCH_RECONCILE_STORES=embedded,redis,postgres` picks
                    // the stores (embedded when unset).
                    let only = std::env::var("HOOKGATE_BENCH_RECONCILE_STORES")
                        .ok()
                        .filter(|s| !s.is_empty())
                        .unwrap_or_else(|| "embedded".into());
                    for store in [Store::Embedded, Store::Redis, Store::Postgres] {
                        if only.split(',').any(|s| s.trim() == store.name()) {
                            reconcile::reconcile(&mut report, store, settings, smoke).await;
                        }
                    }
                }
                // `HOOKGATE_BENCH_BEFORE_BIN` names the other build.
                "drain-ab" => drain_ab::drain_ab(&mut report, settings).await,
                "traces" => {
                    // `HOOKGATE_BENCH_TRACES_STORES=embedded,redis,postgres` picks the
                    // stores (embedded when unset); `HOOKGATE_BENCH_TODAY_BIN` adds
                    // the build before traces.
                    let only = std::env::var("HOOKGATE_BENCH_TRACES_STORES")
                        .ok()
                        .filter(|s| !s.is_empty())
                        .unwrap_or_else(|| "embedded".into());
                    for store in [Store::Embedded, Store::Redis, Store::Postgres] {
                        if only.split(',').any(|s| s.trim() == store.name()) {
                            traces::traces(&mut report, store, settings).await;
                        }
                    }
                }
                "console" => {
                    console::console(&mut report, Store::Embedded, settings).await;
                    console::console(&mut report, Store::Redis, settings).await;
                }
                _ => unreachable!(),
            }
            if Some(k) == last_queue {
                brokers = None;
            }
        }
        println!("\n== summary");
        for line in &report.lines {
            println!("{line}");
        }
    });
}

/// The brokers in `slot`, started on first use.
async fn started(slot: &mut Option<brokers::Brokers>) -> &brokers::Brokers {
    if slot.is_none() {
        *slot = Some(brokers::Brokers::start().await);
    }
    slot.as_ref().expect("started")
}

#[derive(Default)]
struct Report {
    lines: Vec<String>,
}

impl Report {
    fn add(&mut self, line: String) {
        println!("  {line}");
        self.lines.push(line);
    }
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|s| s.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into())
}
