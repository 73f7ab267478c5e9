//! The provider spec: how one provider signs its webhooks, as data.
//!
//! A spec is a TOML file in `providers/` (compiled into the binary) or in
//! `providers_dir`. It is parsed into [`RawSpec`] (serde, unknown keys rejected) and
//! compiled into [`Spec`], where every template and value source is already parsed,
//! so that the verification engine never interprets strings on the hot path.
//!
//! The format covers the whole catalogue of schemes, not only the first providers:
//!
//! * `signature.algorithm`: `hmac-sha256`, `hmac-sha1`, `hmac-sha512`, `token` (the
//!   header carries the secret itself, compared in constant time), `ed25519` or
//!   `ecdsa-p256-sha256`. A list of HMAC algorithms (`["hmac-sha1", "hmac-sha256"]`)
//!   accepts a signature made with any of them under the same secrets (Twilio's Auth
//!   Token and SharedKey schemes); the first one is what `hookgate sign` uses.
//! * Public-key algorithms take the source's secret as the provider's **public key**,
//!   decoded with `secret_encoding`: `ed25519` wants the 32-byte key (Discord: hex);
//!   `ecdsa-p256-sha256` wants a DER SubjectPublicKeyInfo or a SEC1 point (SendGrid:
//!   base64 DER), and reads the signature as DER (or as the 64-byte `r||s` form).
//! * Where the signature is: `signature.header = "Name"`, or `signature.from = <value
//!   source>` for a signature carried elsewhere (Mailgun: `json:/signature/signature`).
//!   Exactly one of the two is set.
//! * `signature.format`: `plain` (the whole value, after an optional `prefix`, is one
//!   signature) or `kv` (a list split by `pair_separator` whose items are
//!   `key<kv_separator>value`; the keys in `signature_keys` carry signatures, any other
//!   key is available to templates as `{signature:key}`). Stripe is `kv` with `,`/`=`,
//!   Paddle `kv` with `;`/`=`, Standard Webhooks `kv` with ` `/`,` and
//!   `signature_keys = ["v1"]`.
//! * `signature.encoding`: `hex`, `base64` or `raw`.
//! * `signature.secret_encoding`: `utf8` (the secret's bytes), `whsec-base64` (strip a
//!   `whsec_` prefix, then base64-decode), `base64` or `hex`.
//! * `signature.content`: the signed-content template. Placeholders: `{body}` (the raw
//!   bytes), `{timestamp}` (as received), `{method}`, `{path}` (path and query as
//!   received), `{url}`, `{form_sorted}`, and any value source (`{header:Name}`,
//!   `{signature:key}`, `{json:/pointer}`, `{form:field}`, `{query:name}`). Everything
//!   else is literal; `{{` and `}}` escape braces. A template must sign the body or a
//!   part of it.
//! * `{url}` is the URL the provider calls: the source's `public_url` (a full URL
//!   without query, e.g. `https://hooks.example.com/ingest/twilio`) followed by the
//!   query string of the received request, if it has one. The received path is not
//!   used, so a reverse proxy may rewrite it. A source whose spec signs `{url}` must
//!   set `public_url`. `signature.url_port = "either"` accepts a signature computed
//!   over the URL with its port (the configured one, or the scheme's default) or
//!   without any port, as Twilio's own validators do; the default `"as-is"` signs the
//!   URL exactly as configured.
//! * `{form_sorted}` is the form body (`application/x-www-form-urlencoded`, decoded,
//!   strictly UTF-8) as Twilio signs it: for each parameter name in sorted order, the
//!   name followed by the value, once per distinct value, values sorted.
//! * `signature.body_sha256 = <value source>`: when the request carries this value
//!   (Twilio: `query:bodySHA256` for JSON bodies), it must be the hex SHA-256 of the raw
//!   body, and `{form_sorted}` then contributes nothing: the sender signs the URL that
//!   carries the digest instead of form parameters.
//! * Value sources, used by templates, `timestamp.from`, `event.id`, `event.type` and
//!   `signature.from`: `header:Name`, `signature:key` (a non-signature item of a `kv`
//!   signature), `json:/pointer` (RFC 6901, into the JSON body), `form:field` (the first
//!   value of a form field; `form:field#/pointer` reads a JSON document held in the
//!   field, as Slack's interactivity `payload`), and `query:name` (a parameter of the
//!   received query string).
//! * `timestamp.from` is a value source; `timestamp.unit` is `seconds` or
//!   `milliseconds`; `timestamp.tolerance` is a duration applied in both directions.
//! * `event.id` and `event.type`: a value template or a list of them, tried in order;
//!   the first whose every value is present wins. A template is a value source
//!   (`json:/id`) or placeholders with literals (`{json:/type}.{json:/action}`). An
//!   event id counts as signed (and so dedupes on its own) only when every value in
//!   every alternative is covered by the signature.
//!   A spec that does not sign the whole body may set `event.digest = "json:/pointer"`,
//!   the part of the body that identifies the event: the dedupe key binds the event
//!   id to its digest (Mailgun: `json:/event-data`), else to the whole body's.
//! * A `timestamp.from` that the signature does not cover is refused: a replay
//!   window on an unsigned value is no window.
//! * `credential_headers = ["Name", …]`: received headers that carry a credential of
//!   the sender; with the signature header of a `token` scheme they are neither stored
//!   nor passed on unless a source names them in `pass_headers`.
//! * `handshake.kind`: a verified request that the provider sends to check the
//!   endpoint, answered instead of stored: `slack-url-verification` (echo the
//!   challenge), `zoom-url-validation` (JSON `plainToken` and its HMAC-SHA256 under the
//!   secret that verified the request, hex) and `discord-ping` (JSON `{"type":1}`).
//! * `[[vectors]]`: the provider's published test vectors, run by the test suite. A
//!   vector may set `url` (the URL the provider called) and `method`.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use serde::Deserialize;

