//! The certificates of certificate schemes (AWS SNS, PayPal): the request names the
//! URL of the certificate whose key signed it, so the key has to be fetched, and a
//! forger names whatever URL they like.
//!
//! So the URL is checked before anything is fetched: `https://` on one of the
//! spec's hosts (`sns.*.amazonaws.com`), the default port, no userinfo, the path
//! ending as the spec says (`.pem`). The fetch follows no redirect, takes at most
//! [`MAX_BYTES`] and [`FETCH_TIMEOUT`], and one URL is fetched by one request at a
//! time. A certificate is kept for [`KEEP`] (and never past its own expiry), a
//! failure for [`KEEP_FAILURE`]; at most [`MAX_CACHED`] URLs are kept and at most
//! [`FETCHES_PER_MINUTE`] fetches start in a minute, so requests naming ever new
//! URLs on the provider's hosts cost a bounded number of fetches. The certificate
//! must be within its validity period and hold an RSA key.
//!
//! A spec's `fetch_base` (tests only, loopback) replaces the origin fetched from;
//! the URL in the request is checked all the same.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt as _;

use super::spec::CertificateRule;
use super::verify::Key;

/// The longest certificate read.
pub const MAX_BYTES: usize = 64 * 1024;
/// The longest one fetch may take, connection included.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a fetched certificate is kept.
pub const KEEP: Duration = Duration::from_secs(24 * 3600);
/// How long a failed fetch is remembered (requests naming that URL fail at once).
pub const KEEP_FAILURE: Duration = Duration::from_secs(10);
/// The most URLs kept.
pub const MAX_CACHED: usize = 256;
/// The most fetches started in any minute.
pub const FETCHES_PER_MINUTE: usize = 30;

/// Why no signing key came of what a request names (a certificate's URL, a key id).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FetchedKeyError {
    /// The URL is missing, or not one the spec allows: the request is refused.
    #[error("the key's URL is missing or not on the provider's hosts")]
    Refused,
    /// What was fetched holds no usable key (a certificate not PEM, not RSA,
    /// expired; a key of another kind or id): the request is refused.
    #[error("the fetched key is not usable: {0}")]
    Invalid(&'static str),
    /// The key could not be fetched now: the request may succeed later.
    #[error("the key could not be fetched: {0}")]
    Unavailable(String),
}

/// Where a request's certificate is fetched from, once its URL is checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertificateUrl {
    /// As the request names it (the cache key).
    pub named: String,
    /// What is fetched: the same, or its path on the spec's `fetch_base`.
    pub fetched: String,
}

/// Check the certificate URL a request names against `rule`.
pub fn check_url(rule: &CertificateRule, named: &str) -> Result<CertificateUrl, FetchedKeyError> {
    if named.len() > 2048 {
        return Err(FetchedKeyError::Refused);
    }
    let uri: http::Uri = named.parse().map_err(|_| FetchedKeyError::Refused)?;
    if !https_on_hosts(&uri, &rule.hosts) {
        return Err(FetchedKeyError::Refused);
    }
    let path = uri.path();
    let prefix_ok = rule
        .path_prefix
        .as_ref()
        .is_none_or(|p| path.starts_with(p.as_str()) && !path.contains("/../"));
    let suffix_ok = rule
        .path_suffix
        .as_ref()
        .is_none_or(|s| path.ends_with(s.as_str()) && uri.query().is_none());
    if !prefix_ok || !suffix_ok {
        return Err(FetchedKeyError::Refused);
    }
    let path_and_query = uri.path_and_query().map_or("/", |p| p.as_str());
    Ok(CertificateUrl {
        named: named.to_string(),
        fetched: match &rule.fetch_base {
            Some(base) => format!("{base}{path_and_query}"),
            None => named.to_string(),
        },
    })
}

/// Whether `uri` is `https://` on one of `hosts` (patterns, see [`host_matches`]),
/// on the default port, without userinfo.
pub(crate) fn https_on_hosts(uri: &http::Uri, hosts: &[String]) -> bool {
    let Some(authority) = uri.authority() else {
        return false;
    };
    let host = authority.host().to_ascii_lowercase();
    let plain_authority = authority.as_str().eq_ignore_ascii_case(&host)
        || authority
            .as_str()
            .eq_ignore_ascii_case(&format!("{host}:443"));
    uri.scheme_str() == Some("https")
        && plain_authority
        && hosts.iter().any(|p| host_matches(p, &host))
}

