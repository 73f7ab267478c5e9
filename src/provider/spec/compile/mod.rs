//! Compiling a spec: from what the file says ([`RawSpec`]) to a [`Spec`] whose
//! templates and value sources are parsed, after checking that the combination is
//! one a sender can use safely (a window on a signed timestamp only, a signature that
//! covers the body, one algorithm family, …). Every error names the provider and
//! the key.

mod fetched;

use super::raw::{RawEvent, RawHandshake, RawSignature, RawSpec, RawTimestamp};
use super::template::{parse_source, parse_template, parse_value_template};
use super::{
    Algorithm, Encoding, Handshake, HeaderFormat, SecretEncoding, Segment, Spec, SpecError,
    TimeUnit, TimestampRule, UrlPort, ValueSource, ValueTemplate,
};
use crate::config::raw::OneOrMany;
use fetched::{compile_certificate, compile_jwk, compile_ranges};

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

/// Builds the error of one key of one provider's spec.
#[derive(Debug, Clone, Copy)]
struct Invalid<'a> {
    provider: &'a str,
}

impl Invalid<'_> {
    /// `key`'s value is not usable: `problem` says why.
    fn at(self, key: &'static str, problem: String) -> SpecError {
        SpecError::Invalid {
            provider: self.provider.to_string(),
            key,
            problem,
        }
    }
}

/// The `[signature]` section, compiled.
struct CompiledSignature {
    algorithms: Vec<Algorithm>,
    from: ValueSource,
    also: Vec<http::HeaderName>,
    format: HeaderFormat,
    encoding: Encoding,
    secret_encoding: SecretEncoding,
    content: Vec<Segment>,
    url_port: UrlPort,
    body_sha256: Option<ValueSource>,
}

/// The `[event]` section, compiled.
struct CompiledEvent {
    id: Vec<ValueTemplate>,
    kind: Vec<ValueTemplate>,
    object: Vec<ValueTemplate>,
    digest: Option<String>,
}

/// Check a spec and build its compiled form, section by section, in the order the
/// checks report their first error.
fn compile(raw: RawSpec) -> Result<Spec, SpecError> {
    let provider = raw.name.clone();
    let invalid = Invalid {
        provider: &provider,
    };
    let signature = compile_signature(&raw.signature, raw.jwk.is_some(), invalid)?;
    let algorithm = signature.algorithms[0];
    let timestamp = compile_timestamp(
        raw.timestamp.as_ref(),
        algorithm,
        &signature.from,
        &signature.content,
        invalid,
    )?;
    if let Some(rule) = &timestamp
        && let ValueSource::Header(h) = &rule.from
        && signature.also.contains(h)
    {
        return Err(invalid.at(
            "timestamp.from",
            format!(
                "{} is where a signature is: a timestamp needs a place of its own",
                rule.from
            ),
        ));
    }
    check_signature_items(
        &signature.content,
        timestamp.as_ref(),
        &signature.format,
        invalid,
    )?;
    let event = compile_event(&raw.event, &signature.content, invalid)?;
    let handshake = compile_handshake(raw.handshake.as_ref(), &signature.algorithms, invalid)?;
    let mut credential_headers =
        compile_credential_headers(&raw.credential_headers, algorithm, &signature.from, invalid)?;
    if algorithm == Algorithm::Token {
        for header in &signature.also {
            if !credential_headers.contains(header) {
                credential_headers.push(header.clone());
            }
        }
    }
    let jwk = compile_jwk(
        raw.jwk.as_ref(),
        &signature.algorithms,
        &signature.format,
        raw.fetch_base.as_deref(),
        invalid,
    )?;
    let certificate = compile_certificate(
        raw.certificate.as_ref(),
        &signature.algorithms,
        &signature.content,
        raw.fetch_base.as_deref(),
        invalid,
    )?;
    Ok(Spec {
        name: raw.name,
        summary: raw.summary,
        algorithms: signature.algorithms,
        signature_from: signature.from,
        signature_also: signature.also,
        format: signature.format,
        encoding: signature.encoding,
        secret_encoding: signature.secret_encoding,
        content: signature.content,
        url_port: signature.url_port,
        body_sha256: signature.body_sha256,
        timestamp,
        event_id: event.id,
        event_type: event.kind,
        event_object: event.object,
        event_digest: event.digest,
        handshake,
        credential_headers,
        ranges: compile_ranges(raw.ranges.as_ref(), raw.fetch_base.as_deref(), invalid)?,
        certificate,
        jwk,
        vectors: raw.vectors,
    })
}

