//! The one verification engine: checks a request against a compiled [`Spec`].
//!
//! It works on the exact raw bytes of the body, parses the signature (a header, or a
//! value in the body) with bounded effort, checks the timestamp window, computes the
//! MAC once per configured key (and URL form, for providers that sign the URL), and
//! compares it with every offered signature in constant time (`subtle`). Public-key
//! schemes (Ed25519, ECDSA P-256) verify the same signed content against the
//! configured public key. It never reads the clock (the caller passes `now`) and does
//! no I/O, so it is tested with fixed vectors and property tests alone.
//!
//! After a request is verified, [`Verified`] extracts the event id and type and
//! recognises handshakes; the body is parsed (as JSON or as a form) at most once per
//! request, and never before the signature is known to be good unless the spec reads
//! the signature, the timestamp or a signed value from the body.

use std::cell::OnceCell;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Digest as _;
use subtle::{ConditionallySelectable, ConstantTimeEq};

use super::spec::{
    Algorithm, Encoding, Handshake, HeaderFormat, Part, SecretEncoding, Segment, Spec, TimeUnit,
    UrlPort, ValueSource, ValueTemplate,
};
use crate::config::Secret;

/// Most signatures one header may offer; more is treated as malformed (bounds the
/// work a hostile header can cause).
pub const MAX_SIGNATURES: usize = 16;
/// Most `k=v` items one signature header may hold.
pub const MAX_HEADER_ITEMS: usize = 32;
/// Longest event id kept as is; longer ids are replaced by their SHA-256.
pub const MAX_EVENT_ID_LEN: usize = 200;
/// Longest Zoom `plainToken` answered (Zoom's are 22 characters).
pub const MAX_PLAIN_TOKEN_LEN: usize = 256;
/// Most parameters a form body may hold (Twilio sends a few dozen). A form with more
/// is refused as malformed before anything is decoded, so a forged body of a million
/// tiny parameters costs one byte scan.
pub const MAX_FORM_PARAMS: usize = 1000;

/// The work one verification did, counted on the verifying thread: how many bytes
/// went into MACs and hashes, how often the sorted form was built, and how many
/// offered signatures were checked. Tests state each verifier's cost with it (linear
/// in the body, with a small constant) instead of timing it.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Work {
    pub bytes_hashed: u64,
    pub form_builds: u32,
    pub signatures_checked: u32,
}

thread_local! {
    static WORK: std::cell::Cell<Work> = const { std::cell::Cell::new(Work {
        bytes_hashed: 0,
        form_builds: 0,
        signatures_checked: 0,
    }) };
}

fn count(f: impl FnOnce(&mut Work)) {
    WORK.with(|w| {
        let mut v = w.get();
        f(&mut v);
        w.set(v);
    });
}

/// The work counted on this thread since the last call, and a reset.
pub fn take_work() -> Work {
    WORK.with(|w| w.replace(Work::default()))
}

crate::telemetry::label_values! {
    /// Why a request was refused. All of these answer 401; the text is safe to return
    /// (it never contains the expected value). The label is the `reason` of
    /// `hookgate_ingest_unverified_total`.
    #[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
    pub enum VerifyError {
        #[error("missing signature header")]
        MissingSignature => "missing_signature",
        #[error("malformed signature header")]
        MalformedSignature => "malformed_signature",
        #[error("signature does not match")]
        Mismatch => "mismatch",
        #[error("missing timestamp")]
        MissingTimestamp => "missing_timestamp",
        #[error("malformed timestamp")]
        MalformedTimestamp => "malformed_timestamp",
        #[error("timestamp outside tolerance")]
        TimestampOutsideTolerance => "stale",
        #[error("missing signed value")]
        MissingSignedValue => "missing_signed_value",
        #[error("body does not match its signed digest")]
        BodyDigestMismatch => "body_digest_mismatch",
        #[error("malformed form body")]
        MalformedForm => "malformed_form",
    }
}

