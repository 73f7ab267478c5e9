//! The one verification engine: checks a request against a compiled [`Spec`].
//!
//! It works on the exact raw bytes of the body, parses the signature header with
//! bounded effort, checks the timestamp window, computes the MAC once per configured
//! key, and compares it with every offered signature in constant time (`subtle`).
//! It never reads the clock (the caller passes `now`) and does no I/O, so it is
//! tested with fixed vectors and property tests alone.
//!
//! After a request is verified, [`Verified`] extracts the event id and type and
//! recognises handshakes; JSON is parsed at most once per request, and never before
//! the signature is known to be good unless the spec signs a part of the JSON body.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use hmac::{Hmac, KeyInit, Mac};
use http::HeaderMap;
use sha2::Digest as _;
use subtle::ConstantTimeEq;

use super::spec::{
    Algorithm, Encoding, Handshake, HeaderFormat, SecretEncoding, Segment, Spec, TimeUnit,
    ValueSource,
};
use crate::config::Secret;

/// Most signatures one header may offer; more is treated as malformed (bounds the
/// work a hostile header can cause).
pub const MAX_SIGNATURES: usize = 16;
/// Most `k=v` items one signature header may hold.
pub const MAX_HEADER_ITEMS: usize = 32;
/// Longest event id kept as is; longer ids are replaced by their SHA-256.
pub const MAX_EVENT_ID_LEN: usize = 200;

/// Why a request was refused. All of these answer 401; the text is safe to return
/// (it never contains the expected value).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    #[error("missing signature header")]
    MissingSignature,
    #[error("malformed signature header")]
    MalformedSignature,
    #[error("signature does not match")]
    Mismatch,
    #[error("missing timestamp")]
    MissingTimestamp,
    #[error("malformed timestamp")]
    MalformedTimestamp,
    #[error("timestamp outside tolerance")]
    TimestampOutsideTolerance,
    #[error("missing signed value")]
    MissingSignedValue,
}

impl VerifyError {
    /// A stable label for logs and metrics.
    pub fn code(&self) -> &'static str {
        match self {
            VerifyError::MissingSignature => "missing_signature",
            VerifyError::MalformedSignature => "malformed_signature",
            VerifyError::Mismatch => "mismatch",
            VerifyError::MissingTimestamp => "missing_timestamp",
            VerifyError::MalformedTimestamp => "malformed_timestamp",
            VerifyError::TimestampOutsideTolerance => "stale",
            VerifyError::MissingSignedValue => "missing_signed_value",
        }
    }
}

/// A secret that cannot be turned into a key for its provider.
#[derive(Debug, thiserror::Error)]
#[error("secret #{index} is not valid for provider {provider:?}: {problem}")]
pub struct KeyError {
    pub provider: String,
    pub index: usize,
    pub problem: &'static str,
}

/// A key ready to use: the HMAC state after the key schedule (cloned per request), or
/// the SHA-256 of a plain token.
#[derive(Clone)]
pub enum Key {
    Sha256(Hmac<sha2::Sha256>),
    Sha1(Hmac<sha1::Sha1>),
    Sha512(Hmac<sha2::Sha512>),
    Token([u8; 32]),
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Key([redacted])")
    }
}

/// Decode the secrets of a source into keys for its provider.
pub fn prepare_keys(spec: &Spec, secrets: &[Secret]) -> Result<Vec<Key>, KeyError> {
    secrets
        .iter()
        .enumerate()
        .map(|(index, s)| {
            let err = |problem| KeyError {
                provider: spec.name.clone(),
                index,
                problem,
            };
            let raw = s.expose();
            let bytes = match spec.secret_encoding {
                SecretEncoding::Utf8 => raw.as_bytes().to_vec(),
                SecretEncoding::WhsecBase64 => B64
                    .decode(raw.strip_prefix("whsec_").unwrap_or(raw))
                    .map_err(|_| err("expected whsec_ followed by base64"))?,
                SecretEncoding::Base64 => B64.decode(raw).map_err(|_| err("expected base64"))?,
                SecretEncoding::Hex => hex::decode(raw).map_err(|_| err("expected hex"))?,
            };
            if bytes.is_empty() {
                return Err(err("the decoded secret is empty"));
            }
            Ok(match spec.algorithm {
                Algorithm::HmacSha256 => {
                    Key::Sha256(Hmac::new_from_slice(&bytes).map_err(|_| err("invalid HMAC key"))?)
                }
                Algorithm::HmacSha1 => {
                    Key::Sha1(Hmac::new_from_slice(&bytes).map_err(|_| err("invalid HMAC key"))?)
                }
                Algorithm::HmacSha512 => {
                    Key::Sha512(Hmac::new_from_slice(&bytes).map_err(|_| err("invalid HMAC key"))?)
                }
                Algorithm::Token => Key::Token(sha2::Sha256::digest(&bytes).into()),
            })
        })
        .collect()
}