/// `[signature]`: the algorithms, where the signature is and how it is written, the
/// secret's encoding and the signed content, each checked against the others.
fn compile_signature(
    signature: &RawSignature,
    fetched_key: bool,
    invalid: Invalid<'_>,
) -> Result<CompiledSignature, SpecError> {
    let algorithms = signature_algorithms(signature, invalid)?;
    let algorithm = algorithms[0];
    let (from, also) = signature_from(signature, invalid)?;
    let format = signature_format(signature, invalid)?;
    let encoding = signature_encoding(signature, algorithm, invalid)?;
    let secret_encoding = signature_secret_encoding(signature, algorithm, fetched_key, invalid)?;
    let content = signature_content(signature, &from, invalid)?;
    if let Some(header) = also
        .iter()
        .find(|h| content.contains(&Segment::Value(ValueSource::Header((*h).clone()))))
    {
        return Err(invalid.at(
            "signature.content",
            format!("signs header:{header}, where a signature is: no signature can cover itself"),
        ));
    }
    let url_port = signature_url_port(signature, invalid)?;
    let body_sha256 = signature_body_sha256(signature, &content, invalid)?;
    signature_jws(
        &algorithms,
        &format,
        encoding,
        &content,
        body_sha256.as_ref(),
        invalid,
    )?;
    Ok(CompiledSignature {
        algorithms,
        from,
        also,
        format,
        encoding,
        secret_encoding,
        content,
        url_port,
        body_sha256,
    })
}

/// `signature.algorithm`: one algorithm, or several HMAC ones, without repeats.
fn signature_algorithms(
    signature: &RawSignature,
    invalid: Invalid<'_>,
) -> Result<Vec<Algorithm>, SpecError> {
    let names = signature.algorithm.clone().into_vec();
    let mut algorithms = Vec::with_capacity(names.len());
    for name in &names {
        let parsed = Algorithm::parse(name).ok_or_else(|| {
            invalid.at(
                "signature.algorithm",
                format!(
                    "unknown algorithm {name:?}; use hmac-sha256, hmac-sha1, hmac-sha512, token, ed25519, ecdsa-p256-sha256, rsa-sha1 or rsa-sha256"
                ),
            )
        })?;
        if !algorithms.contains(&parsed) {
            algorithms.push(parsed);
        }
    }
    if algorithms.is_empty() {
        return Err(invalid.at(
            "signature.algorithm",
            "the list of algorithms is empty".into(),
        ));
    }
    if algorithms.len() > 1
        && !algorithms.iter().all(|a| a.is_hmac())
        && !algorithms.iter().all(|a| a.is_certificate())
    {
        return Err(invalid.at(
            "signature.algorithm",
            "only HMAC algorithms, or only RSA ones, can be listed together".into(),
        ));
    }
    Ok(algorithms)
}

/// `signature.header` (one header or several) or `signature.from`: where the
/// signature is (exactly one of the two keys). The first header, and the others.
fn signature_from(
    signature: &RawSignature,
    invalid: Invalid<'_>,
) -> Result<(ValueSource, Vec<http::HeaderName>), SpecError> {
    Ok(match (&signature.header, &signature.from) {
        (Some(headers), None) => {
            let mut names: Vec<http::HeaderName> = Vec::new();
            for header in headers.clone().into_vec() {
                let name = http::HeaderName::from_bytes(header.as_bytes()).map_err(|_| {
                    invalid.at(
                        "signature.header",
                        format!("{header:?} is not a header name"),
                    )
                })?;
                if names.contains(&name) {
                    return Err(
                        invalid.at("signature.header", format!("{header:?} is listed twice"))
                    );
                }
                names.push(name);
            }
            if names.is_empty() {
                return Err(invalid.at("signature.header", "the list is empty".into()));
            }
            let first = names.remove(0);
            (ValueSource::Header(first), names)
        }
        (None, Some(from)) => {
            match parse_source(from).map_err(|problem| invalid.at("signature.from", problem))? {
                ValueSource::Signature(_) => {
                    return Err(invalid.at(
                        "signature.from",
                        "the signature cannot be read from itself".into(),
                    ));
                }
                src => (src, Vec::new()),
            }
        }
        (None, None) => {
            return Err(invalid.at(
                "signature.header",
                "set signature.header, or signature.from for a signature outside the headers"
                    .into(),
            ));
        }
        (Some(_), Some(_)) => {
            return Err(invalid.at(
                "signature.from",
                "set signature.header or signature.from, not both".into(),
            ));
        }
    })
}

