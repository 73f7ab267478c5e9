//! The console's signatures: the session a browser holds after logging in, and the
//! form token every console form carries.
//!
//! A session is a signed cookie, never the admin token: `{expires}.{nonce}.{mac}`,
//! with the expiry (unix milliseconds) inside what is signed so that it cannot be
//! stretched, and a random nonce so that every login has its own form token. The
//! signing key is derived from the admin token (HMAC-SHA256 of a fixed label under
//! the token): every gateway process configured with the same token accepts the
//! session, and a new token logs everyone out.
//!
//! A session's id is a hash of its nonce: what the store keeps of a revoked session
//! (logging out revokes it server-side, see `console::login`) and what audit records
//! name, never the cookie itself.
//!
//! A form token is a MAC of what it is bound to (a session, or the login form), so a
//! page on another site cannot produce it; it is checked in constant time.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq;

/// The session cookie's name over plain HTTP.
pub const COOKIE: &str = "hookgate_console";
/// Its name when the console is served over HTTPS: a browser takes a `__Host-`
/// cookie only with `Secure`, `Path=/` and no `Domain`, so no page of another
/// origin (a plain-HTTP app on the same host included) can set or shadow it.
pub const SECURE_COOKIE: &str = "__Host-hookgate_console";

/// How long a session lasts after its login.
pub const LIFETIME_SECS: i64 = 12 * 3600;
const LIFETIME_MS: i64 = LIFETIME_SECS * 1000;

/// What the session key is derived with; a new label logs every session out (v2:
/// the expiry in milliseconds).
const SESSION_LABEL: &[u8] = b"hookgate console session v2";

/// An HMAC-SHA256 key after its key schedule, cloned for each signature.
#[derive(Clone)]
pub struct Signer(Hmac<Sha256>);

/// The key could not be set up (HMAC takes keys of any length: not expected).
#[derive(Debug, thiserror::Error)]
#[error("cannot set up the console's signing key")]
pub struct KeyError;

/// A session a browser presented (or was just given), checked: its cookie value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    value: String,
    /// A hash of the nonce (hex).
    id: String,
    /// Unix ms.
    expires_at: i64,
}

impl Session {
    /// The cookie's value, as the browser sends it back.
    pub fn value(&self) -> &str {
        &self.value
    }

    /// The session's id: the first half of the SHA-256 of its nonce, in hex.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// When it expires (unix ms).
    pub fn expires_at(&self) -> i64 {
        self.expires_at
    }

    /// When it was issued (unix ms).
    pub fn issued_at(&self) -> i64 {
        self.expires_at - LIFETIME_MS
    }
}

/// The id of the session with `nonce` (hex): the first 16 bytes of its SHA-256.
fn session_id(nonce_hex: &str) -> String {
    use sha2::Digest as _;
    hex::encode(&Sha256::digest(nonce_hex.as_bytes())[..16])
}

/// What a form token is bound to.
#[derive(Debug, Clone, Copy)]
pub enum Bound<'a> {
    /// The forms of a logged-in console.
    Session(&'a Session),
    /// The login form (nobody is logged in yet).
    Login,
    /// The forms of a console without a token (loopback only, nobody logs in).
    Open,
}

impl Signer {
    /// The session signer of every process configured with `token`.
    pub fn from_token(token: &str) -> Result<Signer, KeyError> {
        let mut derive = Hmac::<Sha256>::new_from_slice(token.as_bytes()).map_err(|_| KeyError)?;
        derive.update(SESSION_LABEL);
        Signer::from_key(&derive.finalize().into_bytes())
    }

    /// A signer with `key` (e.g. a per-process random secret).
    pub fn from_key(key: &[u8]) -> Result<Signer, KeyError> {
        Ok(Signer(
            Hmac::<Sha256>::new_from_slice(key).map_err(|_| KeyError)?,
        ))
    }

    /// The MAC of `value` under `purpose`: the purposes never share a MAC.
    fn mac(&self, purpose: &[u8], value: &[u8]) -> [u8; 32] {
        let mut m = self.0.clone();
        m.update(purpose);
        m.update(&[0]);
        m.update(value);
        m.finalize().into_bytes().into()
    }

    /// A new session, valid for [`LIFETIME_SECS`] from `now_ms`.
    pub fn issue(&self, now_ms: i64, nonce: [u8; 16]) -> Session {
        let nonce = hex::encode(nonce);
        let expires_at = now_ms.saturating_add(LIFETIME_MS);
        let signed = format!("{expires_at}.{nonce}");
        let mac = B64.encode(self.mac(b"session", signed.as_bytes()));
        Session {
            value: format!("{signed}.{mac}"),
            id: session_id(&nonce),
            expires_at,
        }
    }

