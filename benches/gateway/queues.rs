//! Scenarios `queue-drain` and `queue-ingest`: the gateway delivering into NATS
//! JetStream and RabbitMQ, against the same gateway delivering over HTTP to a bare
//! hyper sink in the same run, with the brokers on the same cores
//! ([`crate::brokers`]: private servers the bench starts).
//!
//! - **`queue-drain`**: as `forward-drain`, a backlog (`--queue-entries`, 50,000 by
//!   default) stored while the source is paused (embedded store), then resumed and
//!   timed until the destination holds every message: (a) the bare hyper sink in
//!   the bench process, (b) the JetStream stream `BENCH` (file storage, duplicate
//!   window 2 min), (c) the RabbitMQ quorum queue `bench-quorum` and (d) the classic
//!   durable queue `bench-classic`, both on the default exchange; each from a fresh
//!   gateway and a purged stream or queue, `--rounds` rounds with the order rotated.
//!   After each drain the gateway must have recorded every delivery, and the stream
//!   or queue must hold exactly the backlog: a drain that loses or doubles a
//!   message fails the run. Before the drains, each broker's own figures: the
//!   publish-acknowledgement round trip of one publish at a time, and the same
//!   backlog published by a lean client in the bench process with the same number in
//!   flight (what the broker takes on these cores without the gateway's store). In a
//!   full run, a sweep of the route's `delivery.concurrency` (16, 64, 256, 1024; set
//!   with `HOOKGATE_BENCH_QUEUE_SWEEP=16,64`, none with it set empty) for each
//!   destination.
//! - **`queue-ingest`**: 64 connections in a closed loop for the duration against a
//!   gateway delivering while it ingests, as `ingest-embedded`'s forwarding on (the
//!   forwarder's other settings its defaults), each route at its drain's
//!   concurrency: to the sink in a process of its own, into JetStream, into the
//!   RabbitMQ quorum queue (`HOOKGATE_BENCH_AMQP_QUEUE=classic` for the classic
//!   one); each with ingest first on (the default: while ingest is saturated the
//!   forwarder is held to one delivery for every twenty webhooks stored) and off
//!   (`forwarder.ingest_first = 0`: every delivery competes with ingest for the
//!   cores); and with the source paused (forwarding off). `--rounds` rounds with
//!   the order rotated; the medians and the ratios against delivering over HTTP in
//!   the same mode. After each load the destination must come to hold exactly the
//!   accepted webhooks.
//!
//! ```text
//! cargo bench --bench gateway -- queue-drain queue-ingest
//! cargo bench --bench gateway -- queue-drain --rounds 1 --queue-entries 20000
//! HOOKGATE_BENCH_QUEUE_CONCURRENCY=256 cargo bench --bench gateway -- queue-drain
//! HOOKGATE_BENCH_PERF=/tmp/q.data cargo bench --bench gateway -- queue-drain
//!                     # `perf record` of the gateway and the destination's broker
//!                     # during the first round's drains: /tmp/q.data.<target>
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use async_nats::jetstream;
use async_nats::jetstream::message::PublishMessage;
use bytes::Bytes;
use hdrhistogram::Histogram;
use lapin::BasicProperties;
use lapin::options::BasicPublishOptions;

use crate::brokers::{Brokers, QueueKind, SUBJECT};
use crate::load::{Prepared, prepare};
use crate::measure::{CpuMeter, CpuUse, ThreadMeter, median};
use crate::procs::{Proc, Store, start_gateway_with, store_toml};
use crate::scenarios::{
    ingest_backlog, metered_round, saturated_secs, scrape, source_control, webhooks_for,
};
use crate::sink::{Sink, SinkProc, start_sink};
use crate::{Report, Settings};

/// The route concurrency of the HTTP drain: `forward-drain`'s.
const HTTP_CONCURRENCY: usize = 64;

/// The route concurrency of the broker drains, unless
/// `HOOKGATE_BENCH_QUEUE_CONCURRENCY` sets another (see BENCHMARKS.md for the sweep
/// it was chosen by).
const BROKER_CONCURRENCY: usize = 256;

