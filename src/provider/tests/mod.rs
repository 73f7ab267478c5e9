//! The data-driven provider suite. Every `[[vectors]]` entry of every built-in spec
//! is checked in both directions (`vectors`); the spec format and the registry are
//! checked on the whole catalogue (`specs`); every provider round-trips through the
//! signer and refuses tampering (`round_trip`); the providers with a behaviour of
//! their own (handshakes, signatures in the body, signed URLs, dedupe keys) are
//! checked one by one (`providers`); the work each verification does is bounded
//! (`cost`); and property tests feed arbitrary and near-miss requests to every
//! provider (`proptests`).
//!
//! This file holds what they share: requests signed the way each provider signs them.

mod cost;
mod proptests;
mod providers;
mod round_trip;
mod specs;
mod vectors;

use std::sync::Arc;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use http::{HeaderMap, HeaderName, HeaderValue};
use sha2::Digest as _;

use super::sign::{SignInput, sign};
use super::spec::{Algorithm, ValueSource, Vector};
use super::verify::{Context, ParsedSignature};
use super::*;

fn headers_of(v: &Vector) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, val) in &v.headers {
        h.append(
            HeaderName::from_bytes(k.as_bytes()).unwrap(),
            HeaderValue::from_str(val).unwrap(),
        );
    }
    h
}

/// A POST to `/` without a public URL.
fn post_to_root<'a>(headers: &'a HeaderMap, body: &'a [u8]) -> Request<'a> {
    Request {
        method: "POST",
        path: "/",
        url: None,
        headers,
        body,
    }
}

