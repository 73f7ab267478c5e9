//! Secrets a provider gave the gateway itself, in a handshake, rather than the
//! operator in the configuration (Asana's `X-Hook-Secret`, spec handshake
//! `hook-secret`). Anyone can send such a handshake, so the store takes one only while
//! an operator has armed the source's handshake and only from the handshake that
//! presents the arming's one-time token ([`HandshakeToken`]: the operator puts it in
//! the URL given to the provider, so an outsider polling the endpoint during the
//! window never has it), and takes it atomically with disarming it: one arming, one
//! secret, on every gateway sharing the store. A handshake with a wrong token or none
//! leaves the arming as it was, so such requests cannot use it up either. The store
//! keeps only the token's SHA-256 ([`TokenHash`]). The secrets are kept per source,
//! at most [`MAX_ESTABLISHED_SECRETS`] (a provider gives one per webhook it creates),
//! until an operator forgets one.

use base64::Engine as _;
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

/// The query parameter that carries an arming's token in the handshake's URL
/// (`?hookgate_handshake=<token>`); every other request ignores it.
pub const TOKEN_PARAM: &str = "hookgate_handshake";

/// The one-time token of an arming: 32 random bytes, base64url without padding (43
/// characters, safe in a URL as they are). Shown once, in the arming's answer;
/// [`Debug`](std::fmt::Debug) hides it, and the store keeps only its [`TokenHash`].
#[derive(Clone, PartialEq, Eq)]
pub struct HandshakeToken(String);

impl std::fmt::Debug for HandshakeToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HandshakeToken([redacted])")
    }
}

impl HandshakeToken {
    /// A new token, from the operating system's random source.
    pub fn generate() -> Result<HandshakeToken, getrandom::Error> {
        let mut bytes = [0u8; 32];
        getrandom::fill(&mut bytes)?;
        Ok(HandshakeToken(
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes),
        ))
    }

    /// The token itself, for the one answer that shows it.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// What the store keeps of it.
    pub fn hash(&self) -> TokenHash {
        TokenHash::of(&self.0)
    }
}

/// The SHA-256 (hex) of a handshake token, as presented or as an arming gave it:
/// what the store keeps and compares. A token is 256 random bits, so its digest
/// tells nothing of it, and a store that leaks tells nobody a token that works.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenHash(String);

impl TokenHash {
    /// The hash of `token` (any text: a presented token is not checked for form).
    pub fn of(token: &str) -> TokenHash {
        TokenHash(hex::encode(sha2::Sha256::digest(token.as_bytes())))
    }

    /// The hash as kept: 64 lower-case hex digits.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether `kept` (a hash a store read back) is this one, compared in constant
    /// time, as hookgate compares a credential wherever it compares one itself (a
    /// store that compares inside a script compares the hashes with an equality:
    /// how much of a hash matched tells nothing of the token).
    pub fn matches(&self, kept: &str) -> bool {
        use subtle::ConstantTimeEq as _;
        kept.len() == self.0.len() && bool::from(kept.as_bytes().ct_eq(self.0.as_bytes()))
    }
}

/// What [`crate::store::Records::establish_secret`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Establish {
    /// Kept (or already kept: the same secret again), and the handshake disarmed.
    Kept(EstablishedSecret),
    /// The source's handshake is not armed now: nothing kept.
    NotArmed,
    /// The handshake is armed, but the token presented is not its arming's:
    /// nothing kept, and the handshake stays armed.
    WrongToken,
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

    #[test]
    fn a_token_is_random_url_safe_and_debug_hides_it() {
        let a = HandshakeToken::generate().unwrap();
        let b = HandshakeToken::generate().unwrap();
        assert_ne!(a, b);
        assert_eq!(a.expose().len(), 43);
        assert!(
            a.expose()
                .bytes()
                .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_'),
            "{}",
            a.expose()
        );
        assert!(!format!("{a:?}").contains(a.expose()));
        assert_eq!(a.hash(), TokenHash::of(a.expose()));
        assert!(a.hash().matches(TokenHash::of(a.expose()).as_str()));
        assert!(!a.hash().matches(b.hash().as_str()));
        assert!(!a.hash().matches(""));
        assert_ne!(a.hash(), b.hash());
        assert_eq!(a.hash().as_str().len(), 64);
        assert!(!a.hash().as_str().contains(a.expose()));
    }
}
