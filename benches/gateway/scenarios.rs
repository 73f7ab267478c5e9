//! The scenarios: each runs the gateway (and the baseline where it has one), drives
//! load at it and adds its summary line to the report.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use crate::load::{LoadResult, Prepared, addr, closed_loop, prepare};
use crate::measure::{CpuMeter, CpuUse, FsyncProbe, ThreadMeter, median};
use crate::open::open_loop;
use crate::procs::{
    Store, start_baseline, start_gateway, start_gateway_with, start_postgres, start_redis,
    store_toml,
};
use crate::sink::{SinkProc, start_sink};
use crate::{Report, Settings};

/// Ingest every prepared webhook through the gateway on `port`, each accepted: the
/// backlog of the forward scenarios.
pub async fn ingest_backlog(port: u16, requests: Vec<Prepared>, connections: usize) {
    let n = requests.len();
    let r = closed_loop(
        addr(port),
        "/ingest/bench",
        Arc::new(requests),
        connections,
        Duration::from_secs(600),
        false,
    )
    .await;
    assert_eq!(r.requests as usize, n, "backlog ingest");
}

/// One closed-loop round against `port`, with the CPU time of `pids` over it.
/// `cycle`: take the requests again once they run out (the baseline, which does
/// not dedupe).
pub(crate) async fn metered_round(
    port: u16,
    pids: &[u32],
    requests: &Arc<Vec<Prepared>>,
    s: Settings,
    cycle: bool,
) -> (LoadResult, CpuUse) {
    let meter = CpuMeter::start(pids);
    let result = closed_loop(
        addr(port),
        "/ingest/bench",
        requests.clone(),
        s.connections,
        s.duration,
        cycle,
    )
    .await;
    (result, meter.stop())
}

pub async fn baseline_rate(s: Settings, requests: &Arc<Vec<Prepared>>) -> (LoadResult, CpuUse) {
    let b = start_baseline();
    // The baseline does not dedupe: it may take the same requests again.
    let measured = metered_round(b.port, &[b.child.id(), 0], requests, s, true).await;
    drop(b);
    measured
}

/// Whether the gateway delivers while it ingests. `Off`: the source is paused, so the
/// gateway only ingests (what the figures before the production-shape scenarios
/// measured, give or take the failing attempts they made). `On`: the production
/// shape, every accepted entry delivered during the run to a sink in a process of its
/// own, with the forwarder's default settings.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Forwarding {
    Off,
    On,
}

/// A gateway for the ingest and latency scenarios, with its sink when it forwards.
pub(crate) struct Subject {
    pub(crate) gw: crate::procs::Proc,
    pub(crate) sink: Option<SinkProc>,
    redis: Option<crate::procs::Redis>,
    pg: Option<crate::procs::Postgres>,
    dir: tempfile::TempDir,
}

impl Subject {
    pub(crate) async fn start(store: Store, forwarding: Forwarding) -> Subject {
        Subject::start_with(store, forwarding, None, "").await
    }

    /// [`Subject::start`] running the gateway binary `bin` when given (else the one
    /// every scenario runs), with the top-level TOML `global` added to its
    /// configuration (before `HOOKGATE_BENCH_GLOBAL`'s).
    pub(crate) async fn start_with(
        store: Store,
        forwarding: Forwarding,
        bin: Option<&std::path::Path>,
        global: &str,
    ) -> Subject {
        Subject::start_source(store, forwarding, bin, global, "").await
    }

    /// [`Subject::start_with`], with the TOML `source` added to the source's table
    /// (before `HOOKGATE_BENCH_SOURCE`'s).
    pub(crate) async fn start_source(
        store: Store,
        forwarding: Forwarding,
        bin: Option<&std::path::Path>,
        global: &str,
        source: &str,
    ) -> Subject {
        let dir = tempfile::tempdir().expect("tempdir");
        let redis = (store == Store::Redis).then(start_redis);
        let pg = store
            .is_postgres()
            .then(|| start_postgres(store == Store::PostgresStandby));
        let sink = (forwarding == Forwarding::On).then(SinkProc::start);
        let destination = sink
            .as_ref()
            .map_or("http://127.0.0.1:9/".to_string(), SinkProc::url);
        let gw = start_gateway_with(
            dir.path(),
            &store_toml(store, dir.path(), redis.as_ref(), pg.as_ref()),
            &destination,
            // Extra top-level settings, for diagnosis (e.g. how often the maintenance
            // pass runs: `HOOKGATE_BENCH_GLOBAL='[forwarder]\nmaintenance_interval = "2s"'`).
            &format!(
                "{global}{}",
                std::env::var("HOOKGATE_BENCH_GLOBAL")
                    .unwrap_or_default()
                    .replace("\\n", "\n")
            ),
            // And the source's (`HOOKGATE_BENCH_SOURCE='[sources.delivery]\nconcurrency = 64'`).
            &format!(
                "{source}{}",
                std::env::var("HOOKGATE_BENCH_SOURCE")
                    .unwrap_or_default()
                    .replace("\\n", "\n")
            ),
            bin,
        );
        if forwarding == Forwarding::Off {
            admin_post(gw.admin, "/admin/sources/bench/pause").await;
        }
        Subject {
            gw,
            sink,
            redis,
            pg,
            dir,
        }
    }

    /// The gateway's configuration file (a reload reads it again).
    pub(crate) fn config_path(&self) -> std::path::PathBuf {
        self.dir.path().join("hookgate.toml")
    }

    /// The processes whose CPU a round reports: the gateway, the load generator
    /// (this process), then Redis and the sink where there are.
    pub(crate) fn pids(&self) -> Vec<u32> {
        let mut pids = vec![self.gw.child.id(), 0];
        pids.extend(self.redis.as_ref().map(|r| r.child.id()));
        pids.extend(self.sink.as_ref().map(|s| s.proc.child.id()));
        pids
    }
}

