//! Certificate schemes end to end (AWS SNS, PayPal), against a local certificate
//! server the specs' `fetch_base` points at: a message signed with the test
//! certificate's key is stored, fetching the certificate once; a tampered message,
//! one for another topic or webhook id, or one naming a certificate on another host
//! is refused (the last without a fetch); a certificate that cannot be fetched gets
//! 503 with `Retry-After`, so that the provider retries. A source that confirms SNS
//! subscriptions visits a verified confirmation's `SubscribeURL` (on the same local
//! server) before storing it, and never a URL the message did not sign or SNS
//! would not send.

use std::sync::{Arc, Mutex};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use hookgate::config;

use crate::support::*;

pub(crate) const TOPIC: &str = "arn:aws:sns:us-east-1:123456789012:orders";
pub(crate) const CERT_URL: &str =
    "https://sns.us-east-1.amazonaws.com/SimpleNotificationService-test.pem";
pub(crate) const WEBHOOK_ID: &str = "8PT597110X687430LKGECATA";
pub(crate) const PAYPAL_CERT_URL: &str =
    "https://api.sandbox.paypal.com/v1/notifications/certs/CERT-360caa42-test";

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(name),
    )
    .expect("fixture")
}

/// RSA PKCS#1 v1.5 SHA-256 with the test certificate's key, base64.
fn sign(msg: &[u8]) -> String {
    let key = ring::signature::RsaKeyPair::from_pkcs8(&fixture("cert-signing.pk8")).expect("key");
    let mut sig = vec![0u8; key.public().modulus_len()];
    key.sign(
        &ring::signature::RSA_PKCS1_SHA256,
        &ring::rand::SystemRandom::new(),
        msg,
        &mut sig,
    )
    .expect("sign");
    B64.encode(sig)
}

/// A local certificate server: the test certificate at any path, each fetch noted;
/// and SNS's confirmation endpoint (`/?Action=ConfirmSubscription…`), which fails
/// with 500 while `failing` is set.
pub(crate) struct CertServer {
    pub(crate) base: String,
    fetched: Arc<Mutex<Vec<String>>>,
    failing: Arc<std::sync::atomic::AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl CertServer {
    pub(crate) async fn start() -> CertServer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let fetched = Arc::new(Mutex::new(Vec::new()));
        let failing = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (seen, fail) = (fetched.clone(), failing.clone());
        let pem = fixture("cert-signing.pem");
        let app = axum::Router::new().fallback(move |uri: axum::http::Uri| {
            let (seen, pem, fail) = (seen.clone(), pem.clone(), fail.clone());
            async move {
                let confirm = uri.query().is_some_and(|q| q.contains("Action=ConfirmSubscription"));
                seen.lock().unwrap().push(match uri.query() {
                    Some(q) => format!("{}?{q}", uri.path()),
                    None => uri.path().to_string(),
                });
                if confirm && fail.load(std::sync::atomic::Ordering::SeqCst) {
                    return (axum::http::StatusCode::INTERNAL_SERVER_ERROR, Vec::new());
                }
                if confirm {
                    let xml = "<ConfirmSubscriptionResponse xmlns=\"http://sns.amazonaws.com/doc/2010-03-31/\"><ConfirmSubscriptionResult><SubscriptionArn>arn:aws:sns:us-east-1:123456789012:orders:1</SubscriptionArn></ConfirmSubscriptionResult></ConfirmSubscriptionResponse>";
                    return (axum::http::StatusCode::OK, xml.as_bytes().to_vec());
                }
                (axum::http::StatusCode::OK, pem)
            }
        });
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        CertServer {
            base,
            fetched,
            failing,
            task,
        }
    }

    pub(crate) fn fetches(&self) -> Vec<String> {
        self.fetched.lock().unwrap().clone()
    }
}

/// An SNS notification signed as SNS signs (SignatureVersion 2).
pub(crate) fn sns_message(id: &str, topic: &str, message: &str, cert_url: &str) -> Vec<u8> {
    let ts = "2026-11-27T12:00:00.000Z";
    let to_sign = format!(
        "Message\n{message}\nMessageId\n{id}\nSubject\nOrder\nTimestamp\n{ts}\nTopicArn\n{topic}\nType\nNotification\n"
    );
    serde_json::json!({
        "Type": "Notification",
        "MessageId": id,
        "TopicArn": topic,
        "Subject": "Order",
        "Message": message,
        "Timestamp": ts,
        "SignatureVersion": "2",
        "Signature": sign(to_sign.as_bytes()),
        "SigningCertURL": cert_url,
        "UnsubscribeURL": "https://sns.us-east-1.amazonaws.com/?Action=Unsubscribe",
    })
    .to_string()
    .into_bytes()
}

