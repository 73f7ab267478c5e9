//! The signer: produces the request a provider would send for a body.
//!
//! It is the verification engine run backwards, from the same spec, so `hookgate
//! sign` (and every test that needs a real request) signs exactly the way the
//! provider does, and the published vectors check both directions. It signs every
//! symmetric scheme (HMAC and token); public-key schemes need the provider's private
//! key, which a receiver never has.
//!
//! Most providers put the signature in headers and leave the body alone. Where a
//! spec reads the signature, the timestamp or a signed event id from the JSON body
//! (Mailgun, Linear), the signer writes them into the body and returns the new body.

use http::{HeaderMap, HeaderName, HeaderValue};
use sha2::Digest as _;

use super::spec::{HeaderFormat, Segment, Spec, TimeUnit, ValueSource};
use super::verify::{self, Context, ParsedSignature, Request};
use crate::config::Secret;

/// What to sign.
#[derive(Debug, Clone)]
pub struct SignInput<'a> {
    pub body: &'a [u8],
    /// Unix seconds.
    pub timestamp: i64,
    /// The delivery or message id, for providers that carry one in a header (or a
    /// signed one in the body, when the body lacks it).
    pub id: &'a str,
    /// The event type, for providers that carry it in a header.
    pub event_type: Option<&'a str>,
    pub method: &'a str,
    /// Path and query; taken from `url` when that is given.
    pub path: &'a str,
    /// The URL the provider calls, for providers that sign it (`{url}`).
    pub url: Option<&'a str>,
}

/// A signed request.
#[derive(Debug, Clone)]
pub struct Signed {
    /// The headers, in order.
    pub headers: Vec<(HeaderName, String)>,
    /// The body to send, when values had to be written into it; `None` means the
    /// input body, unchanged.
    pub body: Option<Vec<u8>>,
}

