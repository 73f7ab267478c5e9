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

use super::spec::{Algorithm, HeaderFormat, Segment, Spec, ValueSource};
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

/// Write `value` at a JSON pointer, creating objects along the way (an array is
/// entered only at an index it has). `false` when the path runs through anything else.
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
        let last = i + 1 == tokens.len();
        cur = match cur {
            serde_json::Value::Array(items) => {
                let Some(item) = token.parse::<usize>().ok().and_then(|n| items.get_mut(n)) else {
                    return false;
                };
                if last {
                    *item = value;
                    return true;
                }
                item
            }
            serde_json::Value::Object(obj) => {
                if last {
                    obj.insert(token.clone(), value);
                    return true;
                }
                obj.entry(token.clone())
                    .or_insert_with(|| serde_json::Value::Object(serde_json::Map::new()))
            }
            _ => return false,
        };
    }
    false
}

/// The headers (and, where needed, the body) the provider would send with
/// `input.body`, signed with `secret`, by the scheme of the spec's first algorithm.
pub fn sign(spec: &Spec, secret: &Secret, input: &SignInput<'_>) -> Result<Signed, SignError> {
    let algorithm = spec.algorithm();
    match algorithm {
        Algorithm::HmacSha256 | Algorithm::HmacSha1 | Algorithm::HmacSha512 => {
            sign_hmac(spec, secret, input)
        }
        Algorithm::Token => sign_token(spec, secret, input),
        Algorithm::Ed25519
        | Algorithm::EcdsaP256Sha256
        | Algorithm::RsaSha1
        | Algorithm::RsaSha256 => Err(SignError::PublicKey {
            provider: spec.name.clone(),
            algorithm: algorithm.name(),
        }),
    }
}

/// An HMAC scheme: the MAC of the signed content under the secret, encoded as the
/// spec says.
fn sign_hmac(spec: &Spec, secret: &Secret, input: &SignInput<'_>) -> Result<Signed, SignError> {
    let keys = verify::prepare_keys(spec, std::slice::from_ref(secret))?;
    let key = &keys[0];
    sign_with(spec, input, |ctx, timestamp, url| {
        let mac = verify::compute(spec, key, ctx, timestamp, url)
            .map_err(|_| unfilled_content(spec, ctx))?;
        Ok(verify::encode_sig(spec.encoding, &mac))
    })
}

/// The token scheme: the signature is the secret itself.
fn sign_token(spec: &Spec, secret: &Secret, input: &SignInput<'_>) -> Result<Signed, SignError> {
    // The secret must still be one the verifier accepts (decodable, not empty).
    verify::prepare_keys(spec, std::slice::from_ref(secret))?;
    sign_with(spec, input, |_, _, _| Ok(secret.expose().to_string()))
}

