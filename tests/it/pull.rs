//! Pull routes and their consumer API (`/pull/` on the ingest listener): deliveries
//! wait for consumers, are leased, acknowledged or refused, and every rule of a
//! route (signature, order, budget, dead letters) holds as for a push.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use base64::Engine;
use serde_json::{Value, json};

use hookgate::config;
use hookgate::provider::Registry;
use hookgate::store::Status;

use crate::admin::Admin;
use crate::for_each_store;
use crate::forward::{DEST_SECRET, FAST};
use crate::queues::payment;
use crate::support::*;

/// The consumer token of the pull routes.
pub const TOKEN: &str = "pull-token-0123456789abcdef";

/// A Stripe source `shop` with one pull route `dev` (more route keys `route_keys`),
/// its deliveries signed with [`DEST_SECRET`] and ordered by customer.
pub fn pull_config(h: &StoreHandle, source_keys: &str, route_keys: &str) -> String {
    format!(
        "{}\n{FAST}\n[[sources]]\nname = \"shop\"\nprovider = \"stripe\"\nsecret = \"{STRIPE_SECRET}\"\n\
         destination_secret = \"{DEST_SECRET}\"\n{source_keys}\n\
         [sources.retry]\nbase = \"100ms\"\ncap = \"500ms\"\n\
         [[sources.routes]]\nname = \"dev\"\ndestination = \"pull\"\npull_token_env = \"PULL_TOKEN\"\n\
         order = {{ by = \"json:/data/object/customer\" }}\n{route_keys}\n",
        h.toml()
    )
}

pub fn env(var: &str) -> Option<String> {
    (var == "PULL_TOKEN").then(|| TOKEN.to_string())
}

pub async fn start(text: &str) -> Gateway {
    Gateway::start(config::from_toml_str(text, &env).expect("config")).await
}

/// `POST /pull/shop/dev{suffix}` with `token` and `body`: the status and the JSON.
pub async fn call(gw: &Gateway, suffix: &str, token: Option<&str>, body: Value) -> (u16, Value) {
    let mut req = http()
        .post(format!("{}/pull/shop/dev{suffix}", gw.ingest))
        .json(&body);
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let res = req.send().await.expect("pull request");
    let status = res.status().as_u16();
    let json = res.json().await.unwrap_or(Value::Null);
    (status, json)
}

/// Pull up to `max`, waiting up to `wait`, each leased `lease`. Each delivery's
/// body text, as the answer holds it, is added as `body_text`.
pub async fn pull(gw: &Gateway, max: u64, wait: &str, lease: &str) -> Vec<Value> {
    #[derive(serde::Deserialize)]
    struct Raw {
        deliveries: Vec<RawDelivery>,
    }
    #[derive(serde::Deserialize)]
    struct RawDelivery {
        body: Box<serde_json::value::RawValue>,
    }
    let res = http()
        .post(format!("{}/pull/shop/dev", gw.ingest))
        .bearer_auth(TOKEN)
        .json(&json!({"max": max, "wait": wait, "lease": lease}))
        .send()
        .await
        .expect("pull request");
    let st = res.status().as_u16();
    let text = res.text().await.unwrap();
    assert_eq!(st, 200, "{text}");
    let raw: Raw = serde_json::from_str(&text).unwrap();
    let json: Value = serde_json::from_str(&text).unwrap();
    let mut out = json["deliveries"].as_array().cloned().unwrap_or_default();
    for (d, r) in out.iter_mut().zip(raw.deliveries) {
        d["body_text"] = Value::String(r.body.get().to_string());
    }
    out
}

pub async fn ack(gw: &Gateway, deliveries: &[Value]) -> (u16, Value) {
    let receipts: Vec<&Value> = deliveries.iter().map(|d| &d["receipt"]).collect();
    call(gw, "/ack", Some(TOKEN), json!({"receipts": receipts})).await
}

/// The exact bytes of a pulled delivery's body.
fn body_bytes(d: &Value) -> Vec<u8> {
    match d["body_encoding"].as_str() {
        Some("base64") => base64::engine::general_purpose::STANDARD
            .decode(d["body"].as_str().unwrap())
            .unwrap(),
        _ => d["body_text"].as_str().unwrap().as_bytes().to_vec(),
    }
}

/// The customer a pulled payment is for.
fn customer(d: &Value) -> String {
    let body: Value = serde_json::from_slice(&body_bytes(d)).unwrap();
    body["data"]["object"]["customer"]
        .as_str()
        .unwrap()
        .to_string()
}

