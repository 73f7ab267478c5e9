//! `[jwk]` schemes end to end (Plaid), against a local key API the spec's
//! `fetch_base` points at: a webhook signed with the test key is stored, the key
//! asked once for its `kid` with the source's credentials; a changed body, a token
//! for a `kid` the API does not know, or a body naming a host that is not Plaid's
//! is refused (the last without asking); an API that cannot be asked answers 503 with
//! `Retry-After`, so that Plaid retries.

use std::sync::{Arc, Mutex};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64URL;
use hookgate::config;
use sha2::Digest as _;

use crate::support::*;

pub(crate) const KID: &str = "6c5516e1-92dc-479e-a8ff-5a51992e0001";

fn signing_key() -> p256::ecdsa::SigningKey {
    p256::ecdsa::SigningKey::from_slice(&sha2::Sha256::digest(b"hookgate plaid test key")).unwrap()
}

/// The key API's answer for the test key, as Plaid writes it.
fn jwk_answer() -> serde_json::Value {
    let point = signing_key().verifying_key().to_sec1_point(false);
    serde_json::json!({
        "key": {
            "alg": "ES256", "created_at": 1_560_466_150, "crv": "P-256", "expired_at": null,
            "kid": KID, "kty": "EC", "use": "sig",
            "x": B64URL.encode(point.x().unwrap()),
            "y": B64URL.encode(point.y().unwrap()),
        },
        "request_id": "RZ6Omi1bzzwDaLo",
    })
}

/// `body` and its Plaid-Verification header: an ES256 JWS for `kid`, issued now.
pub(crate) fn plaid_webhook(
    item: &str,
    environment: &str,
    kid: &str,
) -> (Vec<u8>, Vec<(String, String)>) {
    use p256::ecdsa::signature::Signer as _;
    let body = serde_json::to_string_pretty(&serde_json::json!({
        "environment": environment,
        "item_id": item,
        "webhook_code": "DEFAULT_UPDATE",
        "webhook_type": "TRANSACTIONS",
    }))
    .unwrap();
    let header = B64URL.encode(format!(r#"{{"alg":"ES256","kid":"{kid}","typ":"JWT"}}"#));
    let claims = serde_json::json!({
        "iat": now_secs(),
        "request_body_sha256": hex::encode(sha2::Sha256::digest(body.as_bytes())),
    });
    let input = format!("{header}.{}", B64URL.encode(claims.to_string()));
    let sig: p256::ecdsa::Signature = signing_key().sign(input.as_bytes());
    let token = format!("{input}.{}", B64URL.encode(sig.to_bytes()));
    (
        body.into_bytes(),
        vec![("plaid-verification".to_string(), token)],
    )
}

/// A local key API: the test key for `KID`, Plaid's error for any other; each
/// request's body noted.
pub(crate) struct KeyApi {
    pub(crate) base: String,
    asked: Arc<Mutex<Vec<serde_json::Value>>>,
    task: tokio::task::JoinHandle<()>,
}

impl KeyApi {
    pub(crate) async fn start() -> KeyApi {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let asked = Arc::new(Mutex::new(Vec::new()));
        let seen = asked.clone();
        let app = axum::Router::new().route(
            "/webhook_verification_key/get",
            axum::routing::post(move |axum::Json(req): axum::Json<serde_json::Value>| {
                let seen = seen.clone();
                async move {
                    seen.lock().unwrap().push(req.clone());
                    if req["key_id"] == KID {
                        (axum::http::StatusCode::OK, axum::Json(jwk_answer()))
                    } else {
                        (
                            axum::http::StatusCode::BAD_REQUEST,
                            axum::Json(serde_json::json!({
                                "error_type": "INVALID_INPUT",
                                "error_code": "INVALID_WEBHOOK_VERIFICATION_KEY_ID",
                            })),
                        )
                    }
                }
            }),
        );
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        KeyApi { base, asked, task }
    }

    pub(crate) fn asked(&self) -> Vec<serde_json::Value> {
        self.asked.lock().unwrap().clone()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plaid_webhooks_verify_under_the_key_its_api_gives_for_their_kid() {
    let h = StoreHandle::new(Backend::Embedded);
    let api = KeyApi::start().await;
    let text = format!(
        "{}\n[[sources]]\nname = \"plaid\"\nprovider = \"plaid\"\nsecret = \"client-0001:secret-0001\"\n\
         destination = \"http://127.0.0.1:9/\"\n\
         [sources.provider_options]\nfetch_base = \"{}\"\n",
        h.toml(),
        api.base
    );
    let gw = Gateway::start(config::from_toml_str(&text, &|_| None).expect("config")).await;
    let store = h.open().await;
    let c = http();
    let post = async |body: &[u8], headers: &[(String, String)]| {
        post_raw(&c, &gw.ingest, "plaid", body, headers).await
    };

    // Stored, the key asked once, with the source's credentials and the kid.
    let (body, headers) = plaid_webhook("item-1", "sandbox", KID);
    let (st, json) = post(&body, &headers).await;
    assert_eq!(st, 200, "{json}");
    let entry = answered_entry(&*store, &json).await;
    assert_eq!(
        entry.event_type.as_deref(),
        Some("TRANSACTIONS.DEFAULT_UPDATE")
    );
    let (body, headers) = plaid_webhook("item-2", "sandbox", KID);
    let (st, json) = post(&body, &headers).await;
    assert_eq!(st, 200, "{json}");
    assert_eq!(
        api.asked(),
        vec![
            serde_json::json!({"client_id": "client-0001", "secret": "secret-0001", "key_id": KID})
        ]
    );

    // Refused: a changed body; a kid the API does not know (asked, once); a body
    // naming a host that is not Plaid's (never asked).
    let (body, headers) = plaid_webhook("item-3", "sandbox", KID);
    let changed = String::from_utf8(body).unwrap().replace("item-3", "item-4");
    let (st, json) = post(changed.as_bytes(), &headers).await;
    assert_eq!(st, 401, "{json}");
    let (body, headers) = plaid_webhook("item-5", "sandbox", "forged-kid");
    let (st, json) = post(&body, &headers).await;
    assert_eq!(st, 401, "{json}");
    let (st, _) = post(&body, &headers).await;
    assert_eq!(st, 401);
    let (body, headers) = plaid_webhook("item-6", "evil", KID);
    let (st, json) = post(&body, &headers).await;
    assert_eq!(st, 401, "{json}");
    let (st, _) = post(b"{}", &[]).await;
    assert_eq!(st, 401);
    assert_eq!(api.asked().len(), 2, "{:?}", api.asked());
    assert_eq!(store.count("plaid").await.unwrap(), 2);

    // The API is gone: a key not kept yet cannot be had, and Plaid is told to retry;
    // the kept one still verifies.
    api.task.abort();
    let _ = api.task.await;
    let (body, headers) = plaid_webhook("item-7", "sandbox", "rotated-kid");
    let mut req = c.post(format!("{}/ingest/plaid", gw.ingest)).body(body);
    for (k, v) in &headers {
        req = req.header(k.as_str(), v.as_str());
    }
    let resp = req.send().await.unwrap();
    assert_eq!(resp.status().as_u16(), 503);
    assert!(resp.headers().contains_key("retry-after"));
    let (body, headers) = plaid_webhook("item-8", "sandbox", KID);
    let (st, json) = post(&body, &headers).await;
    assert_eq!(st, 200, "{json}");
    gw.stop().await;
}
