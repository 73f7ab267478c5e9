//! Traces end to end, on every store: an OTLP/HTTP collector the test runs receives
//! the spans of one webhook (its ingest with the provider's trace linked, a failed
//! attempt, the retry linked to it, a replay and the attempt after it) in one trace,
//! whose id the admin API shows; the app receives that trace in `traceparent`, with
//! each attempt's own span as parent. A duplicate is a trace of its own linked to the
//! entry's. With sampling at 0 the context still goes out, unsampled, and nothing is
//! exported; with traces off, no `traceparent` goes out.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::trace::v1::Span;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use prost::Message as _;
use serde_json::Value;

use crate::admin::{Admin, TOKEN, admin_config};
use crate::console::{log_in, no_redirects};
use crate::for_each_store;
use crate::forward::{FAST_RETRY, source};
use crate::support::*;
use crate::upstream::{Reply, Upstream};

/// The provider's own trace context on the webhook.
const PROVIDER_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PROVIDER_SPAN: &str = "00f067aa0ba902b7";

/// A span as the collector got it, with its service name.
#[derive(Debug, Clone)]
struct Got {
    span: Span,
    service: String,
}

impl Got {
    fn trace(&self) -> String {
        hex::encode(&self.span.trace_id)
    }
    fn id(&self) -> String {
        hex::encode(&self.span.span_id)
    }
    fn parent(&self) -> String {
        hex::encode(&self.span.parent_span_id)
    }
    fn attr(&self, key: &str) -> Option<String> {
        let v = self.span.attributes.iter().find(|kv| kv.key == key)?;
        match v.value.as_ref()?.value.as_ref()? {
            AnyValue::StringValue(s) => Some(s.clone()),
            AnyValue::IntValue(i) => Some(i.to_string()),
            AnyValue::BoolValue(b) => Some(b.to_string()),
            other => Some(format!("{other:?}")),
        }
    }
    /// The (trace, span) each link points at.
    fn links(&self) -> Vec<(String, String)> {
        self.span
            .links
            .iter()
            .map(|l| (hex::encode(&l.trace_id), hex::encode(&l.span_id)))
            .collect()
    }
}