/// A spec that cannot be compiled. Messages name the provider and the key.
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    #[error("provider {provider:?}: {source}")]
    Toml {
        provider: String,
        #[source]
        source: Box<toml::de::Error>,
    },
    #[error("provider {provider:?}: {key}: {problem}")]
    Invalid {
        provider: String,
        key: &'static str,
        problem: String,
    },
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSpec {
    pub name: String,
    #[serde(default)]
    pub summary: String,
    pub signature: RawSignature,
    #[serde(default)]
    pub timestamp: Option<RawTimestamp>,
    #[serde(default)]
    pub event: RawEvent,
    #[serde(default)]
    pub handshake: Option<RawHandshake>,
    /// Headers that carry a credential of the sender (besides the signature header of
    /// a `token` scheme, which always does): never stored nor passed on unless a
    /// source names them in `pass_headers`.
    #[serde(default)]
    pub credential_headers: Vec<String>,
    #[serde(default)]
    pub vectors: Vec<Vector>,
}

/// One string or a list of strings.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

impl OneOrMany {
    fn to_vec(&self) -> Vec<String> {
        match self {
            OneOrMany::One(s) => vec![s.clone()],
            OneOrMany::Many(v) => v.clone(),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSignature {
    pub algorithm: OneOrMany,
    #[serde(default)]
    pub header: Option<String>,
    #[serde(default)]
    pub from: Option<String>,
    #[serde(default = "default_format")]
    pub format: String,
    #[serde(default)]
    pub prefix: String,
    #[serde(default = "default_pair_separator")]
    pub pair_separator: String,
    #[serde(default = "default_kv_separator")]
    pub kv_separator: String,
    #[serde(default)]
    pub signature_keys: Vec<String>,
    #[serde(default = "default_encoding")]
    pub encoding: String,
    #[serde(default = "default_secret_encoding")]
    pub secret_encoding: String,
    #[serde(default = "default_content")]
    pub content: String,
    #[serde(default = "default_url_port")]
    pub url_port: String,
    #[serde(default)]
    pub body_sha256: Option<String>,
}

fn default_format() -> String {
    "plain".into()
}
fn default_pair_separator() -> String {
    ",".into()
}
fn default_kv_separator() -> String {
    "=".into()
}
fn default_encoding() -> String {
    "hex".into()
}
fn default_secret_encoding() -> String {
    "utf8".into()
}
fn default_content() -> String {
    "{body}".into()
}
fn default_url_port() -> String {
    "as-is".into()
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTimestamp {
    pub from: String,
    #[serde(default = "default_unit")]
    pub unit: String,
    pub tolerance: String,
}

fn default_unit() -> String {
    "seconds".into()
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawEvent {
    #[serde(default)]
    pub id: Option<OneOrMany>,
    #[serde(default, rename = "type")]
    pub kind: Option<OneOrMany>,
    /// For a spec that does not sign the whole body: the JSON part that identifies
    /// the event, digested into the dedupe key (`json:/pointer`).
    #[serde(default)]
    pub digest: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawHandshake {
    pub kind: String,
}

/// A published test vector: a request and the verdict the provider's own SDK gives.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Vector {
    pub description: String,
    pub secret: String,
    pub body: String,
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// The URL the provider called (for specs that sign `{url}`).
    #[serde(default)]
    pub url: Option<String>,
    /// The request method; `POST` when not given.
    #[serde(default)]
    pub method: Option<String>,
    /// The clock (unix seconds) to verify at; the vector's own time when it signs one.
    #[serde(default)]
    pub now: Option<i64>,
    /// `valid` or `invalid`.
    pub expect: String,
    /// Whether `hookgate sign` must reproduce the signature byte for byte.
    #[serde(default)]
    pub reproduce: bool,
}

// ---------------------------------------------------------------------------
// Compiled form.
// ---------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algorithm {
    HmacSha256,
    HmacSha1,
    HmacSha512,
    Token,
    Ed25519,
    EcdsaP256Sha256,
}

impl Algorithm {
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::HmacSha256 => "hmac-sha256",
            Algorithm::HmacSha1 => "hmac-sha1",
            Algorithm::HmacSha512 => "hmac-sha512",
            Algorithm::Token => "token",
            Algorithm::Ed25519 => "ed25519",
            Algorithm::EcdsaP256Sha256 => "ecdsa-p256-sha256",
        }
    }

    fn parse(s: &str) -> Option<Algorithm> {
        Some(match s {
            "hmac-sha256" => Algorithm::HmacSha256,
            "hmac-sha1" => Algorithm::HmacSha1,
            "hmac-sha512" => Algorithm::HmacSha512,
            "token" => Algorithm::Token,
            "ed25519" => Algorithm::Ed25519,
            "ecdsa-p256-sha256" => Algorithm::EcdsaP256Sha256,
            _ => return None,
        })
    }

    pub fn is_hmac(self) -> bool {
        matches!(
            self,
            Algorithm::HmacSha256 | Algorithm::HmacSha1 | Algorithm::HmacSha512
        )
    }

    /// The source's secret is the provider's public key; nothing here can sign.
    pub fn is_public_key(self) -> bool {
        matches!(self, Algorithm::Ed25519 | Algorithm::EcdsaP256Sha256)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    Hex,
    Base64,
    Raw,
}

impl Encoding {
    pub fn name(self) -> &'static str {
        match self {
            Encoding::Hex => "hex",
            Encoding::Base64 => "base64",
            Encoding::Raw => "raw",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SecretEncoding {
    Utf8,
    WhsecBase64,
    Base64,
    Hex,
}

impl SecretEncoding {
    pub fn name(self) -> &'static str {
        match self {
            SecretEncoding::Utf8 => "utf8",
            SecretEncoding::WhsecBase64 => "whsec-base64",
            SecretEncoding::Base64 => "base64",
            SecretEncoding::Hex => "hex",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeaderFormat {
    /// The value after `prefix` is one signature.
    Plain { prefix: String },
    /// `k=v` items; `signature_keys` carry signatures.
    Kv {
        pair_separator: String,
        kv_separator: String,
        signature_keys: Vec<String>,
    },
}

/// Where a value comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ValueSource {
    Header(http::HeaderName),
    Signature(String),
    Json(String),
    /// The first value of a form field; with a pointer, the field holds a JSON
    /// document and the pointer selects inside it.
    Form {
        field: String,
        pointer: Option<String>,
    },
    Query(String),
}

impl fmt::Display for ValueSource {
    /// The spec syntax, so that what `hookgate providers` prints can be pasted back.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ValueSource::Header(h) => write!(f, "header:{h}"),
            ValueSource::Signature(k) => write!(f, "signature:{k}"),
            ValueSource::Json(p) => write!(f, "json:{p}"),
            ValueSource::Form {
                field,
                pointer: None,
            } => write!(f, "form:{field}"),
            ValueSource::Form {
                field,
                pointer: Some(p),
            } => write!(f, "form:{field}#{p}"),
            ValueSource::Query(n) => write!(f, "query:{n}"),
        }
    }
}

/// One piece of a signed-content template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Segment {
    Literal(Vec<u8>),
    Body,
    Timestamp,
    Method,
    Path,
    Url,
    FormSorted,
    Value(ValueSource),
}

/// How `{url}` treats the port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UrlPort {
    /// The URL exactly as configured.
    AsIs,
    /// With its port (explicit, or the scheme's default) or without any port.
    Either,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeUnit {
    Seconds,
    Milliseconds,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimestampRule {
    pub from: ValueSource,
    pub unit: TimeUnit,
    pub tolerance: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handshake {
    /// Slack Events API: `{"type":"url_verification","challenge":…}` is answered with
    /// the challenge.
    SlackUrlVerification,
    /// Zoom: `{"event":"endpoint.url_validation","payload":{"plainToken":p}}` is
    /// answered with `{"plainToken":p,"encryptedToken":hex(HMAC-SHA256(secret,p))}`.
    ZoomUrlValidation,
    /// Discord interactions: a PING (`{"type":1}`) is answered with `{"type":1}`.
    DiscordPing,
}

impl Handshake {
    pub fn name(self) -> &'static str {
        match self {
            Handshake::SlackUrlVerification => "slack-url-verification",
            Handshake::ZoomUrlValidation => "zoom-url-validation",
            Handshake::DiscordPing => "discord-ping",
        }
    }
}

/// One part of an event id or type template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Part {
    Literal(String),
    Value(ValueSource),
}

/// A template that builds a value (an event id or type) from value sources.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValueTemplate {
    pub parts: Vec<Part>,
    /// As written in the spec.
    pub text: String,
}

impl ValueTemplate {
    pub fn sources(&self) -> impl Iterator<Item = &ValueSource> {
        self.parts.iter().filter_map(|p| match p {
            Part::Value(v) => Some(v),
            Part::Literal(_) => None,
        })
    }

    /// The single value source this template is, if it is nothing more.
    pub fn single(&self) -> Option<&ValueSource> {
        match self.parts.as_slice() {
            [Part::Value(v)] => Some(v),
            _ => None,
        }
    }
}

/// A compiled provider spec.
#[derive(Debug, Clone)]
pub struct Spec {
    pub name: String,
    pub summary: String,
    /// Never empty; the first is the one `hookgate sign` uses.
    pub algorithms: Vec<Algorithm>,
    /// Where the signature is (a header for most providers).
    pub signature_from: ValueSource,
    pub format: HeaderFormat,
    pub encoding: Encoding,
    pub secret_encoding: SecretEncoding,
    pub content: Vec<Segment>,
    pub url_port: UrlPort,
    pub body_sha256: Option<ValueSource>,
    pub timestamp: Option<TimestampRule>,
    /// Alternatives, tried in order.
    pub event_id: Vec<ValueTemplate>,
    /// Alternatives, tried in order.
    pub event_type: Vec<ValueTemplate>,
    /// The JSON pointer of the body part the dedupe digest covers, for a spec that
    /// does not sign the whole body (`event.digest`).
    pub event_digest: Option<String>,
    pub handshake: Option<Handshake>,
    /// Received headers that carry a credential: the `token` scheme's signature
    /// header and the spec's `credential_headers`.
    pub credential_headers: Vec<http::HeaderName>,
    pub vectors: Vec<Vector>,
}

impl Spec {
    /// Parse and compile a spec from TOML text.
    pub fn from_toml(text: &str) -> Result<Spec, SpecError> {
        let value: toml::Table = toml::from_str(text).map_err(|source| SpecError::Toml {
            provider: "?".into(),
            source: Box::new(source),
        })?;
        Self::from_table(value)
    }

    /// Compile a spec from a TOML table (after any per-source overrides were merged).
    pub fn from_table(table: toml::Table) -> Result<Spec, SpecError> {
        let provider = table
            .get("name")
            .and_then(toml::Value::as_str)
            .unwrap_or("?")
            .to_string();
        let raw: RawSpec =
            toml::Value::Table(table)
                .try_into()
                .map_err(|source| SpecError::Toml {
                    provider: provider.clone(),
                    source: Box::new(source),
                })?;
        compile(raw)
    }

    /// The algorithm `hookgate sign` uses.
    pub fn algorithm(&self) -> Algorithm {
        self.algorithms[0]
    }

    /// The header that carries the signature, when one does.
    pub fn signature_header(&self) -> Option<&http::HeaderName> {
        match &self.signature_from {
            ValueSource::Header(h) => Some(h),
            _ => None,
        }
    }

    /// Whether the signed content includes `{url}` (the source needs `public_url`).
    pub fn signs_url(&self) -> bool {
        self.content.contains(&Segment::Url)
    }

    /// Whether `src` is covered by the signature: the signed content includes it, or
    /// includes what it is read from (the body for JSON and form values, the URL or
    /// path for query values, the timestamp for the timestamp's own source).
    pub fn is_signed(&self, src: &ValueSource) -> bool {
        let has = |seg: &Segment| self.content.contains(seg);
        if has(&Segment::Value(src.clone())) {
            return true;
        }
        if has(&Segment::Timestamp) && self.timestamp.as_ref().is_some_and(|t| &t.from == src) {
            return true;
        }
        match src {
            ValueSource::Json(_) => has(&Segment::Body),
            ValueSource::Form { .. } => has(&Segment::Body) || has(&Segment::FormSorted),
            ValueSource::Query(_) => has(&Segment::Url) || has(&Segment::Path),
            ValueSource::Header(_) | ValueSource::Signature(_) => false,
        }
    }

    /// Whether the event id is covered by the signature, whichever alternative
    /// yields it. An unsigned id could be set freely by anyone replaying a captured
    /// request.
    pub fn event_id_is_signed(&self) -> bool {
        !self.event_id.is_empty()
            && self
                .event_id
                .iter()
                .all(|t| t.sources().all(|s| self.is_signed(s)))
    }

    /// Whether the signature covers the whole body (`{body}`, or the decoded form as
    /// `{form_sorted}`). When it does not (Mailgun signs only a timestamp and a
    /// token), the body could have been replaced by anyone holding one genuine
    /// signature block.
    pub fn signs_whole_body(&self) -> bool {
        // A token scheme compares a shared secret and signs nothing.
        !self.algorithms.contains(&Algorithm::Token)
            && (self.content.contains(&Segment::Body)
                || self.content.contains(&Segment::FormSorted))
    }

    /// Whether the signed content needs a timestamp.
    pub fn signs_timestamp(&self) -> bool {
        self.content.contains(&Segment::Timestamp)
    }

    /// The signed-content template, written back in spec syntax.
    pub fn content_text(&self) -> String {
        let mut out = String::new();
        for seg in &self.content {
            match seg {
                Segment::Literal(b) => out.push_str(
                    &String::from_utf8_lossy(b)
                        .replace('{', "{{")
                        .replace('}', "}}"),
                ),
                Segment::Body => out.push_str("{body}"),
                Segment::Timestamp => out.push_str("{timestamp}"),
                Segment::Method => out.push_str("{method}"),
                Segment::Path => out.push_str("{path}"),
                Segment::Url => out.push_str("{url}"),
                Segment::FormSorted => out.push_str("{form_sorted}"),
                Segment::Value(v) => out.push_str(&format!("{{{v}}}")),
            }
        }
        out
    }
}

fn compile(raw: RawSpec) -> Result<Spec, SpecError> {
    let provider = raw.name.clone();
    let invalid = |key: &'static str, problem: String| SpecError::Invalid {
        provider: provider.clone(),
        key,
        problem,
    };
    let s = &raw.signature;
    let names = s.algorithm.to_vec();
    let mut algorithms = Vec::with_capacity(names.len());
    for name in &names {
        let a = Algorithm::parse(name).ok_or_else(|| {
            invalid(
                "signature.algorithm",
                format!(
                    "unknown algorithm {name:?}; use hmac-sha256, hmac-sha1, hmac-sha512, token, ed25519 or ecdsa-p256-sha256"
                ),
            )
        })?;
        if !algorithms.contains(&a) {
            algorithms.push(a);
        }
    }
    if algorithms.is_empty() {
        return Err(invalid(
            "signature.algorithm",
            "the list of algorithms is empty".into(),
        ));
    }
    if algorithms.len() > 1 && !algorithms.iter().all(|a| a.is_hmac()) {
        return Err(invalid(
            "signature.algorithm",
            "only HMAC algorithms can be listed together".into(),
        ));
    }
    let signature_from = match (&s.header, &s.from) {
        (Some(h), None) => ValueSource::Header(
            http::HeaderName::from_bytes(h.as_bytes())
                .map_err(|_| invalid("signature.header", format!("{h:?} is not a header name")))?,
        ),
        (None, Some(f)) => match parse_source(f).map_err(|p| invalid("signature.from", p))? {
            ValueSource::Signature(_) => {
                return Err(invalid(
                    "signature.from",
                    "the signature cannot be read from itself".into(),
                ));
            }
            src => src,
        },
        (None, None) => {
            return Err(invalid(
                "signature.header",
                "set signature.header, or signature.from for a signature outside the headers"
                    .into(),
            ));
        }
        (Some(_), Some(_)) => {
            return Err(invalid(
                "signature.from",
                "set signature.header or signature.from, not both".into(),
            ));
        }
    };
    let format = match s.format.as_str() {
        "plain" => HeaderFormat::Plain {
            prefix: s.prefix.clone(),
        },
        "kv" => {
            if s.pair_separator.is_empty() || s.kv_separator.is_empty() {
                return Err(invalid(
                    "signature.pair_separator",
                    "separators must not be empty".into(),
                ));
            }
            if s.signature_keys.is_empty() {
                return Err(invalid(
                    "signature.signature_keys",
                    "a kv header needs at least one signature key".into(),
                ));
            }
            HeaderFormat::Kv {
                pair_separator: s.pair_separator.clone(),
                kv_separator: s.kv_separator.clone(),
                signature_keys: s.signature_keys.clone(),
            }
        }
        other => {
            return Err(invalid(
                "signature.format",
                format!("unknown format {other:?}; use plain or kv"),
            ));
        }
    };
    let encoding = match s.encoding.as_str() {
        "hex" => Encoding::Hex,
        "base64" => Encoding::Base64,
        "raw" => Encoding::Raw,
        other => {
            return Err(invalid(
                "signature.encoding",
                format!("unknown encoding {other:?}; use hex, base64 or raw"),
            ));
        }
    };
    let algorithm = algorithms[0];
    if algorithm == Algorithm::Token && encoding != Encoding::Raw {
        return Err(invalid(
            "signature.encoding",
            "the token algorithm compares the header with the secret; use encoding = \"raw\""
                .into(),
        ));
    }
    if algorithm != Algorithm::Token && encoding == Encoding::Raw {
        return Err(invalid(
            "signature.encoding",
            format!(
                "{} signatures are binary; use hex or base64",
                algorithm.name()
            ),
        ));
    }
    let secret_encoding = match s.secret_encoding.as_str() {
        "utf8" => SecretEncoding::Utf8,
        "whsec-base64" => SecretEncoding::WhsecBase64,
        "base64" => SecretEncoding::Base64,
        "hex" => SecretEncoding::Hex,
        other => {
            return Err(invalid(
                "signature.secret_encoding",
                format!("unknown secret encoding {other:?}; use utf8, whsec-base64, base64 or hex"),
            ));
        }
    };
    if algorithm.is_public_key() && secret_encoding == SecretEncoding::Utf8 {
        return Err(invalid(
            "signature.secret_encoding",
            format!("{} takes a public key; use hex or base64", algorithm.name()),
        ));
    }
    let content = parse_template(&s.content).map_err(|p| invalid("signature.content", p))?;
    if !matches!(signature_from, ValueSource::Header(_))
        && (content.contains(&Segment::Body) || content.contains(&Segment::FormSorted))
    {
        return Err(invalid(
            "signature.from",
            "a signature carried in the body cannot sign the whole body".into(),
        ));
    }
    let url_port = match s.url_port.as_str() {
        "as-is" => UrlPort::AsIs,
        "either" => UrlPort::Either,
        other => {
            return Err(invalid(
                "signature.url_port",
                format!("unknown url_port {other:?}; use as-is or either"),
            ));
        }
    };
    let body_sha256 = s
        .body_sha256
        .as_deref()
        .map(parse_source)
        .transpose()
        .map_err(|p| invalid("signature.body_sha256", p))?;
    if let Some(src) = &body_sha256 {
        // The digest stands in for the body only if the signature covers it.
        let covered = content.contains(&Segment::Value(src.clone()))
            || matches!(src, ValueSource::Query(_))
                && (content.contains(&Segment::Url) || content.contains(&Segment::Path));
        if !covered {
            return Err(invalid(
                "signature.body_sha256",
                format!("{src} must be covered by signature.content"),
            ));
        }
    }
    let timestamp = match &raw.timestamp {
        Some(t) => Some(TimestampRule {
            from: parse_source(&t.from).map_err(|p| invalid("timestamp.from", p))?,
            unit: match t.unit.as_str() {
                "seconds" => TimeUnit::Seconds,
                "milliseconds" => TimeUnit::Milliseconds,
                other => {
                    return Err(invalid(
                        "timestamp.unit",
                        format!("unknown unit {other:?}; use seconds or milliseconds"),
                    ));
                }
            },
            tolerance: humantime::parse_duration(&t.tolerance).map_err(|e| {
                invalid(
                    "timestamp.tolerance",
                    format!("invalid duration {:?}: {e}", t.tolerance),
                )
            })?,
        }),
        None => None,
    };
    if content.contains(&Segment::Timestamp) && timestamp.is_none() {
        return Err(invalid(
            "signature.content",
            "uses {timestamp} but the spec has no [timestamp] section".into(),
        ));
    }
    if let Some(t) = &timestamp {
        // A window on a value the signature does not cover is no window: a replayed
        // request would simply carry a fresh one.
        let covered = algorithm != Algorithm::Token
            && (content.contains(&Segment::Timestamp)
                || content.contains(&Segment::Value(t.from.clone()))
                || match &t.from {
                    ValueSource::Json(_) => content.contains(&Segment::Body),
                    ValueSource::Form { .. } => {
                        content.contains(&Segment::Body) || content.contains(&Segment::FormSorted)
                    }
                    ValueSource::Query(_) => {
                        content.contains(&Segment::Url) || content.contains(&Segment::Path)
                    }
                    ValueSource::Header(_) | ValueSource::Signature(_) => false,
                });
        if !covered {
            return Err(invalid(
                "timestamp.from",
                format!(
                    "{} is not covered by signature.content; sign {{timestamp}} (or what the timestamp is read from), or drop the [timestamp] section",
                    t.from
                ),
            ));
        }
    }
    let uses_signature_items = content
        .iter()
        .any(|seg| matches!(seg, Segment::Value(ValueSource::Signature(_))))
        || matches!(
            timestamp.as_ref().map(|t| &t.from),
            Some(ValueSource::Signature(_))
        );
    if uses_signature_items && !matches!(format, HeaderFormat::Kv { .. }) {
        return Err(invalid(
            "signature.content",
            "{signature:key} needs format = \"kv\"".into(),
        ));
    }
    let templates = |key: &'static str, v: &Option<OneOrMany>| {
        v.as_ref()
            .map(OneOrMany::to_vec)
            .unwrap_or_default()
            .iter()
            .map(|t| parse_value_template(t).map_err(|p| invalid(key, p)))
            .collect::<Result<Vec<_>, _>>()
    };
    let event_id = templates("event.id", &raw.event.id)?;
    let event_type = templates("event.type", &raw.event.kind)?;
    let event_digest = match raw.event.digest.as_deref().map(parse_source).transpose() {
        Err(p) => return Err(invalid("event.digest", p)),
        Ok(None) => None,
        Ok(Some(ValueSource::Json(ptr))) => Some(ptr),
        Ok(Some(other)) => {
            return Err(invalid(
                "event.digest",
                format!("{other} is not a JSON part of the body; use json:/pointer"),
            ));
        }
    };
    if event_digest.is_some()
        && (content.contains(&Segment::Body) || content.contains(&Segment::FormSorted))
    {
        return Err(invalid(
            "event.digest",
            "the signature covers the whole body, which is what dedupe digests; drop event.digest"
                .into(),
        ));
    }
    let handshake = match &raw.handshake {
        Some(h) => Some(match h.kind.as_str() {
            "slack-url-verification" => Handshake::SlackUrlVerification,
            "zoom-url-validation" => Handshake::ZoomUrlValidation,
            "discord-ping" => Handshake::DiscordPing,
            other => {
                return Err(invalid(
                    "handshake.kind",
                    format!(
                        "unknown handshake {other:?}; use slack-url-verification, zoom-url-validation or discord-ping"
                    ),
                ));
            }
        }),
        None => None,
    };
    if handshake == Some(Handshake::ZoomUrlValidation) && !algorithms.iter().any(|a| a.is_hmac()) {
        return Err(invalid(
            "handshake.kind",
            "zoom-url-validation answers with an HMAC of the secret; it needs an HMAC algorithm"
                .into(),
        ));
    }
    let mut credential_headers = Vec::new();
    if algorithm == Algorithm::Token
        && let ValueSource::Header(h) = &signature_from
    {
        credential_headers.push(h.clone());
    }
    for name in &raw.credential_headers {
        let h = http::HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
            invalid(
                "credential_headers",
                format!("{name:?} is not a header name"),
            )
        })?;
        if !credential_headers.contains(&h) {
            credential_headers.push(h);
        }
    }
    for v in &raw.vectors {
        if v.expect != "valid" && v.expect != "invalid" {
            return Err(invalid(
                "vectors.expect",
                format!("{:?}: use valid or invalid", v.description),
            ));
        }
    }
    Ok(Spec {
        name: raw.name,
        summary: raw.summary,
        algorithms,
        signature_from,
        format,
        encoding,
        secret_encoding,
        content,
        url_port,
        body_sha256,
        timestamp,
        event_id,
        event_type,
        event_digest,
        handshake,
        credential_headers,
        vectors: raw.vectors,
    })
}

