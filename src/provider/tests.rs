//! Data-driven provider tests: every `[[vectors]]` entry of every built-in spec is
//! checked by one function, in both directions (verify, and sign where the vector
//! says `reproduce`); every provider round-trips through the signer; and property
//! tests feed arbitrary and near-miss requests to every provider.

use std::sync::Arc;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use http::{HeaderMap, HeaderName, HeaderValue};
use proptest::prelude::*;
use sha2::Digest as _;

use super::sign::{SignInput, sign};
use super::spec::{Algorithm, HeaderFormat, ValueSource, Vector};
use super::verify::{Context, HandshakeReply, ParsedSignature, VerifyError};
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

/// The single place that checks a vector against the engine.
#[track_caller]
fn check(spec: &Spec, v: &Vector) {
    let verifier = Verifier::new(Arc::new(spec.clone()), &[Secret::new(&v.secret)])
        .unwrap_or_else(|e| panic!("{}: {}: {e}", spec.name, v.description));
    let headers = headers_of(v);
    let path = path_of(v.url.as_deref());
    let req = Request {
        method: v.method.as_deref().unwrap_or("POST"),
        path: &path,
        url: v.url.as_deref(),
        headers: &headers,
        body: v.body.as_bytes(),
    };
    let got = match v.now {
        Some(now) => verifier.verify(req, now).map(|_| ()),
        None => verifier.verify_ignoring_timestamp(req).map(|_| ()),
    };
    let want_valid = v.expect == "valid";
    assert_eq!(
        got.is_ok(),
        want_valid,
        "{}: {:?}: got {got:?}",
        spec.name,
        v.description
    );
    if v.reproduce {
        let ts_text = spec.timestamp.as_ref().and_then(|rule| match &rule.from {
            ValueSource::Header(h) => Some(headers.get(h)?.to_str().ok()?.to_string()),
            ValueSource::Signature(k) => {
                let ctx = Context::new(req, ParsedSignature::default());
                verify::parse_signature(spec, &ctx)
                    .ok()?
                    .fields
                    .into_iter()
                    .find(|(f, _)| f == k)
                    .map(|(_, v)| v)
            }
            ValueSource::Json(p) => match json_at(v.body.as_bytes(), p)? {
                serde_json::Value::String(s) => Some(s),
                other => Some(other.to_string()),
            },
            _ => None,
        });
        let ts = ts_text
            .and_then(|t| t.parse::<i64>().ok())
            .map(|t| match spec.timestamp.as_ref().map(|r| r.unit) {
                Some(spec::TimeUnit::Milliseconds) => t / 1000,
                _ => t,
            })
            .unwrap_or(0);
        let id = match spec.event_id.first().and_then(|t| t.single()) {
            Some(ValueSource::Header(h)) => headers
                .get(h)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("id")
                .to_string(),
            _ => "id".to_string(),
        };
        let signed = sign(
            spec,
            &Secret::new(&v.secret),
            &SignInput {
                body: v.body.as_bytes(),
                timestamp: ts,
                id: &id,
                event_type: None,
                method: v.method.as_deref().unwrap_or("POST"),
                path: &path,
                url: v.url.as_deref(),
            },
        )
        .unwrap_or_else(|e| panic!("{}: {:?}: {e}", spec.name, v.description));
        for (name, value) in &v.headers {
            let got = signed
                .headers
                .iter()
                .find(|(n, _)| n.as_str().eq_ignore_ascii_case(name))
                .map(|(_, v)| v.as_str());
            assert_eq!(
                got,
                Some(value.as_str()),
                "{}: {:?}: sign does not reproduce {name}",
                spec.name,
                v.description
            );
        }
        if let ValueSource::Json(ptr) = &spec.signature_from {
            let body = signed.body(v.body.as_bytes());
            assert_eq!(
                json_at(body, ptr),
                json_at(v.body.as_bytes(), ptr),
                "{}: {:?}: sign does not reproduce the body signature",
                spec.name,
                v.description
            );
        }
    }
}

#[test]
fn every_builtin_vector_holds() {
    let reg = Registry::builtin().unwrap();
    let mut count = 0;
    for spec in reg.iter() {
        assert!(
            spec.vectors.iter().any(|v| v.expect == "valid"),
            "{} has no valid vector",
            spec.name
        );
        assert!(
            spec.vectors.iter().any(|v| v.expect == "invalid"),
            "{} has no invalid vector",
            spec.name
        );
        if !spec.algorithm().is_public_key() {
            assert!(
                spec.vectors.iter().any(|v| v.reproduce),
                "{} has no vector that the signer reproduces",
                spec.name
            );
        }
        for v in &spec.vectors {
            check(spec, v);
            count += 1;
        }
    }
    assert!(count >= 80, "only {count} vectors");
}

const CATALOGUE: &[&str] = &[
    "calendly",
    "discord",
    "github",
    "gitlab",
    "hmac",
    "hubspot",
    "intercom",
    "lemonsqueezy",
    "linear",
    "mailgun",
    "paddle",
    "sendgrid",
    "shopify",
    "slack",
    "square",
    "standard-webhooks",
    "stripe",
    "svix",
    "twilio",
    "typeform",
    "zoom",
];

#[test]
fn the_whole_catalogue_is_built_in() {
    let reg = Registry::builtin().unwrap();
    let names: Vec<&str> = reg.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, CATALOGUE);
}

#[test]
fn every_file_in_providers_dir_is_built_in() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("providers");
    let mut files: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|f| f.ends_with(".toml"))
        .collect();
    files.sort();
    let mut builtin: Vec<String> = BUILTIN.iter().map(|(f, _)| f.to_string()).collect();
    builtin.sort();
    assert_eq!(files, builtin);
}