/// An SNS `SubscriptionConfirmation` for `topic` naming `subscribe`, signed as SNS
/// signs.
fn sns_confirmation(id: &str, topic: &str, subscribe: &str) -> Vec<u8> {
    let (ts, token) = (
        "2026-11-27T12:00:00.000Z",
        "2336412f37fb687f5d51e6e2425a8a58",
    );
    let message = format!("You have chosen to subscribe to the topic {topic}.");
    let to_sign = format!(
        "Message\n{message}\nMessageId\n{id}\nSubscribeURL\n{subscribe}\nTimestamp\n{ts}\nToken\n{token}\nTopicArn\n{topic}\nType\nSubscriptionConfirmation\n"
    );
    serde_json::json!({
        "Type": "SubscriptionConfirmation",
        "MessageId": id,
        "Token": token,
        "TopicArn": topic,
        "Message": message,
        "SubscribeURL": subscribe,
        "Timestamp": ts,
        "SignatureVersion": "2",
        "Signature": sign(to_sign.as_bytes()),
        "SigningCertURL": CERT_URL,
    })
    .to_string()
    .into_bytes()
}

fn subscribe_url(topic: &str) -> String {
    format!(
        "https://sns.us-east-1.amazonaws.com/?Action=ConfirmSubscription&TopicArn={topic}&Token=2336412f37fb687f5d51e6e2425a8a58"
    )
}