impl VerifyError {
    /// A stable label for logs and metrics.
    pub fn code(&self) -> &'static str {
        self.label()
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

/// A key ready to use: the HMAC state after the key schedule (cloned per request), the
/// SHA-256 of a plain token, or a provider's public key.
#[derive(Clone)]
pub enum Key {
    Sha256(Hmac<sha2::Sha256>),
    Sha1(Hmac<sha1::Sha1>),
    Sha512(Hmac<sha2::Sha512>),
    Token([u8; 32]),
    Ed25519(ed25519_dalek::VerifyingKey),
    EcdsaP256(p256::ecdsa::VerifyingKey),
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Key([redacted])")
    }
}

impl Key {
    fn is_public(&self) -> bool {
        matches!(self, Key::Ed25519(_) | Key::EcdsaP256(_))
    }

    /// The HMAC of `data`, for HMAC keys.
    pub fn mac(&self, data: &[u8]) -> Option<Vec<u8>> {
        fn run<M: Mac + Clone>(m: &M, data: &[u8]) -> Vec<u8> {
            let mut m = m.clone();
            m.update(data);
            m.finalize().into_bytes().to_vec()
        }
        match self {
            Key::Sha256(k) => Some(run(k, data)),
            Key::Sha1(k) => Some(run(k, data)),
            Key::Sha512(k) => Some(run(k, data)),
            Key::Token(_) | Key::Ed25519(_) | Key::EcdsaP256(_) => None,
        }
    }
}

/// Decode the secrets of a source into keys for its provider: one key per secret and
/// algorithm, secret by secret, so the first key is the first secret under the
/// spec's first algorithm.
pub fn prepare_keys(spec: &Spec, secrets: &[Secret]) -> Result<Vec<Key>, KeyError> {
    let mut keys = Vec::with_capacity(secrets.len() * spec.algorithms.len());
    for (index, s) in secrets.iter().enumerate() {
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
            SecretEncoding::Base64 => B64.decode(raw.trim()).map_err(|_| err("expected base64"))?,
            SecretEncoding::Hex => hex::decode(raw.trim()).map_err(|_| err("expected hex"))?,
        };
        if bytes.is_empty() {
            return Err(err("the decoded secret is empty"));
        }
        for algorithm in &spec.algorithms {
            let hmac_err = |_| err("invalid HMAC key");
            keys.push(match algorithm {
                Algorithm::HmacSha256 => {
                    Key::Sha256(Hmac::new_from_slice(&bytes).map_err(hmac_err)?)
                }
                Algorithm::HmacSha1 => Key::Sha1(Hmac::new_from_slice(&bytes).map_err(hmac_err)?),
                Algorithm::HmacSha512 => {
                    Key::Sha512(Hmac::new_from_slice(&bytes).map_err(hmac_err)?)
                }
                Algorithm::Token => Key::Token(sha2::Sha256::digest(&bytes).into()),
                Algorithm::Ed25519 => {
                    let arr: [u8; 32] = bytes
                        .as_slice()
                        .try_into()
                        .map_err(|_| err("expected a 32-byte Ed25519 public key"))?;
                    Key::Ed25519(
                        ed25519_dalek::VerifyingKey::from_bytes(&arr)
                            .map_err(|_| err("not a valid Ed25519 public key"))?,
                    )
                }
                Algorithm::EcdsaP256Sha256 => {
                    Key::EcdsaP256(parse_p256_key(&bytes).ok_or_else(|| {
                        err("expected a P-256 public key (DER SubjectPublicKeyInfo or SEC1 point)")
                    })?)
                }
            });
        }
    }
    Ok(keys)
}

fn parse_p256_key(bytes: &[u8]) -> Option<p256::ecdsa::VerifyingKey> {
    use p256::pkcs8::DecodePublicKey as _;
    match bytes.first() {
        Some(0x02..=0x04) if matches!(bytes.len(), 33 | 65) => {
            p256::ecdsa::VerifyingKey::from_sec1_bytes(bytes).ok()
        }
        _ => p256::ecdsa::VerifyingKey::from_public_key_der(bytes).ok(),
    }
}

/// The parts of an HTTP request the engine looks at.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    pub method: &'a str,
    /// Path and query as received.
    pub path: &'a str,
    /// The URL the provider called (the source's `public_url` and the received
    /// query, see [`request_url`]), for specs that sign `{url}`.
    pub url: Option<&'a str>,
    pub headers: &'a http::HeaderMap,
    pub body: &'a [u8],
}