#[test]
fn provider_options_override_the_generic_hmac_provider() {
    let reg = Registry::builtin().unwrap();
    let opts: toml::Table = toml::from_str(
        "[signature]\nheader = \"X-Acme-Sig\"\nprefix = \"sha256=\"\nencoding = \"base64\"\n[event]\nid = \"json:/event_id\"\n",
    )
    .unwrap();
    let spec = reg.resolve("hmac", Some(&opts)).unwrap();
    assert_eq!(spec.signature_header().unwrap().as_str(), "x-acme-sig");
    assert_eq!(spec.encoding, spec::Encoding::Base64);
    assert!(spec.vectors.is_empty());

    let bad: toml::Table = toml::from_str("[signature]\nencoding = \"rot13\"\n").unwrap();
    let err = reg.resolve("hmac", Some(&bad)).unwrap_err().to_string();
    assert!(err.contains("signature.encoding"), "{err}");
    assert!(reg.resolve("nope", None).is_err());
}

#[test]
fn spec_format_errors_name_the_key() {
    let base = "name = \"x\"\n[signature]\n";
    let cases: &[(&str, &str)] = &[
        ("algorithm = \"hmac-sha256\"\n", "signature.header"),
        (
            "algorithm = \"hmac-sha256\"\nheader = \"X\"\nfrom = \"json:/sig\"\n",
            "signature.from",
        ),
        (
            "algorithm = \"hmac-sha256\"\nfrom = \"json:/sig\"\n",
            "signature.from",
        ),
        (
            "algorithm = \"hmac-sha256\"\nfrom = \"signature:x\"\ncontent = \"{json:/a}\"\n",
            "signature.from",
        ),
        (
            "algorithm = [\"hmac-sha1\", \"ed25519\"]\nheader = \"X\"\n",
            "signature.algorithm",
        ),
        ("algorithm = []\nheader = \"X\"\n", "signature.algorithm"),
        (
            "algorithm = \"ed25519\"\nheader = \"X\"\n",
            "signature.secret_encoding",
        ),
        (
            "algorithm = \"hmac-sha256\"\nheader = \"X\"\nurl_port = \"maybe\"\n",
            "signature.url_port",
        ),
        (
            "algorithm = \"hmac-sha256\"\nheader = \"X\"\nbody_sha256 = \"query:h\"\n",
            "signature.body_sha256",
        ),
        (
            "algorithm = \"hmac-sha256\"\nheader = \"X\"\ncontent = \"{url}\"\n",
            "signature.content",
        ),
        (
            "algorithm = \"hmac-sha256\"\nheader = \"X\"\n[event]\nid = \"form:\"\n",
            "event.id",
        ),
        (
            "algorithm = \"hmac-sha256\"\nheader = \"X\"\n[event]\ntype = \"{json:/a\"\n",
            "event.type",
        ),
        (
            "algorithm = \"hmac-sha256\"\nheader = \"X\"\n[event]\nid = \"lit\"\n",
            "event.id",
        ),
        (
            "algorithm = \"ed25519\"\nheader = \"X\"\nsecret_encoding = \"hex\"\n[handshake]\nkind = \"zoom-url-validation\"\n",
            "handshake.kind",
        ),
    ];
    for (text, key) in cases {
        let err = Spec::from_toml(&format!("{base}{text}"))
            .unwrap_err()
            .to_string();
        assert!(err.contains(key), "{text:?}: {err}");
    }
}

#[test]
fn value_sources_and_templates_round_trip_to_text() {
    for s in [
        "header:x-a",
        "signature:t",
        "json:/a/b",
        "form:payload",
        "form:payload#/trigger_id",
        "query:bodySHA256",
    ] {
        assert_eq!(spec::parse_source(s).unwrap().to_string(), s);
    }
    let t = spec::parse_value_template("{json:/type}.{json:/action}").unwrap();
    assert_eq!(t.sources().count(), 2);
    assert!(t.single().is_none());
    let reg = Registry::builtin().unwrap();
    for spec in reg.iter() {
        let again = spec::parse_template(&spec.content_text()).unwrap();
        assert_eq!(again, spec.content, "{}", spec.name);
    }
}

#[test]
fn event_ids_are_signed_only_where_the_signature_covers_them() {
    let reg = Registry::builtin().unwrap();
    let signed: Vec<&str> = reg
        .iter()
        .filter(|s| s.event_id_is_signed())
        .map(|s| s.name.as_str())
        .collect();
    assert_eq!(
        signed,
        [
            "discord",
            "intercom",
            "linear",
            "mailgun",
            "paddle",
            "slack",
            "square",
            "standard-webhooks",
            "stripe",
            "svix",
            "typeform"
        ]
    );
}

#[test]
fn a_rotated_secret_list_accepts_old_and_new() {
    let reg = Registry::builtin().unwrap();
    let spec = reg.get("github").unwrap().clone();
    let v = Verifier::new(
        spec.clone(),
        &[
            Secret::new("new-secret"),
            Secret::new("It's a Secret to Everybody"),
        ],
    )
    .unwrap();
    let mut h = HeaderMap::new();
    h.insert(
        "x-hub-signature-256",
        HeaderValue::from_static(
            "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17",
        ),
    );
    let req = Request {
        method: "POST",
        path: "/",
        url: None,
        headers: &h,
        body: b"Hello, World!",
    };
    assert!(v.verify(req, 0).is_ok());
    let only_new = Verifier::new(spec, &[Secret::new("new-secret")]).unwrap();
    assert_eq!(only_new.verify(req, 0).err(), Some(VerifyError::Mismatch));
}

// ---------------------------------------------------------------------------
// Requests for any provider, signed as the provider would.
// ---------------------------------------------------------------------------

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

fn verifier(spec: &Arc<Spec>) -> Verifier {
    Verifier::new(spec.clone(), &[Secret::new(test_secret(spec))]).unwrap()
}

const NOW: i64 = 1_700_000_000;

