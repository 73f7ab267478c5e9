//! RabbitMQ (AMQP 0-9-1) destinations end to end, against a private RabbitMQ node:
//! signed webhooks in, the queue holds each (persistent, `message_id` the
//! delivery's identity) with the delivery headers, whose Standard Webhooks
//! signature the test verifies itself, the transformed body where a route has a
//! transform, and a key's messages in the order accepted; a replay is published
//! again under a new `message_id`; an unroutable message and a missing exchange are
//! refused for good as `not-found` with the broker's reason, and replaying their
//! groups once the binding and the exchange exist delivers them; refused
//! credentials fail as `auth-refused`, publish nothing and are never shown; and the
//! broker SIGKILLed under load loses no acknowledged webhook.

use std::collections::HashMap;
use std::time::Duration;

use hookgate::forward::request::{decode_destination_secret, sign};
use hookgate::store::Status;
use lapin::message::BasicGetMessage;
use lapin::options::{
    BasicGetOptions, ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{Channel, Connection, ConnectionProperties, ExchangeKind};
use serde_json::json;

use crate::admin::Admin;
use crate::forward::DEST_SECRET;
use crate::queues::{
    Load, Refused, check_config_connect, config, config_text, dead_group, payment, post,
};
use crate::support::*;

/// A channel of the test's own on `mq` (as guest, from loopback).
async fn channel(mq: &RabbitMq) -> (Connection, Channel) {
    let conn = Connection::connect(&mq.url(), ConnectionProperties::default())
        .await
        .expect("connect to rabbitmq");
    let ch = conn.create_channel().await.expect("channel");
    (conn, ch)
}

async fn exchange(ch: &Channel, name: &str) {
    ch.exchange_declare(
        name.into(),
        ExchangeKind::Topic,
        ExchangeDeclareOptions {
            durable: true,
            ..ExchangeDeclareOptions::default()
        },
        FieldTable::default(),
    )
    .await
    .expect("declare exchange");
}

/// A durable quorum queue `name`, bound to `exchange` by `key` when given.
async fn queue(ch: &Channel, name: &str, bind: Option<(&str, &str)>) {
    let mut args = FieldTable::default();
    args.insert(
        "x-queue-type".into(),
        AMQPValue::LongString("quorum".into()),
    );
    ch.queue_declare(
        name.into(),
        QueueDeclareOptions {
            durable: true,
            ..QueueDeclareOptions::default()
        },
        args,
    )
    .await
    .expect("declare queue");
    if let Some((exchange, key)) = bind {
        ch.queue_bind(
            name.into(),
            exchange.into(),
            key.into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect("bind queue");
    }
}

/// Take messages off `queue` until it has given `n`, then check it holds no more.
async fn take(ch: &Channel, queue: &str, n: usize) -> Vec<BasicGetMessage> {
    let mut got = Vec::new();
    wait_until(
        &format!("{n} messages from {queue}"),
        Duration::from_secs(30),
        async || {
            while let Ok(Some(m)) = ch
                .basic_get(queue.into(), BasicGetOptions { no_ack: true })
                .await
            {
                got.push(m);
            }
            got.len() >= n
        },
    )
    .await;
    assert_eq!(got.len(), n, "no more than {n} messages from {queue}");
    got
}

/// A header of a message, as text.
fn header(m: &BasicGetMessage, name: &str) -> Option<String> {
    let headers = m.delivery.properties.headers().as_ref()?;
    match headers.inner().get(name)? {
        AMQPValue::LongString(s) => Some(String::from_utf8_lossy(s.as_bytes()).into_owned()),
        _ => None,
    }
}

fn message_id(m: &BasicGetMessage) -> String {
    m.delivery
        .properties
        .message_id()
        .as_ref()
        .map(|s| s.as_str().to_string())
        .expect("message_id")
}

/// The message's `webhook-signature` is the Standard Webhooks signature of its
/// body, under the route's destination secret.
fn assert_signed(m: &BasicGetMessage) {
    let key = decode_destination_secret(DEST_SECRET);
    let id = header(m, "webhook-id").expect("webhook-id");
    let ts: i64 = header(m, "webhook-timestamp")
        .expect("webhook-timestamp")
        .parse()
        .unwrap();
    assert_eq!(
        header(m, "webhook-signature"),
        Some(sign(&key, &id, ts, &m.delivery.data)),
        "the signature covers the body published"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_holds_each_webhook_with_its_headers_a_keys_order_and_replays() {
    let h = StoreHandle::new(Backend::Embedded);
    let mq = tokio::task::spawn_blocking(RabbitMq::start).await.unwrap();
    let (_conn, ch) = channel(&mq).await;
    exchange(&ch, "hooks").await;
    queue(&ch, "raw", Some(("hooks", "shop.#"))).await;
    queue(&ch, "flat", None).await;
    let url = format!("amqp://127.0.0.1:{}/%2F", mq.port());
    let gw = Gateway::start(config(
        &h,
        &[
            (
                "raw",
                &format!("{url}?exchange=hooks&routing_key={{source}}.{{event_type}}"),
                "[sources.routes.order]\nby = \"json:/data/object/customer\"",
            ),
            (
                "flat",
                &format!("{url}?routing_key=flat"),
                "transform = '{order: .data.object.id, cents: .data.object.amount}'",
            ),
        ],
    ))
    .await;
    let mut accepted = Vec::new();
    for i in 0..8 {
        let customer = if i % 2 == 0 { "cus_a" } else { "cus_b" };
        let event = format!("evt_a{i}");
        let id = post(&gw, &payment(&event, customer)).await;
        accepted.push((id, customer, event));
    }
    let raw = take(&ch, "raw", 8).await;
    let flat = take(&ch, "flat", 8).await;
    let mut by_id = HashMap::new();
    for m in &raw {
        assert_eq!(
            m.delivery.routing_key.as_str(),
            "shop.payment_intent%2Esucceeded"
        );
        assert_eq!(
            *m.delivery.properties.delivery_mode(),
            Some(2),
            "persistent"
        );
        assert_eq!(
            m.delivery
                .properties
                .content_type()
                .as_ref()
                .map(|c| c.as_str()),
            Some("application/json")
        );
        assert_signed(m);
        assert_eq!(header(m, "hookgate-source").as_deref(), Some("shop"));
        assert_eq!(
            header(m, "hookgate-event-type").as_deref(),
            Some("payment_intent.succeeded")
        );
        assert!(by_id.insert(message_id(m), m).is_none(), "twice");
    }
    for (id, customer, event) in &accepted {
        let m = by_id
            .get(&format!("{id}:raw:0"))
            .unwrap_or_else(|| panic!("no message of {id}"));
        assert_eq!(m.delivery.data, payment(event, customer).as_bytes());
    }
    for customer in ["cus_a", "cus_b"] {
        let want: Vec<String> = accepted
            .iter()
            .filter(|(_, c, _)| *c == customer)
            .map(|(id, _, _)| format!("{id}:raw:0"))
            .collect();
        let got: Vec<String> = raw
            .iter()
            .map(message_id)
            .filter(|id| want.contains(id))
            .collect();
        assert_eq!(got, want, "{customer}'s messages in the order accepted");
    }
    for m in &flat {
        assert_eq!(header(m, "hookgate-transformed").as_deref(), Some("true"));
        assert_signed(m);
        let got: serde_json::Value = serde_json::from_slice(&m.delivery.data).unwrap();
        assert_eq!(got["cents"], 2050, "{got}");
    }
    // The attempt names the broker's answer; a replay is published again, under a
    // new message id.
    let admin = Admin::at(&gw.admin);
    let first = &accepted[0].0;
    let answered = wait_until_ok(
        "the confirm recorded",
        Duration::from_secs(10),
        async || {
            let (_, e) = admin
                .call("GET", &format!("/admin/entries/{first}"), None)
                .await;
            let answers: Vec<String> = e["attempt_log"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|a| a["answer"].as_str().map(String::from))
                .collect();
            if answers.len() == 2 {
                Ok(answers)
            } else {
                Err(e.to_string())
            }
        },
    )
    .await;
    assert_eq!(answered, ["confirmed", "confirmed"]);
    let (st, v) = admin
        .call(
            "POST",
            &format!("/admin/entries/{first}/replay"),
            Some(json!({"route": "raw"})),
        )
        .await;
    assert!(st < 300, "{st} {v}");
    let again = take(&ch, "raw", 1).await;
    assert_eq!(message_id(&again[0]), format!("{first}:raw:1"));
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unroutable_and_no_exchange_are_refused_as_not_found_and_their_groups_deliver_later() {
    let h = StoreHandle::new(Backend::Embedded);
    let mq = tokio::task::spawn_blocking(RabbitMq::start).await.unwrap();
    let (_conn, ch) = channel(&mq).await;
    exchange(&ch, "hooks").await;
    let url = format!("amqp://127.0.0.1:{}/%2F", mq.port());
    let gw = Gateway::start(config(
        &h,
        &[
            (
                "lost",
                &format!("{url}?exchange=hooks&routing_key=nobody"),
                "",
            ),
            ("gone", &format!("{url}?exchange=missing&routing_key=x"), ""),
        ],
    ))
    .await;
    for i in 0..3 {
        post(&gw, &payment(&format!("evt_u{i}"), "cus_a")).await;
    }
    let admin = Admin::at(&gw.admin);
    for route in ["lost", "gone"] {
        let g = dead_group(&admin, route, 3).await;
        assert_eq!(g["failure"], "not-found", "{g}");
    }
    // Refused for good at the first attempt, with the broker's reason.
    let (_, listed) = admin
        .call("GET", "/admin/entries?source=shop&limit=10", None)
        .await;
    let id = listed["entries"][0]["id"].as_str().unwrap().to_string();
    let (_, entry) = admin
        .call("GET", &format!("/admin/entries/{id}"), None)
        .await;
    let text = entry.to_string();
    assert!(
        text.contains("unroutable, returned by the broker (312 NO_ROUTE)"),
        "{text}"
    );
    assert!(text.contains("no such exchange (404"), "{text}");
    for route in ["lost", "gone"] {
        let d = entry["deliveries"]
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["route"] == route)
            .unwrap()
            .clone();
        assert_eq!(d["attempts"], 1, "final at once: {d}");
    }
    // The binding and the exchange made, the groups replayed: delivered.
    queue(&ch, "found", Some(("hooks", "nobody"))).await;
    exchange(&ch, "missing").await;
    queue(&ch, "late", Some(("missing", "x"))).await;
    for route in ["lost", "gone"] {
        let (st, v) = admin
            .call(
                "POST",
                "/admin/dead-letters/replay",
                Some(json!({"source": "shop", "route": route, "failure": "not-found"})),
            )
            .await;
        assert!(st < 300, "{st} {v}");
    }
    take(&ch, "found", 3).await;
    take(&ch, "late", 3).await;
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_credentials_fail_as_auth_refused_publish_nothing_and_are_never_shown() {
    let h = StoreHandle::new(Backend::Embedded);
    let mq = tokio::task::spawn_blocking(RabbitMq::start).await.unwrap();
    let password = "RightPw_5e8a1d";
    let wrong = "WrongPw_2c7f9b";
    mq.add_user("hook", password);
    let (_conn, ch) = channel(&mq).await;
    queue(&ch, "jobs", None).await;
    let refused = Refused::start(
        &h,
        &format!("amqp://127.0.0.1:{}/%2F?routing_key=jobs", mq.port()),
        wrong,
    )
    .await;
    take(&ch, "jobs", 0).await;
    refused.assert_never_shown(&[wrong, password]).await;
}

/// 200 webhooks a second for 3 seconds into a durable queue; the broker
/// SIGKILLed once a hundred are in the queue and started again after 1.5 s (three
/// times the route's timeout). Every acknowledged webhook is in the queue; a
/// confirm the kill lost means one more copy, at most the route's concurrency of
/// them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rabbitmq_sigkilled_under_load_holds_every_acknowledged_webhook() {
    let h = StoreHandle::new(Backend::Embedded);
    let mut mq = tokio::task::spawn_blocking(RabbitMq::start).await.unwrap();
    {
        // A classic durable queue: a single node's quorum queue did not confirm
        // publishes again after the node was SIGKILLed and restarted (RabbitMQ 3.10).
        let (conn, ch) = channel(&mq).await;
        ch.queue_declare(
            "jobs".into(),
            QueueDeclareOptions {
                durable: true,
                ..QueueDeclareOptions::default()
            },
            FieldTable::default(),
        )
        .await
        .expect("declare queue");
        let _ = conn.close(200, "declared".into()).await;
    }
    let concurrency = 8;
    let gw = Gateway::start(config(
        &h,
        &[(
            "q",
            &format!("amqp://127.0.0.1:{}/%2F?routing_key=jobs", mq.port()),
            &format!(
                "[sources.routes.retry]\nmax_attempts = 1000\nmax_age = \"10m\"\n\
                 [sources.routes.delivery]\ntimeout = \"500ms\"\nconcurrency = {concurrency}"
            ),
        )],
    ))
    .await;
    let load = Load::start(&gw.ingest);
    let store = h.open().await;
    wait_until("100 delivered", Duration::from_secs(30), async || {
        store
            .count_status("shop", Status::Delivered)
            .await
            .unwrap_or(0)
            >= 100
    })
    .await;
    mq.kill();
    load.goes_on_for(300).await;
    tokio::task::block_in_place(|| mq.restart());
    let acked = load.finish().await;
    wait_until_ok(
        "every acknowledged webhook delivered",
        Duration::from_secs(90),
        async || {
            let delivered = store
                .count_status("shop", Status::Delivered)
                .await
                .unwrap_or(0);
            if delivered == acked.len() as u64 {
                return Ok(());
            }
            let pending = first_page_with_status(store.as_ref(), Status::Pending, 1).await;
            let dead = first_page_with_status(store.as_ref(), Status::Dead, 1).await;
            if let Some(d) = dead.entries.first() {
                let d = store.get(&d.id).await.ok().flatten().map(|e| e.deliveries);
                return Err(format!("{delivered} delivered; one dead: {d:?}"));
            }
            let why = match pending.entries.first() {
                Some(e) => format!(
                    "{:?}",
                    store.get(&e.id).await.ok().flatten().map(|e| e.deliveries)
                ),
                None => "none pending".into(),
            };
            Err(format!("{delivered} delivered; a pending one: {why}"))
        },
    )
    .await;
    let (_conn, ch) = channel(&mq).await;
    let held = mq.queue_messages("jobs").expect("the queue") as usize;
    let got = take(&ch, "jobs", held).await;
    let mut copies: HashMap<String, usize> = HashMap::new();
    for m in &got {
        *copies.entry(message_id(m)).or_default() += 1;
    }
    for e in &acked {
        assert!(
            copies.contains_key(&format!("{e}:q:0")),
            "{e} lost: {} of {} held",
            copies.len(),
            acked.len()
        );
    }
    let extra = got.len() - copies.len();
    assert!(
        extra <= concurrency,
        "{extra} duplicates, more than the route's concurrency ({concurrency}) for one restart"
    );
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_config_connect_asks_the_broker_and_publishes_nothing() {
    let h = StoreHandle::new(Backend::Embedded);
    let mq = tokio::task::spawn_blocking(RabbitMq::start).await.unwrap();
    let (_conn, ch) = channel(&mq).await;
    exchange(&ch, "hooks").await;
    queue(&ch, "bound", Some(("hooks", "#"))).await;
    queue(&ch, "jobs", None).await;
    let url = format!("amqp://127.0.0.1:{}/%2F", mq.port());
    let dir = tempfile::tempdir().unwrap();
    let path = write_config(
        dir.path(),
        &config_text(
            &h,
            &[
                (
                    "fine",
                    &format!("{url}?exchange=hooks&routing_key={{source}}"),
                    "",
                ),
                ("queue", &format!("{url}?routing_key=jobs"), ""),
                ("gone", &format!("{url}?exchange=missing&routing_key=x"), ""),
                ("noqueue", &format!("{url}?routing_key=nope"), ""),
            ],
            "",
        ),
    );
    let (code, stdout, stderr) = check_config_connect(&path);
    assert_eq!(code, Some(1), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("2 queue destination(s) not ready"),
        "{stderr}"
    );
    for line in [
        "(amqp)",
        "exchange hooks exists",
        "a dry publish with routing key shop was taken (in a transaction rolled back: nothing routed)",
        "queue jobs exists: 0 message(s), 0 consumer(s)",
        "exchange missing: not-found: the broker has no such exchange (404",
        "no queue nope: every message would be returned",
    ] {
        assert!(stdout.contains(line), "{line:?} not in:\n{stdout}");
    }
    for ok in ["shop/fine", "shop/queue"] {
        assert!(
            stdout
                .lines()
                .any(|l| l.starts_with(&format!("destination {ok} ")) && l.ends_with(": ok")),
            "{ok} ok:\n{stdout}"
        );
    }
    // Nothing was routed by the dry publishes.
    take(&ch, "bound", 0).await;
    take(&ch, "jobs", 0).await;
}
