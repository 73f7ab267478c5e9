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
//!
//! Its parts: `keys` turns a source's secrets into keys, once; `signature` reads the
//! offered signature and computes the expected one; `context` is what the engine may
//! read from a request, parsed lazily with the help of `form`, `json_pointer` and
//! `url`; `verified` is the verdict and what it tells about the event, its dedupe key
//! included. This file holds the entry points, the limits, the error type and the
//! work counters.

mod context;
mod form;
mod json_pointer;
mod keys;
mod signature;
mod url;
mod verified;

pub use form::{FormError, parse_form};
pub use keys::{Key, KeyError, prepare_keys};
pub use url::{port_variants, request_url};
pub use verified::{EventIdentity, HandshakeReply, Verified};

pub(crate) use context::Context;
pub(crate) use signature::{ParsedSignature, compute, encode_sig, message, parse_signature};

use sha2::Digest as _;
use subtle::{ConditionallySelectable, ConstantTimeEq};

use super::spec::{HeaderFormat, Segment, Spec, UrlPort};
use signature::{PublicMessage, verify_public};

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

/// Add to this thread's work counters.
fn count_work(f: impl FnOnce(&mut Work)) {
    WORK.with(|cell| {
        let mut work = cell.get();
        f(&mut work);
        cell.set(work);
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
        #[error("certificate URL missing or not the provider's")]
        CertificateUrl => "certificate_url",
        #[error("the certificate cannot check signatures")]
        CertificateInvalid => "certificate_invalid",
        #[error("the subscription confirmation URL is not the provider's")]
        SubscribeUrl => "subscribe_url",
        #[error("a secret handshake while the source's handshake is not armed")]
        HandshakeNotArmed => "handshake_not_armed",
        #[error("a secret handshake without the token its arming gave")]
        HandshakeToken => "handshake_token",
        #[error("the source keeps the most established secrets already")]
        TooManySecrets => "too_many_secrets",
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

/// Verify a request at `now` (unix seconds): signature and timestamp window.
pub fn verify<'a>(
    spec: &'a Spec,
    keys: &'a [Key],
    req: Request<'a>,
    now: i64,
) -> Result<Verified<'a>, VerifyError> {
    verify_inner(spec, keys, req, Some(now), None)
}

/// Verify a request of a certificate scheme at `now` (unix seconds): its signature
/// under `fetched`, the key of the certificate the request names (see
/// `provider::certificate`), bound to one of the source's secrets (`keys`).
pub fn verify_certified<'a>(
    spec: &'a Spec,
    keys: &'a [Key],
    req: Request<'a>,
    now: Option<i64>,
    fetched: &'a Key,
) -> Result<Verified<'a>, VerifyError> {
    verify_inner(spec, keys, req, now, Some(fetched))
}

/// Verify the signature only, ignoring the timestamp window (for test vectors whose
/// time is long past, and for tools that re-check stored requests).
pub fn verify_ignoring_timestamp<'a>(
    spec: &'a Spec,
    keys: &'a [Key],
    req: Request<'a>,
) -> Result<Verified<'a>, VerifyError> {
    verify_inner(spec, keys, req, None, None)
}

/// An event hookgate fetched itself from the provider's API, over TLS and with the
/// source's API credential (`crate::reconcile`): authentic by that connection, not
/// by a signature, so none is checked. It reads like a verified request (event id
/// and type, ordering values, the dedupe key a delivery of the same event has).
pub fn fetched<'a>(spec: &'a Spec, req: Request<'a>) -> Verified<'a> {
    Verified {
        ctx: Context::new(req, ParsedSignature::default()),
        spec,
        key: None,
        timestamp: None,
    }
}

/// The signatures `req` offers, decoded, as the engine reads them (for the fuzz
/// target that changes one of them and checks the request is then refused).
#[cfg(any(test, fuzzing))]
pub(crate) fn decode_offered(spec: &Spec, req: &Request<'_>) -> Option<Vec<Vec<u8>>> {
    let ctx = Context::new(*req, ParsedSignature::default());
    parse_signature(spec, &ctx).ok().map(|p| p.signatures)
}