/// Where a gateway delivers.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Target {
    Http,
    JetStream,
    RabbitMq(QueueKind),
}

impl Target {
    fn label(self) -> &'static str {
        match self {
            Target::Http => "HTTP (bare hyper sink)",
            Target::JetStream => "JetStream (file stream)",
            Target::RabbitMq(QueueKind::Quorum) => "RabbitMQ (quorum queue)",
            Target::RabbitMq(QueueKind::Classic) => "RabbitMQ (classic durable queue)",
        }
    }

    /// For file names.
    fn tag(self) -> &'static str {
        match self {
            Target::Http => "http",
            Target::JetStream => "nats",
            Target::RabbitMq(QueueKind::Quorum) => "rabbitmq-quorum",
            Target::RabbitMq(QueueKind::Classic) => "rabbitmq-classic",
        }
    }

    /// The broker's pid (none for HTTP).
    fn broker_pid(self, b: &Brokers) -> Option<u32> {
        match self {
            Target::Http => None,
            Target::JetStream => Some(b.nats.pid()),
            Target::RabbitMq(_) => Some(b.rabbit.pid()),
        }
    }
}

/// What counts the messages a destination holds.
enum Counter<'a> {
    /// The sink in the bench process.
    Sink(&'a Sink),
    /// The sink in a process of its own.
    SinkProc(&'a SinkProc),
    Stream(&'a Brokers),
    Queue(&'a Brokers, QueueKind),
}

impl Counter<'_> {
    fn of<'a>(target: Target, brokers: &'a Brokers) -> Counter<'a> {
        match target {
            Target::JetStream => Counter::Stream(brokers),
            Target::RabbitMq(kind) => Counter::Queue(brokers, kind),
            Target::Http => unreachable!("the HTTP counters hold their sink"),
        }
    }

    async fn count(&self) -> u64 {
        match self {
            Counter::Sink(s) => s.received.load(Ordering::Relaxed),
            Counter::SinkProc(s) => s.count().await,
            Counter::Stream(b) => b.stream_messages().await,
            Counter::Queue(b, kind) => b.queue_messages(*kind).await,
        }
    }

    /// How often to ask: the in-process sink is an atomic, the others a request.
    fn every(&self) -> Duration {
        match self {
            Counter::Sink(_) => Duration::from_millis(5),
            _ => Duration::from_millis(10),
        }
    }

    /// Wait (at most ten minutes) until the destination holds `n`.
    async fn wait_for(&self, n: u64, what: &str) {
        let deadline = Instant::now() + Duration::from_secs(600);
        loop {
            let now = self.count().await;
            if now >= n {
                return;
            }
            assert!(Instant::now() < deadline, "{what}: {now} of {n}");
            tokio::time::sleep(self.every()).await;
        }
    }

    /// Wait until it holds `n`, or until its count stops growing for `stall`: the
    /// count, and how long it took.
    async fn settle(&self, n: u64, stall: Duration) -> (u64, Duration) {
        let start = Instant::now();
        let (mut last, mut since) = (self.count().await, Instant::now());
        while last < n && since.elapsed() < stall {
            tokio::time::sleep(Duration::from_millis(20)).await;
            let now = self.count().await;
            if now != last {
                (last, since) = (now, Instant::now());
            }
        }
        (last, start.elapsed())
    }
}