async fn pulled_signed_acked(backend: Backend) {
    let h = StoreHandle::new(backend);
    let gw = start(&pull_config(&h, "", "")).await;
    let mut ids = Vec::new();
    for n in 0..20 {
        ids.push(
            crate::queues::post(
                &gw,
                &payment(&format!("evt_p{n}"), &format!("cus_{}", n % 4)),
            )
            .await,
        );
    }
    // Nothing is pushed: the deliveries wait for a consumer.
    let store = h.open().await;
    let reg = Registry::builtin().unwrap();
    let sw = hookgate::provider::Verifier::new(
        reg.get("standard-webhooks").unwrap().clone(),
        &[hookgate::config::Secret::new(DEST_SECRET)],
    )
    .unwrap();
    let mut got: Vec<Value> = Vec::new();
    let mut per_key: BTreeMap<String, Vec<String>> = BTreeMap::new();
    while got.len() < 20 {
        let batch = pull(&gw, 100, "2s", "30s").await;
        assert!(!batch.is_empty(), "the backlog is pulled");
        // One delivery per key at a time: a key's next waits for its lease.
        let keys: HashSet<String> = batch.iter().map(customer).collect();
        assert_eq!(keys.len(), batch.len(), "two of one key leased at once");
        for d in &batch {
            assert_eq!(d["attempt"], 1);
            let bytes = body_bytes(d);
            let headers: http::HeaderMap = d["headers"]
                .as_object()
                .unwrap()
                .iter()
                .map(|(k, v)| {
                    (
                        http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                        http::HeaderValue::from_str(v.as_str().unwrap()).unwrap(),
                    )
                })
                .collect();
            assert_eq!(headers["hookgate-source"], "shop");
            let req = hookgate::provider::Request {
                method: "POST",
                path: "/hook",
                url: None,
                headers: &headers,
                body: &bytes,
            };
            sw.verify(req, now_secs())
                .unwrap_or_else(|e| panic!("webhook-signature does not verify: {e}"));
            per_key
                .entry(customer(d))
                .or_default()
                .push(d["entry_id"].as_str().unwrap().to_string());
        }
        let (st, json) = ack(&gw, &batch).await;
        assert_eq!(st, 200, "{json}");
        assert!(
            json["results"]
                .as_array()
                .unwrap()
                .iter()
                .all(|r| r["result"] == "acked"),
            "{json}"
        );
        got.extend(batch);
    }
    // Each key in the order its webhooks arrived; each delivered once.
    for (key, order) in &per_key {
        let mut sorted = order.clone();
        sorted.sort();
        assert_eq!(order, &sorted, "key {key} out of order");
    }
    let unique: HashSet<&str> = got
        .iter()
        .map(|d| d["entry_id"].as_str().unwrap())
        .collect();
    assert_eq!(unique.len(), 20);
    for id in &ids {
        let entry = store.get(id).await.unwrap().unwrap();
        assert_eq!(entry.status, Status::Delivered, "{id}");
        let attempts = store.attempts(id).await.unwrap();
        assert_eq!(attempts.len(), 1);
        assert!(
            attempts[0]
                .answer
                .as_deref()
                .unwrap_or("")
                .starts_with("acked by pull_token"),
            "the attempt names its consumer: {attempts:?}"
        );
    }
    // Nothing is left, and an ack of an acked receipt is refused as expired.
    assert!(pull(&gw, 10, "0s", "30s").await.is_empty());
    let (st, json) = ack(&gw, &got[..1]).await;
    assert_eq!(st, 409, "{json}");
    assert_eq!(json["results"][0]["result"], "expired");
    store.close().await;
    gw.stop().await;
}
for_each_store!(
    pulled_deliveries_are_signed_ordered_and_acked_once,
    super::pulled_signed_acked
);

/// Wrong or missing tokens are 401 and lease nothing; an admin token is no consumer
/// token, and a consumer token opens nothing on the admin listener.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_token_is_refused_before_anything_is_leased() {
    let h = StoreHandle::new(Backend::Embedded);
    let text = format!(
        "{}\n[admin]\ntoken_env = \"ADMIN_TOKEN\"\n",
        pull_config(&h, "", "")
    );
    let env = |v: &str| match v {
        "ADMIN_TOKEN" => Some("admin-token-0123456789".to_string()),
        other => env(other),
    };
    let gw = Gateway::start(config::from_toml_str(&text, &env).unwrap()).await;
    crate::queues::post(&gw, &payment("evt_tok", "cus_1")).await;
    for token in [None, Some("wrong"), Some("admin-token-0123456789")] {
        let (st, _) = call(&gw, "", token, json!({"max": 10})).await;
        assert_eq!(st, 401, "{token:?}");
    }
    // Another route's name, or a route that is not pulled: the same 401.
    let res = http()
        .post(format!("{}/pull/shop/nope", gw.ingest))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 401);
    let res = http()
        .get(format!("{}/admin/entries?source=shop", gw.admin))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 401, "a consumer token on the admin API");
    // Nothing was leased: the one delivery is there for the right token.
    let got = pull(&gw, 10, "0s", "30s").await;
    assert_eq!(got.len(), 1);
    gw.stop().await;
}

