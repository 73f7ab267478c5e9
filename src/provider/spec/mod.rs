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
//!   header carries the secret itself, compared in constant time), `ed25519`,
//!   `ecdsa-p256-sha256`, or the certificate schemes `rsa-sha1` and `rsa-sha256`
//!   (RSA PKCS#1 v1.5 under the key of a certificate the request names, see
//!   `[certificate]`; both may be listed together). A list of HMAC algorithms (`["hmac-sha1", "hmac-sha256"]`)
//!   accepts a signature made with any of them under the same secrets (Twilio's Auth
//!   Token and SharedKey schemes); the first one is what `hookgate sign` uses.
//! * Public-key algorithms take the source's secret as the provider's **public key**,
//!   decoded with `secret_encoding`: `ed25519` wants the 32-byte key (Discord: hex);
//!   `ecdsa-p256-sha256` wants a DER SubjectPublicKeyInfo or a SEC1 point (SendGrid:
//!   base64 DER), and reads the signature as DER (or as the 64-byte `r||s` form).
//! * Where the signature is: `signature.header = "Name"`, or `signature.from = <value
//!   source>` for a signature carried elsewhere (Mailgun: `json:/signature/signature`).
//!   Exactly one of the two is set. `signature.header` may list several headers (Box
//!   signs with its primary key in one and its secondary in another): a signature in
//!   any of them is accepted; `hookgate sign` writes the first.
//! * `signature.format`: `plain` (the whole value, after an optional `prefix`, is one
//!   signature) or `kv` (a list split by `pair_separator` whose items are
//!   `key<kv_separator>value`; the keys in `signature_keys` carry signatures, any other
//!   key is available to templates as `{signature:key}`). Stripe is `kv` with `,`/`=`,
//!   Paddle `kv` with `;`/`=`, Standard Webhooks `kv` with ` `/`,` and
//!   `signature_keys = ["v1"]`. `jws` (Netlify): the value is a compact JWS whose
//!   header must name the algorithm (`HS256` for `hmac-sha256`, `HS512`), whose
//!   payload's claims are `{signature:claim}` values, and whose `claims` table
//!   (`claims = { iss = "netlify" }`) lists claims that must hold exactly that
//!   value; it signs `content = "{jws}"` (the token's signing input), is written
//!   `encoding = "base64url"`, and needs `body_sha256 = "signature:<claim>"`, the
//!   claim that binds the body.
//! * `signature.encoding`: `hex`, `base64`, `base64url` (a JWS) or `raw`.
//! * `signature.secret_encoding`: `utf8` (the secret's bytes), `whsec-base64` (strip a
//!   `whsec_` prefix, then base64-decode), `base64` or `hex`.
//! * `signature.content`: the signed-content template. Placeholders: `{body}` (the raw
//!   bytes), `{timestamp}` (as received), `{method}`, `{path}` (path and query as
//!   received), `{url}`, `{form_sorted}`, and any value source (`{header:Name}`,
//!   `{signature:key}`, `{json:/pointer}`, `{form:field}`, `{query:name}`; written
//!   `{?json:/pointer}`, a value the request may lack, signed as nothing), and for
//!   certificate schemes `{secret}` (the source's secret: PayPal's webhook id),
//!   `{body_crc32}` (the body's CRC-32 as a decimal: a checksum, so the body does not
//!   count as signed) and `{lines:A,B?,C}` (for each named top-level field of the
//!   JSON body, `name\nvalue\n`; `B?` only when present: SNS's string to sign).
//!   Contentful's canonical request adds `{path_escaped}` (the received path, its
//!   query escaped twice) and `{header_list:Name}` (the headers header `Name` lists,
//!   with itself and the timestamp's, sorted, `name:value` joined by `;`). Everything
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
//! * `timestamp.from` is a value source; `timestamp.unit` is `seconds`,
//!   `milliseconds` or `rfc3339` (a date-time, signed as received: Twitch, Zendesk,
//!   Box); `timestamp.tolerance` is a duration applied in both directions.
//! * `event.id` and `event.type`: a value template or a list of them, tried in order;
//!   the first whose every value is present wins. A template is a value source
//!   (`json:/id`) or placeholders with literals (`{json:/type}.{json:/action}`). An
//!   event id counts as signed (and so dedupes on its own) only when every value in
//!   every alternative is covered by the signature. Likewise an event type and an
//!   object id are *signed* only when every value of every alternative is: which
//!   values a signature covers is computed from `signature.content` (a `header:`
//!   value only when the content names it, a `json:` or `form:` value when the body is
//!   signed, nothing under `token`), and `hookgate providers` says it per spec.
//!   A spec that does not sign the whole body may set `event.digest = "json:/pointer"`,
//!   the part of the body that identifies the event: the dedupe key binds the event
//!   id to its digest (Mailgun: `json:/event-data`), else to the whole body's.
//! * `event.object`: the id of the object the event is about, as `event.id` is
//!   written (Stripe `json:/data/object/id`): the ordering key of a route ordered
//!   `by = "provider"`.
//! * A `timestamp.from` that the signature does not cover is refused: a replay
//!   window on an unsigned value is no window.
//! * `credential_headers = ["Name", …]`: received headers that carry a credential of
//!   the sender; with the signature header of a `token` scheme they are neither stored
//!   nor passed on unless a source names them in `pass_headers`.
//! * `handshake.kind`: a verified request that the provider sends to check the
//!   endpoint, answered instead of stored: `slack-url-verification` (echo the
//!   challenge), `zoom-url-validation` (JSON `plainToken` and its HMAC-SHA256 under the
//!   secret that verified the request, hex), `discord-ping` (JSON `{"type":1}`) and
//!   `twitch-challenge` (a `webhook_callback_verification` message's `challenge`, as
//!   plain text). Three are `GET` requests: `meta-subscribe` (`hub.challenge`, when
//!   `hub.verify_token` is the source's `verify_token`), `okta-verification` (the
//!   `x-okta-verification-challenge` header, answered `{"verification": …}` once the
//!   request's credential verified) and `dropbox-challenge` (the `challenge`
//!   parameter, echoed as plain text: Dropbox sends nothing to verify it by).
//!   `graph-validation` answers Microsoft Graph's POST `?validationToken=…` without a
//!   body (the token, as plain text; Graph sends nothing to verify it by either).
//!   `sns-subscription` marks SNS's `SubscriptionConfirmation`: stored like any
//!   message, and confirmed first by the gateway when the source sets
//!   `confirm_subscriptions` (its `SubscribeURL` on the `[certificate]` hosts).
//!   `head-check` answers Trello's `HEAD` (and a `GET`) with an empty 200.
//! * `[jwk]` (an ES256 `jws` whose key the provider's API gives by `kid`, Plaid):
//!   `url`, a value template of the API's URL (`https://{json:/environment}.plaid.com/
//!   webhook_verification_key/get`), and `hosts`, where it may be (as for
//!   certificates). The source's secret is the API's credentials, `client_id:secret`,
//!   POSTed there with the `kid` (`provider::jwk`); the key is kept as a certificate is.
//! * `[certificate]` (certificate schemes only): `url`, the value source that names
//!   the certificate (`json:/SigningCertURL`, `header:PAYPAL-CERT-URL`); `hosts`, the
//!   hosts it may be on (`*` is one DNS label, the last two labels fixed; `https://`
//!   on the default port only); `path_prefix` / `path_suffix`; and `secret_matches`, a
//!   value that must equal one of the source's secrets (SNS's `TopicArn`). A spec
//!   must bind requests to the source, by `secret_matches` or by signing `{secret}`:
//!   the provider signs for everyone. See `provider::certificate` for the fetch.
//! * `[ranges]`: where the provider publishes the addresses it sends from, for
//!   sources with `allow_ips = "provider"`: `url` (`https://` only, fetched without
//!   following redirects, so the fetch is pinned to that host), `pointer` (the JSON
//!   pointer of the array of ranges) and, when the array holds objects, `field`
//!   (each one's member that holds the range). GitHub: `https://api.github.com/meta`,
//!   `/hooks`.
//! * `fetch_base`: tests only. Every fetch of the spec (ranges, certificates) goes to
//!   this origin instead of the provider's, with the same path (a certificate URL is
//!   still checked against `hosts` first); it must be a loopback `http://` origin
//!   (`http://127.0.0.1:PORT`), so it can never send a fetch anywhere but the machine
//!   itself, no built-in spec sets it, and the gateway warns at start for each source
//!   whose spec does.
//! * `[[vectors]]`: the provider's published test vectors, run by the test suite. A
//!   vector may set `url` (the URL the provider called) and `method`.