/// The URL forms to try: none when the spec does not sign `{url}`.
fn url_forms(spec: &Spec, url: Option<&str>) -> Result<Vec<Option<String>>, VerifyError> {
    if !spec.signs_url() {
        return Ok(vec![None]);
    }
    let url = url.ok_or(VerifyError::MissingSignedValue)?;
    Ok(match spec.url_port {
        UrlPort::AsIs => vec![Some(url.to_string())],
        UrlPort::Either => port_variants(url).into_iter().map(Some).collect(),
    })
}

/// What a request claims before any key is involved: its offered signature
/// parsed, its timestamp (checked against the window at `now`, when given) and its
/// body bound to a signed digest where the spec has one. A forger controls all of
/// it; what it rules out is rejected before anything costly, a fetch above all.
struct Claims<'a> {
    ctx: Context<'a>,
    ts_text: Option<String>,
    timestamp: Option<i64>,
}

fn read_claims<'a>(
    spec: &'a Spec,
    req: Request<'a>,
    now: Option<i64>,
) -> Result<Claims<'a>, VerifyError> {
    let mut ctx = Context::new(req, ParsedSignature::default());
    ctx.signature = parse_signature(spec, &ctx)?;

    let (ts_text, timestamp) = match &spec.timestamp {
        Some(rule) => {
            let text = ctx.value(&rule.from).ok_or(VerifyError::MissingTimestamp)?;
            let secs = rule
                .unit
                .parse(&text)
                .ok_or(VerifyError::MalformedTimestamp)?;
            if let Some(now) = now {
                let tolerance = i64::try_from(rule.tolerance.as_secs()).unwrap_or(i64::MAX);
                if now.abs_diff(secs) > tolerance.unsigned_abs() {
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
    } else if matches!(spec.format, HeaderFormat::Jws { .. }) {
        // A JWS binds the body only through its digest claim: without it, nothing
        // of the body is signed.
        return Err(VerifyError::MissingSignedValue);
    }
    Ok(Claims {
        ctx,
        ts_text,
        timestamp,
    })
}

/// Whether a request of a scheme whose key is fetched (a certificate, a key by id)
/// could verify at all, judged by what it claims without a signature: its
/// signature parses, its timestamp is within the window at `now`, its body matches
/// its digest claim, the URL it signs is known, and the value a certificate scheme
/// binds (SNS's `TopicArn`) is one of the source's secrets. A request that fails
/// here would fail verification whatever key were fetched, so nothing is fetched
/// for it.
pub fn precheck(spec: &Spec, keys: &[Key], req: Request<'_>, now: i64) -> Result<(), VerifyError> {
    let claims = read_claims(spec, req, Some(now))?;
    url_forms(spec, req.url)?;
    if let Some(rule) = &spec.certificate {
        let [_] = claims.ctx.signature.signatures.as_slice() else {
            return Err(VerifyError::MalformedSignature);
        };
        if let Some(src) = &rule.secret_matches {
            let claimed = claims.ctx.value(src).ok_or(VerifyError::Mismatch)?;
            let bound = keys.iter().any(|k| match k {
                Key::Bound(value) => bool::from(claimed.as_bytes().ct_eq(value.as_bytes())),
                _ => false,
            });
            if !bound {
                return Err(VerifyError::Mismatch);
            }
        }
    }
    Ok(())
}

/// Verify at `now`, or without a timestamp window when `now` is `None`.
fn verify_inner<'a>(
    spec: &'a Spec,
    keys: &'a [Key],
    req: Request<'a>,
    now: Option<i64>,
    fetched: Option<&'a Key>,
) -> Result<Verified<'a>, VerifyError> {
    let Claims {
        mut ctx,
        ts_text,
        timestamp,
    } = read_claims(spec, req, now)?;

    let urls = url_forms(spec, req.url)?;
    // A `[jwk]` scheme: the key is the one fetched for the token's `kid`; the
    // source's secret (the API's credentials) verifies nothing.
    let keys: &[Key] = match fetched {
        Some(key) if spec.jwk.is_some() => std::slice::from_ref(key),
        None if spec.jwk.is_some() => return Err(VerifyError::Mismatch),
        _ => keys,
    };
    if let Some(rule) = &spec.certificate {
        // The key is the certificate's, never a configured one.
        let fetched = fetched.ok_or(VerifyError::Mismatch)?;
        let [offered] = ctx.signature.signatures.as_slice() else {
            return Err(VerifyError::MalformedSignature);
        };
        let offered = offered.clone();
        let bound = |value: &str, ctx: &Context<'_>| match &rule.secret_matches {
            Some(src) => ctx
                .value(src)
                .is_some_and(|got| bool::from(got.as_bytes().ct_eq(value.as_bytes()))),
            None => true,
        };
        let signs_secret = spec.content.contains(&Segment::Secret);
        let mut matched = None;
        for (i, key) in keys.iter().enumerate() {
            let Key::Bound(value) = key else { continue };
            if !bound(value, &ctx) {
                continue;
            }
            ctx.secret = Some(value.clone());
            for url in &urls {
                let msg = message(spec, &ctx, ts_text.as_deref(), url.as_deref())?;
                let msg = PublicMessage { msg, sha256: None };
                if verify_public(fetched, &spec.algorithms, &msg, &offered) {
                    matched = Some(i);
                    break;
                }
            }
            // Without {secret} the message is the same for every secret: checked once.
            if matched.is_some() || !signs_secret {
                break;
            }
        }
        let Some(i) = matched else {
            return Err(VerifyError::Mismatch);
        };
        return Ok(Verified {
            ctx,
            spec,
            key: keys.get(i),
            timestamp,
        });
    }
    let public = keys.iter().any(Key::is_public);
    // A public-key signature is one value: more than one offered is malformed, and
    // each key checks exactly one signature per URL form.
    if public && ctx.signature.signatures.len() > 1 {
        return Err(VerifyError::MalformedSignature);
    }
    let messages = if public {
        let needs_digest = keys.iter().any(|k| matches!(k, Key::EcdsaP256(_)));
        urls.iter()
            .map(|url| {
                let msg = message(spec, &ctx, ts_text.as_deref(), url.as_deref())?;
                let sha256 = needs_digest.then(|| {
                    count_work(|w| w.bytes_hashed += msg.len() as u64);
                    sha2::Sha256::digest(&msg).into()
                });
                Ok(PublicMessage { msg, sha256 })
            })
            .collect::<Result<Vec<_>, VerifyError>>()?
    } else {
        Vec::new()
    };

    let mut matched = subtle::Choice::from(0u8);
    let mut matching_key = 0u32;
    for (i, key) in keys.iter().enumerate() {
        let index = u32::try_from(i).unwrap_or(u32::MAX);
        for (url_index, url) in urls.iter().enumerate() {
            if key.is_public() {
                for offered in &ctx.signature.signatures {
                    let ok = subtle::Choice::from(u8::from(verify_public(
                        key,
                        &spec.algorithms,
                        &messages[url_index],
                        offered,
                    )));
                    matched |= ok;
                    matching_key.conditional_assign(&index, ok);
                }
                continue;
            }
            let expected = compute(spec, key, &ctx, ts_text.as_deref(), url.as_deref())?;
            count_work(|w| w.signatures_checked += ctx.signature.signatures.len() as u32);
            for offered in &ctx.signature.signatures {
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
                matching_key.conditional_assign(&index, ok);
            }
        }
    }
    if !bool::from(matched) {
        return Err(VerifyError::Mismatch);
    }
    Ok(Verified {
        ctx,
        spec,
        key: keys.get(matching_key as usize),
        timestamp,
    })
}