/// The gateway's `hookgate_deliveries_total` for `outcome`, summed over routes.
async fn deliveries(admin: u16, outcome: &str) -> u64 {
    let label = format!("outcome=\"{outcome}\"");
    scrape(admin)
        .await
        .lines()
        .filter(|l| l.starts_with("hookgate_deliveries_total{") && l.contains(&label))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// An embedded-store gateway whose source `bench` delivers to `destination` with
/// `global` and `source` added to its configuration.
fn gateway(dir: &std::path::Path, destination: &str, global: &str, source: &str) -> Proc {
    start_gateway_with(
        dir,
        &store_toml(Store::Embedded, dir, None, None),
        destination,
        global,
        source,
        None,
    )
}

/// One drain's figures.
struct QDrained {
    secs: f64,
    /// CPU per message, µs: the gateway, its store writer, the bench process (the
    /// HTTP sink, or the count's polling), the broker.
    gateway_us: f64,
    writer_us: f64,
    bench_us: f64,
    broker_us: f64,
    busy: f64,
    /// Cores kept busy by other processes meanwhile.
    others: f64,
}

impl QDrained {
    fn rate(&self, n: usize) -> f64 {
        n as f64 / self.secs
    }
}

/// Store `n` entries while the source is paused, resume, and time until `target`
/// holds all of them; then check that the gateway recorded each delivery once and
/// that the destination holds exactly `n`.
async fn drain_into(
    brokers: &Brokers,
    target: Target,
    n: usize,
    concurrency: usize,
    perf: Option<String>,
) -> QDrained {
    brokers.purge().await;
    let sink = match target {
        Target::Http => Some(start_sink(None, false).await),
        _ => None,
    };
    let destination = match target {
        Target::Http => format!(
            "http://127.0.0.1:{}/hook",
            sink.as_ref().expect("sink").port
        ),
        Target::JetStream => brokers.nats_destination(),
        Target::RabbitMq(kind) => brokers.amqp_destination(kind),
    };
    let counter = match &sink {
        Some(s) => Counter::Sink(s),
        None => Counter::of(target, brokers),
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let gw = gateway(
        dir.path(),
        &destination,
        "[forwarder]\npoll_interval = \"100ms\"\n",
        &format!("[sources.delivery]\nconcurrency = {concurrency}\n"),
    );
    source_control(gw.admin, "pause").await;
    ingest_backlog(gw.port, prepare(n, "qdrain", None), 64).await;
    assert_eq!(counter.count().await, 0, "delivered while paused");
    let broker = target.broker_pid(brokers);
    let mut pids = vec![gw.child.id(), 0];
    pids.extend(broker);
    let perf = perf.map(|out| {
        let who: Vec<String> = pids
            .iter()
            .filter(|p| **p != 0)
            .map(u32::to_string)
            .collect();
        std::process::Command::new("perf")
            .args([
                "record",
                "-F",
                "299",
                "-g",
                "--call-graph",
                "dwarf,16384",
                "-o",
                &out,
                "-p",
                &who.join(","),
            ])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("perf")
    });
    if perf.is_some() {
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let threads = ThreadMeter::start(gw.child.id());
    let writer = gw.thread_cpu_secs("hg-sqlite-write");
    let cpu = CpuMeter::start(&pids);
    let start = Instant::now();
    source_control(gw.admin, "resume").await;
    counter.wait_for(n as u64, target.label()).await;
    let secs = start.elapsed().as_secs_f64();
    let cpu = cpu.stop();
    let writer = gw.thread_cpu_secs("hg-sqlite-write") - writer;
    let threads = threads.stop();
    if let Some(mut p) = perf {
        // SAFETY: kill has no memory preconditions; SIGINT makes perf write its file.
        unsafe { libc::kill(p.id() as i32, libc::SIGINT) };
        let _ = p.wait();
    }
    // Every delivery recorded by the gateway, and the destination holding each once.
    let deadline = Instant::now() + Duration::from_secs(60);
    while deliveries(gw.admin, "delivered").await < n as u64 {
        assert!(
            Instant::now() < deadline,
            "{}: the gateway did not record every delivery",
            target.label()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let retries = deliveries(gw.admin, "retry").await;
    let held = counter.count().await;
    assert_eq!(
        held,
        n as u64,
        "{}: the destination holds {held} messages after a drain of {n} ({retries} retries)",
        target.label()
    );
    let per = |i: usize| cpu.per_request(i, n as u64);
    let d = QDrained {
        secs,
        gateway_us: per(0),
        writer_us: writer * 1e6 / n as f64,
        bench_us: per(1),
        broker_us: broker.map_or(0.0, |_| per(2)),
        busy: cpu.busy,
        others: others(&cpu, pids.len(), secs),
    };
    println!(
        "    {} at concurrency {concurrency}: {n} in {:.2} s = {:.0}/s; CPU per message: gateway {:.1} µs (writer {:.1}), {} {:.1} µs{}; machine {:.0}% busy, other processes {:.2} cores; {retries} retries; held {held}",
        target.label(),
        d.secs,
        d.rate(n),
        d.gateway_us,
        d.writer_us,
        if broker.is_some() {
            "bench process"
        } else {
            "sink (bench process)"
        },
        d.bench_us,
        if broker.is_some() {
            format!(", broker {:.1} µs", d.broker_us)
        } else {
            String::new()
        },
        100.0 * d.busy,
        d.others
    );
    println!("      gateway threads: {threads}");
    d
}

/// The cores that processes other than the `pids` metered in `cpu` kept busy over
/// its window of `secs`: a neighbour's load, and the kernel's own work (writeback)
/// that no process is charged with.
fn others(cpu: &CpuUse, pids: usize, secs: f64) -> f64 {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    let ours: f64 = (0..pids).map(|i| cpu.per_request(i, 1) / 1e6).sum();
    (cpu.busy * cores * secs - ours).max(0.0) / secs.max(1e-9)
}

/// The broker's own figures: the publish-acknowledgement round trip of one publish
/// at a time (`probes` of them), and `bodies` published by a lean client of the
/// bench's with `concurrency` in flight (the broker's rate on these cores without
/// the gateway's store). For `target` a broker.
async fn broker_alone(
    brokers: &Brokers,
    target: Target,
    bodies: &Arc<Vec<Prepared>>,
    probes: usize,
    concurrency: usize,
    tag: &str,
) -> (Histogram<u64>, f64, f64) {
    brokers.purge().await;
    let publisher = Publisher::of(brokers, target);
    let mut rtt = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("hist");
    for i in 0..probes {
        let t = Instant::now();
        publisher
            .publish(&bodies[i % bodies.len()].body, &format!("{tag}-rtt-{i}"))
            .await;
        let _ = rtt.record(t.elapsed().as_micros().max(1) as u64);
    }
    brokers.purge().await;
    let pid = target.broker_pid(brokers).expect("a broker");
    let cpu = CpuMeter::start(&[pid, 0]);
    let next = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let (next, bodies, tag) = (next.clone(), bodies.clone(), tag.to_string());
        let publisher = publisher.clone();
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(p) = bodies.get(i) else { break };
                publisher.publish(&p.body, &format!("{tag}-{i}")).await;
            }
        }));
    }
    for t in tasks {
        t.await.expect("publisher");
    }
    let secs = start.elapsed().as_secs_f64();
    let cpu = cpu.stop();
    let held = match target {
        Target::JetStream => brokers.stream_messages().await,
        Target::RabbitMq(kind) => brokers.queue_messages(kind).await,
        Target::Http => 0,
    };
    assert_eq!(
        held,
        bodies.len() as u64,
        "{}: the broker alone",
        target.label()
    );
    let broker_us = cpu.per_request(0, bodies.len() as u64);
    (rtt, bodies.len() as f64 / secs, broker_us)
}