/// Whether `host` matches `pattern`, where `*` is exactly one DNS label.
fn host_matches(pattern: &str, host: &str) -> bool {
    let (p, h): (Vec<&str>, Vec<&str>) = (pattern.split('.').collect(), host.split('.').collect());
    p.len() == h.len()
        && p.iter().zip(&h).all(|(p, h)| {
            !h.is_empty()
                && h.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                && (*p == "*" || p == h)
        })
}

/// `rsaEncryption`: the algorithm of an RSA certificate's key.
const RSA_ENCRYPTION: x509_cert::spki::ObjectIdentifier =
    x509_cert::spki::ObjectIdentifier::new_unwrap("1.2.840.113549.1.1.1");

/// The RSA public key (PKCS#1 DER) of a PEM certificate, if it is valid at `now`.
pub fn rsa_key_of(pem: &[u8], now: std::time::SystemTime) -> Result<Arc<[u8]>, FetchedKeyError> {
    use x509_cert::der::{Decode as _, DecodePem as _};
    let cert = x509_cert::Certificate::from_pem(pem)
        .or_else(|_| x509_cert::Certificate::from_der(pem))
        .map_err(|_| FetchedKeyError::Invalid("not a PEM or DER X.509 certificate"))?;
    let validity = &cert.tbs_certificate.validity;
    if now < validity.not_before.to_system_time() || now > validity.not_after.to_system_time() {
        return Err(FetchedKeyError::Invalid("outside its validity period"));
    }
    let spki = &cert.tbs_certificate.subject_public_key_info;
    if spki.algorithm.oid != RSA_ENCRYPTION {
        return Err(FetchedKeyError::Invalid("its key is not RSA"));
    }
    let key = spki
        .subject_public_key
        .as_bytes()
        .ok_or(FetchedKeyError::Invalid(
            "its key is not a whole number of bytes",
        ))?;
    Ok(key.into())
}

/// One URL's certificate, or why there is none, and since when.
#[derive(Clone)]
struct Cached {
    at: Instant,
    outcome: Result<(Arc<[u8]>, Instant), FetchedKeyError>,
}

/// The signing keys fetched so far (certificates, and keys a provider's API gives
/// by id: `provider::jwk`), shared by every source of the gateway.
pub struct FetchedKeys {
    client: reqwest::Client,
    /// Per URL: a lock one fetch holds while the others wait for its outcome.
    slots: Mutex<HashMap<String, Arc<tokio::sync::Mutex<Option<Cached>>>>>,
    /// When the fetches of the last minute started.
    started: Mutex<Vec<Instant>>,
}

impl std::fmt::Debug for FetchedKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FetchedKeys")
    }
}

impl FetchedKeys {
    pub fn new() -> Result<FetchedKeys, reqwest::Error> {
        crate::tls::install_provider();
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(FETCH_TIMEOUT)
            .connect_timeout(FETCH_TIMEOUT)
            .user_agent(concat!("hookgate/", env!("CARGO_PKG_VERSION")))
            .build()?;
        Ok(FetchedKeys {
            client,
            slots: Mutex::new(HashMap::new()),
            started: Mutex::new(Vec::new()),
        })
    }

    /// The client certificates are fetched with (no redirects, [`FETCH_TIMEOUT`]),
    /// which the gateway's other calls to a provider's hosts share.
    pub fn client(&self) -> &reqwest::Client {
        &self.client
    }

    /// The key of the certificate at `url` (checked by [`check_url`]): kept, or
    /// fetched now.
    pub async fn key(&self, url: &CertificateUrl) -> Result<Key, FetchedKeyError> {
        self.kept(&url.named, || self.fetch(&url.fetched))
            .await
            .map(Key::Rsa)
    }

    /// The key a `[jwk]` scheme's API gives for `req` (checked by
    /// [`super::jwk::check`]), asked with the source's `credentials`: kept, or
    /// fetched now.
    pub async fn jwk_key(
        &self,
        req: &super::jwk::JwkRequest,
        credentials: &str,
    ) -> Result<Key, FetchedKeyError> {
        let name = format!("{}#{}", req.named, req.key_id);
        let point = self
            .kept(&name, || self.fetch_jwk(req, credentials))
            .await?;
        p256::ecdsa::VerifyingKey::from_sec1_bytes(&point)
            .map(Key::EcdsaP256)
            .map_err(|_| FetchedKeyError::Invalid("not a point of P-256"))
    }

