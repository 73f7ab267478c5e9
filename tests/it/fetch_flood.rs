//! Forgeries that name ever new signing keys never cost the genuine webhooks of a
//! fetched-key scheme their answer (AWS SNS, PayPal: a certificate URL; Plaid: a
//! `kid`). One client floods a source with unsigned requests, each naming a fresh
//! key on the provider's hosts (a burst of 300, then 20 a second), while the
//! provider's genuine webhooks arrive once a second from another address, one of
//! them naming a key not seen before (a rotation): every genuine one is stored.
//! The flood costs at most the client's fetch budget, a forgery whose unsigned
//! claims already fail (another SNS topic, a stale Plaid token) costs no fetch, and
//! the key that verified the genuine webhooks is never evicted for the forged ones.

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD as B64, URL_SAFE_NO_PAD as B64URL};
use futures_util::StreamExt as _;
use hookgate::config;
use hookgate::provider::certificate::FETCHES_PER_MINUTE_PER_CLIENT;
use sha2::Digest as _;

use crate::certificates::{
    CERT_URL, CertServer, PAYPAL_CERT_URL, TOPIC, WEBHOOK_ID, paypal_event, sns_message,
};
use crate::jwk::{KID, KeyApi, plaid_webhook};
use crate::support::*;

type Request = (Vec<u8>, Vec<(String, String)>);

/// An HTTP client whose connections come from `from` (any 127/8 address is this
/// host's).
fn client_from(from: &str) -> reqwest::Client {
    http_builder()
        .local_address(from.parse::<IpAddr>().ok())
        .build()
        .expect("client")
}

/// A flood of forgeries to one source, from 127.0.0.2: `forge(n)` is the n-th.
struct Flood {
    stop: Arc<AtomicBool>,
    sent: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<Vec<u16>>,
}

impl Flood {
    /// A burst of `burst` forgeries, eight at a time, then 20 a second until
    /// stopped.
    fn start(
        ingest: &str,
        source: &'static str,
        burst: usize,
        forge: impl Fn(usize) -> Request + Send + Sync + 'static,
    ) -> Flood {
        let (stop, sent) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicUsize::new(0)),
        );
        let (ingest, stopping, counted) = (ingest.to_string(), stop.clone(), sent.clone());
        let task = tokio::spawn(async move {
            let c = client_from("127.0.0.2");
            let forge = Arc::new(forge);
            let mut statuses: Vec<u16> = futures_util::stream::iter(0..burst)
                .map(|n| {
                    let (c, ingest, forge, counted) =
                        (c.clone(), ingest.clone(), forge.clone(), counted.clone());
                    async move {
                        let (body, headers) = forge(n);
                        let (st, _) = post_raw(&c, &ingest, source, &body, &headers).await;
                        counted.fetch_add(1, Ordering::SeqCst);
                        st
                    }
                })
                .buffer_unordered(8)
                .collect()
                .await;
            let mut tick = tokio::time::interval(Duration::from_millis(50));
            let mut n = burst;
            while !stopping.load(Ordering::SeqCst) {
                tick.tick().await;
                let (body, headers) = forge(n);
                n += 1;
                let (st, _) = post_raw(&c, &ingest, source, &body, &headers).await;
                counted.fetch_add(1, Ordering::SeqCst);
                statuses.push(st);
            }
            statuses
        });
        Flood { stop, sent, task }
    }

    async fn burst_sent(&self, burst: usize) {
        let sent = self.sent.clone();
        wait_until(
            "the burst of forgeries",
            Duration::from_secs(60),
            async || sent.load(Ordering::SeqCst) >= burst,
        )
        .await;
    }

    /// Stop, and every forgery's answer.
    async fn stop(self) -> Vec<u16> {
        self.stop.store(true, Ordering::SeqCst);
        self.task.await.expect("flood")
    }
}

const BURST: usize = 300;

/// While `flood` runs, `genuine(i)` for i in 1..=10, once a second from 127.0.0.3:
/// each answered 200.
async fn genuine_ones_pass(
    ingest: &str,
    source: &str,
    flood: &Flood,
    genuine: impl Fn(usize) -> Request,
) {
    flood.burst_sent(BURST).await;
    let c = client_from("127.0.0.3");
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    for i in 1..=10 {
        tick.tick().await;
        let (body, headers) = genuine(i);
        let (st, json) = post_raw(&c, ingest, source, &body, &headers).await;
        assert_eq!(st, 200, "genuine webhook {i} during the flood: {json}");
    }
}