/// A client of the bench's on one broker.
#[derive(Clone)]
enum Publisher {
    JetStream(jetstream::Context),
    RabbitMq(lapin::Channel, QueueKind),
}

impl Publisher {
    fn of(brokers: &Brokers, target: Target) -> Publisher {
        match target {
            Target::JetStream => Publisher::JetStream(brokers.js.clone()),
            Target::RabbitMq(kind) => Publisher::RabbitMq(brokers.amqp_publish.clone(), kind),
            Target::Http => unreachable!("a broker"),
        }
    }

    /// One publish as the gateway makes it (persistent, with a message id) but
    /// without its headers, waited until acknowledged.
    async fn publish(&self, body: &Bytes, id: &str) {
        match self {
            Publisher::JetStream(js) => {
                let msg = PublishMessage::build().payload(body.clone()).message_id(id);
                js.send_publish(SUBJECT, msg)
                    .await
                    .expect("publish")
                    .await
                    .expect("ack");
            }
            Publisher::RabbitMq(channel, kind) => {
                let confirm = channel
                    .basic_publish(
                        "".into(),
                        kind.name().into(),
                        BasicPublishOptions {
                            mandatory: true,
                            ..BasicPublishOptions::default()
                        },
                        body,
                        BasicProperties::default()
                            .with_delivery_mode(2)
                            .with_message_id(id.into())
                            .with_content_type("application/json".into()),
                    )
                    .await
                    .expect("publish")
                    .await
                    .expect("confirm");
                assert!(confirm.is_ack(), "{}: not confirmed", kind.name());
            }
        }
    }
}