//!
//! Here: the compiled [`Spec`] and its parts. [`raw`] is what a spec file says;
//! compiling checks it and builds the [`Spec`]; the template module parses the
//! small languages inside it; [`describe`] tells a human what a spec verifies.

mod compile;
mod describe;
pub mod raw;
mod template;

pub use describe::describe;
pub use raw::{Expect, RawSpec, Vector};
pub use template::{parse_source, parse_template, parse_value_template};

use std::fmt;
use std::time::Duration;

/// A spec that cannot be compiled. Messages name the provider and the key.
///
/// A variant with a cause does not repeat it in its own message: the cause is
/// chained (`#[source]`), and the error chain is what gets printed.
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    /// Not TOML, or not the shape of a spec (the TOML error names the key).
    #[error("provider {provider:?}")]
    Toml {
        provider: String,
        #[source]
        source: Box<toml::de::Error>,
    },
    /// A key whose value is not usable, alone or with the others.
    #[error("provider {provider:?}: {key}: {problem}")]
    Invalid {
        provider: String,
        key: &'static str,
        problem: String,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algorithm {
    HmacSha256,
    HmacSha1,
    HmacSha512,
    Token,
    Ed25519,
    EcdsaP256Sha256,
    /// RSA PKCS#1 v1.5 with SHA-1, under the key of a certificate the request names
    /// (`[certificate]`): AWS SNS signature version 1.
    RsaSha1,
    /// RSA PKCS#1 v1.5 with SHA-256, under a fetched certificate's key: SNS version
    /// 2, PayPal.
    RsaSha256,
}

impl Algorithm {
    /// The JWS `alg` of this algorithm, where a JWS may use it (`format = "jws"`).
    pub fn jws_alg(self) -> Option<&'static str> {
        match self {
            Algorithm::HmacSha256 => Some("HS256"),
            Algorithm::HmacSha512 => Some("HS512"),
            Algorithm::EcdsaP256Sha256 => Some("ES256"),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Algorithm::HmacSha256 => "hmac-sha256",
            Algorithm::HmacSha1 => "hmac-sha1",
            Algorithm::HmacSha512 => "hmac-sha512",
            Algorithm::Token => "token",
            Algorithm::Ed25519 => "ed25519",
            Algorithm::EcdsaP256Sha256 => "ecdsa-p256-sha256",
            Algorithm::RsaSha1 => "rsa-sha1",
            Algorithm::RsaSha256 => "rsa-sha256",
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
            "rsa-sha1" => Algorithm::RsaSha1,
            "rsa-sha256" => Algorithm::RsaSha256,
            _ => return None,
        })
    }

    pub fn is_hmac(self) -> bool {
        matches!(
            self,
            Algorithm::HmacSha256 | Algorithm::HmacSha1 | Algorithm::HmacSha512
        )
    }

    /// The signature is checked with a public key (the source's secret, or a fetched
    /// certificate's); nothing here can sign.
    pub fn is_public_key(self) -> bool {
        matches!(
            self,
            Algorithm::Ed25519
                | Algorithm::EcdsaP256Sha256
                | Algorithm::RsaSha1
                | Algorithm::RsaSha256
        )
    }

    /// The key is a certificate's, fetched from the URL the request names
    /// (`[certificate]`); the source's secret is a value the request must be bound to
    /// (`{secret}`, `certificate.secret_matches`).
    pub fn is_certificate(self) -> bool {
        matches!(self, Algorithm::RsaSha1 | Algorithm::RsaSha256)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    Hex,
    Base64,
    /// Base64url without padding (RFC 7515 §2): a JWS's signature.
    Base64Url,
    Raw,
}

