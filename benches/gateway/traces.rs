//! Scenario `traces`: what the OpenTelemetry trace exporter costs ingest, off (the
//! default) against the build before traces existed, and on against off.
//!
//! Per store (`HOOKGATE_BENCH_TRACES_STORES`, a comma list of `embedded`, `redis`,
//! `postgres`; `embedded` when unset), gateways in the production shape (each
//! delivering to a sink of its own while it ingests) in up to three variants:
//!
//! - `off`: this build (or `HOOKGATE_BENCH_BIN`, as every scenario), no `[telemetry]`;
//! - `on`: the same with `[telemetry] otlp_endpoint` at a collector: the bare-hyper
//!   baseline process, which reads every body and answers 200 on any path (an OTLP
//!   exporter takes any 2xx; the body, not a protobuf, is ignored), every webhook
//!   sampled (`sample_ratio` 1.0, the default);
//! - `today`: only when `HOOKGATE_BENCH_TODAY_BIN` names another hookgate binary (a
//!   build of the commit before traces), that binary, no `[telemetry]`. Build it as
//!   the bench builds its own (`cargo bench --bench gateway --no-run`, then its
//!   `target/release/hookgate`): `cargo build --release` leaves out the features
//!   the dev-dependencies add (tokio's `test-util`), which the bench's gateway has.
//!
//! Each round runs every variant once, the order rotated from one round to the next
//! (`off` first in the first round, which sets the rate); each run is a fresh
//! gateway, store and sink: a warm-up (a short closed loop, its deliveries and spans
//! settled), then a closed loop of 4 connections for the duration (throughput, and
//! the gateway's CPU per webhook), then an open loop at a fixed rate
//! (`HOOKGATE_BENCH_RATE`, default half of `off`'s closed-loop rate in the first
//! round, the same for every variant and round) for the duration (p50/p99/p99.9 from
//! each request's due time). Every run sends distinct, freshly signed events of the
//! same shape. Figures are medians of the rounds, with each round's range and the
//! per-round ratios (variants in one round ran minutes apart, on the same host):
//! the spread of the rounds is the noise the ratios are read against. The `on` runs
//! also report the spans the collector took per webhook, and the failed exports.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::load::{LoadResult, addr, closed_loop, prepare};
use crate::measure::{CpuMeter, median};
use crate::open::open_loop;
use crate::procs::{Proc, Store, start_baseline};
use crate::scenarios::{Forwarding, Subject, percentiles, scrape};
use crate::{Report, Settings};

/// Connections of the closed loop (as the `latency` scenarios' few).
const FEW: usize = 4;

#[derive(Clone, PartialEq)]
enum Variant {
    Off,
    On,
    Today(PathBuf),
}

impl Variant {
    fn name(&self) -> &'static str {
        match self {
            Variant::Off => "off",
            Variant::On => "on",
            Variant::Today(_) => "today",
        }
    }
}

/// One variant's figures, a value per round.
#[derive(Default)]
struct Figures {
    rate: Vec<f64>,
    /// The gateway's CPU per webhook in the closed loop, µs.
    gw_us: Vec<f64>,
    /// The collector's, µs (the `on` variant).
    collector_us: Vec<f64>,
    p50: Vec<f64>,
    p99: Vec<f64>,
    p999: Vec<f64>,
    errors: u64,
    /// Spans exported per accepted webhook, and the spans whose export failed.
    spans_per_webhook: Vec<f64>,
    spans_failed: f64,
}

/// One run's figures.
struct Run {
    closed: LoadResult,
    gw_us: f64,
    collector_us: f64,
    open: LoadResult,
    spans: (f64, f64),
    accepted: u64,
    /// The sink's deliveries at the end, and the webhooks accepted (warm-up included).
    deliveries: (u64, u64),
}