/// The parts of an HTTP request the engine looks at.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    pub method: &'a str,
    /// Path and query as received.
    pub path: &'a str,
    pub headers: &'a HeaderMap,
    pub body: &'a [u8],
}

/// The signature header, parsed.
#[derive(Debug, Default)]
pub(crate) struct ParsedHeader {
    /// Decoded signatures offered by the sender.
    pub signatures: Vec<Vec<u8>>,
    /// Non-signature `k=v` items (e.g. Stripe's `t`).
    pub fields: Vec<(String, String)>,
}

/// Parse the signature header(s). Never panics, whatever the bytes.
pub(crate) fn parse_header(spec: &Spec, headers: &HeaderMap) -> Result<ParsedHeader, VerifyError> {
    let mut out = ParsedHeader::default();
    let mut seen_any = false;
    let mut undecodable = 0usize;
    for value in headers.get_all(&spec.header) {
        seen_any = true;
        let text = value
            .to_str()
            .map_err(|_| VerifyError::MalformedSignature)?
            .trim();
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
    if !seen_any {
        return Err(VerifyError::MissingSignature);
    }
    if out.signatures.is_empty() {
        return Err(VerifyError::MalformedSignature);
    }
    Ok(out)
}

fn decode_sig(encoding: Encoding, s: &str) -> Option<Vec<u8>> {
    if s.is_empty() {
        return None;
    }
    match encoding {
        Encoding::Hex => hex::decode(s).ok(),
        Encoding::Base64 => B64.decode(s).ok(),
        Encoding::Raw => Some(s.as_bytes().to_vec()),
    }
}

/// Encode a MAC the way the provider writes it.
pub(crate) fn encode_sig(encoding: Encoding, mac: &[u8]) -> String {
    match encoding {
        Encoding::Hex => hex::encode(mac),
        Encoding::Base64 => B64.encode(mac),
        Encoding::Raw => String::from_utf8_lossy(mac).into_owned(),
    }
}

/// Everything the signed-content template and the event extraction may read.
pub(crate) struct Context<'a> {
    pub req: Request<'a>,
    pub header: ParsedHeader,
}

impl<'a> Context<'a> {
    pub(crate) fn new(req: Request<'a>, header: ParsedHeader) -> Self {
        Context { req, header }
    }

    /// Resolve a value source to its text, if present.
    pub(crate) fn value(&self, src: &ValueSource) -> Option<String> {
        match src {
            ValueSource::Header(name) => self
                .req
                .headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(|s| s.trim().to_string()),
            ValueSource::Signature(key) => self
                .header
                .fields
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.clone()),
            ValueSource::Json(ptr) => json_pointer_text(self.req.body, ptr),
        }
    }
}

/// The text at a JSON pointer in `body` (strings unescaped; numbers and booleans as
/// written), found without building the document: each level is read as a map of raw,
/// borrowed values, so a large body is scanned, not copied.
pub(crate) fn json_pointer_text(body: &[u8], ptr: &str) -> Option<String> {
    use serde_json::value::RawValue;
    use std::borrow::Cow;
    use std::collections::HashMap;
    let mut current: &RawValue = serde_json::from_slice(body).ok()?;
    if ptr.is_empty() {
        return raw_text(current);
    }
    for token in ptr.strip_prefix('/')?.split('/') {
        let token = token.replace("~1", "/").replace("~0", "~");
        let text = current.get();
        current = match text.as_bytes().first()? {
            b'{' => {
                let map: HashMap<Cow<'_, str>, &RawValue> = serde_json::from_str(text).ok()?;
                map.get(token.as_str()).copied()?
            }
            b'[' => {
                let items: Vec<&RawValue> = serde_json::from_str(text).ok()?;
                items.get(token.parse::<usize>().ok()?).copied()?
            }
            _ => return None,
        };
    }
    raw_text(current)
}