async fn admin_post(admin: u16, path: &str) {
    hookgate::tls::install_provider();
    let r = reqwest::Client::new()
        .post(format!("http://127.0.0.1:{admin}{path}"))
        .send()
        .await
        .expect("admin");
    assert!(r.status().is_success(), "{path}: {}", r.status());
}

/// One variant's figures over the rounds.
#[derive(Default)]
struct Figures {
    rates: Vec<f64>,
    p99s: Vec<f64>,
    server_us: Vec<f64>,
    sink_us: Vec<f64>,
    rss: f64,
    /// Share of the accepted entries the sink had when the load stopped.
    delivered_in_window: Vec<f64>,
    /// How long after the load stopped the last delivery arrived.
    settled_after: Vec<f64>,
}

pub async fn ingest(report: &mut Report, store: Store, s: Settings, duplicates: bool) {
    let n = webhooks_for(s);
    let mut base_rates = Vec::new();
    let mut base_us = Vec::new();
    let mut off = Figures::default();
    let mut on = Figures::default();
    for round in 0..s.rounds {
        let requests = Arc::new(prepare(n, &format!("r{round}"), duplicates.then_some(2)));
        let (b, b_cpu) = baseline_rate(s, &requests).await;
        base_rates.push(b.rate());
        base_us.push(b_cpu.per_request(0, b.requests));
        println!(
            "  round {round}: baseline {:.0} req/s (server {:.0} µs + generator {:.0} µs per request, machine {:.0}% busy)",
            b.rate(),
            b_cpu.per_request(0, b.requests),
            b_cpu.per_request(1, b.requests),
            100.0 * b_cpu.busy,
        );
        for forwarding in [Forwarding::Off, Forwarding::On] {
            let subject = Subject::start(store, forwarding).await;
            let pids = subject.pids();
            let threads = ThreadMeter::start(subject.gw.child.id());
            let saturated = saturated_secs(subject.gw.admin).await;
            let (g, cpu) = metered_round(subject.gw.port, &pids, &requests, s, false).await;
            let threads = threads.stop();
            let saturated = saturated_secs(subject.gw.admin).await - saturated;
            let figures = match forwarding {
                Forwarding::Off => &mut off,
                Forwarding::On => &mut on,
            };
            figures.rss = figures.rss.max(subject.gw.peak_rss_mib());
            let mut line = format!(
                "    forwarding {forwarding:?}: {:.0} req/s (p50 {:.2} ms, p99 {:.2} ms, {} errors); CPU per request: gateway {:.0} µs",
                g.rate(),
                g.pct(0.5),
                g.pct(0.99),
                g.errors,
                cpu.per_request(0, g.requests),
            );
            let mut server = cpu.per_request(0, g.requests);
            let mut i = 2;
            if subject.redis.is_some() {
                server += cpu.per_request(i, g.requests);
                line.push_str(&format!(", redis {:.0} µs", cpu.per_request(i, g.requests)));
                i += 1;
            }
            if let Some(sink) = &subject.sink {
                let sink_us = cpu.per_request(i, g.requests);
                figures.sink_us.push(sink_us);
                line.push_str(&format!(", sink {sink_us:.0} µs"));
                // Every answered webhook is a distinct entry, but with redeliveries
                // in the mix, where about every second one is a duplicate.
                let accepted = g.requests - g.errors;
                let expected = if duplicates {
                    accepted.div_ceil(2)
                } else {
                    accepted
                };
                let in_window = sink.count().await;
                let (total, took) = sink.settle(expected, Duration::from_secs(10)).await;
                figures
                    .delivered_in_window
                    .push(in_window as f64 / expected.max(1) as f64);
                figures.settled_after.push(took.as_secs_f64());
                line.push_str(&format!(
                    "; delivered {in_window} of {expected} by the end of the load, {total} {:.1} s later",
                    took.as_secs_f64()
                ));
            }
            line.push_str(&format!(
                " + generator {:.0} µs (machine {:.0}% busy)",
                cpu.per_request(1, g.requests),
                100.0 * cpu.busy
            ));
            println!("{line}");
            println!("      gateway threads: {threads}");
            println!(
                "      ingest saturated (deliveries held to their share) {saturated:.1} s of {:.1} s",
                s.duration.as_secs_f64()
            );
            figures.rates.push(g.rate());
            figures.p99s.push(g.pct(0.99));
            figures.server_us.push(server);
        }
    }
    let b = median(base_rates);
    let name = if duplicates {
        "duplicates (50% redeliveries), embedded".to_string()
    } else {
        format!("ingest, {store:?} store")
    };
    let (g_off, g_on) = (median(off.rates.clone()), median(on.rates.clone()));
    report.add(format!(
        "{name}, c={}: forwarding off {g_off:.0} req/s = {:.0}% of baseline, p99 {:.2} ms, server CPU {:.0} µs per request; \
         forwarding on {g_on:.0} req/s = {:.0}% of baseline, p99 {:.2} ms, server CPU {:.0} µs (sink {:.0} µs), \
         {:.0}% delivered by the end of the load and the rest {:.1} s later; on/off {:.0}%; baseline {b:.0} req/s ({:.0} µs); peak RSS {:.1} / {:.1} MiB",
        s.connections,
        100.0 * g_off / b,
        median(off.p99s),
        median(off.server_us),
        100.0 * g_on / b,
        median(on.p99s),
        median(on.server_us),
        median(on.sink_us),
        100.0 * median(on.delivered_in_window),
        median(on.settled_after),
        100.0 * g_on / g_off,
        median(base_us),
        off.rss,
        on.rss,
    ));
}

/// Percentiles (ms) of a latency histogram in µs: "p50 …, p99 …, p99.9 …".
pub(crate) fn percentiles(h: &Histogram<u64>) -> String {
    format!(
        "p50 {:.2} ms, p99 {:.2} ms, p99.9 {:.2} ms",
        h.value_at_quantile(0.5) as f64 / 1000.0,
        h.value_at_quantile(0.99) as f64 / 1000.0,
        h.value_at_quantile(0.999) as f64 / 1000.0
    )
}