/// What every scheme does around its signature: write the timestamp and the event
/// id and type where the spec reads them, build the request the signature covers,
/// ask `signature` for the signature of it, and write that where the spec reads it.
fn sign_with(
    spec: &Spec,
    input: &SignInput<'_>,
    signature: impl FnOnce(&Context<'_>, Option<&str>, Option<&str>) -> Result<String, SignError>,
) -> Result<Signed, SignError> {
    let mut draft = Draft::new(spec, input);
    let ts_text = draft.place_timestamp()?;
    draft.place_header_list();
    draft.place_event_id()?;
    draft.place_event_type();

    let mut headers = HeaderMap::new();
    for (n, v) in &draft.headers {
        headers.insert(
            n.clone(),
            HeaderValue::from_str(v).map_err(|_| SignError::HeaderValue(n.to_string()))?,
        );
    }
    let body = draft.body();
    let signing_input = draft.jws_input(&body);
    let url = if spec.signs_url() {
        Some(input.url.ok_or(SignError::NeedsUrl {
            provider: spec.name.clone(),
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
            fields: draft.fields.clone(),
            signing_input: signing_input.clone(),
            key_id: None,
        },
    );
    if let Some(src) = &spec.body_sha256
        && let Some(claimed) = ctx.value(src)
    {
        if !claimed.eq_ignore_ascii_case(&hex::encode(sha2::Sha256::digest(&body))) {
            return Err(SignError::BodyDigest {
                provider: spec.name.clone(),
            });
        }
        ctx.digest_bound = true;
    }
    let sig = signature(&ctx, ts_text.as_deref(), url)?;
    let value = match &signing_input {
        Some(input) => format!("{input}.{sig}"),
        None => signature_value(&spec.format, &draft.fields, &sig),
    };
    draft.place_signature(value)?;
    Ok(draft.finish())
}

/// The signature as the spec's format writes it: after the prefix, or as the last
/// item of a `kv` list after the other items.
fn signature_value(format: &HeaderFormat, fields: &[(String, String)], sig: &str) -> String {
    match format {
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
        // Written whole by `sign_with`, around the signing input.
        HeaderFormat::Jws { .. } => sig.to_string(),
    }
}

/// Why the signed content could not be built: the first placeholder that could not
/// be filled, for a useful message.
fn unfilled_content(spec: &Spec, ctx: &Context<'_>) -> SignError {
    for seg in &spec.content {
        if let Segment::Value(src) = seg
            && ctx.value(src).is_none()
        {
            return match src {
                ValueSource::Header(h) => SignError::UnfillableHeader {
                    provider: spec.name.clone(),
                    header: h.to_string(),
                },
                other => SignError::MissingBodyValue {
                    provider: spec.name.clone(),
                    what: other.to_string(),
                },
            };
        }
    }
    SignError::MissingBodyValue {
        provider: spec.name.clone(),
        what: "the form parameters (the body is not a UTF-8 form)".into(),
    }
}

/// The request being signed: the headers and `kv` items written so far, and the
/// body as JSON once something has to be written into it.
struct Draft<'s, 'i> {
    spec: &'s Spec,
    input: &'i SignInput<'i>,
    /// The headers, in order.
    headers: Vec<(HeaderName, String)>,
    /// The non-signature items of a `kv` signature.
    fields: Vec<(String, String)>,
    /// The body as JSON, once something has to be written into it.
    json: Option<serde_json::Value>,
    /// Whether something was written into `json` (else the input body is sent as is).
    modified: bool,
}

impl<'s, 'i> Draft<'s, 'i> {
    fn new(spec: &'s Spec, input: &'i SignInput<'i>) -> Self {
        Draft {
            spec,
            input,
            headers: Vec::new(),
            fields: Vec::new(),
            json: None,
            modified: false,
        }
    }

    fn not_json(&self) -> SignError {
        SignError::BodyNotJson {
            provider: self.spec.name.clone(),
        }
    }

    fn unfillable(&self, what: &ValueSource) -> SignError {
        SignError::Unfillable {
            provider: self.spec.name.clone(),
            what: what.to_string(),
        }
    }

    /// The body as a JSON object, parsed the first time it is asked for.
    fn json(&mut self) -> Result<&mut serde_json::Value, SignError> {
        if self.json.is_none() {
            match serde_json::from_slice::<serde_json::Value>(self.input.body) {
                Ok(v) if v.is_object() => self.json = Some(v),
                _ => {
                    return Err(self.not_json());
                }
            }
        }
        let spec = self.spec;
        self.json.as_mut().ok_or_else(|| SignError::BodyNotJson {
            provider: spec.name.clone(),
        })
    }

    /// Write `value` at `ptr` in the JSON body.
    fn write_json(&mut self, ptr: &str, value: serde_json::Value) -> Result<(), SignError> {
        let doc = self.json()?;
        if !write_pointer(doc, ptr, value) {
            return Err(self.not_json());
        }
        self.modified = true;
        Ok(())
    }

    /// Write the timestamp where the spec reads it; its text, as signed.
    fn place_timestamp(&mut self) -> Result<Option<String>, SignError> {
        let Some(rule) = &self.spec.timestamp else {
            return Ok(None);
        };
        let text = rule.unit.format(self.input.timestamp);
        match &rule.from {
            ValueSource::Header(h) => self.headers.push((h.clone(), text.clone())),
            ValueSource::Signature(k) => self.fields.push((k.clone(), text.clone())),
            ValueSource::Json(ptr) => {
                let doc = self.json()?;
                // Keep the type the body already uses (Mailgun sends a string,
                // Linear a number); leave the body alone when it already holds
                // this time.
                let value = match doc.pointer(ptr) {
                    Some(serde_json::Value::String(_)) => serde_json::Value::String(text.clone()),
                    _ => serde_json::Value::Number(text.parse::<i64>().unwrap_or_default().into()),
                };
                if doc.pointer(ptr) != Some(&value) {
                    self.write_json(ptr, value)?;
                }
            }
            other => {
                return Err(self.unfillable(other));
            }
        }
        Ok(Some(text))
    }

    /// A JWS's signing input: the spec's `alg`, and as claims the required ones,
    /// the body's digest and what else was placed (the timestamp); `None` for
    /// other formats.
    fn jws_input(&mut self, body: &[u8]) -> Option<String> {
        use base64::Engine as _;
        use base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let HeaderFormat::Jws { claims } = &self.spec.format else {
            return None;
        };
        for (k, v) in claims {
            self.fields.push((k.clone(), v.clone()));
        }
        if let Some(ValueSource::Signature(k)) = &self.spec.body_sha256 {
            self.fields
                .push((k.clone(), hex::encode(sha2::Sha256::digest(body))));
        }
        let alg = self.spec.algorithms.first().and_then(|a| a.jws_alg())?;
        let header = serde_json::json!({ "alg": alg, "typ": "JWT" });
        let payload: serde_json::Map<String, serde_json::Value> = self
            .fields
            .iter()
            .map(|(k, v)| {
                // A timestamp claim is a number (`iat`); the others are text.
                let value = match v.parse::<i64>() {
                    Ok(n)
                        if self.spec.timestamp.as_ref().is_some_and(
                            |t| matches!(&t.from, ValueSource::Signature(f) if f == k),
                        ) =>
                    {
                        serde_json::Value::from(n)
                    }
                    _ => serde_json::Value::String(v.clone()),
                };
                (k.clone(), value)
            })
            .collect();
        Some(format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(header.to_string()),
            URL_SAFE_NO_PAD.encode(serde_json::Value::Object(payload).to_string())
        ))
    }

    /// Write the header a `{header_list:…}` reads, listing itself and the timestamp
    /// header (Contentful's `x-contentful-signed-headers`).
    fn place_header_list(&mut self) {
        for seg in &self.spec.content {
            if let Segment::HeaderList(list) = seg
                && !self.headers.iter().any(|(n, _)| n == list)
            {
                let mut names = vec![list.as_str().to_string()];
                if let Some(ValueSource::Header(t)) = self.spec.timestamp.as_ref().map(|t| &t.from)
                {
                    names.push(t.as_str().to_string());
                }
                names.sort();
                self.headers.push((list.clone(), names.join(",")));
            }
        }
    }

    /// Write the event id where the spec reads it: a header, or a signed id the
    /// body lacks (Mailgun's token).
    fn place_event_id(&mut self) -> Result<(), SignError> {
        match self.spec.event_id.first().and_then(|t| t.single()) {
            Some(ValueSource::Header(h)) if !self.headers.iter().any(|(n, _)| n == h) => {
                self.headers.push((h.clone(), self.input.id.to_string()));
            }
            // A signed id the body lacks (Mailgun's token) is filled in with the id.
            Some(src @ ValueSource::Json(ptr))
                if self.spec.content.contains(&Segment::Value(src.clone())) =>
            {
                let doc = self.json()?;
                if doc.pointer(ptr).is_none() {
                    let id = serde_json::Value::String(self.input.id.to_string());
                    self.write_json(ptr, id)?;
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// Write the event type in its header, when the spec reads it from one and the
    /// input has one.
    fn place_event_type(&mut self) {
        if let (Some(ValueSource::Header(h)), Some(t)) = (
            self.spec.event_type.first().and_then(|t| t.single()),
            self.input.event_type,
        ) && !self.headers.iter().any(|(n, _)| n == h)
        {
            self.headers.push((h.clone(), t.to_string()));
        }
    }

    /// Write the signature's value where the spec reads it.
    fn place_signature(&mut self, value: String) -> Result<(), SignError> {
        match &self.spec.signature_from {
            ValueSource::Header(h) => self.headers.push((h.clone(), value)),
            ValueSource::Json(ptr) => self.write_json(ptr, serde_json::Value::String(value))?,
            other => {
                return Err(self.unfillable(other));
            }
        }
        Ok(())
    }

    /// The body as it stands: the JSON written into, or the input body.
    fn body(&self) -> Vec<u8> {
        match &self.json {
            Some(doc) if self.modified => serde_json::to_vec(doc).unwrap_or_default(),
            _ => self.input.body.to_vec(),
        }
    }

    /// The signed request.
    fn finish(self) -> Signed {
        Signed {
            headers: self.headers,
            body: self
                .json
                .filter(|_| self.modified)
                .map(|doc| serde_json::to_vec(&doc).unwrap_or_default()),
        }
    }
}
