//! The signature: what the sender offers (parsed from a header or a body value with
//! bounded effort) and what the engine expects (the signed content fed through the
//! key's MAC, or checked against a public key).

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use hmac::Mac;

use super::context::Context;
use super::keys::Key;
use super::{MAX_HEADER_ITEMS, MAX_SIGNATURES, VerifyError, count_work};
use crate::provider::spec::{Encoding, HeaderFormat, Segment, Spec, ValueSource};

/// The offered signature, parsed: the signatures themselves and, for a `kv` value,
/// its other items.
#[derive(Debug, Default)]
pub(crate) struct ParsedSignature {
    /// Decoded signatures offered by the sender.
    pub signatures: Vec<Vec<u8>>,
    /// Non-signature `k=v` items (e.g. Stripe's `t`), or a JWS's claims.
    pub fields: Vec<(String, String)>,
    /// A JWS's signing input (`header.payload`, as sent).
    pub signing_input: Option<String>,
    /// A JWS's `kid`: which of the provider's keys signed it (`[jwk]`).
    pub key_id: Option<String>,
}

/// Parse the signature from wherever the spec says it is. Never panics, whatever
/// the bytes.
pub(crate) fn parse_signature(
    spec: &Spec,
    ctx: &Context<'_>,
) -> Result<ParsedSignature, VerifyError> {
    match &spec.signature_from {
        ValueSource::Header(_) => {
            let mut values = Vec::new();
            for value in spec
                .signature_headers()
                .flat_map(|name| ctx.req.headers.get_all(name))
            {
                values.push(
                    value
                        .to_str()
                        .map_err(|_| VerifyError::MalformedSignature)?,
                );
                if values.len() > MAX_SIGNATURES {
                    return Err(VerifyError::MalformedSignature);
                }
            }
            if values.is_empty() {
                return Err(VerifyError::MissingSignature);
            }
            parse_signature_values(spec, &values)
        }
        src => {
            let value = ctx.value(src).ok_or(VerifyError::MissingSignature)?;
            parse_signature_values(spec, &[value.as_str()])
        }
    }
}

fn parse_signature_values(spec: &Spec, values: &[&str]) -> Result<ParsedSignature, VerifyError> {
    let mut out = ParsedSignature::default();
    let mut undecodable = 0usize;
    for text in values {
        let text = text.trim();
        match &spec.format {
            HeaderFormat::Plain { prefix } => {
                let sig = text
                    .strip_prefix(prefix.as_str())
                    .ok_or(VerifyError::MalformedSignature)?
                    .trim();
                match decode_sig(spec.encoding, sig) {
                    Some(bytes) => out.signatures.push(bytes),
                    None => undecodable += 1,
                }
            }
            HeaderFormat::Jws { claims } => {
                if values.len() > 1 {
                    return Err(VerifyError::MalformedSignature);
                }
                let jws = parse_jws(spec, text)?;
                for (name, expected) in claims {
                    let held = jws.claims.iter().find(|(k, _)| k == name).map(|(_, v)| v);
                    if held != Some(expected) {
                        return Err(VerifyError::Mismatch);
                    }
                }
                out.signatures.push(jws.signature);
                out.fields = jws.claims;
                out.signing_input = Some(jws.signing_input);
                out.key_id = jws.key_id;
            }
            HeaderFormat::Kv {
                pair_separator,
                kv_separator,
                signature_keys,
            } => {
                let mut items = 0usize;
                for item in text.split(pair_separator.as_str()) {
                    let item = item.trim();
                    if item.is_empty() {
                        continue;
                    }
                    items += 1;
                    if items > MAX_HEADER_ITEMS {
                        return Err(VerifyError::MalformedSignature);
                    }
                    let (k, v) = item
                        .split_once(kv_separator.as_str())
                        .ok_or(VerifyError::MalformedSignature)?;
                    let (k, v) = (k.trim(), v.trim());
                    if signature_keys.iter().any(|s| s == k) {
                        match decode_sig(spec.encoding, v) {
                            Some(bytes) => out.signatures.push(bytes),
                            None => undecodable += 1,
                        }
                    } else {
                        // A field given twice is ambiguous: refuse rather than guess.
                        if out.fields.iter().any(|(fk, _)| fk == k) {
                            return Err(VerifyError::MalformedSignature);
                        }
                        out.fields.push((k.to_string(), v.to_string()));
                    }
                }
            }
        }
        if out.signatures.len() + undecodable > MAX_SIGNATURES {
            return Err(VerifyError::MalformedSignature);
        }
    }
    if out.signatures.is_empty() {
        return Err(VerifyError::MalformedSignature);
    }
    Ok(out)
}