impl Encoding {
    pub fn name(self) -> &'static str {
        match self {
            Encoding::Hex => "hex",
            Encoding::Base64 => "base64",
            Encoding::Base64Url => "base64url",
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
    /// A compact JWS (`header.payload.signature`, RFC 7515) whose header names the
    /// spec's algorithm (`HS256`); its payload's claims are `{signature:name}`
    /// values, and each of `claims` must hold exactly its value (Netlify's
    /// `iss = "netlify"`). The signed content is `{jws}`, the token's first two
    /// parts.
    Jws { claims: Vec<(String, String)> },
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
    /// `{?source}`: the value, or nothing when the request lacks it (Adyen signs an
    /// absent `originalReference` as an empty field).
    OptionalValue(ValueSource),
    /// `{secret}`: the source's secret as configured, for certificate schemes that
    /// sign a value the receiver knows (PayPal's webhook id).
    Secret,
    /// `{body_crc32}`: the CRC-32 (IEEE) of the raw body, as an unsigned decimal
    /// (PayPal). A checksum, not a digest: it does not make the body signed.
    BodyCrc32,
    /// `{lines:Message,MessageId,Subject?,…}`: for each named top-level field of the
    /// JSON body, in order, `name\nvalue\n`; a name ending in `?` is skipped when the
    /// body lacks it (AWS SNS's string to sign).
    Lines(Vec<LineField>),
    /// `{path_escaped}`: the path as received with its query escaped twice, as
    /// Contentful's canonical request has it: `encodeURI(path + "?" +
    /// querystring.escape(query))` (`/a?b=1` becomes `/a?b%253D1`).
    PathEscaped,
    /// `{header_list:NAME}`: the headers that header NAME lists (comma-separated),
    /// with NAME itself and a timestamp header, lowercased, sorted and deduplicated,
    /// each `name:value` (value trimmed), joined by `;`; NAME's own value is the
    /// sorted list (Contentful's `x-contentful-signed-headers`).
    HeaderList(http::HeaderName),
    /// `{jws}`: a JWS's signing input (its header and payload, as sent); only with
    /// `format = "jws"`, whose `body_sha256` claim binds the body.
    JwsInput,
}

/// One field of a `{lines:…}` segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineField {
    pub name: String,
    pub optional: bool,
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
    /// An RFC 3339 date-time (`2023-11-14T22:13:20Z`, any offset, any fraction),
    /// signed as received.
    Rfc3339,
}

