//! The provider spec: how one provider signs its webhooks, as data.
//!
//! A spec is a TOML file in `providers/` (compiled into the binary) or in
//! `providers_dir`. It is parsed into [`RawSpec`] (serde, unknown keys rejected) and
//! compiled into [`Spec`], where every template and value source is already parsed,
//! so that the verification engine never interprets strings on the hot path.
//!
//! The format covers the whole catalogue of schemes, not only the first providers:
//!
//! * `signature.algorithm`: `hmac-sha256`, `hmac-sha1`, `hmac-sha512`, or `token`
//!   (the header carries the secret itself, compared in constant time).
//! * `signature.header` and `signature.format`: `plain` (the whole value, after an
//!   optional `prefix`, is one signature) or `kv` (a list split by `pair_separator`
//!   whose items are `key<kv_separator>value`; the keys in `signature_keys` carry
//!   signatures, any other key is available to templates as `{signature:key}`). Stripe
//!   is `kv` with `,`/`=`, Paddle `kv` with `;`/`=`, Standard Webhooks `kv` with
//!   ` `/`,` and `signature_keys = ["v1"]`.
//! * `signature.encoding`: `hex`, `base64` or `raw`.
//! * `signature.secret_encoding`: `utf8` (the secret's bytes), `whsec-base64` (strip a
//!   `whsec_` prefix, then base64-decode), `base64` or `hex`.
//! * `signature.content`: the signed-content template. Placeholders: `{body}` (the raw
//!   bytes), `{timestamp}` (as received), `{header:Name}`, `{signature:key}`,
//!   `{json:/pointer}`, `{method}` and `{path}`. Everything else is literal; `{{` and
//!   `}}` escape braces.
//! * `timestamp.from`, `event.id`, `event.type`: value sources written as
//!   `header:Name`, `signature:key` or `json:/pointer`. `timestamp.unit` is
//!   `seconds` or `milliseconds`; `timestamp.tolerance` is a duration applied in both
//!   directions.
//! * `handshake.kind`: a verified request that the provider sends to check the
//!   endpoint, answered instead of stored (`slack-url-verification`).
//! * `[[vectors]]`: the provider's published test vectors, run by the test suite.

use std::collections::BTreeMap;
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
    #[serde(default)]
    pub vectors: Vec<Vector>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSignature {
    pub algorithm: String,
    pub header: String,
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
    pub id: Option<String>,
    #[serde(default, rename = "type")]
    pub kind: Option<String>,
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
    /// The clock (unix seconds) to verify at; the vector's own time when it signs one.
    #[serde(default)]
    pub now: Option<i64>,
    /// `valid` or `invalid`.
    pub expect: String,
    /// Whether `hookgate sign` must reproduce the headers byte for byte.
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
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    Hex,
    Base64,
    Raw,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SecretEncoding {
    Utf8,
    WhsecBase64,
    Base64,
    Hex,
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
}

/// One piece of a signed-content template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Segment {
    Literal(Vec<u8>),
    Body,
    Timestamp,
    Method,
    Path,
    Value(ValueSource),
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
}

/// A compiled provider spec.
#[derive(Debug, Clone)]
pub struct Spec {
    pub name: String,
    pub summary: String,
    pub algorithm: Algorithm,
    pub header: http::HeaderName,
    pub format: HeaderFormat,
    pub encoding: Encoding,
    pub secret_encoding: SecretEncoding,
    pub content: Vec<Segment>,
    pub timestamp: Option<TimestampRule>,
    pub event_id: Option<ValueSource>,
    pub event_type: Option<ValueSource>,
    pub handshake: Option<Handshake>,
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

    /// Whether the event id is covered by the signature (it comes from the signed
    /// body, or from a header that the signed content includes). An unsigned id could
    /// be set freely by anyone replaying a captured request.
    pub fn event_id_is_signed(&self) -> bool {
        match &self.event_id {
            None => false,
            Some(ValueSource::Json(_)) => self.content.contains(&Segment::Body),
            Some(src) => self.content.contains(&Segment::Value(src.clone())),
        }
    }

    /// Whether the signed content needs a timestamp.
    pub fn signs_timestamp(&self) -> bool {
        self.content.contains(&Segment::Timestamp)
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
    let algorithm = match s.algorithm.as_str() {
        "hmac-sha256" => Algorithm::HmacSha256,
        "hmac-sha1" => Algorithm::HmacSha1,
        "hmac-sha512" => Algorithm::HmacSha512,
        "token" => Algorithm::Token,
        other => {
            return Err(invalid(
                "signature.algorithm",
                format!(
                    "unknown algorithm {other:?}; use hmac-sha256, hmac-sha1, hmac-sha512 or token"
                ),
            ));
        }
    };
    let header = http::HeaderName::from_bytes(s.header.as_bytes()).map_err(|_| {
        invalid(
            "signature.header",
            format!("{:?} is not a header name", s.header),
        )
    })?;
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
    if algorithm == Algorithm::Token && encoding != Encoding::Raw {
        return Err(invalid(
            "signature.encoding",
            "the token algorithm compares the header with the secret; use encoding = \"raw\""
                .into(),
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
    let content = parse_template(&s.content).map_err(|p| invalid("signature.content", p))?;
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
    for seg in &content {
        if let Segment::Value(ValueSource::Signature(_)) = seg
            && !matches!(format, HeaderFormat::Kv { .. })
        {
            return Err(invalid(
                "signature.content",
                "{signature:key} needs format = \"kv\"".into(),
            ));
        }
    }
    let event_id = raw
        .event
        .id
        .as_deref()
        .map(parse_source)
        .transpose()
        .map_err(|p| invalid("event.id", p))?;
    let event_type = raw
        .event
        .kind
        .as_deref()
        .map(parse_source)
        .transpose()
        .map_err(|p| invalid("event.type", p))?;
    let handshake = match &raw.handshake {
        Some(h) => Some(match h.kind.as_str() {
            "slack-url-verification" => Handshake::SlackUrlVerification,
            other => {
                return Err(invalid(
                    "handshake.kind",
                    format!("unknown handshake {other:?}; use slack-url-verification"),
                ));
            }
        }),
        None => None,
    };
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
        algorithm,
        header,
        format,
        encoding,
        secret_encoding,
        content,
        timestamp,
        event_id,
        event_type,
        handshake,
        vectors: raw.vectors,
    })
}

/// Parse a value source: `header:Name`, `signature:key` or `json:/pointer`.
pub fn parse_source(s: &str) -> Result<ValueSource, String> {
    let (kind, arg) = s
        .split_once(':')
        .ok_or_else(|| format!("{s:?}: use header:Name, signature:key or json:/pointer"))?;
    match kind {
        "header" => http::HeaderName::from_bytes(arg.as_bytes())
            .map(ValueSource::Header)
            .map_err(|_| format!("{arg:?} is not a header name")),
        "signature" if !arg.is_empty() => Ok(ValueSource::Signature(arg.to_string())),
        "json" if arg.is_empty() || arg.starts_with('/') => Ok(ValueSource::Json(arg.to_string())),
        "json" => Err(format!(
            "{arg:?} is not a JSON pointer; it must start with '/'"
        )),
        _ => Err(format!(
            "{s:?}: unknown source; use header:Name, signature:key or json:/pointer"
        )),
    }
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
    if !out.contains(&Segment::Body)
        && !out
            .iter()
            .any(|s| matches!(s, Segment::Value(ValueSource::Json(_))))
    {
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
