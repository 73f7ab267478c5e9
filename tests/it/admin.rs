//! The admin API and CLI against a running gateway: lifecycle of a dead entry, bulk
//! replay at a bounded rate, discard, pause across restarts, auth, pagination under
//! load, and agreement between the server and its OpenAPI document.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU16, Ordering};
use std::time::Duration;

use hookgate::config::{self, Config};
use serde_json::{Value, json};

use crate::for_each_store;
use crate::forward::{FAST_RETRY, ingest_many, source};
use crate::support::*;
use crate::upstream::{Reply, Upstream};

pub const TOKEN: &str = "admin-token-0123456789";

pub fn admin_config(h: &StoreHandle, extra: &str, sources: &str) -> Config {
    let text = format!(
        "{}\n[forwarder]\npoll_interval = \"50ms\"\nmaintenance_interval = \"200ms\"\nlease = \"15s\"\n\
         breaker_failures = 100000\n{extra}\n{sources}",
        h.toml()
    );
    config::from_toml_str(&text, &|k| {
        (k == "HOOKGATE_ADMIN_TOKEN").then(|| TOKEN.to_string())
    })
    .expect("config")
}

pub struct Admin {
    base: String,
    http: reqwest::Client,
}

impl Admin {
    pub fn new(gw: &Gateway) -> Admin {
        Admin::at(&gw.admin)
    }

    /// The admin API at `base` (a child gateway's, say).
    pub fn at(base: &str) -> Admin {
        Admin {
            base: base.to_string(),
            http: http(),
        }
    }