#[test]
fn every_provider_round_trips_and_refuses_tampering() {
    let reg = Registry::builtin().unwrap();
    for spec in reg.iter() {
        let v = verifier(spec);
        let sent = send(spec, &test_body(spec, "evt_1"), NOW, "delivery-1")
            .unwrap_or_else(|| panic!("{}: cannot sign", spec.name));
        let ok = v
            .verify(sent.req(), NOW + 1)
            .unwrap_or_else(|e| panic!("{}: {e}", spec.name));
        assert!(ok.handshake().is_none(), "{}", spec.name);
        assert!(ok.content_digest().contains("-sha256:"), "{}", spec.name);

        // One byte of the body changed. Mailgun does not sign the body; changing its
        // token (a signed value) is the equivalent. A token scheme (GitLab) signs
        // nothing: only the token itself is checked, one byte of which changes.
        if spec.algorithm() == Algorithm::Token {
            let name = spec.signature_header().unwrap();
            let mut token = sent.headers[name].as_bytes().to_vec();
            *token.last_mut().unwrap() ^= 1;
            let mut h = sent.headers.clone();
            h.insert(name.clone(), HeaderValue::from_bytes(&token).unwrap());
            let req = Request {
                headers: &h,
                ..sent.req()
            };
            assert_eq!(v.verify(req, NOW).err(), Some(VerifyError::Mismatch));
            let req = Request {
                body: b"{}",
                ..sent.req()
            };
            assert!(v.verify(req, NOW).is_ok(), "gitlab does not sign the body");
        }
        let mut tampered = Sent {
            headers: sent.headers.clone(),
            body: sent.body.clone(),
            url: sent.url.clone(),
            path: sent.path.clone(),
        };
        let needle: &[u8] = if spec.name == "mailgun" {
            b"delivery-1"
        } else {
            b"evt_1"
        };
        let at = tampered
            .body
            .windows(needle.len())
            .position(|w| w == needle)
            .unwrap_or_else(|| panic!("{}: body lacks the id", spec.name));
        tampered.body[at + needle.len() - 1] = b'2';
        if spec.algorithm() != Algorithm::Token {
            assert!(
                v.verify(tampered.req(), NOW).is_err(),
                "{}: tampered",
                spec.name
            );
        }

        // Another secret or key.
        let other = match spec.algorithm() {
            Algorithm::Ed25519 => hex::encode(
                ed25519_dalek::SigningKey::from_bytes(&[8u8; 32])
                    .verifying_key()
                    .to_bytes(),
            ),
            Algorithm::EcdsaP256Sha256 => {
                use p256::pkcs8::EncodePublicKey as _;
                let k = p256::ecdsa::SigningKey::from_slice(&[9u8; 32]).unwrap();
                B64.encode(k.verifying_key().to_public_key_der().unwrap().as_bytes())
            }
            _ if spec.secret_encoding == spec::SecretEncoding::WhsecBase64 => {
                "whsec_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA".into()
            }
            _ => "another-secret".into(),
        };
        let wrong = Verifier::new(spec.clone(), &[Secret::new(other)]).unwrap();
        assert!(
            wrong.verify(sent.req(), NOW).is_err(),
            "{}: wrong key",
            spec.name
        );

        // An hour later, for providers that sign the time.
        if spec.timestamp.is_some() {
            assert_eq!(
                v.verify(sent.req(), NOW + 3600).err(),
                Some(VerifyError::TimestampOutsideTolerance),
                "{}: stale",
                spec.name
            );
        }

        // Providers that sign the URL refuse another URL.
        if spec.signs_url() {
            let mut moved = Sent {
                headers: sent.headers.clone(),
                body: sent.body.clone(),
                url: Some(URL.replace("tenant=1", "tenant=2")),
                path: sent.path.clone(),
            };
            assert!(v.verify(moved.req(), NOW).is_err(), "{}: moved", spec.name);
            moved.url = None;
            assert_eq!(
                v.verify(moved.req(), NOW).err(),
                Some(VerifyError::MissingSignedValue),
                "{}: no url",
                spec.name
            );
        }
    }
}

#[test]
fn the_signer_refuses_what_it_cannot_sign() {
    let reg = Registry::builtin().unwrap();
    let input = |url| SignInput {
        body: b"{}",
        timestamp: NOW,
        id: "x",
        event_type: None,
        method: "POST",
        path: "/",
        url,
    };
    for name in ["discord", "sendgrid"] {
        let err = sign(reg.get(name).unwrap(), &Secret::new("00"), &input(None)).unwrap_err();
        assert!(err.to_string().contains("private key"), "{name}: {err}");
    }
    let err = sign(reg.get("square").unwrap(), &Secret::new("k"), &input(None)).unwrap_err();
    assert!(err.to_string().contains("--url"), "{err}");
    let err = sign(
        reg.get("mailgun").unwrap(),
        &Secret::new("k"),
        &SignInput {
            body: b"[1]",
            ..input(None)
        },
    )
    .unwrap_err();
    assert!(err.to_string().contains("JSON object"), "{err}");
    // A JSON body under a URL whose bodySHA256 belongs to another body.
    let err = sign(
        reg.get("twilio").unwrap(),
        &Secret::new("k"),
        &input(Some("https://h/x?bodySHA256=00")),
    )
    .unwrap_err();
    assert!(err.to_string().contains("digest"), "{err}");
}

#[test]
fn event_metadata_and_slack_handshake() {
    let reg = Registry::builtin().unwrap();
    let slack = reg.get("slack").unwrap().clone();
    let body = br#"{"token":"x","challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P","type":"url_verification"}"#;
    let sent = send(&slack, body, NOW, "x").unwrap();
    let v = verifier(&slack);
    let ok = v.verify(sent.req(), NOW + 10).unwrap();
    assert_eq!(
        ok.handshake(),
        Some(HandshakeReply::Text(
            "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P".into()
        ))
    );
    assert_eq!(ok.event_id(), None);
    // Ten minutes later the same request is stale, and no handshake is answered.
    assert_eq!(
        v.verify(sent.req(), NOW + 600).err(),
        Some(VerifyError::TimestampOutsideTolerance)
    );
}

