//! Keys: a source's secrets decoded for its provider's algorithms, once, when the
//! source is built. An HMAC key is kept after its key schedule and cloned per
//! request; a token is kept as its SHA-256; a public key is parsed once.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Digest as _;

use crate::config::Secret;
use crate::provider::spec::{Algorithm, SecretEncoding, Spec};

/// A secret that cannot be turned into a key for its provider.
#[derive(Debug, thiserror::Error)]
#[error("secret #{index} is not valid for provider {provider:?}: {problem}")]
pub struct KeyError {
    pub provider: String,
    pub index: usize,
    pub problem: &'static str,
}

/// A key ready to use: the HMAC state after the key schedule (cloned per request), the
/// SHA-256 of a plain token, or a provider's public key.
#[derive(Clone)]
pub enum Key {
    Sha256(Hmac<sha2::Sha256>),
    Sha1(Hmac<sha1::Sha1>),
    Sha512(Hmac<sha2::Sha512>),
    Token([u8; 32]),
    Ed25519(ed25519_dalek::VerifyingKey),
    EcdsaP256(p256::ecdsa::VerifyingKey),
    /// A certificate scheme's secret: a value the request is bound to (PayPal's
    /// webhook id, an SNS topic), not a key.
    Bound(std::sync::Arc<str>),
    /// A fetched certificate's RSA public key (PKCS#1 `RSAPublicKey`, DER).
    Rsa(std::sync::Arc<[u8]>),
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Key([redacted])")
    }
}

impl Key {
    pub(super) fn is_public(&self) -> bool {
        matches!(self, Key::Ed25519(_) | Key::EcdsaP256(_) | Key::Rsa(_))
    }

    /// The HMAC of `data`, for HMAC keys.
    pub fn mac(&self, data: &[u8]) -> Option<Vec<u8>> {
        fn run<M: Mac + Clone>(keyed: &M, data: &[u8]) -> Vec<u8> {
            let mut mac = keyed.clone();
            mac.update(data);
            mac.finalize().into_bytes().to_vec()
        }
        match self {
            Key::Sha256(k) => Some(run(k, data)),
            Key::Sha1(k) => Some(run(k, data)),
            Key::Sha512(k) => Some(run(k, data)),
            Key::Token(_) | Key::Ed25519(_) | Key::EcdsaP256(_) | Key::Bound(_) | Key::Rsa(_) => {
                None
            }
        }
    }
}

/// Decode the secrets of a source into keys for its provider: one key per secret and
/// algorithm, secret by secret, so the first key is the first secret under the
/// spec's first algorithm.
pub fn prepare_keys(spec: &Spec, secrets: &[Secret]) -> Result<Vec<Key>, KeyError> {
    let mut keys = Vec::with_capacity(secrets.len() * spec.algorithms.len());
    for (index, s) in secrets.iter().enumerate() {
        let err = |problem| KeyError {
            provider: spec.name.clone(),
            index,
            problem,
        };
        let raw = s.expose();
        let bytes = match spec.secret_encoding {
            SecretEncoding::Utf8 => raw.as_bytes().to_vec(),
            SecretEncoding::WhsecBase64 => B64
                .decode(raw.strip_prefix("whsec_").unwrap_or(raw))
                .map_err(|_| err("expected whsec_ followed by base64"))?,
            SecretEncoding::Base64 => B64.decode(raw.trim()).map_err(|_| err("expected base64"))?,
            SecretEncoding::Hex => hex::decode(raw.trim()).map_err(|_| err("expected hex"))?,
        };
        if bytes.is_empty() {
            return Err(err("the decoded secret is empty"));
        }
        // A certificate scheme's secret binds the request; the key is fetched.
        if spec.jwk.is_some() && !raw.contains(':') {
            return Err(err(
                "expected client_id:secret, the credentials of the provider's API",
            ));
        }
        if spec.fetches_key() {
            keys.push(Key::Bound(raw.into()));
            continue;
        }
        for algorithm in &spec.algorithms {
            let hmac_err = |_| err("invalid HMAC key");
            keys.push(match algorithm {
                Algorithm::HmacSha256 => {
                    Key::Sha256(Hmac::new_from_slice(&bytes).map_err(hmac_err)?)
                }
                Algorithm::HmacSha1 => Key::Sha1(Hmac::new_from_slice(&bytes).map_err(hmac_err)?),
                Algorithm::HmacSha512 => {
                    Key::Sha512(Hmac::new_from_slice(&bytes).map_err(hmac_err)?)
                }
                Algorithm::Token => {
                    // The token arrives as a header value, read as visible ASCII and
                    // trimmed: any other secret could never match.
                    if !token_can_arrive(&bytes) {
                        return Err(err(
                            "a token must be printable ASCII without leading or trailing spaces",
                        ));
                    }
                    Key::Token(sha2::Sha256::digest(&bytes).into())
                }
                Algorithm::Ed25519 => {
                    let arr: [u8; 32] = bytes
                        .as_slice()
                        .try_into()
                        .map_err(|_| err("expected a 32-byte Ed25519 public key"))?;
                    Key::Ed25519(
                        ed25519_dalek::VerifyingKey::from_bytes(&arr)
                            .map_err(|_| err("not a valid Ed25519 public key"))?,
                    )
                }
                Algorithm::EcdsaP256Sha256 => {
                    Key::EcdsaP256(parse_p256_key(&bytes).ok_or_else(|| {
                        err("expected a P-256 public key (DER SubjectPublicKeyInfo or SEC1 point)")
                    })?)
                }
                // Handled above: no key is made of the secret.
                Algorithm::RsaSha1 | Algorithm::RsaSha256 => continue,
            });
        }
    }
    Ok(keys)
}

/// Whether a token can be sent as a header value and read back the same: printable
/// ASCII, no space at either end.
fn token_can_arrive(bytes: &[u8]) -> bool {
    bytes.iter().all(|b| (0x20..=0x7e).contains(b))
        && bytes.first().is_some_and(|b| *b != b' ')
        && bytes.last().is_some_and(|b| *b != b' ')
}

fn parse_p256_key(bytes: &[u8]) -> Option<p256::ecdsa::VerifyingKey> {
    use p256::pkcs8::DecodePublicKey as _;
    match bytes.first() {
        Some(0x02..=0x04) if matches!(bytes.len(), 33 | 65) => {
            p256::ecdsa::VerifyingKey::from_sec1_bytes(bytes).ok()
        }
        _ => p256::ecdsa::VerifyingKey::from_public_key_der(bytes).ok(),
    }
}
