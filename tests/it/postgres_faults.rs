//! The PostgreSQL store in trouble, on private servers the tests start and break:
//! frozen (`SIGSTOP`) or killed (`SIGKILL`, every process of the server) under
//! steady ingest, its disk full, and its promises unkept (`fsync = off`, no
//! synchronous standby while one is required). Ingest answers in time, `/readyz`
//! says so, and what was acknowledged is delivered once the server is back, with
//! no restart of the gateway. Two gateways on one database deliver each webhook
//! once.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use hookgate::config;
use hookgate::store::{self, StoreError, Unsafe};

use crate::forward::source;
use crate::support::*;
use crate::upstream::Upstream;

/// The `[store]` section of a gateway on `pg` (its own schema), with `timeout` and
/// more keys in `extra`.
fn store_section(pg: &PostgresServer, timeout: &str, extra: &str) -> String {
    format!(
        "[store]\nkind = \"postgres\"\nurl = \"{}\"\nprefix = \"{}\"\ntimeout = \"{timeout}\"\n{extra}",
        pg.url(),
        fresh_schema()
    )
}

/// A gateway process on `pg` delivering `stripe` to `up`, polling every 50 ms, its
/// maintenance (and so the store's checks) every 200 ms; with more `[store]` keys
/// in `extra`, ready or not when it returns (`ready`).
fn child_gateway(
    dir: &Path,
    pg: &PostgresServer,
    up: &Upstream,
    extra: &str,
    ready: bool,
) -> ChildGateway {
    let text = format!(
        "{}[forwarder]\npoll_interval = \"50ms\"\nmaintenance_interval = \"200ms\"\n{}",
        store_section(pg, "1s", extra),
        source(
            "stripe",
            &up.url,
            "[sources.retry]\nbase = \"100ms\"\ncap = \"500ms\"\n"
        )
    );
    let cfg = write_config(dir, &text);
    let log = dir.join("stderr.log");
    match ready {
        true => ChildGateway::spawn(&cfg, &[("RUST_LOG", "info")], &log),
        false => ChildGateway::spawn_unready(&cfg, &[("RUST_LOG", "info")], &log),
    }
}

/// The status `/readyz` answers.
async fn readyz(c: &reqwest::Client, admin: &str) -> u16 {
    match c.get(format!("{admin}/readyz")).send().await {
        Ok(r) => r.status().as_u16(),
        Err(_) => 0,
    }
}

/// What the server goes through in [`in_trouble`].
#[derive(Debug, Clone, Copy)]
enum Trouble {
    /// Every process stopped (`SIGSTOP`), then continued.
    Frozen,
    /// Every process killed (`SIGKILL`), then the server started again (crash
    /// recovery).
    Killed,
}