/// The URL a provider called: `public_url` (configured, without query) followed by
/// the query string of the received request, if any.
pub fn request_url(public_url: &str, query: Option<&str>) -> String {
    match query {
        Some(q) => format!("{public_url}?{q}"),
        None => public_url.to_string(),
    }
}

/// The forms of `url` a provider with `url_port = "either"` may have signed: without
/// any port, and with its port (the scheme's default when it names none).
pub fn port_variants(url: &str) -> Vec<String> {
    let Some(scheme_end) = url.find("://") else {
        return vec![url.to_string()];
    };
    let start = scheme_end + 3;
    let end = url[start..]
        .find(['/', '?', '#'])
        .map_or(url.len(), |i| start + i);
    let authority = &url[start..end];
    let host_start = authority.rfind('@').map_or(0, |i| i + 1);
    let host_port = &authority[host_start..];
    let (host, port) = match host_port.rfind(':') {
        Some(i)
            if i + 1 < host_port.len()
                && !host_port[i..].contains(']')
                && host_port[i + 1..].bytes().all(|b| b.is_ascii_digit()) =>
        {
            (&host_port[..i], Some(&host_port[i + 1..]))
        }
        _ => (host_port, None),
    };
    let default = match url[..scheme_end].to_ascii_lowercase().as_str() {
        "https" => Some("443"),
        "http" => Some("80"),
        _ => None,
    };
    let prefix = &url[..start + host_start];
    let suffix = &url[end..];
    let mut out = vec![format!("{prefix}{host}{suffix}")];
    if let Some(p) = port.or(default) {
        out.push(format!("{prefix}{host}:{p}{suffix}"));
    }
    out
}

/// The signature, parsed.
#[derive(Debug, Default)]
pub(crate) struct ParsedHeader {
    /// Decoded signatures offered by the sender.
    pub signatures: Vec<Vec<u8>>,
    /// Non-signature `k=v` items (e.g. Stripe's `t`).
    pub fields: Vec<(String, String)>,
}