impl Signed {
    /// The body to send.
    pub fn body<'a>(&'a self, input: &'a [u8]) -> &'a [u8] {
        self.body.as_deref().unwrap_or(input)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SignError {
    #[error("provider {provider:?} signs header {header}, which hookgate sign cannot fill in")]
    UnfillableHeader { provider: String, header: String },
    #[error("provider {provider:?} signs a value from the JSON body that the body lacks: {what}")]
    MissingBodyValue { provider: String, what: String },
    #[error("provider {provider:?} reads {what}, which hookgate sign cannot write")]
    Unfillable { provider: String, what: String },
    #[error("provider {provider:?} keeps signed values in the body, which must be a JSON object")]
    BodyNotJson { provider: String },
    #[error("provider {provider:?} signs the URL it calls; give the URL (--url)")]
    NeedsUrl { provider: String },
    #[error("provider {provider:?}: the URL carries a body digest that does not match the body")]
    BodyDigest { provider: String },
    #[error(
        "provider {provider:?} uses {algorithm} signatures: they are made with the provider's private key, which hookgate never has"
    )]
    PublicKey {
        provider: String,
        algorithm: &'static str,
    },
    #[error("invalid header value for {0}")]
    HeaderValue(String),
    #[error(transparent)]
    Key(#[from] verify::KeyError),
}

/// Write `value` at a JSON pointer, creating objects along the way. `false` when the
/// path runs through something that is not an object.
fn write_pointer(root: &mut serde_json::Value, pointer: &str, value: serde_json::Value) -> bool {
    let Some(rest) = pointer.strip_prefix('/') else {
        return false;
    };
    let tokens: Vec<String> = rest
        .split('/')
        .map(|t| t.replace("~1", "/").replace("~0", "~"))
        .collect();
    let mut cur = root;
    for (i, token) in tokens.iter().enumerate() {
        let Some(obj) = cur.as_object_mut() else {
            return false;
        };
        if i + 1 == tokens.len() {
            obj.insert(token.clone(), value);
            return true;
        }
        cur = obj
            .entry(token.clone())
            .or_insert_with(|| serde_json::Value::Object(serde_json::Map::new()));
    }
    false
}

/// The headers (and, where needed, the body) the provider would send with
/// `input.body`, signed with `secret`.
pub fn sign(spec: &Spec, secret: &Secret, input: &SignInput<'_>) -> Result<Signed, SignError> {
    let provider = || spec.name.clone();
    let not_json = || SignError::BodyNotJson {
        provider: provider(),
    };
    let unfillable = |what: &ValueSource| SignError::Unfillable {
        provider: provider(),
        what: what.to_string(),
    };
    let algorithm = spec.algorithm();
    if algorithm.is_public_key() {
        return Err(SignError::PublicKey {
            provider: provider(),
            algorithm: algorithm.name(),
        });
    }
    let keys = verify::prepare_keys(spec, std::slice::from_ref(secret))?;
    let key = &keys[0];
    let mut out: Vec<(HeaderName, String)> = Vec::new();
    let mut fields: Vec<(String, String)> = Vec::new();
    // The body as JSON, once something has to be written into it.
    let mut json: Option<serde_json::Value> = None;
    // Whether something was written into `json` (else the input body is sent as is).
    let mut modified = false;
    let body_json = |json: &mut Option<serde_json::Value>| -> Result<(), SignError> {
        if json.is_none() {
            match serde_json::from_slice::<serde_json::Value>(input.body) {
                Ok(v) if v.is_object() => *json = Some(v),
                _ => {
                    return Err(not_json());
                }
            }
        }
        Ok(())
    };

    let ts_text = match &spec.timestamp {
        None => None,
        Some(rule) => {
            let text = match rule.unit {
                TimeUnit::Seconds => input.timestamp.to_string(),
                TimeUnit::Milliseconds => input.timestamp.saturating_mul(1000).to_string(),
            };
            match &rule.from {
                ValueSource::Header(h) => out.push((h.clone(), text.clone())),
                ValueSource::Signature(k) => fields.push((k.clone(), text.clone())),
                ValueSource::Json(ptr) => {
                    body_json(&mut json)?;
                    let doc = json.as_mut().ok_or_else(not_json)?;
                    // Keep the type the body already uses (Mailgun sends a string,
                    // Linear a number); leave the body alone when it already holds
                    // this time.
                    let value = match doc.pointer(ptr) {
                        Some(serde_json::Value::String(_)) => {
                            serde_json::Value::String(text.clone())
                        }
                        _ => serde_json::Value::Number(
                            text.parse::<i64>().unwrap_or_default().into(),
                        ),
                    };
                    if doc.pointer(ptr) != Some(&value) {
                        if !write_pointer(doc, ptr, value) {
                            return Err(not_json());
                        }
                        modified = true;
                    }
                }
                other => {
                    return Err(unfillable(other));
                }
            }
            Some(text)
        }
    };
    match spec.event_id.first().and_then(|t| t.single()) {
        Some(ValueSource::Header(h)) if !out.iter().any(|(n, _)| n == h) => {
            out.push((h.clone(), input.id.to_string()));
        }
        // A signed id the body lacks (Mailgun's token) is filled in with the id.
        Some(src @ ValueSource::Json(ptr))
            if spec.content.contains(&Segment::Value(src.clone())) =>
        {
            body_json(&mut json)?;
            let doc = json.as_mut().ok_or_else(not_json)?;
            if doc.pointer(ptr).is_none() {
                if !write_pointer(doc, ptr, serde_json::Value::String(input.id.to_string())) {
                    return Err(not_json());
                }
                modified = true;
            }
        }
        _ => {}
    }
    if let (Some(ValueSource::Header(h)), Some(t)) = (
        spec.event_type.first().and_then(|t| t.single()),
        input.event_type,
    ) && !out.iter().any(|(n, _)| n == h)
    {
        out.push((h.clone(), t.to_string()));
    }

    let mut headers = HeaderMap::new();
    for (n, v) in &out {
        headers.insert(
            n.clone(),
            HeaderValue::from_str(v).map_err(|_| SignError::HeaderValue(n.to_string()))?,
        );
    }
    let body: Vec<u8> = match &json {
        Some(doc) if modified => serde_json::to_vec(doc).unwrap_or_default(),
        _ => input.body.to_vec(),
    };
    let url = if spec.signs_url() {
        Some(input.url.ok_or(SignError::NeedsUrl {
            provider: provider(),
        })?)
    } else {
        input.url
    };
    let path = match url.and_then(|u| u.parse::<http::Uri>().ok()) {
        Some(uri) => uri
            .path_and_query()
            .map(|p| p.as_str().to_string())
            .unwrap_or_else(|| "/".into()),
        None => input.path.to_string(),
    };
    let mut ctx = Context::new(
        Request {
            method: input.method,
            path: &path,
            url,
            headers: &headers,
            body: &body,
        },
        ParsedSignature {
            signatures: Vec::new(),
            fields: fields.clone(),
        },
    );
    if let Some(src) = &spec.body_sha256
        && let Some(claimed) = ctx.value(src)
    {
        if !claimed.eq_ignore_ascii_case(&hex::encode(sha2::Sha256::digest(&body))) {
            return Err(SignError::BodyDigest {
                provider: provider(),
            });
        }
        ctx.digest_bound = true;
    }
    let mac = verify::compute(spec, key, &ctx, ts_text.as_deref(), url).map_err(|_| {
        // Find which placeholder could not be filled, for a useful message.
        for seg in &spec.content {
            if let Segment::Value(src) = seg
                && ctx.value(src).is_none()
            {
                return match src {
                    ValueSource::Header(h) => SignError::UnfillableHeader {
                        provider: provider(),
                        header: h.to_string(),
                    },
                    other => SignError::MissingBodyValue {
                        provider: provider(),
                        what: other.to_string(),
                    },
                };
            }
        }
        SignError::MissingBodyValue {
            provider: provider(),
            what: "the form parameters (the body is not a UTF-8 form)".into(),
        }
    })?;
    let sig = if algorithm.is_hmac() {
        verify::encode_sig(spec.encoding, &mac)
    } else {
        // A token scheme sends the secret itself.
        secret.expose().to_string()
    };
    let value = match &spec.format {
        HeaderFormat::Plain { prefix } => format!("{prefix}{sig}"),
        HeaderFormat::Kv {
            pair_separator,
            kv_separator,
            signature_keys,
        } => {
            let mut parts: Vec<String> = fields
                .iter()
                .map(|(k, v)| format!("{k}{kv_separator}{v}"))
                .collect();
            parts.push(format!("{}{kv_separator}{sig}", signature_keys[0]));
            parts.join(pair_separator)
        }
    };
    match &spec.signature_from {
        ValueSource::Header(h) => out.push((h.clone(), value)),
        ValueSource::Json(ptr) => {
            body_json(&mut json)?;
            let doc = json.as_mut().ok_or_else(not_json)?;
            if !write_pointer(doc, ptr, serde_json::Value::String(value)) {
                return Err(not_json());
            }
            modified = true;
        }
        other => {
            return Err(unfillable(other));
        }
    }
    Ok(Signed {
        headers: out,
        body: json
            .filter(|_| modified)
            .map(|doc| serde_json::to_vec(&doc).unwrap_or_default()),
    })
}