impl TimeUnit {
    pub fn name(self) -> &'static str {
        match self {
            TimeUnit::Seconds => "seconds",
            TimeUnit::Milliseconds => "milliseconds",
            TimeUnit::Rfc3339 => "rfc3339",
        }
    }

    /// The unix seconds `text` says, in this unit; `None` when it is not one.
    pub fn parse(self, text: &str) -> Option<i64> {
        match self {
            TimeUnit::Seconds => parse_integer(text),
            TimeUnit::Milliseconds => parse_integer(text).map(|ms| ms.div_euclid(1000)),
            TimeUnit::Rfc3339 => {
                if text.len() > 40 {
                    return None;
                }
                time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339)
                    .ok()
                    .map(|t| t.unix_timestamp())
            }
        }
    }

    /// `unix_seconds` written in this unit, as a sender writes it (RFC 3339 in UTC,
    /// whole seconds).
    pub fn format(self, unix_seconds: i64) -> String {
        match self {
            TimeUnit::Seconds => unix_seconds.to_string(),
            TimeUnit::Milliseconds => unix_seconds.saturating_mul(1000).to_string(),
            TimeUnit::Rfc3339 => time::OffsetDateTime::from_unix_timestamp(unix_seconds)
                .ok()
                .and_then(|t| {
                    t.format(&time::format_description::well_known::Rfc3339)
                        .ok()
                })
                .unwrap_or_else(|| "1970-01-01T00:00:00Z".to_string()),
        }
    }
}

/// A unix time written as a plain decimal integer (no sign, no fraction), at most 16
/// digits.
fn parse_integer(s: &str) -> Option<i64> {
    if s.is_empty() || s.len() > 16 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
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
    /// Twitch EventSub: a `webhook_callback_verification` message is answered with
    /// its `challenge`, as plain text.
    TwitchChallenge,
    /// Meta: `GET ?hub.mode=subscribe&hub.verify_token=…&hub.challenge=…` is answered
    /// with the challenge when the token is the source's `verify_token`.
    MetaSubscribe,
    /// Okta event hooks: a `GET` with `x-okta-verification-challenge`, verified as
    /// any request (its credential header), is answered `{"verification": …}`.
    OktaVerification,
    /// Dropbox: `GET ?challenge=…` is answered with the challenge (Dropbox sends
    /// nothing to verify it by; only a short token is echoed, as plain text).
    DropboxChallenge,
    /// Microsoft Graph: a POST with `?validationToken=…` and no body is answered
    /// with the token, as plain text (Graph sends nothing to verify it by).
    GraphValidation,
    /// AWS SNS: a verified `SubscriptionConfirmation` is stored like a notification;
    /// with the source's `confirm_subscriptions`, the gateway first visits its
    /// `SubscribeURL` (pinned to the `[certificate]` hosts; `ingest::subscription`).
    SnsSubscription,
    /// Trello: a `HEAD` (or `GET`) checks that the callback answers 200; it carries
    /// nothing to verify, and is answered 200 with nothing in it.
    HeadCheck,
    /// Asana: a POST carrying `X-Hook-Secret` (and no signature) gives the secret
    /// that signs every later request; it is answered with the same header, and the
    /// secret kept for the source, only while an operator has armed the source's
    /// handshake (`ingest::hook_secret`, `store::secrets`).
    HookSecret,
}

