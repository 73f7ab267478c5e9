//! The keys of `[jwk]` schemes (Plaid): the request is an ES256 JWS whose header
//! names its key by `kid`, and the provider's API gives that key, as a JWK, to
//! whoever holds the account's API credentials (the source's secret,
//! `client_id:secret`).
//!
//! The URL asked is built from the spec's template (Plaid: the environment the
//! signed body names) and must be `https://` on one of the spec's hosts, on the
//! default port, so that the credentials never go anywhere else; the request is a
//! POST of `{"client_id", "secret", "key_id"}`. Keys are kept and fetched under the
//! same bounds as certificates (`provider::certificate::FetchedKeys`): a key is
//! kept a day (never past its `expired_at`), a failure 10 s, at most 30 fetches a
//! minute. An unknown `kid` refuses the request; any other failure answers 503, so
//! that the provider retries.

use std::sync::Arc;

use super::certificate::{FetchedKeyError, https_on_hosts};
use super::spec::JwkRule;

/// The longest JWK answer read.
pub const MAX_BYTES: usize = 16 * 1024;

/// What is asked for one request's key, once its URL is checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JwkRequest {
    /// The URL as the template built it (with the key id, the cache key).
    pub named: String,
    /// What is asked: the same, or its path on the spec's `fetch_base`.
    pub fetched: String,
    /// The token's `kid`.
    pub key_id: String,
}

/// Check the URL `url` built for the key `key_id` against `rule`.
pub fn check(rule: &JwkRule, url: &str, key_id: &str) -> Result<JwkRequest, FetchedKeyError> {
    if url.len() > 2048 {
        return Err(FetchedKeyError::Refused);
    }
    let uri: http::Uri = url.parse().map_err(|_| FetchedKeyError::Refused)?;
    if !https_on_hosts(&uri, &rule.hosts) || uri.query().is_some() {
        return Err(FetchedKeyError::Refused);
    }
    let path = uri.path();
    Ok(JwkRequest {
        named: url.to_string(),
        fetched: match &rule.fetch_base {
            Some(base) => format!("{base}{path}"),
            None => url.to_string(),
        },
        key_id: key_id.to_string(),
    })
}

/// The body of the key request: the account's credentials and the key id.
pub fn request_body(credentials: &str, key_id: &str) -> Option<serde_json::Value> {
    let (client_id, secret) = credentials.split_once(':')?;
    Some(serde_json::json!({
        "client_id": client_id,
        "secret": secret,
        "key_id": key_id,
    }))
}