/// A nack is a failed attempt with the consumer's `retry_in`; past the budget the
/// delivery is dead in its group, and replaying the group makes it pullable again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nacks_spend_the_budget_and_a_replayed_group_is_pulled_again() {
    let h = StoreHandle::new(Backend::Embedded);
    let gw = start(&pull_config(&h, "", "retry = { max_attempts = 2 }")).await;
    let admin = Admin::new(&gw);
    let id = crate::queues::post(&gw, &payment("evt_nack", "cus_n")).await;
    for n in 1..=2u64 {
        let got = pull(&gw, 1, "5s", "30s").await;
        assert_eq!(got.len(), 1);
        assert_eq!(got[0]["attempt"], n);
        let (st, json) = call(
            &gw,
            "/nack",
            Some(TOKEN),
            json!({"receipt": got[0]["receipt"], "retry_in": "200ms"}),
        )
        .await;
        assert_eq!(st, 200, "{json}");
        assert_eq!(json["results"][0]["result"], "nacked");
    }
    let group = crate::queues::dead_group(&admin, "dev", 1).await;
    assert_eq!(group["failure"], "nacked", "{group}");
    assert!(pull(&gw, 1, "0s", "30s").await.is_empty());
    let (st, json) = admin
        .call(
            "POST",
            "/admin/dead-letters/replay",
            Some(json!({"source": "shop", "route": "dev", "failure": "nacked"})),
        )
        .await;
    assert!(st == 200 || st == 202, "{st} {json}");
    let got = pull(&gw, 1, "5s", "30s").await;
    assert_eq!(got.len(), 1, "the replayed delivery is pulled again");
    assert_eq!(got[0]["entry_id"], id.as_str());
    let (st, _) = ack(&gw, &got).await;
    assert_eq!(st, 200);
    gw.stop().await;
}

/// An expired lease hands the delivery out again at once; the old receipt is 409.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_lease_is_handed_out_again_and_its_receipt_is_refused() {
    let h = StoreHandle::new(Backend::Embedded);
    let gw = start(&pull_config(&h, "", "")).await;
    crate::queues::post(&gw, &payment("evt_exp", "cus_e")).await;
    let first = pull(&gw, 1, "0s", "5s").await;
    assert_eq!(first.len(), 1);
    // Long-polled: it comes back once the 5 s lease has ended.
    let again = pull(&gw, 1, "15s", "30s").await;
    assert_eq!(again.len(), 1, "handed out again after the lease");
    assert_eq!(again[0]["entry_id"], first[0]["entry_id"]);
    assert_eq!(again[0]["attempt"], 1, "one expiry is not a failed attempt");
    let (st, json) = ack(&gw, &first).await;
    assert_eq!(st, 409, "{json}");
    assert_eq!(json["results"][0]["result"], "expired");
    let (st, _) = ack(&gw, &again).await;
    assert_eq!(st, 200);
    gw.stop().await;
}

/// A long poll waiting when the gateway stops is answered at once, empty.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_long_poll_is_answered_at_shutdown() {
    let h = StoreHandle::new(Backend::Embedded);
    let gw = start(&pull_config(&h, "", "")).await;
    let url = format!("{}/pull/shop/dev", gw.ingest);
    let waiting = tokio::spawn(async move {
        let started = std::time::Instant::now();
        let res = http()
            .post(url)
            .bearer_auth(TOKEN)
            .json(&json!({"wait": "30s"}))
            .send()
            .await
            .unwrap();
        (
            res.status().as_u16(),
            res.json::<Value>().await.unwrap(),
            started.elapsed(),
        )
    });
    // Seen by the gateway (then it waits), as GET /admin/routes tells.
    let admin = Admin::new(&gw);
    wait_until_ok("the consumer seen", Duration::from_secs(10), async || {
        let (_, routes) = admin.call("GET", "/admin/routes", None).await;
        let consumers = routes
            .as_array()
            .and_then(|rs| rs.iter().find(|r| r["route"] == "dev"))
            .map(|r| r["consumers"].clone())
            .unwrap_or_default();
        match consumers.as_array().and_then(|c| c.first()) {
            Some(c) if c["token"] == "pull_token" && c["address"] == "127.0.0.1" => Ok(()),
            _ => Err(format!("{routes}")),
        }
    })
    .await;
    gw.stop().await;
    let (st, json, took) = waiting.await.unwrap();
    assert_eq!(st, 200, "{json}");
    assert_eq!(json["deliveries"], json!([]));
    assert!(
        took < Duration::from_secs(10),
        "answered at shutdown, not after 30 s: {took:?}"
    );
}

