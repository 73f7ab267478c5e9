//! Who an admin API request acts as: the [`Actor`] its audit records name. The
//! name is the `X-Hookgate-Actor` header (the CLI sends the user name), else
//! `admin`; the client is the address the request came from (`serve::Peer`). The
//! name is the caller's say; the address is the connection's.

use axum::extract::FromRequestParts;
use axum::http::HeaderMap;
use axum::http::request::Parts;

use crate::serve::Peer;
use crate::store::Actor;

/// The actor name of an API request that names none.
pub const DEFAULT_ACTOR: &str = "admin";

/// The longest actor name kept, in characters.
const MAX_ACTOR_CHARS: usize = 100;

/// The [`Actor`] of an API request (an extractor: it never fails).
pub struct ApiActor(pub Actor);

impl<S: Send + Sync> FromRequestParts<S> for ApiActor {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<ApiActor, Self::Rejection> {
        Ok(ApiActor(Actor {
            name: actor_name(&parts.headers),
            session: None,
            client: client_address(parts.extensions.get::<Peer>()),
        }))
    }
}

/// The address a request came from, as audit records keep it.
pub fn client_address(peer: Option<&Peer>) -> Option<String> {
    peer.map(|p| p.addr.ip().to_canonical().to_string())
}

/// `X-Hookgate-Actor`, at most [`MAX_ACTOR_CHARS`], else [`DEFAULT_ACTOR`].
fn actor_name(headers: &HeaderMap) -> String {
    headers
        .get("x-hookgate-actor")
        .and_then(|v| v.to_str().ok())
        .map(|s| s.chars().take(MAX_ACTOR_CHARS).collect::<String>())
        .filter(|s| !s.trim().is_empty())
        .unwrap_or_else(|| DEFAULT_ACTOR.to_string())
}
