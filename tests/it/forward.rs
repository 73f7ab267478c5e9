//! The forwarder against a scripted upstream: at-least-once delivery, retries with
//! jitter, the budget, the DLQ, isolation, the breaker, retention, crashes and Redis
//! restarts. Every test runs on both stores unless it is about Redis.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use hookgate::config::{self, Config};
use hookgate::provider::Registry;
use hookgate::store::Status;

use crate::for_each_store;
use crate::support::*;
use crate::upstream::{Reply, Upstream, reached};

pub const FAST: &str = r#"
[forwarder]
poll_interval = "50ms"
maintenance_interval = "200ms"
lease = "15s"
shutdown_grace = "2s"
breaker_failures = 100000
breaker_cooldown = "1s"
"#;

pub const DEST_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// A stripe-provider source named `name` delivering to `destination`.
pub fn source(name: &str, destination: &str, extra: &str) -> String {
    format!(
        "[[sources]]\nname = \"{name}\"\nprovider = \"stripe\"\nsecret = \"{STRIPE_SECRET}\"\n\
         destination = \"{destination}\"\ndestination_secret = \"{DEST_SECRET}\"\n{extra}\n"
    )
}

pub const FAST_RETRY: &str = "[sources.retry]\nbase = \"100ms\"\ncap = \"1s\"\n";

pub fn fwd_config(h: &StoreHandle, global: &str, sources: &str) -> Config {
    let text = format!("{}\n{FAST}\n{global}\n{sources}", h.toml());
    config::from_toml_str(&text, &|_| None).expect("config")
}

/// Ingest `n` distinct events into `source`; returns entry ids by event id.
pub async fn ingest_many(
    base: &str,
    source: &str,
    prefix: &str,
    n: usize,
) -> HashMap<String, String> {
    let client = crate::support::http();
    let mut tasks = Vec::new();
    let per = n.div_ceil(16);
    for w in 0..16 {
        let client = client.clone();
        let base = base.to_string();
        let source = source.to_string();
        let prefix = prefix.to_string();
        tasks.push(tokio::spawn(async move {
            let mut out = Vec::new();
            for i in (w * per)..((w + 1) * per).min(n) {
                let event = format!("{prefix}_{i}");
                let body = event_body("stripe", &event);
                let (st, json) = post_stripe_signed(&client, &base, &source, &body).await;
                assert_eq!(st, 200, "{json}");
                out.push((event, json["id"].as_str().unwrap().to_string()));
            }
            out
        }));
    }
    let mut ids = HashMap::new();
    for t in tasks {
        ids.extend(t.await.unwrap());
    }
    ids
}

async fn wait_status(h: &StoreHandle, source: &str, status: Status, n: u64, timeout: Duration) {
    let store = h.open().await;
    wait_until_ok(
        &format!("{n} entries of {source} {status:?}"),
        timeout,
        async || match store.count_status(source, status).await.unwrap() {
            got if got >= n => Ok(()),
            got => Err(format!("{got} of them")),
        },
    )
    .await;
}

/// `n` deliveries reach `up`, `n` entries of `source` are delivered in the store, and
/// no further delivery follows within `quiet`: each entry is delivered exactly once.
async fn delivered_exactly_once(
    up: &Upstream,
    h: &StoreHandle,
    source: &str,
    n: usize,
    quiet: Duration,
) {
    up.wait_for(Duration::from_secs(60), &format!("{n} deliveries"), |r| {
        r.len() >= n
    })
    .await;
    wait_status(
        h,
        source,
        Status::Delivered,
        n as u64,
        Duration::from_secs(20),
    )
    .await;
    quiet_for("each entry delivered exactly once", quiet, async || {
        up.count() == n
    })
    .await;
}