/// 50 webhooks a second for at least 10 s; the server in `trouble` from the 1st
/// second until it accepts sessions again after the 6th (a crash recovery takes as
/// long as it takes on a loaded machine: sending goes on until 3.5 s after it is
/// back). Every answer, 200 or 503, comes within `store.timeout` (1 s) plus half a
/// second; 503s during the trouble and `/readyz` 503; 200s from 1.5 s after the
/// server is back and `/readyz` 200, without a restart of the gateway; every
/// webhook answered 200 is delivered.
async fn in_trouble(trouble: Trouble) {
    let _alone = TIMED_ALONE.lock().await;
    let pg = PostgresServer::start();
    let up = Upstream::ok().await;
    let dir = tempfile::tempdir().unwrap();
    let mut gw = child_gateway(dir.path(), &pg, &up, "", true);
    // The server is started again on a thread of its own: webhooks keep coming
    // while it recovers, as they would from a provider.
    let mut pg = Some(pg);
    let mut restarting = None;
    let c = http_builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    assert_eq!(readyz(&c, &gw.admin).await, 200);
    let started = Instant::now();
    let mut sent = Vec::new();
    let (mut broken, mut mended) = (false, false);
    let mut readyz_during = None;
    // When the server accepts sessions again, since `started`.
    let back: Arc<OnceLock<Duration>> = Arc::default();
    for n in 0u32.. {
        let at = Duration::from_millis(20 * u64::from(n));
        let done = match back.get() {
            Some(b) => n >= 500 && at >= *b + Duration::from_millis(3500),
            None => false,
        };
        if done {
            break;
        }
        if let Some(wait) = at.checked_sub(started.elapsed()) {
            tokio::time::sleep(wait).await;
        }
        if !broken && at >= Duration::from_secs(1) {
            let pg = pg.as_mut().expect("the server");
            match trouble {
                Trouble::Frozen => pg.freeze(),
                Trouble::Killed => pg.kill_all(),
            }
            broken = true;
        }
        if readyz_during.is_none() && at >= Duration::from_secs(4) {
            let (c, admin) = (c.clone(), gw.admin.clone());
            readyz_during = Some(tokio::spawn(async move {
                let t = Instant::now();
                (readyz(&c, &admin).await, t.elapsed())
            }));
        }
        if !mended && at >= Duration::from_secs(6) {
            let mut server = pg.take().expect("the server");
            let back = back.clone();
            restarting = Some(tokio::task::spawn_blocking(move || {
                match trouble {
                    Trouble::Frozen => server.thaw(),
                    Trouble::Killed => server.restart(),
                }
                let _ = back.set(started.elapsed());
                server
            }));
            mended = true;
        }
        let c = c.clone();
        let base = gw.ingest.clone();
        sent.push(tokio::spawn(async move {
            let t = Instant::now();
            let event = format!("evt_trouble{n}");
            let (status, json) = post_stripe(&c, &base, &event).await;
            (
                at,
                status,
                json["id"].as_str().map(String::from),
                t.elapsed(),
            )
        }));
    }
    let _pg = restarting.expect("mended").await.unwrap();
    let settled = *back.get().expect("back") + Duration::from_millis(1500);
    let mut late = Vec::new();
    let mut acked = Vec::new();
    let (mut refused, mut ok_after) = (0, 0);
    for task in sent {
        let (at, status, id, took) = task.await.unwrap();
        match status {
            200 => {
                acked.push(id.expect("an entry id"));
                if at >= settled {
                    ok_after += 1;
                }
            }
            503 => refused += 1,
            other => panic!("webhook sent at {at:?}: {other}"),
        }
        if took > Duration::from_millis(1500) {
            late.push((at, status, took));
        }
    }
    let (during, took) = readyz_during.expect("probed").await.unwrap();
    let log = std::fs::read_to_string(dir.path().join("stderr.log")).unwrap_or_default();
    assert!(
        late.is_empty(),
        "{trouble:?}: {} answers later than 1.5 s: {:?}\n{log}",
        late.len(),
        late.iter().take(20).collect::<Vec<_>>()
    );
    assert_eq!(during, 503, "{trouble:?}: /readyz while the server is down");
    assert!(took < Duration::from_millis(1500), "/readyz took {took:?}");
    assert!(
        refused > 100,
        "{trouble:?}: {refused} 503s while it was down"
    );
    assert!(
        ok_after > 50,
        "{trouble:?}: {ok_after} 200s from 1.5 s after it came back (at {:?})\n{log}",
        back.get()
    );
    wait_until("/readyz 200 again", Duration::from_secs(10), async || {
        readyz(&c, &gw.admin).await == 200
    })
    .await;
    // Nothing acknowledged is lost: each is delivered.
    let want: BTreeSet<String> = acked.into_iter().collect();
    up.wait_for(Duration::from_secs(30), "every acknowledged webhook", |r| {
        let got: BTreeSet<String> = r.iter().filter_map(|x| x.header("webhook-id")).collect();
        want.is_subset(&got)
    })
    .await;
    gw.kill();
}