    /// The key kept under `name`, or `fetch`ed now (one fetch per name at a time).
    async fn kept<F, Fut>(&self, name: &str, fetch: F) -> Result<Arc<[u8]>, FetchedKeyError>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Result<(Arc<[u8]>, Instant), FetchedKeyError>>,
    {
        let slot = {
            let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
            if !slots.contains_key(name) && slots.len() >= MAX_CACHED {
                // Make room: forget the URLs nobody is fetching now.
                slots.retain(|_, s| Arc::strong_count(s) > 1);
                if slots.len() >= MAX_CACHED {
                    return Err(FetchedKeyError::Unavailable(
                        "too many certificate URLs at once".into(),
                    ));
                }
            }
            slots
                .entry(name.to_string())
                .or_insert_with(|| Arc::new(tokio::sync::Mutex::new(None)))
                .clone()
        };
        let mut cached = slot.lock().await;
        if let Some(c) = cached.as_ref() {
            let fresh = match &c.outcome {
                Ok((_, expires)) => c.at.elapsed() < KEEP && Instant::now() < *expires,
                Err(_) => c.at.elapsed() < KEEP_FAILURE,
            };
            if fresh {
                return c.outcome.clone().map(|(k, _)| k);
            }
        }
        if !self.may_fetch() {
            return Err(FetchedKeyError::Unavailable(
                "too many certificate fetches this minute".into(),
            ));
        }
        let outcome = fetch().await;
        match &outcome {
            Ok(_) => tracing::info!(url = %name, "signing key fetched"),
            Err(e) => tracing::warn!(url = %name, error = %e, "signing key fetch failed"),
        }
        *cached = Some(Cached {
            at: Instant::now(),
            outcome: outcome.clone(),
        });
        outcome.map(|(k, _)| k)
    }

    /// Ask a `[jwk]` scheme's API for a key: its SEC1 point, and until when it
    /// may be kept.
    async fn fetch_jwk(
        &self,
        req: &super::jwk::JwkRequest,
        credentials: &str,
    ) -> Result<(Arc<[u8]>, Instant), FetchedKeyError> {
        let unavailable = |e: &dyn std::fmt::Display| FetchedKeyError::Unavailable(e.to_string());
        let body = super::jwk::request_body(credentials, &req.key_id).ok_or_else(|| {
            FetchedKeyError::Unavailable("the source's secret is not client_id:secret".into())
        })?;
        let resp = self
            .client
            .post(&req.fetched)
            .json(&body)
            .send()
            .await
            .map_err(|e| unavailable(&e.without_url()))?;
        let status = resp.status();
        let answer = read_bounded(resp, super::jwk::MAX_BYTES)
            .await
            .map_err(|e| unavailable(&e))?;
        if !status.is_success() {
            // Plaid answers an unknown key id so: the token names no key of theirs.
            let unknown = serde_json::from_slice::<serde_json::Value>(&answer)
                .ok()
                .and_then(|v| v.get("error_code")?.as_str().map(str::to_string))
                .is_some_and(|c| c == "INVALID_WEBHOOK_VERIFICATION_KEY_ID");
            return Err(if unknown {
                FetchedKeyError::Invalid("the provider knows no key of that id")
            } else {
                FetchedKeyError::Unavailable(format!("answered HTTP {}", status.as_u16()))
            });
        }
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
        let (point, expires) = super::jwk::ec_key_of(&answer, &req.key_id, now)?;
        let keep = match expires {
            Some(at) => KEEP.min(Duration::from_secs(u64::try_from(at - now).unwrap_or(0))),
            None => KEEP,
        };
        Ok((point, Instant::now() + keep))
    }

    /// Whether another fetch may start this minute (and count it).
    fn may_fetch(&self) -> bool {
        let mut started = self.started.lock().unwrap_or_else(|p| p.into_inner());
        let minute_ago = Instant::now().checked_sub(Duration::from_secs(60));
        started.retain(|t| minute_ago.is_none_or(|m| *t > m));
        if started.len() >= FETCHES_PER_MINUTE {
            return false;
        }
        started.push(Instant::now());
        true
    }

