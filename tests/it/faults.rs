//! Faults: a 2xx means stored, and every stored entry is delivered at least once or
//! is dead and visible, whatever fails: a worker's lease, the disk's fsync, the
//! disk's space, an operator pausing or discarding mid-flight.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use hookgate::config;
use hookgate::store::{Attempt, Completion, Status};

use crate::conformance::claim_when_due;
use crate::for_each_store;
use crate::forward::source;
use crate::support::*;
use crate::upstream::{Reply, Upstream, reached};

fn delivered(n: u32) -> Completion {
    Completion::Delivered {
        attempt: Attempt {
            route: "default".into(),
            n,
            at: hookgate::clock::system_now_ms(),
            status_code: Some(200),
            failure: None,
            error: None,
            latency_ms: 1,
            answer: None,
        },
    }
}

/// `XPENDING key group`: count, smallest and greatest id, messages per consumer.
type PendingSummary = (
    u64,
    Option<String>,
    Option<String>,
    Option<Vec<(String, String)>>,
);

/// Redis: worker A claims with a 200 ms lease; B takes it over; A's late completion
/// returns false and leaves the message pending for B; B dies; C reclaims it and
/// delivers it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_completion_never_strands_an_entry_on_redis() {
    let h = StoreHandle::new(Backend::Redis);
    let store = h.open().await;
    let e = crate::conformance::entry("s", "evt_stale");
    let id = e.id.clone();
    store.accept(e).await.unwrap();
    let lease = Duration::from_millis(200);
    let now = hookgate::clock::system_now_ms;
    let a = store
        .claim("s", "default", "A", now(), 1, lease)
        .await
        .unwrap();
    assert_eq!(a.len(), 1);
    let b = claim_when_due(&*store, "s", "B").await;
    assert_eq!(b.entry.id, id);
    assert!(
        !store
            .complete(&a[0], "A", delivered(1), now())
            .await
            .unwrap()
    );
    let mut redis = redis::Client::open(h.redis.as_ref().unwrap().url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let pending = |redis: &mut redis::aio::MultiplexedConnection| {
        let mut redis = redis.clone();
        async move {
            let summary: PendingSummary = redis::cmd("XPENDING")
                .arg("hg:{s}:work:default")
                .arg("workers")
                .query_async(&mut redis)
                .await
                .unwrap();
            summary
        }
    };
    let (count, _, _, owners) = pending(&mut redis).await;
    assert_eq!(count, 1, "A's stale completion acknowledged B's message");
    assert_eq!(owners.unwrap()[0].0, "B");
    assert_eq!(
        store.get(&id).await.unwrap().unwrap().status,
        Status::Pending
    );
    // B dies without completing; C reclaims after the lease and delivers.
    let c = claim_when_due(&*store, "s", "C").await;
    assert!(store.complete(&c, "C", delivered(1), now()).await.unwrap());
    let e = store.get(&id).await.unwrap().unwrap();
    assert_eq!((e.status, e.attempts), (Status::Delivered, 1));
    let (count, ..) = pending(&mut redis).await;
    assert_eq!(count, 0, "the stream holds nothing pending");
    let len: u64 = redis::cmd("XLEN")
        .arg("hg:{s}:work:default")
        .query_async(&mut redis)
        .await
        .unwrap();
    assert_eq!(len, 0, "the stream keeps no message");
}