/// Parse the signature from wherever the spec says it is. Never panics, whatever
/// the bytes.
pub(crate) fn parse_signature(spec: &Spec, ctx: &Context<'_>) -> Result<ParsedHeader, VerifyError> {
    match &spec.signature_from {
        ValueSource::Header(name) => {
            let mut values = Vec::new();
            for value in ctx.req.headers.get_all(name) {
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
            parse_values(spec, &values)
        }
        src => {
            let value = ctx.value(src).ok_or(VerifyError::MissingSignature)?;
            parse_values(spec, &[value.as_str()])
        }
    }
}

fn parse_values(spec: &Spec, values: &[&str]) -> Result<ParsedHeader, VerifyError> {
    let mut out = ParsedHeader::default();
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

/// Why a form body has no parameters to verify.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FormError {
    /// More than [`MAX_FORM_PARAMS`] parameters.
    TooManyParameters,
    /// A decoded name or value is not UTF-8.
    NotUtf8,
}

/// Decode an `application/x-www-form-urlencoded` string: `&`-separated `name=value`
/// pairs, `+` for a space, `%XX` escapes (a malformed escape is kept literally, as
/// form parsers do). Refused when a decoded name or value is not UTF-8 (such a body
/// has no unambiguous parameters to verify) or when it holds more than
/// [`MAX_FORM_PARAMS`] parameters (counted before anything is decoded).
pub fn parse_form(bytes: &[u8]) -> Result<Vec<(String, String)>, FormError> {
    let pairs = bytes
        .split(|b| *b == b'&')
        .filter(|p| !p.is_empty())
        .take(MAX_FORM_PARAMS + 1)
        .count();
    if pairs > MAX_FORM_PARAMS {
        return Err(FormError::TooManyParameters);
    }
    let mut out = Vec::with_capacity(pairs);
    for pair in bytes.split(|b| *b == b'&') {
        if pair.is_empty() {
            continue;
        }
        let (name, value) = match pair.iter().position(|b| *b == b'=') {
            Some(i) => (&pair[..i], &pair[i + 1..]),
            None => (pair, &[][..]),
        };
        let decode = |c| decode_component(c).ok_or(FormError::NotUtf8);
        out.push((decode(name)?, decode(value)?));
    }
    Ok(out)
}

fn decode_component(s: &[u8]) -> Option<String> {
    fn hex_val(b: &u8) -> Option<u8> {
        (*b as char).to_digit(16).map(|d| d as u8)
    }
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        match s[i] {
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b'%' => match (
                s.get(i + 1).and_then(hex_val),
                s.get(i + 2).and_then(hex_val),
            ) {
                (Some(hi), Some(lo)) => {
                    out.push(hi << 4 | lo);
                    i += 3;
                }
                _ => {
                    out.push(b'%');
                    i += 1;
                }
            },
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

/// The distinct form parameters in canonical order (by name, then value, by code
/// point, as Twilio's validators sort), as indexes into `pairs`.
fn sorted_form(pairs: &[(String, String)]) -> Vec<usize> {
    count(|w| w.form_builds += 1);
    let mut order: Vec<usize> = (0..pairs.len()).collect();
    order.sort_unstable_by(|a, b| pairs[*a].cmp(&pairs[*b]));
    order.dedup_by(|a, b| pairs[*a] == pairs[*b]);
    order
}

fn scalar(v: &serde_json::Value) -> Option<String> {
    match v {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Number(n) => Some(n.to_string()),
        serde_json::Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// Everything the signed-content template and the event extraction may read.
pub(crate) struct Context<'a> {
    pub req: Request<'a>,
    pub header: ParsedHeader,
    /// The body is bound by a signed SHA-256 digest (`signature.body_sha256`), so
    /// `{form_sorted}` contributes nothing.
    pub digest_bound: bool,
    json: OnceCell<Option<serde_json::Value>>,
    /// The body's top-level object with its values borrowed raw, parsed once and
    /// shared by every pointer (event id and type read one scan, not four).
    top: OnceCell<Option<TopLevel<'a>>>,
    form: OnceCell<Result<Vec<(String, String)>, FormError>>,
    /// The form's canonical order, built once however many keys and URL forms
    /// are tried.
    form_order: OnceCell<Vec<usize>>,
    query: OnceCell<Vec<(String, String)>>,
}

impl<'a> Context<'a> {
    pub(crate) fn new(req: Request<'a>, header: ParsedHeader) -> Self {
        Context {
            req,
            header,
            digest_bound: false,
            json: OnceCell::new(),
            top: OnceCell::new(),
            form: OnceCell::new(),
            form_order: OnceCell::new(),
            query: OnceCell::new(),
        }
    }

    fn json(&self) -> Option<&serde_json::Value> {
        self.json
            .get_or_init(|| serde_json::from_slice(self.req.body).ok())
            .as_ref()
    }

    fn top(&self) -> Option<&TopLevel<'a>> {
        self.top
            .get_or_init(|| serde_json::from_slice(self.req.body).ok())
            .as_ref()
    }

    fn parsed_form(&self) -> Result<&[(String, String)], FormError> {
        match self.form.get_or_init(|| parse_form(self.req.body)) {
            Ok(pairs) => Ok(pairs),
            Err(e) => Err(*e),
        }
    }

    fn form(&self) -> Option<&[(String, String)]> {
        self.parsed_form().ok()
    }

    /// The distinct form parameters in canonical order.
    fn sorted_form(&self) -> Result<impl Iterator<Item = (&str, &str)>, VerifyError> {
        let pairs = self.parsed_form().map_err(|e| match e {
            FormError::TooManyParameters => VerifyError::MalformedForm,
            FormError::NotUtf8 => VerifyError::MissingSignedValue,
        })?;
        let order = self.form_order.get_or_init(|| sorted_form(pairs));
        Ok(order
            .iter()
            .map(move |i| (pairs[*i].0.as_str(), pairs[*i].1.as_str())))
    }

    fn query(&self) -> &[(String, String)] {
        self.query.get_or_init(|| {
            self.req
                .path
                .split_once('?')
                .and_then(|(_, q)| parse_form(q.as_bytes()).ok())
                .unwrap_or_default()
        })
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
            ValueSource::Json(ptr) => match self.top() {
                Some(top) if !ptr.is_empty() => top_pointer_text(top, ptr),
                _ => json_pointer_text(self.req.body, ptr),
            },
            ValueSource::Form { field, pointer } => {
                let value = self.form()?.iter().find(|(n, _)| n == field)?.1.as_str();
                match pointer {
                    None => Some(value.to_string()),
                    Some(ptr) => scalar(
                        serde_json::from_str::<serde_json::Value>(value)
                            .ok()?
                            .pointer(ptr)?,
                    ),
                }
            }
            ValueSource::Query(name) => self
                .query()
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.clone()),
        }
    }

    /// The value a template builds, when every value it needs is present.
    fn template(&self, t: &ValueTemplate) -> Option<String> {
        let mut out = String::new();
        for part in &t.parts {
            match part {
                Part::Literal(l) => out.push_str(l),
                Part::Value(src) => {
                    let v = self.value(src)?;
                    if v.is_empty() {
                        return None;
                    }
                    out.push_str(&v);
                }
            }
        }
        Some(out)
    }
}

/// Feed the signed content into `sink`, piece by piece (the body is never copied).
pub(crate) fn signed_content(
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
                let v = ctx.value(src).ok_or(VerifyError::MissingSignedValue)?;
                sink(v.as_bytes())
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
        m: &M,
        spec: &Spec,
        ctx: &Context<'_>,
        timestamp: Option<&str>,
        url: Option<&str>,
    ) -> Result<Vec<u8>, VerifyError> {
        let mut m = m.clone();
        let mut n = 0u64;
        signed_content(spec, ctx, timestamp, url, |b| {
            n += b.len() as u64;
            m.update(b)
        })?;
        count(|w| w.bytes_hashed += n);
        Ok(m.finalize().into_bytes().to_vec())
    }
    match key {
        Key::Sha256(k) => run(k, spec, ctx, timestamp, url),
        Key::Sha1(k) => run(k, spec, ctx, timestamp, url),
        Key::Sha512(k) => run(k, spec, ctx, timestamp, url),
        Key::Token(digest) => Ok(digest.to_vec()),
        Key::Ed25519(_) | Key::EcdsaP256(_) => Ok(Vec::new()),
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
struct PublicMessage {
    msg: Vec<u8>,
    sha256: Option<[u8; 32]>,
}

/// Whether `sig` is a valid signature of the message under the public key.
fn verify_public(key: &Key, message: &PublicMessage, sig: &[u8]) -> bool {
    count(|w| w.signatures_checked += 1);
    match key {
        Key::Ed25519(vk) => {
            count(|w| w.bytes_hashed += message.msg.len() as u64);
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

/// A request whose signature holds. Gives access to the event metadata.
pub struct Verified<'a> {
    ctx: Context<'a>,
    spec: &'a Spec,
    /// The key that verified the request (a Zoom handshake answers with it).
    key: Option<&'a Key>,
    /// The signed timestamp, in unix seconds, when the provider signs one.
    pub timestamp: Option<i64>,
}

/// What a handshake request must be answered with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HandshakeReply {
    /// Answer 200 with this text (`text/plain`).
    Text(String),
    /// Answer 200 with this JSON document (`application/json`).
    Json(serde_json::Value),
}

impl Verified<'_> {
    /// The provider's event id (stable across its retries), if the request has one.
    /// Ids longer than [`MAX_EVENT_ID_LEN`] are replaced by their SHA-256.
    pub fn event_id(&self) -> Option<String> {
        let id = self
            .spec
            .event_id
            .iter()
            .find_map(|t| self.ctx.template(t))?;
        if id.len() > MAX_EVENT_ID_LEN {
            Some(format!("sha256:{}", hex::encode(sha2::Sha256::digest(id))))
        } else {
            Some(id)
        }
    }

    /// The event type, if the request names one.
    pub fn event_type(&self) -> Option<String> {
        let t = self
            .spec
            .event_type
            .iter()
            .find_map(|t| self.ctx.template(t))?;
        (t.len() <= MAX_EVENT_ID_LEN).then_some(t)
    }

    /// What dedupes a request by its content: `body-sha256:<hex>` of the raw body or,
    /// when the provider signs decoded form parameters rather than the bytes (Twilio),
    /// `form-sha256:<hex>` of those parameters in canonical order, so that a captured
    /// request whose parameters were reordered or re-encoded is still a duplicate.
    ///
    /// A spec whose signature does not cover the body may name the part that
    /// identifies the event (`event.digest`, Mailgun's `json:/event-data`): the digest
    /// is then `part-sha256:<hex>` of that part as written, so that a redelivery whose
    /// signature block was signed afresh is still a duplicate, and a forged event
    /// under a genuine signature block is not.
    pub fn content_digest(&self) -> String {
        if let Some(ptr) = &self.spec.event_digest
            && let Ok(root) =
                serde_json::from_slice::<&serde_json::value::RawValue>(self.ctx.req.body)
            && let Some(part) = raw_pointer(root, ptr)
        {
            return format!("part-sha256:{}", body_digest(part.get().as_bytes()));
        }
        let signs_form = self.spec.content.contains(&Segment::FormSorted)
            && !self.spec.content.contains(&Segment::Body)
            && !self.ctx.digest_bound;
        if signs_form && let Ok(params) = self.ctx.sorted_form() {
            let mut h = sha2::Sha256::new();
            for (name, value) in params {
                for part in [name, value] {
                    h.update((part.len() as u64).to_be_bytes());
                    h.update(part.as_bytes());
                }
            }
            return format!("form-sha256:{}", hex::encode(h.finalize()));
        }
        format!("body-sha256:{}", body_digest(self.ctx.req.body))
    }

    /// The answer to a provider handshake, when this request is one.
    pub fn handshake(&self) -> Option<HandshakeReply> {
        let kind = self.spec.handshake?;
        // Cheap borrowed lookups decide whether this is a handshake at all; ordinary
        // events never build a JSON tree here.
        let body = self.ctx.req.body;
        match kind {
            Handshake::SlackUrlVerification => {
                if json_pointer_text(body, "/type")? != "url_verification" {
                    return None;
                }
                Some(HandshakeReply::Text(json_pointer_text(body, "/challenge")?))
            }
            Handshake::ZoomUrlValidation => {
                if json_pointer_text(body, "/event")? != "endpoint.url_validation" {
                    return None;
                }
                let json = self.ctx.json()?;
                let plain = json.pointer("/payload/plainToken")?.as_str()?;
                if plain.is_empty() || plain.len() > MAX_PLAIN_TOKEN_LEN {
                    return None;
                }
                let encrypted = hex::encode(self.key?.mac(plain.as_bytes())?);
                Some(HandshakeReply::Json(serde_json::json!({
                    "plainToken": plain,
                    "encryptedToken": encrypted,
                })))
            }
            Handshake::DiscordPing => {
                if json_pointer_text(body, "/type")? != "1" {
                    return None;
                }
                // Interactions PING is type 1; Discord's webhook events also use type
                // 1, for events, and always carry an `event` object.
                let json = self.ctx.json()?;
                if json.get("type")?.as_u64()? != 1 || json.get("event").is_some() {
                    return None;
                }
                Some(HandshakeReply::Json(serde_json::json!({"type": 1})))
            }
        }
    }
}

/// A JSON object's members, their values borrowed raw from the body.
type TopLevel<'a> =
    std::collections::HashMap<std::borrow::Cow<'a, str>, &'a serde_json::value::RawValue>;

/// The text at a JSON pointer in `body` (strings unescaped; numbers and booleans as
/// written), found without building the document: each level is read as a map of raw,
/// borrowed values, so a large body is scanned, not copied. This is the hot path of
/// event id and type extraction.
pub(crate) fn json_pointer_text(body: &[u8], ptr: &str) -> Option<String> {
    let root: &serde_json::value::RawValue = serde_json::from_slice(body).ok()?;
    raw_pointer_text(root, ptr)
}

/// [`json_pointer_text`] with the top level already parsed (a non-empty pointer into
/// an object body): the first token is a lookup.
fn top_pointer_text(top: &TopLevel<'_>, ptr: &str) -> Option<String> {
    let tokens = ptr.strip_prefix('/')?;
    // `rest` keeps its leading slash: it is a pointer into the first token's value.
    let (first, rest) = match tokens.find('/') {
        Some(i) => tokens.split_at(i),
        None => (tokens, ""),
    };
    let value = top.get(unescape_token(first).as_str())?;
    raw_pointer_text(value, rest)
}

fn unescape_token(token: &str) -> String {
    token.replace("~1", "/").replace("~0", "~")
}

/// Follow `ptr` from `current`, one level at a time.
fn raw_pointer_text(current: &serde_json::value::RawValue, ptr: &str) -> Option<String> {
    let text = raw_pointer(current, ptr)?.get();
    match text.as_bytes().first()? {
        b'"' => serde_json::from_str::<String>(text).ok(),
        b'-' | b'0'..=b'9' | b't' | b'f' => Some(text.to_string()),
        _ => None,
    }
}

/// The value at `ptr` under `current`, as written (any JSON type).
fn raw_pointer<'b>(
    mut current: &'b serde_json::value::RawValue,
    ptr: &str,
) -> Option<&'b serde_json::value::RawValue> {
    use serde_json::value::RawValue;
    use std::borrow::Cow;
    use std::collections::HashMap;
    if !ptr.is_empty() {
        for token in ptr.strip_prefix('/')?.split('/') {
            let token = unescape_token(token);
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
    }
    Some(current)
}

/// Verify a request at `now` (unix seconds): signature and timestamp window.
pub fn verify<'a>(
    spec: &'a Spec,
    keys: &'a [Key],
    req: Request<'a>,
    now: i64,
) -> Result<Verified<'a>, VerifyError> {
    verify_inner(spec, keys, req, Some(now))
}