#[test]
fn slack_form_bodies_give_event_ids_and_types() {
    let reg = Registry::builtin().unwrap();
    let slack = reg.get("slack").unwrap().clone();
    let v = verifier(&slack);
    // The published slash-command body: its trigger_id.
    let slash = slack.vectors[0].body.as_bytes();
    let sent = send(&slack, slash, NOW, "x").unwrap();
    let ok = v.verify(sent.req(), NOW).unwrap();
    assert_eq!(
        ok.event_id().as_deref(),
        Some("398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c")
    );
    assert_eq!(ok.event_type().as_deref(), Some("/webhook-collect"));
    // Interactivity: trigger_id inside the JSON `payload` field.
    let interactive = slack
        .vectors
        .iter()
        .find(|v| v.description.contains("interactivity"))
        .unwrap();
    let sent = send(&slack, interactive.body.as_bytes(), NOW, "x").unwrap();
    let ok = v.verify(sent.req(), NOW).unwrap();
    assert_eq!(
        ok.event_id().as_deref(),
        Some("13345224609.738474920.8088930838d88f008e0")
    );
    assert_eq!(ok.event_type().as_deref(), Some("block_actions"));
    assert!(slack.event_id_is_signed());
}

#[test]
fn stripe_event_id_and_type_come_from_the_body() {
    let reg = Registry::builtin().unwrap();
    let spec = reg.get("stripe").unwrap().clone();
    let v = spec.vectors[0].clone();
    let verifier = Verifier::new(spec, &[Secret::new(&v.secret)]).unwrap();
    let headers = headers_of(&v);
    let ok = verifier
        .verify(
            Request {
                method: "POST",
                path: "/",
                url: None,
                headers: &headers,
                body: v.body.as_bytes(),
            },
            NOW,
        )
        .unwrap();
    assert_eq!(ok.event_id().as_deref(), Some("evt_test_webhook"));
    assert_eq!(ok.event_type().as_deref(), Some("payment_intent.succeeded"));
    assert_eq!(ok.timestamp, Some(NOW));
}

#[test]
fn zoom_url_validation_is_answered_with_the_verifying_secret() {
    let reg = Registry::builtin().unwrap();
    let zoom = reg.get("zoom").unwrap().clone();
    let secret = "zoom-secret-token";
    let body = br#"{"payload":{"plainToken":"qgg8vlvZRS6UYooatFL8Aw"},"event_ts":1700000000000,"event":"endpoint.url_validation"}"#;
    let signed = sign(
        &zoom,
        &Secret::new(secret),
        &SignInput {
            body,
            timestamp: NOW,
            id: "x",
            event_type: None,
            method: "POST",
            path: "/",
            url: None,
        },
    )
    .unwrap();
    let mut h = HeaderMap::new();
    for (n, val) in &signed.headers {
        h.insert(n.clone(), HeaderValue::from_str(val).unwrap());
    }
    let req = Request {
        method: "POST",
        path: "/",
        url: None,
        headers: &h,
        body,
    };
    // With the secret second in a rotation list, the answer still uses it.
    let v = Verifier::new(
        zoom.clone(),
        &[Secret::new("retired-zoom-secret"), Secret::new(secret)],
    )
    .unwrap();
    let ok = v.verify(req, NOW).unwrap();
    // encryptedToken computed with Python: hmac.new(secret, plainToken, sha256).hexdigest()
    assert_eq!(
        ok.handshake(),
        Some(HandshakeReply::Json(serde_json::json!({
            "plainToken": "qgg8vlvZRS6UYooatFL8Aw",
            "encryptedToken": "d9e0d764a78494688ba3f2d5c0ed4ca311394b4834d959759213424d2df961e3",
        })))
    );
    let other = Verifier::new(zoom, &[Secret::new("retired-zoom-secret")]).unwrap();
    assert_eq!(other.verify(req, NOW).err(), Some(VerifyError::Mismatch));
}

