//! NATS JetStream destinations end to end, against a private `nats-server -js`:
//! signed webhooks in, the stream holds each once, with the delivery headers (a
//! Standard Webhooks signature the test verifies itself), the transformed body
//! where a route has a transform, and a key's messages in the order accepted; a
//! replay is published again under a new `Nats-Msg-Id`; a subject no stream takes
//! is retried and then dead as `not-found`, and replaying the group once the
//! stream exists delivers; a paused source publishes nothing until resumed, then
//! in order; refused credentials fail as `auth-refused`, publish nothing, and are
//! never shown.

use std::collections::HashMap;
use std::time::Duration;

use async_nats::jetstream::message::StreamMessage;
use hookgate::forward::request::{decode_destination_secret, sign};
use hookgate::store::Status;
use serde_json::json;

use crate::admin::Admin;
use crate::for_each_store;
use crate::forward::DEST_SECRET;
use crate::queues::{
    Load, Refused, check_config_connect, config, config_text, dead_group, payment, post,
};
use crate::support::*;

fn header(m: &StreamMessage, name: &str) -> Option<String> {
    m.headers.get(name).map(|v| v.as_str().to_string())
}

/// The message's `webhook-signature` is the Standard Webhooks signature of its
/// payload, under the route's destination secret.
fn assert_signed(m: &StreamMessage) {
    let key = decode_destination_secret(DEST_SECRET);
    let id = header(m, "webhook-id").expect("webhook-id");
    let ts: i64 = header(m, "webhook-timestamp")
        .expect("webhook-timestamp")
        .parse()
        .unwrap();
    assert_eq!(
        header(m, "webhook-signature").as_deref(),
        Some(sign(&key, &id, ts, &m.payload).as_str()),
        "the signature covers the payload published"
    );
}

/// Wait until the stream `name` holds `n` messages, and return them.
async fn wait_messages(
    js: &async_nats::jetstream::Context,
    name: &str,
    n: usize,
) -> Vec<StreamMessage> {
    let mut seen = Vec::new();
    wait_until(
        &format!("{n} messages in {name}"),
        Duration::from_secs(20),
        async || {
            seen = stream_messages(js, name).await;
            seen.len() >= n
        },
    )
    .await;
    assert_eq!(seen.len(), n, "no more than {n} messages in {name}");
    seen
}