/// Enough distinct webhooks for `s.duration` at ~30,000 req/s (fewer in the smoke
/// size).
pub(crate) fn webhooks_for(s: Settings) -> usize {
    if s.rounds == 1 && s.duration < Duration::from_secs(2) {
        20_000
    } else {
        30_000 * s.duration.as_secs() as usize
    }
}

/// The acknowledgement latency and the end-to-end latency, forwarding off and on:
///
/// 1. few connections (4, a closed loop as `wrk -c4` runs it): p50 and p99, forwarding
///    off and on, and on again right after a burst of 64 connections (the gateway then
///    delivers a backlog while it ingests);
/// 2. an open loop at half of the forwarding-on maximum: the acknowledgement
///    percentiles, off and on, and on: received → delivered (from each request's due
///    time to its arrival at the sink);
///
/// each with the bare-hyper baseline at the same load, and the disk's own 4 KiB
/// `fdatasync` meanwhile.
pub async fn latency(report: &mut Report, store: Store, s: Settings) {
    let few = 4;
    let off = Subject::start(store, Forwarding::Off).await;
    let on = Subject::start(store, Forwarding::On).await;
    let disk = FsyncProbe::start(off.dir.path());
    let c4 = |port: u16, tag: &str| {
        let requests = Arc::new(prepare(webhooks_for(s), tag, None));
        closed_loop(
            addr(port),
            "/ingest/bench",
            requests,
            few,
            s.duration,
            false,
        )
    };
    let off_few = c4(off.gw.port, "off4").await;
    let on_few = c4(on.gw.port, "on4").await;
    let disk_few = disk.finish();
    // The burst: the forwarding-on maximum, which also sets the open loop's rate.
    let max = forwarding_on_max(&on, s).await;
    let sink = on.sink.as_ref().expect("sink");
    // The backlog the burst left: what it and the 4-connection round before it had
    // accepted and the sink had not yet received when it ended, delivered while 4
    // connections keep ingesting.
    let accepted = on_few.requests + max.requests - on_few.errors - max.errors;
    let (after_burst, busy) = tokio::join!(
        c4(on.gw.port, "after"),
        Backlog::watch(sink, accepted, s.duration)
    );
    let expected = accepted + after_burst.requests - after_burst.errors;
    sink.settle(expected, Duration::from_secs(10)).await;
    // (`HOOKGATE_BENCH_RATE` sets another rate: an A/B of two builds at one rate.)
    let rate = std::env::var("HOOKGATE_BENCH_RATE")
        .ok()
        .and_then(|r| r.parse::<f64>().ok())
        .unwrap_or(max.rate() * 0.5);
    let open_requests = |tag: &str| {
        Arc::new(prepare(
            ((rate * s.duration.as_secs_f64()) as usize + 10).max(10),
            tag,
            None,
        ))
    };
    let disk = FsyncProbe::start(off.dir.path());
    let off_open = open_loop(
        addr(off.gw.port),
        "/ingest/bench",
        open_requests("lat"),
        s.connections,
        rate,
        s.duration,
        None,
    )
    .await;
    let sent_at = Arc::new(Mutex::new(HashMap::new()));
    let clock_pair = (Instant::now(), crate::sink::unix_micros());
    let saturated = saturated_secs(on.gw.admin).await;
    let on_open = open_loop(
        addr(on.gw.port),
        "/ingest/bench",
        open_requests("e2e"),
        s.connections,
        rate,
        s.duration,
        Some(sent_at.clone()),
    )
    .await;
    let disk_open = disk.finish();
    let saturated = saturated_secs(on.gw.admin).await - saturated;
    let (delivered, _) = sink
        .settle(
            expected + on_open.requests - on_open.errors,
            Duration::from_secs(10),
        )
        .await;
    let arrivals = sink.arrivals().await;
    let mut e2e = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("hist");
    let mut missing = 0u64;
    for (i, due) in sent_at.lock().expect("lock").iter() {
        let due_unix = clock_pair.1 + due.duration_since(clock_pair.0).as_micros() as u64;
        match arrivals.get(&format!("evt_e2e_{i}")) {
            Some(at) => {
                let _ = e2e.record(at.saturating_sub(due_unix).max(1));
            }
            None => missing += 1,
        }
    }
    // The same backlog drained alone: as many entries taken while the source is
    // paused, then delivered with nothing ingested meanwhile.
    // (None when the burst left none: the smoke size.)
    let alone = match busy.entries {
        0 => None,
        n => Some(Backlog::alone(&on, n, delivered, s).await),
    };
    let rss = (off.gw.peak_rss_mib(), on.gw.peak_rss_mib());
    drop(off);
    drop(on);
    // The same loads against the bare-hyper baseline: what the generator and HTTP
    // alone add on this machine.
    let b = start_baseline();
    let base_few = closed_loop(
        addr(b.port),
        "/ingest/bench",
        Arc::new(prepare(webhooks_for(s), "b4", None)),
        few,
        s.duration,
        true,
    )
    .await;
    let base_open = open_loop(
        addr(b.port),
        "/ingest/bench",
        open_requests("blat"),
        s.connections,
        rate,
        s.duration,
        None,
    )
    .await;
    drop(b);
    report.add(format!(
        "ack latency, {store:?} store, {few} connections: forwarding off p50 {:.2} ms, p99 {:.2} ms ({:.0} req/s); \
         forwarding on p50 {:.2} ms, p99 {:.2} ms ({:.0} req/s) = {:.1}× the off p99; \
         on, right after a burst of {} connections: p50 {:.2} ms, p99 {:.2} ms ({:.0} req/s); \
         the burst's backlog of {} entries delivered {:.2} s after it while 4 connections ingest{}, {}; \
         baseline p50 {:.2} ms, p99 {:.2} ms; the disk's own 4 KiB fdatasync meanwhile: {disk_few}",
        off_few.pct(0.5),
        off_few.pct(0.99),
        off_few.rate(),
        on_few.pct(0.5),
        on_few.pct(0.99),
        on_few.rate(),
        on_few.pct(0.99) / off_few.pct(0.99),
        s.connections,
        after_burst.pct(0.5),
        after_burst.pct(0.99),
        after_burst.rate(),
        busy.entries,
        busy.secs,
        if busy.outlasted {
            " (the ingest ended first)"
        } else {
            ""
        },
        match alone {
            Some(alone) => format!(
                "the same backlog alone in {:.2} s: {:.2}× its time",
                alone.secs,
                busy.secs / alone.secs
            ),
            None => "no backlog to drain alone".into(),
        },
        base_few.pct(0.5),
        base_few.pct(0.99),
    ));
    report.add(format!(
        "ack latency, {store:?} store, open loop at {rate:.0} req/s (half of the forwarding-on max, {:.0} req/s, unless set): \
         forwarding off {} ({} errors); forwarding on {} ({} errors); \
         received → delivered (forwarding on): {} ({missing} of {} not delivered; {delivered} deliveries in all; ingest saturated {saturated:.1} s); \
         baseline {}; the disk's own 4 KiB fdatasync meanwhile: {disk_open}; peak RSS {:.1} / {:.1} MiB",
        max.rate(),
        percentiles(&off_open.hist),
        off_open.errors,
        percentiles(&on_open.hist),
        on_open.errors,
        percentiles(&e2e),
        sent_at.lock().expect("lock").len(),
        percentiles(&base_open.hist),
        rss.0,
        rss.1,
    ));
}

