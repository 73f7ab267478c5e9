//! Ordered delivery, end to end: a route ordered by the provider's object id
//! delivers each key's events one at a time in the order hookgate received them,
//! on both stores and with two gateways sharing one Redis; a failing or dead head
//! holds only its own key; a gateway killed mid-delivery loses no order.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use hookgate::config;
use tokio::net::TcpListener;

use crate::for_each_store;
use crate::forward::source;
use crate::support::*;

/// What the keyed upstream decides for one delivery: `(key, seq, attempt of this
/// event)` → status.
type Rule = Box<dyn Fn(&str, u64, u32) -> u16 + Send + Sync>;

#[derive(Default)]
struct Seen {
    /// Per key, the sequence numbers in the order they arrived (every attempt).
    arrivals: HashMap<String, Vec<u64>>,
    /// Per key, the sequence numbers answered 2xx, in order.
    delivered: HashMap<String, Vec<u64>>,
    /// Keys in the order any of their deliveries arrived (to see interleaving).
    keys: Vec<String>,
    /// Keys with a delivery in flight right now.
    in_flight: HashMap<String, u32>,
    /// Deliveries that arrived while another of their key was in flight.
    overlaps: Vec<(String, u64)>,
    attempts: HashMap<(String, u64), u32>,
}

/// An upstream that reads each event's key and sequence number from its body,
/// records the order per key, and asserts that no key has two deliveries in flight.
struct KeyedUpstream {
    url: String,
    seen: Arc<Mutex<Seen>>,
}

struct Shared {
    seen: Arc<Mutex<Seen>>,
    rule: Rule,
    hold: Duration,
}

struct InFlight {
    seen: Arc<Mutex<Seen>>,
    key: String,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if let Ok(mut seen) = self.seen.lock()
            && let Some(n) = seen.in_flight.get_mut(&self.key)
        {
            *n -= 1;
        }
    }
}

async fn keyed_handler(State(s): State<Arc<Shared>>, body: Bytes) -> StatusCode {
    let doc: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
    let key = doc["data"]["object"]["id"]
        .as_str()
        .unwrap_or("")
        .to_string();
    let seq = doc["data"]["object"]["seq"].as_u64().unwrap_or(u64::MAX);
    let attempt = {
        let mut seen = s.seen.lock().unwrap();
        let n = seen.in_flight.entry(key.clone()).or_insert(0);
        *n += 1;
        if *n > 1 {
            seen.overlaps.push((key.clone(), seq));
        }
        seen.arrivals.entry(key.clone()).or_default().push(seq);
        seen.keys.push(key.clone());
        let a = seen.attempts.entry((key.clone(), seq)).or_insert(0);
        *a += 1;
        *a
    };
    // Ends the delivery's time in flight however the request ends: answered, or
    // dropped with its connection (a gateway killed mid-delivery).
    let _in_flight = InFlight {
        seen: s.seen.clone(),
        key: key.clone(),
    };
    // Long enough for a second delivery of the key to arrive, were one sent.
    tokio::time::sleep(s.hold).await;
    let status = (s.rule)(&key, seq, attempt);
    let mut seen = s.seen.lock().unwrap();
    if (200..300).contains(&status) {
        seen.delivered.entry(key).or_default().push(seq);
    }
    StatusCode::from_u16(status).unwrap()
}

impl KeyedUpstream {
    async fn start(hold: Duration, rule: Rule) -> KeyedUpstream {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let seen = Arc::new(Mutex::new(Seen::default()));
        let shared = Arc::new(Shared {
            seen: seen.clone(),
            rule,
            hold,
        });
        let app = axum::Router::new()
            .fallback(keyed_handler)
            .with_state(shared);
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        KeyedUpstream { url, seen }
    }

    fn delivered(&self, key: &str) -> Vec<u64> {
        self.seen
            .lock()
            .unwrap()
            .delivered
            .get(key)
            .cloned()
            .unwrap_or_default()
    }

    fn arrivals(&self, key: &str) -> Vec<u64> {
        self.seen
            .lock()
            .unwrap()
            .arrivals
            .get(key)
            .cloned()
            .unwrap_or_default()
    }