/// Verify the signature only, ignoring the timestamp window (for test vectors whose
/// time is long past, and for tools that re-check stored requests).
pub fn verify_ignoring_timestamp<'a>(
    spec: &'a Spec,
    keys: &'a [Key],
    req: Request<'a>,
) -> Result<Verified<'a>, VerifyError> {
    verify_inner(spec, keys, req, None)
}

/// The URL forms to try: none when the spec does not sign `{url}`.
fn urls(spec: &Spec, url: Option<&str>) -> Result<Vec<Option<String>>, VerifyError> {
    if !spec.signs_url() {
        return Ok(vec![None]);
    }
    let url = url.ok_or(VerifyError::MissingSignedValue)?;
    Ok(match spec.url_port {
        UrlPort::AsIs => vec![Some(url.to_string())],
        UrlPort::Either => port_variants(url).into_iter().map(Some).collect(),
    })
}

fn verify_inner<'a>(
    spec: &'a Spec,
    keys: &'a [Key],
    req: Request<'a>,
    now: Option<i64>,
) -> Result<Verified<'a>, VerifyError> {
    let mut ctx = Context::new(req, ParsedHeader::default());
    ctx.header = parse_signature(spec, &ctx)?;

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

    if let Some(src) = &spec.body_sha256
        && let Some(claimed) = ctx.value(src)
    {
        let actual = sha2::Sha256::digest(req.body);
        let same = hex::decode(claimed.trim())
            .is_ok_and(|c| bool::from(c.as_slice().ct_eq(actual.as_slice())));
        if !same {
            return Err(VerifyError::BodyDigestMismatch);
        }
        ctx.digest_bound = true;
    }

    let urls = urls(spec, req.url)?;
    let public = keys.iter().any(Key::is_public);
    // A public-key signature is one value: more than one offered is malformed, and
    // each key checks exactly one signature per URL form.
    if public && ctx.header.signatures.len() > 1 {
        return Err(VerifyError::MalformedSignature);
    }
    let messages = if public {
        let digest = keys.iter().any(|k| matches!(k, Key::EcdsaP256(_)));
        urls.iter()
            .map(|u| {
                let msg = message(spec, &ctx, ts_text.as_deref(), u.as_deref())?;
                let sha256 = digest.then(|| {
                    count(|w| w.bytes_hashed += msg.len() as u64);
                    sha2::Sha256::digest(&msg).into()
                });
                Ok(PublicMessage { msg, sha256 })
            })
            .collect::<Result<Vec<_>, VerifyError>>()?
    } else {
        Vec::new()
    };

    let mut matched = subtle::Choice::from(0u8);
    let mut which = 0u32;
    for (i, key) in keys.iter().enumerate() {
        let index = u32::try_from(i).unwrap_or(u32::MAX);
        for (u, url) in urls.iter().enumerate() {
            if key.is_public() {
                for offered in &ctx.header.signatures {
                    let ok =
                        subtle::Choice::from(u8::from(verify_public(key, &messages[u], offered)));
                    matched |= ok;
                    which.conditional_assign(&index, ok);
                }
                continue;
            }
            let expected = compute(spec, key, &ctx, ts_text.as_deref(), url.as_deref())?;
            count(|w| w.signatures_checked += ctx.header.signatures.len() as u32);
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
                let ok = expected.as_slice().ct_eq(offered);
                matched |= ok;
                which.conditional_assign(&index, ok);
            }
        }
    }
    if !bool::from(matched) {
        return Err(VerifyError::Mismatch);
    }
    Ok(Verified {
        ctx,
        spec,
        key: keys.get(which as usize),
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
    use super::*;

    #[test]
    fn port_variants_follow_twilio_validators() {
        assert_eq!(
            port_variants("https://mycompany.com/myapp.php?foo=1&bar=2"),
            [
                "https://mycompany.com/myapp.php?foo=1&bar=2",
                "https://mycompany.com:443/myapp.php?foo=1&bar=2"
            ]
        );
        assert_eq!(
            port_variants("http://mycompany.com:1234/myapp.php"),
            [
                "http://mycompany.com/myapp.php",
                "http://mycompany.com:1234/myapp.php"
            ]
        );
        assert_eq!(
            port_variants("https://u:p@[::1]:8443?x=1"),
            ["https://u:p@[::1]?x=1", "https://u:p@[::1]:8443?x=1"]
        );
        assert_eq!(
            port_variants("https://[::1]/"),
            ["https://[::1]/", "https://[::1]:443/"]
        );
        assert_eq!(port_variants("not a url"), ["not a url"]);
    }

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
        // The shared top-level parse answers every pointer the same way.
        let top: TopLevel<'_> = serde_json::from_slice(body).expect("object");
        for ptr in [
            "/id",
            "/n",
            "/ok",
            "/event/type",
            "/event/a~1b",
            "/event/x/1/y",
            "/esc",
            "/nul",
            "/event",
            "/missing",
            "/event/x/9",
            "/id/deeper",
        ] {
            assert_eq!(
                top_pointer_text(&top, ptr),
                json_pointer_text(body, ptr),
                "{ptr}"
            );
        }
        assert_eq!(json_pointer_text(body, "/event"), None);
        assert_eq!(json_pointer_text(body, "/missing"), None);
        assert_eq!(json_pointer_text(b"not json", "/id"), None);
        assert_eq!(json_pointer_text(b"[1,2]", "/5"), None);
    }

    #[test]
    fn forms_decode_strictly() {
        assert_eq!(
            parse_form(b"a=1&b=x+y%2B%zz&&c&a=2").unwrap(),
            [
                ("a".to_string(), "1".to_string()),
                ("b".into(), "x y+%zz".into()),
                ("c".into(), String::new()),
                ("a".into(), "2".into()),
            ]
        );
        assert_eq!(parse_form(b"a=%FF"), Err(FormError::NotUtf8));
        assert_eq!(parse_form(b"").unwrap(), []);
        let at_cap = vec!["a=1"; MAX_FORM_PARAMS].join("&");
        assert_eq!(
            parse_form(at_cap.as_bytes()).unwrap().len(),
            MAX_FORM_PARAMS
        );
        let over = format!("{at_cap}&b");
        assert_eq!(
            parse_form(over.as_bytes()),
            Err(FormError::TooManyParameters)
        );
    }
}