/// Six sources share one destination origin that answers after 900 ms, with a 1 s
/// timeout and a concurrency of 2, under a lease of `lease`: every webhook arrives
/// exactly once, each with one attempt; no entry waits for a slot under a lease that
/// could run out. With a lease of 1.5 s the routes claim only for slots in hand; with
/// 4 s they claim ahead, and a delivery that waits 1.5 s for a slot (most of them:
/// twelve routes' claims share two slots) gives its lease back unsent.
async fn shared_origin(backend: Backend, lease: &str, claims_ahead: bool) {
    let h = StoreHandle::new(backend);
    // Source names of this run alone: the tests share one metrics recorder.
    let tag = format!(
        "{}{}",
        if claims_ahead { "ahead" } else { "inhand" },
        match backend {
            Backend::Embedded => "e",
            Backend::Redis => "r",
            Backend::Postgres => "p",
        }
    );
    let up = Upstream::scripted(|_, _| Reply::Slow(200, Duration::from_millis(900))).await;
    let mut text = format!(
        "{}\n[forwarder]\npoll_interval = \"50ms\"\nlease = \"{lease}\"\n",
        h.toml()
    );
    for i in 0..6 {
        text.push_str(&source(
            &format!("{tag}{i}"),
            &format!("{}/{tag}{i}", up.url),
            "[sources.delivery]\ntimeout = \"1s\"\nconcurrency = 2\n",
        ));
    }
    let cfg = config::from_toml_str(&text, &|_| None).unwrap();
    let gw = Gateway::start(cfg).await;
    let c = http();
    let mut ids = Vec::new();
    for i in 0..6 {
        for n in 0..10 {
            let body = event_body("stripe", &format!("evt_{i}_{n}"));
            let (st, json) = post_stripe_signed(&c, &gw.ingest, &format!("{tag}{i}"), &body).await;
            assert_eq!(st, 200, "{json}");
            ids.push(json["id"].as_str().unwrap().to_string());
        }
    }
    up.wait_for(Duration::from_secs(60), "all 60 deliveries", |r| {
        r.len() >= 60
    })
    .await;
    let store = h.open().await;
    wait_until(
        "every entry delivered",
        Duration::from_secs(10),
        async || {
            for id in &ids {
                if store.get(id).await.unwrap().unwrap().status != Status::Delivered {
                    return false;
                }
            }
            true
        },
    )
    .await;
    let mut seen: HashMap<String, usize> = HashMap::new();
    for r in up.received() {
        *seen.entry(r.header("webhook-id").unwrap()).or_default() += 1;
    }
    for id in &ids {
        assert_eq!(
            seen.get(id),
            Some(&1),
            "{id} delivered {:?} times",
            seen.get(id)
        );
        assert_eq!(store.get(id).await.unwrap().unwrap().attempts, 1, "{id}");
    }
    assert_eq!(up.count(), 60);
    // Whether deliveries were given back for want of a slot: only when claiming
    // ahead (without, a route claims only for slots in hand).
    let metrics = get_text(&c, &format!("{}/metrics", gw.admin)).await;
    let series = format!("hookgate_slot_waits_expired_total{{source=\"{tag}");
    let expired: f64 = metrics
        .lines()
        .filter(|l| l.starts_with(&series))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    match claims_ahead {
        true => assert!(expired > 0.0, "no delivery waited too long:\n{metrics}"),
        false => assert_eq!(expired, 0.0),
    }
    gw.stop().await;
}
for_each_store!(
    sources_sharing_an_origin_never_overrun_their_lease,
    |backend| super::shared_origin(backend, "1500ms", false)
);
for_each_store!(
    sources_sharing_an_origin_never_overrun_their_lease_when_claiming_ahead,
    |backend| super::shared_origin(backend, "4s", true)
);

/// Pause through `pause_via`, then at once 20 webhooks through `ingest_via`: none is
/// delivered while paused (by any gateway), all after the resume through
/// `resume_via`.
async fn pause_then_resume(
    pause_via: &Gateway,
    ingest_via: &Gateway,
    resume_via: &Gateway,
    up: &Upstream,
) {
    let c = http();
    let admin = |gw: &Gateway, action: &str| {
        c.post(format!("{}/admin/sources/stripe/{action}", gw.admin))
            .send()
    };
    assert_eq!(admin(pause_via, "pause").await.unwrap().status(), 200);
    for n in 0..20 {
        let (st, _) = post_stripe(&c, &ingest_via.ingest, &format!("evt_p{n}")).await;
        assert_eq!(st, 200);
    }
    // Ten poll intervals: a forwarder that ignored the pause would have sent them.
    quiet_for(
        "nothing delivered while paused",
        Duration::from_millis(500),
        async || up.count() == 0,
    )
    .await;
    assert_eq!(admin(resume_via, "resume").await.unwrap().status(), 200);
    up.wait_for(Duration::from_secs(10), "all 20 after the resume", |r| {
        r.len() >= 20
    })
    .await;
}