fn raw_text(v: &serde_json::value::RawValue) -> Option<String> {
    let text = v.get();
    match text.as_bytes().first()? {
        b'"' => serde_json::from_str::<String>(text).ok(),
        b'-' | b'0'..=b'9' | b't' | b'f' => Some(text.to_string()),
        _ => None,
    }
}

/// Feed the signed content into `sink`, piece by piece (the body is never copied).
pub(crate) fn signed_content(
    spec: &Spec,
    ctx: &Context<'_>,
    timestamp: Option<&str>,
    mut sink: impl FnMut(&[u8]),
) -> Result<(), VerifyError> {
    for seg in &spec.content {
        match seg {
            Segment::Literal(b) => sink(b),
            Segment::Body => sink(ctx.req.body),
            Segment::Timestamp => sink(timestamp.ok_or(VerifyError::MissingTimestamp)?.as_bytes()),
            Segment::Method => sink(ctx.req.method.as_bytes()),
            Segment::Path => sink(ctx.req.path.as_bytes()),
            Segment::Value(src) => {
                let v = ctx.value(src).ok_or(VerifyError::MissingSignedValue)?;
                sink(v.as_bytes())
            }
        }
    }
    Ok(())
}

/// Compute the MAC (or, for tokens, the digest of the token) of the signed content.
pub(crate) fn compute(
    spec: &Spec,
    key: &Key,
    ctx: &Context<'_>,
    timestamp: Option<&str>,
) -> Result<Vec<u8>, VerifyError> {
    Ok(match key {
        Key::Sha256(k) => {
            let mut m = k.clone();
            signed_content(spec, ctx, timestamp, |b| m.update(b))?;
            m.finalize().into_bytes().to_vec()
        }
        Key::Sha1(k) => {
            let mut m = k.clone();
            signed_content(spec, ctx, timestamp, |b| m.update(b))?;
            m.finalize().into_bytes().to_vec()
        }
        Key::Sha512(k) => {
            let mut m = k.clone();
            signed_content(spec, ctx, timestamp, |b| m.update(b))?;
            m.finalize().into_bytes().to_vec()
        }
        Key::Token(digest) => digest.to_vec(),
    })
}

/// A request whose signature holds. Gives access to the event metadata.
pub struct Verified<'a> {
    ctx: Context<'a>,
    spec: &'a Spec,
    /// The signed timestamp, in unix seconds, when the provider signs one.
    pub timestamp: Option<i64>,
}

/// What a handshake request must be answered with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HandshakeReply {
    /// Answer 200 with this text (`text/plain`).
    Text(String),
}

impl Verified<'_> {
    /// The provider's event id (stable across its retries), if the request has one.
    /// Ids longer than [`MAX_EVENT_ID_LEN`] are replaced by their SHA-256.
    pub fn event_id(&self) -> Option<String> {
        let id = self.ctx.value(self.spec.event_id.as_ref()?)?;
        if id.is_empty() {
            None
        } else if id.len() > MAX_EVENT_ID_LEN {
            Some(format!("sha256:{}", hex::encode(sha2::Sha256::digest(id))))
        } else {
            Some(id)
        }
    }

    /// The event type, if the request names one.
    pub fn event_type(&self) -> Option<String> {
        let t = self.ctx.value(self.spec.event_type.as_ref()?)?;
        (!t.is_empty() && t.len() <= MAX_EVENT_ID_LEN).then_some(t)
    }

    /// The answer to a provider handshake, when this request is one.
    pub fn handshake(&self) -> Option<HandshakeReply> {
        match self.spec.handshake? {
            Handshake::SlackUrlVerification => {
                let body = self.ctx.req.body;
                if json_pointer_text(body, "/type")? != "url_verification" {
                    return None;
                }
                Some(HandshakeReply::Text(json_pointer_text(body, "/challenge")?))
            }
        }
    }
}