/// `pause` or `resume` the source `bench` of the gateway whose admin port is
/// `admin`. Once a pause is answered no claim takes its deliveries: every store
/// checks the pause in the claim itself.
pub(crate) async fn source_control(admin: u16, what: &str) {
    hookgate::tls::install_provider();
    let r = reqwest::Client::new()
        .post(format!(
            "http://127.0.0.1:{admin}/admin/sources/bench/{what}"
        ))
        .send()
        .await
        .expect("admin");
    assert!(r.status().is_success(), "{what}: {}", r.status());
}

/// A backlog's drain: how many entries, how long they took to arrive at the sink.
struct Backlog {
    entries: u64,
    secs: f64,
    /// Whether the drain took longer than the ingest beside it.
    outlasted: bool,
}

impl Backlog {
    /// From now until the sink has received `accepted` deliveries in all (the
    /// backlog: what it lacks now), while an ingest of `ingest` runs beside it.
    async fn watch(sink: &SinkProc, accepted: u64, ingest: Duration) -> Backlog {
        let start = Instant::now();
        let entries = accepted.saturating_sub(sink.count().await);
        let (count, _) = sink.settle(accepted, Duration::from_secs(10)).await;
        let took = start.elapsed();
        assert!(
            count >= accepted,
            "the backlog was not delivered: {count} of {accepted}"
        );
        Backlog {
            entries,
            secs: took.as_secs_f64(),
            outlasted: took > ingest,
        }
    }

    /// `entries` taken while `subject`'s source is paused (`delivered` arrived at
    /// its sink before), then resumed and timed until all arrived.
    async fn alone(subject: &Subject, entries: u64, delivered: u64, s: Settings) -> Backlog {
        let sink = subject.sink.as_ref().expect("sink");
        source_control(subject.gw.admin, "pause").await;
        ingest_backlog(
            subject.gw.port,
            prepare(entries as usize, "alone", None),
            s.connections,
        )
        .await;
        assert_eq!(sink.count().await, delivered, "delivered while paused");
        let start = Instant::now();
        source_control(subject.gw.admin, "resume").await;
        let (count, _) = sink
            .settle(delivered + entries, Duration::from_secs(10))
            .await;
        assert!(
            count >= delivered + entries,
            "the backlog alone was not delivered"
        );
        Backlog {
            entries,
            secs: start.elapsed().as_secs_f64(),
            outlasted: false,
        }
    }
}