/// A gateway on `h`'s store delivering source `stripe` to `up`.
async fn stripe_gateway(h: &StoreHandle, up: &Upstream) -> Gateway {
    let text = format!(
        "{}\n[forwarder]\npoll_interval = \"50ms\"\n{}",
        h.toml(),
        source("stripe", &up.url, "")
    );
    Gateway::start(config::from_toml_str(&text, &|_| None).unwrap()).await
}

/// Pause, then at once 20 webhooks: none is delivered while paused, all after the
/// resume.
async fn pause_at_once(backend: Backend) {
    let h = StoreHandle::new(backend);
    let up = Upstream::ok().await;
    let gw = stripe_gateway(&h, &up).await;
    pause_then_resume(&gw, &gw, &gw, &up).await;
    gw.stop().await;
}
for_each_store!(a_pause_takes_effect_at_once, super::pause_at_once);

/// Two gateways on one Redis: a pause made through one holds in the other (the
/// claim itself refuses a paused source).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_holds_in_every_process_sharing_redis() {
    let h = StoreHandle::new(Backend::Redis);
    let up = Upstream::ok().await;
    let one = stripe_gateway(&h, &up).await;
    let two = stripe_gateway(&h, &up).await;
    pause_then_resume(&one, &two, &two, &up).await;
    one.stop().await;
    two.stop().await;
}

