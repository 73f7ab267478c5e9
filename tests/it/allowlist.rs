//! `allow_ips` end to end: a request from outside a source's list is answered 403
//! before its body is sent and kept in the rejection log; `server.trusted_proxies`
//! decides when `X-Forwarded-For` names the client, and otherwise it never does;
//! and a provider's published list, served by a local "provider ranges" server, is
//! picked up within one refresh interval when it changes, kept in the store, and
//! applied by a gateway that starts while that server is down (on every store).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::admin::{Admin, admin_config};
use crate::for_each_store;
use crate::forward::source;
use crate::support::*;

const WAIT: Duration = Duration::from_secs(15);

/// POST a signed Stripe event to `source`, with `headers` added.
async fn post_from(base: &str, source: &str, event: &str, extra: &[(&str, &str)]) -> u16 {
    let body = event_body("stripe", event);
    let mut headers = sign_headers("stripe", STRIPE_SECRET, &body, now_secs(), "x");
    for (k, v) in extra {
        headers.push((k.to_string(), v.to_string()));
    }
    post_raw(&http(), base, source, &body, &headers).await.0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_from_outside_the_list_is_refused_before_its_body() {
    let h = StoreHandle::new(Backend::Embedded);
    let sources = format!(
        "{}{}",
        source(
            "shut",
            "http://127.0.0.1:9/",
            "allow_ips = [\"192.0.2.0/24\", \"2001:db8::/32\"]\n"
        ),
        source(
            "open",
            "http://127.0.0.1:9/",
            "allow_ips = [\"127.0.0.0/8\"]\n"
        ),
    );
    let gw = Gateway::start(admin_config(&h, "", &sources)).await;
    assert_eq!(post_from(&gw.ingest, "open", "evt_open", &[]).await, 200);
    assert_eq!(post_from(&gw.ingest, "shut", "evt_shut", &[]).await, 403);
    // Without trusted proxies, X-Forwarded-For names no one.
    let forged = [("x-forwarded-for", "192.0.2.7")];
    assert_eq!(post_from(&gw.ingest, "shut", "evt_xff", &forged).await, 403);
    let answer = head_only(&gw.ingest, "shut").await;
    assert!(answer.starts_with("HTTP/1.1 403"), "{answer:?}");

    let admin = Admin::new(&gw);
    let page = wait_until_ok("the refusals in the rejection log", WAIT, async || {
        let page = admin
            .get("/admin/rejections?source=shut&reason=ip_not_allowed")
            .await;
        match page["rejections"].as_array().map(Vec::len) {
            Some(3) => Ok(page),
            _ => Err(page.to_string()),
        }
    })
    .await;
    let row = &page["rejections"][0];
    assert_eq!(row["status"], 403);
    assert_eq!(row["client"], "127.0.0.1");
    let metrics = get_text(&http(), &format!("{}/metrics", gw.admin)).await;
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("hookgate_ingest_requests_total{")
                && l.contains("source=\"shut\"")
                && l.contains("outcome=\"ip_not_allowed\"")
                && l.ends_with(" 3")),
        "{}",
        metrics
            .lines()
            .filter(|l| l.contains("source=\"shut\""))
            .collect::<Vec<_>>()
            .join("\n")
    );
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trusted_proxy_names_the_client_and_no_one_else_does() {
    let h = StoreHandle::new(Backend::Embedded);
    let sources = source(
        "proxied",
        "http://127.0.0.1:9/",
        "allow_ips = [\"192.0.2.0/24\"]\n",
    );
    let global = "[server]\ntrusted_proxies = [\"127.0.0.1\"]\n";
    let gw = Gateway::start(admin_config(&h, global, &sources)).await;
    // The proxy (this test, on loopback) says who the client is.
    let via = [("x-forwarded-for", "192.0.2.7")];
    assert_eq!(post_from(&gw.ingest, "proxied", "evt_a", &via).await, 200);
    // What a client wrote to the left of the address the proxy saw is not believed.
    let spoofed = [("x-forwarded-for", "192.0.2.7, 198.51.100.1")];
    assert_eq!(
        post_from(&gw.ingest, "proxied", "evt_c", &spoofed).await,
        403
    );
    // A proxy that writes X-Forwarded-For passes a client's own Forwarded and
    // X-Real-IP on: they are not read.
    let outside = [("x-forwarded-for", "203.0.113.9")];
    assert_eq!(
        post_from(&gw.ingest, "proxied", "evt_e", &outside).await,
        403
    );
    let smuggled = [
        ("x-forwarded-for", "203.0.113.9"),
        ("forwarded", "for=192.0.2.5"),
        ("x-real-ip", "192.0.2.6"),
    ];
    assert_eq!(
        post_from(&gw.ingest, "proxied", "evt_f", &smuggled).await,
        403
    );
    let rfc = [("forwarded", "for=192.0.2.8;proto=https")];
    assert_eq!(post_from(&gw.ingest, "proxied", "evt_b", &rfc).await, 403);
    // Without the header, the proxy is the client.
    assert_eq!(post_from(&gw.ingest, "proxied", "evt_d", &[]).await, 403);
    gw.stop().await;

    // Behind a proxy that writes Forwarded, that one is read, and only that one.
    let h = StoreHandle::new(Backend::Embedded);
    let global = "[server]\ntrusted_proxies = [\"127.0.0.1\"]\nclient_ip_header = \"forwarded\"\n";
    let gw = Gateway::start(admin_config(&h, global, &sources)).await;
    assert_eq!(post_from(&gw.ingest, "proxied", "evt_b", &rfc).await, 200);
    assert_eq!(post_from(&gw.ingest, "proxied", "evt_a", &via).await, 403);
    let smuggled = [
        ("forwarded", "for=203.0.113.9"),
        ("x-forwarded-for", "192.0.2.7"),
    ];
    assert_eq!(
        post_from(&gw.ingest, "proxied", "evt_g", &smuggled).await,
        403
    );
    gw.stop().await;
}

