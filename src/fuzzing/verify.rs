//! Target `verify`: every provider's verification on hostile headers, bodies and
//! URLs, and the signer's round trip on every body the fuzzer makes.
//!
//! Input: `provider`, `secret`, `url` (empty: none) and `now` (empty: the timestamp
//! window is not checked) on the first four lines, then `name: value` header lines,
//! an empty line and the body. An unknown provider name picks a spec by its hash.
//!
//! Checked on every input: no panic; the work counters stay within the bounds the
//! cost tests state (bytes hashed linear in what the request holds, the sorted form
//! built at most once, each offered signature (at most `MAX_SIGNATURES`) checked
//! at most once per key × algorithm × URL form); a verified request's event id,
//! type, object and dedupe key are within their limits. And, for every scheme hookgate can sign: the same body signed with
//! the secret verifies, and with one character of its signature changed it does not.

use std::sync::{Arc, OnceLock};

use http::{HeaderMap, HeaderName, HeaderValue};

use super::{head_and_rest, pick, text};
use crate::config::Secret;
use crate::provider::sign::{SignInput, sign};
use crate::provider::spec::{Encoding, Spec, UrlPort, ValueSource};
use crate::provider::verify::{
    self, MAX_EVENT_ID_LEN, Request, Verified, Work, decode_offered, encode_sig,
};
use crate::provider::{Registry, Verifier};

fn registry() -> &'static Registry {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    REGISTRY.get_or_init(|| match Registry::builtin() {
        Ok(r) => r,
        Err(e) => panic!("the built-in registry: {e}"),
    })
}

pub fn verify(data: &[u8]) {
    let (lines, body) = head_and_rest(data);
    let specs: Vec<&Arc<Spec>> = registry().iter().collect();
    let name = text(lines.first());
    let spec = match registry().get(name.trim()) {
        Some(s) => s,
        None => specs[pick(name.as_bytes(), specs.len())],
    };
    let secret = text(lines.get(1));
    let url = text(lines.get(2));
    let url = (!url.is_empty()).then_some(url);
    let now = text(lines.get(3)).trim().parse::<i64>().ok();
    let mut headers = HeaderMap::new();
    for line in lines.iter().skip(4) {
        let Some(colon) = line.iter().position(|b| *b == b':') else {
            continue;
        };
        let value = line[colon + 1..].trim_ascii();
        if let (Ok(n), Ok(v)) = (
            HeaderName::from_bytes(line[..colon].trim_ascii()),
            HeaderValue::from_bytes(value),
        ) {
            headers.append(n, v);
        }
    }
    let path = url
        .as_deref()
        .and_then(|u| u.parse::<http::Uri>().ok())
        .and_then(|u| u.path_and_query().map(|p| p.as_str().to_string()))
        .unwrap_or_else(|| "/ingest/fuzz".to_string());
    let req = Request {
        method: "POST",
        path: &path,
        url: url.as_deref(),
        headers: &headers,
        body,
    };

    let Ok(verifier) = Verifier::new(spec.clone(), &[Secret::new(secret.clone())]) else {
        return;
    };
    let _ = verify::take_work();
    let verdict = match now {
        Some(now) => verifier.verify(req, now),
        None => verifier.verify_ignoring_timestamp(req),
    };
    within_bounds(spec, &req, verify::take_work());
    if let Ok(verified) = &verdict {
        metadata_within_limits(spec, verified);
    }
    round_trip(
        spec,
        &verifier,
        &Secret::new(secret),
        body,
        url.as_deref(),
        now,
    );
}

/// The cost bounds of `provider::tests::cost`, for any request.
fn within_bounds(spec: &Spec, req: &Request<'_>, work: Work) {
    let url_forms = if spec.url_port == UrlPort::Either {
        2
    } else {
        1
    };
    let factor = (spec.algorithms.len() * url_forms) as u64;
    let held = req.body.len()
        + req.url.map_or(0, str::len)
        + req.path.len()
        + req
            .headers
            .iter()
            .map(|(n, v)| n.as_str().len() + v.len())
            .sum::<usize>();
    assert!(
        work.bytes_hashed <= factor * (held as u64 + 1024),
        "{}: {} bytes hashed for a request of {held} bytes",
        spec.name,
        work.bytes_hashed
    );
    assert!(work.form_builds <= 1, "{}: {work:?}", spec.name);
    // Each offered signature (at most MAX_SIGNATURES) against each MAC.
    assert!(
        u64::from(work.signatures_checked) <= factor * verify::MAX_SIGNATURES as u64,
        "{}: {work:?}",
        spec.name
    );
}

/// What a verified request tells about its event stays within the limits the store
/// and the console rely on.
fn metadata_within_limits(spec: &Spec, v: &Verified<'_>) {
    if let Some(id) = v.event_id() {
        assert!(
            id.len() <= MAX_EVENT_ID_LEN.max(71),
            "{}: id {id:?}",
            spec.name
        );
    }
    let _ = v.event_type();
    let _ = v.first_value(&spec.event_object);
    let identity = v.identity();
    assert_eq!(identity.dedupe_key, v.dedupe_key());
    assert!(!identity.dedupe_key.is_empty());
    let _ = v.handshake();
    let _ = v.content_digest();
}