/// The P-256 public key (SEC1, uncompressed) of the JWK in `answer` (`{"key":
/// {…}}` or the JWK itself), if it is an EC P-256 signing key for `key_id` that has
/// not expired at `now` (unix seconds); and when it expires, if it does.
pub fn ec_key_of(
    answer: &[u8],
    key_id: &str,
    now: i64,
) -> Result<(Arc<[u8]>, Option<i64>), FetchedKeyError> {
    use base64::Engine as _;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let doc: serde_json::Value =
        serde_json::from_slice(answer).map_err(|_| FetchedKeyError::Invalid("not JSON"))?;
    let jwk = doc.get("key").unwrap_or(&doc);
    let text = |k: &str| jwk.get(k).and_then(|v| v.as_str());
    if text("kty") != Some("EC") || text("crv") != Some("P-256") {
        return Err(FetchedKeyError::Invalid("not an EC P-256 key"));
    }
    if text("kid").is_some_and(|k| k != key_id) {
        return Err(FetchedKeyError::Invalid("a key with another id"));
    }
    if text("use").is_some_and(|u| u != "sig") || text("alg").is_some_and(|a| a != "ES256") {
        return Err(FetchedKeyError::Invalid("not an ES256 signing key"));
    }
    let expires = match jwk.get("expired_at") {
        None | Some(serde_json::Value::Null) => None,
        Some(v) => Some(
            v.as_i64()
                .ok_or(FetchedKeyError::Invalid("expired_at is not a time"))?,
        ),
    };
    if expires.is_some_and(|at| at <= now) {
        return Err(FetchedKeyError::Invalid("the key has expired"));
    }
    let coordinate = |k: &str| {
        text(k)
            .and_then(|c| URL_SAFE_NO_PAD.decode(c).ok())
            .filter(|c| c.len() == 32)
            .ok_or(FetchedKeyError::Invalid(
                "a coordinate is not 32 bytes of base64url",
            ))
    };
    let mut point = vec![0x04];
    point.extend(coordinate("x")?);
    point.extend(coordinate("y")?);
    p256::ecdsa::VerifyingKey::from_sec1_bytes(&point)
        .map_err(|_| FetchedKeyError::Invalid("not a point of P-256"))?;
    Ok((point.into(), expires))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(fetch_base: Option<&str>) -> JwkRule {
        JwkRule {
            url: crate::provider::spec::parse_value_template(
                "https://{json:/environment}.plaid.com/webhook_verification_key/get",
            )
            .unwrap(),
            hosts: vec!["production.plaid.com".into(), "sandbox.plaid.com".into()],
            fetch_base: fetch_base.map(str::to_string),
        }
    }

    #[test]
    fn the_key_api_is_asked_only_on_the_providers_hosts() {
        let url = "https://sandbox.plaid.com/webhook_verification_key/get";
        let asked = check(&rule(None), url, "kid-1").unwrap();
        assert_eq!((asked.named.as_str(), asked.fetched.as_str()), (url, url));
        let local = check(&rule(Some("http://127.0.0.1:9")), url, "kid-1").unwrap();
        assert_eq!(
            local.fetched,
            "http://127.0.0.1:9/webhook_verification_key/get"
        );
        for bad in [
            "https://evil.plaid.com/webhook_verification_key/get",
            "https://sandbox.plaid.com.evil.example/webhook_verification_key/get",
            "http://sandbox.plaid.com/webhook_verification_key/get",
            "https://sandbox.plaid.com:444/webhook_verification_key/get",
            "https://u@sandbox.plaid.com/webhook_verification_key/get",
            "https://sandbox.plaid.com/webhook_verification_key/get?x=1",
        ] {
            assert_eq!(
                check(&rule(None), bad, "kid-1"),
                Err(FetchedKeyError::Refused),
                "{bad}"
            );
        }
        assert_eq!(
            request_body("client-1:secret:with:colons", "kid-1"),
            Some(
                serde_json::json!({"client_id": "client-1", "secret": "secret:with:colons", "key_id": "kid-1"})
            )
        );
        assert_eq!(request_body("no-colon", "kid-1"), None);
    }

    #[test]
    fn only_live_p256_signing_keys_are_taken() {
        // The answer in Plaid's documentation (webhook verification, step 2).
        let doc = r#"{"key":{"alg":"ES256","created_at":1560466150,"crv":"P-256","expired_at":null,"kid":"bfbd5111-8e33-4643-8ced-b2e642a72f3c","kty":"EC","use":"sig","x":"hKXLGIjWvCBv-cP5euCTxl8g9GLG9zHo_3pO5NN1DwQ","y":"shhexqPB7YffGn6fR6h2UhTSuCtPmfzQJ6ENVIoO4Ys"},"request_id":"RZ6Omi1bzzwDaLo"}"#;
        let kid = "bfbd5111-8e33-4643-8ced-b2e642a72f3c";
        let (point, expires) = ec_key_of(doc.as_bytes(), kid, 1_700_000_000).unwrap();
        assert_eq!((point.len(), expires), (65, None));
        assert!(ec_key_of(doc.as_bytes(), "another-kid", 1_700_000_000).is_err());
        let expired = doc.replace(r#""expired_at":null"#, r#""expired_at":1600000000"#);
        assert_eq!(
            ec_key_of(expired.as_bytes(), kid, 1_700_000_000),
            Err(FetchedKeyError::Invalid("the key has expired"))
        );
        let later = doc.replace(r#""expired_at":null"#, r#""expired_at":1800000000"#);
        assert_eq!(
            ec_key_of(later.as_bytes(), kid, 1_700_000_000).map(|(_, e)| e),
            Ok(Some(1_800_000_000))
        );
        for bad in [
            doc.replace(r#""kty":"EC""#, r#""kty":"RSA""#),
            doc.replace(r#""crv":"P-256""#, r#""crv":"P-384""#),
            doc.replace(r#""use":"sig""#, r#""use":"enc""#),
            doc.replace("hKXLGIjWvCBv", "hKXLGIjWvCBw"),
            doc.replace("hKXLGIjWvCBv-cP5euCTxl8g9GLG9zHo_3pO5NN1DwQ", "AAAA"),
            "not json".to_string(),
        ] {
            assert!(
                ec_key_of(bad.as_bytes(), kid, 1_700_000_000).is_err(),
                "{bad}"
            );
        }
    }
}
