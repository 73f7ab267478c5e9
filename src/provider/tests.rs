//! Data-driven provider tests: every `[[vectors]]` entry of every built-in spec is
//! checked by one function, in both directions (verify, and sign where the vector
//! says `reproduce`), plus property tests of the header parsers.

use http::{HeaderMap, HeaderName, HeaderValue};
use proptest::prelude::*;

use super::sign::{SignInput, sign};
use super::spec::Vector;
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

/// The single place that checks a vector against the engine.
#[track_caller]
fn check(spec: &Spec, v: &Vector) {
    let verifier = Verifier::new(std::sync::Arc::new(spec.clone()), &[Secret::new(&v.secret)])
        .unwrap_or_else(|e| panic!("{}: {}: {e}", spec.name, v.description));
    let headers = headers_of(v);
    let req = Request {
        method: "POST",
        path: "/",
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
        let ts = spec
            .timestamp
            .as_ref()
            .and_then(|rule| match &rule.from {
                spec::ValueSource::Header(h) => headers.get(h)?.to_str().ok()?.parse().ok(),
                spec::ValueSource::Signature(k) => verify::parse_header(spec, &headers)
                    .ok()?
                    .fields
                    .into_iter()
                    .find(|(f, _)| f == k)?
                    .1
                    .parse()
                    .ok(),
                spec::ValueSource::Json(_) => None,
            })
            .unwrap_or(0);
        let id = match &spec.event_id {
            Some(spec::ValueSource::Header(h)) => headers
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
                method: "POST",
                path: "/",
            },
        )
        .unwrap();
        for (name, value) in &v.headers {
            let got = signed
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
        for v in &spec.vectors {
            check(spec, v);
            count += 1;
        }
    }
    assert!(count >= 20, "only {count} vectors");
}

#[test]
fn required_providers_are_built_in() {
    let reg = Registry::builtin().unwrap();
    for name in [
        "stripe",
        "github",
        "slack",
        "standard-webhooks",
        "shopify",
        "hmac",
    ] {
        assert!(reg.get(name).is_some(), "{name} missing");
    }
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
    assert_eq!(spec.header.as_str(), "x-acme-sig");
    assert_eq!(spec.encoding, spec::Encoding::Base64);
    assert!(spec.vectors.is_empty());

    let bad: toml::Table = toml::from_str("[signature]\nencoding = \"rot13\"\n").unwrap();
    let err = reg.resolve("hmac", Some(&bad)).unwrap_err().to_string();
    assert!(err.contains("signature.encoding"), "{err}");
    assert!(reg.resolve("nope", None).is_err());
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
        headers: &h,
        body: b"Hello, World!",
    };
    assert!(v.verify(req, 0).is_ok());
    let only_new = Verifier::new(spec, &[Secret::new("new-secret")]).unwrap();
    assert_eq!(only_new.verify(req, 0).err(), Some(VerifyError::Mismatch));
}

#[test]
fn event_metadata_and_slack_handshake() {
    let reg = Registry::builtin().unwrap();
    let slack = reg.get("slack").unwrap().clone();
    let secret = Secret::new("s3cret");
    let body = br#"{"token":"x","challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P","type":"url_verification"}"#;
    let signed = sign(
        &slack,
        &secret,
        &SignInput {
            body,
            timestamp: 1_700_000_000,
            id: "x",
            event_type: None,
            method: "POST",
            path: "/",
        },
    )
    .unwrap();
    let mut h = HeaderMap::new();
    for (n, v) in signed {
        h.insert(n, HeaderValue::from_str(&v).unwrap());
    }
    let v = Verifier::new(slack, &[secret]).unwrap();
    let req = Request {
        method: "POST",
        path: "/",
        headers: &h,
        body,
    };
    let ok = v.verify(req, 1_700_000_010).unwrap();
    assert_eq!(
        ok.handshake(),
        Some(verify::HandshakeReply::Text(
            "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P".into()
        ))
    );
    assert_eq!(ok.event_id(), None);
    // Ten minutes later the same request is stale, and no handshake is answered.
    assert_eq!(
        v.verify(req, 1_700_000_600).err(),
        Some(VerifyError::TimestampOutsideTolerance)
    );
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
                headers: &headers,
                body: v.body.as_bytes(),
            },
            1_700_000_000,
        )
        .unwrap();
    assert_eq!(ok.event_id().as_deref(), Some("evt_test_webhook"));
    assert_eq!(ok.event_type().as_deref(), Some("payment_intent.succeeded"));
    assert_eq!(ok.timestamp, Some(1_700_000_000));
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
                    headers: &h,
                    body: b"{}",
                },
                1_700_000_000,
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
                headers: &empty,
                body: b"{}",
            },
            1_700_000_000,
        )
        .err();
    assert_eq!(got, Some(VerifyError::MissingSignature));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Arbitrary signature-header bytes never panic and never verify, for every provider.
    #[test]
    fn arbitrary_signature_headers_never_panic_nor_verify(
        value in proptest::collection::vec(any::<u8>(), 0..300),
        ts in proptest::collection::vec(any::<u8>(), 0..24),
        body in proptest::collection::vec(any::<u8>(), 0..200),
    ) {
        let reg = Registry::builtin().unwrap();
        for spec in reg.iter() {
            let v = Verifier::new(spec.clone(), &[Secret::new("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")]).unwrap();
            let mut h = HeaderMap::new();
            if let Ok(hv) = HeaderValue::from_bytes(&value) {
                h.insert(spec.header.clone(), hv);
            }
            if let Ok(tv) = HeaderValue::from_bytes(&ts) {
                for name in ["x-slack-request-timestamp", "webhook-timestamp", "svix-timestamp", "webhook-id", "svix-id"] {
                    h.insert(name, tv.clone());
                }
            }
            let req = Request { method: "POST", path: "/", headers: &h, body: &body };
            prop_assert!(v.verify(req, 1_700_000_000).is_err());
            prop_assert!(v.verify_ignoring_timestamp(req).is_err());
        }
    }

    /// Structured near-misses (valid shapes, random signatures) never verify either.
    #[test]
    fn well_formed_random_signatures_never_verify(
        sig in proptest::collection::vec(any::<u8>(), 0..64),
        n in 1usize..20,
    ) {
        let reg = Registry::builtin().unwrap();
        let stripe = reg.get("stripe").unwrap().clone();
        let v = Verifier::new(stripe, &[Secret::new("whsec_test_secret")]).unwrap();
        let one = format!("v1={}", hex::encode(&sig));
        let header = format!("t=1700000000,{}", vec![one; n].join(","));
        let mut h = HeaderMap::new();
        h.insert("stripe-signature", HeaderValue::from_str(&header).unwrap());
        let req = Request { method: "POST", path: "/", headers: &h, body: b"{}" };
        prop_assert!(v.verify(req, 1_700_000_000).is_err());
    }
}