/// A compact JWS: its signing input, its signature, and its payload's scalar claims
/// (strings as they are, numbers and booleans as JSON writes them). Its header must
/// name the spec's algorithm and nothing critical (RFC 7515 §4.1.11).
fn parse_jws(spec: &Spec, token: &str) -> Result<Jws, VerifyError> {
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let mut parts = token.split('.');
    let (Some(header), Some(payload), Some(sig), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(VerifyError::MalformedSignature);
    };
    let json = |part: &str| {
        URL_SAFE_NO_PAD
            .decode(part)
            .ok()
            .and_then(|bytes| {
                serde_json::from_slice::<serde_json::Map<String, serde_json::Value>>(&bytes).ok()
            })
            .ok_or(VerifyError::MalformedSignature)
    };
    let head = json(header)?;
    let alg = spec.algorithms.first().and_then(|a| a.jws_alg());
    if head.get("alg").and_then(|v| v.as_str()) != alg || head.contains_key("crit") {
        return Err(VerifyError::MalformedSignature);
    }
    let claims = json(payload)?;
    if claims.len() > MAX_HEADER_ITEMS {
        return Err(VerifyError::MalformedSignature);
    }
    let fields = claims
        .into_iter()
        .filter_map(|(k, v)| match v {
            serde_json::Value::String(s) => Some((k, s)),
            serde_json::Value::Number(_) | serde_json::Value::Bool(_) => Some((k, v.to_string())),
            _ => None,
        })
        .collect();
    let sig = decode_sig(spec.encoding, sig).ok_or(VerifyError::MalformedSignature)?;
    // A key id names a key at the provider's API: short, of URL-safe characters.
    let key_id = match head.get("kid") {
        None => None,
        Some(serde_json::Value::String(kid))
            if !kid.is_empty()
                && kid.len() <= 128
                && kid
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.')) =>
        {
            Some(kid.clone())
        }
        Some(_) => return Err(VerifyError::MalformedSignature),
    };
    Ok(Jws {
        signing_input: format!("{header}.{payload}"),
        signature: sig,
        claims: fields,
        key_id,
    })
}

/// A compact JWS, read.
struct Jws {
    signing_input: String,
    signature: Vec<u8>,
    claims: Vec<(String, String)>,
    key_id: Option<String>,
}

fn decode_sig(encoding: Encoding, s: &str) -> Option<Vec<u8>> {
    if s.is_empty() {
        return None;
    }
    match encoding {
        Encoding::Hex => hex::decode(s).ok(),
        Encoding::Base64 => B64.decode(s).ok(),
        Encoding::Base64Url => base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(s)
            .ok(),
        Encoding::Raw => Some(s.as_bytes().to_vec()),
    }
}

/// Encode a MAC the way the provider writes it.
pub(crate) fn encode_sig(encoding: Encoding, mac: &[u8]) -> String {
    match encoding {
        Encoding::Hex => hex::encode(mac),
        Encoding::Base64 => B64.encode(mac),
        Encoding::Base64Url => base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(mac),
        Encoding::Raw => String::from_utf8_lossy(mac).into_owned(),
    }
}