/// Discarding an entry whose delivery is in flight cancels the attempt: it is
/// recorded, and the entry stays discarded.
async fn discard_in_flight(backend: Backend) {
    let h = StoreHandle::new(backend);
    let arrived = Arc::new(AtomicBool::new(false));
    let flag = arrived.clone();
    let up = Upstream::scripted(move |_, _| {
        flag.store(true, Ordering::SeqCst);
        Reply::Slow(200, Duration::from_secs(5))
    })
    .await;
    let gw = stripe_gateway(&h, &up).await;
    let c = http();
    let (_, json) = post_stripe(&c, &gw.ingest, "evt_discard").await;
    let id = json["id"].as_str().unwrap().to_string();
    wait_until(
        "the delivery is in flight",
        Duration::from_secs(5),
        async || arrived.load(Ordering::SeqCst),
    )
    .await;
    let started = Instant::now();
    let r = c
        .post(format!("{}/admin/entries/{id}/discard", gw.admin))
        .json(&serde_json::json!({"note": "bad event"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let store = h.open().await;
    wait_until(
        "the cancelled attempt is recorded",
        Duration::from_secs(4),
        async || !store.attempts(&id).await.unwrap().is_empty(),
    )
    .await;
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "cancelled, not waited out"
    );
    let attempts = store.attempts(&id).await.unwrap();
    assert_eq!(
        attempts[0].error.as_deref(),
        Some("cancelled: the entry was discarded")
    );
    let e = store.get(&id).await.unwrap().unwrap();
    assert_eq!((e.status, e.attempts), (Status::Discarded, 1));
    gw.stop().await;
}
for_each_store!(
    a_discard_cancels_the_attempt_in_flight,
    super::discard_in_flight
);

/// An fsync that fails stops the embedded store: the write answers 503, a retry of
/// the same event 503 (never `duplicate`), `/readyz` 503, and `serve` exits non-zero;
/// after a restart every entry acknowledged before the failure is there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_fsync_stops_the_embedded_store() {
    let h = StoreHandle::new(Backend::Embedded);
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(
        dir.path(),
        &format!(
            "[server]\nshutdown_grace = \"2s\"\n{}\n{}",
            h.toml(),
            source("stripe", "http://127.0.0.1:9/", "")
        ),
    );
    let log = dir.path().join("stderr.log");
    let mut gw = ChildGateway::spawn(&cfg, &[("HOOKGATE_FAULT_FSYNC_AFTER", "5")], &log);
    let c = http();
    let post = |n: usize| {
        let c = c.clone();
        let base = gw.ingest.clone();
        async move { post_stripe(&c, &base, &format!("evt_f{n}")).await }
    };
    let mut acked = Vec::new();
    let mut failed_at = None;
    for n in 0..20 {
        let (st, json) = post(n).await;
        match st {
            200 => acked.push(json["id"].as_str().unwrap().to_string()),
            503 => {
                failed_at = Some(n);
                break;
            }
            other => panic!("{other}: {json}"),
        }
    }
    let failed_at = failed_at.expect("the injected fsync failure surfaced as a 503");
    assert!(!acked.is_empty());
    // The provider's retry of the same event: still 503, never "duplicate".
    let (st, json) = post(failed_at).await;
    assert_eq!(st, 503, "{json}");
    let (st, _) = post(failed_at + 1).await;
    assert_eq!(st, 503);
    // /readyz says so (while the process drains), then serve exits non-zero.
    let ready = c.get(format!("{}/readyz", gw.admin)).send().await.unwrap();
    assert_eq!(ready.status(), 503);
    let status = wait_until_ok("serve exits", Duration::from_secs(20), async || {
        gw.child.try_wait().unwrap().ok_or("still running")
    })
    .await;
    assert!(!status.success(), "serve exited {status}");
    let log = std::fs::read_to_string(&log).unwrap();
    assert!(log.contains("fsync"), "{log}");
    // A restart recovers from what is on disk.
    let store = h.open().await;
    for id in &acked {
        assert!(store.get(id).await.unwrap().is_some(), "{id} lost");
    }
    store.ping().await.unwrap();
}

/// A small filesystem for the store, made and removed by the test.
pub(crate) struct Tmpfs {
    pub(crate) dir: tempfile::TempDir,
}

impl Tmpfs {
    pub(crate) fn mount(bytes: u64) -> Tmpfs {
        let dir = tempfile::tempdir().unwrap();
        let status = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={bytes}")])
            .arg("tmpfs")
            .arg(dir.path())
            .status()
            .expect("run mount");
        assert!(
            status.success(),
            "cannot mount a tmpfs (the disk-full test needs root, as CI has)"
        );
        Tmpfs { dir }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

/// The embedded store's disk fills up: 503 with Retry-After, never a 200 for what was
/// not stored, no crash, `/readyz` 503 within a second, and the repeated error logged
/// a few times, not once per request; ingest and `/readyz` recover when space
/// returns, and every acknowledged entry is delivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_answers_503_and_recovers() {
    let fs = Tmpfs::mount(4 * 1024 * 1024);
    let data = fs.dir.path().join("data");
    let filler = fs.dir.path().join("filler");
    let up = Upstream::ok().await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(
        dir.path(),
        &format!(
            "[store]\nkind = \"embedded\"\npath = \"{}\"\nmin_free_bytes = 262144\n[forwarder]\npoll_interval = \"50ms\"\n{}",
            data.display(),
            source(
                "stripe",
                &up.url,
                "[sources.retry]\nbase = \"100ms\"\ncap = \"500ms\"\n"
            )
        ),
    );
    let log = dir.path().join("stderr.log");
    let mut gw = ChildGateway::spawn(&cfg, &[], &log);
    // Leave well under a megabyte free.
    let free = {
        let out = std::process::Command::new("df")
            .args(["--output=avail", "-B1"])
            .arg(fs.dir.path())
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .nth(1)
            .unwrap()
            .trim()
            .parse::<u64>()
            .unwrap()
    };
    std::fs::write(&filler, vec![0u8; (free - 600 * 1024) as usize]).unwrap();
    let c = http();
    let padding = "x".repeat(48 * 1024);
    let post = |n: usize| {
        let c = c.clone();
        let base = gw.ingest.clone();
        let padding = padding.clone();
        async move {
            let body =
                format!(r#"{{"id":"evt_d{n}","object":"event","type":"t","pad":"{padding}"}}"#)
                    .into_bytes();
            let headers = sign_headers("stripe", STRIPE_SECRET, &body, now_secs(), "x");
            let r = c
                .post(format!("{base}/ingest/stripe"))
                .header("content-type", "application/json")
                .headers(
                    headers
                        .iter()
                        .map(|(k, v)| (k.parse().unwrap(), v.parse().unwrap()))
                        .collect(),
                )
                .body(body)
                .send()
                .await
                .unwrap();
            let status = r.status().as_u16();
            let retry_after = r.headers().get("retry-after").is_some();
            let json: serde_json::Value = r.json().await.unwrap_or_default();
            (status, retry_after, json)
        }
    };
    let mut acked = Vec::new();
    let mut refused = 0;
    let mut n = 0;
    while refused < 3 && n < 200 {
        let (st, retry_after, json) = post(n).await;
        match st {
            200 => acked.push(json["id"].as_str().unwrap().to_string()),
            503 => {
                assert!(retry_after, "503 without Retry-After");
                refused += 1;
            }
            other => panic!("{other}: {json}"),
        }
        n += 1;
    }
    assert_eq!(refused, 3, "the disk never filled up");
    assert!(
        gw.child.try_wait().unwrap().is_none(),
        "the gateway crashed"
    );
    // A load balancer hears it at once.
    let ready = |c: reqwest::Client, admin: String| async move {
        c.get(format!("{admin}/readyz"))
            .send()
            .await
            .map(|r| r.status().as_u16())
            .unwrap_or(0)
    };
    assert_eq!(ready(c.clone(), gw.admin.clone()).await, 503);
    // Ten seconds of refused webhooks at 50 a second: a few log lines, not 500.
    let lines_before = std::fs::read_to_string(&log).unwrap().lines().count();
    let flood_started = std::time::Instant::now();
    let mut flood = 0;
    while flood_started.elapsed() < Duration::from_secs(10) {
        let (st, _, _) = post(n).await;
        assert_eq!(st, 503, "a webhook stored on a full disk");
        n += 1;
        flood += 1;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(ready(c.clone(), gw.admin.clone()).await, 503);
    let text = std::fs::read_to_string(&log).unwrap();
    let flood_lines = text.lines().skip(lines_before).count();
    assert!(
        flood_lines < 50,
        "{flood_lines} log lines for {flood} refused webhooks:\n{}",
        text.lines()
            .skip(lines_before)
            .take(60)
            .collect::<Vec<_>>()
            .join("\n")
    );
    // Space returns: ingest resumes.
    std::fs::remove_file(&filler).unwrap();
    let id = wait_until_ok(
        "ingest resumes once space returned",
        Duration::from_secs(15),
        async || {
            let (st, _, json) = post(n).await;
            n += 1;
            match st {
                200 => Ok(json["id"].as_str().unwrap().to_string()),
                other => Err(other),
            }
        },
    )
    .await;
    acked.push(id);
    wait_until_ok(
        "/readyz 200 once space returned",
        Duration::from_secs(10),
        async || match ready(c.clone(), gw.admin.clone()).await {
            200 => Ok(()),
            other => Err(other),
        },
    )
    .await;
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("repeated"),
        "no count of the repeated error:\n{text}"
    );
    up.wait_for(
        Duration::from_secs(60),
        "every acknowledged entry delivered",
        |r| reached(r, &acked),
    )
    .await;
    // The space kept for deliveries held every completion: nothing went out twice.
    let mut seen = std::collections::HashSet::new();
    let twice: Vec<String> = up
        .received()
        .iter()
        .filter_map(|r| r.header("webhook-id"))
        .filter(|id| !seen.insert(id.clone()))
        .collect();
    assert!(twice.is_empty(), "delivered twice: {twice:?}");
    gw.kill();
}
