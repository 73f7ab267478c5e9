//! Property tests: arbitrary and near-miss requests never panic and never verify;
//! signed arbitrary bodies always verify and their metadata can always be read.

use proptest::prelude::*;

use super::*;
use crate::provider::spec::HeaderFormat;

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
        // A JWS of the spec's algorithm, claims as the signer writes them.
        HeaderFormat::Jws { .. } => {
            use base64::Engine as _;
            use base64::engine::general_purpose::URL_SAFE_NO_PAD;
            let alg = spec.algorithms[0].jws_alg().unwrap_or("HS256");
            let header = URL_SAFE_NO_PAD.encode(format!(r#"{{"alg":"{alg}","typ":"JWT"}}"#));
            let payload = URL_SAFE_NO_PAD.encode(format!(r#"{{"iss":"netlify","iat":{ts}}}"#));
            format!("{header}.{payload}.{enc}")
        }
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