/// Webhooks that wait with no consumer for longer than the route's `max_age` (and
/// its one attempt) allow a push: none is dead, and a consumer started later
/// receives them all, each key in order.
async fn asleep_past_the_budget(backend: Backend) {
    let h = StoreHandle::new(backend);
    let gw = start(&pull_config(
        &h,
        "",
        "retry = { max_attempts = 1, max_age = \"1s\" }",
    ))
    .await;
    let admin = Admin::new(&gw);
    let mut ids = Vec::new();
    for n in 0..12 {
        ids.push(
            crate::queues::post(
                &gw,
                &payment(&format!("evt_asleep{n}"), &format!("cus_{}", n % 3)),
            )
            .await,
        );
    }
    // The budget's whole age passes, and more, with no consumer.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (_, groups) = admin
        .call("GET", "/admin/dead-letters?source=shop&route=dev", None)
        .await;
    assert_eq!(groups["groups"], json!([]), "{groups}");
    let mut seen: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut total = 0;
    while total < ids.len() {
        let batch = pull(&gw, 100, "5s", "30s").await;
        assert!(
            !batch.is_empty(),
            "all {} are pulled; {total} so far",
            ids.len()
        );
        for d in &batch {
            assert_eq!(d["attempt"], 1);
            seen.entry(customer(d))
                .or_default()
                .push(d["entry_id"].as_str().unwrap().to_string());
        }
        total += batch.len();
        let (st, json) = ack(&gw, &batch).await;
        assert_eq!(st, 200, "{json}");
    }
    for (key, order) in &seen {
        let mut sorted = order.clone();
        sorted.sort();
        assert_eq!(order, &sorted, "key {key} out of order");
    }
    let store = h.open().await;
    for id in &ids {
        assert_eq!(
            store.get(id).await.unwrap().unwrap().status,
            Status::Delivered
        );
    }
    store.close().await;
    gw.stop().await;
}
for_each_store!(
    a_consumer_away_longer_than_the_budget_loses_nothing,
    super::asleep_past_the_budget
);

/// One token may have 16 long polls waiting: of 20 sent at once, 16 wait (and are
/// answered, empty, when their wait ends) and 4 are 429 with Retry-After; a poll
/// without a wait is never refused, and once the 16 are answered a slot is free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_has_at_most_16_long_polls_waiting() {
    let h = StoreHandle::new(Backend::Embedded);
    let gw = start(&pull_config(&h, "", "")).await;
    let url = format!("{}/pull/shop/dev", gw.ingest);
    let started = std::time::Instant::now();
    let mut polls = Vec::new();
    for _ in 0..20 {
        let url = url.clone();
        polls.push(tokio::spawn(async move {
            let res = http()
                .post(url)
                .bearer_auth(TOKEN)
                .json(&json!({"wait": "10s"}))
                .send()
                .await
                .unwrap();
            let retry_after = res
                .headers()
                .get("retry-after")
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            (res.status().as_u16(), retry_after)
        }));
    }
    // Meanwhile, a poll that does not wait is answered at once.
    assert_eq!(pull(&gw, 1, "0s", "30s").await.len(), 0);
    let mut statuses = BTreeMap::new();
    for p in polls {
        let (st, retry_after) = p.await.unwrap();
        if st == 429 {
            assert_eq!(retry_after.as_deref(), Some("1"));
        }
        *statuses.entry(st).or_insert(0) += 1;
    }
    assert!(
        started.elapsed() < Duration::from_secs(10) + Duration::from_secs(8),
        "the 20 polls were not sent at once: {:?}",
        started.elapsed()
    );
    assert_eq!(statuses, BTreeMap::from([(200, 16), (429, 4)]));
    let (st, json) = call(&gw, "", Some(TOKEN), json!({"wait": "1s"})).await;
    assert_eq!(st, 200, "{json}");
    gw.stop().await;
}

/// A receipt is good on every gateway sharing the store: one pulled from one
/// gateway is acknowledged through another, and the delivery is delivered once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receipt_is_acknowledged_through_another_gateway() {
    let h = StoreHandle::new(Backend::Redis);
    let text = pull_config(&h, "", "");
    let one = start(&text).await;
    let two = start(&text).await;
    let id = crate::queues::post(&one, &payment("evt_two_gw", "cus_2")).await;
    let got = pull(&one, 1, "5s", "30s").await;
    assert_eq!(got.len(), 1);
    let (st, json) = ack(&two, &got).await;
    assert_eq!(st, 200, "{json}");
    assert_eq!(json["results"][0]["result"], "acked");
    // The gateway that handed it out ends its lease without effect.
    let (st, json) = ack(&one, &got).await;
    assert_eq!(st, 409, "{json}");
    let store = h.open().await;
    assert_eq!(
        store.get(&id).await.unwrap().unwrap().status,
        Status::Delivered
    );
    assert_eq!(store.attempts(&id).await.unwrap().len(), 1);
    store.close().await;
    one.stop().await;
    two.stop().await;
}