/// Sign `body` with `secret`; the request verifies, and with one character of its
/// signature changed it does not.
pub(super) fn round_trip(
    spec: &Spec,
    verifier: &Verifier,
    secret: &Secret,
    body: &[u8],
    url: Option<&str>,
    now: Option<i64>,
) {
    let timestamp = now.unwrap_or(1_700_000_000).clamp(0, 4_102_444_800);
    let url = url.or(Some("https://hooks.example.com/ingest/fuzz?tenant=1"));
    let input = SignInput {
        body,
        timestamp,
        id: "evt_fuzz",
        event_type: Some("fuzz.event"),
        method: "POST",
        path: "/ingest/fuzz",
        url,
    };
    let Ok(signed) = sign(spec, secret, &input) else {
        return;
    };
    let mut headers = HeaderMap::new();
    for (n, v) in &signed.headers {
        let Ok(v) = HeaderValue::from_str(v) else {
            return;
        };
        headers.append(n.clone(), v);
    }
    let body = signed.body(body).to_vec();
    // The path the URL has, as the signer takes it (`/` when it has none).
    let path = match url.and_then(|u| u.parse::<http::Uri>().ok()) {
        Some(uri) => uri
            .path_and_query()
            .map_or_else(|| "/".to_string(), |p| p.as_str().to_string()),
        None => "/ingest/fuzz".to_string(),
    };
    let req = Request {
        method: "POST",
        path: &path,
        url,
        headers: &headers,
        body: &body,
    };
    let genuine = verifier.verify(req, timestamp);
    assert!(
        genuine.is_ok(),
        "{}: a request hookgate signed does not verify: {:?}",
        spec.name,
        genuine.err()
    );
    drop(genuine);

    // The signature as offered, re-encoded, is found in a header or in the body.
    let Some(offered) = decode_offered(spec, &req) else {
        panic!("{}: the signed request offers no signature", spec.name);
    };
    let encoded: Vec<String> = offered
        .iter()
        .map(|sig| match spec.encoding {
            Encoding::Raw => String::from_utf8_lossy(sig).into_owned(),
            e => encode_sig(e, sig),
        })
        .collect();
    let seed = [body.as_slice(), path.as_bytes()].concat();
    for enc in encoded.iter().filter(|e| !e.is_empty()) {
        let at = pick(&seed, enc.len());
        let Some(mutated) = mutate(spec.encoding, enc, at, &seed) else {
            continue;
        };
        // Where the signature is: its header, or the body. The one place holding it
        // once (a short signature, such as a one-letter token, can also occur in
        // other headers or elsewhere in its own), so that the change lands on it.
        let mut forged_headers = headers.clone();
        let mut forged_body = body.clone();
        match &spec.signature_from {
            ValueSource::Header(name) => {
                let values: Vec<&HeaderValue> = headers.get_all(name).iter().collect();
                let Some(value) = values
                    .iter()
                    .filter_map(|v| v.to_str().ok())
                    .find(|v| v.contains(enc.as_str()))
                else {
                    continue;
                };
                if values.len() != 1 || value.matches(enc.as_str()).count() != 1 {
                    continue;
                }
                let Ok(nv) = HeaderValue::from_str(&value.replacen(enc.as_str(), &mutated, 1))
                else {
                    continue;
                };
                forged_headers.insert(name.clone(), nv);
            }
            _ => {
                let Ok(b) = std::str::from_utf8(&body) else {
                    continue;
                };
                if b.matches(enc.as_str()).count() != 1 {
                    continue;
                }
                forged_body = b.replacen(enc.as_str(), &mutated, 1).into_bytes();
            }
        }
        let forged = Request {
            headers: &forged_headers,
            body: &forged_body,
            ..req
        };
        assert!(
            verifier.verify(forged, timestamp).is_err(),
            "{}: accepted with its signature changed at {at}: {enc:?} -> {mutated:?}",
            spec.name
        );
    }
}

/// `enc` with the character at `at` replaced by another of its alphabet that stands
/// for a different value (hex: another nibble, not the same digit in the other
/// case).
fn mutate(encoding: Encoding, enc: &str, at: usize, seed: &[u8]) -> Option<String> {
    const HEX: &[u8] = b"0123456789abcdef";
    const B64: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const B64URL: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    const RAW: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let bytes = enc.as_bytes();
    let old = *bytes.get(at)?;
    let alphabet = match encoding {
        Encoding::Hex => HEX,
        Encoding::Base64 => B64,
        Encoding::Base64Url => B64URL,
        Encoding::Raw => RAW,
    };
    let same = |c: u8| match encoding {
        Encoding::Hex => c.eq_ignore_ascii_case(&old),
        _ => c == old,
    };
    if !alphabet.iter().any(|c| same(*c)) {
        return None;
    }
    let start = pick(seed, alphabet.len());
    let new = (0..alphabet.len())
        .map(|i| alphabet[(start + i) % alphabet.len()])
        .find(|c| !same(*c))?;
    let mut out = bytes.to_vec();
    out[at] = new;
    String::from_utf8(out).ok()
}