    pub async fn call(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        let mut req = self
            .http
            .request(method.parse().unwrap(), format!("{}{path}", self.base))
            .bearer_auth(TOKEN)
            .header("x-hookgate-actor", "alice");
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.unwrap();
        let st = resp.status().as_u16();
        let text = resp.text().await.unwrap();
        (
            st,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    pub async fn get(&self, path: &str) -> Value {
        let (st, v) = self.call("GET", path, None).await;
        assert_eq!(st, 200, "GET {path}: {v}");
        v
    }
}

async fn wait_entry(admin: &Admin, id: &str, status: &str, timeout: Duration) -> Value {
    let path = format!("/admin/entries/{id}");
    wait_until_ok(&format!("{id} to become {status}"), timeout, async || {
        let e = admin.get(&path).await;
        if e["status"] == status { Ok(e) } else { Err(e) }
    })
    .await
}

async fn lifecycle(backend: Backend) {
    let h = StoreHandle::new(backend);
    let (up, fixed) = Upstream::failing_until_fixed(404).await;
    let gw = Gateway::start(admin_config(&h, "", &source("shop", &up.url, FAST_RETRY))).await;
    let admin = Admin::new(&gw);
    let ids = ingest_many(&gw.ingest, "shop", "evt_life", 1).await;
    let id = ids.values().next().unwrap().clone();
    wait_entry(&admin, &id, "dead", Duration::from_secs(10)).await;

    let dead = admin.get("/admin/entries?status=dead&source=shop").await;
    let listed = &dead["entries"][0];
    assert_eq!(listed["id"], id.as_str());
    assert!(
        listed["last_error"].as_str().unwrap().contains("HTTP 404"),
        "{listed}"
    );

    fixed.store(true, Ordering::SeqCst);
    let (st, v) = admin
        .call("POST", &format!("/admin/entries/{id}/replay"), None)
        .await;
    assert_eq!((st, &v["status"]), (202, &json!("pending")), "{v}");
    let e = wait_entry(&admin, &id, "delivered", Duration::from_secs(10)).await;

    let got = up.received();
    assert_eq!(got.len(), 2);
    assert!(
        got.iter()
            .all(|r| r.header("webhook-id").as_deref() == Some(id.as_str()))
    );
    let log = e["attempt_log"].as_array().unwrap();
    assert_eq!(log.len(), 2, "{e}");
    assert_eq!(log[0]["status_code"], 404);
    assert_eq!(log[1]["status_code"], 200);
    let audit = e["audit"].as_array().unwrap();
    assert_eq!(audit.len(), 1, "{e}");
    assert_eq!(audit[0]["action"], "replay");
    assert_eq!(audit[0]["actor"], "alice");
    // The stored signature header is redacted in the view.
    let sig = e["headers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["name"] == "stripe-signature")
        .unwrap();
    assert_eq!(sig["value"], "[redacted]");
    // Replaying a pending entry is a conflict; unknown ids are 404.
    let (st, _) = admin.call("POST", "/admin/entries/nope/replay", None).await;
    assert_eq!(st, 404);
    gw.stop().await;
}
for_each_store!(
    dead_entry_lifecycle_replay_keeps_the_webhook_id,
    super::lifecycle
);

async fn bulk_replay(backend: Backend) {
    let h = StoreHandle::new(backend);
    let code = Arc::new(AtomicU16::new(410));
    let c = code.clone();
    let up = Upstream::scripted(move |_, _| Reply::Status(c.load(Ordering::SeqCst))).await;
    let gw = Gateway::start(admin_config(
        &h,
        "[admin]\nreplay_rate = 100\n",
        &source("bulk", &up.url, FAST_RETRY),
    ))
    .await;
    let admin = Admin::new(&gw);
    let ids = ingest_many(&gw.ingest, "bulk", "evt_bulk", 500).await;
    wait_until_ok(
        "all 500 entries dead",
        Duration::from_secs(30),
        async || {
            let st = admin.get("/admin/stats").await;
            if st["sources"][0]["dead"] == 500 {
                Ok(())
            } else {
                Err(st)
            }
        },
    )
    .await;
    code.store(200, Ordering::SeqCst);
    let (st, v) = admin
        .call(
            "POST",
            "/admin/replay",
            Some(json!({"source": "bulk", "status": "dead"})),
        )
        .await;
    assert_eq!((st, &v["queued"]), (202, &json!(500)), "{v}");
    up.wait_for(Duration::from_secs(30), "500 replays delivered", |r| {
        r.iter().filter(|x| x.answered == 200).count() >= 500
    })
    .await;
    let ok: Vec<_> = up
        .received()
        .into_iter()
        .filter(|r| r.answered == 200)
        .collect();
    let delivered: HashSet<String> = ok.iter().filter_map(|r| r.header("webhook-id")).collect();
    assert!(
        ids.values().all(|id| delivered.contains(id)),
        "every dead entry delivered"
    );
    let first = ok.iter().map(|r| r.at).min().unwrap();
    let mut buckets: HashMap<u64, usize> = HashMap::new();
    for r in &ok {
        *buckets
            .entry(r.at.duration_since(first).as_secs())
            .or_default() += 1;
    }
    let max = buckets.values().copied().max().unwrap();
    let span = ok.iter().map(|r| r.at).max().unwrap().duration_since(first);
    eprintln!("{backend:?}: 500 replays at 100/s took {span:?}; busiest second {max}");
    assert!(
        max <= 130,
        "replays went out at {max}/s, above the 100/s bound"
    );
    assert!(
        span >= Duration::from_secs(4),
        "500 at 100/s cannot take {span:?}"
    );
    gw.stop().await;
}
for_each_store!(
    bulk_replay_of_500_dead_entries_stays_under_the_rate,
    super::bulk_replay
);

async fn discard(backend: Backend) {
    let h = StoreHandle::new(backend);
    let up = Upstream::ok().await;
    let cfg = admin_config(&h, "", &source("d", &up.url, ""));
    let quiet = quiet_window(&cfg);
    let gw = Gateway::start(cfg).await;
    let admin = Admin::new(&gw);
    // A pause made through this gateway holds its forwarder once the call answers.
    let (st, _) = admin.call("POST", "/admin/sources/d/pause", None).await;
    assert_eq!(st, 200);
    let ids = ingest_many(&gw.ingest, "d", "evt_disc", 2).await;
    let mut ids = ids.into_values();
    let (a, b) = (ids.next().unwrap(), ids.next().unwrap());
    let discard_a = async |body: Option<Value>| {
        admin
            .call("POST", &format!("/admin/entries/{a}/discard"), body)
            .await
    };
    for body in [
        None,
        Some(json!({})),
        Some(json!({"note": ""})),
        Some(json!({"note": "   "})),
    ] {
        let (st, v) = discard_a(body.clone()).await;
        assert_eq!(st, 400, "{body:?}: {v}");
        assert!(v["error"].as_str().unwrap().contains("note"));
    }
    let (st, v) = discard_a(Some(json!({"note": "test event from staging"}))).await;
    assert_eq!((st, &v["status"]), (200, &json!("discarded")), "{v}");
    let (st, _) = discard_a(Some(json!({"note": "again"}))).await;
    assert_eq!(st, 409);
    admin.call("POST", "/admin/sources/d/resume", None).await;
    wait_entry(&admin, &b, "delivered", Duration::from_secs(10)).await;
    quiet_for(
        "the discarded entry is never delivered",
        quiet,
        async || {
            up.received()
                .iter()
                .all(|r| r.header("webhook-id").as_deref() != Some(a.as_str()))
        },
    )
    .await;
    let e = admin.get(&format!("/admin/entries/{a}")).await;
    assert_eq!(e["status"], "discarded");
    assert_eq!(e["audit"][0]["action"], "discard");
    assert_eq!(e["audit"][0]["note"], "test event from staging");
    assert_eq!(e["audit"][0]["actor"], "alice");
    assert!(
        up.received()
            .iter()
            .all(|r| r.header("webhook-id").as_deref() != Some(a.as_str())),
        "a discarded entry was delivered"
    );
    gw.stop().await;
}
for_each_store!(discard_needs_a_note_and_is_never_delivered, super::discard);

async fn pause_survives_restart(backend: Backend) {
    let h = StoreHandle::new(backend);
    let up = Upstream::ok().await;
    let cfg = || admin_config(&h, "", &source("p", &up.url, ""));
    let quiet = quiet_window(&cfg());
    let gw = Gateway::start(cfg()).await;
    let admin = Admin::new(&gw);
    // A pause made through this gateway holds its forwarder once the call answers.
    let (st, v) = admin.call("POST", "/admin/sources/p/pause", None).await;
    assert_eq!((st, &v["paused"]), (200, &json!(true)));
    let (st, _) = admin.call("POST", "/admin/sources/nope/pause", None).await;
    assert_eq!(st, 404);
    let ids = ingest_many(&gw.ingest, "p", "evt_pause", 20).await;
    assert_eq!(ids.len(), 20);
    quiet_for("a paused source delivers nothing", quiet, async || {
        up.count() == 0
    })
    .await;
    gw.stop().await;

    let gw = Gateway::start(cfg()).await;
    let admin = Admin::new(&gw);
    let sources = admin.get("/admin/sources").await;
    assert_eq!(
        sources,
        json!([{"source": "p", "paused": true, "routes": [{"route": "default", "paused": false}]}])
    );
    quiet_for("the pause survives the restart", quiet, async || {
        up.count() == 0
    })
    .await;
    let stats = admin.get("/admin/stats").await;
    assert_eq!(stats["sources"][0]["pending"], 20);
    assert!(stats["sources"][0]["oldest_pending_age_seconds"].is_u64());

    admin.call("POST", "/admin/sources/p/resume", None).await;
    up.wait_for(Duration::from_secs(10), "all 20 after resume", |r| {
        r.len() >= 20
    })
    .await;
    gw.stop().await;
}
for_each_store!(
    pause_holds_delivery_across_a_restart,
    super::pause_survives_restart
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_or_missing_tokens_are_refused_and_change_nothing() {
    let h = StoreHandle::new(Backend::Embedded);
    let up = Upstream::ok().await;
    // Two dozen wrong tokens from one client: more than a client may send before it
    // is locked out (`wrong_tokens_are_throttled_per_client…` tests that).
    let allow = "[admin]\nfailed_auth_allowance = 100\n";
    let gw = Gateway::start(admin_config(&h, allow, &source("a", &up.url, ""))).await;
    let c = http();
    let same_len = "x".repeat(TOKEN.len());
    let cases: Vec<Option<String>> = vec![
        None,
        Some(format!("Bearer {same_len}")),
        Some("Bearer short".to_string()),
        Some(format!("Bearer {TOKEN}extra")),
        Some(format!("Basic {TOKEN}")),
        Some("Bearer ".to_string()),
    ];
    for auth in &cases {
        for (method, path) in [
            ("POST", "/admin/sources/a/pause"),
            ("GET", "/admin/entries"),
            ("GET", "/admin/stats"),
            ("POST", "/admin/replay"),
        ] {
            let mut req = c.request(method.parse().unwrap(), format!("{}{path}", gw.admin));
            if let Some(a) = auth {
                req = req.header("authorization", a);
            }
            let resp = req.send().await.unwrap();
            assert_eq!(resp.status(), 401, "{method} {path} with {auth:?}");
            assert_eq!(resp.headers()["www-authenticate"], "Bearer");
        }
    }
    let store = h.open().await;
    assert!(
        crate::support::paused_sources(&*store).await.is_empty(),
        "a refused request paused"
    );
    // Probes and metrics need no token; the document does.
    for path in ["/healthz", "/readyz", "/metrics"] {
        let r = c.get(format!("{}{path}", gw.admin)).send().await.unwrap();
        assert_eq!(r.status(), 200, "{path}");
    }
    let doc = format!("{}/admin/openapi.json", gw.admin);
    let r = c.get(&doc).send().await.unwrap();
    assert_eq!(r.status(), 401, "the document without the token");
    let r = c.get(&doc).bearer_auth(TOKEN).send().await.unwrap();
    assert_eq!(r.status(), 200, "the document with the token");
    gw.stop().await;
}

async fn pagination(backend: Backend) {
    let h = StoreHandle::new(backend);
    let up = Upstream::ok().await;
    let gw = Gateway::start(admin_config(&h, "", &source("pg", &up.url, ""))).await;
    let admin = Admin::new(&gw);
    let ids = ingest_many(&gw.ingest, "pg", "evt_page", 1000).await;
    let known: HashSet<&String> = ids.values().collect();
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    let ingest = gw.ingest.clone();
    let writer = tokio::spawn(async move {
        let mut n = 0;
        while !s.load(Ordering::SeqCst) {
            ingest_many(&ingest, "pg", &format!("evt_more_{n}"), 5).await;
            n += 1;
        }
        n * 5
    });
    // Start once the writer's entries show up, below everything that exists then: the
    // 1,000 and whatever arrived already.
    let start_cursor = wait_until_ok(
        "the writer's first entries listed",
        Duration::from_secs(10),
        async || {
            let first = admin.get("/admin/entries?source=pg&limit=1").await;
            let newest = first["entries"][0]["id"].as_str().unwrap().to_string();
            if known.contains(&newest) {
                Err(format!("the newest is still {newest}"))
            } else {
                Ok(newest)
            }
        },
    )
    .await;
    let mut seen: Vec<String> = vec![start_cursor.clone()];
    let mut cursor = Some(start_cursor);
    let mut pages = 0;
    while let Some(c) = cursor {
        let page = admin
            .get(&format!("/admin/entries?source=pg&limit=100&cursor={c}"))
            .await;
        let entries = page["entries"].as_array().unwrap();
        assert!(entries.len() <= 100);
        seen.extend(
            entries
                .iter()
                .map(|e| e["id"].as_str().unwrap().to_string()),
        );
        cursor = page["next_cursor"].as_str().map(String::from);
        pages += 1;
    }
    stop.store(true, Ordering::SeqCst);
    let more = writer.await.unwrap();
    assert!(more > 0, "entries kept arriving meanwhile");
    let unique: HashSet<&String> = seen.iter().collect();
    assert_eq!(unique.len(), seen.len(), "an entry was listed twice");
    let mut sorted = seen.clone();
    sorted.sort_by(|a, b| b.cmp(a));
    assert_eq!(sorted, seen, "not newest first");
    for id in ids.values() {
        assert!(unique.contains(id), "{id} was never listed");
    }
    assert!(pages >= 10, "{pages} pages");
    let (st, _) = admin.call("GET", "/admin/entries?limit=0", None).await;
    assert_eq!(st, 400);
    let (st, _) = admin.call("GET", "/admin/entries?status=lost", None).await;
    assert_eq!(st, 400);
    let (st, _) = admin
        .call("GET", "/admin/entries?since=yesterday", None)
        .await;
    assert_eq!(st, 400);
    gw.stop().await;
}
for_each_store!(
    pagination_lists_each_entry_once_while_new_ones_arrive,
    super::pagination
);

/// Resolve a response schema of the document into a validator.
fn validator(doc: &Value, schema: &Value) -> jsonschema::Validator {
    let mut root = schema.clone();
    if let Value::Object(m) = &mut root {
        m.insert("components".into(), doc["components"].clone());
    }
    jsonschema::validator_for(&root).expect("schema compiles")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_and_its_openapi_document_agree() {
    let h = StoreHandle::new(Backend::Embedded);
    let up = Upstream::scripted(|_, _| Reply::Status(404)).await;
    let sources = format!(
        "{}\n[[sources]]\nname = \"asn\"\nprovider = \"asana\"\npublic_url = \"https://hooks.example.com/ingest/asn\"\ndestination = \"{}\"\n",
        source("oa", &up.url, FAST_RETRY),
        up.url
    );
    let gw = Gateway::start(admin_config(&h, "", &sources)).await;
    let admin = Admin::new(&gw);
    let ids = ingest_many(&gw.ingest, "oa", "evt_oa", 3).await;
    let mut ids = ids.into_values();
    let (dead, other) = (ids.next().unwrap(), ids.next().unwrap());
    wait_entry(&admin, &dead, "dead", Duration::from_secs(10)).await;
    wait_entry(&admin, &other, "dead", Duration::from_secs(10)).await;

    let served: Value = admin.get("/admin/openapi.json").await;
    let in_repo: Value = serde_json::from_str(hookgate::admin::OPENAPI).unwrap();
    assert_eq!(served, in_repo);
    let doc = in_repo;

    // Every route the server has is documented, and nothing else.
    let documented: HashSet<(String, String)> = doc["paths"]
        .as_object()
        .unwrap()
        .iter()
        .flat_map(|(p, ops)| {
            ops.as_object()
                .unwrap()
                .keys()
                .map(move |m| (m.to_uppercase(), p.clone()))
        })
        .collect();
    let implemented: HashSet<(String, String)> = [
        ("GET", "/healthz"),
        ("GET", "/readyz"),
        ("GET", "/metrics"),
        ("GET", "/admin/openapi.json"),
        ("GET", "/admin/entries"),
        ("GET", "/admin/entries/{id}"),
        ("POST", "/admin/entries/{id}/replay"),
        ("POST", "/admin/entries/{id}/discard"),
        ("POST", "/admin/entries/{id}/preview"),
        ("POST", "/admin/replay"),
        ("GET", "/admin/dead-letters"),
        ("POST", "/admin/dead-letters/replay"),
        ("GET", "/admin/sources"),
        ("POST", "/admin/sources/{name}/pause"),
        ("POST", "/admin/sources/{name}/resume"),
        ("POST", "/admin/sources/{name}/reconcile"),
        ("POST", "/admin/sources/{name}/routes/{route}/pause"),
        ("POST", "/admin/sources/{name}/routes/{route}/resume"),
        ("GET", "/admin/sources/{name}/handshake"),
        ("POST", "/admin/sources/{name}/handshake"),
        ("DELETE", "/admin/sources/{name}/secrets/{id}"),
        ("GET", "/admin/stats"),
        ("GET", "/admin/gateways"),
        ("GET", "/admin/audit"),
        ("GET", "/admin/config"),
        ("POST", "/admin/config/reload"),
        ("GET", "/admin/routes"),
        ("POST", "/admin/routes/{source}/{route}/discard"),
        ("GET", "/admin/rejections"),
        ("GET", "/admin/rejections/groups"),
    ]
    .into_iter()
    .map(|(m, p)| (m.to_string(), p.to_string()))
    .collect();
    assert_eq!(documented, implemented);

    // Each operation, called for real (success and error cases), answers a documented
    // status with a body that matches the documented schema.
    let cases: Vec<(&str, String, Option<Value>)> = vec![
        ("GET", "/healthz".into(), None),
        ("GET", "/readyz".into(), None),
        ("GET", "/admin/entries".into(), None),
        ("GET", "/admin/entries?status=dead&limit=1".into(), None),
        ("GET", "/admin/rejections".into(), None),
        (
            "GET",
            "/admin/rejections?reason=mismatch&limit=2".into(),
            None,
        ),
        ("GET", "/admin/rejections?limit=0".into(), None),
        ("GET", "/admin/rejections/groups".into(), None),
        (
            "GET",
            "/admin/rejections/groups?since=yesterday".into(),
            None,
        ),
        ("GET", "/admin/entries?status=bogus".into(), None),
        ("GET", format!("/admin/entries/{dead}"), None),
        ("GET", "/admin/entries/missing".into(), None),
        (
            "GET",
            "/admin/entries?route=default&status=dead".into(),
            None,
        ),
        (
            "POST",
            format!("/admin/entries/{dead}/replay"),
            Some(json!({"route": "nope"})),
        ),
        ("POST", format!("/admin/entries/{dead}/replay"), None),
        ("POST", format!("/admin/entries/{dead}/replay"), None),
        (
            "POST",
            format!("/admin/entries/{dead}/replay"),
            Some(json!({"route": "default"})),
        ),
        ("POST", "/admin/entries/missing/replay".into(), None),
        ("POST", format!("/admin/entries/{dead}/preview"), None),
        (
            "POST",
            format!("/admin/entries/{dead}/preview"),
            Some(json!({"route": "default"})),
        ),
        (
            "POST",
            format!("/admin/entries/{dead}/preview"),
            Some(json!({"route": "nope"})),
        ),
        (
            "POST",
            format!("/admin/entries/{dead}/preview"),
            Some(json!(["not", "an", "object"])),
        ),
        ("POST", "/admin/entries/missing/preview".into(), None),
        (
            "POST",
            format!("/admin/entries/{other}/discard"),
            Some(json!({"note": "n"})),
        ),
        (
            "POST",
            format!("/admin/entries/{other}/discard"),
            Some(json!({"note": "n"})),
        ),
        ("POST", format!("/admin/entries/{other}/discard"), None),
        (
            "POST",
            "/admin/replay".into(),
            Some(json!({"status": "discarded"})),
        ),
        (
            "POST",
            "/admin/replay".into(),
            Some(json!({"status": "pending"})),
        ),
        (
            "POST",
            "/admin/replay".into(),
            Some(json!({"source": "nope"})),
        ),
        ("GET", "/admin/sources".into(), None),
        ("GET", "/admin/gateways".into(), None),
        ("POST", "/admin/sources/oa/pause".into(), None),
        ("POST", "/admin/sources/oa/resume".into(), None),
        ("POST", "/admin/sources/nope/pause".into(), None),
        // A source without [sources.reconcile], an unknown one, a bad body.
        ("POST", "/admin/sources/oa/reconcile".into(), None),
        ("POST", "/admin/sources/nope/reconcile".into(), None),
        (
            "POST",
            "/admin/sources/oa/reconcile".into(),
            Some(json!({"since": "soon"})),
        ),
        (
            "POST",
            "/admin/sources/oa/reconcile".into(),
            Some(json!({"dry_run": true, "extra": 1})),
        ),
        (
            "POST",
            "/admin/sources/oa/routes/default/pause".into(),
            None,
        ),
        (
            "POST",
            "/admin/sources/oa/routes/default/resume".into(),
            None,
        ),
        ("POST", "/admin/sources/oa/routes/nope/pause".into(), None),
        (
            "POST",
            "/admin/replay".into(),
            Some(json!({"source": "oa", "route": "nope"})),
        ),
        (
            "POST",
            "/admin/replay".into(),
            Some(json!({"source": "oa", "route": "default"})),
        ),
        ("GET", "/admin/sources/asn/handshake".into(), None),
        ("GET", "/admin/sources/oa/handshake".into(), None),
        ("GET", "/admin/sources/nope/handshake".into(), None),
        ("POST", "/admin/sources/asn/handshake".into(), None),
        (
            "POST",
            "/admin/sources/asn/handshake".into(),
            Some(json!({"within_secs": 60})),
        ),
        (
            "POST",
            "/admin/sources/asn/handshake".into(),
            Some(json!({"within_secs": 0})),
        ),
        (
            "POST",
            "/admin/sources/asn/handshake".into(),
            Some(json!({"within_secs": 3.0})),
        ),
        (
            "POST",
            "/admin/sources/asn/handshake".into(),
            Some(json!({"within_secs": 3.0, "unknown": [1]})),
        ),
        (
            "POST",
            "/admin/sources/asn/handshake".into(),
            Some(json!({"within": 5})),
        ),
        ("POST", "/admin/sources/oa/handshake".into(), None),
        (
            "DELETE",
            "/admin/sources/asn/secrets/0123456789abcdef".into(),
            None,
        ),
        ("DELETE", "/admin/sources/oa/secrets/x".into(), None),
        // After the pauses, resumes and armings above: events with an actor and a client.
        ("GET", "/admin/audit".into(), None),
        ("GET", "/admin/audit?limit=2".into(), None),
        ("GET", "/admin/config".into(), None),
        ("GET", "/admin/routes".into(), None),
        (
            "POST",
            "/admin/routes/oa/default/discard".into(),
            Some(json!({"note": "in force"})),
        ),
        (
            "POST",
            "/admin/routes/oa/gone/discard".into(),
            Some(json!({"note": "never was"})),
        ),
        ("POST", "/admin/routes/oa/gone/discard".into(), None),
        (
            "POST",
            "/admin/routes/oa/gone/discard".into(),
            Some(json!({"note": "n", "other": 1})),
        ),
        // Handed its configuration in process: nothing to read again (409).
        ("POST", "/admin/config/reload".into(), None),
        ("POST", "/admin/config/reload?dry_run=maybe".into(), None),
        ("GET", "/admin/audit?limit=0".into(), None),
        ("GET", "/admin/dead-letters".into(), None),
        (
            "GET",
            "/admin/dead-letters?source=oa&route=default".into(),
            None,
        ),
        ("GET", "/admin/dead-letters?source=nope".into(), None),
        (
            "POST",
            "/admin/dead-letters/replay".into(),
            Some(json!({"source": "oa", "route": "default", "failure": "HTTP 404"})),
        ),
        (
            "POST",
            "/admin/dead-letters/replay".into(),
            Some(json!({"source": "oa", "route": "nope", "failure": "HTTP 404"})),
        ),
        (
            "POST",
            "/admin/dead-letters/replay".into(),
            Some(json!({"source": "oa"})),
        ),
        ("GET", "/admin/stats".into(), None),
    ];
    for (method, path, body) in cases {
        let (st, v) = admin.call(method, &path, body).await;
        let template = doc["paths"]
            .as_object()
            .unwrap()
            .keys()
            .find(|t| {
                let tp: Vec<&str> = t.split('/').collect();
                let pp: Vec<&str> = path.split('?').next().unwrap().split('/').collect();
                tp.len() == pp.len()
                    && tp
                        .iter()
                        .zip(&pp)
                        .all(|(a, b)| a.starts_with('{') || a == b)
            })
            .unwrap_or_else(|| panic!("{path} matches no documented path"));
        let op = &doc["paths"][template][method.to_lowercase()];
        let resp = &op["responses"][st.to_string()];
        assert!(
            resp.is_object(),
            "{method} {path} answered {st}, which is not documented: {v}"
        );
        let schema = &resp["content"]["application/json"]["schema"];
        let errors: Vec<String> = validator(&doc, schema)
            .iter_errors(&v)
            .map(|e| e.to_string())
            .collect();
        assert!(
            errors.is_empty(),
            "{method} {path} ({st}) violates its schema: {errors:?}\n{v}"
        );
    }

    // The guard around the listener answers on every route: 403 without a token (see
    // admin_guard.rs), 415 for a POST body that is not JSON.
    for (path, ops) in doc["paths"].as_object().unwrap() {
        for (method, op) in ops.as_object().unwrap() {
            assert!(
                op["responses"]["403"].is_object(),
                "{method} {path}: no 403"
            );
            if method == "post" {
                assert!(
                    op["responses"]["415"].is_object(),
                    "{method} {path}: no 415"
                );
            }
        }
    }
    for path in [
        format!("/admin/entries/{other}/discard"),
        "/admin/replay".to_string(),
    ] {
        let resp = http()
            .post(format!("{}{path}", gw.admin))
            .bearer_auth(TOKEN)
            .header("content-type", "text/plain")
            .body(r#"{"note": "n"}"#)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 415, "{path}");
        let v: Value = resp.json().await.unwrap();
        let schema = &doc["paths"]["/admin/replay"]["post"]["responses"]["415"]["content"]["application/json"]
            ["schema"];
        assert!(validator(&doc, schema).is_valid(&v), "{path}: {v}");
    }
    gw.stop().await;
}