/// Timed against a bound: the test command runs these alone, one at a time (see
/// `scripts/test`), since on two cores a neighbour's load moves the timings.
mod alone {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_frozen_postgres_answers_503_in_time_and_recovers_without_a_restart() {
        in_trouble(Trouble::Frozen).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_killed_postgres_answers_503_in_time_and_recovers_without_a_restart() {
        in_trouble(Trouble::Killed).await;
    }
}

/// Two gateways on one database, each taking half of 400 webhooks and both
/// delivering: every webhook arrives once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_gateways_on_one_database_deliver_each_webhook_once() {
    let pg = shared();
    let up = Upstream::ok().await;
    let text = format!(
        "{}[forwarder]\npoll_interval = \"50ms\"\n{}",
        store_section(pg, "5s", ""),
        source("stripe", &up.url, "")
    );
    let one = Gateway::start(config::from_toml_str(&text, &|_| None).unwrap()).await;
    let two = Gateway::start(config::from_toml_str(&text, &|_| None).unwrap()).await;
    let c = http();
    let mut tasks = Vec::new();
    for n in 0..400 {
        let (c, base) = (
            c.clone(),
            match n % 2 {
                0 => one.ingest.clone(),
                _ => two.ingest.clone(),
            },
        );
        tasks.push(tokio::spawn(async move {
            let (st, json) = post_stripe(&c, &base, &format!("evt_two{n}")).await;
            assert_eq!(st, 200, "{json}");
        }));
        if tasks.len() == 16 {
            for t in tasks.drain(..) {
                t.await.unwrap();
            }
        }
    }
    for t in tasks {
        t.await.unwrap();
    }
    up.wait_for(Duration::from_secs(30), "400 deliveries", |r| {
        r.len() >= 400
    })
    .await;
    quiet_for(
        "no delivery after the 400th",
        Duration::from_secs(1),
        async || up.count() == 400,
    )
    .await;
    let mut seen: HashMap<String, usize> = HashMap::new();
    for id in up.webhook_ids(None) {
        *seen.entry(id).or_default() += 1;
    }
    let twice: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "delivered more than once: {twice:?}");
    assert_eq!(seen.len(), 400);
    one.stop().await;
    two.stop().await;
}

/// A server that runs with `fsync = off` loses committed webhooks when its machine
/// crashes: the store is refused at open, with the reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_without_fsync_is_refused_at_open() {
    let pg = PostgresServer::start_in(None, &["fsync=off"]);
    let cfg = config::from_toml_str(&store_section(&pg, "2s", ""), &|_| None).unwrap();
    let opened = store::open(&cfg.store, &hookgate::clock::Clock::system()).await;
    match opened {
        Err(StoreError::Unsafe(Unsafe::FsyncOff)) => {}
        Err(e) => panic!("refused for another reason: {e}"),
        Ok(_) => panic!("a server without fsync was accepted"),
    }
}

/// `store.require_sync_standby = true` on a server with no synchronous standby: the
/// gateway starts, but answers webhooks 503 and `/readyz` 503, and says why in its
/// log; once a standby streams synchronously, both answer 200 without a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_its_synchronous_standby_the_gateway_refuses_webhooks_until_one_streams() {
    let pg = PostgresServer::start();
    // The standbys' state is shown to the monitoring role.
    let (ok, out) = pg.psql("GRANT pg_monitor TO hookgate");
    assert!(ok, "{out}");
    let up = Upstream::ok().await;
    let dir = tempfile::tempdir().unwrap();
    let mut gw = child_gateway(dir.path(), &pg, &up, "require_sync_standby = true\n", false);
    let c = http();
    assert_eq!(readyz(&c, &gw.admin).await, 503);
    let (st, _) = post_stripe(&c, &gw.ingest, "evt_nostandby").await;
    assert_eq!(st, 503, "refused without a synchronous standby");
    let log = std::fs::read_to_string(dir.path().join("stderr.log")).unwrap();
    assert!(
        log.contains("no synchronous standby confirms commits"),
        "the log says why:\n{log}"
    );
    let standby = pg.start_standby();
    pg.require_sync_standby();
    wait_until(
        "/readyz 200 once the standby streams",
        Duration::from_secs(10),
        async || readyz(&c, &gw.admin).await == 200,
    )
    .await;
    let (st, json) = post_stripe(&c, &gw.ingest, "evt_nostandby").await;
    assert_eq!(st, 200, "{json}");
    up.wait_for(Duration::from_secs(10), "the delivery", |r| r.len() == 1)
        .await;
    gw.kill();
    drop(standby);
}

