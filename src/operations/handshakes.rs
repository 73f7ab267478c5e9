//! A source's secret handshake (Asana's `X-Hook-Secret`, see
//! `ingest::hook_secret`): arm it for a while before creating the provider's
//! webhook (the arming's one-time token goes in the webhook's target URL), see what
//! is armed and which secrets were established, and forget a secret (the webhook it
//! signed is gone, or it leaked). Each action is kept in the control audit, never
//! the token.

use std::time::Duration;

use super::dto::{self, ArmedHandshake, HandshakeState};
use super::entries::rfc3339;
use super::{OpError, Operations, SourceFacts};
use crate::store::{Actor, ControlAction, ControlEvent, HandshakeToken, TOKEN_PARAM};

/// How long a handshake stays armed when the operator does not say.
pub const DEFAULT_WINDOW: Duration = Duration::from_secs(600);
/// The longest a handshake may stay armed.
pub const MAX_WINDOW: Duration = Duration::from_secs(3600);

/// The source `name`, if its provider establishes secrets in a handshake.
fn handshake_source(ops: &Operations, name: &str) -> Result<SourceFacts, OpError> {
    let source = ops
        .source(name)
        .ok_or_else(|| OpError::NoSuchSource(name.to_string()))?;
    if source.established.is_none() {
        return Err(OpError::NoHandshake(name.to_string()));
    }
    Ok(source)
}

/// Arm the handshake of `name` for `within` (1 s to [`MAX_WINDOW`]) with a new
/// one-time token, which replaces the token of an arming still running: the answer
/// is the one place the token is shown, with the target URL to give the provider
/// when the source has a `public_url`.
pub async fn arm(
    ops: &Operations,
    name: &str,
    within: Duration,
    by: &Actor,
) -> Result<ArmedHandshake, OpError> {
    let source = handshake_source(ops, name)?;
    if within < Duration::from_secs(1) || within > MAX_WINDOW {
        return Err(OpError::Invalid(format!(
            "within_secs must be 1 to {}",
            MAX_WINDOW.as_secs()
        )));
    }
    let token = HandshakeToken::generate().map_err(OpError::Random)?;
    let now = ops.clock.now_ms();
    let until = now.saturating_add(i64::try_from(within.as_millis()).unwrap_or(i64::MAX));
    ops.store.arm_handshake(name, until, &token.hash()).await?;
    audit(ops, name, ControlAction::ArmHandshake, by, now).await?;
    let secrets = ops.store.established_secrets(name).await?;
    Ok(ArmedHandshake {
        source: name.to_string(),
        armed_until: rfc3339(until),
        target_url: source
            .public_url
            .as_deref()
            .map(|url| target_url(url, &token)),
        token: token.expose().to_string(),
        secrets: secrets.into_iter().map(listed).collect(),
    })
}

/// The URL to create the provider's webhook with: the source's `public_url` (which
/// has no query) with the token (URL-safe as it is).
fn target_url(public_url: &str, token: &HandshakeToken) -> String {
    format!("{public_url}?{TOKEN_PARAM}={}", token.expose())
}

fn listed(s: crate::store::EstablishedSecret) -> dto::EstablishedSecret {
    dto::EstablishedSecret {
        id: s.id,
        established_at: rfc3339(s.established_at),
    }
}

/// Whether the handshake of `name` is armed, and its established secrets.
pub async fn state(ops: &Operations, name: &str) -> Result<HandshakeState, OpError> {
    handshake_source(ops, name)?;
    let now = ops.clock.now_ms();
    let armed = ops.store.handshake_armed(name, now).await?;
    let secrets = ops.store.established_secrets(name).await?;
    Ok(HandshakeState {
        source: name.to_string(),
        armed_until: armed.map(rfc3339),
        secrets: secrets.into_iter().map(listed).collect(),
    })
}

/// Forget the secret `id` of `name`: requests signed with it are refused from now
/// on (in this process at once, in others within `hook_secret::REFRESH_EVERY`).
pub async fn forget(
    ops: &Operations,
    name: &str,
    id: &str,
    by: &Actor,
) -> Result<HandshakeState, OpError> {
    let source = handshake_source(ops, name)?;
    if !ops.store.forget_secret(name, id).await? {
        return Err(OpError::NoSuchSecret {
            name: name.to_string(),
            id: id.to_string(),
        });
    }
    if let Some(established) = &source.established {
        established.forget(id);
    }
    audit(
        ops,
        name,
        ControlAction::ForgetSecret,
        by,
        ops.clock.now_ms(),
    )
    .await?;
    state(ops, name).await
}

async fn audit(
    ops: &Operations,
    name: &str,
    action: ControlAction,
    by: &Actor,
    at: i64,
) -> Result<(), OpError> {
    ops.store
        .record_control(&ControlEvent {
            at,
            action,
            source: name.to_string(),
            route: None,
            by: by.clone(),
        })
        .await?;
    Ok(())
}
