//! Scenario `pull-drain`: a backlog on a pull route drained by one `hookgate listen`
//! into a bare hyper sink, against the same backlog pushed to the same sink by the
//! gateway, in the same run; and the memory and store connections 1,000 idle long
//! polls cost.
//!
//! - **Drain.** `--drain-entries` webhooks (100,000 by default) are stored with no
//!   consumer running (a pull route sends nothing), then `hookgate listen --max 100`
//!   starts and is timed until the sink holds every delivery; then the push drain
//!   (`forward-drain`'s: the source paused while the backlog is stored, then
//!   resumed). `--rounds` rounds, pull and push alternating; the medians and their
//!   ratio. After each pull drain the gateway must have recorded every delivery as
//!   delivered (`hookgate_pull_acked_total`).
//! - **Ingest while delivering.** 64 connections in a closed loop for the duration
//!   against a gateway that delivers while it ingests: its pull route drained by
//!   one `hookgate listen` into the sink, against the same source pushing to the
//!   sink; `--rounds` rounds alternating, the medians and their ratio. Every
//!   accepted webhook must reach the sink.
//! - **Idle long polls.** 1,000 long polls waiting at once on 64 pull routes, each
//!   with its own token (at most 16 per token, the per-token cap), from 8 loopback
//!   addresses (within the per-client connection cap), against an idle gateway: its
//!   RSS and its store connections (open file descriptors of the embedded store's
//!   database) before and while they wait.
//!
//! ```text
//! cargo bench --bench gateway -- pull-drain
//! cargo bench --bench gateway -- pull-drain --rounds 1 --drain-entries 20000
//! ```

