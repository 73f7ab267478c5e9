//! The gateway benchmark: every figure against a bare-hyper baseline measured in the
//! same run.
//!
//! ```text
//! cargo bench --bench gateway                      # every scenario
//! cargo bench --bench gateway -- ingest-embedded   # one scenario (see SCENARIOS)
//! cargo bench --bench gateway -- --smoke           # about two minutes: proves the harness works
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

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use hdrhistogram::Histogram;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};

const SCENARIOS: &[&str] = &[
    "ingest-embedded",
    "ingest-redis",
    "latency-embedded",
    "latency-redis",
    "duplicates",
    "forward-drain",
    "forward-e2e",
    "recovery",
];

const SECRET: &str = "whsec_bench_secret";

#[derive(Clone, Copy)]
struct Settings {
    duration: Duration,
    connections: usize,
    rounds: usize,
    drain_entries: usize,
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
            recovery_entries: 200,
            outage: Duration::from_secs(2),
        }
    }
}

fn main() {
    if let Ok(port) = std::env::var("HOOKGATE_BENCH_BASELINE") {
        baseline_server(port.parse().expect("port"));
        return;
    }
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
        println!(
            "machine: {} cores, {}",
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1),
            cpu_model()
        );
        for s in scenarios {
            println!("\n== {s}");
            match s {
                "ingest-embedded" => ingest(&mut report, Store::Embedded, settings, false).await,
                "ingest-redis" => ingest(&mut report, Store::Redis, settings, false).await,
                "latency-embedded" => latency(&mut report, Store::Embedded, settings).await,
                "latency-redis" => latency(&mut report, Store::Redis, settings).await,
                "duplicates" => ingest(&mut report, Store::Embedded, settings, true).await,
                "forward-drain" => forward_drain(&mut report, settings).await,
                "forward-e2e" => forward_e2e(&mut report, settings).await,
                "recovery" => recovery(&mut report, settings).await,
                _ => unreachable!(),
            }
        }
        println!("\n== summary");
        for line in &report.lines {
            println!("{line}");
        }
    });
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

// ---------------------------------------------------------------------------
// Requests.
// ---------------------------------------------------------------------------

/// A pre-signed request.
struct Prepared {
    signature: String,
    body: Bytes,
}

/// `n` distinct Stripe events with 1–4 KiB bodies, signed now. With `dup_every = 2`,
/// every second request repeats an earlier event (a redelivery).
fn prepare(n: usize, prefix: &str, dup_every: Option<usize>) -> Vec<Prepared> {
    use hookgate::config::Secret;
    use hookgate::provider::Registry;
    use hookgate::provider::sign::{SignInput, sign};
    let reg = Registry::builtin().expect("registry");
    let spec = reg.get("stripe").expect("stripe spec").clone();
    let secret = Secret::new(SECRET);
    let ts = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs() as i64;
    let mut out = Vec::with_capacity(n);
    let mut rng = fastrand::Rng::with_seed(7);
    for i in 0..n {
        let event = match dup_every {
            Some(k) if i % k == k - 1 && i > 0 => i / 2,
            _ => i,
        };
        let pad = rng.usize(700..3800);
        let body = format!(
            r#"{{"id":"evt_{prefix}_{event}","object":"event","type":"payment_intent.succeeded","api_version":"2024-06-20","created":{ts},"data":{{"object":{{"id":"pi_{event}","amount":2000,"currency":"usd","description":"{}"}}}},"livemode":false,"pending_webhooks":1}}"#,
            "x".repeat(pad)
        );
        let headers = sign(
            &spec,
            &secret,
            &SignInput {
                body: body.as_bytes(),
                timestamp: ts,
                id: "",
                event_type: None,
                method: "POST",
                path: "/",
                url: None,
            },
        )
        .expect("sign");
        out.push(Prepared {
            signature: headers.headers[0].1.clone(),
            body: Bytes::from(body),
        });
    }
    out
}

// ---------------------------------------------------------------------------
// Load generator.
// ---------------------------------------------------------------------------

struct LoadResult {
    requests: u64,
    errors: u64,
    elapsed: Duration,
    hist: Histogram<u64>,
}