/// Bytes free on the filesystem holding `path`.
fn free_bytes(path: &Path) -> u64 {
    let out = std::process::Command::new("df")
        .args(["--output=avail", "-B1"])
        .arg(path)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .nth(1)
        .and_then(|l| l.trim().parse().ok())
        .expect("df")
}

/// The database's disk fills up (a small tmpfs the test mounts, its space taken by
/// a file but for 3 MiB): webhooks are answered 503, never 200 for one not stored,
/// `/readyz` 503, and the gateway keeps running; once space returns, ingest and
/// `/readyz` answer 200 again without a restart, and every acknowledged webhook is
/// delivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_under_postgres_answers_503_and_recovers() {
    let fs = crate::faults::Tmpfs::mount(192 * 1024 * 1024);
    let pg = PostgresServer::start_in(
        Some(fs.dir.path()),
        &["min_wal_size=32MB", "max_wal_size=64MB"],
    );
    let up = Upstream::ok().await;
    let dir = tempfile::tempdir().unwrap();
    let mut gw = child_gateway(dir.path(), &pg, &up, "", true);
    let filler = fs.dir.path().join("filler");
    let free = free_bytes(fs.dir.path());
    std::fs::write(&filler, vec![0u8; (free - 3 * 1024 * 1024) as usize]).unwrap();
    let c = http();
    // Bodies that do not compress: each takes its size on disk.
    let post = |n: usize| {
        let (c, base) = (c.clone(), gw.ingest.clone());
        async move {
            let mut pad = vec![0u8; 36 * 1024];
            getrandom::fill(&mut pad).unwrap();
            let body = format!(
                r#"{{"id":"evt_full{n}","object":"event","type":"t","pad":"{}"}}"#,
                base64::Engine::encode(&base64::engine::general_purpose::STANDARD, &pad)
            );
            let (status, json) = post_stripe_signed(&c, &base, "stripe", body.as_bytes()).await;
            (status, json["id"].as_str().map(String::from))
        }
    };
    let (mut acked, mut refused, mut n) = (Vec::new(), 0, 0);
    while refused < 3 && n < 400 {
        match post(n).await {
            (200, id) => acked.push(id.expect("an id")),
            (503, _) => refused += 1,
            (other, _) => panic!("webhook {n}: {other}"),
        }
        n += 1;
    }
    assert_eq!(refused, 3, "the disk never filled up ({n} webhooks)");
    assert!(gw.child.try_wait().unwrap().is_none(), "the gateway exited");
    assert_eq!(readyz(&c, &gw.admin).await, 503);
    std::fs::remove_file(&filler).unwrap();
    let id = wait_until_ok(
        "ingest resumes once space returned",
        Duration::from_secs(30),
        async || {
            n += 1;
            match post(n).await {
                (200, id) => Ok(id.expect("an id")),
                (other, _) => Err(other),
            }
        },
    )
    .await;
    acked.push(id);
    wait_until(
        "/readyz 200 once space returned",
        Duration::from_secs(15),
        async || readyz(&c, &gw.admin).await == 200,
    )
    .await;
    let want: BTreeSet<String> = acked.into_iter().collect();
    up.wait_for(Duration::from_secs(30), "every acknowledged webhook", |r| {
        let got: BTreeSet<String> = r.iter().filter_map(|x| x.header("webhook-id")).collect();
        want.is_subset(&got)
    })
    .await;
    gw.kill();
    drop(pg);
}
