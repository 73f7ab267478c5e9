//! Compiling a spec: from what the file says ([`RawSpec`]) to a [`Spec`] whose
//! templates and value sources are parsed, after checking that the combination is
//! one a sender can use safely (a window on a signed timestamp only, a signature that
//! covers the body, one algorithm family, …). Every error names the provider and
//! the key.

use super::raw::RawSpec;
use super::template::{parse_source, parse_template, parse_value_template};
use super::{
    Algorithm, Encoding, Handshake, HeaderFormat, SecretEncoding, Segment, Spec, SpecError,
    TimeUnit, TimestampRule, UrlPort, ValueSource,
};
use crate::config::raw::OneOrMany;

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
}

/// Check a spec and build its compiled form.
fn compile(raw: RawSpec) -> Result<Spec, SpecError> {
    let provider = raw.name.clone();
    let invalid = |key: &'static str, problem: String| SpecError::Invalid {
        provider: provider.clone(),
        key,
        problem,
    };
    let signature = &raw.signature;
    let names = signature.algorithm.clone().into_vec();
    let mut algorithms = Vec::with_capacity(names.len());
    for name in &names {
        let parsed = Algorithm::parse(name).ok_or_else(|| {
            invalid(
                "signature.algorithm",
                format!(
                    "unknown algorithm {name:?}; use hmac-sha256, hmac-sha1, hmac-sha512, token, ed25519 or ecdsa-p256-sha256"
                ),
            )
        })?;
        if !algorithms.contains(&parsed) {
            algorithms.push(parsed);
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
    let signature_from = match (&signature.header, &signature.from) {
        (Some(header), None) => ValueSource::Header(
            http::HeaderName::from_bytes(header.as_bytes()).map_err(|_| {
                invalid(
                    "signature.header",
                    format!("{header:?} is not a header name"),
                )
            })?,
        ),
        (None, Some(from)) => {
            match parse_source(from).map_err(|problem| invalid("signature.from", problem))? {
                ValueSource::Signature(_) => {
                    return Err(invalid(
                        "signature.from",
                        "the signature cannot be read from itself".into(),
                    ));
                }
                src => src,
            }
        }
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
    let format = match signature.format.as_str() {
        "plain" => HeaderFormat::Plain {
            prefix: signature.prefix.clone(),
        },
        "kv" => {
            if signature.pair_separator.is_empty() || signature.kv_separator.is_empty() {
                return Err(invalid(
                    "signature.pair_separator",
                    "separators must not be empty".into(),
                ));
            }
            if signature.signature_keys.is_empty() {
                return Err(invalid(
                    "signature.signature_keys",
                    "a kv header needs at least one signature key".into(),
                ));
            }
            HeaderFormat::Kv {
                pair_separator: signature.pair_separator.clone(),
                kv_separator: signature.kv_separator.clone(),
                signature_keys: signature.signature_keys.clone(),
            }
        }
        other => {
            return Err(invalid(
                "signature.format",
                format!("unknown format {other:?}; use plain or kv"),
            ));
        }
    };
    let encoding = match signature.encoding.as_str() {
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
    let secret_encoding = match signature.secret_encoding.as_str() {
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
    let content = parse_template(&signature.content)
        .map_err(|problem| invalid("signature.content", problem))?;
    if !matches!(signature_from, ValueSource::Header(_))
        && (content.contains(&Segment::Body) || content.contains(&Segment::FormSorted))
    {
        return Err(invalid(
            "signature.from",
            "a signature carried in the body cannot sign the whole body".into(),
        ));
    }
    let url_port = match signature.url_port.as_str() {
        "as-is" => UrlPort::AsIs,
        "either" => UrlPort::Either,
        other => {
            return Err(invalid(
                "signature.url_port",
                format!("unknown url_port {other:?}; use as-is or either"),
            ));
        }
    };
    let body_sha256 = signature
        .body_sha256
        .as_deref()
        .map(parse_source)
        .transpose()
        .map_err(|problem| invalid("signature.body_sha256", problem))?;
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
        Some(raw_timestamp) => Some(TimestampRule {
            from: parse_source(&raw_timestamp.from)
                .map_err(|problem| invalid("timestamp.from", problem))?,
            unit: match raw_timestamp.unit.as_str() {
                "seconds" => TimeUnit::Seconds,
                "milliseconds" => TimeUnit::Milliseconds,
                other => {
                    return Err(invalid(
                        "timestamp.unit",
                        format!("unknown unit {other:?}; use seconds or milliseconds"),
                    ));
                }
            },
            tolerance: humantime::parse_duration(&raw_timestamp.tolerance).map_err(|e| {
                invalid(
                    "timestamp.tolerance",
                    format!("invalid duration {:?}: {e}", raw_timestamp.tolerance),
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
    if let Some(rule) = &timestamp {
        // A window on a value the signature does not cover is no window: a replayed
        // request would simply carry a fresh one.
        let covered = algorithm != Algorithm::Token
            && (content.contains(&Segment::Timestamp)
                || content.contains(&Segment::Value(rule.from.clone()))
                || match &rule.from {
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
                    rule.from
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
    let templates = |key: &'static str, written: &Option<OneOrMany>| {
        written
            .clone()
            .map(OneOrMany::into_vec)
            .unwrap_or_default()
            .iter()
            .map(|text| parse_value_template(text).map_err(|problem| invalid(key, problem)))
            .collect::<Result<Vec<_>, _>>()
    };
    let event_id = templates("event.id", &raw.event.id)?;
    let event_type = templates("event.type", &raw.event.kind)?;
    let event_object = templates("event.object", &raw.event.object)?;
    let event_digest = match raw.event.digest.as_deref().map(parse_source).transpose() {
        Err(problem) => return Err(invalid("event.digest", problem)),
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
        Some(raw_handshake) => Some(match raw_handshake.kind.as_str() {
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
        && let ValueSource::Header(header) = &signature_from
    {
        credential_headers.push(header.clone());
    }
    for name in &raw.credential_headers {
        let header = http::HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
            invalid(
                "credential_headers",
                format!("{name:?} is not a header name"),
            )
        })?;
        if !credential_headers.contains(&header) {
            credential_headers.push(header);
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
        event_object,
        event_digest,
        handshake,
        credential_headers,
        vectors: raw.vectors,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