impl LoadResult {
    fn rate(&self) -> f64 {
        self.requests as f64 / self.elapsed.as_secs_f64()
    }
    fn pct(&self, q: f64) -> f64 {
        self.hist.value_at_quantile(q) as f64 / 1000.0
    }
}

async fn connect(addr: SocketAddr) -> hyper::client::conn::http1::SendRequest<Full<Bytes>> {
    let stream = TcpStream::connect(addr).await.expect("connect");
    let _ = stream.set_nodelay(true);
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .expect("handshake");
    tokio::spawn(conn);
    sender
}

fn request(addr: SocketAddr, path: &str, p: &Prepared) -> Request<Full<Bytes>> {
    Request::post(format!("http://{addr}{path}"))
        .header("host", addr.to_string())
        .header("content-type", "application/json")
        .header("stripe-signature", &p.signature)
        .body(Full::new(p.body.clone()))
        .expect("request")
}

/// Closed loop: `connections` connections each send the next request as soon as the
/// previous answer is read, for `duration` (or until the requests run out, unless
/// `cycle`: servers that do not dedupe, the baseline and the sink, take them again).
async fn closed_loop(
    addr: SocketAddr,
    path: &str,
    requests: Arc<Vec<Prepared>>,
    connections: usize,
    duration: Duration,
    cycle: bool,
) -> LoadResult {
    let next = Arc::new(AtomicUsize::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let deadline = start + duration;
    let mut tasks = Vec::new();
    for _ in 0..connections {
        let requests = requests.clone();
        let next = next.clone();
        let errors = errors.clone();
        let path = path.to_string();
        tasks.push(tokio::spawn(async move {
            let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("hist");
            let mut sender = connect(addr).await;
            let mut done = 0u64;
            while Instant::now() < deadline {
                let mut i = next.fetch_add(1, Ordering::Relaxed);
                if cycle {
                    i %= requests.len();
                }
                let Some(p) = requests.get(i) else { break };
                let t = Instant::now();
                match sender.send_request(request(addr, &path, p)).await {
                    Ok(resp) => {
                        let ok = resp.status().is_success();
                        let _ = resp.into_body().collect().await;
                        if !ok {
                            errors.fetch_add(1, Ordering::Relaxed);
                        }
                        let _ = hist.record(t.elapsed().as_micros() as u64);
                        done += 1;
                    }
                    Err(_) => {
                        errors.fetch_add(1, Ordering::Relaxed);
                        sender = connect(addr).await;
                    }
                }
            }
            (done, hist)
        }));
    }
    let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("hist");
    let mut total = 0;
    for t in tasks {
        let (n, h) = t.await.expect("load task");
        total += n;
        hist.add(h).expect("merge");
    }
    LoadResult {
        requests: total,
        errors: errors.load(Ordering::Relaxed),
        elapsed: start.elapsed(),
        hist,
    }
}

/// Open loop: requests are due at a fixed rate; latency counts from the due time.
async fn open_loop(
    addr: SocketAddr,
    path: &str,
    requests: Arc<Vec<Prepared>>,
    connections: usize,
    rate: f64,
    duration: Duration,
    sent_at: Option<Arc<Mutex<HashMap<usize, Instant>>>>,
) -> LoadResult {
    let (tx, rx) = tokio::sync::mpsc::channel::<(usize, Instant)>(1_000_000);
    let rx = Arc::new(tokio::sync::Mutex::new(rx));
    let errors = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let total = ((rate * duration.as_secs_f64()) as usize).min(requests.len());
    // The producer is an OS thread that sleeps until each due time (tokio's timer has a
    // 1 ms grain, which would add up to a millisecond of the generator's own lateness
    // to every figure).
    let producer = std::thread::spawn(move || {
        let interval = Duration::from_secs_f64(1.0 / rate);
        let mut i = 0usize;
        while i < total {
            let now = Instant::now();
            while i < total && start + interval.mul_f64(i as f64) <= now {
                if tx
                    .blocking_send((i, start + interval.mul_f64(i as f64)))
                    .is_err()
                {
                    return;
                }
                i += 1;
            }
            if let Some(wait) =
                (start + interval.mul_f64(i as f64)).checked_duration_since(Instant::now())
            {
                std::thread::sleep(wait);
            }
        }
    });
    let mut tasks = Vec::new();
    for _ in 0..connections {
        let rx = rx.clone();
        let requests = requests.clone();
        let errors = errors.clone();
        let sent_at = sent_at.clone();
        let path = path.to_string();
        tasks.push(tokio::spawn(async move {
            let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("hist");
            let mut sender = connect(addr).await;
            loop {
                let job = rx.lock().await.recv().await;
                let Some((i, due)) = job else { break };
                if let Some(s) = &sent_at {
                    s.lock().expect("lock").insert(i, due);
                }
                match sender
                    .send_request(request(addr, &path, &requests[i]))
                    .await
                {
                    Ok(resp) => {
                        if !resp.status().is_success() {
                            errors.fetch_add(1, Ordering::Relaxed);
                        }
                        let _ = resp.into_body().collect().await;
                        let _ = hist.record(due.elapsed().as_micros().max(1) as u64);
                    }
                    Err(_) => {
                        errors.fetch_add(1, Ordering::Relaxed);
                        sender = connect(addr).await;
                    }
                }
            }
            hist
        }));
    }
    let _ = producer.join();
    let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("hist");
    for t in tasks {
        hist.add(t.await.expect("task")).expect("merge");
    }
    LoadResult {
        requests: hist.len(),
        errors: errors.load(Ordering::Relaxed),
        elapsed: start.elapsed(),
        hist,
    }
}

// ---------------------------------------------------------------------------
// Processes: baseline, gateway, redis.
// ---------------------------------------------------------------------------

/// The baseline: a bare hyper server that reads the body and answers 200, with the
/// gateway's runtime settings.
fn baseline_server(port: u16) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async move {
        let listener = TcpListener::bind(("127.0.0.1", port)).await.expect("bind");
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let _ = stream.set_nodelay(true);
            tokio::spawn(async move {
                let svc =
                    hyper::service::service_fn(|req: Request<hyper::body::Incoming>| async move {
                        let _ = req.into_body().collect().await;
                        Ok::<_, std::convert::Infallible>(hyper::Response::new(Full::new(
                            Bytes::from_static(b"{\"ok\":true}"),
                        )))
                    });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("port")
}

fn wait_port(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "port {port} never opened");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// CPU time that processes spend over a measured window, read from `/proc` (Linux;
/// zeros elsewhere). It turns a throughput ratio into its cause: on a machine whose
/// cores are shared by everyone, req/s follows the CPU that each request costs.
struct CpuMeter {
    pids: Vec<u32>,
    ticks: Vec<u64>,
    machine: (u64, u64),
}

/// A finished `CpuMeter` window: CPU seconds per process, and the machine's share busy.
struct CpuUse {
    secs: Vec<f64>,
    busy: f64,
}

impl CpuMeter {
    /// `pids[0]` may be 0 for "this process" (the load generator).
    fn start(pids: &[u32]) -> CpuMeter {
        CpuMeter {
            pids: pids.to_vec(),
            ticks: pids.iter().map(|&p| proc_ticks(p)).collect(),
            machine: machine_ticks(),
        }
    }

    fn stop(self) -> CpuUse {
        // SAFETY: sysconf has no preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
        let secs = self
            .pids
            .iter()
            .zip(&self.ticks)
            .map(|(&p, &t)| proc_ticks(p).saturating_sub(t) as f64 / hz)
            .collect();
        let (busy, total) = machine_ticks();
        let busy = busy.saturating_sub(self.machine.0);
        let total = total.saturating_sub(self.machine.1);
        CpuUse {
            secs,
            busy: busy as f64 / total.max(1) as f64,
        }
    }
}

impl CpuUse {
    /// Microseconds of CPU that process `i` spent per request.
    fn per_request(&self, i: usize, requests: u64) -> f64 {
        self.secs[i] * 1e6 / requests.max(1) as f64
    }
}

/// User + system ticks of a process and of its reaped children (Redis's AOF rewrite
/// children count for Redis); pid 0 is this process.
fn proc_ticks(pid: u32) -> u64 {
    let path = if pid == 0 {
        "/proc/self/stat".to_string()
    } else {
        format!("/proc/{pid}/stat")
    };
    std::fs::read_to_string(path)
        .ok()
        .and_then(|s| {
            // Fields after the command name, which ends at the last ')': utime is the
            // 14th field overall, so the 12th here; then stime, cutime, cstime.
            let rest = &s[s.rfind(')')? + 2..];
            let f: Vec<u64> = rest
                .split_whitespace()
                .skip(11)
                .take(4)
                .filter_map(|v| v.parse().ok())
                .collect();
            Some(f.iter().sum())
        })
        .unwrap_or(0)
}

/// (busy, total) ticks of the whole machine; idle and iowait count as not busy.
fn machine_ticks() -> (u64, u64) {
    std::fs::read_to_string("/proc/stat")
        .ok()
        .and_then(|s| {
            let f: Vec<u64> = s
                .lines()
                .next()?
                .split_whitespace()
                .skip(1)
                .take(8)
                .filter_map(|v| v.parse().ok())
                .collect();
            let total: u64 = f.iter().sum();
            let idle = f.get(3).copied().unwrap_or(0) + f.get(4).copied().unwrap_or(0);
            Some((total.saturating_sub(idle), total))
        })
        .unwrap_or((0, 0))
}

struct Proc {
    child: Child,
    port: u16,
    admin: u16,
}

impl Proc {
    /// Peak resident set size (VmHWM) in MiB.
    fn peak_rss_mib(&self) -> f64 {
        std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("VmHWM:"))
                    .and_then(|l| l.split_whitespace().nth(1))
                    .and_then(|kb| kb.parse::<f64>().ok())
            })
            .map(|kb| kb / 1024.0)
            .unwrap_or(0.0)
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_baseline() -> Proc {
    let port = free_port();
    let child = Command::new(std::env::current_exe().expect("exe"))
        .env("HOOKGATE_BENCH_BASELINE", port.to_string())
        .stdout(Stdio::null())
        .spawn()
        .expect("baseline");
    wait_port(port);
    Proc {
        child,
        port,
        admin: 0,
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Store {
    Embedded,
    Redis,
}

struct Redis {
    child: Child,
    port: u16,
    /// Its Unix socket, which the gateway uses instead of TCP when
    /// `HOOKGATE_BENCH_REDIS_UNIX` is set (Redis on the gateway's own host).
    socket: PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_redis() -> Redis {
    let dir = tempfile::tempdir().expect("tempdir");
    let port = free_port();
    // The Redis settings that deploy/ ships (AOF `appendfsync always`, rewrites, …),
    // on a private port and directory.
    let conf = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/redis.conf");
    let socket = dir.path().join("redis.sock");
    let child = Command::new("redis-server")
        .arg(conf)
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        // Extra redis-server arguments, for diagnosis (e.g. what AOF rewrites cost:
        // `HOOKGATE_BENCH_REDIS_ARGS="--auto-aof-rewrite-percentage 0"`).
        .args(
            std::env::var("HOOKGATE_BENCH_REDIS_ARGS")
                .unwrap_or_default()
                .split_whitespace(),
        )
        .arg("--unixsocket")
        .arg(&socket)
        .args(["--unixsocketperm", "700"])
        .arg("--dir")
        .arg(dir.path())
        .stdout(Stdio::null())
        .spawn()
        .expect("redis-server (apt-get install redis-server)");
    wait_port(port);
    Redis {
        child,
        port,
        socket,
        _dir: dir,
    }
}

/// Start `hookgate serve` with `store`, one source `bench` delivering to `sink`;
/// `global` holds top-level tables, `source_extra` the source's own
/// (`[sources.retry]`, `[sources.delivery]`).
fn start_gateway(dir: &Path, store: &str, sink: &str, global: &str, source_extra: &str) -> Proc {
    let port = free_port();
    let admin = free_port();
    let cfg = dir.join("hookgate.toml");
    std::fs::write(
        &cfg,
        format!(
            "[server]\nlisten = \"127.0.0.1:{port}\"\n[admin]\nlisten = \"127.0.0.1:{admin}\"\n{store}\n{global}\n\
             [[sources]]\nname = \"bench\"\nprovider = \"stripe\"\nsecret = \"{SECRET}\"\n\
             destination = \"{sink}\"\n{source_extra}\n"
        ),
    )
    .expect("config");
    let child = Command::new(env!("CARGO_BIN_EXE_hookgate"))
        .arg("serve")
        .arg("--config")
        .arg(&cfg)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("hookgate");
    wait_port(admin);
    wait_port(port);
    Proc { child, port, admin }
}

fn store_toml(store: Store, dir: &Path, redis: Option<&Redis>) -> String {
    match store {
        Store::Embedded => format!(
            "[store]\nkind = \"embedded\"\npath = \"{}\"\n",
            dir.join("data").display()
        ),
        Store::Redis if std::env::var_os("HOOKGATE_BENCH_REDIS_UNIX").is_some() => format!(
            "[store]\nkind = \"redis\"\nurl = \"redis+unix://{}\"\n",
            redis.expect("redis").socket.display()
        ),
        Store::Redis => format!(
            "[store]\nkind = \"redis\"\nurl = \"redis://127.0.0.1:{}\"\n",
            redis.expect("redis").port
        ),
    }
}

fn addr(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

// ---------------------------------------------------------------------------
// Scenarios.
// ---------------------------------------------------------------------------

/// A sink that counts deliveries (and can be down).
struct Sink {
    port: u16,
    received: Arc<AtomicU64>,
    arrivals: Arc<Mutex<Vec<(Instant, String)>>>,
    up: Arc<AtomicBool>,
}

impl Sink {
    /// Wait (at most ten minutes) until the sink has received `n` deliveries.
    async fn wait_for(&self, n: usize, what: &str) {
        let deadline = Instant::now() + Duration::from_secs(600);
        while (self.received.load(Ordering::Relaxed) as usize) < n {
            assert!(Instant::now() < deadline, "{what} did not finish");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

/// Ingest every prepared webhook through the gateway on `port`, each accepted: the
/// backlog of the forward scenarios.
async fn ingest_backlog(port: u16, requests: Vec<Prepared>, connections: usize) {
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

async fn start_sink(port: Option<u16>, record: bool) -> Sink {
    let listener = TcpListener::bind(("127.0.0.1", port.unwrap_or(0)))
        .await
        .expect("sink bind");
    let port = listener.local_addr().expect("addr").port();
    let received = Arc::new(AtomicU64::new(0));
    let arrivals = Arc::new(Mutex::new(Vec::new()));
    let up = Arc::new(AtomicBool::new(true));
    let (r, a, u) = (received.clone(), arrivals.clone(), up.clone());
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            if !u.load(Ordering::SeqCst) {
                drop(stream); // refuse while "down"
                continue;
            }
            let (r, a) = (r.clone(), a.clone());
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                    let (r, a) = (r.clone(), a.clone());
                    async move {
                        let id = req
                            .headers()
                            .get("hookgate-event-id")
                            .and_then(|v| v.to_str().ok())
                            .unwrap_or("")
                            .to_string();
                        let _ = req.into_body().collect().await;
                        r.fetch_add(1, Ordering::Relaxed);
                        if record {
                            a.lock().expect("lock").push((Instant::now(), id));
                        }
                        Ok::<_, std::convert::Infallible>(hyper::Response::new(Full::new(
                            Bytes::new(),
                        )))
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    Sink {
        port,
        received,
        arrivals,
        up,
    }
}

async fn baseline_rate(s: Settings, requests: &Arc<Vec<Prepared>>) -> (LoadResult, CpuUse) {
    let b = start_baseline();
    let meter = CpuMeter::start(&[b.child.id(), 0]);
    let r = closed_loop(
        addr(b.port),
        "/ingest/bench",
        requests.clone(),
        s.connections,
        s.duration,
        true,
    )
    .await;
    let cpu = meter.stop();
    drop(b);
    (r, cpu)
}

async fn ingest(report: &mut Report, store: Store, s: Settings, duplicates: bool) {
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
        let gw = start_gateway(
            dir.path(),
            &store_toml(store, dir.path(), redis.as_ref()),
            "http://127.0.0.1:9/",
            "[forwarder]\npoll_interval = \"1s\"\n",
            "",
        );
        // Deliveries are off the ingest path: the sink is unreachable (port 9), so the
        // forwarder only schedules retries in the background.
        let mut pids = vec![gw.child.id(), 0];
        if let Some(r) = &redis {
            pids.push(r.child.id());
        }
        let meter = CpuMeter::start(&pids);
        let g = closed_loop(
            addr(gw.port),
            "/ingest/bench",
            requests.clone(),
            s.connections,
            s.duration,
            false,
        )
        .await;
        let cpu = meter.stop();
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

/// Measures the disk itself while a scenario runs: a 4 KiB overwrite plus `fdatasync`
/// every 10 ms in the store's directory. Every acknowledgement waits for one such
/// flush, so this is the floor under the gateway's latency tail.
struct FsyncProbe {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Histogram<u64>>,
}

impl FsyncProbe {
    fn start(dir: &Path) -> FsyncProbe {
        use std::io::{Seek, SeekFrom, Write};
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let path = dir.join("fsync-probe");
        let thread = std::thread::spawn(move || {
            let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("hist");
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .truncate(true)
                .read(true)
                .write(true)
                .open(&path)
                .expect("probe file");
            let page = [7u8; 4096];
            let mut i = 0u64;
            while !flag.load(Ordering::Relaxed) {
                let t = Instant::now();
                f.seek(SeekFrom::Start((i % 256) * 4096)).expect("seek");
                f.write_all(&page).expect("write");
                f.sync_data().expect("fdatasync");
                let _ = hist.record(t.elapsed().as_micros().max(1) as u64);
                i += 1;
                std::thread::sleep(Duration::from_millis(10));
            }
            hist
        });
        FsyncProbe { stop, thread }
    }

    /// "p50 …, p99 …, max …" in milliseconds.
    fn finish(self) -> String {
        self.stop.store(true, Ordering::Relaxed);
        let h = self.thread.join().expect("probe");
        format!(
            "p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
            h.value_at_quantile(0.5) as f64 / 1000.0,
            h.value_at_quantile(0.99) as f64 / 1000.0,
            h.max() as f64 / 1000.0
        )
    }
}

async fn latency(report: &mut Report, store: Store, s: Settings) {
    let dir = tempfile::tempdir().expect("tempdir");
    let redis = (store == Store::Redis).then(start_redis);
    let gw = start_gateway(
        dir.path(),
        &store_toml(store, dir.path(), redis.as_ref()),
        "http://127.0.0.1:9/",
        "[forwarder]\npoll_interval = \"1s\"\n",
        "",
    );
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

async fn forward_drain(report: &mut Report, s: Settings) {
    let sink = start_sink(None, false).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let gw = start_gateway(
        dir.path(),
        &store_toml(Store::Embedded, dir.path(), None),
        &format!("http://127.0.0.1:{}/hook", sink.port),
        "[forwarder]\npoll_interval = \"100ms\"\n",
        "[sources.delivery]\nconcurrency = 64\n",
    );
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
    sink.wait_for(s.drain_entries, "drain").await;
    let secs = start.elapsed().as_secs_f64();
    report.add(format!(
        "forward drain, embedded: {} entries in {secs:.2} s = {:.0} entries/s (concurrency 64; peak RSS {:.1} MiB)",
        s.drain_entries,
        s.drain_entries as f64 / secs,
        gw.peak_rss_mib()
    ));
}

async fn forward_e2e(report: &mut Report, s: Settings) {
    let sink = start_sink(None, true).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let gw = start_gateway(
        dir.path(),
        &store_toml(Store::Embedded, dir.path(), None),
        &format!("http://127.0.0.1:{}/hook", sink.port),
        "[forwarder]\npoll_interval = \"100ms\"\n",
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

async fn recovery(report: &mut Report, s: Settings) {
    let sink = start_sink(None, true).await;
    sink.up.store(false, Ordering::SeqCst);
    let dir = tempfile::tempdir().expect("tempdir");
    let gw = start_gateway(
        dir.path(),
        &store_toml(Store::Embedded, dir.path(), None),
        &format!("http://127.0.0.1:{}/hook", sink.port),
        "[forwarder]\npoll_interval = \"100ms\"\n",
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