const SOURCE_HINT: &str =
    "use header:Name, signature:key, json:/pointer, form:field[#/pointer] or query:name";

/// Parse a value source: `header:Name`, `signature:key`, `json:/pointer`,
/// `form:field`, `form:field#/pointer` or `query:name`.
pub fn parse_source(s: &str) -> Result<ValueSource, String> {
    let (kind, arg) = s
        .split_once(':')
        .ok_or_else(|| format!("{s:?}: {SOURCE_HINT}"))?;
    let pointer = |p: &str| {
        if p.is_empty() || p.starts_with('/') {
            Ok(p.to_string())
        } else {
            Err(format!(
                "{p:?} is not a JSON pointer; it must start with '/'"
            ))
        }
    };
    match kind {
        "header" => http::HeaderName::from_bytes(arg.as_bytes())
            .map(ValueSource::Header)
            .map_err(|_| format!("{arg:?} is not a header name")),
        "signature" if !arg.is_empty() => Ok(ValueSource::Signature(arg.to_string())),
        "json" => pointer(arg).map(ValueSource::Json),
        "form" => {
            let (field, ptr) = match arg.split_once('#') {
                Some((f, p)) => (f, Some(pointer(p)?)),
                None => (arg, None),
            };
            if field.is_empty() {
                return Err(format!("{s:?}: the form field name is empty"));
            }
            Ok(ValueSource::Form {
                field: field.to_string(),
                pointer: ptr,
            })
        }
        "query" if !arg.is_empty() => Ok(ValueSource::Query(arg.to_string())),
        _ => Err(format!("{s:?}: unknown source; {SOURCE_HINT}")),
    }
}