async fn healthy(backend: Backend) {
    let h = StoreHandle::new(backend);
    let up = Upstream::ok().await;
    let cfg = fwd_config(&h, "", &source("stripe", &format!("{}/hook", up.url), ""));
    let quiet = quiet_window(&cfg);
    let gw = Gateway::start(cfg).await;
    let ids = ingest_many(&gw.ingest, "stripe", "evt_ok", 1000).await;
    delivered_exactly_once(&up, &h, "stripe", 1000, quiet).await;
    let received = up.received();
    let mut seen = std::collections::HashSet::new();
    let by_entry: HashMap<&str, &str> = ids.iter().map(|(e, i)| (i.as_str(), e.as_str())).collect();
    // The destination verifies hookgate's signature with the Standard Webhooks scheme.
    let reg = Registry::builtin().unwrap();
    let sw = hookgate::provider::Verifier::new(
        reg.get("standard-webhooks").unwrap().clone(),
        &[hookgate::config::Secret::new(DEST_SECRET)],
    )
    .unwrap();
    for r in &received {
        let id = r.header("webhook-id").unwrap();
        assert!(seen.insert(id.clone()), "{id} delivered twice");
        let event = by_entry[id.as_str()];
        assert_eq!(
            r.body.as_ref(),
            event_body("stripe", event).as_slice(),
            "original bytes"
        );
        assert_eq!(r.header("hookgate-source").as_deref(), Some("stripe"));
        assert_eq!(r.header("hookgate-attempt").as_deref(), Some("1"));
        assert_eq!(r.header("hookgate-event-id").as_deref(), Some(event));
        assert_eq!(
            r.header("hookgate-event-type").as_deref(),
            Some("payment_intent.succeeded")
        );
        assert_eq!(
            r.header("content-type").as_deref(),
            Some("application/json")
        );
        // The provider's own signature is passed through for legacy consumers.
        assert!(r.header("stripe-signature").unwrap().starts_with("t="));
        let ts: i64 = r.header("webhook-timestamp").unwrap().parse().unwrap();
        assert!((ts - now_secs()).abs() < 120);
        let req = hookgate::provider::Request {
            method: "POST",
            path: "/hook",
            url: None,
            headers: &r.headers,
            body: &r.body,
        };
        sw.verify(req, now_secs())
            .unwrap_or_else(|e| panic!("webhook-signature does not verify: {e}"));
    }
    gw.stop().await;
}
for_each_store!(
    healthy_upstream_gets_each_entry_exactly_once,
    super::healthy
);

async fn outage_then_recovery(backend: Backend) {
    let h = StoreHandle::new(backend);
    let (up, fixed) = Upstream::failing_until_fixed(503).await;
    let retry = "[sources.retry]\nbase = \"1s\"\ncap = \"8s\"\nmax_attempts = 30\n";
    let cfg = fwd_config(&h, "", &source("stripe", &up.url, retry));
    let gw = Gateway::start(cfg).await;
    let n = 300;
    ingest_many(&gw.ingest, "stripe", "evt_outage", n).await;
    // The outage lasts until every entry has failed three times: each then waits up to
    // 4 s (full jitter over base·2²) for its next attempt.
    up.wait_for(
        Duration::from_secs(30),
        "every entry to fail three times",
        |r| {
            let mut failures: HashMap<String, usize> = HashMap::new();
            for id in r.iter().filter_map(|x| x.header("webhook-id")) {
                *failures.entry(id).or_default() += 1;
            }
            failures.len() == n && failures.values().all(|&f| f >= 3)
        },
    )
    .await;
    let recovered_at = Instant::now();
    fixed.store(true, Ordering::SeqCst);
    up.wait_for(Duration::from_secs(60), "every entry delivered", |r| {
        r.iter().filter(|x| x.answered == 200).count() >= n
    })
    .await;
    wait_status(
        &h,
        "stripe",
        Status::Delivered,
        n as u64,
        Duration::from_secs(20),
    )
    .await;
    let store = h.open().await;
    assert_eq!(store.count_status("stripe", Status::Dead).await.unwrap(), 0);
    // Jitter spreads the retries at recovery: the largest one-second burst of
    // successful deliveries stays well below the entry count.
    let mut buckets: HashMap<u64, usize> = HashMap::new();
    for r in up.received().iter().filter(|r| r.answered == 200) {
        let t = r.at.saturating_duration_since(recovered_at).as_secs();
        *buckets.entry(t).or_default() += 1;
    }
    let max = buckets.values().copied().max().unwrap_or(0);
    let failures = up.received().iter().filter(|r| r.answered == 503).count();
    eprintln!(
        "{backend:?}: {n} entries, {failures} failed attempts during the outage; largest 1 s burst at recovery: {max} ({:.0}% of entries); spread over {} s",
        100.0 * max as f64 / n as f64,
        buckets.len()
    );
    assert!(
        max < n / 2,
        "largest 1 s burst {max} of {n}: jitter does not spread"
    );
    let delivered = up.webhook_ids(Some(200));
    let unique: std::collections::HashSet<_> = delivered.iter().collect();
    assert_eq!(unique.len(), n);
    gw.stop().await;
}
for_each_store!(
    outage_then_recovery_delivers_all_spread_by_jitter,
    super::outage_then_recovery
);

