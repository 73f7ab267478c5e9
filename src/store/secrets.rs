//! Secrets a provider gave the gateway itself, in a handshake, rather than the
//! operator in the configuration (Asana's `X-Hook-Secret`, spec handshake
//! `hook-secret`). Anyone can send such a handshake, so the store takes one only while
//! an operator has armed the source's handshake, and takes it atomically with
//! disarming it: one arming, one secret, on every gateway sharing the store. The
//! secrets are kept per source, at most [`MAX_ESTABLISHED_SECRETS`] (a provider
//! gives one per webhook it creates), until an operator forgets one.

use serde::Serialize;
use sha2::Digest as _;

/// Most secrets kept for one source; a handshake beyond them is refused until an
/// operator forgets one.
pub const MAX_ESTABLISHED_SECRETS: usize = 32;

/// A secret a provider established for a source.
#[derive(Clone, PartialEq, Eq, Serialize)]
pub struct EstablishedSecret {
    /// What names it in the admin API: [`secret_id`] of the secret.
    pub id: String,
    /// The secret itself; never serialized.
    #[serde(skip)]
    pub secret: String,
    /// When the handshake that gave it came (unix ms).
    pub established_at: i64,
}

impl std::fmt::Debug for EstablishedSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EstablishedSecret")
            .field("id", &self.id)
            .field("established_at", &self.established_at)
            .finish_non_exhaustive()
    }
}

impl EstablishedSecret {
    pub fn new(secret: &str, established_at: i64) -> EstablishedSecret {
        EstablishedSecret {
            id: secret_id(secret),
            secret: secret.to_string(),
            established_at,
        }
    }
}

/// The id of a secret: the first 16 hex digits of its SHA-256, which tell the
/// secrets of a source apart without telling anything of them (a provider's secret
/// is a long random value).
pub fn secret_id(secret: &str) -> String {
    let digest = hex::encode(sha2::Sha256::digest(secret.as_bytes()));
    digest[..16].to_string()
}

/// What [`crate::store::Records::establish_secret`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Establish {
    /// Kept (or already kept: the same secret again), and the handshake disarmed.
    Kept(EstablishedSecret),
    /// The source's handshake is not armed now: nothing kept.
    NotArmed,
    /// The source already keeps [`MAX_ESTABLISHED_SECRETS`]: nothing kept, and the
    /// handshake stays armed.
    Full,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_id_is_a_short_digest_and_debug_hides_the_secret() {
        let s = EstablishedSecret::new("b537207f20cbfa02357cf448134da559", 5);
        assert_eq!(s.id.len(), 16);
        assert_eq!(s.id, secret_id("b537207f20cbfa02357cf448134da559"));
        assert_ne!(s.id, secret_id("b537207f20cbfa02357cf448134da55a"));
        let shown = format!("{s:?}");
        assert!(!shown.contains("b537207f"), "{shown}");
        let json = serde_json::to_string(&s).unwrap();
        assert!(!json.contains("b537207f"), "{json}");
    }
}