impl Handshake {
    pub fn name(self) -> &'static str {
        match self {
            Handshake::SlackUrlVerification => "slack-url-verification",
            Handshake::ZoomUrlValidation => "zoom-url-validation",
            Handshake::DiscordPing => "discord-ping",
            Handshake::TwitchChallenge => "twitch-challenge",
            Handshake::MetaSubscribe => "meta-subscribe",
            Handshake::OktaVerification => "okta-verification",
            Handshake::DropboxChallenge => "dropbox-challenge",
            Handshake::GraphValidation => "graph-validation",
            Handshake::SnsSubscription => "sns-subscription",
            Handshake::HeadCheck => "head-check",
            Handshake::HookSecret => "hook-secret",
        }
    }

    /// Whether the provider checks the endpoint with a `GET` (answered by
    /// `ingest`'s GET handler), not with a signed POST.
    pub fn is_get(self) -> bool {
        matches!(
            self,
            Handshake::MetaSubscribe
                | Handshake::OktaVerification
                | Handshake::DropboxChallenge
                | Handshake::HeadCheck
        )
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
    /// Further headers that may carry a signature instead (Box's secondary, DocuSign's
    /// `-2`…`-5`), when `signature_from` is a header.
    pub signature_also: Vec<http::HeaderName>,
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
    /// The id of the object the event is about (alternatives, tried in order): the
    /// ordering key of a route ordered `by = "provider"`.
    pub event_object: Vec<ValueTemplate>,
    /// The JSON pointer of the body part the dedupe digest covers, for a spec that
    /// does not sign the whole body (`event.digest`).
    pub event_digest: Option<String>,
    pub handshake: Option<Handshake>,
    /// Received headers that carry a credential: the `token` scheme's signature
    /// header and the spec's `credential_headers`.
    pub credential_headers: Vec<http::HeaderName>,
    /// Where the provider publishes the addresses it sends from (`allow_ips =
    /// "provider"`).
    pub ranges: Option<Ranges>,
    /// Where a certificate scheme's key comes from (`[certificate]`).
    pub certificate: Option<CertificateRule>,
    /// Where a JWS's key comes from, by its `kid` (`[jwk]`, Plaid).
    pub jwk: Option<JwkRule>,
    pub vectors: Vec<Vector>,
}

/// `[certificate]`: where the request names the certificate whose key checks its
/// signature, which URLs are acceptable, and what binds the request to the source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertificateRule {
    /// Where the certificate's URL is (`json:/SigningCertURL`, `header:PAYPAL-CERT-URL`).
    pub url: ValueSource,
    /// The hosts a certificate may come from: `sns.*.amazonaws.com`, where `*` is one
    /// DNS label. The URL must be `https://` on one of them, on the default port.
    pub hosts: Vec<String>,
    /// What the URL's path must start with (`/v1/notifications/certs/`), if anything.
    pub path_prefix: Option<String>,
    /// What the URL's path must end with (`.pem`), if anything.
    pub path_suffix: Option<String>,
    /// A value of the request that must equal one of the source's secrets (SNS: the
    /// `TopicArn` the source takes), checked once the signature verified.
    pub secret_matches: Option<ValueSource>,
    /// Tests only: the loopback origin certificates are fetched from instead (the
    /// spec's `fetch_base`).
    pub fetch_base: Option<String>,
}

/// `[jwk]`: the provider's API that gives the key of a JWS by its `kid` (Plaid's
/// `/webhook_verification_key/get`). The request's URL is built from `url`, a value
/// template, and must be `https://` on one of `hosts`; the source's secret is the
/// API's credentials (`client_id:secret`), sent only there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JwkRule {
    pub url: ValueTemplate,
    pub hosts: Vec<String>,
    /// Tests only: the loopback origin asked instead (the spec's `fetch_base`).
    pub fetch_base: Option<String>,
}

/// A provider's published address ranges: where to fetch them and where they are
/// in the JSON document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ranges {
    /// What is fetched: the spec's `https://` URL, or the same path on the spec's
    /// loopback `fetch_base` (tests).
    pub url: String,
    /// The spec's own URL, as `hookgate providers` shows it.
    pub published: String,
    /// The JSON pointer of the array of ranges.
    pub pointer: String,
    /// When the array holds objects, the field of each that holds the range.
    pub field: Option<String>,
}