    fn overlaps(&self) -> Vec<(String, u64)> {
        self.seen.lock().unwrap().overlaps.clone()
    }

    async fn wait_delivered(&self, keys: &[String], per_key: u64, deadline: Duration) {
        wait_until_ok("every event of every key delivered", deadline, async || {
            let short: Vec<(String, usize)> = keys
                .iter()
                // Distinct events: a delivery in flight when its gateway died may
                // have arrived twice, which is not the next one arriving.
                .map(|k| {
                    let distinct: std::collections::BTreeSet<u64> =
                        self.delivered(k).into_iter().collect();
                    (k.clone(), distinct.len())
                })
                .filter(|(_, n)| (*n as u64) < per_key)
                .collect();
            if short.is_empty() {
                Ok(())
            } else {
                Err(format!("{short:?}"))
            }
        })
        .await;
    }
}

/// A Stripe event of object `key`, the `seq`-th of that object.
fn event(key: &str, seq: u64) -> Vec<u8> {
    format!(
        r#"{{"id":"evt_{key}_{seq}","object":"event","type":"customer.subscription.updated","data":{{"object":{{"id":"{key}","seq":{seq}}}}}}}"#
    )
    .into_bytes()
}

/// Post the events `0..n` of each key, each key's in order (keys concurrently),
/// spreading the keys over `gateways` (ingest URLs).
async fn post_lines(gateways: &[String], keys: &[String], n: u64) {
    let c = http();
    let mut tasks = Vec::new();
    for (i, key) in keys.iter().enumerate() {
        let (c, key) = (c.clone(), key.clone());
        let base = gateways[i % gateways.len()].clone();
        tasks.push(tokio::spawn(async move {
            for seq in 0..n {
                let (st, json) = post_stripe_signed(&c, &base, "stripe", &event(&key, seq)).await;
                assert_eq!(st, 200, "{json}");
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
}

/// The `[[sources]]` of an ordered Stripe source delivering to `url`, with more
/// `[sources.delivery]` keys in `delivery`.
fn ordered_source(url: &str, on_dead: &str, delivery: &str) -> String {
    source(
        "stripe",
        url,
        &format!(
            "[sources.order]\nby = \"provider\"\non_dead = \"{on_dead}\"\n\
             [sources.delivery]\nconcurrency = 8\n{delivery}\n\
             [sources.retry]\nbase = \"50ms\"\ncap = \"100ms\"\n"
        ),
    )
}

fn gateway_config(h: &StoreHandle, source: &str) -> config::Config {
    let text = format!(
        "{}\n[forwarder]\npoll_interval = \"50ms\"\nmaintenance_interval = \"200ms\"\n{source}",
        h.toml()
    );
    config::from_toml_str(&text, &|_| None).unwrap()
}

fn keys(n: usize) -> Vec<String> {
    (0..n).map(|k| format!("sub_{k}")).collect()
}

/// 10 keys × 100 events: each key's events arrive exactly in the order received,
/// one at a time; keys interleave. On Redis and PostgreSQL, two gateways share the store (each
/// takes half the keys' webhooks, both deliver).
async fn each_key_in_order(backend: Backend) {
    let h = StoreHandle::new(backend);
    let up = KeyedUpstream::start(Duration::from_millis(2), Box::new(|_, _, _| 200)).await;
    let src = ordered_source(&up.url, "skip", "");
    let one = Gateway::start(gateway_config(&h, &src)).await;
    let two = match backend {
        Backend::Redis | Backend::Postgres => Some(Gateway::start(gateway_config(&h, &src)).await),
        Backend::Embedded => None,
    };
    let mut ingest = vec![one.ingest.clone()];
    ingest.extend(two.iter().map(|g| g.ingest.clone()));
    let keys = keys(10);
    post_lines(&ingest, &keys, 100).await;
    up.wait_delivered(&keys, 100, Duration::from_secs(60)).await;
    let want: Vec<u64> = (0..100).collect();
    for k in &keys {
        assert_eq!(up.arrivals(k), want, "{k}: every event once, in order");
    }
    assert_eq!(up.overlaps(), vec![], "a key had two deliveries in flight");
    // Keys interleave: the first hundred deliveries are not one key's.
    let seen = up.seen.lock().unwrap().keys.clone();
    let early: std::collections::HashSet<&String> = seen.iter().take(100).collect();
    assert!(early.len() > 1, "keys did not go in parallel: {early:?}");
    one.stop().await;
    if let Some(two) = two {
        two.stop().await;
    }
}
for_each_store!(each_key_arrives_in_received_order, super::each_key_in_order);

/// The 3rd event of one key fails five times, then is accepted: that key's later
/// events wait and then arrive in order; the other keys are not held back. (The
/// head keeps failing past its fifth attempt until every other key is delivered:
/// with full jitter, five retries alone may take no time at all.)
async fn a_failing_head_holds_only_its_key(backend: Backend) {
    let h = StoreHandle::new(backend);
    let others_done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let done = others_done.clone();
    let up = KeyedUpstream::start(
        Duration::from_millis(1),
        Box::new(move |key, seq, attempt| {
            let failing = attempt <= 5 || !done.load(std::sync::atomic::Ordering::SeqCst);
            if key == "sub_0" && seq == 2 && failing {
                503
            } else {
                200
            }
        }),
    )
    .await;
    let gw = Gateway::start(gateway_config(&h, &ordered_source(&up.url, "skip", ""))).await;
    let keys = keys(5);
    post_lines(std::slice::from_ref(&gw.ingest), &keys, 10).await;
    // The other keys are delivered while the 3rd of sub_0 is still failing.
    up.wait_delivered(&keys[1..], 10, Duration::from_secs(60))
        .await;
    assert_eq!(
        up.delivered("sub_0"),
        vec![0, 1],
        "sub_0 waits behind its failing 3rd event"
    );
    others_done.store(true, std::sync::atomic::Ordering::SeqCst);
    up.wait_delivered(&keys, 10, Duration::from_secs(60)).await;
    assert_eq!(up.delivered("sub_0"), (0..10).collect::<Vec<_>>());
    let arrivals = up.arrivals("sub_0");
    let tries = arrivals.iter().filter(|s| **s == 2).count();
    assert!(
        tries >= 6,
        "the 3rd event failed five times, then went: {arrivals:?}"
    );
    let mut want = vec![0, 1];
    want.extend(std::iter::repeat_n(2, tries));
    want.extend(3..10);
    assert_eq!(
        arrivals, want,
        "the later events waited for the 3rd, without attempts of their own"
    );
    assert_eq!(up.overlaps(), vec![]);
    gw.stop().await;
}
for_each_store!(
    a_failing_head_holds_only_its_key,
    super::a_failing_head_holds_only_its_key
);

/// `block`: a dead head holds its key, visible as blocked, until it is replayed
/// through the admin API; then it goes first and the rest follows in order. `skip`:
/// the dead one is passed over and its audit trail says so.
async fn dead_heads(backend: Backend) {
    for on_dead in ["block", "skip"] {
        let h = StoreHandle::new(backend);
        let up = KeyedUpstream::start(
            Duration::from_millis(1),
            Box::new(|key, seq, attempt| {
                if key == "sub_0" && seq == 1 && attempt == 1 {
                    400
                } else {
                    200
                }
            }),
        )
        .await;
        let gw = Gateway::start(gateway_config(&h, &ordered_source(&up.url, on_dead, ""))).await;
        let keys = keys(2);
        post_lines(std::slice::from_ref(&gw.ingest), &keys, 4).await;
        let c = http();
        let stats = async || -> serde_json::Value {
            get_json(&c, &format!("{}/admin/stats", gw.admin)).await["sources"][0]["routes"][0]
                .clone()
        };
        if on_dead == "block" {
            up.wait_delivered(&keys[1..], 4, Duration::from_secs(30))
                .await;
            wait_until_ok(
                "the key to show as blocked",
                Duration::from_secs(10),
                async || match stats().await["blocked_keys"].as_u64() {
                    Some(1) => Ok(()),
                    other => Err(format!("{other:?}")),
                },
            )
            .await;
            assert_eq!(
                up.delivered("sub_0"),
                vec![0],
                "the key waits behind its dead head"
            );
            // The dead one, found through the admin API, replayed.
            let dead = get_json(&c, &format!("{}/admin/entries?status=dead", gw.admin)).await;
            let id = dead["entries"][0]["id"].as_str().unwrap().to_string();
            let detail = get_json(&c, &format!("{}/admin/entries/{id}", gw.admin)).await;
            assert_eq!(detail["deliveries"][0]["order"]["key"], "sub_0");
            assert_eq!(detail["deliveries"][0]["order"]["on_dead"], "block");
            let r = c
                .post(format!("{}/admin/entries/{id}/replay", gw.admin))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 202);
            let body: serde_json::Value = r.json().await.unwrap();
            assert_eq!(body["lines"][0]["key"], "sub_0");
            assert_eq!(body["lines"][0]["ahead"], 0, "{body}");
            assert_eq!(body["lines"][0]["behind"], 2, "{body}");
            up.wait_delivered(&keys, 4, Duration::from_secs(30)).await;
            assert_eq!(up.delivered("sub_0"), vec![0, 1, 2, 3]);
            wait_until_ok(
                "no key blocked any more",
                Duration::from_secs(10),
                async || match stats().await["blocked_keys"].as_u64() {
                    Some(0) => Ok(()),
                    other => Err(format!("{other:?}")),
                },
            )
            .await;
        } else {
            wait_until_ok(
                "the rest of sub_0 delivered",
                Duration::from_secs(30),
                async || match up.delivered("sub_0") {
                    d if d == [0, 2, 3] => Ok(()),
                    d => Err(format!("{d:?}")),
                },
            )
            .await;
            let dead = get_json(&c, &format!("{}/admin/entries?status=dead", gw.admin)).await;
            let id = dead["entries"][0]["id"].as_str().unwrap().to_string();
            let detail = get_json(&c, &format!("{}/admin/entries/{id}", gw.admin)).await;
            let skipped = detail["audit"]
                .as_array()
                .is_some_and(|a| a.iter().any(|e| e["action"] == "skip"));
            assert!(skipped, "{detail}");
        }
        assert_eq!(up.overlaps(), vec![]);
        gw.stop().await;
    }
}
for_each_store!(a_dead_head_blocks_or_is_skipped, super::dead_heads);

/// Two gateways on one Redis; one is killed (SIGKILL) in the middle of deliveries:
/// the deliveries it held are taken back when their leases run out and go before
/// the rest of their keys' lines; no key ever has two deliveries in flight.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_gateway_loses_no_order() {
    let h = StoreHandle::new(Backend::Redis);
    let up = KeyedUpstream::start(Duration::from_millis(150), Box::new(|_, _, _| 200)).await;
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "{}\n[forwarder]\npoll_interval = \"50ms\"\nlease = \"3s\"\n{}",
        h.toml(),
        ordered_source(&up.url, "skip", "timeout = \"2s\"")
    );
    let cfg = write_config(dir.path(), &text);
    let mut one = ChildGateway::spawn(&cfg, &[], &dir.path().join("one.log"));
    let two = ChildGateway::spawn(&cfg, &[], &dir.path().join("two.log"));
    let keys = keys(6);
    post_lines(&[one.ingest.clone(), two.ingest.clone()], &keys, 8).await;
    // Kill one while deliveries are in flight.
    wait_until_ok(
        "deliveries under way",
        Duration::from_secs(30),
        async || {
            let n: usize = keys.iter().map(|k| up.arrivals(k).len()).sum();
            if n >= 10 { Ok(()) } else { Err(n) }
        },
    )
    .await;
    one.kill();
    up.wait_delivered(&keys, 8, Duration::from_secs(60)).await;
    for k in &keys {
        // At-least-once: a delivery the killed gateway had in flight may arrive
        // twice, but always before the next of its key.
        let mut got = up.arrivals(k);
        got.dedup();
        assert_eq!(got, (0..8).collect::<Vec<_>>(), "{k}: {:?}", up.arrivals(k));
    }
    assert_eq!(up.overlaps(), vec![], "a key had two deliveries in flight");
    drop(two);
}