/// Verify a request at `now` (unix seconds): signature and timestamp window.
pub fn verify<'a>(
    spec: &'a Spec,
    keys: &[Key],
    req: Request<'a>,
    now: i64,
) -> Result<Verified<'a>, VerifyError> {
    verify_inner(spec, keys, req, Some(now))
}

/// Verify the signature only, ignoring the timestamp window (for test vectors whose
/// time is long past, and for tools that re-check stored requests).
pub fn verify_ignoring_timestamp<'a>(
    spec: &'a Spec,
    keys: &[Key],
    req: Request<'a>,
) -> Result<Verified<'a>, VerifyError> {
    verify_inner(spec, keys, req, None)
}

fn verify_inner<'a>(
    spec: &'a Spec,
    keys: &[Key],
    req: Request<'a>,
    now: Option<i64>,
) -> Result<Verified<'a>, VerifyError> {
    let header = parse_header(spec, req.headers)?;
    let ctx = Context::new(req, header);

    let (ts_text, timestamp) = match &spec.timestamp {
        Some(rule) => {
            let text = ctx.value(&rule.from).ok_or(VerifyError::MissingTimestamp)?;
            let value = parse_timestamp(&text).ok_or(VerifyError::MalformedTimestamp)?;
            let secs = match rule.unit {
                TimeUnit::Seconds => value,
                TimeUnit::Milliseconds => value.div_euclid(1000),
            };
            if let Some(now) = now {
                let tol = i64::try_from(rule.tolerance.as_secs()).unwrap_or(i64::MAX);
                if now.abs_diff(secs) > tol.unsigned_abs() {
                    return Err(VerifyError::TimestampOutsideTolerance);
                }
            }
            (Some(text), Some(secs))
        }
        None => (None, None),
    };

    let mut matched = subtle::Choice::from(0u8);
    for key in keys {
        let expected = compute(spec, key, &ctx, ts_text.as_deref())?;
        for offered in &ctx.header.signatures {
            let candidate;
            let offered = match key {
                // Compare digests so that the comparison does not depend on the
                // token's length.
                Key::Token(_) => {
                    candidate = sha2::Sha256::digest(offered);
                    candidate.as_slice()
                }
                _ => offered.as_slice(),
            };
            matched |= expected.as_slice().ct_eq(offered);
        }
    }
    if !bool::from(matched) {
        return Err(VerifyError::Mismatch);
    }
    Ok(Verified {
        ctx,
        spec,
        timestamp,
    })
}

/// A timestamp is a plain decimal integer (no sign, no fraction), at most 16 digits.
fn parse_timestamp(s: &str) -> Option<i64> {
    if s.is_empty() || s.len() > 16 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// The SHA-256 of the body, hex: the dedupe key for requests without an event id.
pub fn body_digest(body: &[u8]) -> String {
    hex::encode(sha2::Sha256::digest(body))
}

#[cfg(test)]
mod tests {
    use super::json_pointer_text;

    #[test]
    fn pointers_find_strings_numbers_and_nested_values() {
        let body = br#"{"id":"evt_1","n":42,"ok":true,"event":{"type":"app_mention","a/b":"s","x":[1,{"y":"z"}]},"esc":"a\"b","nul":null}"#;
        assert_eq!(json_pointer_text(body, "/id").as_deref(), Some("evt_1"));
        assert_eq!(json_pointer_text(body, "/n").as_deref(), Some("42"));
        assert_eq!(json_pointer_text(body, "/ok").as_deref(), Some("true"));
        assert_eq!(
            json_pointer_text(body, "/event/type").as_deref(),
            Some("app_mention")
        );
        assert_eq!(json_pointer_text(body, "/event/a~1b").as_deref(), Some("s"));
        assert_eq!(
            json_pointer_text(body, "/event/x/1/y").as_deref(),
            Some("z")
        );
        assert_eq!(json_pointer_text(body, "/esc").as_deref(), Some("a\"b"));
        assert_eq!(json_pointer_text(body, "/nul"), None);
        assert_eq!(json_pointer_text(body, "/event"), None);
        assert_eq!(json_pointer_text(body, "/missing"), None);
        assert_eq!(json_pointer_text(b"not json", "/id"), None);
        assert_eq!(json_pointer_text(b"[1,2]", "/5"), None);
    }
}
