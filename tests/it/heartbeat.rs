//! Gateways sharing a store (Redis, PostgreSQL) watch each other's heartbeats: a
//! SIGKILLed gateway's claimed deliveries are delivered by the other within 15 s of
//! the kill, not a lease later; a gateway cut off from the store stops sending
//! before its leases can be taken, so an ordered route never has two deliveries of
//! one key in flight; a store away for longer than that hands no lease over; and a
//! draining gateway keeps its fence until its sends end.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::{Path as UrlPath, State};
use axum::http::StatusCode;
use tokio::net::TcpListener;

use hookgate::store::Status;

use crate::forward::source;
use crate::support::*;
use crate::upstream::{Reply, Upstream};

/// A config file named `name` in `dir`: the store section `store`, a quick poll,
/// and the `stripe` source delivering to `destination` with `delivery` settings.
fn gateway_file(dir: &Path, name: &str, store: &str, destination: &str, extra: &str) -> PathBuf {
    let text = format!(
        "{store}\n[forwarder]\npoll_interval = \"100ms\"\nmaintenance_interval = \"500ms\"\n{}",
        source("stripe", destination, extra)
    );
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// The store section `section` with its `127.0.0.1:<port>` pointed at `port`.
fn through_port(section: &str, port: u16) -> (String, u16) {
    let at = section
        .find("127.0.0.1:")
        .expect("a loopback store address")
        + 10;
    let digits: String = section[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    let original: u16 = digits.parse().unwrap();
    let rewritten = format!("{}{port}{}", &section[..at], &section[at + digits.len()..]);
    (rewritten, original)
}

async fn sigkill_takeover(backend: Backend) {
    let h = StoreHandle::new(backend);
    let dir = tempfile::tempdir().unwrap();
    // The gateway to be killed sends to a destination that never answers, so it
    // holds every delivery it claims; the other's answers at once.
    let hangs = Upstream::scripted(|_, _| Reply::Hang).await;
    let answers = Upstream::ok().await;
    let delivery = "[sources.delivery]\nconcurrency = 2\ntimeout = \"30s\"\n";
    let doomed_cfg = gateway_file(dir.path(), "doomed.toml", &h.toml(), &hangs.url, delivery);
    let other_cfg = gateway_file(dir.path(), "other.toml", &h.toml(), &answers.url, delivery);
    let mut doomed = ChildGateway::spawn(&doomed_cfg, &[], &dir.path().join("doomed.log"));
    let other = ChildGateway::spawn(&other_cfg, &[], &dir.path().join("other.log"));
    let c = http();
    let mut acked = BTreeSet::new();
    for n in 0..30 {
        let base = if n % 2 == 0 {
            &doomed.ingest
        } else {
            &other.ingest
        };
        let (st, json) = post_stripe(&c, base, &format!("evt_takeover_{n}")).await;
        assert_eq!(st, 200, "{json}");
        acked.insert(json["id"].as_str().unwrap().to_string());
    }
    // The doomed gateway holds deliveries: its destination got some of them.
    hangs
        .wait_for(Duration::from_secs(15), "the doomed gateway sending", |r| {
            r.len() >= 2
        })
        .await;
    let held: BTreeSet<String> = hangs.webhook_ids(None).into_iter().collect();
    doomed.kill();
    let killed = Instant::now();
    let delivered =
        |u: &Upstream| -> BTreeSet<String> { u.webhook_ids(None).into_iter().collect() };
    assert!(
        !held.iter().all(|id| delivered(&answers).contains(id)),
        "the held deliveries were not delivered before the kill"
    );
    // Waited for up to 30 s, so that a late delivery is told apart from none.
    let mut missing = acked.clone();
    while !missing.is_empty() && killed.elapsed() < Duration::from_secs(30) {
        missing = acked.difference(&delivered(&answers)).cloned().collect();
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let log = std::fs::read_to_string(dir.path().join("other.log")).unwrap_or_default();
    assert!(
        missing.is_empty(),
        "{backend:?}: {} acknowledged entries not delivered 30 s after the kill; the survivor's log:\n{log}",
        missing.len()
    );
    let within = killed.elapsed();
    assert!(
        within <= Duration::from_secs(15),
        "{backend:?}: the last acknowledged entry came {within:?} after the kill (forwarder.lease is 60 s); the survivor's log:\n{log}"
    );
    assert!(
        log.contains("took over the leases of gateways"),
        "the survivor says it took over:\n{log}"
    );
    eprintln!("{backend:?}: every acknowledged entry delivered {within:?} after the kill");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_gateways_deliveries_come_back_within_15_s_on_redis() {
    sigkill_takeover(Backend::Redis).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_gateways_deliveries_come_back_within_15_s_on_postgres() {
    sigkill_takeover(Backend::Postgres).await;
}

/// What the keyed destination saw.
#[derive(Default)]
struct Keyed {
    /// Per key, the deliveries in flight now.
    in_flight: HashMap<String, u32>,
    /// (key, seq, via) of deliveries that arrived while another of their key was in
    /// flight.
    overlaps: Vec<(String, u64, String)>,
    /// Per key, the sequence numbers answered 200.
    delivered: HashMap<String, BTreeSet<u64>>,
    /// Per key, the gateway (path) of every arrival, in order.
    arrivals: HashMap<String, Vec<String>>,
}

struct KeyedState {
    seen: Mutex<Keyed>,
    /// While set, every request is held (answered once it clears, at most 60 s).
    hold: AtomicBool,
}

/// Ends a delivery's time in flight however its request ends: answered, or
/// abandoned with its connection.
struct Flight {
    state: Arc<KeyedState>,
    key: String,
}

impl Drop for Flight {
    fn drop(&mut self) {
        if let Ok(mut seen) = self.state.seen.lock()
            && let Some(n) = seen.in_flight.get_mut(&self.key)
        {
            *n -= 1;
        }
    }
}

async fn keyed(
    State(state): State<Arc<KeyedState>>,
    UrlPath(via): UrlPath<String>,
    body: Bytes,
) -> StatusCode {
    let doc: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
    let key = doc["data"]["object"]["id"]
        .as_str()
        .unwrap_or("")
        .to_string();
    let seq = doc["data"]["object"]["seq"].as_u64().unwrap_or(u64::MAX);
    {
        let mut seen = state.seen.lock().unwrap();
        let n = seen.in_flight.entry(key.clone()).or_insert(0);
        *n += 1;
        if *n > 1 {
            seen.overlaps.push((key.clone(), seq, via.clone()));
        }
        seen.arrivals.entry(key.clone()).or_default().push(via);
    }
    let _flight = Flight {
        state: state.clone(),
        key: key.clone(),
    };
    let start = Instant::now();
    while state.hold.load(Ordering::SeqCst) && start.elapsed() < Duration::from_secs(60) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    state
        .seen
        .lock()
        .unwrap()
        .delivered
        .entry(key)
        .or_default()
        .insert(seq);
    StatusCode::OK
}

/// A Stripe event of object `key`, the `seq`-th of that object.
fn event(key: &str, seq: u64) -> Vec<u8> {
    format!(
        r#"{{"id":"evt_{key}_{seq}","object":"event","type":"customer.subscription.updated","data":{{"object":{{"id":"{key}","seq":{seq}}}}}}}"#
    )
    .into_bytes()
}

async fn cut_off_gateway_stops_first(backend: Backend) {
    let h = StoreHandle::new(backend);
    let dir = tempfile::tempdir().unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let state = Arc::new(KeyedState {
        seen: Mutex::default(),
        hold: AtomicBool::new(true),
    });
    let app = axum::Router::new()
        .route("/{via}", axum::routing::post(keyed))
        .with_state(state.clone());
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    // Ordered by the object id; a send may take 30 s, far longer than the 10 s after
    // which a silent gateway's leases are taken.
    let ordered = "[sources.order]\nby = \"provider\"\n\
                   [sources.delivery]\nconcurrency = 8\ntimeout = \"30s\"\n";
    let (store, to) = through_port(&h.toml(), 0);
    let proxy = Blackhole::start(to).await;
    let (via_proxy, _) = through_port(&store, proxy.port);
    let cut_cfg = gateway_file(
        dir.path(),
        "cut.toml",
        &via_proxy,
        &format!("{base}/cut"),
        ordered,
    );
    let other_cfg = gateway_file(
        dir.path(),
        "other.toml",
        &h.toml(),
        &format!("{base}/other"),
        ordered,
    );
    let cut = ChildGateway::spawn(&cut_cfg, &[], &dir.path().join("cut.log"));
    let other = ChildGateway::spawn(&other_cfg, &[], &dir.path().join("other.log"));
    let keys: Vec<String> = (0..6).map(|k| format!("sub_hb{k}")).collect();
    let c = http();
    for seq in 0..3 {
        for (i, key) in keys.iter().enumerate() {
            let gw = if i % 2 == 0 {
                &cut.ingest
            } else {
                &other.ingest
            };
            let (st, json) = post_stripe_signed(&c, gw, "stripe", &event(key, seq)).await;
            assert_eq!(st, 200, "{json}");
        }
    }
    // Wait until the gateway about to be cut off is sending (held by the
    // destination) the heads of some keys.
    let held_by_cut = wait_until_ok(
        "the gateway to be cut off sending",
        Duration::from_secs(30),
        async || {
            let seen = state.seen.lock().unwrap();
            let keys: Vec<String> = seen
                .arrivals
                .iter()
                .filter(|(_, vias)| vias.iter().any(|v| v == "cut"))
                .map(|(k, _)| k.clone())
                .collect();
            if keys.is_empty() {
                Err("nothing yet")
            } else {
                Ok(keys)
            }
        },
    )
    .await;
    proxy.cut();
    // The other gateway takes the cut-off one's leases and sends those heads again;
    // by then the cut-off gateway has abandoned its attempts (no overlap).
    wait_until_ok(
        "the heads taken over",
        Duration::from_secs(60),
        async || {
            let seen = state.seen.lock().unwrap();
            let taken = held_by_cut.iter().all(|k| {
                seen.arrivals.get(k).is_some_and(|vias| {
                    vias.iter()
                        .skip_while(|v| *v == "cut")
                        .any(|v| v == "other")
                })
            });
            if taken {
                Ok(())
            } else {
                Err(format!("arrivals {:?}", seen.arrivals))
            }
        },
    )
    .await;
    state.hold.store(false, Ordering::SeqCst);
    wait_until_ok(
        "every event of every key delivered",
        Duration::from_secs(60),
        async || {
            let seen = state.seen.lock().unwrap();
            let short: Vec<&String> = keys
                .iter()
                .filter(|k| seen.delivered.get(*k).is_none_or(|d| d.len() < 3))
                .collect();
            if short.is_empty() {
                Ok(())
            } else {
                Err(format!("{short:?}"))
            }
        },
    )
    .await;
    let overlaps = state.seen.lock().unwrap().overlaps.clone();
    let log = std::fs::read_to_string(dir.path().join("cut.log")).unwrap_or_default();
    assert!(
        overlaps.is_empty(),
        "{backend:?}: two deliveries of one key in flight: {overlaps:?}; the cut-off gateway's log:\n{log}"
    );
    assert!(
        log.contains("stops claiming and sending"),
        "the cut-off gateway says it stopped:\n{log}"
    );
    drop(cut);
    drop(other);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_cut_off_from_redis_stops_sending_before_its_leases_are_taken() {
    cut_off_gateway_stops_first(Backend::Redis).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_cut_off_from_postgres_stops_sending_before_its_leases_are_taken() {
    cut_off_gateway_stops_first(Backend::Postgres).await;
}

/// A gateway shutting down keeps its heartbeat until its deliveries have drained: a
/// send longer than the fence's 5 s finishes within `forwarder.shutdown_grace` and
/// is recorded delivered, not abandoned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draining_gateway_keeps_its_fence_until_its_sends_end() {
    let h = StoreHandle::new(Backend::Redis);
    let slow = Upstream::scripted(|_, _| Reply::Slow(200, Duration::from_secs(7))).await;
    let text = format!(
        "{}\n[forwarder]\npoll_interval = \"50ms\"\nshutdown_grace = \"15s\"\n{}",
        h.toml(),
        source(
            "stripe",
            &slow.url,
            "[sources.delivery]\ntimeout = \"30s\"\n"
        )
    );
    let gw = Gateway::start(hookgate::config::from_toml_str(&text, &|_| None).unwrap()).await;
    let (st, json) = post_stripe(&http(), &gw.ingest, "evt_drain_fence").await;
    assert_eq!(st, 200, "{json}");
    let id = json["id"].as_str().unwrap().to_string();
    slow.wait_for(Duration::from_secs(10), "the send", |r| r.len() == 1)
        .await;
    gw.stop().await;
    let store = h.open().await;
    let entry = store.get(&id).await.unwrap().expect("the entry");
    assert_eq!(entry.status, Status::Delivered);
    let attempts = store.attempts(&id).await.unwrap();
    assert_eq!(attempts.len(), 1, "{attempts:?}");
    assert_eq!(attempts[0].status_code, Some(200));
    store.close().await;
}

/// Redis away for longer than a silent gateway's leases last, then back with its
/// data: every heartbeat stopped at once, so no gateway takes another's leases
/// over when they resume. Both gateways stop sending while Redis is away, and every
/// webhook is delivered once it is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_away_for_longer_than_the_takeover_hands_no_lease_over() {
    let mut h = StoreHandle::new(Backend::Redis);
    let dir = tempfile::tempdir().unwrap();
    let slow = Upstream::scripted(|_, _| Reply::Slow(200, Duration::from_secs(2))).await;
    let cfg = gateway_file(
        dir.path(),
        "gw.toml",
        &h.toml(),
        &slow.url,
        "[sources.delivery]\nconcurrency = 2\ntimeout = \"30s\"\n",
    );
    let logs = [dir.path().join("one.log"), dir.path().join("two.log")];
    let one = ChildGateway::spawn(&cfg, &[], &logs[0]);
    let two = ChildGateway::spawn(&cfg, &[], &logs[1]);
    let c = http();
    let mut acked = BTreeSet::new();
    for n in 0..12 {
        let base = if n % 2 == 0 { &one.ingest } else { &two.ingest };
        let (st, json) = post_stripe(&c, base, &format!("evt_away_{n}")).await;
        assert_eq!(st, 200, "{json}");
        acked.insert(json["id"].as_str().unwrap().to_string());
    }
    slow.wait_for(Duration::from_secs(10), "sends in flight", |r| r.len() >= 2)
        .await;
    h.redis_mut().stop();
    let away = Instant::now();
    let read = |p: &PathBuf| std::fs::read_to_string(p).unwrap_or_default();
    wait_until(
        "both gateways to stop sending",
        Duration::from_secs(15),
        async || {
            logs.iter()
                .all(|l| read(l).contains("stops claiming and sending"))
        },
    )
    .await;
    // The outage itself lasts 12 s: longer than the 10 s of silence after which a
    // gateway's leases are taken over.
    tokio::time::sleep_until((away + Duration::from_secs(12)).into()).await;
    h.redis_mut().restart();
    // Delivered as the store records it (the destination also saw the sends
    // abandoned while Redis was away).
    let store = h.open().await;
    let n = acked.len() as u64;
    wait_until_ok(
        "every webhook delivered",
        Duration::from_secs(60),
        async || match store.count_status("stripe", Status::Delivered).await {
            Ok(got) if got == n => Ok(()),
            Ok(got) => Err(format!("{got} of {n}")),
            Err(e) => Err(e.to_string()),
        },
    )
    .await;
    store.close().await;
    for l in &logs {
        let text = read(l);
        assert!(
            !text.contains("took over the leases"),
            "a store that was away handed leases over:\n{text}"
        );
        assert!(
            text.contains("claiming and sending resume"),
            "the gateway resumed:\n{text}"
        );
    }
    drop((one, two));
}