/// The headers a signer produced, as a request carries them.
fn header_map(headers: &[(http::HeaderName, String)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (n, val) in headers {
        h.insert(n.clone(), HeaderValue::from_str(val).unwrap());
    }
    h
}

/// Path and query of a URL, `/` without one.
fn path_of(url: Option<&str>) -> String {
    url.and_then(|u| u.parse::<http::Uri>().ok())
        .and_then(|u| u.path_and_query().map(|p| p.as_str().to_string()))
        .unwrap_or_else(|| "/".into())
}

fn json_at(body: &[u8], ptr: &str) -> Option<serde_json::Value> {
    serde_json::from_slice::<serde_json::Value>(body)
        .ok()?
        .pointer(ptr)
        .cloned()
}

/// Discord's test keypair (fixed seed).
fn discord_key() -> ed25519_dalek::SigningKey {
    ed25519_dalek::SigningKey::from_bytes(&[7u8; 32])
}

/// SendGrid's test keypair (fixed scalar).
fn sendgrid_key() -> p256::ecdsa::SigningKey {
    p256::ecdsa::SigningKey::from_slice(&sha2::Sha256::digest(b"hookgate sendgrid test key"))
        .unwrap()
}

/// The secret a test source of `spec` is configured with.
fn test_secret(spec: &Spec) -> String {
    use p256::pkcs8::EncodePublicKey as _;
    match spec.algorithm() {
        // The API credentials a `[jwk]` scheme's key is asked with.
        _ if spec.jwk.is_some() => format!("client-{}:secret-{}", spec.name, spec.name),
        Algorithm::Ed25519 => hex::encode(discord_key().verifying_key().to_bytes()),
        Algorithm::EcdsaP256Sha256 => B64.encode(
            sendgrid_key()
                .verifying_key()
                .to_public_key_der()
                .unwrap()
                .as_bytes(),
        ),
        _ if spec.secret_encoding == spec::SecretEncoding::WhsecBase64 => {
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".into()
        }
        _ if spec.secret_encoding == spec::SecretEncoding::Hex => {
            hex::encode(format!("test-secret-{}", spec.name))
        }
        _ => format!("test-secret-{}", spec.name),
    }
}

/// The URL test requests are sent to.
const URL: &str = "https://hooks.example.com/ingest/x?tenant=1";

/// A body of the shape `spec`'s provider sends, with `id` wherever ids go.
fn test_body(spec: &Spec, id: &str) -> Vec<u8> {
    match spec.name.as_str() {
        "twilio" => format!("MessageSid=SM{id}&Body=hello+world&From=%2B15551234567&MessageStatus=received"),
        "mailgun" => format!(r#"{{"event-data":{{"id":"{id}","event":"delivered"}}}}"#),
        "slack" => format!(
            r#"{{"type":"event_callback","event_id":"{id}","event":{{"type":"app_mention"}}}}"#
        ),
        "adyen" => format!(
            r#"{{"live":"false","notificationItems":[{{"NotificationRequestItem":{{"amount":{{"currency":"EUR","value":1000}},"eventCode":"AUTHORISATION","merchantAccountCode":"Test","merchantReference":"order-{id}","pspReference":"{id}","success":"true","additionalData":{{}}}}}}]}}"#
        ),
        "microsoft-graph" => format!(
            r#"{{"value":[{{"subscriptionId":"{id}","changeType":"created","resource":"users/{id}"}}]}}"#
        ),
        _ => format!(
            r#"{{"id":"{id}","event_id":"{id}","type":"thing.happened","event":"thing","webhookId":"wh","action":"create","createdAt":"2026-01-01T00:00:00Z","data":{{"id":"{id}"}}}}"#
        ),
    }
    .into_bytes()
}

/// A request as the provider would send it.
struct Sent {
    headers: HeaderMap,
    body: Vec<u8>,
    url: Option<String>,
    path: String,
}

impl Sent {
    fn req(&self) -> Request<'_> {
        Request {
            method: "POST",
            path: &self.path,
            url: self.url.as_deref(),
            headers: &self.headers,
            body: &self.body,
        }
    }
}

/// Sign `body` as `spec`'s provider would, with the test key or secret. `None` when
/// the provider could not have sent this body (e.g. Mailgun needs a JSON object).
fn send(spec: &Spec, body: &[u8], ts: i64, id: &str) -> Option<Sent> {
    let url = spec.signs_url().then(|| URL.to_string());
    let path = path_of(url.as_deref());
    let mut headers = HeaderMap::new();
    if spec.algorithm().is_public_key() {
        let ts_text = ts.to_string();
        let ctx = Context::new(
            Request {
                method: "POST",
                path: &path,
                url: url.as_deref(),
                headers: &headers,
                body,
            },
            ParsedSignature::default(),
        );
        let msg = verify::message(spec, &ctx, Some(&ts_text), url.as_deref()).ok()?;
        let sig = match spec.algorithm() {
            Algorithm::Ed25519 => {
                use ed25519_dalek::Signer as _;
                discord_key().sign(&msg).to_bytes().to_vec()
            }
            _ => {
                use p256::ecdsa::signature::Signer as _;
                let sig: p256::ecdsa::Signature = sendgrid_key().sign(&msg);
                sig.to_der().as_bytes().to_vec()
            }
        };
        if let Some(ValueSource::Header(h)) = spec.timestamp.as_ref().map(|t| &t.from) {
            headers.insert(h.clone(), HeaderValue::from_str(&ts_text).unwrap());
        }
        headers.insert(
            spec.signature_header().unwrap().clone(),
            HeaderValue::from_str(&verify::encode_sig(spec.encoding, &sig)).unwrap(),
        );
        return Some(Sent {
            headers,
            body: body.to_vec(),
            url,
            path,
        });
    }
    let signed = sign(
        spec,
        &Secret::new(test_secret(spec)),
        &SignInput {
            body,
            timestamp: ts,
            id,
            event_type: Some("thing.happened"),
            method: "POST",
            path: &path,
            url: url.as_deref(),
        },
    )
    .ok()?;
    for (n, v) in &signed.headers {
        headers.append(n.clone(), HeaderValue::from_str(v).unwrap());
    }
    Some(Sent {
        body: signed.body(body).to_vec(),
        headers,
        url,
        path,
    })
}

/// A built-in provider's spec.
fn builtin(name: &str) -> Arc<Spec> {
    Registry::builtin()
        .unwrap()
        .get(name)
        .unwrap_or_else(|| panic!("no built-in provider {name:?}"))
        .clone()
}

fn verifier(spec: &Arc<Spec>) -> Verifier {
    Verifier::new(spec.clone(), &[Secret::new(test_secret(spec))]).unwrap()
}

const NOW: i64 = 1_700_000_000;
