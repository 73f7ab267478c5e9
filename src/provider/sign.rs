//! The signer: produces the headers a provider would send for a body.
//!
//! It is the verification engine run backwards, from the same spec, so `hookgate
//! sign` (and every test that needs a real request) signs exactly the way the
//! provider does, and the published vectors check both directions.

use http::{HeaderMap, HeaderName, HeaderValue};

use super::spec::{Algorithm, HeaderFormat, Spec, TimeUnit, ValueSource};
use super::verify::{self, Context, Key, ParsedHeader, Request};
use crate::config::Secret;

/// What to sign.
#[derive(Debug, Clone)]
pub struct SignInput<'a> {
    pub body: &'a [u8],
    /// Unix seconds.
    pub timestamp: i64,
    /// The delivery or message id, for providers that carry one in a header.
    pub id: &'a str,
    /// The event type, for providers that carry it in a header.
    pub event_type: Option<&'a str>,
    pub method: &'a str,
    pub path: &'a str,
}

#[derive(Debug, thiserror::Error)]
pub enum SignError {
    #[error("provider {provider:?} signs header {header}, which hookgate sign cannot fill in")]
    UnfillableHeader { provider: String, header: String },
    #[error("provider {provider:?} signs a value from the JSON body that the body lacks: {what}")]
    MissingBodyValue { provider: String, what: String },
    #[error("invalid header value for {0}")]
    HeaderValue(String),
    #[error(transparent)]
    Key(#[from] verify::KeyError),
}

/// The headers (in order) that the provider would send with `input.body`.
pub fn sign(
    spec: &Spec,
    secret: &Secret,
    input: &SignInput<'_>,
) -> Result<Vec<(HeaderName, String)>, SignError> {
    let keys = verify::prepare_keys(spec, std::slice::from_ref(secret))?;
    let key: &Key = &keys[0];
    let mut out: Vec<(HeaderName, String)> = Vec::new();
    let mut fields: Vec<(String, String)> = Vec::new();

    let ts_text = spec.timestamp.as_ref().map(|rule| {
        let text = match rule.unit {
            TimeUnit::Seconds => input.timestamp.to_string(),
            TimeUnit::Milliseconds => (input.timestamp * 1000).to_string(),
        };
        match &rule.from {
            ValueSource::Header(h) => out.push((h.clone(), text.clone())),
            ValueSource::Signature(k) => fields.push((k.clone(), text.clone())),
            ValueSource::Json(_) => {}
        }
        text
    });
    if let Some(ValueSource::Header(h)) = &spec.event_id
        && !out.iter().any(|(n, _)| n == h)
    {
        out.push((h.clone(), input.id.to_string()));
    }
    if let (Some(ValueSource::Header(h)), Some(t)) = (&spec.event_type, input.event_type)
        && !out.iter().any(|(n, _)| n == h)
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
    let ctx = Context::new(
        Request {
            method: input.method,
            path: input.path,
            headers: &headers,
            body: input.body,
        },
        ParsedHeader {
            signatures: Vec::new(),
            fields: fields.clone(),
        },
    );
    let mac = verify::compute(spec, key, &ctx, ts_text.as_deref()).map_err(|_| {
        // Find which placeholder could not be filled, for a useful message.
        for seg in &spec.content {
            if let super::spec::Segment::Value(src) = seg
                && ctx.value(src).is_none()
            {
                return match src {
                    ValueSource::Header(h) => SignError::UnfillableHeader {
                        provider: spec.name.clone(),
                        header: h.to_string(),
                    },
                    other => SignError::MissingBodyValue {
                        provider: spec.name.clone(),
                        what: format!("{other:?}"),
                    },
                };
            }
        }
        SignError::MissingBodyValue {
            provider: spec.name.clone(),
            what: "timestamp".into(),
        }
    })?;
    let sig = match spec.algorithm {
        // A token scheme sends the secret itself.
        Algorithm::Token => secret.expose().to_string(),
        _ => verify::encode_sig(spec.encoding, &mac),
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
    out.push((spec.header.clone(), value));
    Ok(out)
}