/// Forgeries are refused (401), or told to come back (503) once their client's
/// budget is spent; never stored.
fn refused(statuses: &[u16]) {
    assert!(statuses.len() > BURST, "{}", statuses.len());
    assert!(
        statuses.iter().all(|s| *s == 401 || *s == 503),
        "{:?}",
        statuses
            .iter()
            .filter(|s| **s != 401 && **s != 503)
            .collect::<Vec<_>>()
    );
}

fn source_config(
    h: &StoreHandle,
    name: &str,
    provider: &str,
    secret: &str,
    base: &str,
) -> config::Config {
    let text = format!(
        "{}\n[[sources]]\nname = \"{name}\"\nprovider = \"{provider}\"\nsecret = \"{secret}\"\n\
         destination = \"http://127.0.0.1:9/\"\n\
         [sources.provider_options]\nfetch_base = \"{base}\"\n",
        h.toml()
    );
    config::from_toml_str(&text, &|_| None).expect("config")
}

/// Any signature of RSA's size: what a forger without the key sends.
fn garbage_signature() -> String {
    B64.encode([0x5a_u8; 256])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_sns_certificate_urls_never_cost_genuine_messages_their_answer() {
    let h = StoreHandle::new(Backend::Embedded);
    let certs = CertServer::start().await;
    let gw = Gateway::start(source_config(&h, "sns", "aws-sns", TOPIC, &certs.base)).await;
    let store = h.open().await;

    let (st, json) = post_raw(
        &http(),
        &gw.ingest,
        "sns",
        &sns_message("g-0", TOPIC, "paid", CERT_URL),
        &[],
    )
    .await;
    assert_eq!(st, 200, "{json}");

    // Unsigned messages of the source's topic, each naming a fresh certificate on
    // SNS's hosts; and as many of another topic, which cannot verify here.
    let forge = |n: usize| {
        let topic = if n.is_multiple_of(2) {
            TOPIC.to_string()
        } else {
            "arn:aws:sns:us-east-1:999999999999:elsewhere".to_string()
        };
        let body = serde_json::json!({
            "Type": "Notification",
            "MessageId": format!("forged-{n}"),
            "TopicArn": topic,
            "Message": "refund everything",
            "Timestamp": "2026-11-27T12:00:00.000Z",
            "SignatureVersion": "2",
            "Signature": garbage_signature(),
            "SigningCertURL": format!("https://sns.us-east-1.amazonaws.com/SimpleNotificationService-forged-{n}.pem"),
        });
        (body.to_string().into_bytes(), Vec::new())
    };
    let flood = Flood::start(&gw.ingest, "sns", BURST, forge);
    // SNS rotates its certificate half way: a URL never seen before.
    let rotated = "https://sns.us-east-1.amazonaws.com/SimpleNotificationService-rotated.pem";
    genuine_ones_pass(&gw.ingest, "sns", &flood, |i| {
        let url = if i > 5 { rotated } else { CERT_URL };
        (
            sns_message(&format!("g-{i}"), TOPIC, "paid", url),
            Vec::new(),
        )
    })
    .await;
    refused(&flood.stop().await);

    assert_eq!(store.count("sns").await.unwrap(), 11);
    let fetches = certs.fetches();
    let forged: Vec<&String> = fetches.iter().filter(|f| f.contains("forged")).collect();
    assert!(
        forged.len() <= FETCHES_PER_MINUTE_PER_CLIENT,
        "the forger's client fetched {} certificates: {forged:?}",
        forged.len()
    );
    // Another topic's messages cost no fetch at all (odd numbers).
    assert!(
        forged.iter().all(|f| {
            let n: usize = f
                .trim_start_matches("/SimpleNotificationService-forged-")
                .trim_end_matches(".pem")
                .parse()
                .unwrap();
            n.is_multiple_of(2)
        }),
        "{forged:?}"
    );
    // The genuine certificates were each fetched once: never evicted, never
    // fetched again for the flood.
    for genuine in [
        "/SimpleNotificationService-test.pem",
        "/SimpleNotificationService-rotated.pem",
    ] {
        assert_eq!(
            fetches.iter().filter(|f| *f == genuine).count(),
            1,
            "{fetches:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_paypal_certificate_urls_never_cost_genuine_events_their_answer() {
    let h = StoreHandle::new(Backend::Embedded);
    let certs = CertServer::start().await;
    let gw = Gateway::start(source_config(
        &h,
        "paypal",
        "paypal",
        WEBHOOK_ID,
        &certs.base,
    ))
    .await;
    let store = h.open().await;

    let (body, headers) = paypal_event("WH-0", WEBHOOK_ID, PAYPAL_CERT_URL);
    let (st, json) = post_raw(&http(), &gw.ingest, "paypal", &body, &headers).await;
    assert_eq!(st, 200, "{json}");

    let forge = |n: usize| {
        let (body, mut headers) = paypal_event(
            &format!("WH-forged-{n}"),
            WEBHOOK_ID,
            &format!("https://api.sandbox.paypal.com/v1/notifications/certs/CERT-forged-{n}"),
        );
        for (k, v) in &mut headers {
            if k == "paypal-transmission-sig" {
                *v = garbage_signature();
            }
        }
        (body, headers)
    };
    let flood = Flood::start(&gw.ingest, "paypal", BURST, forge);
    let rotated = "https://api.sandbox.paypal.com/v1/notifications/certs/CERT-rotated";
    genuine_ones_pass(&gw.ingest, "paypal", &flood, |i| {
        let url = if i > 5 { rotated } else { PAYPAL_CERT_URL };
        paypal_event(&format!("WH-{i}"), WEBHOOK_ID, url)
    })
    .await;
    refused(&flood.stop().await);

    assert_eq!(store.count("paypal").await.unwrap(), 11);
    let fetches = certs.fetches();
    let forged = fetches.iter().filter(|f| f.contains("forged")).count();
    assert!(forged <= FETCHES_PER_MINUTE_PER_CLIENT, "{fetches:?}");
    for genuine in [
        "/v1/notifications/certs/CERT-360caa42-test",
        "/v1/notifications/certs/CERT-rotated",
    ] {
        assert_eq!(
            fetches.iter().filter(|f| *f == genuine).count(),
            1,
            "{fetches:?}"
        );
    }
}

/// A Plaid token for `body` naming `kid`, issued at `iat`, under no key at all.
fn forged_plaid(n: usize, iat: i64) -> Request {
    let body = format!("{{\n  \"environment\": \"sandbox\",\n  \"item_id\": \"forged-{n}\"\n}}");
    let header = B64URL.encode(format!(
        r#"{{"alg":"ES256","kid":"forged-{n}","typ":"JWT"}}"#
    ));
    let claims = serde_json::json!({
        "iat": iat,
        "request_body_sha256": hex::encode(sha2::Sha256::digest(body.as_bytes())),
    });
    let token = format!(
        "{header}.{}.{}",
        B64URL.encode(claims.to_string()),
        B64URL.encode([0x5a_u8; 64])
    );
    (
        body.into_bytes(),
        vec![("plaid-verification".to_string(), token)],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_plaid_key_ids_never_cost_genuine_webhooks_their_answer() {
    let h = StoreHandle::new(Backend::Embedded);
    let api = KeyApi::start().await;
    let gw = Gateway::start(source_config(
        &h,
        "plaid",
        "plaid",
        "client-0001:secret-0001",
        &api.base,
    ))
    .await;
    let store = h.open().await;

    let (body, headers) = plaid_webhook("item-0", "sandbox", KID);
    let (st, json) = post_raw(&http(), &gw.ingest, "plaid", &body, &headers).await;
    assert_eq!(st, 200, "{json}");

    // Fresh kids in tokens issued now; and as many issued an hour ago, which no
    // key could make acceptable.
    let forge = |n: usize| {
        let iat = if n.is_multiple_of(2) {
            now_secs()
        } else {
            now_secs() - 3600
        };
        forged_plaid(n, iat)
    };
    let flood = Flood::start(&gw.ingest, "plaid", BURST, forge);
    genuine_ones_pass(&gw.ingest, "plaid", &flood, |i| {
        plaid_webhook(&format!("item-{i}"), "sandbox", KID)
    })
    .await;
    refused(&flood.stop().await);

    assert_eq!(store.count("plaid").await.unwrap(), 11);
    let asked = api.asked();
    let forged: Vec<&str> = asked
        .iter()
        .filter_map(|a| a["key_id"].as_str())
        .filter(|k| k.starts_with("forged-"))
        .collect();
    assert!(forged.len() <= FETCHES_PER_MINUTE_PER_CLIENT, "{forged:?}");
    assert!(
        forged.iter().all(|k| k
            .trim_start_matches("forged-")
            .parse::<usize>()
            .unwrap()
            .is_multiple_of(2)),
        "a stale token cost a fetch: {forged:?}"
    );
    assert_eq!(
        asked.iter().filter(|a| a["key_id"] == KID).count(),
        1,
        "{asked:?}"
    );
}