/// Feed the signed content into `sink`, piece by piece (the body is never copied).
fn signed_content(
    spec: &Spec,
    ctx: &Context<'_>,
    timestamp: Option<&str>,
    url: Option<&str>,
    mut sink: impl FnMut(&[u8]),
) -> Result<(), VerifyError> {
    for seg in &spec.content {
        match seg {
            Segment::Literal(b) => sink(b),
            Segment::Body => sink(ctx.req.body),
            Segment::Timestamp => sink(timestamp.ok_or(VerifyError::MissingTimestamp)?.as_bytes()),
            Segment::Method => sink(ctx.req.method.as_bytes()),
            Segment::Path => sink(ctx.req.path.as_bytes()),
            Segment::Url => sink(url.ok_or(VerifyError::MissingSignedValue)?.as_bytes()),
            Segment::FormSorted if ctx.digest_bound => {}
            Segment::FormSorted => {
                for (name, value) in ctx.sorted_form()? {
                    sink(name.as_bytes());
                    sink(value.as_bytes());
                }
            }
            Segment::Value(src) => {
                let value = ctx.value(src).ok_or(VerifyError::MissingSignedValue)?;
                sink(value.as_bytes())
            }
            Segment::OptionalValue(src) => {
                if let Some(value) = ctx.value(src) {
                    sink(value.as_bytes())
                }
            }
            Segment::Secret => sink(
                ctx.secret
                    .as_deref()
                    .ok_or(VerifyError::MissingSignedValue)?
                    .as_bytes(),
            ),
            Segment::BodyCrc32 => {
                count_work(|w| w.bytes_hashed += ctx.req.body.len() as u64);
                sink(crc32fast::hash(ctx.req.body).to_string().as_bytes())
            }
            Segment::PathEscaped => sink(path_escaped(ctx.req.path).as_bytes()),
            Segment::JwsInput => sink(
                ctx.signature
                    .signing_input
                    .as_deref()
                    .ok_or(VerifyError::MalformedSignature)?
                    .as_bytes(),
            ),
            Segment::HeaderList(list) => {
                let timestamp_header = match spec.timestamp.as_ref().map(|t| &t.from) {
                    Some(ValueSource::Header(h)) => Some(h),
                    _ => None,
                };
                sink(header_list(ctx.req.headers, list, timestamp_header)?.as_bytes())
            }
            Segment::Lines(fields) => {
                let doc = ctx.json().ok_or(VerifyError::MissingSignedValue)?;
                for field in fields {
                    match doc.get(&field.name) {
                        Some(serde_json::Value::String(value)) => {
                            sink(field.name.as_bytes());
                            sink(b"\n");
                            sink(value.as_bytes());
                            sink(b"\n");
                        }
                        None if field.optional => {}
                        _ => return Err(VerifyError::MissingSignedValue),
                    }
                }
            }
        }
    }
    Ok(())
}

/// Compute the MAC (or, for tokens, the digest of the token) of the signed content.
/// Public keys compute nothing: see [`message`].
pub(crate) fn compute(
    spec: &Spec,
    key: &Key,
    ctx: &Context<'_>,
    timestamp: Option<&str>,
    url: Option<&str>,
) -> Result<Vec<u8>, VerifyError> {
    fn run<M: Mac + Clone>(
        keyed: &M,
        spec: &Spec,
        ctx: &Context<'_>,
        timestamp: Option<&str>,
        url: Option<&str>,
    ) -> Result<Vec<u8>, VerifyError> {
        let mut mac = keyed.clone();
        let mut hashed = 0u64;
        signed_content(spec, ctx, timestamp, url, |b| {
            hashed += b.len() as u64;
            mac.update(b)
        })?;
        count_work(|w| w.bytes_hashed += hashed);
        Ok(mac.finalize().into_bytes().to_vec())
    }
    match key {
        Key::Sha256(k) => run(k, spec, ctx, timestamp, url),
        Key::Sha1(k) => run(k, spec, ctx, timestamp, url),
        Key::Sha512(k) => run(k, spec, ctx, timestamp, url),
        Key::Token(digest) => Ok(digest.to_vec()),
        Key::Ed25519(_) | Key::EcdsaP256(_) | Key::Bound(_) | Key::Rsa(_) => Ok(Vec::new()),
    }
}

