//! Asana's handshake (spec handshake `hook-secret`): when a webhook is created, the
//! provider POSTs an `X-Hook-Secret` header, expects it back in the answer, and signs
//! every later request of that webhook with it. The secret arrives in a request that
//! carries nothing the provider signed, and anyone can send such a request, so the
//! gateway takes it only while an operator has armed the source's handshake (admin
//! API `POST /admin/sources/{name}/handshake`, `hookgate sources handshake`), and
//! only from the handshake that presents the arming's one-time token in its URL
//! (`?hookgate_handshake=<token>`, [`TOKEN_PARAM`]): the operator creates the webhook
//! with that URL as its target, so the provider's handshake carries the token and an
//! outsider polling the endpoint during the window does not. The store keeps the
//! secret and disarms the handshake in one step (`store::secrets`), so one arming
//! establishes one secret whichever gateway the handshake reaches. Refused: a
//! handshake without the token or with another (401 `handshake_token`, decided
//! without the store when there is none, and leaving the arming for the genuine
//! handshake), one while not armed (401 `handshake_not_armed`); both are counted and
//! in the rejection log, which never keeps the secret or the token
//! ([`redact_token`]). The provider's later requests keep the parameter in their URL;
//! nothing else reads it.
//!
//! [`Established`] holds a source's keys: its configured secrets and the ones
//! established, read from the store when first needed, again when older than
//! [`REFRESH_EVERY`], and at once (at most every [`RETRY_EVERY`]) when a request
//! matches none of them, so a secret another gateway established verifies at once
//! here, while a stream of forgeries costs the store one read a second.

use std::borrow::Cow;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use super::{IngestState, Source};
use crate::config::Secret;
use crate::error::ApiError;
use crate::provider::Key;
use crate::provider::spec::{Handshake, Spec};
use crate::provider::verify::{VerifyError, prepare_keys};
use crate::store::{
    Actor, ControlAction, ControlEvent, Establish, EstablishedSecret, Store, StoreError,
    TOKEN_PARAM, TokenHash,
};

/// The header the provider sends its secret in, and expects back.
pub const HEADER: &str = "x-hook-secret";
/// The longest secret taken (Asana's are 64 hex digits).
const MAX_SECRET: usize = 256;
/// The longest token read from a handshake's URL (an arming's are 43 characters).
const MAX_TOKEN: usize = 256;
/// How long the keys read from the store are used before they are read again.
pub const REFRESH_EVERY: Duration = Duration::from_secs(30);
/// How often a request that matches no key may have the keys read again.
pub const RETRY_EVERY: Duration = Duration::from_secs(1);
/// Who the control audit names for a secret a provider established.
pub const HANDSHAKE_ACTOR: &str = "handshake";

/// Whether `headers` are the provider's secret handshake to `source`.
pub(super) fn is_handshake(source: &Source, headers: &HeaderMap) -> bool {
    source.verifier.spec.handshake == Some(Handshake::HookSecret) && headers.contains_key(HEADER)
}

/// The arming token a handshake's URL query presents, if it presents one.
fn presented_token(query: Option<&str>) -> Option<String> {
    form_urlencoded::parse(query?.as_bytes())
        .find(|(k, _)| k == TOKEN_PARAM)
        .map(|(_, v)| v.into_owned())
        .filter(|v| !v.is_empty() && v.len() <= MAX_TOKEN)
}