/// The forward drain, once with one route, once with three routes per source (the
/// same sink, one shared concurrency of 64), and once with one route ordered by the
/// provider's object id (every entry its own key: many distinct keys), in the same
/// run: what fan-out and ordering cost per delivery.
pub async fn forward_drain(report: &mut Report, s: Settings) {
    let one = drain(s, 1, false, Store::Embedded, None).await;
    let three = drain(s, 3, false, Store::Embedded, None).await;
    let ordered = drain(s, 1, true, Store::Embedded, None).await;
    // The transform's cost against the same route without it, in alternating
    // drains (this host's rate drifts from one drain to the next).
    let mut plain = Vec::new();
    let mut transformed = Vec::new();
    for _ in 0..2 {
        plain.push(drain(s, 1, false, Store::Embedded, Some("")).await);
        transformed.push(drain(s, 1, false, Store::Embedded, Some(SMALL_TRANSFORM)).await);
    }
    report.add(format!(
        "forward drain, embedded, 1 route: {} entries in {:.2} s = {:.0} deliveries/s, gateway CPU {} per delivery (concurrency 64; peak RSS {:.1} MiB)",
        s.drain_entries,
        one.secs,
        s.drain_entries as f64 / one.secs,
        one.cpu_us_per_delivery(s.drain_entries),
        one.rss_mib
    ));
    let per_delivery = |d: &Drained, routes: usize| d.secs / (s.drain_entries * routes) as f64;
    report.add(format!(
        "forward drain, embedded, 3 routes: {} entries = {} deliveries in {:.2} s = {:.0} deliveries/s, gateway CPU {} per delivery (peak RSS {:.1} MiB); time per delivery {:.2}× that of one route",
        s.drain_entries,
        3 * s.drain_entries,
        three.secs,
        (3 * s.drain_entries) as f64 / three.secs,
        three.cpu_us_per_delivery(3 * s.drain_entries),
        three.rss_mib,
        per_delivery(&three, 3) / per_delivery(&one, 1)
    ));
    report.add(format!(
        "forward drain, embedded, 1 ordered route (a key per entry): {} entries in {:.2} s = {:.0} deliveries/s, gateway CPU {} per delivery (peak RSS {:.1} MiB); {:.2}× the unordered route's rate",
        s.drain_entries,
        ordered.secs,
        s.drain_entries as f64 / ordered.secs,
        ordered.cpu_us_per_delivery(s.drain_entries),
        ordered.rss_mib,
        one.secs / ordered.secs
    ));
    let secs = |d: &[Drained]| d.iter().map(|d| d.secs).sum::<f64>();
    let cpu = |d: &[Drained]| Drained {
        secs: secs(d),
        cpu_secs: d.iter().map(|d| d.cpu_secs).sum(),
        writer_secs: d.iter().map(|d| d.writer_secs).sum(),
        rss_mib: d.iter().map(|d| d.rss_mib).fold(0.0, f64::max),
    };
    let n = plain.len() * s.drain_entries;
    for (i, (p, t)) in plain.iter().zip(&transformed).enumerate() {
        report.add(format!(
            "forward drain, embedded, 1 [[sources.routes]] route, pair {}: without a transform {:.0} deliveries/s, with {SMALL_TRANSFORM} {:.0} deliveries/s: {:.2}×",
            i + 1,
            s.drain_entries as f64 / p.secs,
            s.drain_entries as f64 / t.secs,
            p.secs / t.secs
        ));
    }
    report.add(format!(
        "forward drain, embedded, 1 route with a small transform ({SMALL_TRANSFORM}): {n} entries in {:.2} s = {:.0} deliveries/s, gateway CPU {} per delivery (peak RSS {:.1} MiB, transform workers not counted); the same route without it: {:.0} deliveries/s, gateway CPU {}; {:.2}× the untransformed route's rate",
        secs(&transformed),
        n as f64 / secs(&transformed),
        cpu(&transformed).cpu_us_per_delivery(n),
        cpu(&transformed).rss_mib,
        n as f64 / secs(&plain),
        cpu(&plain).cpu_us_per_delivery(n),
        secs(&plain) / secs(&transformed)
    ));
}

/// The transform of the drain that measures what one costs: a few fields of a
/// Stripe event, as a legacy consumer wants them.
const SMALL_TRANSFORM: &str =
    "{id: .data.object.id, amount: (.data.object.amount / 100), kind: .type}";

pub(crate) struct Drained {
    pub(crate) secs: f64,
    /// The gateway's CPU time during the drain.
    pub(crate) cpu_secs: f64,
    /// Its store writer's, the one thread every delivery's writes go through.
    writer_secs: f64,
    rss_mib: f64,
}

/// The embedded store's writer thread.
const WRITER_THREAD: &str = "hg-sqlite-write";

impl Drained {
    /// The gateway's CPU time per delivery, and its store writer's, in microseconds.
    fn cpu_us_per_delivery(&self, deliveries: usize) -> String {
        format!(
            "{:.1} µs (writer {:.1} µs)",
            self.cpu_secs * 1e6 / deliveries as f64,
            self.writer_secs * 1e6 / deliveries as f64
        )
    }
}

/// Store `s.drain_entries` while the source is paused, resume, and time until the
/// sink has every delivery of its `routes` routes (one route with `transform`, when
/// given).
pub(crate) async fn drain(
    s: Settings,
    routes: usize,
    ordered: bool,
    store: Store,
    // One `[[sources.routes]]` route with this transform (none when empty),
    // rather than the source's own destination.
    route: Option<&str>,
) -> Drained {
    drain_with(s, routes, ordered, store, route, None).await
}

/// [`drain`] with the gateway binary `bin` when given (another build, for an A/B).
pub(crate) async fn drain_with(
    s: Settings,
    routes: usize,
    ordered: bool,
    store: Store,
    route: Option<&str>,
    bin: Option<&std::path::Path>,
) -> Drained {
    let sink = start_sink(None, false).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let pg = store.is_postgres().then(|| start_postgres(false));
    let store_section = store_toml(store, dir.path(), None, pg.as_ref());
    let target = format!("http://127.0.0.1:{}/hook", sink.port);
    let gw = if let Some(program) = route {
        let transform = if program.is_empty() {
            String::new()
        } else {
            format!("transform = '{program}'\n")
        };
        start_gateway_with(
            dir.path(),
            &store_section,
            "",
            "[forwarder]\npoll_interval = \"100ms\"\n",
            &format!(
                "[sources.delivery]\nconcurrency = 64\n\
                 [[sources.routes]]\nname = \"t\"\ndestination = \"{target}\"\n{transform}"
            ),
            bin,
        )
    } else if routes == 1 {
        let order = if ordered {
            "[sources.order]\nby = \"provider\"\n"
        } else {
            ""
        };
        start_gateway_with(
            dir.path(),
            &store_section,
            &format!("http://127.0.0.1:{}/hook", sink.port),
            "[forwarder]\npoll_interval = \"100ms\"\n",
            &format!("[sources.delivery]\nconcurrency = 64\n{order}"),
            bin,
        )
    } else {
        let mut extra = String::from("[sources.delivery]\nconcurrency = 64\n");
        for r in 0..routes {
            extra.push_str(&format!(
                "[[sources.routes]]\nname = \"r{r}\"\ndestination = \"{target}/{r}\"\n"
            ));
        }
        start_gateway_with(
            dir.path(),
            &store_section,
            "",
            "[forwarder]\npoll_interval = \"100ms\"\n",
            &extra,
            bin,
        )
    };
    source_control(gw.admin, "pause").await;
    ingest_backlog(
        gw.port,
        prepare(s.drain_entries, "drain", None),
        s.connections,
    )
    .await;
    assert_eq!(
        sink.received.load(Ordering::Relaxed),
        0,
        "delivered while paused"
    );
    let (cpu, writer) = (gw.cpu_secs(), gw.thread_cpu_secs(WRITER_THREAD));
    let start = Instant::now();
    source_control(gw.admin, "resume").await;
    sink.wait_for(s.drain_entries * routes, "drain").await;
    Drained {
        secs: start.elapsed().as_secs_f64(),
        cpu_secs: gw.cpu_secs() - cpu,
        writer_secs: gw.thread_cpu_secs(WRITER_THREAD) - writer,
        rss_mib: gw.peak_rss_mib(),
    }
}