impl Spec {
    /// The algorithm `hookgate sign` uses.
    pub fn algorithm(&self) -> Algorithm {
        self.algorithms[0]
    }

    /// Whether the key is fetched from the provider (`[certificate]`, `[jwk]`): the
    /// source's secret is then no key, but a value the request is bound to or the
    /// credentials of the provider's API.
    pub fn fetches_key(&self) -> bool {
        self.certificate.is_some() || self.jwk.is_some()
    }

    /// The header that carries the signature, when one does.
    pub fn signature_header(&self) -> Option<&http::HeaderName> {
        match &self.signature_from {
            ValueSource::Header(h) => Some(h),
            _ => None,
        }
    }

    /// Every header that may carry the signature: `signature_header` and the others.
    pub fn signature_headers(&self) -> impl Iterator<Item = &http::HeaderName> {
        self.signature_header()
            .into_iter()
            .chain(self.signature_also.iter())
    }

    /// Whether the signed content includes `{url}` (the source needs `public_url`).
    pub fn signs_url(&self) -> bool {
        self.content.contains(&Segment::Url)
    }

    /// Whether `src` is covered by the signature: the signed content includes it, or
    /// includes what it is read from (the body for JSON and form values, the URL or
    /// path for query values, the timestamp for the timestamp's own source).
    /// A `token` scheme signs nothing: no value is covered.
    pub fn is_signed(&self, src: &ValueSource) -> bool {
        if self.algorithms.contains(&Algorithm::Token) {
            return false;
        }
        let has = |seg: &Segment| self.content.contains(seg);
        if has(&Segment::Value(src.clone())) || has(&Segment::OptionalValue(src.clone())) {
            return true;
        }
        if has(&Segment::Timestamp) && self.timestamp.as_ref().is_some_and(|t| &t.from == src) {
            return true;
        }
        // A JWS signs its claims.
        if matches!(src, ValueSource::Signature(_)) && has(&Segment::JwsInput) {
            return true;
        }
        // A `{header_list:…}` always signs its own header and the timestamp's.
        if let ValueSource::Header(h) = src
            && self.content.iter().any(|seg| match seg {
                Segment::HeaderList(list) => {
                    list == h
                        || self
                            .timestamp
                            .as_ref()
                            .is_some_and(|t| matches!(&t.from, ValueSource::Header(th) if th == h))
                }
                _ => false,
            })
        {
            return true;
        }
        if let ValueSource::Json(ptr) = src
            && self.content.iter().any(|seg| match seg {
                Segment::Lines(fields) => fields.iter().any(|f| ptr == &format!("/{}", f.name)),
                _ => false,
            })
        {
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
        !self.event_id.is_empty() && self.all_signed(&self.event_id)
    }

    /// Whether the event type is covered by the signature, whichever alternative
    /// yields it. An unsigned type (GitHub's `X-GitHub-Event`) can be changed by
    /// anyone replaying a captured request: it must not be trusted to choose routes.
    pub fn event_type_is_signed(&self) -> bool {
        self.all_signed(&self.event_type)
    }

    /// Whether the object id (`event.object`, the key of a route ordered
    /// `by = "provider"`) is covered by the signature, whichever alternative yields it.
    pub fn event_object_is_signed(&self) -> bool {
        self.all_signed(&self.event_object)
    }

    /// Whether every value of every alternative of `templates` is signed.
    pub fn all_signed(&self, templates: &[ValueTemplate]) -> bool {
        templates
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
                Segment::OptionalValue(v) => out.push_str(&format!("{{?{v}}}")),
                Segment::Secret => out.push_str("{secret}"),
                Segment::BodyCrc32 => out.push_str("{body_crc32}"),
                Segment::PathEscaped => out.push_str("{path_escaped}"),
                Segment::JwsInput => out.push_str("{jws}"),
                Segment::HeaderList(h) => out.push_str(&format!("{{header_list:{h}}}")),
                Segment::Lines(fields) => {
                    let names: Vec<String> = fields
                        .iter()
                        .map(|f| format!("{}{}", f.name, if f.optional { "?" } else { "" }))
                        .collect();
                    out.push_str(&format!("{{lines:{}}}", names.join(",")));
                }
            }
        }
        out
    }
}