/// Answer the handshake: keep the secret if the source's handshake is armed and the
/// request's URL (`query`) carries the arming's token, and echo it; refuse it
/// otherwise.
pub(super) async fn answer(
    ingest: &IngestState,
    source: &Source,
    headers: &HeaderMap,
    query: Option<&str>,
    client: Option<std::net::IpAddr>,
) -> Result<Response, ApiError> {
    let value = headers
        .get(HEADER)
        .and_then(|v| v.to_str().ok())
        .filter(|v| {
            !v.is_empty() && v.len() <= MAX_SECRET && v.bytes().all(|b| b.is_ascii_graphic())
        })
        .ok_or(ApiError::Unverified(VerifyError::MalformedSignature))?;
    // No token: refused before the store is asked, so polling the endpoint costs
    // it nothing and learns nothing of the arming.
    let token = presented_token(query)
        .map(|t| TokenHash::of(&t))
        .ok_or(ApiError::Unverified(VerifyError::HandshakeToken))?;
    let now = ingest.clock.now_ms();
    let secret = EstablishedSecret::new(value, now);
    let kept = tokio::time::timeout(
        ingest.store_timeout,
        ingest
            .store
            .establish_secret(&source.name, &secret, &token, now),
    )
    .await
    .unwrap_or(Err(StoreError::Timeout(ingest.store_timeout)))
    .map_err(ApiError::NotStored)?;
    let kept = match kept {
        Establish::Kept(kept) => kept,
        Establish::NotArmed => return Err(ApiError::Unverified(VerifyError::HandshakeNotArmed)),
        Establish::WrongToken => return Err(ApiError::Unverified(VerifyError::HandshakeToken)),
        Establish::Full => return Err(ApiError::Unverified(VerifyError::TooManySecrets)),
    };
    if let Some(established) = &source.established {
        established.learn(&kept);
    }
    tracing::info!(source = %source.name, secret_id = %kept.id, "a secret was established in the source's armed handshake");
    let audit = ControlEvent {
        at: now,
        action: ControlAction::EstablishSecret,
        source: source.name.clone(),
        route: None,
        by: Actor {
            name: HANDSHAKE_ACTOR.to_string(),
            session: None,
            client: client.map(|c| c.to_string()),
        },
    };
    if let Err(e) = ingest.store.record_control(&audit).await {
        tracing::warn!(source = %source.name, error = %e, "the control audit did not take the established secret");
    }
    let echoed = HeaderValue::from_str(value)
        .map_err(|_| ApiError::Unverified(VerifyError::MalformedSignature))?;
    let mut resp = StatusCode::OK.into_response();
    resp.headers_mut().insert(HEADER, echoed);
    Ok(resp)
}

/// `value` (a header's) with the arming token of any `hookgate_handshake=` in it
/// replaced by `[redacted]`: a proxy may copy the request's URL into a header
/// (`X-Forwarded-Uri`, `X-Original-URL`, `Referer`), and the rejection log keeps
/// headers. The token ends at the first character a URL or a header list ends a
/// value with.
pub(crate) fn redact_token(value: &str) -> Cow<'_, str> {
    let mark = format!("{TOKEN_PARAM}=");
    if !value.contains(&mark) {
        return Cow::Borrowed(value);
    }
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    while let Some(at) = rest.find(&mark) {
        let start = at + mark.len();
        out.push_str(&rest[..start]);
        let tail = &rest[start..];
        let end = tail
            .find(|c: char| matches!(c, '&' | '#' | ';' | ',' | '"' | '\'') || c.is_whitespace())
            .unwrap_or(tail.len());
        if end > 0 {
            out.push_str("[redacted]");
        }
        rest = &tail[end..];
    }
    out.push_str(rest);
    Cow::Owned(out)
}

/// A source's keys: its configured secrets and those established in handshakes.
#[derive(Debug)]
pub struct Established {
    name: String,
    spec: Arc<Spec>,
    configured: Vec<Secret>,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    /// The established secrets the keys were made of (newest read).
    secrets: Vec<EstablishedSecret>,
    keys: Arc<Vec<Key>>,
    /// When the store was last read, if ever.
    read_at: Option<Instant>,
    /// When a read was last tried, if ever.
    tried_at: Option<Instant>,
}

/// Why the keys are read again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refresh {
    /// Before a request is verified: only when never read, or older than
    /// [`REFRESH_EVERY`].
    IfStale,
    /// A request matched none of the keys: at most every [`RETRY_EVERY`].
    AfterMismatch,
}