async fn publishes_each_once(backend: Backend) {
    let h = StoreHandle::new(backend);
    let nats = NatsServer::start();
    let js = nats.jetstream().await;
    make_stream(&js, "HOOKS", &["webhooks.>"], Duration::from_secs(120)).await;
    make_stream(&js, "FLAT", &["flat.>"], Duration::from_secs(120)).await;
    let url = nats.url();
    let cfg = config(
        &h,
        &[
            (
                "raw",
                &format!("{url}/webhooks.{{source}}.{{event_type}}"),
                "[sources.routes.order]\nby = \"json:/data/object/customer\"",
            ),
            (
                "flat",
                &format!("{url}/flat.{{route}}"),
                "transform = '{order: .data.object.id, cents: .data.object.amount}'",
            ),
        ],
    );
    let gw = Gateway::start(cfg).await;
    let mut ids = Vec::new();
    for i in 0..8 {
        let customer = if i % 2 == 0 { "cus_a" } else { "cus_b" };
        let id = post(&gw, &payment(&format!("evt_n{i}"), customer)).await;
        ids.push((id, customer, format!("evt_n{i}")));
    }
    let raw = wait_messages(&js, "HOOKS", 8).await;
    let flat = wait_messages(&js, "FLAT", 8).await;

    let mut by_msg_id = HashMap::new();
    for m in &raw {
        assert_eq!(
            m.subject.as_str(),
            "webhooks.shop.payment_intent%2Esucceeded",
            "each value is one escaped token"
        );
        assert_signed(m);
        assert_eq!(header(m, "hookgate-source").as_deref(), Some("shop"));
        assert_eq!(
            header(m, "hookgate-event-type").as_deref(),
            Some("payment_intent.succeeded")
        );
        assert_eq!(
            header(m, "content-type").as_deref(),
            Some("application/json")
        );
        assert!(header(m, "hookgate-transformed").is_none());
        let msg_id = header(m, "Nats-Msg-Id").expect("Nats-Msg-Id");
        assert!(
            by_msg_id.insert(msg_id.clone(), m.clone()).is_none(),
            "{msg_id} twice"
        );
    }
    for (entry, _, event) in &ids {
        let m = by_msg_id
            .get(&format!("{entry}:raw:0"))
            .unwrap_or_else(|| panic!("no message of {entry}"));
        assert_eq!(
            m.payload.as_ref(),
            payment(
                event,
                if event.ends_with(['0', '2', '4', '6']) {
                    "cus_a"
                } else {
                    "cus_b"
                }
            )
            .as_bytes(),
            "the stored bytes"
        );
        assert_eq!(
            header(m, "hookgate-event-id").as_deref(),
            Some(event.as_str())
        );
    }
    // A key's messages are in the stream in the order they were accepted.
    for customer in ["cus_a", "cus_b"] {
        let accepted: Vec<String> = ids
            .iter()
            .filter(|(_, c, _)| *c == customer)
            .map(|(e, _, _)| format!("{e}:raw:0"))
            .collect();
        let published: Vec<String> = raw
            .iter()
            .map(|m| header(m, "Nats-Msg-Id").unwrap())
            .filter(|id| accepted.contains(id))
            .collect();
        assert_eq!(published, accepted, "{customer}'s messages in order");
    }
    for m in &flat {
        assert_eq!(m.subject.as_str(), "flat.flat");
        assert_eq!(header(m, "hookgate-transformed").as_deref(), Some("true"));
        assert_signed(m);
        let got: serde_json::Value = serde_json::from_slice(&m.payload).unwrap();
        assert_eq!(got["cents"], 2050, "the transformed body: {got}");
    }
    // The store says delivered, and the attempt names the stream's answer.
    let store = h.open().await;
    for (entry, _, _) in &ids {
        wait_until("delivered", Duration::from_secs(10), async || {
            store
                .get(entry)
                .await
                .ok()
                .flatten()
                .is_some_and(|e| e.status == Status::Delivered)
        })
        .await;
    }
    gw.stop().await;
}
for_each_store!(
    a_stream_holds_each_webhook_once_with_its_headers_and_a_keys_order,
    super::publishes_each_once
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_is_published_again_under_a_new_message_id() {
    let h = StoreHandle::new(Backend::Embedded);
    let nats = NatsServer::start();
    let js = nats.jetstream().await;
    make_stream(&js, "HOOKS", &["hooks"], Duration::from_secs(120)).await;
    let gw = Gateway::start(config(&h, &[("q", &format!("{}/hooks", nats.url()), "")])).await;
    let entry = post(&gw, &payment("evt_r1", "cus_a")).await;
    let first = wait_messages(&js, "HOOKS", 1).await;
    assert_eq!(
        header(&first[0], "Nats-Msg-Id"),
        Some(format!("{entry}:q:0"))
    );
    let admin = Admin::at(&gw.admin);
    let answered = wait_until_ok(
        "the stream's answer recorded",
        Duration::from_secs(10),
        async || {
            let (_, e) = admin
                .call("GET", &format!("/admin/entries/{entry}"), None)
                .await;
            match e["attempt_log"][0]["answer"].as_str() {
                Some(a) => Ok(a.to_string()),
                None => Err(e.to_string()),
            }
        },
    )
    .await;
    assert_eq!(answered, "stream HOOKS seq 1");
    let (st, v) = admin
        .call("POST", &format!("/admin/entries/{entry}/replay"), None)
        .await;
    assert!(st < 300, "{st} {v}");
    let both = wait_messages(&js, "HOOKS", 2).await;
    assert_eq!(
        header(&both[1], "Nats-Msg-Id"),
        Some(format!("{entry}:q:1")),
        "the replay's generation is the attempts before it"
    );
    assert_eq!(both[0].payload, both[1].payload);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_stream_is_dead_as_not_found_and_its_group_delivers_once_the_stream_exists() {
    let h = StoreHandle::new(Backend::Embedded);
    let nats = NatsServer::start();
    let js = nats.jetstream().await;
    let gw = Gateway::start(config(
        &h,
        &[(
            "q",
            &format!("{}/orders.new", nats.url()),
            "[sources.routes.retry]\nmax_attempts = 2",
        )],
    ))
    .await;
    let mut entries = Vec::new();
    for i in 0..3 {
        entries.push(post(&gw, &payment(&format!("evt_s{i}"), "cus_a")).await);
    }
    let admin = Admin::at(&gw.admin);
    let group = dead_group(&admin, "q", 3).await;
    assert_eq!(group["failure"], "not-found", "{group}");
    let (_, entry) = admin
        .call("GET", &format!("/admin/entries/{}", entries[0]), None)
        .await;
    assert!(
        entry
            .to_string()
            .contains("no stream answered for the subject"),
        "the broker's reason is kept: {entry}"
    );
    make_stream(&js, "ORDERS", &["orders.>"], Duration::from_secs(120)).await;
    let (st, v) = admin
        .call(
            "POST",
            "/admin/dead-letters/replay",
            Some(json!({"source": "shop", "route": "q", "failure": "not-found"})),
        )
        .await;
    assert!(st < 300, "{st} {v}");
    let held = wait_messages(&js, "ORDERS", 3).await;
    let ids: Vec<String> = held
        .iter()
        .map(|m| header(m, "Nats-Msg-Id").unwrap())
        .collect();
    for e in &entries {
        assert!(
            ids.iter().any(|id| id.starts_with(&format!("{e}:q:"))),
            "{e} in {ids:?}"
        );
    }
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_source_publishes_nothing_until_resumed_then_in_order() {
    let h = StoreHandle::new(Backend::Embedded);
    let nats = NatsServer::start();
    let js = nats.jetstream().await;
    make_stream(&js, "HOOKS", &["hooks"], Duration::from_secs(120)).await;
    let cfg = config(
        &h,
        &[(
            "q",
            &format!("{}/hooks", nats.url()),
            "[sources.routes.order]\nby = \"json:/data/object/customer\"",
        )],
    );
    let window = quiet_window(&cfg);
    let gw = Gateway::start(cfg).await;
    let admin = Admin::at(&gw.admin);
    let (st, _) = admin.call("POST", "/admin/sources/shop/pause", None).await;
    assert_eq!(st, 200);
    let mut entries = Vec::new();
    for i in 0..5 {
        entries.push(post(&gw, &payment(&format!("evt_p{i}"), "cus_a")).await);
    }
    quiet_for("a paused source", window, async || {
        stream_messages(&js, "HOOKS").await.is_empty()
    })
    .await;
    let (st, _) = admin.call("POST", "/admin/sources/shop/resume", None).await;
    assert_eq!(st, 200);
    let held = wait_messages(&js, "HOOKS", 5).await;
    let ids: Vec<String> = held
        .iter()
        .map(|m| header(m, "Nats-Msg-Id").unwrap())
        .collect();
    let expected: Vec<String> = entries.iter().map(|e| format!("{e}:q:0")).collect();
    assert_eq!(ids, expected, "published in the order accepted");
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_credentials_fail_as_auth_refused_publish_nothing_and_are_never_shown() {
    let h = StoreHandle::new(Backend::Embedded);
    let password = "RightPw_4b1c9e";
    let wrong = "WrongPw_7d2a0f";
    let nats = NatsServer::start_with(&format!(
        "authorization {{ user: hook, password: {password} }}"
    ));
    let js = nats
        .jetstream_with(async_nats::ConnectOptions::with_user_and_password(
            "hook".into(),
            password.into(),
        ))
        .await;
    make_stream(&js, "HOOKS", &["hooks"], Duration::from_secs(120)).await;
    let refused = Refused::start(&h, &format!("{}/hooks", nats.url()), wrong).await;
    assert!(
        stream_messages(&js, "HOOKS").await.is_empty(),
        "nothing published"
    );
    refused.assert_never_shown(&[wrong, password]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_config_connect_reads_each_stream_and_says_what_is_not_ready() {
    let h = StoreHandle::new(Backend::Embedded);
    let nats = NatsServer::start();
    let js = nats.jetstream().await;
    make_stream(&js, "HOOKS", &["webhooks.>"], Duration::from_secs(1)).await;
    let url = nats.url();
    let dir = tempfile::tempdir().unwrap();
    let mut text = config_text(
        &h,
        &[
            (
                "fine",
                &format!("{url}/webhooks.{{source}}.{{event_type}}"),
                "",
            ),
            ("nowhere", &format!("{url}/orders.new"), ""),
        ],
        "",
    );
    text.push_str(&format!(
        "[[sources]]\nname = \"gh\"\nprovider = \"github\"\nsecret = \"{GITHUB_SECRET}\"\n\
         destination = \"{url}/webhooks.{{source}}.{{event_type}}\"\n"
    ));
    let path = write_config(dir.path(), &text);
    let (code, stdout, stderr) = check_config_connect(&path);
    assert_eq!(code, Some(1), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("1 queue destination(s) not ready"),
        "{stderr}"
    );
    for line in [
        "route fine           destination=nats://",
        "(nats)",
        "destination shop/fine (nats://127.0.0.1:",
        "stream HOOKS takes webhooks.shop.*: file storage, 1 replica(s), duplicate window 1s",
        "a dry publish to webhooks.shop._ was taken (and not stored)",
        "destination shop/nowhere (nats://127.0.0.1:",
        "NOT READY",
        "no stream takes orders.new",
        "later than stream HOOKS's duplicate window (1s)",
        "destination gh/default (nats://127.0.0.1:",
        "warning: source gh route default: the destination's subject or routing key reads the event type (header:X-GitHub-Event)",
    ] {
        assert!(stdout.contains(line), "{line:?} not in:\n{stdout}");
    }
    // The dry publish stored nothing.
    assert!(stream_messages(&js, "HOOKS").await.is_empty());
}

/// 200 webhooks a second for 3 seconds; JetStream (file storage) SIGKILLed once a
/// hundred are in the stream, and started again once the load went on without it
/// for 1.5 s (three times the route's timeout: publishes time out, and the
/// client's buffered ones reach the restarted server after the gateway gave up on
/// them). Every acknowledged webhook ends up in the stream, none twice: a publish
/// whose acknowledgement the kill lost is retried under the same `Nats-Msg-Id`,
/// which the restarted stream's duplicate window drops.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jetstream_sigkilled_under_load_holds_every_acknowledged_webhook_once() {
    let h = StoreHandle::new(Backend::Embedded);
    let mut nats = NatsServer::start();
    let js = nats.jetstream().await;
    make_stream(&js, "HOOKS", &["hooks"], Duration::from_secs(300)).await;
    let gw = Gateway::start(config(
        &h,
        &[(
            "q",
            &format!("{}/hooks", nats.url()),
            "[sources.routes.retry]\nmax_attempts = 1000\nmax_age = \"10m\"\n\
             [sources.routes.delivery]\ntimeout = \"500ms\"\nconcurrency = 8",
        )],
    ))
    .await;
    let load = Load::start(&gw.ingest);
    wait_until(
        "100 messages in the stream",
        Duration::from_secs(20),
        async || stream_messages(&js, "HOOKS").await.len() >= 100,
    )
    .await;
    nats.kill();
    load.goes_on_for(300).await;
    nats.restart();
    let acked = load.finish().await;
    let store = h.open().await;
    wait_until(
        "every acknowledged webhook delivered",
        Duration::from_secs(60),
        async || {
            store
                .count_status("shop", Status::Delivered)
                .await
                .unwrap_or(0)
                == acked.len() as u64
        },
    )
    .await;
    // The kill was felt: some publishes failed and were tried again.
    let mut attempts = 0;
    for e in &acked {
        attempts += store.get(e).await.unwrap().unwrap().attempts;
    }
    assert!(
        attempts > acked.len() as u32,
        "no publish failed: {attempts} attempts"
    );
    let held = stream_messages(&js, "HOOKS").await;
    let mut ids: Vec<String> = held
        .iter()
        .map(|m| header(m, "Nats-Msg-Id").unwrap())
        .collect();
    ids.sort();
    let before = ids.len();
    ids.dedup();
    assert_eq!(before, ids.len(), "a message stored twice");
    let mut expected: Vec<String> = acked.iter().map(|e| format!("{e}:q:0")).collect();
    expected.sort();
    assert_eq!(
        ids, expected,
        "the stream holds every acknowledged webhook, once"
    );
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_over_the_servers_max_payload_is_refused_for_good_in_its_own_group() {
    let h = StoreHandle::new(Backend::Embedded);
    let nats = NatsServer::start_with("max_payload: 2048");
    let js = nats.jetstream().await;
    make_stream(&js, "HOOKS", &["hooks"], Duration::from_secs(120)).await;
    let gw = Gateway::start(config(&h, &[("q", &format!("{}/hooks", nats.url()), "")])).await;
    let big = format!(
        r#"{{"id":"evt_big","object":"event","type":"x","data":{{"object":{{"id":"pi_big","note":"{}"}}}}}}"#,
        "n".repeat(3000)
    );
    let entry = post(&gw, &big).await;
    post(&gw, &payment("evt_small", "cus_a")).await;
    let admin = Admin::at(&gw.admin);
    let group = dead_group(&admin, "q", 1).await;
    assert_eq!(group["failure"], "too-large", "{group}");
    assert_eq!(group["count"], 1, "{group}");
    let (_, e) = admin
        .call("GET", &format!("/admin/entries/{entry}"), None)
        .await;
    assert_eq!(e["deliveries"][0]["attempts"], 1, "final at once: {e}");
    assert!(
        e.to_string()
            .contains("over the server's max_payload (2048 bytes)"),
        "{e}"
    );
    // The small one went through.
    let held = wait_messages(&js, "HOOKS", 1).await;
    assert_eq!(
        header(&held[0], "hookgate-event-id").as_deref(),
        Some("evt_small")
    );
    gw.stop().await;
}

/// At start the gateway asks each queue destination's broker what `check-config
/// --connect` asks, and logs it: a stream ready, and a retry schedule longer than
/// its duplicate window as a warning.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_start_the_gateway_logs_each_stream_and_warns_of_a_short_duplicate_window() {
    let h = StoreHandle::new(Backend::Embedded);
    let nats = NatsServer::start();
    let js = nats.jetstream().await;
    make_stream(&js, "HOOKS", &["hooks"], Duration::from_secs(1)).await;
    let dir = tempfile::tempdir().unwrap();
    let cfg_path = write_config(
        dir.path(),
        &config_text(&h, &[("q", &format!("{}/hooks", nats.url()), "")], ""),
    );
    let log_path = dir.path().join("stderr.log");
    let gw = ChildGateway::spawn(&cfg_path, &[], &log_path);
    wait_until(
        "the destination's check in the log",
        Duration::from_secs(20),
        async || {
            let log = std::fs::read_to_string(&log_path).unwrap_or_default();
            log.contains("queue destination ready")
                && log.contains("later than stream HOOKS's duplicate window (1s)")
        },
    )
    .await;
    // The check stored nothing.
    assert!(stream_messages(&js, "HOOKS").await.is_empty());
    drop(gw);
}