/// The signed content as one buffer (public-key schemes sign the whole message).
pub(crate) fn message(
    spec: &Spec,
    ctx: &Context<'_>,
    timestamp: Option<&str>,
    url: Option<&str>,
) -> Result<Vec<u8>, VerifyError> {
    let mut out = Vec::with_capacity(ctx.req.body.len() + 64);
    signed_content(spec, ctx, timestamp, url, |b| out.extend_from_slice(b))?;
    Ok(out)
}

/// The signed content of one URL form, ready for public-key verification: the
/// message itself (Ed25519 signs it whole) and, when a key needs it, its SHA-256
/// (ECDSA P-256 verifies the digest, computed once however many keys are tried).
pub(super) struct PublicMessage {
    pub(super) msg: Vec<u8>,
    pub(super) sha256: Option<[u8; 32]>,
}

/// Whether `sig` is a valid signature of the message under the public key (an RSA
/// key under any of `algorithms`).
pub(super) fn verify_public(
    key: &Key,
    algorithms: &[crate::provider::spec::Algorithm],
    message: &PublicMessage,
    sig: &[u8],
) -> bool {
    use crate::provider::spec::Algorithm;
    count_work(|w| w.signatures_checked += 1);
    match key {
        Key::Rsa(der) => algorithms.iter().any(|a| {
            let alg: &dyn ring::signature::VerificationAlgorithm = match a {
                Algorithm::RsaSha1 => {
                    &ring::signature::RSA_PKCS1_2048_8192_SHA1_FOR_LEGACY_USE_ONLY
                }
                Algorithm::RsaSha256 => &ring::signature::RSA_PKCS1_2048_8192_SHA256,
                _ => return false,
            };
            count_work(|w| w.bytes_hashed += message.msg.len() as u64);
            ring::signature::UnparsedPublicKey::new(alg, &der[..])
                .verify(&message.msg, sig)
                .is_ok()
        }),
        Key::Ed25519(vk) => {
            count_work(|w| w.bytes_hashed += message.msg.len() as u64);
            ed25519_dalek::Signature::from_slice(sig)
                .is_ok_and(|s| vk.verify_strict(&message.msg, &s).is_ok())
        }
        Key::EcdsaP256(vk) => {
            use p256::ecdsa::signature::hazmat::PrehashVerifier as _;
            let Some(digest) = &message.sha256 else {
                return false;
            };
            let parsed = if sig.len() == 64 {
                p256::ecdsa::Signature::from_slice(sig)
            } else {
                p256::ecdsa::Signature::from_der(sig)
            };
            parsed.is_ok_and(|s| vk.verify_prehash(digest, &s).is_ok())
        }
        _ => false,
    }
}

/// What `encodeURIComponent` (and Node's `querystring.escape`) leaves alone.
const COMPONENT: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'!')
    .remove(b'~')
    .remove(b'*')
    .remove(b'\'')
    .remove(b'(')
    .remove(b')');

/// What `encodeURI` leaves alone: the above and the URI's reserved characters.
const URI: &percent_encoding::AsciiSet = &COMPONENT
    .remove(b';')
    .remove(b',')
    .remove(b'/')
    .remove(b'?')
    .remove(b':')
    .remove(b'@')
    .remove(b'&')
    .remove(b'=')
    .remove(b'+')
    .remove(b'$')
    .remove(b'#');

/// `{path_escaped}`: `encodeURI(path + "?" + querystring.escape(query))`, the path
/// of Contentful's canonical request (node-apps-toolkit `getNormalizedEncodedURI`).
pub(crate) fn path_escaped(path_and_query: &str) -> String {
    let (path, query) = match path_and_query.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (path_and_query, None),
    };
    let whole = match query {
        Some(q) if !q.is_empty() => {
            format!(
                "{path}?{}",
                percent_encoding::utf8_percent_encode(q, COMPONENT)
            )
        }
        _ => path.to_string(),
    };
    percent_encoding::utf8_percent_encode(&whole, URI).to_string()
}