use std::process::{Child, Command, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::load::prepare;
use crate::measure::median;
use crate::procs::{Proc, Store, free_port, gateway_bin, run_gateway, store_toml};
use crate::scenarios::{drain, ingest_backlog, scrape};
use crate::sink::start_sink;
use crate::{Report, SECRET, Settings};

/// The consumer token of every pull route of the bench.
const TOKEN: &str = "bench-pull-token-0123456789";

/// The idle long polls, the routes (each its token) they wait on, at most 16 each,
/// and the client addresses they come from (each under the per-client cap of 256
/// connections).
const IDLE_POLLS: usize = 1000;
const IDLE_ROUTES: usize = 64;
const IDLE_CLIENTS: usize = 8;

/// A gateway whose sources are `sources` (TOML), the pull token in its environment.
fn gateway(dir: &std::path::Path, sources: &str) -> Proc {
    let port = free_port();
    let admin = free_port();
    let cfg = dir.join("hookgate.toml");
    std::fs::write(
        &cfg,
        format!(
            "[server]\nlisten = \"127.0.0.1:{port}\"\n[admin]\nlisten = \"127.0.0.1:{admin}\"\n{}\n\
             [forwarder]\npoll_interval = \"100ms\"\n{sources}",
            store_toml(Store::Embedded, dir, None, None)
        ),
    )
    .expect("config");
    run_gateway(&cfg, None, (port, admin), &[("BENCH_PULL_TOKEN", TOKEN)])
}

/// One `hookgate listen` taking `bench/default` of the gateway on `port` into
/// `target`, 100 a poll, 64 at once.
fn listen(port: u16, target: &str) -> Child {
    Command::new(gateway_bin())
        .args(["listen", "--from"])
        .arg(format!("http://127.0.0.1:{port}"))
        .args(["--route", "bench/default", "--to", target])
        .args(["--max", "100", "--concurrency", "64", "--json"])
        .args(["--token-env", "BENCH_PULL_TOKEN"])
        .env("BENCH_PULL_TOKEN", TOKEN)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("hookgate listen")
}

/// The pull route `bench/default`.
fn pull_source() -> String {
    format!(
        "[[sources]]\nname = \"bench\"\nprovider = \"stripe\"\nsecret = \"{SECRET}\"\n\
         destination = \"pull\"\npull_token_env = \"BENCH_PULL_TOKEN\"\n"
    )
}

/// Store the backlog on a pull route, then time one `hookgate listen` draining it
/// into the sink: seconds.
async fn pull_drain(s: Settings) -> f64 {
    let sink = start_sink(None, false).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let gw = gateway(dir.path(), &pull_source());
    ingest_backlog(
        gw.port,
        prepare(s.drain_entries, "pull", None),
        s.connections,
    )
    .await;
    assert_eq!(sink.received.load(Ordering::Relaxed), 0, "pushed");
    let start = Instant::now();
    let mut listen = listen(gw.port, &format!("http://127.0.0.1:{}/hook", sink.port));
    sink.wait_for(s.drain_entries, "pull drain").await;
    let secs = start.elapsed().as_secs_f64();
    // Every delivery acknowledged (the last acks follow the last sends).
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let acked = scrape(gw.admin)
            .await
            .lines()
            .filter(|l| l.starts_with("hookgate_pull_acked_total{"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>();
        if acked as usize >= s.drain_entries {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{acked} of {} acked",
            s.drain_entries
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let _ = listen.kill();
    let _ = listen.wait();
    secs
}

/// The RSS (MiB) of `gw` and its open descriptors of files in `data` (its
/// embedded store's database).
fn footprint(gw: &Proc, data: &std::path::Path) -> (f64, usize) {
    let pid = gw.child.id();
    let rss = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .unwrap_or(0.0)
        / 1024.0;
    let db = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|fds| {
            fds.filter_map(Result::ok)
                .filter_map(|fd| std::fs::read_link(fd.path()).ok())
                .filter(|p| p.starts_with(data))
                .count()
        })
        .unwrap_or(0);
    (rss, db)
}

/// 1,000 idle long polls: the gateway's RSS and database descriptors before and
/// while they wait.
async fn idle_polls(report: &mut Report) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut sources = String::new();
    for src in 0..IDLE_ROUTES.div_ceil(32) {
        sources.push_str(&format!(
            "[[sources]]\nname = \"idle{src}\"\nprovider = \"stripe\"\nsecret = \"{SECRET}\"\n"
        ));
        for r in 0..32.min(IDLE_ROUTES - src * 32) {
            sources.push_str(&format!(
                "[[sources.routes]]\nname = \"r{r}\"\ndestination = \"pull\"\npull_token_env = \"BENCH_PULL_TOKEN\"\n"
            ));
        }
    }
    let gw = gateway(dir.path(), &sources);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let data = dir.path().join("data");
    let before = footprint(&gw, &data);
    let clients: Vec<reqwest::Client> = (0..IDLE_CLIENTS)
        .map(|c| {
            let ip = std::net::Ipv4Addr::new(127, 0, 0, 2 + c as u8);
            reqwest::Client::builder()
                .local_address(std::net::IpAddr::V4(ip))
                .pool_max_idle_per_host(IDLE_POLLS)
                .build()
                .expect("client")
        })
        .collect();
    let mut polls = Vec::new();
    for n in 0..IDLE_POLLS {
        let route = n % IDLE_ROUTES;
        let url = format!(
            "http://127.0.0.1:{}/pull/idle{}/r{}",
            gw.port,
            route / 32,
            route % 32
        );
        let c = clients[n % IDLE_CLIENTS].clone();
        polls.push(tokio::spawn(async move {
            c.post(url)
                .bearer_auth(TOKEN)
                .json(&serde_json::json!({"wait": "30s"}))
                .send()
                .await
                .map(|r| r.status().as_u16())
        }));
    }
    // Every poll waiting (each is counted by the gateway before it waits).
    tokio::time::sleep(Duration::from_secs(5)).await;
    let during = footprint(&gw, &data);
    let done = polls.iter().filter(|p| p.is_finished()).count();
    report.add(format!(
        "pull, {IDLE_POLLS} idle long polls on {IDLE_ROUTES} routes (each its token, at most 16 each) from {IDLE_CLIENTS} client addresses, embedded store: RSS {:.1} MiB before, {:.1} MiB while they wait (+{:.1} MiB); database descriptors {} before, {} while they wait; {done} answered early (must be 0)",
        before.0,
        during.0,
        during.0 - before.0,
        before.1,
        during.1,
    ));
    for p in polls {
        p.abort();
    }
}

/// Ingest (64 connections in a closed loop for the duration) into a gateway that
/// delivers while it ingests: the pull route with one `hookgate listen` taking its
/// deliveries into the sink (`pull`), or the same source pushing them to the sink.
/// The rate of accepted webhooks.
async fn ingest_while(s: Settings, pull: bool) -> f64 {
    let sink = start_sink(None, false).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let target = format!("http://127.0.0.1:{}/hook", sink.port);
    let gw = if pull {
        gateway(dir.path(), &pull_source())
    } else {
        gateway(
            dir.path(),
            &format!(
                "[[sources]]\nname = \"bench\"\nprovider = \"stripe\"\nsecret = \"{SECRET}\"\n\
                 destination = \"{target}\"\n[sources.delivery]\nconcurrency = 64\n"
            ),
        )
    };
    let mut listen = pull.then(|| listen(gw.port, &target));
    let n = ((s.duration.as_secs_f64() * 40_000.0) as usize).max(2_000);
    let requests = std::sync::Arc::new(prepare(n, if pull { "ipull" } else { "ipush" }, None));
    let result = crate::load::closed_loop(
        crate::load::addr(gw.port),
        "/ingest/bench",
        requests,
        s.connections,
        s.duration,
        false,
    )
    .await;
    assert_eq!(result.errors, 0, "ingest refused requests");
    // Every accepted webhook reaches the sink (nothing lost on either path).
    sink.wait_for(result.requests as usize, "deliveries after the load")
        .await;
    if let Some(l) = listen.as_mut() {
        let _ = l.kill();
        let _ = l.wait();
    }
    result.rate()
}

pub async fn pull_drain_scenario(report: &mut Report, s: Settings) {
    let mut pulls = Vec::new();
    let mut pushes = Vec::new();
    for _ in 0..s.rounds {
        pulls.push(pull_drain(s).await);
        pushes.push(drain(s, 1, false, Store::Embedded, None).await.secs);
    }
    let (pull, push) = (median(pulls), median(pushes));
    let rate = |secs: f64| s.drain_entries as f64 / secs;
    report.add(format!(
        "pull drain, embedded: {} deliveries pulled by one `hookgate listen --max 100` into a hyper sink: {:.0}/s (median of {}); the same backlog pushed: {:.0}/s; pull/push = {:.2}×",
        s.drain_entries,
        rate(pull),
        s.rounds,
        rate(push),
        push / pull
    ));
    let mut pulling = Vec::new();
    let mut pushing = Vec::new();
    for _ in 0..s.rounds {
        pulling.push(ingest_while(s, true).await);
        pushing.push(ingest_while(s, false).await);
    }
    let (pulling, pushing) = (median(pulling), median(pushing));
    report.add(format!(
        "pull, ingest while delivering, embedded, {} connections for {:?}: {pulling:.0} webhooks/s while one `hookgate listen` pulls, {pushing:.0}/s while the gateway pushes (median of {}); pulling/pushing = {:.2}×",
        s.connections,
        s.duration,
        s.rounds,
        pulling / pushing
    ));
    idle_polls(report).await;
}
