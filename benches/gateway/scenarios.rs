//! The scenarios: each runs the gateway (and the baseline where it has one), drives
//! load at it and adds its summary line to the report.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use crate::load::{LoadResult, Prepared, addr, closed_loop, open_loop, prepare};
use crate::measure::{CpuMeter, CpuUse, FsyncProbe, median};
use crate::procs::{Store, start_baseline, start_gateway, start_redis, store_toml};
use crate::sink::start_sink;
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
async fn metered_round(
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

pub async fn ingest(report: &mut Report, store: Store, s: Settings, duplicates: bool) {
    let n = if s.rounds == 1 && s.duration < Duration::from_secs(2) {
        20_000
    } else {
        // Enough distinct webhooks for the whole duration at ~30,000 req/s.
        30_000 * s.duration.as_secs() as usize
    };
    let mut base_rates = Vec::new();
    let mut gw_rates = Vec::new();
    let mut p99s = Vec::new();
    let mut rss = 0f64;
    let (mut base_us, mut gw_us) = (Vec::new(), Vec::new());
    for round in 0..s.rounds {
        let requests = Arc::new(prepare(n, &format!("r{round}"), duplicates.then_some(2)));
        let (b, b_cpu) = baseline_rate(s, &requests).await;
        base_rates.push(b.rate());
        base_us.push(b_cpu.per_request(0, b.requests));
        let dir = tempfile::tempdir().expect("tempdir");
        let redis = (store == Store::Redis).then(start_redis);
        let gw = ingest_gateway(dir.path(), store, redis.as_ref());
        // Deliveries are off the ingest path: the sink is unreachable (port 9), so the
        // forwarder only schedules retries in the background.
        let mut pids = vec![gw.child.id(), 0];
        if let Some(r) = &redis {
            pids.push(r.child.id());
        }
        let (g, cpu) = metered_round(gw.port, &pids, &requests, s, false).await;
        rss = rss.max(gw.peak_rss_mib());
        println!(
            "  round {round}: baseline {:.0} req/s, gateway {:.0} req/s (p50 {:.2} ms, p99 {:.2} ms, {} errors)",
            b.rate(),
            g.rate(),
            g.pct(0.5),
            g.pct(0.99),
            g.errors
        );
        let redis_us = if redis.is_some() {
            format!(", redis {:.0} µs", cpu.per_request(2, g.requests))
        } else {
            String::new()
        };
        println!(
            "    CPU per request: baseline server {:.0} µs + generator {:.0} µs (machine {:.0}% busy); \
             gateway {:.0} µs{redis_us} + generator {:.0} µs (machine {:.0}% busy)",
            b_cpu.per_request(0, b.requests),
            b_cpu.per_request(1, b.requests),
            100.0 * b_cpu.busy,
            cpu.per_request(0, g.requests),
            cpu.per_request(1, g.requests),
            100.0 * cpu.busy,
        );
        gw_us.push(
            cpu.per_request(0, g.requests)
                + redis
                    .as_ref()
                    .map_or(0.0, |_| cpu.per_request(2, g.requests)),
        );
        gw_rates.push(g.rate());
        p99s.push(g.pct(0.99));
    }
    let (b, g) = (median(base_rates), median(gw_rates));
    let name = if duplicates {
        "duplicates (50% redeliveries), embedded".to_string()
    } else {
        format!("ingest, {store:?} store")
    };
    report.add(format!(
        "{name}: {g:.0} req/s = {:.0}% of baseline {b:.0} req/s (c={}, p99 {:.2} ms, peak RSS {rss:.1} MiB; \
         server CPU per request {:.0} µs against the baseline's {:.0} µs)",
        100.0 * g / b,
        s.connections,
        median(p99s),
        median(gw_us),
        median(base_us),
    ));
}

pub async fn latency(report: &mut Report, store: Store, s: Settings) {
    let dir = tempfile::tempdir().expect("tempdir");
    let redis = (store == Store::Redis).then(start_redis);
    let gw = ingest_gateway(dir.path(), store, redis.as_ref());
    let n = if s.rounds == 1 && s.duration < Duration::from_secs(2) {
        20_000
    } else {
        // Enough distinct webhooks for the whole duration at ~30,000 req/s.
        30_000 * s.duration.as_secs() as usize
    };
    let probe = Arc::new(prepare(n, "max", None));
    let max = closed_loop(
        addr(gw.port),
        "/ingest/bench",
        probe,
        s.connections,
        s.duration,
        false,
    )
    .await;
    let rate = max.rate() * 0.5;
    let requests = Arc::new(prepare(
        ((rate * s.duration.as_secs_f64()) as usize + 10).max(10),
        "lat",
        None,
    ));
    let requests_again = requests.clone();
    let disk = FsyncProbe::start(dir.path());
    let r = open_loop(
        addr(gw.port),
        "/ingest/bench",
        requests,
        s.connections,
        rate,
        s.duration,
        None,
    )
    .await;
    let disk = disk.finish();
    let rss = gw.peak_rss_mib();
    drop(gw);
    // The same open loop against the bare-hyper baseline: what the generator and HTTP
    // alone add on this machine.
    let b = start_baseline();
    let base = open_loop(
        addr(b.port),
        "/ingest/bench",
        requests_again,
        s.connections,
        rate,
        s.duration,
        None,
    )
    .await;
    drop(b);
    report.add(format!(
        "ack latency, {store:?} store, open loop at 50% of max ({rate:.0} of {:.0} req/s): p50 {:.2} ms, p99 {:.2} ms, p99.9 {:.2} ms ({} errors, peak RSS {rss:.1} MiB); baseline at the same rate: p50 {:.2} ms, p99 {:.2} ms, p99.9 {:.2} ms; the disk's own 4 KiB fdatasync meanwhile: {disk}",
        max.rate(),
        r.pct(0.5),
        r.pct(0.99),
        r.pct(0.999),
        r.errors,
        base.pct(0.5),
        base.pct(0.99),
        base.pct(0.999),
    ));
}

/// The forward drain, once with one route, once with three routes per source (the
/// same sink, one shared concurrency of 64), and once with one route ordered by the
/// provider's object id (every entry its own key: many distinct keys), in the same
/// run: what fan-out and ordering cost per delivery.
pub async fn forward_drain(report: &mut Report, s: Settings) {
    let one = drain(s, 1, false).await;
    let three = drain(s, 3, false).await;
    let ordered = drain(s, 1, true).await;
    report.add(format!(
        "forward drain, embedded, 1 route: {} entries in {:.2} s = {:.0} deliveries/s (concurrency 64; peak RSS {:.1} MiB)",
        s.drain_entries,
        one.secs,
        s.drain_entries as f64 / one.secs,
        one.rss_mib
    ));
    let per_delivery = |d: &Drained, routes: usize| d.secs / (s.drain_entries * routes) as f64;
    report.add(format!(
        "forward drain, embedded, 3 routes: {} entries = {} deliveries in {:.2} s = {:.0} deliveries/s (peak RSS {:.1} MiB); time per delivery {:.2}× that of one route",
        s.drain_entries,
        3 * s.drain_entries,
        three.secs,
        (3 * s.drain_entries) as f64 / three.secs,
        three.rss_mib,
        per_delivery(&three, 3) / per_delivery(&one, 1)
    ));
    report.add(format!(
        "forward drain, embedded, 1 ordered route (a key per entry): {} entries in {:.2} s = {:.0} deliveries/s (peak RSS {:.1} MiB); {:.2}× the unordered route's rate",
        s.drain_entries,
        ordered.secs,
        s.drain_entries as f64 / ordered.secs,
        ordered.rss_mib,
        one.secs / ordered.secs
    ));
}

struct Drained {
    secs: f64,
    rss_mib: f64,
}

/// Store `s.drain_entries` while the source is paused, resume, and time until the
/// sink has every delivery of its `routes` routes.
async fn drain(s: Settings, routes: usize, ordered: bool) -> Drained {
    let sink = start_sink(None, false).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let target = format!("http://127.0.0.1:{}/hook", sink.port);
    let gw = if routes == 1 {
        let order = if ordered {
            "[sources.order]\nby = \"provider\"\n"
        } else {
            ""
        };
        forwarding_gateway(
            dir.path(),
            sink.port,
            &format!("[sources.delivery]\nconcurrency = 64\n{order}"),
        )
    } else {
        let mut extra = String::from("[sources.delivery]\nconcurrency = 64\n");
        for r in 0..routes {
            extra.push_str(&format!(
                "[[sources.routes]]\nname = \"r{r}\"\ndestination = \"{target}/{r}\"\n"
            ));
        }
        start_gateway(
            dir.path(),
            &store_toml(Store::Embedded, dir.path(), None),
            "",
            "[forwarder]\npoll_interval = \"100ms\"\n",
            &extra,
        )
    };
    let admin = format!("http://127.0.0.1:{}", gw.admin);
    hookgate::tls::install_provider();
    let client = reqwest::Client::new();
    let pause = |what: &'static str| {
        let client = client.clone();
        let url = format!("{admin}/admin/sources/bench/{what}");
        async move {
            let r = client.post(url).send().await.expect("admin");
            assert!(r.status().is_success(), "{what}: {}", r.status());
        }
    };
    pause("pause").await;
    tokio::time::sleep(Duration::from_millis(1500)).await; // the forwarder sees the pause
    ingest_backlog(
        gw.port,
        prepare(s.drain_entries, "drain", None),
        s.connections,
    )
    .await;
    let start = Instant::now();
    pause("resume").await;
    sink.wait_for(s.drain_entries * routes, "drain").await;
    Drained {
        secs: start.elapsed().as_secs_f64(),
        rss_mib: gw.peak_rss_mib(),
    }
}

pub async fn forward_e2e(report: &mut Report, s: Settings) {
    let sink = start_sink(None, true).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let gw = forwarding_gateway(dir.path(), sink.port, "");
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
    sink_port: u16,
    source_extra: &str,
) -> crate::procs::Proc {
    start_gateway(
        dir,
        &store_toml(Store::Embedded, dir, None),
        &format!("http://127.0.0.1:{sink_port}/hook"),
        "[forwarder]\npoll_interval = \"100ms\"\n",
        source_extra,
    )
}

/// A gateway for the ingest scenarios. Its destination is unreachable (port 9), so
/// deliveries fail fast and back off: the figures are ingest's own.
fn ingest_gateway(
    dir: &std::path::Path,
    store: Store,
    redis: Option<&crate::procs::Redis>,
) -> crate::procs::Proc {
    start_gateway(
        dir,
        &store_toml(store, dir, redis),
        "http://127.0.0.1:9/",
        "[forwarder]\npoll_interval = \"1s\"\n",
        "",
    )
}