fn env_list(name: &str) -> Option<Vec<usize>> {
    let v = std::env::var(name).ok().filter(|v| !v.is_empty())?;
    Some(
        v.split(',')
            .map(|c| c.trim().parse().unwrap_or_else(|_| panic!("{name}: {v}")))
            .collect(),
    )
}

/// The drains (see the module's documentation).
pub async fn queue_drain(report: &mut Report, s: Settings, brokers: &Brokers, smoke: bool) {
    let n = s.queue_entries;
    let concurrency = broker_concurrency();
    let targets = [
        Target::Http,
        Target::JetStream,
        Target::RabbitMq(QueueKind::Quorum),
        Target::RabbitMq(QueueKind::Classic),
    ];
    // The brokers alone.
    let bodies = Arc::new(prepare(n, "alone", None));
    let probes = if smoke { 50 } else { 1000 };
    let mut alone = Vec::new();
    for target in &targets[1..] {
        let (rtt, rate, broker_us) =
            broker_alone(brokers, *target, &bodies, probes, concurrency, target.tag()).await;
        let line = format!(
            "{}: one publish at a time, acknowledged in p50 {:.0} µs, p99 {:.0} µs ({probes} publishes); {n} published by the bench's own client with {concurrency} in flight: {rate:.0}/s, broker CPU {broker_us:.1} µs per message",
            target.label(),
            rtt.value_at_quantile(0.5) as f64,
            rtt.value_at_quantile(0.99) as f64,
        );
        println!("  the broker alone, {line}");
        alone.push((*target, rtt.value_at_quantile(0.5) as f64, rate, line));
    }
    drop(bodies);
    // The rounds: every target from the same backlog, the order rotated.
    let perf = std::env::var("HOOKGATE_BENCH_PERF").ok();
    let mut runs: Vec<Vec<QDrained>> = targets.iter().map(|_| Vec::new()).collect();
    for round in 0..s.rounds {
        println!("  round {round}");
        for k in 0..targets.len() {
            let i = (round + k) % targets.len();
            let target = targets[i];
            let c = if target == Target::Http {
                HTTP_CONCURRENCY
            } else {
                concurrency
            };
            let out = perf
                .as_ref()
                .filter(|_| round == 0)
                .map(|p| format!("{p}.{}", target.tag()));
            runs[i].push(drain_into(brokers, target, n, c, out).await);
        }
    }
    let rate = |d: &[QDrained]| median(d.iter().map(|d| d.rate(n)).collect());
    let med = |d: &[QDrained], f: fn(&QDrained) -> f64| median(d.iter().map(f).collect());
    let http = rate(&runs[0]);
    report.add(format!(
        "queue drain, {n} entries, embedded, HTTP to a bare hyper sink (concurrency {HTTP_CONCURRENCY}): {http:.0} deliveries/s (median of {} drains: {}), gateway CPU {:.1} µs per delivery (writer {:.1}), sink {:.1} µs, machine {:.0}% busy, other processes {:.2} cores",
        runs[0].len(),
        rates(&runs[0], n),
        med(&runs[0], |d| d.gateway_us),
        med(&runs[0], |d| d.writer_us),
        med(&runs[0], |d| d.bench_us),
        100.0 * med(&runs[0], |d| d.busy),
        med(&runs[0], |d| d.others),
    ));
    for (i, target) in targets.iter().enumerate().skip(1) {
        let r = rate(&runs[i]);
        // Each round's ratio against that round's HTTP drain.
        let ratios: Vec<f64> = runs[i]
            .iter()
            .zip(&runs[0])
            .map(|(q, h)| h.secs / q.secs)
            .collect();
        let (floor, share) = match target {
            Target::JetStream => (20_000.0, 1.0),
            _ => (10_000.0, 0.7),
        };
        let bar = f64::min(floor, share * http);
        let (_, rtt, alone_rate, _) = alone
            .iter()
            .find(|(t, ..)| t == target)
            .expect("the broker's own figures");
        report.add(format!(
            "queue drain, {n} entries, embedded, {} (concurrency {concurrency}): {r:.0} messages/s (median of {}: {}) = {:.2}× the HTTP drain (per round: {}); target ≥ {bar:.0}/s (the lower of {floor:.0}/s and {share:.1}× HTTP): {}; gateway CPU {:.1} µs per message (writer {:.1}), broker {:.1} µs, machine {:.0}% busy, other processes {:.2} cores; each publish in flight {:.2} ms on average (concurrency / rate), one publish alone acknowledged in {rtt:.0} µs; the broker alone {alone_rate:.0}/s from the bench's client at the same concurrency",
            target.label(),
            runs[i].len(),
            rates(&runs[i], n),
            r / http,
            ratios
                .iter()
                .map(|x| format!("{x:.2}×"))
                .collect::<Vec<_>>()
                .join(", "),
            if r >= bar { "met" } else { "missed" },
            med(&runs[i], |d| d.gateway_us),
            med(&runs[i], |d| d.writer_us),
            med(&runs[i], |d| d.broker_us),
            100.0 * med(&runs[i], |d| d.busy),
            med(&runs[i], |d| d.others),
            1e3 * concurrency as f64 / r,
        ));
    }
    for (_, _, _, line) in &alone {
        report.add(format!("queue drain, the broker alone, {line}"));
    }
    // The sweep of the route's concurrency.
    // (`HOOKGATE_BENCH_QUEUE_SWEEP=` set empty: none.)
    let sweep = match std::env::var("HOOKGATE_BENCH_QUEUE_SWEEP") {
        Ok(v) if v.trim().is_empty() => Vec::new(),
        Ok(_) => env_list("HOOKGATE_BENCH_QUEUE_SWEEP").expect("the sweep"),
        Err(_) if smoke => Vec::new(),
        Err(_) => vec![16, 64, 256, 1024],
    };
    if !sweep.is_empty() {
        println!("  concurrency sweep");
        for target in &targets {
            let mut line = Vec::new();
            for c in &sweep {
                let d = drain_into(brokers, *target, n, *c, None).await;
                line.push(format!(
                    "{c}: {:.0}/s ({:.2} ms in flight each; gateway {:.1} µs, {} {:.1} µs per message, machine {:.0}% busy)",
                    d.rate(n),
                    1e3 * *c as f64 / d.rate(n),
                    d.gateway_us,
                    if *target == Target::Http {
                        "sink"
                    } else {
                        "broker"
                    },
                    if *target == Target::Http {
                        d.bench_us
                    } else {
                        d.broker_us
                    },
                    100.0 * d.busy
                ));
            }
            report.add(format!(
                "queue drain, {n} entries, {} by the route's concurrency: {}",
                target.label(),
                line.join("; ")
            ));
        }
    }
}