pub async fn forward_e2e(report: &mut Report, s: Settings) {
    let sink = start_sink(None, true).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let gw = forwarding_gateway(
        dir.path(),
        &store_toml(Store::Embedded, dir.path(), None, None),
        sink.port,
        "",
    );
    let rate = if s.rounds == 1 && s.duration < Duration::from_secs(2) {
        200.0
    } else {
        2000.0
    };
    let n = (rate * s.duration.as_secs_f64()) as usize + 10;
    let requests = Arc::new(prepare(n, "e2e", None));
    let sent_at = Arc::new(Mutex::new(HashMap::new()));
    let r = open_loop(
        addr(gw.port),
        "/ingest/bench",
        requests,
        s.connections,
        rate,
        s.duration,
        Some(sent_at.clone()),
    )
    .await;
    let deadline = Instant::now() + Duration::from_secs(60);
    while sink.received.load(Ordering::Relaxed) < r.requests {
        assert!(Instant::now() < deadline, "not all delivered");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let sent = sent_at.lock().expect("lock");
    let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("hist");
    for (at, id) in sink.arrivals.lock().expect("lock").iter() {
        if let Some(i) = id
            .strip_prefix("evt_e2e_")
            .and_then(|i| i.parse::<usize>().ok())
            && let Some(due) = sent.get(&i)
        {
            let _ = hist.record(at.duration_since(*due).as_micros().max(1) as u64);
        }
    }
    report.add(format!(
        "end to end (ingest → sink), embedded, {rate:.0} webhooks/s: p50 {:.2} ms, p99 {:.2} ms, p99.9 {:.2} ms",
        hist.value_at_quantile(0.5) as f64 / 1000.0,
        hist.value_at_quantile(0.99) as f64 / 1000.0,
        hist.value_at_quantile(0.999) as f64 / 1000.0
    ));
}

pub async fn recovery(report: &mut Report, s: Settings) {
    let sink = start_sink(None, true).await;
    sink.up.store(false, Ordering::SeqCst);
    let dir = tempfile::tempdir().expect("tempdir");
    let gw = forwarding_gateway(
        dir.path(),
        &store_toml(Store::Embedded, dir.path(), None, None),
        sink.port,
        "[sources.retry]\nbase = \"1s\"\ncap = \"60s\"\nmax_attempts = 100\n",
    );
    ingest_backlog(
        gw.port,
        prepare(s.recovery_entries, "rec", None),
        s.connections,
    )
    .await;
    tokio::time::sleep(s.outage).await;
    let back = Instant::now();
    sink.up.store(true, Ordering::SeqCst);
    sink.wait_for(s.recovery_entries, "recovery").await;
    let total = back.elapsed().as_secs_f64();
    let mut buckets: HashMap<u64, u64> = HashMap::new();
    for (at, _) in sink.arrivals.lock().expect("lock").iter() {
        *buckets
            .entry(at.duration_since(back).as_secs())
            .or_default() += 1;
    }
    let peak = buckets.values().copied().max().unwrap_or(0);
    // The sink's capacity: what the same sink takes from a closed loop of 64 connections.
    let cap_requests = Arc::new(prepare(
        if s.rounds == 1 { 5_000 } else { 100_000 },
        "cap",
        None,
    ));
    let cap = closed_loop(
        addr(sink.port),
        "/hook",
        cap_requests,
        64,
        Duration::from_secs(3),
        true,
    )
    .await;
    report.add(format!(
        "recovery: {} entries pending after a {:.0} s outage, delivered in {total:.1} s; peak {peak}/s = {:.0}% of the sink's capacity ({:.0}/s)",
        s.recovery_entries,
        s.outage.as_secs_f64(),
        100.0 * peak as f64 / cap.rate(),
        cap.rate()
    ));
}

/// An embedded-store gateway that delivers to the sink on `sink_port`, polling often
/// so that forwarding figures measure delivery, not the poll interval.
fn forwarding_gateway(
    dir: &std::path::Path,
    store_section: &str,
    sink_port: u16,
    source_extra: &str,
) -> crate::procs::Proc {
    start_gateway(
        dir,
        store_section,
        &format!("http://127.0.0.1:{sink_port}/hook"),
        "[forwarder]\npoll_interval = \"100ms\"\n",
        source_extra,
    )
}

/// The profile of the delivering gateway: an open loop at half of the forwarding-on
/// maximum (measured first, then its backlog delivered; `HOOKGATE_BENCH_RATE` sets
/// another rate) for the duration, against a gateway with forwarding off and then one
/// with forwarding on, and over each window:
///
/// - the gateway's CPU per thread, and how long its threads were ready to run but
///   waited for a core;
/// - how long each kind of write waited in the embedded store's writer queue
///   (`hookgate_store_write_wait_seconds`, from `/metrics`): the time an accept
///   spends queued behind claims and completions;
/// - with `HOOKGATE_BENCH_PERF=FILE`, a `perf record` of the gateway into FILE.on
///   (forwarding on) and FILE.off (`perf report -i FILE.on --no-children`).
pub async fn profile(report: &mut Report, store: Store, s: Settings) {
    let on = Subject::start(store, Forwarding::On).await;
    let sink = on.sink.as_ref().expect("sink");
    let max = forwarding_on_max(&on, s).await;
    let _ = sink
        .settle(max.requests - max.errors, Duration::from_secs(10))
        .await;
    let rate = std::env::var("HOOKGATE_BENCH_RATE")
        .ok()
        .and_then(|r| r.parse::<f64>().ok())
        .unwrap_or(max.rate() * 0.5);
    let off = Subject::start(store, Forwarding::Off).await;
    let off_line = profile_window(&off, store, rate, s, "poff").await;
    drop(off);
    let on_line = profile_window(&on, store, rate, s, "pon").await;
    report.add(format!(
        "profile, {store:?} store, open loop at {rate:.0} req/s (the forwarding-on max: {:.0}): forwarding off: {off_line}",
        max.rate()
    ));
    report.add(format!(
        "profile, {store:?} store, open loop at {rate:.0} req/s: forwarding on: {on_line}"
    ));
}

/// One profiled window of `profile` against `subject`: what it says of it.
async fn profile_window(
    subject: &Subject,
    store: Store,
    rate: f64,
    s: Settings,
    tag: &str,
) -> String {
    let requests = Arc::new(prepare(
        ((rate * s.duration.as_secs_f64()) as usize + 10).max(10),
        tag,
        None,
    ));
    let metrics_before = scrape(subject.gw.admin).await;
    let perf = std::env::var("HOOKGATE_BENCH_PERF").ok().map(|out| {
        let out = format!(
            "{out}.{}",
            if subject.sink.is_some() { "on" } else { "off" }
        );
        std::process::Command::new("perf")
            .args([
                "record",
                "-F",
                "499",
                "-g",
                "--call-graph",
                "dwarf,32768",
                "-o",
                &out,
                "-p",
            ])
            .arg(subject.gw.child.id().to_string())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("perf")
    });
    let pids = subject.pids();
    let redis_before = subject.redis.as_ref().map(|r| r.command_stats());
    let threads = ThreadMeter::start(subject.gw.child.id());
    let cpu = CpuMeter::start(&pids);
    let before = match &subject.sink {
        Some(sink) => sink.count().await,
        None => 0,
    };
    let r = open_loop(
        addr(subject.gw.port),
        "/ingest/bench",
        requests,
        s.connections,
        rate,
        s.duration,
        None,
    )
    .await;
    let delivered = match &subject.sink {
        Some(sink) => format!(
            "{:.0} delivered a second in the window, ",
            (sink.count().await - before) as f64 / s.duration.as_secs_f64()
        ),
        None => String::new(),
    };
    let cpu = cpu.stop();
    let threads = threads.stop();
    if let Some(mut p) = perf {
        // SAFETY: kill has no memory preconditions; SIGINT makes perf write its file.
        unsafe { libc::kill(p.id() as i32, libc::SIGINT) };
        let _ = p.wait();
    }
    let metrics_after = scrape(subject.gw.admin).await;
    let redis_cpu = match (&subject.redis, redis_before) {
        (Some(redis), Some(before)) => {
            let mut delta: Vec<(String, u64, u64)> = redis
                .command_stats()
                .into_iter()
                .map(|(name, calls, usec)| {
                    let (c0, u0) = before
                        .iter()
                        .find(|(n, _, _)| *n == name)
                        .map_or((0, 0), |(_, c, u)| (*c, *u));
                    (name, calls.saturating_sub(c0), usec.saturating_sub(u0))
                })
                .filter(|(_, calls, _)| *calls > 0)
                .collect();
            delta.sort_by_key(|(_, _, usec)| std::cmp::Reverse(*usec));
            let top: Vec<String> = delta
                .iter()
                .take(8)
                .map(|(name, calls, usec)| {
                    format!(
                        "{name} {calls} calls, {:.2} s ({:.1} µs each)",
                        *usec as f64 / 1e6,
                        *usec as f64 / (*calls).max(1) as f64
                    )
                })
                .collect();
            format!("; Redis CPU by command: {}", top.join(", "))
        }
        _ => String::new(),
    };
    let waits: Vec<String> = ["accept", "claim", "complete"]
        .iter()
        .map(|kind| {
            let series = format!("hookgate_store_write_wait_seconds_bucket{{kind=\"{kind}\"");
            bucket_summary(kind, &metrics_before, &metrics_after, &series)
        })
        .collect();
    let ack = bucket_summary(
        "acks as the gateway timed them",
        &metrics_before,
        &metrics_after,
        "hookgate_ingest_ack_seconds_bucket{source=\"bench\"",
    );
    let sink_us = match subject.sink {
        Some(_) => format!(
            ", sink {:.0} µs",
            cpu.per_request(pids.len() - 1, r.requests)
        ),
        None => String::new(),
    };
    let redis_us = match subject.redis {
        Some(_) => format!(", redis {:.0} µs", cpu.per_request(2, r.requests)),
        None => String::new(),
    };
    format!(
        "ack {} ({} errors); {delivered}CPU per webhook: gateway {:.0} µs{redis_us}{sink_us}, generator {:.0} µs (machine {:.0}% busy); \
         gateway threads: {threads}; writer queue wait: {}; {ack}{redis_cpu}",
        percentiles(&r.hist),
        r.errors,
        cpu.per_request(0, r.requests),
        cpu.per_request(1, r.requests),
        100.0 * cpu.busy,
        if store == Store::Embedded {
            waits.join("; ")
        } else {
            "none (Redis)".to_string()
        },
    )
}

/// The forwarding-on maximum: `s.connections` connections in a closed loop against
/// `on` (a gateway that forwards) for the duration.
async fn forwarding_on_max(on: &Subject, s: Settings) -> LoadResult {
    closed_loop(
        addr(on.gw.port),
        "/ingest/bench",
        Arc::new(prepare(webhooks_for(s), "max", None)),
        s.connections,
        s.duration,
        false,
    )
    .await
}

/// How long the gateway on `admin` has found ingest saturated (ingest first holds
/// its deliveries to a share meanwhile), in seconds.
pub(crate) async fn saturated_secs(admin: u16) -> f64 {
    let windows = scrape(admin)
        .await
        .lines()
        .find_map(|l| l.strip_prefix("hookgate_ingest_saturated_windows_total "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .unwrap_or(0.0);
    windows * hookgate::pressure::WINDOW.as_secs_f64()
}

/// The gateway's `/metrics` text.
pub(crate) async fn scrape(admin: u16) -> String {
    reqwest::get(format!("http://127.0.0.1:{admin}/metrics"))
        .await
        .expect("metrics")
        .text()
        .await
        .expect("metrics text")
}

/// A histogram's observations between two scrapes: their count and the share at or
/// under a few bucket bounds ("accept: 80000, ≤1ms 97.10%, …").
fn bucket_summary(what: &str, before: &str, after: &str, series: &str) -> String {
    let buckets = |text: &str| -> Vec<(String, f64)> {
        text.lines()
            .filter(|l| l.starts_with(series))
            .filter_map(|l| {
                let le = l.split("le=\"").nth(1)?.split('"').next()?.to_string();
                let v = l.rsplit(' ').next()?.parse::<f64>().ok()?;
                Some((le, v))
            })
            .collect()
    };
    let (b, a) = (buckets(before), buckets(after));
    let count =
        |le: &str, v: &[(String, f64)]| v.iter().find(|(l, _)| l == le).map_or(0.0, |(_, n)| *n);
    let total = count("+Inf", &a) - count("+Inf", &b);
    let shares: Vec<String> = ["0.001", "0.005", "0.025", "0.1"]
        .iter()
        .map(|le| {
            let n = count(le, &a) - count(le, &b);
            format!(
                "≤{}ms {:.2}%",
                le.parse::<f64>().unwrap_or(0.0) * 1000.0,
                100.0 * n / total.max(1.0)
            )
        })
        .collect();
    format!("{what}: {total:.0}, {}", shares.join(", "))
}

/// The PostgreSQL store's drain: as `forward-drain`, against a private PostgreSQL
/// server on the same cores (`synchronous_commit = on`), one route and one ordered
/// route (a key per entry), with the embedded store's one route in the same run.
pub async fn forward_drain_postgres(report: &mut Report, s: Settings) {
    let embedded = drain(s, 1, false, Store::Embedded, None).await;
    let one = drain(s, 1, false, Store::Postgres, None).await;
    let ordered = drain(s, 1, true, Store::Postgres, None).await;
    for (what, d) in [
        ("1 route", &one),
        ("1 ordered route (a key per entry)", &ordered),
    ] {
        report.add(format!(
            "forward drain, postgres, {what}: {} entries in {:.2} s = {:.0} deliveries/s, gateway CPU {:.1} µs per delivery (concurrency 64; peak RSS {:.1} MiB); {:.2}× the embedded store's 1 route ({:.0} deliveries/s)",
            s.drain_entries,
            d.secs,
            s.drain_entries as f64 / d.secs,
            d.cpu_secs * 1e6 / s.drain_entries as f64,
            d.rss_mib,
            embedded.secs / d.secs,
            s.drain_entries as f64 / embedded.secs,
        ));
    }
}

/// Ingest in the production shape (64 connections, every entry delivered to a sink
/// during the run) on Redis, on PostgreSQL, and on PostgreSQL with a synchronous
/// standby on the same host, alternating in each round: each store's rate and p99,
/// and the ratios PostgreSQL / Redis and with a standby / without.
pub async fn ingest_postgres(report: &mut Report, s: Settings) {
    let stores = [Store::Redis, Store::Postgres, Store::PostgresStandby];
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); stores.len()];
    let mut p99s: Vec<Vec<f64>> = vec![Vec::new(); stores.len()];
    let mut store_us: Vec<Vec<f64>> = vec![Vec::new(); stores.len()];
    let n = webhooks_for(s);
    for round in 0..s.rounds {
        let requests = Arc::new(prepare(n, &format!("pg{round}"), None));
        for (i, store) in stores.iter().enumerate() {
            let subject = Subject::start(*store, Forwarding::On).await;
            // The gateway, the generator, then the store's processes, summed.
            let store_pids: Vec<u32> = match (&subject.redis, &subject.pg) {
                (Some(r), _) => vec![r.child.id()],
                (_, Some(p)) => p.pids(),
                _ => Vec::new(),
            };
            let mut pids = vec![subject.gw.child.id(), 0];
            pids.extend(&store_pids);
            let (g, cpu) = metered_round(subject.gw.port, &pids, &requests, s, false).await;
            let store_cpu: f64 = (0..store_pids.len())
                .map(|k| cpu.per_request(2 + k, g.requests))
                .sum();
            println!(
                "  round {round}, {store:?}: {:.0} req/s (p50 {:.2} ms, p99 {:.2} ms, {} errors); CPU per request: gateway {:.0} µs, store {:.0} µs (machine {:.0}% busy)",
                g.rate(),
                g.pct(0.5),
                g.pct(0.99),
                g.errors,
                cpu.per_request(0, g.requests),
                store_cpu,
                100.0 * cpu.busy
            );
            rates[i].push(g.rate());
            p99s[i].push(g.pct(0.99));
            store_us[i].push(store_cpu);
            drop(subject);
        }
    }
    let rate: Vec<f64> = rates.into_iter().map(median).collect();
    let p99: Vec<f64> = p99s.into_iter().map(median).collect();
    let us: Vec<f64> = store_us.into_iter().map(median).collect();
    report.add(format!(
        "ingest with forwarding on, c={}: redis {:.0} req/s (p99 {:.2} ms, store CPU {:.0} µs per request); postgres {:.0} req/s (p99 {:.2} ms, store CPU {:.0} µs) = {:.2}× redis; postgres with a synchronous standby on the same host {:.0} req/s (p99 {:.2} ms, store CPU {:.0} µs for both servers) = {:.2}× postgres alone",
        s.connections,
        rate[0],
        p99[0],
        us[0],
        rate[1],
        p99[1],
        us[1],
        rate[1] / rate[0],
        rate[2],
        p99[2],
        us[2],
        rate[2] / rate[1],
    ));
}