pub async fn traces(report: &mut Report, store: Store, s: Settings) {
    let smoke = s.rounds == 1 && s.duration < Duration::from_secs(2);
    let collector = start_baseline();
    check_collector(collector.port).await;
    let mut variants = vec![Variant::Off, Variant::On];
    if let Some(bin) = std::env::var_os("HOOKGATE_BENCH_TODAY_BIN").filter(|b| !b.is_empty()) {
        let bin = PathBuf::from(bin);
        assert!(bin.is_file(), "HOOKGATE_BENCH_TODAY_BIN: no file {bin:?}");
        variants.push(Variant::Today(bin));
    }
    let mut rate = std::env::var("HOOKGATE_BENCH_RATE")
        .ok()
        .and_then(|r| r.parse::<f64>().ok());
    let rate_set = rate.is_some();
    let mut figures: Vec<Figures> = variants.iter().map(|_| Figures::default()).collect();
    let name = store.name();
    for round in 0..s.rounds {
        let mut order: Vec<usize> = (0..variants.len()).collect();
        order.rotate_left(round % variants.len());
        for i in order {
            let variant = &variants[i];
            let run = run(store, variant, &collector, round, &mut rate, s, smoke).await;
            let f = &mut figures[i];
            println!(
                "  round {round}, {}: closed loop ({} connections) {:.0}/s (p99 {:.2} ms, {} errors; gateway CPU {:.0} µs per webhook{}); open loop at {:.0}/s: {} ({} errors); {} deliveries of {} accepted{}",
                variant.name(),
                FEW,
                run.closed.rate(),
                run.closed.pct(0.99),
                run.closed.errors,
                run.gw_us,
                if *variant == Variant::On {
                    format!(", collector {:.0} µs", run.collector_us)
                } else {
                    String::new()
                },
                rate.unwrap_or(0.0),
                percentiles(&run.open.hist),
                run.open.errors,
                run.deliveries.0,
                run.deliveries.1,
                if *variant == Variant::On {
                    format!(
                        "; {:.0} spans exported ({:.2} per webhook), {:.0} failed",
                        run.spans.0,
                        run.spans.0 / run.accepted.max(1) as f64,
                        run.spans.1
                    )
                } else {
                    String::new()
                },
            );
            f.rate.push(run.closed.rate());
            f.gw_us.push(run.gw_us);
            f.collector_us.push(run.collector_us);
            f.p50.push(run.open.pct(0.5));
            f.p99.push(run.open.pct(0.99));
            f.p999.push(run.open.pct(0.999));
            f.errors += run.closed.errors + run.open.errors;
            f.spans_per_webhook
                .push(run.spans.0 / run.accepted.max(1) as f64);
            f.spans_failed += run.spans.1;
        }
    }
    drop(collector);
    let rate = rate.unwrap_or(0.0);
    let off = &figures[0];
    let mut closed = Vec::new();
    let mut open = Vec::new();
    for (variant, f) in variants.iter().zip(&figures) {
        let ratio = match variant {
            Variant::Off => String::new(),
            Variant::On => format!(
                " ({} off; rounds {})",
                times(median(f.rate.clone()) / median(off.rate.clone())),
                per_round(&f.rate, &off.rate)
            ),
            Variant::Today(_) => format!(
                " (off {} today; rounds {})",
                times(median(off.rate.clone()) / median(f.rate.clone())),
                per_round(&off.rate, &f.rate)
            ),
        };
        closed.push(format!(
            "{} {}/s (rounds {}){ratio}, gateway CPU {:.0} µs per webhook (rounds {})",
            variant.name(),
            thousands(median(f.rate.clone())),
            range(&f.rate, thousands),
            median(f.gw_us.clone()),
            range(&f.gw_us, |v| format!("{v:.0}")),
        ));
        let ratio = match variant {
            Variant::Off => String::new(),
            Variant::On => format!(
                "; p99 {} off (rounds {})",
                times(median(f.p99.clone()) / median(off.p99.clone())),
                per_round(&f.p99, &off.p99)
            ),
            Variant::Today(_) => format!(
                "; off p99 {} today (rounds {})",
                times(median(off.p99.clone()) / median(f.p99.clone())),
                per_round(&off.p99, &f.p99)
            ),
        };
        open.push(format!(
            "{} p50 {:.2} ms, p99 {:.2} ms (rounds {}), p99.9 {:.2} ms, {} errors in both loops{ratio}",
            variant.name(),
            median(f.p50.clone()),
            median(f.p99.clone()),
            range(&f.p99, |v| format!("{v:.2}")),
            median(f.p999.clone()),
            f.errors,
        ));
    }
    report.add(format!(
        "traces, {name}: closed loop, {FEW} connections, {} s per run, {} rounds: {}",
        s.duration.as_secs_f64(),
        s.rounds,
        closed.join("; ")
    ));
    report.add(format!(
        "traces, {name}: open loop at {}/s ({}), {} connections: {}",
        thousands(rate),
        if rate_set {
            "HOOKGATE_BENCH_RATE"
        } else {
            "half of off's closed-loop rate in round 1"
        },
        s.connections,
        open.join("; ")
    ));
    let on = &figures[1];
    report.add(format!(
        "traces, {name}: on exported {:.2} spans per accepted webhook (rounds {}; {:.0} failed) to the collector, which spent {:.0} µs of CPU per webhook in the closed loop",
        median(on.spans_per_webhook.clone()),
        range(&on.spans_per_webhook, |v| format!("{v:.2}")),
        on.spans_failed,
        median(on.collector_us.clone()),
    ));
}

