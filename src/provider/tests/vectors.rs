//! The published test vectors: every `[[vectors]]` entry of every built-in spec,
//! checked by one function in both directions (verify, and sign where the vector says
//! `reproduce`), and the catalogue they come with.

use super::spec::Expect;
use super::*;

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
    let got = match (&v.certificate, v.now) {
        // A `[jwk]` scheme: the key the vector's JWK gives, for the token's kid, asked
        // at a URL the spec allows.
        _ if v.jwk.is_some() => {
            let answer = v.jwk.as_deref().unwrap_or_default();
            let asked = verifier
                .jwk_request(req)
                .unwrap_or_else(|| panic!("{}: not a [jwk] scheme", spec.name));
            let key = asked.and_then(|a| {
                crate::provider::jwk::ec_key_of(answer.as_bytes(), &a.key_id, v.now.unwrap_or(0))
            });
            match key {
                Ok((point, _)) => {
                    let key = Key::EcdsaP256(
                        p256::ecdsa::VerifyingKey::from_sec1_bytes(&point).expect("point"),
                    );
                    verifier.verify_certified(req, v.now, &key).map(|_| ())
                }
                Err(_) => Err(VerifyError::CertificateUrl),
            }
        }
        // A certificate scheme: the key of the certificate the vector carries, valid
        // at the vector's time, named by a URL the spec allows.
        (Some(pem), now) => {
            let at = std::time::UNIX_EPOCH
                + std::time::Duration::from_secs(now.unwrap_or(0).max(0) as u64);
            let named = verifier
                .certificate_url(req)
                .unwrap_or_else(|| panic!("{}: not a certificate scheme", spec.name));
            match (named, certificate::rsa_key_of(pem.as_bytes(), at)) {
                (Ok(_), Ok(key)) => verifier
                    .verify_certified(req, v.now, &Key::Rsa(key))
                    .map(|_| ()),
                (Err(_), _) | (_, Err(_)) => Err(VerifyError::CertificateUrl),
            }
        }
        (None, Some(now)) => verifier.verify(req, now).map(|_| ()),
        (None, None) => verifier.verify_ignoring_timestamp(req).map(|_| ()),
    };
    let want_valid = v.expect == Expect::Valid;
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
            .zip(spec.timestamp.as_ref())
            .and_then(|(t, rule)| rule.unit.parse(&t))
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
            spec.vectors.iter().any(|v| v.expect == Expect::Valid),
            "{} has no valid vector",
            spec.name
        );
        assert!(
            spec.vectors.iter().any(|v| v.expect == Expect::Invalid),
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
    "adyen",
    "asana",
    "aws-sns",
    "bitbucket",
    "box",
    "buildkite",
    "buildkite-token",
    "calendly",
    "circleci",
    "clerk",
    "coinbase-commerce",
    "contentful",
    "discord",
    "docusign",
    "dropbox",
    "github",
    "gitlab",
    "hmac",
    "hubspot",
    "intercom",
    "jira",
    "lemonsqueezy",
    "linear",
    "mailgun",
    "meta",
    "microsoft-graph",
    "mux",
    "netlify",
    "notion",
    "okta",
    "paddle",
    "paypal",
    "paystack",
    "plaid",
    "postmark",
    "razorpay",
    "resend",
    "sendgrid",
    "sentry",
    "shopify",
    "slack",
    "square",
    "standard-webhooks",
    "stripe",
    "svix",
    "trello",
    "twilio",
    "twitch",
    "typeform",
    "vercel",
    "webflow",
    "workos",
    "zendesk",
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
