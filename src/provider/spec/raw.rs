//! What a provider spec file says, before anything is checked.
//!
//! The serde model of `providers/*.toml` (and of `providers_dir`), with unknown keys
//! rejected so that a misspelt key is named. Values stay as written; compiling turns
//! them into a [`super::Spec`]. The format itself is described in [`super`].

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::config::raw::OneOrMany;

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
    /// `[certificate]`: where a certificate scheme's key comes from.
    #[serde(default)]
    pub certificate: Option<RawCertificate>,
    /// `[ranges]`: where the provider publishes the addresses it sends from.
    #[serde(default)]
    pub ranges: Option<RawRanges>,
    /// `[jwk]`: where a JWS's key is fetched from, by its `kid` (Plaid).
    #[serde(default)]
    pub jwk: Option<RawJwk>,
    /// Tests only: the loopback origin (`http://127.0.0.1:PORT`) every fetch of this
    /// spec goes to instead of the provider's.
    #[serde(default)]
    pub fetch_base: Option<String>,
    #[serde(default)]
    pub vectors: Vec<Vector>,
}

/// `[certificate]`: the certificate a request names, for `rsa-*` algorithms.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCertificate {
    /// A value source: where the certificate's URL is.
    pub url: String,
    /// The hosts it may come from (`*` is one DNS label).
    pub hosts: Vec<String>,
    #[serde(default)]
    pub path_prefix: Option<String>,
    #[serde(default)]
    pub path_suffix: Option<String>,
    /// A value source that must equal one of the source's secrets.
    #[serde(default)]
    pub secret_matches: Option<String>,
}

/// `[jwk]`: the provider's API that gives a JWS's key by its `kid`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawJwk {
    /// A value template: the URL asked (`https://{json:/environment}.plaid.com/…`).
    pub url: String,
    /// The hosts it may be on (`*` is one DNS label).
    pub hosts: Vec<String>,
}

/// `[ranges]`: the provider's published list of the addresses it sends from.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRanges {
    /// An `https://` URL serving JSON.
    pub url: String,
    /// The JSON pointer of the array of ranges in it.
    pub pointer: String,
    /// When the array holds objects: the field of each that holds the range.
    #[serde(default)]
    pub field: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSignature {
    pub algorithm: OneOrMany,
    /// The header that carries the signature, or several (Box's primary and
    /// secondary): a signature in any of them is accepted.
    #[serde(default)]
    pub header: Option<OneOrMany>,
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
    /// `format = "jws"`: claims that must hold exactly these values.
    #[serde(default)]
    pub claims: BTreeMap<String, String>,
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
    /// The id of the object the event is about (Stripe's `json:/data/object/id`):
    /// the ordering key of a route ordered `by = "provider"`.
    #[serde(default)]
    pub object: Option<OneOrMany>,
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
    /// Whether the engine must accept the request.
    pub expect: Expect,
    /// Whether `hookgate sign` must reproduce the signature byte for byte.
    #[serde(default)]
    pub reproduce: bool,
    /// For a certificate scheme: the PEM certificate the request's URL serves.
    #[serde(default)]
    pub certificate: Option<String>,
    /// For a `[jwk]` scheme: the JWK the provider's API gives for the token's `kid`.
    #[serde(default)]
    pub jwk: Option<String>,
}

/// What a test vector expects of the verification engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Expect {
    Valid,
    Invalid,
}