    /// Fetch and read one certificate: its key, and when it stops being valid here.
    async fn fetch(&self, url: &str) -> Result<(Arc<[u8]>, Instant), FetchedKeyError> {
        let unavailable = |e: &dyn std::fmt::Display| FetchedKeyError::Unavailable(e.to_string());
        let resp = self
            .client
            .get(url)
            .send()
            .await
            .map_err(|e| unavailable(&e))?;
        if !resp.status().is_success() {
            return Err(FetchedKeyError::Unavailable(format!(
                "answered HTTP {}",
                resp.status().as_u16()
            )));
        }
        let body = read_bounded(resp, MAX_BYTES).await.map_err(|e| match e {
            ReadError::TooLarge => FetchedKeyError::Invalid("larger than 64 KiB"),
            other => unavailable(&other),
        })?;
        let key = rsa_key_of(&body, std::time::SystemTime::now())?;
        Ok((key, Instant::now() + KEEP))
    }
}

/// Why an answer was not read.
#[derive(Debug, thiserror::Error)]
enum ReadError {
    #[error("the answer is too large")]
    TooLarge,
    #[error("reading the answer: {0}")]
    Read(#[source] reqwest::Error),
}

/// An answer's body, at most `max` bytes.
async fn read_bounded(resp: reqwest::Response, max: usize) -> Result<Vec<u8>, ReadError> {
    let mut body = Vec::new();
    let mut stream = resp.bytes_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| ReadError::Read(e.without_url()))?;
        if body.len() + chunk.len() > max {
            return Err(ReadError::TooLarge);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// The rule of the `aws-sns` spec, for unit tests and the fuzz targets.
#[cfg(any(test, fuzzing))]
pub(crate) fn sns_rule(fetch_base: Option<&str>) -> CertificateRule {
    CertificateRule {
        url: super::spec::ValueSource::Json("/SigningCertURL".into()),
        hosts: vec![
            "sns.*.amazonaws.com".into(),
            "sns.*.amazonaws.com.cn".into(),
        ],
        path_prefix: None,
        path_suffix: Some(".pem".into()),
        secret_matches: None,
        fetch_base: fetch_base.map(str::to_string),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_providers_hosts_over_https_are_fetched() {
        let r = sns_rule(None);
        let good = "https://sns.us-east-1.amazonaws.com/SimpleNotificationService-abc.pem";
        assert_eq!(check_url(&r, good).unwrap().fetched, good);
        assert!(check_url(&r, "https://sns.cn-north-1.amazonaws.com.cn/x.pem").is_ok());
        assert!(check_url(&r, "https://SNS.us-east-1.amazonaws.com:443/x.pem").is_ok());
        for bad in [
            "http://sns.us-east-1.amazonaws.com/x.pem",
            "https://sns.us-east-1.amazonaws.com.evil.com/x.pem",
            "https://evil.com/sns.us-east-1.amazonaws.com/x.pem",
            "https://sns.a.b.amazonaws.com/x.pem",
            "https://sns..amazonaws.com/x.pem",
            "https://user@sns.us-east-1.amazonaws.com/x.pem",
            "https://sns.us-east-1.amazonaws.com:8443/x.pem",
            "https://sns.us-east-1.amazonaws.com/x.pem.txt",
            "https://sns.us-east-1.amazonaws.com/x?y.pem",
            "https://s3.amazonaws.com/x.pem",
            "not a url",
            "",
        ] {
            assert!(check_url(&r, bad).is_err(), "{bad}");
        }
        let tests = sns_rule(Some("http://127.0.0.1:4000"));
        let got = check_url(&tests, good).unwrap();
        assert_eq!(got.named, good);
        assert_eq!(
            got.fetched,
            "http://127.0.0.1:4000/SimpleNotificationService-abc.pem"
        );
        // The override never lets another host through.
        assert!(check_url(&tests, "https://evil.com/x.pem").is_err());
    }

    #[test]
    fn a_certificate_that_is_not_one_is_refused() {
        let now = std::time::SystemTime::now();
        assert!(matches!(
            rsa_key_of(b"hello", now),
            Err(FetchedKeyError::Invalid(_))
        ));
        assert!(matches!(
            rsa_key_of(
                b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
                now
            ),
            Err(FetchedKeyError::Invalid(_))
        ));
    }
}