/// An OTLP/HTTP trace collector on a free port: it decodes every export request
/// and keeps the spans.
struct Collector {
    url: String,
    spans: Arc<Mutex<Vec<Got>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Collector {
    async fn start() -> Collector {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let spans = Arc::new(Mutex::new(Vec::new()));
        let app = axum::Router::new()
            .route("/v1/traces", axum::routing::post(collect))
            .with_state(spans.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Collector { url, spans, task }
    }

    fn spans(&self) -> Vec<Got> {
        self.spans.lock().unwrap().clone()
    }

    /// Wait until the spans of trace `trace` satisfy `enough`; they are returned.
    async fn wait_for(&self, what: &str, trace: &str, enough: impl Fn(&[Got]) -> bool) -> Vec<Got> {
        wait_until_ok(what, Duration::from_secs(20), async || {
            let mine: Vec<Got> = self
                .spans()
                .into_iter()
                .filter(|g| g.trace() == trace)
                .collect();
            if enough(&mine) {
                Ok(mine)
            } else {
                Err(format!(
                    "{:?}",
                    mine.iter().map(|g| g.span.name.clone()).collect::<Vec<_>>()
                ))
            }
        })
        .await
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn collect(
    State(spans): State<Arc<Mutex<Vec<Got>>>>,
    body: Bytes,
) -> (
    axum::http::StatusCode,
    [(&'static str, &'static str); 1],
    Vec<u8>,
) {
    let req = ExportTraceServiceRequest::decode(body).expect("an OTLP trace export");
    let mut got = spans.lock().unwrap();
    for rs in req.resource_spans {
        let service = rs
            .resource
            .iter()
            .flat_map(|r| r.attributes.iter())
            .find(|kv| kv.key == "service.name")
            .and_then(|kv| match kv.value.as_ref()?.value.as_ref()? {
                AnyValue::StringValue(s) => Some(s.clone()),
                _ => None,
            })
            .unwrap_or_default();
        for ss in rs.scope_spans {
            for span in ss.spans {
                got.push(Got {
                    span,
                    service: service.clone(),
                });
            }
        }
    }
    (
        axum::http::StatusCode::OK,
        [("content-type", "application/x-protobuf")],
        Vec::new(),
    )
}

/// The (trace id, parent span id, flags) of a `traceparent`.
fn traceparent(v: &str) -> (String, String, String) {
    let parts: Vec<&str> = v.split('-').collect();
    assert_eq!(parts.len(), 4, "{v}");
    assert_eq!(parts[0], "00", "{v}");
    (parts[1].into(), parts[2].into(), parts[3].into())
}

fn named<'a>(spans: &'a [Got], name: &str) -> Vec<&'a Got> {
    spans.iter().filter(|g| g.span.name == name).collect()
}

async fn one_webhook_is_one_trace(backend: Backend) {
    let h = StoreHandle::new(backend);
    let collector = Collector::start().await;
    // The first attempt fails, every later one is delivered.
    let up = Upstream::scripted(|_, n| Reply::Status(if n == 0 { 500 } else { 200 })).await;
    let telemetry = format!("[telemetry]\notlp_endpoint = \"{}\"\n", collector.url);
    let gw = Gateway::start(admin_config(
        &h,
        &telemetry,
        &source("stripe", &up.url, FAST_RETRY),
    ))
    .await;
    let admin = Admin::new(&gw);
    let client = http();
    let body = event_body("stripe", "evt_traced");
    let mut headers = sign_headers("stripe", STRIPE_SECRET, &body, now_secs(), "x");
    headers.push((
        "traceparent".into(),
        format!("00-{PROVIDER_TRACE}-{PROVIDER_SPAN}-01"),
    ));
    let (st, json) = post_raw(&client, &gw.ingest, "stripe", &body, &headers).await;
    assert_eq!(st, 200, "{json}");
    let id = json["id"].as_str().unwrap().to_string();
    up.wait_for(
        Duration::from_secs(20),
        "a failed attempt and its retry",
        |r| r.len() >= 2,
    )
    .await;
    let entry = wait_until_ok("the entry delivered", Duration::from_secs(20), async || {
        let e = admin.get(&format!("/admin/entries/{id}")).await;
        if e["status"] == "delivered" {
            Ok(e)
        } else {
            Err(e)
        }
    })
    .await;
    let trace = entry["trace_id"].as_str().expect("a trace id").to_string();
    assert_eq!(trace.len(), 32);
    // The CLI and the console's entry page name it too.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_hookgate"))
        .args([
            "entries",
            "--admin-url",
            &gw.admin,
            "--token",
            TOKEN,
            "show",
            &id,
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(&format!("trace id:     {trace}")), "{text}");
    let console = no_redirects();
    let cookie = log_in(&console, &gw.admin).await;
    let page = console
        .get(format!("{}/console/entries/{id}", gw.admin))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    let html = page.text().await.unwrap();
    assert!(
        html.contains(&format!("<code id=\"trace-id\">{trace}</code>")),
        "the console's entry page shows the trace id"
    );

    // A replay, and the attempt it queues.
    let (st, v) = admin
        .call("POST", &format!("/admin/entries/{id}/replay"), None)
        .await;
    assert_eq!(st, 202, "{v}");
    up.wait_for(Duration::from_secs(20), "the replayed attempt", |r| {
        r.len() >= 3
    })
    .await;
    // A duplicate of the webhook: a trace of its own.
    let (st, json) = post_raw(&client, &gw.ingest, "stripe", &body, &headers).await;
    assert_eq!((st, json["duplicate"].clone()), (200, Value::Bool(true)));

    let spans = collector
        .wait_for("the webhook's spans", &trace, |s| {
            named(s, "ingest").len() == 1
                && named(s, "deliver").len() == 3
                && named(s, "replay").len() == 1
                && named(s, "store").len() == 1
        })
        .await;
    assert!(spans.iter().all(|g| g.service == "hookgate"), "{spans:?}");

    // Ingest: the root, the provider's trace linked, its phases its children.
    let ingest = named(&spans, "ingest")[0];
    assert_eq!(ingest.parent(), "", "the ingest span is the root");
    assert_eq!(ingest.span.kind, SpanKind::Server as i32);
    assert_eq!(
        ingest.attr("hookgate.entry_id").as_deref(),
        Some(id.as_str())
    );
    assert_eq!(ingest.attr("hookgate.source").as_deref(), Some("stripe"));
    assert_eq!(ingest.attr("hookgate.outcome").as_deref(), Some("accepted"));
    assert_eq!(
        ingest.links(),
        vec![(PROVIDER_TRACE.to_string(), PROVIDER_SPAN.to_string())]
    );
    for phase in ["read body", "verify", "store"] {
        let p = named(&spans, phase);
        assert_eq!(p.len(), 1, "{phase}");
        assert_eq!(p[0].parent(), ingest.id(), "{phase} is a child of ingest");
        assert!(p[0].span.start_time_unix_nano >= ingest.span.start_time_unix_nano);
        assert!(p[0].span.end_time_unix_nano <= ingest.span.end_time_unix_nano);
    }

    // Attempts: children of the ingest span; each retry links to the attempt
    // before it; the app got each attempt's span as the parent of its request.
    let mut deliver = named(&spans, "deliver");
    deliver.sort_by_key(|g| g.attr("hookgate.attempt"));
    let received = up.received();
    for (n, g) in deliver.iter().enumerate() {
        let attempt = (n + 1).to_string();
        assert_eq!(
            g.attr("hookgate.attempt").as_deref(),
            Some(attempt.as_str())
        );
        assert_eq!(g.parent(), ingest.id(), "attempt {attempt}");
        assert_eq!(g.span.kind, SpanKind::Client as i32);
        assert_eq!(g.attr("hookgate.entry_id").as_deref(), Some(id.as_str()));
        assert_eq!(g.attr("hookgate.route").as_deref(), Some("default"));
        let want_status = if n == 0 { "500" } else { "200" };
        assert_eq!(
            g.attr("http.response.status_code").as_deref(),
            Some(want_status)
        );
        // The failure's kind, on the failed attempt only.
        let want_error = if n == 0 { Some("HTTP 500") } else { None };
        assert_eq!(
            g.attr("error.type").as_deref(),
            want_error,
            "attempt {attempt}"
        );
        let request = received
            .iter()
            .find(|r| r.header("hookgate-attempt").as_deref() == Some(attempt.as_str()))
            .unwrap_or_else(|| panic!("attempt {attempt} reached the app"));
        let (t, parent, flags) = traceparent(&request.header("traceparent").unwrap());
        assert_eq!((t.as_str(), flags.as_str()), (trace.as_str(), "01"));
        assert_eq!(parent, g.id(), "attempt {attempt}'s request names its span");
        let want_links = match n {
            0 => Vec::new(),
            _ => vec![(trace.clone(), deliver[n - 1].id())],
        };
        assert_eq!(g.links(), want_links, "attempt {attempt}");
    }
    assert_eq!(
        deliver[0].attr("hookgate.outcome").as_deref(),
        Some("retry")
    );
    assert_eq!(
        deliver[2].attr("hookgate.outcome").as_deref(),
        Some("delivered")
    );

    // The replay: in the entry's trace, with who asked.
    let replay = named(&spans, "replay")[0];
    assert_eq!(replay.parent(), ingest.id());
    assert_eq!(replay.attr("hookgate.actor").as_deref(), Some("alice"));
    assert!(replay.span.start_time_unix_nano <= deliver[2].span.start_time_unix_nano);

    // The duplicate's request: its own trace, linked to the entry's ingest span.
    let dup = wait_until_ok(
        "the duplicate's span",
        Duration::from_secs(20),
        async || {
            collector
                .spans()
                .into_iter()
                .find(|g| g.attr("hookgate.outcome").as_deref() == Some("duplicate"))
                .ok_or("not yet")
        },
    )
    .await;
    assert_ne!(dup.trace(), trace);
    assert_eq!(dup.attr("hookgate.entry_id").as_deref(), Some(id.as_str()));
    assert!(
        dup.links().contains(&(trace.clone(), ingest.id())),
        "{dup:?}"
    );
    gw.stop().await;
}

for_each_store!(
    one_webhook_is_one_trace_from_provider_to_app,
    super::one_webhook_is_one_trace
);

/// Sampling at 0: the app still gets the trace context (unsampled), the entry shows
/// its trace id, and nothing is exported, not even at shutdown's flush. Traces off:
/// no `traceparent`, no trace id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsampled_and_off_traces_export_nothing() {
    let collector = Collector::start().await;
    for telemetry in [
        format!(
            "[telemetry]\notlp_endpoint = \"{}\"\nsample_ratio = 0.0\n",
            collector.url
        ),
        String::new(),
    ] {
        let h = StoreHandle::new(Backend::Embedded);
        let up = Upstream::ok().await;
        let gw = Gateway::start(admin_config(&h, &telemetry, &source("stripe", &up.url, ""))).await;
        let admin = Admin::new(&gw);
        let body = event_body("stripe", "evt_unsampled");
        let (st, json) = post_stripe_signed(&http(), &gw.ingest, "stripe", &body).await;
        assert_eq!(st, 200, "{json}");
        let id = json["id"].as_str().unwrap().to_string();
        up.wait_for(Duration::from_secs(20), "the delivery", |r| !r.is_empty())
            .await;
        let entry = admin.get(&format!("/admin/entries/{id}")).await;
        let sent = up.received()[0].header("traceparent");
        if telemetry.is_empty() {
            assert_eq!(sent, None, "traces off");
            assert_eq!(entry.get("trace_id"), None, "{entry}");
        } else {
            let (t, _, flags) = traceparent(&sent.expect("a traceparent"));
            assert_eq!(Some(t.as_str()), entry["trace_id"].as_str());
            assert_eq!(flags, "00", "not sampled");
        }
        // Stopping flushes whatever waits for export.
        gw.stop().await;
        assert!(collector.spans().is_empty(), "{:?}", collector.spans());
    }
}

/// A webhook reconciliation recovered says so in its delivery spans
/// (`hookgate.origin`); one received as a request has no such attribute.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recovered_webhook_says_its_origin_in_its_delivery_spans() {
    let h = StoreHandle::new(Backend::Embedded);
    let collector = Collector::start().await;
    let up = Upstream::ok().await;
    let stripe = crate::fake_api::FakeStripe::start("sk_test_traced", &["*"]).await;
    let keys = tempfile::tempdir().unwrap();
    let key = keys.path().join("stripe.key");
    std::fs::write(&key, "sk_test_traced").unwrap();
    let telemetry = format!("[telemetry]\notlp_endpoint = \"{}\"\n", collector.url);
    let reconcile = format!(
        "[sources.reconcile]\napi_key_file = \"{}\"\nendpoint = \"we_1\"\napi_base = \"{}\"\ninterval = \"1h\"\nsettle = \"0s\"\n",
        key.display(),
        stripe.url
    );
    let gw = Gateway::start(admin_config(
        &h,
        &telemetry,
        &source("traced", &up.url, &reconcile),
    ))
    .await;
    let admin = Admin::new(&gw);
    let client = http();
    let body = event_body("stripe", "evt_received");
    let (st, json) = post_stripe_signed(&client, &gw.ingest, "traced", &body).await;
    assert_eq!(st, 200, "{json}");
    let received = json["id"].as_str().unwrap().to_string();
    stripe.add(
        "evt_recovered",
        "invoice.paid",
        false,
        Duration::from_secs(120),
    );
    let pass = wait_until_ok("a pass", Duration::from_secs(15), async || {
        let r = client
            .post(format!("{}/admin/sources/traced/reconcile", gw.admin))
            .bearer_auth(TOKEN)
            .json(&serde_json::json!({"since": "1h"}))
            .send()
            .await
            .unwrap();
        match r.status().as_u16() {
            200 => Ok(r.json::<Value>().await.unwrap()),
            s => Err(s.to_string()),
        }
    })
    .await;
    assert_eq!(pass["admitted"], 1, "{pass}");
    let listed = admin
        .get("/admin/entries?source=traced&event_id=evt_recovered")
        .await;
    let recovered = listed["entries"][0]["id"].as_str().unwrap().to_string();
    for (id, origin) in [(recovered, Some("reconciled")), (received, None)] {
        let entry = wait_until_ok("delivered", Duration::from_secs(20), async || {
            let e = admin.get(&format!("/admin/entries/{id}")).await;
            if e["status"] == "delivered" {
                Ok(e)
            } else {
                Err(e)
            }
        })
        .await;
        let trace = entry["trace_id"].as_str().expect("a trace id").to_string();
        let spans = collector
            .wait_for("its delivery span", &trace, |s| {
                !named(s, "deliver").is_empty()
            })
            .await;
        let deliver = named(&spans, "deliver");
        assert_eq!(
            deliver[0].attr("hookgate.origin").as_deref(),
            origin,
            "{id}"
        );
    }
    gw.stop().await;
}

/// A publish into NATS JetStream is a `deliver` span too: the broker as its
/// messaging system, the stream's answer, and the message carries the attempt's
/// span as its `traceparent`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publish_to_a_queue_is_a_deliver_span_and_its_message_carries_it() {
    let h = StoreHandle::new(Backend::Embedded);
    let collector = Collector::start().await;
    let nats = NatsServer::start();
    let js = nats.jetstream().await;
    make_stream(&js, "TRACED", &["traced"], Duration::from_secs(120)).await;
    let telemetry = format!("[telemetry]\notlp_endpoint = \"{}\"\n", collector.url);
    let gw = Gateway::start(admin_config(
        &h,
        &telemetry,
        &source("traced", &format!("{}/traced", nats.url()), ""),
    ))
    .await;
    let admin = Admin::new(&gw);
    let (st, json) = post_stripe_signed(
        &http(),
        &gw.ingest,
        "traced",
        &event_body("stripe", "evt_q"),
    )
    .await;
    assert_eq!(st, 200, "{json}");
    let id = json["id"].as_str().unwrap().to_string();
    let entry = wait_until_ok("delivered", Duration::from_secs(20), async || {
        let e = admin.get(&format!("/admin/entries/{id}")).await;
        if e["status"] == "delivered" {
            Ok(e)
        } else {
            Err(e)
        }
    })
    .await;
    let trace = entry["trace_id"].as_str().expect("a trace id").to_string();
    let spans = collector
        .wait_for("the publish's span", &trace, |s| {
            !named(s, "deliver").is_empty()
        })
        .await;
    let deliver = named(&spans, "deliver")[0];
    assert_eq!(deliver.attr("messaging.system").as_deref(), Some("nats"));
    assert_eq!(
        deliver.attr("messaging.operation.type").as_deref(),
        Some("send")
    );
    assert_eq!(deliver.attr("http.request.method"), None);
    assert_eq!(
        deliver.attr("hookgate.answer").as_deref(),
        Some("stream TRACED seq 1")
    );
    let held = stream_messages(&js, "TRACED").await;
    let tp = held[0]
        .headers
        .get("traceparent")
        .expect("traceparent")
        .as_str()
        .to_string();
    let (t, parent, _) = traceparent(&tp);
    assert_eq!(t, trace);
    assert_eq!(
        parent,
        deliver.id(),
        "the message's parent is the publish's span"
    );
    // The API and the console name the kind; the broker's connection is up.
    let routes = admin.get("/admin/routes").await;
    let destination = format!("{}/traced", nats.url());
    assert!(
        routes.to_string().contains(&format!(
            "\"destination\":\"{destination}\",\"kind\":\"nats\""
        )),
        "{routes}"
    );
    let client = no_redirects();
    let session = log_in(&client, &gw.admin).await;
    let page = client
        .get(format!("{}/console/sources", gw.admin))
        .header("cookie", session)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        page.contains("NATS JetStream") && page.contains(&destination),
        "{page}"
    );
    let metrics = get_text(&http(), &format!("{}/metrics", gw.admin)).await;
    let gauge = format!(
        "hookgate_broker_connected{{kind=\"nats\",broker=\"nats://127.0.0.1:{}\"}} 1",
        nats.port
    );
    assert!(metrics.contains(&gauge), "{gauge} not in the scrape");
    gw.stop().await;
}