/// `signature.format` (`plain` or `kv`) and the keys that go with it.
fn signature_format(
    signature: &RawSignature,
    invalid: Invalid<'_>,
) -> Result<HeaderFormat, SpecError> {
    Ok(match signature.format.as_str() {
        "plain" => HeaderFormat::Plain {
            prefix: signature.prefix.clone(),
        },
        "kv" => {
            if signature.pair_separator.is_empty() || signature.kv_separator.is_empty() {
                return Err(invalid.at(
                    "signature.pair_separator",
                    "separators must not be empty".into(),
                ));
            }
            if signature.signature_keys.is_empty() {
                return Err(invalid.at(
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
        "jws" => HeaderFormat::Jws {
            claims: signature
                .claims
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        },
        other => {
            return Err(invalid.at(
                "signature.format",
                format!("unknown format {other:?}; use plain, kv or jws"),
            ));
        }
    })
}

/// `signature.encoding`: `raw` for a token, and only for a token.
fn signature_encoding(
    signature: &RawSignature,
    algorithm: Algorithm,
    invalid: Invalid<'_>,
) -> Result<Encoding, SpecError> {
    let encoding = match signature.encoding.as_str() {
        "hex" => Encoding::Hex,
        "base64" => Encoding::Base64,
        "base64url" => Encoding::Base64Url,
        "raw" => Encoding::Raw,
        other => {
            return Err(invalid.at(
                "signature.encoding",
                format!("unknown encoding {other:?}; use hex, base64 or raw"),
            ));
        }
    };
    if algorithm == Algorithm::Token && encoding != Encoding::Raw {
        return Err(invalid.at(
            "signature.encoding",
            "the token algorithm compares the header with the secret; use encoding = \"raw\""
                .into(),
        ));
    }
    if algorithm != Algorithm::Token && encoding == Encoding::Raw {
        return Err(invalid.at(
            "signature.encoding",
            format!(
                "{} signatures are binary; use hex or base64",
                algorithm.name()
            ),
        ));
    }
    Ok(encoding)
}

/// `signature.secret_encoding`: a public key is never read as UTF-8 text.
fn signature_secret_encoding(
    signature: &RawSignature,
    algorithm: Algorithm,
    fetched_key: bool,
    invalid: Invalid<'_>,
) -> Result<SecretEncoding, SpecError> {
    let secret_encoding = match signature.secret_encoding.as_str() {
        "utf8" => SecretEncoding::Utf8,
        "whsec-base64" => SecretEncoding::WhsecBase64,
        "base64" => SecretEncoding::Base64,
        "hex" => SecretEncoding::Hex,
        other => {
            return Err(invalid.at(
                "signature.secret_encoding",
                format!("unknown secret encoding {other:?}; use utf8, whsec-base64, base64 or hex"),
            ));
        }
    };
    if (algorithm.is_certificate() || fetched_key) && secret_encoding != SecretEncoding::Utf8 {
        return Err(invalid.at(
            "signature.secret_encoding",
            format!(
                "{} checks a fetched certificate's key; the secret is a value the request is bound to: use utf8",
                algorithm.name()
            ),
        ));
    }
    if algorithm.is_public_key()
        && !algorithm.is_certificate()
        && !fetched_key
        && secret_encoding == SecretEncoding::Utf8
    {
        return Err(invalid.at(
            "signature.secret_encoding",
            format!("{} takes a public key; use hex or base64", algorithm.name()),
        ));
    }
    Ok(secret_encoding)
}

/// `signature.content`: the signed-content template; a signature carried in the
/// body cannot sign the whole body.
fn signature_content(
    signature: &RawSignature,
    from: &ValueSource,
    invalid: Invalid<'_>,
) -> Result<Vec<Segment>, SpecError> {
    let content = parse_template(&signature.content)
        .map_err(|problem| invalid.at("signature.content", problem))?;
    if !matches!(from, ValueSource::Header(_))
        && (content.contains(&Segment::Body) || content.contains(&Segment::FormSorted))
    {
        return Err(invalid.at(
            "signature.from",
            "a signature carried in the body cannot sign the whole body".into(),
        ));
    }
    for seg in &content {
        if let Segment::Value(v) = seg
            && same_place(v, from)
        {
            return Err(invalid.at(
                "signature.content",
                format!("signs {v}, where the signature itself is ({from}): no signature can cover itself"),
            ));
        }
    }
    Ok(content)
}

/// `a` and `b` read the same value or one inside the other (a JSON pointer and one
/// of its prefixes), so that writing one overwrites the other.
fn same_place(a: &ValueSource, b: &ValueSource) -> bool {
    // Token-wise: `/a` holds `/a/b`, not `/ab`.
    let nested = |x: &str, y: &str| {
        x == y
            || x.strip_prefix(y).is_some_and(|r| r.starts_with('/'))
            || y.strip_prefix(x).is_some_and(|r| r.starts_with('/'))
    };
    match (a, b) {
        (ValueSource::Header(x), ValueSource::Header(y)) => x == y,
        (ValueSource::Json(x), ValueSource::Json(y)) => {
            x.is_empty() || y.is_empty() || nested(x, y)
        }
        (
            ValueSource::Form {
                field: f1,
                pointer: p1,
            },
            ValueSource::Form {
                field: f2,
                pointer: p2,
            },
        ) => {
            f1 == f2
                && match (p1, p2) {
                    (Some(x), Some(y)) => x.is_empty() || y.is_empty() || nested(x, y),
                    _ => true,
                }
        }
        (ValueSource::Query(x), ValueSource::Query(y)) => x == y,
        _ => false,
    }
}

/// `signature.url_port`: how `{url}` treats the port.
fn signature_url_port(
    signature: &RawSignature,
    invalid: Invalid<'_>,
) -> Result<UrlPort, SpecError> {
    match signature.url_port.as_str() {
        "as-is" => Ok(UrlPort::AsIs),
        "either" => Ok(UrlPort::Either),
        other => Err(invalid.at(
            "signature.url_port",
            format!("unknown url_port {other:?}; use as-is or either"),
        )),
    }
}

/// `format = "jws"` and `{jws}` go together: the content is the token's signing
/// input alone, signed with one HMAC written as base64url, and a claim holds the
/// body's digest (`body_sha256 = "signature:…"`), which binds the body.
fn signature_jws(
    algorithms: &[Algorithm],
    format: &HeaderFormat,
    encoding: Encoding,
    content: &[Segment],
    body_sha256: Option<&ValueSource>,
    invalid: Invalid<'_>,
) -> Result<(), SpecError> {
    let jws = matches!(format, HeaderFormat::Jws { .. });
    let signs_jws = content.contains(&Segment::JwsInput);
    if !jws && !signs_jws {
        return Ok(());
    }
    let problem = if !jws {
        Some("{jws} needs format = \"jws\"")
    } else if content != [Segment::JwsInput] {
        Some("format = \"jws\" signs the token: content = \"{jws}\"")
    } else if encoding != Encoding::Base64Url {
        Some("a JWS signature is base64url: encoding = \"base64url\"")
    } else if !matches!(algorithms, [a] if a.jws_alg().is_some()) {
        Some("a JWS here is HS256 or HS512: one algorithm, hmac-sha256 or hmac-sha512")
    } else if !matches!(body_sha256, Some(ValueSource::Signature(_))) {
        Some("a JWS covers the body through a digest claim: body_sha256 = \"signature:<claim>\"")
    } else {
        None
    };
    match problem {
        Some(problem) => Err(invalid.at("signature.format", problem.into())),
        None => Ok(()),
    }
}

/// `signature.body_sha256`: a body digest, which must be covered by the signature.
fn signature_body_sha256(
    signature: &RawSignature,
    content: &[Segment],
    invalid: Invalid<'_>,
) -> Result<Option<ValueSource>, SpecError> {
    let body_sha256 = signature
        .body_sha256
        .as_deref()
        .map(parse_source)
        .transpose()
        .map_err(|problem| invalid.at("signature.body_sha256", problem))?;
    if let Some(src) = &body_sha256 {
        // The digest stands in for the body only if the signature covers it.
        let covered = content.contains(&Segment::Value(src.clone()))
            || matches!(src, ValueSource::Signature(_)) && content.contains(&Segment::JwsInput)
            || matches!(src, ValueSource::Query(_))
                && (content.contains(&Segment::Url) || content.contains(&Segment::Path));
        if !covered {
            return Err(invalid.at(
                "signature.body_sha256",
                format!("{src} must be covered by signature.content"),
            ));
        }
    }
    Ok(body_sha256)
}

/// `[timestamp]`: where the timestamp is, its unit and tolerance. The content may
/// sign `{timestamp}` only when the section is there, and the section is refused
/// when the signature does not cover the timestamp, or reads it where the signature
/// is (`signature_from`).
fn compile_timestamp(
    raw_timestamp: Option<&RawTimestamp>,
    algorithm: Algorithm,
    signature_from: &ValueSource,
    content: &[Segment],
    invalid: Invalid<'_>,
) -> Result<Option<TimestampRule>, SpecError> {
    let timestamp = match raw_timestamp {
        Some(raw_timestamp) => Some(TimestampRule {
            from: parse_source(&raw_timestamp.from)
                .map_err(|problem| invalid.at("timestamp.from", problem))?,
            unit: match raw_timestamp.unit.as_str() {
                "seconds" => TimeUnit::Seconds,
                "milliseconds" => TimeUnit::Milliseconds,
                "rfc3339" => TimeUnit::Rfc3339,
                other => {
                    return Err(invalid.at(
                        "timestamp.unit",
                        format!("unknown unit {other:?}; use seconds, milliseconds or rfc3339"),
                    ));
                }
            },
            tolerance: humantime::parse_duration(&raw_timestamp.tolerance).map_err(|e| {
                invalid.at(
                    "timestamp.tolerance",
                    format!("invalid duration {:?}: {e}", raw_timestamp.tolerance),
                )
            })?,
        }),
        None => None,
    };
    if content.contains(&Segment::Timestamp) && timestamp.is_none() {
        return Err(invalid.at(
            "signature.content",
            "uses {timestamp} but the spec has no [timestamp] section".into(),
        ));
    }
    if let Some(rule) = &timestamp
        && same_place(&rule.from, signature_from)
    {
        return Err(invalid.at(
            "timestamp.from",
            format!(
                "{} is where the signature is: a timestamp needs a place of its own",
                rule.from
            ),
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
                    // A `{header_list:…}` always signs the timestamp's header.
                    ValueSource::Header(_) => content
                        .iter()
                        .any(|seg| matches!(seg, Segment::HeaderList(_))),
                    // A JWS signs its claims.
                    ValueSource::Signature(_) => content.contains(&Segment::JwsInput),
                });
        if !covered {
            return Err(invalid.at(
                "timestamp.from",
                format!(
                    "{} is not covered by signature.content; sign {{timestamp}} (or what the timestamp is read from), or drop the [timestamp] section",
                    rule.from
                ),
            ));
        }
    }
    Ok(timestamp)
}

/// `{signature:key}` values (in the content or as the timestamp) exist only in a
/// `kv` signature.
fn check_signature_items(
    content: &[Segment],
    timestamp: Option<&TimestampRule>,
    format: &HeaderFormat,
    invalid: Invalid<'_>,
) -> Result<(), SpecError> {
    let uses_signature_items = content
        .iter()
        .any(|seg| matches!(seg, Segment::Value(ValueSource::Signature(_))))
        || matches!(timestamp.map(|t| &t.from), Some(ValueSource::Signature(_)));
    if uses_signature_items && !matches!(format, HeaderFormat::Kv { .. } | HeaderFormat::Jws { .. })
    {
        return Err(invalid.at(
            "signature.content",
            "{signature:key} needs format = \"kv\" or \"jws\"".into(),
        ));
    }
    Ok(())
}

/// `[event]`: the id, type and object templates, and the digested part of a body
/// the signature does not cover whole.
fn compile_event(
    raw_event: &RawEvent,
    content: &[Segment],
    invalid: Invalid<'_>,
) -> Result<CompiledEvent, SpecError> {
    let id = value_templates("event.id", &raw_event.id, invalid)?;
    let kind = value_templates("event.type", &raw_event.kind, invalid)?;
    let object = value_templates("event.object", &raw_event.object, invalid)?;
    let digest = match raw_event.digest.as_deref().map(parse_source).transpose() {
        Err(problem) => return Err(invalid.at("event.digest", problem)),
        Ok(None) => None,
        Ok(Some(ValueSource::Json(ptr))) => Some(ptr),
        Ok(Some(other)) => {
            return Err(invalid.at(
                "event.digest",
                format!("{other} is not a JSON part of the body; use json:/pointer"),
            ));
        }
    };
    if digest.is_some()
        && (content.contains(&Segment::Body) || content.contains(&Segment::FormSorted))
    {
        return Err(invalid.at(
            "event.digest",
            "the signature covers the whole body, which is what dedupe digests; drop event.digest"
                .into(),
        ));
    }
    Ok(CompiledEvent {
        id,
        kind,
        object,
        digest,
    })
}

/// One value template or a list of them, as `key` is written (none when absent).
fn value_templates(
    key: &'static str,
    written: &Option<OneOrMany>,
    invalid: Invalid<'_>,
) -> Result<Vec<ValueTemplate>, SpecError> {
    written
        .clone()
        .map(OneOrMany::into_vec)
        .unwrap_or_default()
        .iter()
        .map(|text| parse_value_template(text).map_err(|problem| invalid.at(key, problem)))
        .collect()
}

/// `[handshake]`: the kind of endpoint check the provider sends; Zoom's needs HMAC.
fn compile_handshake(
    raw_handshake: Option<&RawHandshake>,
    algorithms: &[Algorithm],
    invalid: Invalid<'_>,
) -> Result<Option<Handshake>, SpecError> {
    let handshake = match raw_handshake {
        Some(raw_handshake) => Some(match raw_handshake.kind.as_str() {
            "slack-url-verification" => Handshake::SlackUrlVerification,
            "zoom-url-validation" => Handshake::ZoomUrlValidation,
            "discord-ping" => Handshake::DiscordPing,
            "twitch-challenge" => Handshake::TwitchChallenge,
            "meta-subscribe" => Handshake::MetaSubscribe,
            "okta-verification" => Handshake::OktaVerification,
            "dropbox-challenge" => Handshake::DropboxChallenge,
            "graph-validation" => Handshake::GraphValidation,
            "sns-subscription" => Handshake::SnsSubscription,
            "head-check" => Handshake::HeadCheck,
            "hook-secret" => Handshake::HookSecret,
            other => {
                return Err(invalid.at(
                    "handshake.kind",
                    format!(
                        "unknown handshake {other:?}; use slack-url-verification, zoom-url-validation, discord-ping, twitch-challenge, meta-subscribe, okta-verification, dropbox-challenge, graph-validation, sns-subscription, head-check or hook-secret"
                    ),
                ));
            }
        }),
        None => None,
    };
    if handshake == Some(Handshake::ZoomUrlValidation) && !algorithms.iter().any(|a| a.is_hmac()) {
        return Err(invalid.at(
            "handshake.kind",
            "zoom-url-validation answers with an HMAC of the secret; it needs an HMAC algorithm"
                .into(),
        ));
    }
    Ok(handshake)
}

/// `credential_headers`, after a token scheme's signature header, without repeats.
fn compile_credential_headers(
    names: &[String],
    algorithm: Algorithm,
    signature_from: &ValueSource,
    invalid: Invalid<'_>,
) -> Result<Vec<http::HeaderName>, SpecError> {
    let mut credential_headers = Vec::new();
    if algorithm == Algorithm::Token
        && let ValueSource::Header(header) = signature_from
    {
        credential_headers.push(header.clone());
    }
    for name in names {
        let header = http::HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
            invalid.at(
                "credential_headers",
                format!("{name:?} is not a header name"),
            )
        })?;
        if !credential_headers.contains(&header) {
            credential_headers.push(header);
        }
    }
    Ok(credential_headers)
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

    /// Found by the `config` fuzz target: a spec reading its timestamp (or signing a
    /// value) where its signature is could never verify a request; it is refused
    /// at load instead.
    #[test]
    fn a_timestamp_or_signed_value_where_the_signature_is_is_refused() {
        let spec = |timestamp_from: &str, content: &str| {
            Spec::from_toml(&format!(
                "name = \"x\"\n[signature]\nalgorithm = \"hmac-sha256\"\nfrom = \"json:/signature/signature\"\nencoding = \"hex\"\ncontent = \"{content}\"\n[timestamp]\nfrom = \"{timestamp_from}\"\nunit = \"seconds\"\ntolerance = \"15m\"\n"
            ))
        };
        let err = spec(
            "json:/signature/signature",
            "{timestamp}{json:/signature/token}",
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("timestamp.from") && err.contains("where the signature is"),
            "{err}"
        );
        // A pointer holding the signature's place is the same place.
        let err = spec("json:/signature", "{timestamp}{json:/data}")
            .unwrap_err()
            .to_string();
        assert!(err.contains("timestamp.from"), "{err}");
        let err = spec(
            "json:/signature/timestamp",
            "{timestamp}{json:/signature/signature}",
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("signature.content") && err.contains("cover itself"),
            "{err}"
        );
        // Mailgun's own shape: siblings, not the same place.
        assert!(
            spec(
                "json:/signature/timestamp",
                "{timestamp}{json:/signature/token}"
            )
            .is_ok()
        );
        assert!(spec("json:/signature/signaturex", "{timestamp}{json:/data}").is_ok());
    }
}