/// Parse an event id or type template: a bare value source, or literals with
/// `{source}` placeholders.
pub fn parse_value_template(t: &str) -> Result<ValueTemplate, String> {
    if !t.contains(['{', '}']) {
        return Ok(ValueTemplate {
            parts: vec![Part::Value(parse_source(t)?)],
            text: t.to_string(),
        });
    }
    let mut parts = Vec::new();
    let mut lit = String::new();
    let mut rest = t;
    while let Some(c) = rest.chars().next() {
        if rest.starts_with("{{") || rest.starts_with("}}") {
            lit.push(c);
            rest = &rest[2..];
        } else if c == '{' {
            let end = rest
                .find('}')
                .ok_or_else(|| format!("unclosed '{{' in {t:?}"))?;
            if !lit.is_empty() {
                parts.push(Part::Literal(std::mem::take(&mut lit)));
            }
            parts.push(Part::Value(
                parse_source(&rest[1..end]).map_err(|e| format!("in {t:?}: {e}"))?,
            ));
            rest = &rest[end + 1..];
        } else if c == '}' {
            return Err(format!("unmatched '}}' in {t:?} (write '}}}}')"));
        } else {
            lit.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    if !lit.is_empty() {
        parts.push(Part::Literal(lit));
    }
    if !parts.iter().any(|p| matches!(p, Part::Value(_))) {
        return Err(format!("{t:?} has no {{source}} placeholder"));
    }
    Ok(ValueTemplate {
        parts,
        text: t.to_string(),
    })
}

/// Parse a signed-content template into segments.
pub fn parse_template(t: &str) -> Result<Vec<Segment>, String> {
    let mut out = Vec::new();
    let mut lit = Vec::new();
    let bytes = t.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'{' if bytes.get(i + 1) == Some(&b'{') => {
                lit.push(b'{');
                i += 2;
            }
            b'}' if bytes.get(i + 1) == Some(&b'}') => {
                lit.push(b'}');
                i += 2;
            }
            b'{' => {
                let end = t[i..]
                    .find('}')
                    .ok_or_else(|| format!("unclosed '{{' in template {t:?}"))?;
                let name = &t[i + 1..i + end];
                if !lit.is_empty() {
                    out.push(Segment::Literal(std::mem::take(&mut lit)));
                }
                out.push(match name {
                    "body" => Segment::Body,
                    "timestamp" => Segment::Timestamp,
                    "method" => Segment::Method,
                    "path" => Segment::Path,
                    "url" => Segment::Url,
                    "form_sorted" => Segment::FormSorted,
                    other => Segment::Value(
                        parse_source(other)
                            .map_err(|e| format!("placeholder {{{other}}} in {t:?}: {e}"))?,
                    ),
                });
                i += end + 1;
            }
            b'}' => return Err(format!("unmatched '}}' in template {t:?} (write '}}}}')")),
            b => {
                lit.push(b);
                i += 1;
            }
        }
    }
    if !lit.is_empty() {
        out.push(Segment::Literal(lit));
    }
    let covers_body = out.iter().any(|s| {
        matches!(
            s,
            Segment::Body
                | Segment::FormSorted
                | Segment::Value(ValueSource::Json(_))
                | Segment::Value(ValueSource::Form { .. })
        )
    });
    if !covers_body {
        return Err(format!(
            "template {t:?} signs neither {{body}} nor a part of it; the request would be unprotected"
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn template_parses_placeholders_and_escapes() {
        let segs = parse_template("v0:{timestamp}:{body}").unwrap();
        assert_eq!(
            segs,
            vec![
                Segment::Literal(b"v0:".to_vec()),
                Segment::Timestamp,
                Segment::Literal(b":".to_vec()),
                Segment::Body
            ]
        );
        let segs = parse_template("{{x}}{header:webhook-id}.{body}").unwrap();
        assert_eq!(segs[0], Segment::Literal(b"{x}".to_vec()));
        assert_eq!(
            segs[1],
            Segment::Value(ValueSource::Header(http::HeaderName::from_static(
                "webhook-id"
            )))
        );
    }

    #[test]
    fn template_errors_are_clear() {
        assert!(parse_template("{body").unwrap_err().contains("unclosed"));
        assert!(
            parse_template("{nope}.{body}")
                .unwrap_err()
                .contains("placeholder {nope}")
        );
        assert!(
            parse_template("{foo:x}.{body}")
                .unwrap_err()
                .contains("unknown source")
        );
        assert!(
            parse_template("{timestamp}")
                .unwrap_err()
                .contains("unprotected")
        );
    }

    #[test]
    fn spec_errors_name_provider_and_key() {
        let err =
            Spec::from_toml("name = \"x\"\n[signature]\nalgorithm = \"md5\"\nheader = \"X-Sig\"\n")
                .unwrap_err()
                .to_string();
        assert!(
            err.contains("\"x\"") && err.contains("signature.algorithm"),
            "{err}"
        );
        let err = Spec::from_toml(
            "name = \"x\"\n[signature]\nalgorithm = \"hmac-sha256\"\nheader = \"X-Sig\"\ncontent = \"{timestamp}.{body}\"\n",
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("no [timestamp]"), "{err}");
    }
}