/// The most headers a `{header_list:…}` takes.
const MAX_LISTED: usize = 32;

/// `{header_list:NAME}`: the headers NAME lists, with NAME and `timestamp_header`,
/// lowercased, sorted, deduplicated, as `name:value` joined by `;`, NAME's value
/// being the sorted list itself (Contentful's canonical headers).
pub(crate) fn header_list(
    headers: &http::HeaderMap,
    list: &http::HeaderName,
    timestamp_header: Option<&http::HeaderName>,
) -> Result<String, VerifyError> {
    let listed = headers
        .get(list)
        .ok_or(VerifyError::MissingSignedValue)?
        .to_str()
        .map_err(|_| VerifyError::MalformedSignature)?;
    let mut names: Vec<String> = listed
        .split(',')
        .map(|n| n.trim().to_ascii_lowercase())
        .filter(|n| !n.is_empty())
        .collect();
    names.push(list.as_str().to_string());
    if let Some(t) = timestamp_header {
        names.push(t.as_str().to_string());
    }
    names.sort();
    names.dedup();
    if names.len() > MAX_LISTED {
        return Err(VerifyError::MalformedSignature);
    }
    let joined = names.join(",");
    let mut out = Vec::with_capacity(names.len());
    for name in &names {
        let value = if name == list.as_str() {
            joined.clone()
        } else {
            headers
                .get(name.as_str())
                .ok_or(VerifyError::MissingSignedValue)?
                .to_str()
                .map_err(|_| VerifyError::MissingSignedValue)?
                .trim()
                .to_string()
        };
        out.push(format!("{name}:{value}"));
    }
    Ok(out.join(";"))
}

#[cfg(test)]
mod contentful_tests {
    use super::*;

    #[test]
    fn paths_and_header_lists_are_canonical_as_contentful_signs_them() {
        // node-apps-toolkit utils.spec.ts: the query is escaped twice, not sorted.
        assert_eq!(
            path_escaped("/api/v1?a=1&b=2"),
            "/api/v1?a%253D1%2526b%253D2"
        );
        assert_eq!(
            path_escaped("/api/v1?b=2&a=1"),
            "/api/v1?b%253D2%2526a%253D1"
        );
        assert_eq!(path_escaped("/api/v1"), "/api/v1");
        assert_eq!(path_escaped("/api/v1?"), "/api/v1");
        assert_eq!(path_escaped("/a%20b"), "/a%2520b");

        let list = http::HeaderName::from_static("x-contentful-signed-headers");
        let ts = http::HeaderName::from_static("x-contentful-timestamp");
        let mut headers = http::HeaderMap::new();
        headers.insert(&list, " X-Contentful-Topic , content-type".parse().unwrap());
        headers.insert(&ts, "1603379941037".parse().unwrap());
        headers.insert("x-contentful-topic", " Entry.publish ".parse().unwrap());
        headers.insert("content-type", "application/json".parse().unwrap());
        headers.insert("x-unlisted", "ignored".parse().unwrap());
        assert_eq!(
            header_list(&headers, &list, Some(&ts)).unwrap(),
            "content-type:application/json;x-contentful-signed-headers:content-type,x-contentful-signed-headers,x-contentful-timestamp,x-contentful-topic;x-contentful-timestamp:1603379941037;x-contentful-topic:Entry.publish"
        );
        headers.insert(&list, "x-missing".parse().unwrap());
        assert_eq!(
            header_list(&headers, &list, Some(&ts)),
            Err(VerifyError::MissingSignedValue)
        );
        let many: Vec<String> = (0..40).map(|i| format!("h{i}")).collect();
        headers.insert(&list, many.join(",").parse().unwrap());
        assert_eq!(
            header_list(&headers, &list, Some(&ts)),
            Err(VerifyError::MalformedSignature)
        );
    }
}