async fn non_retryable(backend: Backend) {
    let h = StoreHandle::new(backend);
    let mut ups = Vec::new();
    let mut sources = String::new();
    for code in [400u16, 401, 404, 422, 301] {
        let up = Upstream::scripted(move |_, _| {
            if code == 301 {
                Reply::StatusWith(301, vec![("location", "http://127.0.0.1:9/".into())])
            } else {
                Reply::Status(code)
            }
        })
        .await;
        sources.push_str(&source(&format!("s{code}"), &up.url, FAST_RETRY));
        ups.push((code, up));
    }
    let up429 = Upstream::scripted(|_, n| {
        if n == 0 {
            Reply::StatusWith(429, vec![("retry-after", "2".into())])
        } else {
            Reply::Status(200)
        }
    })
    .await;
    // Retry-After is bounded by the cap: give it room.
    sources.push_str(&source(
        "s429",
        &up429.url,
        "[sources.retry]\nbase = \"100ms\"\ncap = \"10s\"\n",
    ));
    let cfg = fwd_config(&h, "", &sources);
    let quiet = quiet_window(&cfg);
    let gw = Gateway::start(cfg).await;
    let store = h.open().await;
    for (code, up) in &ups {
        let ids = ingest_many(&gw.ingest, &format!("s{code}"), "evt_nr", 1).await;
        let id = ids.values().next().unwrap().clone();
        wait_status(
            &h,
            &format!("s{code}"),
            Status::Dead,
            1,
            Duration::from_secs(10),
        )
        .await;
        quiet_for(&format!("{code}: exactly one attempt"), quiet, async || {
            up.count() == 1
        })
        .await;
        let e = store.get(&id).await.unwrap().unwrap();
        assert_eq!(e.status, Status::Dead);
        assert_eq!(e.attempts, 1);
        assert!(
            e.last_error
                .as_deref()
                .unwrap()
                .contains(&format!("HTTP {code}")),
            "{code}: {:?}",
            e.last_error
        );
        let attempts = store.attempts(&id).await.unwrap();
        assert_eq!(attempts.len(), 1);
        assert_eq!(attempts[0].status_code, Some(*code));
    }
    ingest_many(&gw.ingest, "s429", "evt_429", 1).await;
    up429
        .wait_for(Duration::from_secs(10), "the retry after 429", |r| {
            r.len() >= 2
        })
        .await;
    let r = up429.received();
    let gap = r[1].at.duration_since(r[0].at);
    assert!(
        gap >= Duration::from_millis(1900),
        "Retry-After: 2 honoured, got {gap:?}"
    );
    wait_status(&h, "s429", Status::Delivered, 1, Duration::from_secs(5)).await;
    gw.stop().await;
}
for_each_store!(
    non_retryable_answers_go_dead_after_one_attempt,
    super::non_retryable
);