#[test]
fn discord_ping_is_answered_and_webhook_events_are_not_pings() {
    let reg = Registry::builtin().unwrap();
    let discord = reg.get("discord").unwrap().clone();
    let v = verifier(&discord);
    let ping = send(
        &discord,
        br#"{"type":1,"id":"1","application_id":"2"}"#,
        NOW,
        "x",
    )
    .unwrap();
    let ok = v.verify(ping.req(), NOW).unwrap();
    assert_eq!(
        ok.handshake(),
        Some(HandshakeReply::Json(serde_json::json!({"type": 1})))
    );
    let event = send(
        &discord,
        br#"{"version":1,"application_id":"2","type":1,"event":{"type":"APPLICATION_AUTHORIZED"}}"#,
        NOW,
        "x",
    )
    .unwrap();
    assert_eq!(v.verify(event.req(), NOW).unwrap().handshake(), None);
    let command = send(&discord, br#"{"type":2,"id":"1103"}"#, NOW, "x").unwrap();
    let ok = v.verify(command.req(), NOW).unwrap();
    assert_eq!(ok.handshake(), None);
    assert_eq!(ok.event_id().as_deref(), Some("1103"));
    assert_eq!(ok.event_type().as_deref(), Some("2"));
    // Discord's check when the URL is saved: a bad signature must answer 401.
    let mut bad = ping;
    bad.headers.insert(
        "x-signature-ed25519",
        HeaderValue::from_str(&"00".repeat(64)).unwrap(),
    );
    assert_eq!(v.verify(bad.req(), NOW).err(), Some(VerifyError::Mismatch));
}

#[test]
fn ecdsa_signatures_in_every_encoding_sendgrid_may_use() {
    use p256::ecdsa::signature::Signer as _;
    let reg = Registry::builtin().unwrap();
    let sendgrid = reg.get("sendgrid").unwrap().clone();
    let v = verifier(&sendgrid);
    let body = br#"[{"event":"delivered","sg_event_id":"a"}]"#;
    let msg = [b"1700000000".as_slice(), body].concat();
    let sig: p256::ecdsa::Signature = sendgrid_key().sign(&msg);
    let (r, s) = sig.split_scalars();
    // The same signature with s replaced by n - s ("high S"), as signers that do not
    // normalise produce half the time.
    let high =
        p256::ecdsa::Signature::from_scalars(r.to_bytes(), (-*s.as_ref()).to_bytes()).unwrap();
    for (what, bytes) in [
        ("DER", sig.to_der().as_bytes().to_vec()),
        ("r||s", sig.to_bytes().to_vec()),
        ("DER, high S", high.to_der().as_bytes().to_vec()),
    ] {
        let mut h = HeaderMap::new();
        h.insert(
            "x-twilio-email-event-webhook-signature",
            HeaderValue::from_str(&B64.encode(&bytes)).unwrap(),
        );
        h.insert(
            "x-twilio-email-event-webhook-timestamp",
            HeaderValue::from_static("1700000000"),
        );
        let req = Request {
            method: "POST",
            path: "/",
            url: None,
            headers: &h,
            body,
        };
        assert!(v.verify(req, NOW).is_ok(), "{what}");
    }
    // A SEC1 point is accepted as the key too.
    let sec1 = B64.encode(sendgrid_key().verifying_key().to_sec1_bytes());
    assert!(Verifier::new(sendgrid.clone(), &[Secret::new(sec1)]).is_ok());
    for bad in ["", "AAAA", "not base64!"] {
        assert!(
            Verifier::new(sendgrid.clone(), &[Secret::new(bad)]).is_err(),
            "{bad:?}"
        );
    }
    let discord = reg.get("discord").unwrap().clone();
    for bad in ["00", "zz", &"00".repeat(33)] {
        assert!(
            Verifier::new(discord.clone(), &[Secret::new(bad)]).is_err(),
            "{bad:?}"
        );
    }
}

#[test]
fn mailgun_signature_lives_in_the_body_and_its_token_is_the_event_id() {
    let reg = Registry::builtin().unwrap();
    let mailgun = reg.get("mailgun").unwrap().clone();
    let v = verifier(&mailgun);
    let sent = send(&mailgun, &test_body(&mailgun, "ev1"), NOW, "tok-123").unwrap();
    let body: serde_json::Value = serde_json::from_slice(&sent.body).unwrap();
    assert_eq!(body["signature"]["token"], "tok-123");
    assert_eq!(body["signature"]["timestamp"], NOW);
    assert!(body["signature"]["signature"].is_string());
    assert!(sent.headers.is_empty(), "no header carries anything");
    let ok = v.verify(sent.req(), NOW).unwrap();
    assert_eq!(ok.event_id().as_deref(), Some("tok-123"));
    assert_eq!(ok.event_type().as_deref(), Some("delivered"));
    assert!(mailgun.event_id_is_signed());
    // event-data is not signed by Mailgun: a replayed signature with another event
    // verifies, and dedupes on the same token (so it is refused as a duplicate).
    let mut forged = body.clone();
    forged["event-data"]["event"] = "failed".into();
    let forged = Sent {
        body: serde_json::to_vec(&forged).unwrap(),
        headers: HeaderMap::new(),
        url: None,
        path: "/".into(),
    };
    let ok = v.verify(forged.req(), NOW).unwrap();
    assert_eq!(ok.event_id().as_deref(), Some("tok-123"));
}

#[test]
fn twilio_signs_the_url_and_form_parameters() {
    let reg = Registry::builtin().unwrap();
    let twilio = reg.get("twilio").unwrap().clone();
    let v = verifier(&twilio);
    let body = b"MessageSid=SM1&Body=hi+there&From=%2B15551234567";
    let sent = send(&twilio, body, NOW, "x").unwrap();
    let ok = v.verify(sent.req(), NOW).unwrap();
    let digest = ok.content_digest();
    assert!(digest.starts_with("form-sha256:"), "{digest}");
    assert_eq!(ok.event_id(), None, "no delivery id: the content dedupes");
    // The same parameters reordered and re-encoded verify and dedupe the same.
    let again = Sent {
        body: b"From=%2b15551234567&Body=hi%20there&MessageSid=SM1".to_vec(),
        headers: sent.headers.clone(),
        url: sent.url.clone(),
        path: sent.path.clone(),
    };
    assert_eq!(v.verify(again.req(), NOW).unwrap().content_digest(), digest);
    // The SharedKey variant: HMAC-SHA256 under the same scheme.
    let mut sha256 = (*twilio).clone();
    sha256.algorithms = vec![Algorithm::HmacSha256];
    let sent = send(&sha256, body, NOW, "x").unwrap();
    assert!(v.verify(sent.req(), NOW).is_ok());
    // A JSON body is bound by its digest in the URL, and dedupes on the raw bytes.
    let json = br#"{"a":1}"#;
    let url = format!(
        "https://hooks.example.com/ingest/x?bodySHA256={}",
        hex::encode(sha2::Sha256::digest(json))
    );
    let path = path_of(Some(&url));
    let signed = sign(
        &twilio,
        &Secret::new(test_secret(&twilio)),
        &SignInput {
            body: json,
            timestamp: NOW,
            id: "x",
            event_type: None,
            method: "POST",
            path: &path,
            url: Some(&url),
        },
    )
    .unwrap();
    let mut h = HeaderMap::new();
    for (n, val) in &signed.headers {
        h.insert(n.clone(), HeaderValue::from_str(val).unwrap());
    }
    let req = Request {
        method: "POST",
        path: &path,
        url: Some(&url),
        headers: &h,
        body: json,
    };
    let ok = v.verify(req, NOW).unwrap();
    assert!(ok.content_digest().starts_with("body-sha256:"));
    let req = Request {
        body: br#"{"a":2}"#,
        ..req
    };
    assert_eq!(
        v.verify(req, NOW).err(),
        Some(VerifyError::BodyDigestMismatch)
    );
}

#[test]
fn linear_event_ids_survive_a_redelivery_with_a_new_timestamp() {
    let reg = Registry::builtin().unwrap();
    let linear = reg.get("linear").unwrap().clone();
    let v = verifier(&linear);
    let body = test_body(&linear, "issue-1");
    let first = send(&linear, &body, NOW, "x").unwrap();
    let retry = send(&linear, &body, NOW + 600, "x").unwrap();
    assert_ne!(first.body, retry.body, "webhookTimestamp differs");
    let a = v.verify(first.req(), NOW).unwrap();
    let b = v.verify(retry.req(), NOW + 600).unwrap();
    assert_eq!(a.event_id(), b.event_id());
    assert_eq!(
        a.event_id().as_deref(),
        Some("wh:thing.happened:create:issue-1:2026-01-01T00:00:00Z")
    );
    assert_eq!(a.event_type().as_deref(), Some("thing.happened.create"));
}

#[test]
fn malformed_headers_are_refused_with_a_reason() {
    let reg = Registry::builtin().unwrap();
    let stripe = reg.get("stripe").unwrap().clone();
    let v = Verifier::new(stripe, &[Secret::new("whsec_x")]).unwrap();
    let cases: &[(&str, VerifyError)] = &[
        ("", VerifyError::MalformedSignature),
        ("t=1,t=2,v1=00", VerifyError::MalformedSignature),
        ("garbage", VerifyError::MalformedSignature),
        ("t=1700000000", VerifyError::MalformedSignature),
        ("t=abc,v1=00", VerifyError::MalformedTimestamp),
        ("t=-5,v1=00", VerifyError::MalformedTimestamp),
        ("v1=00", VerifyError::MissingTimestamp),
        ("t=1700000000,v1=zz", VerifyError::MalformedSignature),
        ("t=1,v1=00", VerifyError::TimestampOutsideTolerance),
        ("t=1700000000,v1=00", VerifyError::Mismatch),
    ];
    for (value, want) in cases {
        let mut h = HeaderMap::new();
        h.insert("stripe-signature", HeaderValue::from_str(value).unwrap());
        let got = v
            .verify(
                Request {
                    method: "POST",
                    path: "/",
                    url: None,
                    headers: &h,
                    body: b"{}",
                },
                NOW,
            )
            .err();
        assert_eq!(got.as_ref(), Some(want), "header {value:?}");
    }
    let empty = HeaderMap::new();
    let got = v
        .verify(
            Request {
                method: "POST",
                path: "/",
                url: None,
                headers: &empty,
                body: b"{}",
            },
            NOW,
        )
        .err();
    assert_eq!(got, Some(VerifyError::MissingSignature));
}

// ---------------------------------------------------------------------------
// Property tests.
// ---------------------------------------------------------------------------

/// Every header that any provider reads a timestamp or signed value from.
fn value_headers(reg: &Registry) -> Vec<HeaderName> {
    let mut out: Vec<HeaderName> = Vec::new();
    let mut add = |src: &ValueSource| {
        if let ValueSource::Header(h) = src
            && !out.contains(h)
        {
            out.push(h.clone());
        }
    };
    for spec in reg.iter() {
        if let Some(t) = &spec.timestamp {
            add(&t.from);
        }
        for seg in &spec.content {
            if let spec::Segment::Value(src) = seg {
                add(src);
            }
        }
    }
    out
}

/// A well-formed signature value for `spec` that carries `sig` and, where the
/// signature value holds it, the timestamp.
fn shaped_signature(spec: &Spec, sig: &[u8], ts: &str) -> String {
    let enc = verify::encode_sig(spec.encoding, sig);
    match &spec.format {
        HeaderFormat::Plain { prefix } => format!("{prefix}{enc}"),
        HeaderFormat::Kv {
            pair_separator,
            kv_separator,
            signature_keys,
        } => {
            let mut parts = Vec::new();
            if let Some(ValueSource::Signature(k)) = spec.timestamp.as_ref().map(|t| &t.from) {
                parts.push(format!("{k}{kv_separator}{ts}"));
            }
            parts.push(format!("{}{kv_separator}{enc}", signature_keys[0]));
            parts.join(pair_separator)
        }
    }
}

/// `body` with `pad` bytes added where the provider's body shape allows it.
fn padded(spec: &Spec, body: &[u8], pad: usize) -> Vec<u8> {
    let filler = "p".repeat(pad);
    if spec.content.contains(&spec::Segment::FormSorted) {
        let mut b = body.to_vec();
        b.extend_from_slice(format!("&Pad={filler}").as_bytes());
        b
    } else {
        let mut b = format!(r#"{{"pad":"{filler}","#).into_bytes();
        b.extend_from_slice(&body[1..]);
        b
    }
}

/// Every verifier's cost is linear in the body with a small constant: the bytes it
/// hashes are at most (keys × algorithms × URL forms) times the body and a bounded
/// rest, genuine or forged, and the sorted form is built at most once.
#[test]
fn verification_work_is_linear_in_the_body_for_every_provider() {
    let reg = Registry::builtin().unwrap();
    for spec in reg.iter() {
        // Two keys, as during a rotation (public keys: the same key twice).
        let secrets = [
            Secret::new(test_secret(spec)),
            Secret::new(test_secret(spec)),
        ];
        let v = Verifier::new(spec.clone(), &secrets).unwrap();
        let url_forms = if spec.url_port == spec::UrlPort::Either {
            2
        } else {
            1
        };
        let factor = (secrets.len() * spec.algorithms.len() * url_forms) as u64;
        let mut hashed = Vec::new();
        for pad in [0usize, 64 * 1024, 256 * 1024] {
            let body = padded(spec, &test_body(spec, "evt_1"), pad);
            let sent = send(spec, &body, NOW, "d-1").unwrap();
            let _ = verify::take_work();
            assert!(v.verify(sent.req(), NOW).is_ok(), "{}", spec.name);
            let genuine = verify::take_work();
            // The same request with its body changed by one byte.
            let mut forged_body = sent.body.clone();
            if let Some(b) = forged_body.iter_mut().rev().find(|b| **b == b'p') {
                *b = b'q';
            }
            let forged = Sent {
                body: forged_body,
                headers: sent.headers.clone(),
                url: sent.url.clone(),
                path: sent.path.clone(),
            };
            let _ = v.verify(forged.req(), NOW);
            let forged = verify::take_work();
            for (what, w) in [("genuine", genuine), ("forged", forged)] {
                let len = sent.body.len() as u64;
                assert!(
                    w.bytes_hashed <= factor * (len + 1024),
                    "{} {what}: {} bytes hashed for a {len}-byte body",
                    spec.name,
                    w.bytes_hashed
                );
                assert!(w.form_builds <= 1, "{} {what}", spec.name);
                assert!(
                    u64::from(w.signatures_checked) <= factor,
                    "{} {what}: {} signatures checked",
                    spec.name,
                    w.signatures_checked
                );
            }
            hashed.push(genuine.bytes_hashed);
        }
        // Growing the body by 192 KiB grows the work by at most factor × that.
        assert!(
            hashed[2] - hashed[1] <= factor * (192 * 1024 + 64),
            "{}: {hashed:?}",
            spec.name
        );
    }
}

/// Twilio with two secrets, two algorithms and two URL forms computes eight MACs over
/// one sorted form, built once.
#[test]
fn twilio_builds_the_sorted_form_once() {
    let reg = Registry::builtin().unwrap();
    let twilio = reg.get("twilio").unwrap().clone();
    let v = Verifier::new(
        twilio.clone(),
        &[Secret::new("old-token"), Secret::new(test_secret(&twilio))],
    )
    .unwrap();
    let params: Vec<String> = (0..900).map(|i| format!("P{i}=v{i}")).collect();
    let body = params.join("&");
    let sent = send(&twilio, body.as_bytes(), NOW, "x").unwrap();
    let _ = verify::take_work();
    assert!(v.verify(sent.req(), NOW).is_ok());
    let w = verify::take_work();
    assert_eq!(w.form_builds, 1, "{w:?}");
    assert_eq!(
        w.signatures_checked, 8,
        "2 secrets x 2 algorithms x 2 URL forms"
    );
    // A forged signature: every MAC computed, the form still built once.
    let mut h = sent.headers.clone();
    h.insert(
        "x-twilio-signature",
        HeaderValue::from_static("AAAAAAAAAAAAAAAAAAAAAAAAAAA="),
    );
    let forged = Request {
        headers: &h,
        ..sent.req()
    };
    assert_eq!(v.verify(forged, NOW).err(), Some(VerifyError::Mismatch));
    assert_eq!(verify::take_work().form_builds, 1);
}

/// A form of 160k parameters is refused as malformed before anything is decoded or
/// hashed.
#[test]
fn form_bombs_are_refused_before_any_mac() {
    let reg = Registry::builtin().unwrap();
    let twilio = reg.get("twilio").unwrap().clone();
    let v = verifier(&twilio);
    let body = "ab=1&".repeat(160_000);
    let mut h = HeaderMap::new();
    h.insert(
        "x-twilio-signature",
        HeaderValue::from_static("AAAAAAAAAAAAAAAAAAAAAAAAAAA="),
    );
    let req = Request {
        method: "POST",
        path: "/ingest/x",
        url: Some(URL),
        headers: &h,
        body: body.as_bytes(),
    };
    let _ = verify::take_work();
    assert_eq!(v.verify(req, NOW).err(), Some(VerifyError::MalformedForm));
    assert_eq!(verify::take_work(), verify::Work::default());
}

/// Public-key specs take exactly one signature: sixteen offered is malformed, and
/// nothing is verified.
#[test]
fn public_key_specs_refuse_more_than_one_signature() {
    let reg = Registry::builtin().unwrap();
    for name in ["discord", "sendgrid"] {
        let spec = reg.get(name).unwrap().clone();
        let v = verifier(&spec);
        let sent = send(&spec, &test_body(&spec, "evt_1"), NOW, "d").unwrap();
        assert!(v.verify(sent.req(), NOW).is_ok(), "{name}");
        let header = spec.signature_header().unwrap().clone();
        let genuine = sent.headers.get(&header).unwrap().clone();
        let mut h = sent.headers.clone();
        for _ in 0..15 {
            h.append(header.clone(), genuine.clone());
        }
        let _ = verify::take_work();
        let req = Request {
            headers: &h,
            ..sent.req()
        };
        assert_eq!(
            v.verify(req, NOW).err(),
            Some(VerifyError::MalformedSignature),
            "{name}"
        );
        assert_eq!(verify::take_work().signatures_checked, 0, "{name}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// The form parser takes any bytes without panicking, never yields more than
    /// the cap, and its output is never larger than its input.
    #[test]
    fn form_parser_takes_any_bytes(
        body in proptest::collection::vec(
            prop_oneof![Just(b'&'), Just(b'='), Just(b'%'), Just(b'+'), any::<u8>()],
            0..4000,
        ),
    ) {
        if let Ok(pairs) = verify::parse_form(&body) {
            prop_assert!(pairs.len() <= verify::MAX_FORM_PARAMS);
            let size: usize = pairs.iter().map(|(k, v)| k.len() + v.len()).sum();
            prop_assert!(size <= body.len());
        }
    }

    /// Signature values of every shape a spec parses (plain with and without its
    /// prefix, `k=v` lists with signature keys, repeated, empty and unknown items,
    /// several header lines) never panic, never verify, and never make the engine
    /// check more signatures than the bound.
    #[test]
    fn every_signature_header_shape_is_refused_within_bounds(
        items in proptest::collection::vec(
            (0usize..4, "[A-Za-z0-9+/=_-]{0,90}"),
            0..40,
        ),
        separators in proptest::collection::vec(prop_oneof![Just(","), Just(";"), Just(" "), Just("=")], 1..4),
        lines in 1usize..20,
    ) {
        let reg = Registry::builtin().unwrap();
        for spec in reg.iter() {
            let Some(name) = spec.signature_header() else { continue };
            let mut value = String::new();
            for (i, (kind, text)) in items.iter().enumerate() {
                let sep = separators[i % separators.len()];
                match (&spec.format, kind) {
                    (HeaderFormat::Kv { kv_separator, signature_keys, .. }, 0) => {
                        value.push_str(&format!("{}{kv_separator}{text}", signature_keys[0]))
                    }
                    (HeaderFormat::Kv { kv_separator, .. }, 1) => {
                        value.push_str(&format!("t{kv_separator}{text}"))
                    }
                    (HeaderFormat::Plain { prefix }, 0) => value.push_str(&format!("{prefix}{text}")),
                    _ => value.push_str(text),
                }
                value.push_str(sep);
            }
            let Ok(hv) = HeaderValue::from_str(&value) else { continue };
            let mut h = HeaderMap::new();
            for _ in 0..lines {
                h.append(name.clone(), hv.clone());
            }
            let body = test_body(spec, "evt_1");
            let v = verifier(spec);
            let _ = verify::take_work();
            let req = Request { method: "POST", path: "/ingest/x", url: Some(URL), headers: &h, body: &body };
            prop_assert!(v.verify(req, NOW).is_err(), "{}", spec.name);
            let w = verify::take_work();
            let url_forms = if spec.url_port == spec::UrlPort::Either { 2 } else { 1 };
            prop_assert!(
                w.signatures_checked as usize <= verify::MAX_SIGNATURES * spec.algorithms.len() * url_forms,
                "{}: {:?}", spec.name, w
            );
        }
    }

    /// Arbitrary signature bytes, timestamps, bodies and query strings never panic
    /// and never verify, for every provider (symmetric and public-key, header- and
    /// body-borne signatures, URL-signing ones).
    #[test]
    fn arbitrary_requests_never_panic_nor_verify(
        value in proptest::collection::vec(any::<u8>(), 0..300),
        ts in proptest::collection::vec(any::<u8>(), 0..24),
        body in proptest::collection::vec(any::<u8>(), 0..200),
        query in "[ -~]{0,40}",
    ) {
        let reg = Registry::builtin().unwrap();
        let names = value_headers(&reg);
        let url = format!("https://hooks.example.com/ingest/x?{query}");
        let path = format!("/ingest/x?{query}");
        for spec in reg.iter() {
            let v = verifier(spec);
            let mut h = HeaderMap::new();
            if let (Some(name), Ok(hv)) = (spec.signature_header(), HeaderValue::from_bytes(&value)) {
                h.insert(name.clone(), hv);
            }
            if let Ok(tv) = HeaderValue::from_bytes(&ts) {
                for name in &names {
                    h.insert(name.clone(), tv.clone());
                }
            }
            let req = Request { method: "POST", path: &path, url: Some(&url), headers: &h, body: &body };
            prop_assert!(v.verify(req, NOW).is_err(), "{}", spec.name);
            prop_assert!(v.verify_ignoring_timestamp(req).is_err(), "{}", spec.name);
        }
    }

    /// Well-formed requests with random signatures (in headers, in a JSON body, over
    /// form bodies with or without a body digest) never verify either.
    #[test]
    fn well_formed_random_signatures_never_verify(
        sig in proptest::collection::vec(any::<u8>(), 0..80),
        token in "[a-f0-9]{0,60}",
        ts in 1_699_999_990i64..1_700_000_010,
        params in proptest::collection::vec(("[A-Za-z]{1,8}", "[ -~]{0,12}"), 0..6),
        with_digest in any::<bool>(),
        n in 1usize..4,
    ) {
        let reg = Registry::builtin().unwrap();
        let names = value_headers(&reg);
        let form = {
            let mut s = form_urlencoded::Serializer::new(String::new());
            for (k, val) in &params {
                s.append_pair(k, val);
            }
            s.finish().into_bytes()
        };
        let json = serde_json::to_vec(&serde_json::json!({
            "signature": {"timestamp": ts.to_string(), "token": token, "signature": hex::encode(&sig)},
            "event-data": {"event": "delivered"},
            "webhookTimestamp": ts * 1000,
            "id": token,
        })).unwrap();
        for spec in reg.iter() {
            let v = verifier(spec);
            let body: &[u8] = if spec.content.contains(&spec::Segment::FormSorted) { &form } else { &json };
            let mut url = "https://hooks.example.com/ingest/x".to_string();
            if with_digest {
                url.push_str(&format!("?bodySHA256={}", hex::encode(sha2::Sha256::digest(body))));
            }
            let path = path_of(Some(&url));
            let mut h = HeaderMap::new();
            for name in &names {
                h.insert(name.clone(), HeaderValue::from_str(&ts.to_string()).unwrap());
            }
            if let Some(name) = spec.signature_header() {
                let one = shaped_signature(spec, &sig, &ts.to_string());
                if let Ok(hv) = HeaderValue::from_str(&vec![one; n].join(" ")) {
                    h.insert(name.clone(), hv);
                }
            }
            let req = Request { method: "POST", path: &path, url: Some(&url), headers: &h, body };
            prop_assert!(v.verify(req, NOW).is_err(), "{}", spec.name);
        }
    }

    /// Arbitrary bodies, signed the way each provider signs, verify; reading their
    /// event id, type, handshake and digest never panics.
    #[test]
    fn signed_arbitrary_bodies_verify_and_extract_without_panic(
        body in proptest::collection::vec(any::<u8>(), 0..300),
        id in "[ -~]{1,40}",
    ) {
        let reg = Registry::builtin().unwrap();
        for spec in reg.iter() {
            let Some(sent) = send(spec, &body, NOW, &id) else { continue };
            let v = verifier(spec);
            let ok = v.verify(sent.req(), NOW);
            prop_assert!(ok.is_ok(), "{}: {:?}", spec.name, ok.err());
            let ok = ok.unwrap();
            let _ = (ok.event_id(), ok.event_type(), ok.handshake(), ok.content_digest());
        }
    }
}