/// A PayPal event and its headers, signed as PayPal signs.
pub(crate) fn paypal_event(
    id: &str,
    webhook_id: &str,
    cert_url: &str,
) -> (Vec<u8>, Vec<(String, String)>) {
    let body = format!(
        r#"{{"id":"{id}","event_type":"PAYMENT.CAPTURE.COMPLETED","resource":{{"id":"5O190127TN364715T"}}}}"#
    );
    let (tid, time) = (
        "b2384410-f8d2-11e6-9a38-7d8f7d4eb4f1",
        "2026-11-27T12:00:00Z",
    );
    let crc = crc32fast::hash(body.as_bytes());
    let sig = sign(format!("{tid}|{time}|{webhook_id}|{crc}").as_bytes());
    let headers = [
        ("paypal-transmission-id", tid),
        ("paypal-transmission-time", time),
        ("paypal-transmission-sig", sig.as_str()),
        ("paypal-cert-url", cert_url),
        ("paypal-auth-algo", "SHA256withRSA"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    (body.into_bytes(), headers)
}

fn gateway_config(h: &StoreHandle, certs: &str) -> config::Config {
    let text = format!(
        "{}\n[[sources]]\nname = \"sns\"\nprovider = \"aws-sns\"\nsecret = \"{TOPIC}\"\n\
         destination = \"http://127.0.0.1:9/\"\n\
         [sources.provider_options]\nfetch_base = \"{certs}\"\n\
         [[sources]]\nname = \"sns-confirming\"\nprovider = \"aws-sns\"\nsecret = \"{TOPIC}\"\n\
         destination = \"http://127.0.0.1:9/\"\nconfirm_subscriptions = true\n\
         [sources.provider_options]\nfetch_base = \"{certs}\"\n\
         [[sources]]\nname = \"paypal\"\nprovider = \"paypal\"\nsecret = \"{WEBHOOK_ID}\"\n\
         destination = \"http://127.0.0.1:9/\"\n\
         [sources.provider_options]\nfetch_base = \"{certs}\"\n",
        h.toml()
    );
    config::from_toml_str(&text, &|_| None).expect("config")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sns_and_paypal_verify_against_a_local_certificate_server() {
    let h = StoreHandle::new(Backend::Embedded);
    let certs = CertServer::start().await;
    let gw = Gateway::start(gateway_config(&h, &certs.base)).await;
    let store = h.open().await;
    let c = http();
    let post = async |source: &str, body: &[u8], headers: &[(String, String)]| {
        post_raw(&c, &gw.ingest, source, body, headers).await
    };

    // SNS: stored, with its MessageId; the certificate fetched once.
    let msg = sns_message("mid-1", TOPIC, "order 1 paid", CERT_URL);
    let (st, json) = post("sns", &msg, &[]).await;
    assert_eq!(st, 200, "{json}");
    let entry = answered_entry(&*store, &json).await;
    assert_eq!(entry.event_id.as_deref(), Some("mid-1"));
    let (st, json) = post(
        "sns",
        &sns_message("mid-2", TOPIC, "order 2 paid", CERT_URL),
        &[],
    )
    .await;
    assert_eq!(st, 200, "{json}");
    let (st, json) = post("sns", &msg, &[]).await;
    assert_eq!(
        (st, &json["duplicate"]),
        (200, &serde_json::json!(true)),
        "{json}"
    );
    assert_eq!(certs.fetches(), ["/SimpleNotificationService-test.pem"]);

    // Refused: a changed message, another topic (AWS signs for every account), a
    // certificate elsewhere (never fetched), an unsigned raw delivery.
    let tampered = String::from_utf8(msg.clone())
        .unwrap()
        .replace("order 1 paid", "order 1 paiD");
    let (st, json) = post("sns", tampered.as_bytes(), &[]).await;
    assert_eq!(st, 401, "{json}");
    let other = sns_message(
        "mid-3",
        "arn:aws:sns:us-east-1:999999999999:orders",
        "x",
        CERT_URL,
    );
    let (st, json) = post("sns", &other, &[]).await;
    assert_eq!(st, 401, "{json}");
    let elsewhere = sns_message(
        "mid-4",
        TOPIC,
        "x",
        "https://sns.us-east-1.amazonaws.com.example.net/SimpleNotificationService-test.pem",
    );
    let (st, json) = post("sns", &elsewhere, &[]).await;
    assert_eq!(st, 401, "{json}");
    let (st, _) = post("sns", b"order 5 paid", &[]).await;
    assert_eq!(st, 401);
    assert_eq!(certs.fetches().len(), 1, "{:?}", certs.fetches());
    assert_eq!(store.count("sns").await.unwrap(), 2);

    // PayPal: stored; another webhook id or a changed transmission refused.
    let (body, headers) = paypal_event("WH-1", WEBHOOK_ID, PAYPAL_CERT_URL);
    let (st, json) = post("paypal", &body, &headers).await;
    assert_eq!(st, 200, "{json}");
    let entry = answered_entry(&*store, &json).await;
    assert_eq!(entry.event_id.as_deref(), Some("WH-1"));
    let (body, headers) = paypal_event("WH-2", "ANOTHER-WEBHOOK", PAYPAL_CERT_URL);
    let (st, json) = post("paypal", &body, &headers).await;
    assert_eq!(st, 401, "{json}");
    let (body, mut headers) = paypal_event("WH-3", WEBHOOK_ID, PAYPAL_CERT_URL);
    headers[1].1 = "2026-11-27T12:00:01Z".into();
    let (st, json) = post("paypal", &body, &headers).await;
    assert_eq!(st, 401, "{json}");
    let (body, headers) = paypal_event(
        "WH-4",
        WEBHOOK_ID,
        "https://api.sandbox.paypal.com/v2/other/CERT-360caa42-test",
    );
    let (st, json) = post("paypal", &body, &headers).await;
    assert_eq!(st, 401, "{json}");
    assert_eq!(certs.fetches().len(), 2, "{:?}", certs.fetches());

    // The certificate server is gone: a certificate not kept yet cannot be fetched,
    // and the provider is told to retry; the ones kept still verify.
    certs.task.abort();
    let _ = certs.task.await;
    let moved = sns_message(
        "mid-6",
        TOPIC,
        "order 6 paid",
        "https://sns.us-east-1.amazonaws.com/SimpleNotificationService-rotated.pem",
    );
    let resp = c
        .post(format!("{}/ingest/sns", gw.ingest))
        .body(moved)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 503);
    assert!(resp.headers().contains_key("retry-after"));
    let (st, json) = post(
        "sns",
        &sns_message("mid-7", TOPIC, "order 7 paid", CERT_URL),
        &[],
    )
    .await;
    assert_eq!(st, 200, "{json}");
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sns_subscriptions_are_confirmed_by_the_gateway_only_once_verified() {
    let h = StoreHandle::new(Backend::Embedded);
    let certs = CertServer::start().await;
    let gw = Gateway::start(gateway_config(&h, &certs.base)).await;
    let store = h.open().await;
    let c = http();
    let post = async |source: &str, body: &[u8]| post_raw(&c, &gw.ingest, source, body, &[]).await;
    let visits = || {
        certs
            .fetches()
            .into_iter()
            .filter(|f| f.contains("Action=ConfirmSubscription"))
            .collect::<Vec<_>>()
    };

    // Without confirm_subscriptions: stored like a notification, nothing visited.
    let (st, json) = post(
        "sns",
        &sns_confirmation("c-0", TOPIC, &subscribe_url(TOPIC)),
    )
    .await;
    assert_eq!(st, 200, "{json}");
    assert_eq!(visits(), Vec::<String>::new());

    // Refused before any visit: a SubscribeURL changed after signing; one SNS would
    // not send (another host, another topic), signed all the same.
    let tampered = String::from_utf8(sns_confirmation("c-1", TOPIC, &subscribe_url(TOPIC)))
        .unwrap()
        .replace("Token=2336412f37", "Token=9996412f37");
    let (st, json) = post("sns-confirming", tampered.as_bytes()).await;
    assert_eq!(
        (st, json["error"].as_str()),
        (401, Some("signature does not match")),
        "{json}"
    );
    let elsewhere = subscribe_url(TOPIC).replace("sns.us-east-1.amazonaws.com", "example.net");
    let (st, json) = post(
        "sns-confirming",
        &sns_confirmation("c-2", TOPIC, &elsewhere),
    )
    .await;
    assert_eq!(
        (st, json["error"].as_str()),
        (
            401,
            Some("the subscription confirmation URL is not the provider's")
        ),
        "{json}"
    );
    let other_topic = subscribe_url("arn:aws:sns:us-east-1:123456789012:other");
    let (st, json) = post(
        "sns-confirming",
        &sns_confirmation("c-3", TOPIC, &other_topic),
    )
    .await;
    assert_eq!(
        (st, json["error"].as_str()),
        (
            401,
            Some("the subscription confirmation URL is not the provider's")
        ),
        "{json}"
    );
    assert_eq!(visits(), Vec::<String>::new());
    assert_eq!(store.count("sns-confirming").await.unwrap(), 0);

    // SNS's endpoint fails: nothing stored, SNS told to send it again.
    certs
        .failing
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let confirmation = sns_confirmation("c-4", TOPIC, &subscribe_url(TOPIC));
    let resp = c
        .post(format!("{}/ingest/sns-confirming", gw.ingest))
        .body(confirmation.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 503);
    assert_eq!(
        resp.headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok()),
        Some("30")
    );
    assert_eq!(visits().len(), 1);
    assert_eq!(store.count("sns-confirming").await.unwrap(), 0);

    // Sent again, it is confirmed (the signed URL, on the local server), then stored.
    certs
        .failing
        .store(false, std::sync::atomic::Ordering::SeqCst);
    let (st, json) = post("sns-confirming", &confirmation).await;
    assert_eq!(st, 200, "{json}");
    let entry = answered_entry(&*store, &json).await;
    assert_eq!(
        entry.event_type.as_deref(),
        Some("SubscriptionConfirmation")
    );
    assert_eq!(
        visits(),
        vec![
            format!(
                "/?Action=ConfirmSubscription&TopicArn={TOPIC}&Token=2336412f37fb687f5d51e6e2425a8a58"
            );
            2
        ]
    );
    // Notifications on the confirming source are stored without a visit.
    let (st, json) = post(
        "sns-confirming",
        &sns_message("n-1", TOPIC, "order 1 paid", CERT_URL),
    )
    .await;
    assert_eq!(st, 200, "{json}");
    assert_eq!(visits().len(), 2);
    assert_eq!(store.count("sns-confirming").await.unwrap(), 2);
    gw.stop().await;
}

/// A gateway whose specs fetch keys from a `fetch_base` (tests only) says so at
/// start, once per source, for certificates and key APIs alike; and one behind
/// trusted proxies says which header names the client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_fetch_base_and_the_client_header_are_named_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let h = StoreHandle::new(Backend::Embedded);
    let cfg_path = dir.path().join("hookgate.toml");
    std::fs::write(
        &cfg_path,
        format!(
            "{}\n[log]\nformat = \"json\"\n[server]\ntrusted_proxies = [\"10.0.0.0/8\"]\nclient_ip_header = \"x-real-ip\"\n\
             [[sources]]\nname = \"sns\"\nprovider = \"aws-sns\"\nsecret = \"{TOPIC}\"\n\
             destination = \"http://127.0.0.1:9/\"\n\
             [sources.provider_options]\nfetch_base = \"http://127.0.0.1:9\"\n\
             [[sources]]\nname = \"plaid\"\nprovider = \"plaid\"\nsecret = \"id:secret\"\n\
             destination = \"http://127.0.0.1:9/\"\n\
             [sources.provider_options]\nfetch_base = \"http://127.0.0.1:9\"\n\
             [[sources]]\nname = \"paypal\"\nprovider = \"paypal\"\nsecret = \"{WEBHOOK_ID}\"\n\
             destination = \"http://127.0.0.1:9/\"\n",
            h.toml()
        ),
    )
    .unwrap();
    let stderr = dir.path().join("stderr.log");
    let gw = ChildGateway::spawn(&cfg_path, &[], &stderr);
    let log = std::fs::read_to_string(&stderr).unwrap();
    let warned = |source: &str| {
        log.lines().any(|l| {
            l.contains("signing keys are fetched from the spec's fetch_base")
                && l.contains(&format!("\"source\":\"{source}\""))
        })
    };
    assert!(warned("sns") && warned("plaid"), "{log}");
    assert!(!warned("paypal"), "{log}");
    assert!(
        log.lines()
            .any(|l| l.contains("client's address is read from this header")
                && l.contains("x-real-ip")),
        "{log}"
    );
    drop(gw);
}