/// One variant's run: a fresh gateway (delivering to its own sink), warmed up, then
/// the closed loop and the open loop. Sets `rate` from `off`'s closed loop when it
/// has none yet.
async fn run(
    store: Store,
    variant: &Variant,
    collector: &Proc,
    round: usize,
    rate: &mut Option<f64>,
    s: Settings,
    smoke: bool,
) -> Run {
    let (bin, global) = match variant {
        Variant::Off => (None, String::new()),
        Variant::On => (
            None,
            format!(
                "[telemetry]\notlp_endpoint = \"http://127.0.0.1:{}\"\n",
                collector.port
            ),
        ),
        Variant::Today(bin) => (Some(bin.as_path()), String::new()),
    };
    let subject = Subject::start_with(store, Forwarding::On, bin, &global).await;
    let port = subject.gw.port;
    let sink = subject.sink.as_ref().expect("sink");
    let tag = |what: &str| format!("tr{round}{}{what}", variant.name());
    // Enough for the duration at 15,000 a second (4 connections take a few thousand).
    let closed_n = if smoke {
        20_000
    } else {
        15_000 * s.duration.as_secs().max(1) as usize
    };
    // The warm-up: the connections, the store's first pages, the exporter's client.
    let warm_for = if smoke {
        Duration::from_millis(300)
    } else {
        Duration::from_secs(2)
    };
    let warm = closed_loop(
        addr(port),
        "/ingest/bench",
        Arc::new(prepare(closed_n / 4, &tag("w"), None)),
        FEW,
        warm_for,
        false,
    )
    .await;
    let mut accepted = warm.requests - warm.errors;
    settle(sink, accepted).await;
    let spans_before = spans(subject.gw.admin).await;
    let mut pids = subject.pids();
    pids.push(collector.child.id());
    let requests = Arc::new(prepare(closed_n, &tag("c"), None));
    let meter = CpuMeter::start(&pids);
    let closed = closed_loop(
        addr(port),
        "/ingest/bench",
        requests.clone(),
        FEW,
        s.duration,
        false,
    )
    .await;
    let cpu = meter.stop();
    assert!(
        (closed.requests as usize) < requests.len(),
        "the closed loop ran out of webhooks: prepare more"
    );
    drop(requests);
    accepted += closed.requests - closed.errors;
    settle(sink, accepted).await;
    let rate = *rate.get_or_insert(closed.rate() * 0.5);
    let open = open_loop(
        addr(port),
        "/ingest/bench",
        Arc::new(prepare(
            ((rate * s.duration.as_secs_f64()) as usize + 10).max(10),
            &tag("o"),
            None,
        )),
        s.connections,
        rate,
        s.duration,
        None,
    )
    .await;
    accepted += open.requests - open.errors;
    let delivered = settle(sink, accepted).await;
    let spans_after = spans(subject.gw.admin).await;
    let last = pids.len() - 1;
    Run {
        gw_us: cpu.per_request(0, closed.requests),
        collector_us: cpu.per_request(last, closed.requests),
        closed,
        open,
        spans: (
            spans_after.0 - spans_before.0,
            spans_after.1 - spans_before.1,
        ),
        // The spans counted cover the closed and open loops, not the warm-up.
        accepted: accepted - (warm.requests - warm.errors),
        deliveries: (delivered, accepted),
    }
}

/// Wait until the sink has every accepted webhook (or its count stalls for 10 s),
/// then for the exporter's next batch (it sends every second): what one window
/// leaves behind is not charged to the next.
async fn settle(sink: &crate::sink::SinkProc, accepted: u64) -> u64 {
    let (got, _) = sink.settle(accepted, Duration::from_secs(10)).await;
    if got < accepted {
        println!("  (the sink had {got} of {accepted} deliveries when its count stalled)");
    }
    tokio::time::sleep(hookgate::telemetry::traces::EXPORT_INTERVAL + Duration::from_millis(500))
        .await;
    got
}

/// The gateway's exported and failed span counters (zeros on a build without them).
async fn spans(admin: u16) -> (f64, f64) {
    let text = scrape(admin).await;
    let counter = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (
        counter("hookgate_trace_spans_exported_total"),
        counter("hookgate_trace_spans_failed_total"),
    )
}

/// The collector answers an OTLP/HTTP export as the exporter needs: 200, after
/// reading the body, on `/v1/traces`.
async fn check_collector(port: u16) {
    let r = reqwest::Client::new()
        .post(format!("http://127.0.0.1:{port}/v1/traces"))
        .header("content-type", "application/x-protobuf")
        .body(vec![0u8; 64 * 1024])
        .send()
        .await
        .expect("collector");
    assert_eq!(r.status(), 200, "the collector answers an export with 200");
}

/// "5,210"
fn thousands(v: f64) -> String {
    let digits = format!("{:.0}", v.max(0.0));
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// "0.96×"
fn times(r: f64) -> String {
    format!("{r:.2}×")
}

/// The rounds' lowest and highest: "5,100–5,300".
fn range(v: &[f64], fmt: impl Fn(f64) -> String) -> String {
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    format!("{}–{}", fmt(lo), fmt(hi))
}

/// Each round's ratio a/b: "0.95, 1.02, 0.98".
fn per_round(a: &[f64], b: &[f64]) -> String {
    a.iter()
        .zip(b)
        .map(|(a, b)| format!("{:.2}", a / b.max(1e-9)))
        .collect::<Vec<_>>()
        .join(", ")
}