    /// The session `value` stands for, when this signer issued it and it has not
    /// expired at `now_ms` (whether it was revoked is the store's to say).
    pub fn verify(&self, value: &str, now_ms: i64) -> Option<Session> {
        let (signed, mac) = value.rsplit_once('.')?;
        let (expires, nonce) = signed.split_once('.')?;
        let presented = B64.decode(mac).ok()?;
        let want = self.mac(b"session", signed.as_bytes());
        if !bool::from(presented.as_slice().ct_eq(&want[..])) {
            return None;
        }
        let expires_at: i64 = expires.parse().ok()?;
        (now_ms < expires_at).then(|| Session {
            value: value.to_string(),
            id: session_id(nonce),
            expires_at,
        })
    }

    /// The form token of forms bound to `to`.
    pub fn form_token(&self, to: Bound<'_>) -> String {
        B64.encode(self.mac(b"form", bound_bytes(to)))
    }

    /// Whether `presented` is the form token of forms bound to `to` (constant time).
    pub fn form_token_ok(&self, to: Bound<'_>, presented: &str) -> bool {
        let Ok(presented) = B64.decode(presented.trim()) else {
            return false;
        };
        let want = self.mac(b"form", bound_bytes(to));
        bool::from(presented.as_slice().ct_eq(&want[..]))
    }
}

/// A session value has dots and digits, so it never equals the fixed names.
fn bound_bytes(to: Bound<'_>) -> &[u8] {
    match to {
        Bound::Session(s) => s.value.as_bytes(),
        Bound::Login => b"login",
        Bound::Open => b"open",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_800_000_000_000;

    #[test]
    fn a_session_verifies_until_it_expires_and_only_under_its_token() {
        let signer = Signer::from_token("token-a").unwrap();
        let s = signer.issue(NOW, [7; 16]);
        assert!(!s.value().contains("token-a"));
        assert_eq!(signer.verify(s.value(), NOW), Some(s.clone()));
        // Another process with the same token accepts it.
        let twin = Signer::from_token("token-a").unwrap();
        assert!(twin.verify(s.value(), NOW + LIFETIME_MS - 1).is_some());
        assert!(twin.verify(s.value(), NOW + LIFETIME_MS).is_none());
        // Its id is the same wherever it is verified, and is not in the cookie.
        assert_eq!(twin.verify(s.value(), NOW).unwrap().id(), s.id());
        assert!(!s.value().contains(s.id()));
        assert_eq!(s.issued_at(), NOW);
        assert_ne!(signer.issue(NOW, [8; 16]).id(), s.id());
        // A new token logs everyone out.
        let other = Signer::from_token("token-b").unwrap();
        assert!(other.verify(s.value(), NOW).is_none());
    }

    #[test]
    fn a_tampered_session_is_refused() {
        let signer = Signer::from_token("t").unwrap();
        let s = signer.issue(NOW, [1; 16]);
        let (expires, rest) = s.value().split_once('.').unwrap();
        let stretched = format!("{}.{rest}", expires.parse::<i64>().unwrap() + 3600);
        for bad in [
            stretched.as_str(),
            "",
            "...",
            "1.2",
            &s.value()[..s.value().len() - 1],
            &format!("{}x", s.value()),
        ] {
            assert!(signer.verify(bad, NOW).is_none(), "{bad:?}");
        }
    }

    #[test]
    fn form_tokens_are_bound_to_their_session() {
        let signer = Signer::from_token("t").unwrap();
        let a = signer.issue(NOW, [1; 16]);
        let b = signer.issue(NOW, [2; 16]);
        let ta = signer.form_token(Bound::Session(&a));
        assert!(signer.form_token_ok(Bound::Session(&a), &ta));
        assert!(!signer.form_token_ok(Bound::Session(&b), &ta));
        assert!(!signer.form_token_ok(Bound::Login, &ta));
        assert!(!signer.form_token_ok(Bound::Session(&a), ""));
        assert!(!signer.form_token_ok(Bound::Session(&a), "not base64!"));
        let login = signer.form_token(Bound::Login);
        assert!(signer.form_token_ok(Bound::Login, &login));
        assert!(!signer.form_token_ok(Bound::Open, &login));
    }
}