/// A local stand-in for a provider's published ranges: serves `body` at any path,
/// or refuses connections once stopped.
struct RangesServer {
    base: String,
    body: Arc<Mutex<String>>,
    fetches: Arc<Mutex<Vec<Instant>>>,
    task: tokio::task::JoinHandle<()>,
}

impl RangesServer {
    async fn start(body: &str) -> RangesServer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let body = Arc::new(Mutex::new(body.to_string()));
        let fetches = Arc::new(Mutex::new(Vec::new()));
        let (b, f) = (body.clone(), fetches.clone());
        let app = axum::Router::new().fallback(move || {
            let (b, f) = (b.clone(), f.clone());
            async move {
                f.lock().unwrap().push(Instant::now());
                let text = b.lock().unwrap().clone();
                ([("content-type", "application/json")], text)
            }
        });
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        RangesServer {
            base,
            body,
            fetches,
            task,
        }
    }

    fn serve(&self, body: &str) {
        *self.body.lock().unwrap() = body.to_string();
    }

    fn fetched(&self) -> usize {
        self.fetches.lock().unwrap().len()
    }

    fn stop(self) {
        self.task.abort();
    }
}

/// A copy of the Stripe spec named `name`, in a providers directory of its own, so
/// that this test's metric series (labelled by provider) are its own.
fn providers_dir(name: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let stripe = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("providers/stripe.toml"),
    )
    .unwrap();
    let spec = stripe.replacen("name = \"stripe\"", &format!("name = \"{name}\""), 1);
    std::fs::write(dir.path().join(format!("{name}.toml")), spec).unwrap();
    dir
}

/// The configuration of a gateway whose source `stripe` takes the ranges `provider`
/// publishes, fetched from `base`, every 2 s.
fn provider_config(
    h: &StoreHandle,
    dir: &tempfile::TempDir,
    provider: &str,
    base: &str,
) -> hookgate::config::Config {
    let text = format!(
        "providers_dir = \"{}\"\n{}\n[server]\nallowlist_refresh = \"2s\"\n",
        dir.path().display(),
        h.toml()
    ) + &source(
        "stripe",
        "http://127.0.0.1:9/",
        &format!("allow_ips = \"provider\"\n[sources.provider_options]\nfetch_base = \"{base}\"\n"),
    )
    .replacen(
        "provider = \"stripe\"",
        &format!("provider = \"{provider}\""),
        1,
    );
    hookgate::config::from_toml_str(&text, &|_| None).expect("config")
}

const REFRESH: Duration = Duration::from_secs(2);
const ELSEWHERE: &str = r#"{"WEBHOOKS":["192.0.2.1","198.51.100.0/24"]}"#;
const HERE: &str = r#"{"WEBHOOKS":["192.0.2.1","198.51.100.0/24","127.0.0.1"]}"#;

async fn published_ranges_keep_up(backend: Backend) {
    let h = StoreHandle::new(backend);
    let provider = format!("stripe-{backend:?}").to_lowercase();
    let dir = providers_dir(&provider);
    let ranges = RangesServer::start(ELSEWHERE).await;
    let gw = Gateway::start(provider_config(&h, &dir, &provider, &ranges.base)).await;
    wait_until("the first fetch", WAIT, async || ranges.fetched() >= 1).await;
    assert_eq!(post_from(&gw.ingest, "stripe", "evt_1", &[]).await, 403);

    // The provider adds this machine's address: in force within one refresh (and
    // the time a fetch and a request take on a loaded machine).
    let fetched_before = ranges.fetched();
    ranges.serve(HERE);
    let changed = Instant::now();
    wait_until_ok(
        "the new range to be in force",
        WAIT,
        async || match post_from(&gw.ingest, "stripe", "evt_2", &[]).await {
            200 => Ok(()),
            other => Err(other),
        },
    )
    .await;
    let took = changed.elapsed();
    assert!(
        took <= REFRESH + Duration::from_millis(2_500),
        "picked up after {took:?}, the interval is {REFRESH:?}"
    );
    assert!(ranges.fetched() > fetched_before);
    let metrics = get_text(&http(), &format!("{}/metrics", gw.admin)).await;
    let value = |name: &str| -> Option<f64> {
        metrics
            .lines()
            .find(|l| l.starts_with(&format!("{name}{{provider=\"{provider}\"}}")))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
    };
    assert_eq!(value("hookgate_allowlist_ranges"), Some(3.0), "{metrics}");
    assert!(value("hookgate_allowlist_changes_total").is_some_and(|v| v >= 2.0));
    gw.stop().await;

    // The provider's server is down when a gateway starts: the list kept in the
    // store applies, and the failing refresh shows.
    let base = ranges.base.clone();
    ranges.stop();
    let gw = Gateway::start(provider_config(&h, &dir, &provider, &base)).await;
    assert_eq!(post_from(&gw.ingest, "stripe", "evt_3", &[]).await, 200);
    wait_until_ok("the failing refresh to show", WAIT, async || {
        let metrics = get_text(&http(), &format!("{}/metrics", gw.admin)).await;
        let failing = metrics.lines().any(|l| {
            l == format!("hookgate_allowlist_refresh_failing{{provider=\"{provider}\"}} 1")
        });
        if failing { Ok(()) } else { Err(metrics) }
    })
    .await;
    // The list in force stayed.
    assert_eq!(post_from(&gw.ingest, "stripe", "evt_4", &[]).await, 200);
    gw.stop().await;
}
for_each_store!(
    a_providers_published_ranges_keep_up_and_survive_a_restart_without_network,
    super::published_ranges_keep_up
);