fn rates(d: &[QDrained], n: usize) -> String {
    d.iter()
        .map(|d| format!("{:.0}", d.rate(n)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// One variant of `queue-ingest`: where the gateway delivers (and whether ingest
/// first holds its deliveries back while ingest is saturated), or nowhere.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Variant {
    Off,
    On { target: Target, ingest_first: bool },
}

impl Variant {
    fn label(self) -> String {
        match self {
            Variant::Off => "forwarding off".into(),
            Variant::On {
                target,
                ingest_first: true,
            } => target.label().into(),
            Variant::On {
                target,
                ingest_first: false,
            } => format!("{}, ingest first off", target.label()),
        }
    }
}

#[derive(Default)]
struct IngestFigures {
    rates: Vec<f64>,
    p99s: Vec<f64>,
    gateway_us: Vec<f64>,
    dest_us: Vec<f64>,
    in_window: Vec<f64>,
    settled_after: Vec<f64>,
    others: Vec<f64>,
}

/// Ingest while delivering (see the module's documentation).
pub async fn queue_ingest(report: &mut Report, s: Settings, brokers: &Brokers) {
    let kind = QueueKind::chosen();
    let concurrency = broker_concurrency();
    let mut variants = vec![Variant::Off];
    for ingest_first in [true, false] {
        for target in [Target::Http, Target::JetStream, Target::RabbitMq(kind)] {
            variants.push(Variant::On {
                target,
                ingest_first,
            });
        }
    }
    let mut figures: Vec<IngestFigures> = variants.iter().map(|_| Default::default()).collect();
    // The same extra settings as the ingest scenarios take.
    let extra = |name: &str| std::env::var(name).unwrap_or_default().replace("\\n", "\n");
    let n = webhooks_for(s);
    for round in 0..s.rounds {
        let requests = Arc::new(prepare(n, &format!("qi{round}"), None));
        for k in 0..variants.len() {
            let i = (round + k) % variants.len();
            let variant = variants[i];
            brokers.purge().await;
            let target = match variant {
                Variant::Off => None,
                Variant::On { target, .. } => Some(target),
            };
            let sink = (target == Some(Target::Http)).then(SinkProc::start);
            let destination = match target {
                None => "http://127.0.0.1:9/".to_string(),
                Some(Target::Http) => sink.as_ref().expect("sink").url(),
                Some(Target::JetStream) => brokers.nats_destination(),
                Some(Target::RabbitMq(kind)) => brokers.amqp_destination(kind),
            };
            let c = match target {
                Some(Target::Http) | None => HTTP_CONCURRENCY,
                Some(_) => concurrency,
            };
            let global = match variant {
                Variant::On {
                    ingest_first: false,
                    ..
                } => "[forwarder]\ningest_first = 0\n",
                _ => "",
            };
            let dir = tempfile::tempdir().expect("tempdir");
            let gw = gateway(
                dir.path(),
                &destination,
                &format!("{global}{}", extra("HOOKGATE_BENCH_GLOBAL")),
                &format!(
                    "[sources.delivery]\nconcurrency = {c}\n{}",
                    extra("HOOKGATE_BENCH_SOURCE")
                ),
            );
            if variant == Variant::Off {
                source_control(gw.admin, "pause").await;
            }
            let dest_pid = match target {
                None => None,
                Some(Target::Http) => sink.as_ref().map(|s| s.proc.child.id()),
                Some(t) => t.broker_pid(brokers),
            };
            let mut pids = vec![gw.child.id(), 0];
            pids.extend(dest_pid);
            let threads = ThreadMeter::start(gw.child.id());
            let saturated = saturated_secs(gw.admin).await;
            let (g, cpu) = metered_round(gw.port, &pids, &requests, s, false).await;
            let threads = threads.stop();
            let saturated = saturated_secs(gw.admin).await - saturated;
            let f = &mut figures[i];
            f.rates.push(g.rate());
            f.p99s.push(g.pct(0.99));
            f.gateway_us.push(cpu.per_request(0, g.requests));
            let other_cores = others(&cpu, pids.len(), g.requests as f64 / g.rate());
            f.others.push(other_cores);
            let mut line = format!(
                "    {} (concurrency {c}): {:.0} req/s (p50 {:.2} ms, p99 {:.2} ms, {} errors); CPU per request: gateway {:.0} µs, generator {:.0} µs",
                variant.label(),
                g.rate(),
                g.pct(0.5),
                g.pct(0.99),
                g.errors,
                cpu.per_request(0, g.requests),
                cpu.per_request(1, g.requests),
            );
            if let Some(target) = target {
                let dest_us = cpu.per_request(2, g.requests);
                f.dest_us.push(dest_us);
                let counter = match &sink {
                    Some(s) => Counter::SinkProc(s),
                    None => Counter::of(target, brokers),
                };
                let accepted = g.requests - g.errors;
                let in_window = counter.count().await;
                let (total, took) = counter.settle(accepted, Duration::from_secs(10)).await;
                f.in_window.push(in_window as f64 / accepted.max(1) as f64);
                f.settled_after.push(took.as_secs_f64());
                line.push_str(&format!(
                    ", {} {dest_us:.0} µs; delivered {in_window} of {accepted} by the end of the load, {total} {:.1} s later",
                    if target == Target::Http { "sink" } else { "broker" },
                    took.as_secs_f64()
                ));
                // Each accepted webhook delivered once: none lost, none twice.
                assert_eq!(
                    total,
                    accepted,
                    "{}: {total} delivered of {accepted} accepted",
                    target.label()
                );
            }
            println!(
                "{line} (machine {:.0}% busy, other processes {other_cores:.2} cores); ingest saturated {saturated:.1} s",
                100.0 * cpu.busy
            );
            println!("      gateway threads: {threads}");
            drop(gw);
        }
    }
    let rate = |i: usize| median(figures[i].rates.clone());
    let part = |i: usize| {
        let f = &figures[i];
        format!(
            "{:.0} req/s (p99 {:.2} ms, other processes {:.2} cores, gateway CPU {:.0} µs per request{}{})",
            rate(i),
            median(f.p99s.clone()),
            median(f.others.clone()),
            median(f.gateway_us.clone()),
            match variants[i] {
                Variant::On {
                    target: Target::Http,
                    ..
                } => format!(", sink {:.0} µs", median(f.dest_us.clone())),
                Variant::On { .. } => format!(", broker {:.0} µs", median(f.dest_us.clone())),
                Variant::Off => String::new(),
            },
            if f.in_window.is_empty() {
                String::new()
            } else {
                format!(
                    "; {:.0}% delivered by the end of the load, the rest {:.1} s later",
                    100.0 * median(f.in_window.clone()),
                    median(f.settled_after.clone())
                )
            },
        )
    };
    report.add(format!(
        "queue ingest, embedded, c={}: forwarding off {}",
        s.connections,
        part(0)
    ));
    // Per mode: HTTP, JetStream, RabbitMQ at 1..4 and 4..7.
    for (mode, base) in [
        ("ingest first on (the default)", 1),
        ("ingest first off", 4),
    ] {
        let http = rate(base);
        report.add(format!(
            "queue ingest, embedded, c={}, {mode}: delivering over HTTP (concurrency {HTTP_CONCURRENCY}) {} = {:.2}× forwarding off",
            s.connections,
            part(base),
            http / rate(0)
        ));
        for i in base + 1..base + 3 {
            let per_round: Vec<String> = figures[i]
                .rates
                .iter()
                .zip(&figures[base].rates)
                .map(|(q, h)| format!("{:.2}×", q / h))
                .collect();
            report.add(format!(
                "queue ingest, embedded, c={}, {mode}: delivering into {} (concurrency {concurrency}) {} = {:.2}× delivering over HTTP (per round: {}); target ≥ 0.9×: {}",
                s.connections,
                match variants[i] {
                    Variant::On { target, .. } => target.label(),
                    Variant::Off => "nothing",
                },
                part(i),
                rate(i) / http,
                per_round.join(", "),
                if rate(i) >= 0.9 * http { "met" } else { "missed" },
            ));
        }
    }
}

/// The route concurrency of the broker routes: `HOOKGATE_BENCH_QUEUE_CONCURRENCY`,
/// or [`BROKER_CONCURRENCY`].
fn broker_concurrency() -> usize {
    env_list("HOOKGATE_BENCH_QUEUE_CONCURRENCY")
        .and_then(|c| c.first().copied())
        .unwrap_or(BROKER_CONCURRENCY)
}