async fn budget(backend: Backend) {
    let h = StoreHandle::new(backend);
    let up_a = Upstream::scripted(|_, _| Reply::Status(500)).await;
    let up_b = Upstream::scripted(|_, _| Reply::Status(502)).await;
    let sources = format!(
        "{}{}",
        source(
            "attempts",
            &up_a.url,
            "[sources.retry]\nmax_attempts = 3\nbase = \"100ms\"\ncap = \"200ms\"\n"
        ),
        source(
            "age",
            &up_b.url,
            "[sources.retry]\nmax_attempts = 1000\nmax_age = \"2s\"\nbase = \"100ms\"\ncap = \"300ms\"\n"
        ),
    );
    let cfg = fwd_config(&h, "", &sources);
    let quiet = quiet_window(&cfg);
    let gw = Gateway::start(cfg).await;
    let store = h.open().await;
    let a = ingest_many(&gw.ingest, "attempts", "evt_budget", 1).await;
    let b = ingest_many(&gw.ingest, "age", "evt_age", 1).await;
    wait_status(&h, "attempts", Status::Dead, 1, Duration::from_secs(10)).await;
    wait_status(&h, "age", Status::Dead, 1, Duration::from_secs(10)).await;
    // (An attempt reaches the destination before its outcome is recorded.)
    assert_eq!(up_a.count(), 3, "exactly max_attempts attempts");
    let e = store
        .get(a.values().next().unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(e.attempts, 3);
    let err = e.last_error.unwrap();
    assert!(
        err.contains("3 attempts") && err.contains("HTTP 500"),
        "{err}"
    );
    let e = store
        .get(b.values().next().unwrap())
        .await
        .unwrap()
        .unwrap();
    let err = e.last_error.unwrap();
    assert!(
        err.contains("older than") && err.contains("HTTP 502"),
        "{err}"
    );
    assert!(
        e.attempts >= 3,
        "retried until the age budget ran out: {}",
        e.attempts
    );
    let n = up_b.count();
    quiet_for("no attempt after dead", quiet, async || {
        up_a.count() == 3 && up_b.count() == n
    })
    .await;
    gw.stop().await;
}
for_each_store!(budget_of_attempts_and_age, super::budget);

async fn hanging_destination(backend: Backend) {
    let h = StoreHandle::new(backend);
    let hang = Upstream::scripted(|_, _| Reply::Hang).await;
    let ok = Upstream::ok().await;
    let slow_src = "[sources.retry]\nbase = \"100ms\"\ncap = \"200ms\"\nmax_attempts = 100\n[sources.delivery]\ntimeout = \"500ms\"\nconcurrency = 4\n";
    let sources = format!(
        "{}{}",
        source("hang", &hang.url, slow_src),
        source("ok", &ok.url, FAST_RETRY)
    );
    let gw = Gateway::start(fwd_config(&h, "", &sources)).await;
    ingest_many(&gw.ingest, "hang", "evt_hang", 50).await;
    ingest_many(&gw.ingest, "ok", "evt_fine", 200).await;
    ok.wait_for(
        Duration::from_secs(20),
        "the healthy source's deliveries",
        |r| r.len() >= 200,
    )
    .await;
    // Meanwhile attempts to the hanging destination time out, as retryable.
    let store = h.open().await;
    wait_until(
        "an attempt to the hanging destination to time out",
        Duration::from_secs(10),
        async || {
            let page = first_page_of_source(&*store, "hang", 50).await;
            page.entries
                .iter()
                .any(|e| e.last_error.as_deref() == Some("timeout after 500ms"))
        },
    )
    .await;
    assert_eq!(
        store.count_status("hang", Status::Pending).await.unwrap(),
        50
    );
    gw.stop().await;
}
for_each_store!(
    a_hanging_destination_does_not_starve_others,
    super::hanging_destination
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_gateway_processes_on_one_redis_deliver_each_entry_once() {
    let h = StoreHandle::new(Backend::Redis);
    let up = Upstream::ok().await;
    let dir = tempfile::tempdir().unwrap();
    let text = format!("{}\n{FAST}\n{}", h.toml(), source("stripe", &up.url, ""));
    let quiet = quiet_window(&config::from_toml_str(&text, &|_| None).unwrap());
    let cfg_path = write_config(dir.path(), &text);
    let gw1 = ChildGateway::spawn(&cfg_path, &[], &dir.path().join("log1"));
    let gw2 = ChildGateway::spawn(&cfg_path, &[], &dir.path().join("log2"));
    let (a, b) = tokio::join!(
        ingest_many(&gw1.ingest, "stripe", "evt_g1", 1000),
        ingest_many(&gw2.ingest, "stripe", "evt_g2", 1000)
    );
    assert_eq!(a.len() + b.len(), 2000);
    delivered_exactly_once(&up, &h, "stripe", 2000, quiet).await;
    let ids = up.webhook_ids(None);
    let unique: std::collections::HashSet<_> = ids.iter().collect();
    assert_eq!(ids.len(), 2000, "each entry delivered exactly once");
    assert_eq!(unique.len(), 2000);
    // Both processes took part.
    let l1 = std::fs::read_to_string(dir.path().join("log1")).unwrap();
    let l2 = std::fs::read_to_string(dir.path().join("log2")).unwrap();
    assert!(
        l1.contains("delivery") && l2.contains("delivery"),
        "one process did all the work"
    );
}

async fn graceful_shutdown(backend: Backend) {
    let h = StoreHandle::new(backend);
    let slow = Upstream::scripted(|_, _| Reply::Slow(200, Duration::from_secs(3))).await;
    let text = format!(
        "{}\n[forwarder]\npoll_interval = \"50ms\"\nlease = \"30s\"\nshutdown_grace = \"500ms\"\n{}",
        h.toml(),
        source("stripe", &slow.url, "[sources.delivery]\nconcurrency = 4\n")
    );
    let cfg = config::from_toml_str(&text, &|_| None).unwrap();
    let gw = Gateway::start(cfg).await;
    let ids = ingest_many(&gw.ingest, "stripe", "evt_drain", 10).await;
    slow.wait_for(Duration::from_secs(5), "deliveries in flight", |r| {
        r.len() >= 4
    })
    .await;
    let stopping = Instant::now();
    gw.stop().await;
    assert!(
        stopping.elapsed() < Duration::from_secs(8),
        "shutdown is bounded"
    );
    // What did not finish gave its lease back: a new gateway delivers everything at
    // once, without waiting for the 30 s lease to expire.
    let ok = Upstream::ok().await;
    let text = format!(
        "{}\n[forwarder]\npoll_interval = \"50ms\"\nlease = \"30s\"\n{}",
        h.toml(),
        source("stripe", &ok.url, "")
    );
    let gw = Gateway::start(config::from_toml_str(&text, &|_| None).unwrap()).await;
    ok.wait_for(
        Duration::from_secs(10),
        "the rest delivered without waiting for leases",
        |r| reached(r, ids.values()),
    )
    .await;
    // The app has them; the gateway records each attempt once the answer is in.
    wait_status(
        &h,
        "stripe",
        Status::Delivered,
        ids.len() as u64,
        Duration::from_secs(10),
    )
    .await;
    let store = h.open().await;
    for id in ids.values() {
        let attempts = store.attempts(id).await.unwrap();
        assert!(!attempts.is_empty());
        // A released delivery burns no attempt: at most one recorded before success.
        assert!(attempts.len() <= 2, "{attempts:?}");
    }
    gw.stop().await;
}
for_each_store!(
    graceful_shutdown_releases_unfinished_leases,
    super::graceful_shutdown
);

async fn retention(backend: Backend) {
    let h = StoreHandle::new(backend);
    let ok = Upstream::ok().await;
    let gone = Upstream::scripted(|_, _| Reply::Status(410)).await;
    let global = "[retention]\ndelivered = \"1s\"\ndead = \"2s\"\n";
    let sources = format!(
        "{}{}{}{}",
        source("ok", &ok.url, ""),
        source("gone", &gone.url, ""),
        source("held", &ok.url, ""),
        source("live", &ok.url, ""),
    );
    // Paused before the gateway starts: its forwarder reads the pause at start.
    let store = h.open().await;
    store.set_paused("held", None, true).await.unwrap();
    let gw = Gateway::start(fwd_config(&h, global, &sources)).await;
    let held = ingest_many(&gw.ingest, "held", "evt_held", 20).await;
    let oks = ingest_many(&gw.ingest, "ok", "evt_ret", 50).await;
    let gones = ingest_many(&gw.ingest, "gone", "evt_gone", 20).await;
    // Every entry reaches its destination. (Counted at the destinations, not in the
    // store: retention purges a delivered entry a second after it ends, so on a
    // loaded machine the first ones may be gone before the last ones arrive.)
    for (up, ids) in [(&ok, &oks), (&gone, &gones)] {
        up.wait_for(Duration::from_secs(30), "every entry attempted", |r| {
            let got: std::collections::HashSet<String> =
                r.iter().filter_map(|x| x.header("webhook-id")).collect();
            ids.values().all(|id| got.contains(id))
        })
        .await;
    }
    // Ingest keeps answering while retention runs.
    let mut i = 0;
    wait_until_ok(
        "retention to purge ok and gone",
        Duration::from_secs(15),
        async || {
            // (ingest_many asserts every answer is 200)
            ingest_many(&gw.ingest, "live", &format!("evt_during_{i}"), 1).await;
            i += 1;
            let ok_left = store.count("ok").await.unwrap();
            let gone_left = store.count("gone").await.unwrap();
            if gone_left == 0 && ok_left == 0 {
                Ok(())
            } else {
                Err(format!("ok {ok_left}, gone {gone_left} left"))
            }
        },
    )
    .await;
    // Pending entries are never purged.
    assert_eq!(store.count("held").await.unwrap(), 20);
    for id in held.values() {
        assert_eq!(
            store.get(id).await.unwrap().unwrap().status,
            Status::Pending
        );
    }
    gw.stop().await;
}
for_each_store!(
    retention_purges_delivered_and_dead_never_pending,
    super::retention
);

async fn breaker(backend: Backend) {
    let h = StoreHandle::new(backend);
    let up = Upstream::ok().await;
    let port = up.port;
    up.stop();
    drop(up);
    let text = format!(
        "{}\n[forwarder]\npoll_interval = \"50ms\"\nmaintenance_interval = \"200ms\"\nlease = \"15s\"\n\
         breaker_failures = 3\nbreaker_cooldown = \"1s\"\n{}",
        h.toml(),
        source(
            "stripe",
            &format!("http://127.0.0.1:{port}"),
            "[sources.retry]\nbase = \"50ms\"\ncap = \"100ms\"\nmax_attempts = 1000\n"
        )
    );
    let cfg = config::from_toml_str(&text, &|_| None).unwrap();
    let cooldown = cfg.forwarder.breaker_cooldown;
    let gw = Gateway::start(cfg).await;
    let ids = ingest_many(&gw.ingest, "stripe", "evt_breaker", 20).await;
    let store = h.open().await;
    let total_attempts = || async {
        let page = first_page_of_source(&*store, "stripe", 100).await;
        page.entries.iter().map(|e| e.attempts).sum::<u32>()
    };
    // The breaker opens after failures: its gauge says so.
    let client = http();
    let metrics = format!("{}/metrics", gw.admin);
    let gauge =
        format!("hookgate_circuit_breaker_state{{destination=\"http://127.0.0.1:{port}\"}}");
    wait_until(
        "the breaker to open after failures",
        Duration::from_secs(10),
        async || {
            let open = get_text(&client, &metrics)
                .await
                .lines()
                .filter_map(|l| l.strip_prefix(gauge.as_str()))
                .any(|v| v.trim().parse::<f64>() == Ok(2.0));
            open && total_attempts().await >= 3
        },
    )
    .await;
    let opened = hookgate::clock::system_now_ms();
    let a1 = total_attempts().await;
    // While it is open, only probes go out: one per cooldown, which doubles after each
    // failed probe. Attempts sent before it opened (and recorded since) are stamped
    // before `opened`.
    let sent_since_open = async || {
        let mut n = 0;
        for id in ids.values() {
            let attempts = store.attempts(id).await.unwrap();
            n += attempts.iter().filter(|a| a.at > opened).count();
        }
        n
    };
    quiet_for(
        "attempts stop growing while the breaker is open",
        2 * cooldown,
        async || sent_since_open().await <= 4,
    )
    .await;
    eprintln!(
        "{backend:?}: {a1} attempts when the breaker opened; {} sent in the {:?} after",
        sent_since_open().await,
        2 * cooldown
    );
    // The destination comes back: delivery resumes by itself.
    let up = Upstream::on_port(port, |_, _| Reply::Status(200)).await;
    up.wait_for(Duration::from_secs(20), "deliveries after recovery", |r| {
        r.len() >= 20
    })
    .await;
    wait_status(&h, "stripe", Status::Delivered, 20, Duration::from_secs(10)).await;
    gw.stop().await;
}
for_each_store!(
    circuit_breaker_stops_burning_attempts_and_recovers,
    super::breaker
);

/// The longest run of consecutive requests `received` answered `status`.
fn longest_run(received: &[crate::upstream::Received], status: u16) -> usize {
    let mut longest = 0;
    let mut run = 0;
    for r in received {
        run = if r.answered == status { run + 1 } else { 0 };
        longest = longest.max(run);
    }
    longest
}

async fn breaker_probe_retries(backend: Backend) {
    let h = StoreHandle::new(backend);
    // Answers 503 to the first delivery of each event, 200 to every later one.
    let mut seen = std::collections::HashSet::new();
    let up = Upstream::scripted(move |headers, _| {
        let id = headers
            .get("webhook-id")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        Reply::Status(if seen.insert(id) { 503 } else { 200 })
    })
    .await;
    let failures = 3;
    // One delivery at a time, so the upstream sees the attempts in the order the
    // breaker counts them; retries due well within the cooldown.
    let text = format!(
        "{}\n[forwarder]\npoll_interval = \"50ms\"\nmaintenance_interval = \"200ms\"\nlease = \"15s\"\n\
         breaker_failures = {failures}\nbreaker_cooldown = \"500ms\"\n{}",
        h.toml(),
        source(
            "stripe",
            &format!("{}/hook", up.url),
            "[sources.delivery]\nconcurrency = 1\n\
             [sources.retry]\nbase = \"50ms\"\ncap = \"100ms\"\nmax_attempts = 1000\n"
        )
    );
    let cfg = config::from_toml_str(&text, &|_| None).unwrap();
    let cooldown = cfg.forwarder.breaker_cooldown;
    let gw = Gateway::start(cfg).await;
    let ids = ingest_many(&gw.ingest, "stripe", "evt_first_fails", 20).await;
    // Each cycle is: the breaker opens after `failures` new deliveries, and the probe
    // after one cooldown (a retry) is accepted and closes it. A probe of a new
    // delivery would fail and double the cooldown every time (up to 10×): far longer.
    up.wait_for(30 * cooldown, "every entry delivered", |r| {
        let ok: Vec<&crate::upstream::Received> = r.iter().filter(|r| r.answered == 200).collect();
        reached(ok, ids.values())
    })
    .await;
    let received = up.received();
    let run = longest_run(&received, 503);
    // The breaker opened: `failures` failures in a row...
    assert!(
        run >= failures,
        "the breaker never opened: {run} failures in a row"
    );
    // ...and each probe after it was accepted: no failure follows those but the one
    // attempt that may have started before the breaker opened.
    assert!(
        run <= failures + 1,
        "{run} failures in a row: a probe after the breaker opened failed"
    );
    wait_status(&h, "stripe", Status::Delivered, 20, Duration::from_secs(10)).await;
    let client = http();
    let metrics = format!("{}/metrics", gw.admin);
    let gauge = format!(
        "hookgate_circuit_breaker_state{{destination=\"http://127.0.0.1:{}\"}}",
        up.port
    );
    wait_until(
        "the breaker to be closed",
        Duration::from_secs(10),
        async || {
            get_text(&client, &metrics)
                .await
                .lines()
                .filter_map(|l| l.strip_prefix(gauge.as_str()))
                .any(|v| v.trim().parse::<f64>() == Ok(0.0))
        },
    )
    .await;
    gw.stop().await;
}
for_each_store!(
    a_breaker_probe_retries_a_failed_delivery_so_a_destination_failing_first_attempts_recovers,
    super::breaker_probe_retries
);

async fn sigkill_in_flight(backend: Backend) {
    let h = StoreHandle::new(backend);
    let up = Upstream::scripted(|_, _| Reply::Slow(200, Duration::from_millis(200))).await;
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "{}\n[forwarder]\npoll_interval = \"50ms\"\nlease = \"3s\"\n{}",
        h.toml(),
        // A delivery the killed gateway had in flight is retried once its lease
        // ends, after a backoff: a short one, so that the wait below is about loss,
        // not about the default minute of backoff.
        source(
            "stripe",
            &up.url,
            &format!("[sources.delivery]\ntimeout = \"2s\"\nconcurrency = 8\n{FAST_RETRY}")
        )
    );
    let cfg_path = write_config(dir.path(), &text);
    let mut gw = ChildGateway::spawn(&cfg_path, &[], &dir.path().join("log1"));
    let ids = ingest_many(&gw.ingest, "stripe", "evt_kill", 300).await;
    up.wait_for(Duration::from_secs(30), "some deliveries", |r| {
        r.len() >= 40
    })
    .await;
    gw.kill();
    let before = up.count();
    let _gw2 = ChildGateway::spawn(&cfg_path, &[], &dir.path().join("log2"));
    up.wait_for(
        Duration::from_secs(60),
        "every entry delivered after restart",
        |r| reached(r, ids.values()),
    )
    .await;
    wait_status(
        &h,
        "stripe",
        Status::Delivered,
        300,
        Duration::from_secs(20),
    )
    .await;
    let all = up.webhook_ids(None);
    let unique: std::collections::HashSet<_> = all.iter().collect();
    eprintln!(
        "{backend:?}: killed after {before} deliveries; 300 entries, {} deliveries, {} delivered twice",
        all.len(),
        all.len() - unique.len()
    );
    assert_eq!(unique.len(), 300, "none lost");
}
for_each_store!(
    sigkill_during_deliveries_loses_nothing,
    super::sigkill_in_flight
);

async fn redis_restarts(_: Backend) {
    // With AOF: delivery resumes by itself, nothing lost.
    let mut h = StoreHandle::new(Backend::Redis);
    let (up, fixed) = Upstream::failing_until_fixed(503).await;
    let gw = Gateway::start(fwd_config(&h, "", &source("stripe", &up.url, FAST_RETRY))).await;
    let ids = ingest_many(&gw.ingest, "stripe", "evt_aof", 50).await;
    // Restart Redis once the forwarder is at work: every entry attempted (and failed).
    up.wait_for(Duration::from_secs(10), "every entry attempted", |r| {
        reached(r, ids.values())
    })
    .await;
    h.redis_mut().restart();
    fixed.store(true, Ordering::SeqCst);
    up.wait_for(
        Duration::from_secs(30),
        "all delivered after the Redis restart",
        |r| reached(r.iter().filter(|x| x.answered == 200), ids.values()),
    )
    .await;
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_restarted_with_aof_delivery_resumes_nothing_lost() {
    redis_restarts(Backend::Redis).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_restarted_empty_does_not_wedge_and_logs_the_loss() {
    let mut redis = RedisServer::start_with(false);
    let up = Upstream::ok().await;
    let dir = tempfile::tempdir().unwrap();
    let cfg_path = write_config(
        dir.path(),
        &format!(
            "[store]\nkind = \"redis\"\nurl = \"{}\"\ntimeout = \"2s\"\n\
             [forwarder]\npoll_interval = \"50ms\"\nmaintenance_interval = \"200ms\"\n{}",
            redis.url(),
            source("stripe", &up.url, FAST_RETRY)
        ),
    );
    let log = dir.path().join("stderr.log");
    let gw = ChildGateway::spawn(&cfg_path, &[], &log);
    ingest_many(&gw.ingest, "stripe", "evt_before", 10).await;
    up.wait_for(Duration::from_secs(10), "first deliveries", |r| {
        r.len() >= 10
    })
    .await;
    redis.restart(); // no persistence: it comes back empty
    let client = crate::support::http();
    let mut ids = Vec::new();
    let mut i = 0;
    wait_until(
        "ingest to recover after the empty restart (10 accepted)",
        Duration::from_secs(20),
        async || {
            let (st, json) = post_stripe(&client, &gw.ingest, &format!("evt_after_{i}")).await;
            if st == 200 {
                ids.push(json["id"].as_str().unwrap().to_string());
            } else {
                assert_eq!(st, 503);
            }
            i += 1;
            ids.len() >= 10
        },
    )
    .await;
    up.wait_for(Duration::from_secs(20), "new webhooks delivered", |r| {
        reached(r, &ids)
    })
    .await;
    wait_until_ok(
        "the loss to be logged at ERROR",
        Duration::from_secs(10),
        async || {
            let text = std::fs::read_to_string(&log).unwrap();
            if text.contains("ERROR") && text.contains("redis lost its data") {
                Ok(())
            } else {
                Err(format!("the log:\n{text}"))
            }
        },
    )
    .await;
}