impl Established {
    pub fn new(name: &str, spec: Arc<Spec>, configured: Vec<Secret>) -> Established {
        let keys = prepare_keys(&spec, &configured).unwrap_or_default();
        Established {
            name: name.to_string(),
            spec,
            configured,
            state: Mutex::new(State {
                secrets: Vec::new(),
                keys: Arc::new(keys),
                read_at: None,
                tried_at: None,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The keys to verify with now.
    pub fn keys(&self) -> Arc<Vec<Key>> {
        self.lock().keys.clone()
    }

    /// Read the established secrets again if `why` calls for it; whether the keys
    /// changed. A store that does not answer within `timeout` keeps the keys in
    /// use, unless they were never read: then the request cannot be verified now.
    pub async fn refresh(
        &self,
        store: &dyn Store,
        timeout: Duration,
        why: Refresh,
    ) -> Result<bool, StoreError> {
        let now = Instant::now();
        {
            let mut state = self.lock();
            let due = match why {
                Refresh::IfStale => state
                    .read_at
                    .is_none_or(|at| now.duration_since(at) >= REFRESH_EVERY),
                Refresh::AfterMismatch => state
                    .tried_at
                    .is_none_or(|at| now.duration_since(at) >= RETRY_EVERY),
            };
            if !due {
                return Ok(false);
            }
            state.tried_at = Some(now);
        }
        let read = tokio::time::timeout(timeout, store.established_secrets(&self.name))
            .await
            .unwrap_or(Err(StoreError::Timeout(timeout)));
        let secrets = match read {
            Ok(secrets) => secrets,
            Err(e) if self.lock().read_at.is_none() => return Err(e),
            Err(e) => {
                tracing::warn!(source = %self.name, error = %e, "cannot read the source's established secrets; the ones read before stay in use");
                return Ok(false);
            }
        };
        Ok(self.replace(secrets, Some(now)))
    }

    /// Add a secret this process saw established.
    pub fn learn(&self, secret: &EstablishedSecret) {
        let mut secrets = self.lock().secrets.clone();
        if !secrets.iter().any(|s| s.id == secret.id) {
            secrets.push(secret.clone());
        }
        self.replace(secrets, None);
    }

    /// Drop a secret this process saw forgotten.
    pub fn forget(&self, id: &str) {
        let mut secrets = self.lock().secrets.clone();
        secrets.retain(|s| s.id != id);
        self.replace(secrets, None);
    }

    /// Make the keys of `secrets`; whether they changed.
    fn replace(&self, secrets: Vec<EstablishedSecret>, read_at: Option<Instant>) -> bool {
        let mut all = self.configured.clone();
        all.extend(secrets.iter().map(|s| Secret::new(s.secret.clone())));
        // A secret that makes no key (the spec's encoding refuses it) is left out.
        let keys: Vec<Key> = all
            .iter()
            .filter_map(|s| prepare_keys(&self.spec, std::slice::from_ref(s)).ok())
            .flatten()
            .collect();
        let mut state = self.lock();
        if read_at.is_some() {
            state.read_at = read_at;
        }
        let changed = state.secrets != secrets;
        state.secrets = secrets;
        state.keys = Arc::new(keys);
        changed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_is_read_from_its_query_parameter_only() {
        assert_eq!(presented_token(None), None);
        assert_eq!(presented_token(Some("")), None);
        assert_eq!(presented_token(Some("hookgate_handshake=")), None);
        assert_eq!(presented_token(Some("other=abc")), None);
        assert_eq!(
            presented_token(Some("a=1&hookgate_handshake=abc-_1&b=2")).as_deref(),
            Some("abc-_1")
        );
        assert_eq!(
            presented_token(Some("hookgate_handshake=a%2Bb")).as_deref(),
            Some("a+b")
        );
        let long = format!("hookgate_handshake={}", "x".repeat(MAX_TOKEN + 1));
        assert_eq!(presented_token(Some(&long)), None);
    }

    #[test]
    fn a_token_in_a_header_is_redacted_wherever_the_url_is_copied() {
        assert_eq!(redact_token("Asana/1.0"), "Asana/1.0");
        assert_eq!(
            redact_token("/ingest/asana?hookgate_handshake=s3cr3t-_x"),
            "/ingest/asana?hookgate_handshake=[redacted]"
        );
        assert_eq!(
            redact_token("https://h/ingest/asana?a=1&hookgate_handshake=s3cr3t&b=2#f"),
            "https://h/ingest/asana?a=1&hookgate_handshake=[redacted]&b=2#f"
        );
        assert_eq!(
            redact_token("for=1.2.3.4;uri=\"/i?hookgate_handshake=t1\", x hookgate_handshake=t2"),
            "for=1.2.3.4;uri=\"/i?hookgate_handshake=[redacted]\", x hookgate_handshake=[redacted]"
        );
        assert_eq!(
            redact_token("hookgate_handshake=&x"),
            "hookgate_handshake=&x"
        );
    }
}
