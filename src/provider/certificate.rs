//! The certificates of certificate schemes (AWS SNS, PayPal): the request names the
//! URL of the certificate whose key signed it, so the key has to be fetched, and a
//! forger names whatever URL they like.
//!
//! So the URL is checked before anything is fetched: `https://` on one of the
//! spec's hosts (`sns.*.amazonaws.com`), the default port, no userinfo, the path
//! ending as the spec says (`.pem`). The fetch follows no redirect, takes at most
//! [`MAX_BYTES`] and [`FETCH_TIMEOUT`], and one URL is fetched by one request at a
//! time. A certificate is kept for [`KEEP`] (and never past its own expiry), a
//! failure for [`KEEP_FAILURE`]. The certificate must be within its validity period
//! and hold an RSA key.
//!
//! A forger names whatever URL on the provider's hosts they like, so fetches are
//! what a flood of forgeries would spend, and the genuine requests must not pay
//! for it:
//! - nothing is fetched for a request whose unsigned claims already fail (the
//!   caller checks them first: `Verifier::precheck`);
//! - fetches are budgeted per source ([`FETCHES_PER_MINUTE_PER_SOURCE`]) and per
//!   client ([`FETCHES_PER_MINUTE_PER_CLIENT`], an IPv4 address or an IPv6 prefix),
//!   and a request over either budget gets no cache slot at all;
//! - at most [`MAX_CACHED`] keys are kept, and a key that verified a request is
//!   never evicted for one that has not (only keys that never verified anything
//!   and that nobody is fetching make room);
//! - a key that verified requests and whose keeping time ran out is fetched
//!   again, but while the budget refuses the fetch it stays in use until its own
//!   validity ends.
//!
//! A spec's `fetch_base` (tests only, loopback) replaces the origin fetched from;
//! the URL in the request is checked all the same.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
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
/// The most keys kept (and URLs remembered as failing).
pub const MAX_CACHED: usize = 256;
/// The most fetches one source's requests start in any minute.
pub const FETCHES_PER_MINUTE_PER_SOURCE: usize = 30;
/// The most fetches one client's requests start in any minute.
pub const FETCHES_PER_MINUTE_PER_CLIENT: usize = 5;
/// The most clients whose fetches of the last minute are remembered; past it, the
/// ones with none in the last minute are forgotten.
const MAX_CLIENTS: usize = 4096;

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

/// Who asks for a key: the source a request came to and the client that sent it
/// (behind trusted proxies, the one they forwarded; an IPv6 address as the prefix
/// the gateway counts a client by), whose fetch budgets pay.
#[derive(Debug, Clone, Copy)]
pub struct Asker<'a> {
    pub source: &'a str,
    pub client: Option<std::net::IpAddr>,
}

/// The name a fetched key is kept under: a certificate's URL as the request named
/// it, a key API's URL and the key's id. The caller marks it once it verified a
/// request ([`FetchedKeys::verified`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyName(String);

/// What is kept of one name.
#[derive(Default)]
struct Slot {
    /// Set once the key verified a request: such a key is never evicted for one
    /// that has not.
    verified: AtomicBool,
    /// The key or the failure, behind a lock one fetch holds while the others wait
    /// for its outcome.
    cached: tokio::sync::Mutex<Option<Cached>>,
}

/// When the fetches of the last minute started, per source and per client.
#[derive(Default)]
struct Budgets {
    sources: HashMap<String, VecDeque<Instant>>,
    clients: HashMap<std::net::IpAddr, VecDeque<Instant>>,
}

impl Budgets {
    /// Count a fetch for `asker`, or say which budget refuses it.
    fn charge(&mut self, asker: Asker<'_>, now: Instant) -> Result<(), FetchedKeyError> {
        let minute_ago = now.checked_sub(Duration::from_secs(60));
        let recent = |starts: &mut VecDeque<Instant>| {
            while starts
                .front()
                .is_some_and(|t| minute_ago.is_some_and(|m| *t <= m))
            {
                starts.pop_front();
            }
            starts.len()
        };
        let client = asker.client;
        if client.is_some_and(|c| !self.clients.contains_key(&c))
            && self.clients.len() >= MAX_CLIENTS
        {
            self.clients.retain(|_, starts| recent(starts) > 0);
        }
        let source_used = self.sources.get_mut(asker.source).map_or(0, &recent);
        if source_used >= FETCHES_PER_MINUTE_PER_SOURCE {
            return Err(FetchedKeyError::Unavailable(
                "too many key fetches for this source this minute".into(),
            ));
        }
        if let Some(c) = client {
            let client_used = self.clients.get_mut(&c).map_or(0, &recent);
            if client_used >= FETCHES_PER_MINUTE_PER_CLIENT || self.clients.len() >= MAX_CLIENTS {
                return Err(FetchedKeyError::Unavailable(
                    "too many key fetches for this client this minute".into(),
                ));
            }
            self.clients.entry(c).or_default().push_back(now);
        }
        self.sources
            .entry(asker.source.to_string())
            .or_default()
            .push_back(now);
        Ok(())
    }
}

/// The signing keys fetched so far (certificates, and keys a provider's API gives
/// by id: `provider::jwk`), shared by every source of the gateway.
pub struct FetchedKeys {
    client: reqwest::Client,
    slots: Mutex<HashMap<String, Arc<Slot>>>,
    budgets: Mutex<Budgets>,
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
            budgets: Mutex::new(Budgets::default()),
        })
    }

    /// The client certificates are fetched with (no redirects, [`FETCH_TIMEOUT`]),
    /// which the gateway's other calls to a provider's hosts share.
    pub fn client(&self) -> &reqwest::Client {
        &self.client
    }

    /// The key `req` asks for, whichever the scheme (see `key` and `jwk_key`).
    pub async fn key_for(
        &self,
        req: &super::KeyRequest<'_>,
        asker: Asker<'_>,
    ) -> Result<(Key, KeyName), FetchedKeyError> {
        match req {
            super::KeyRequest::Certificate(url) => self.key(url, asker).await,
            super::KeyRequest::Jwk { asked, credentials } => {
                self.jwk_key(asked, credentials, asker).await
            }
        }
    }

    /// The key of the certificate at `url` (checked by [`check_url`]): kept, or
    /// fetched now on `asker`'s budgets.
    async fn key(
        &self,
        url: &CertificateUrl,
        asker: Asker<'_>,
    ) -> Result<(Key, KeyName), FetchedKeyError> {
        let name = KeyName(url.named.clone());
        let key = self
            .kept(&name.0, asker, || self.fetch(&url.fetched))
            .await?;
        Ok((Key::Rsa(key), name))
    }

    /// The key a `[jwk]` scheme's API gives for `req` (checked by
    /// [`super::jwk::check`]), asked with the source's `credentials`: kept, or
    /// fetched now on `asker`'s budgets.
    async fn jwk_key(
        &self,
        req: &super::jwk::JwkRequest,
        credentials: &str,
        asker: Asker<'_>,
    ) -> Result<(Key, KeyName), FetchedKeyError> {
        let name = KeyName(format!("{}#{}", req.named, req.key_id));
        let point = self
            .kept(&name.0, asker, || self.fetch_jwk(req, credentials))
            .await?;
        let key = p256::ecdsa::VerifyingKey::from_sec1_bytes(&point)
            .map(Key::EcdsaP256)
            .map_err(|_| FetchedKeyError::Invalid("not a point of P-256"))?;
        Ok((key, name))
    }

    /// Note that the key kept under `name` verified a request: it is kept from now
    /// on in preference to any key that has not.
    pub fn verified(&self, name: &KeyName) {
        let slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(slot) = slots.get(&name.0) {
            slot.verified.store(true, Ordering::Relaxed);
        }
    }

    /// Count a fetch on `asker`'s budgets.
    fn charge(&self, asker: Asker<'_>) -> Result<(), FetchedKeyError> {
        self.budgets
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .charge(asker, Instant::now())
    }

    /// The key kept under `name`, or `fetch`ed now (one fetch per name at a time),
    /// when `asker`'s budgets allow it.
    async fn kept<F, Fut>(
        &self,
        name: &str,
        asker: Asker<'_>,
        fetch: F,
    ) -> Result<Arc<[u8]>, FetchedKeyError>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Result<(Arc<[u8]>, Instant), FetchedKeyError>>,
    {
        let (slot, charged) = {
            let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
            match slots.get(name) {
                Some(slot) => (slot.clone(), false),
                None => {
                    if slots.len() >= MAX_CACHED {
                        // Make room: forget the keys that never verified a request
                        // and that nobody is fetching now.
                        slots.retain(|_, s| {
                            Arc::strong_count(s) > 1 || s.verified.load(Ordering::Relaxed)
                        });
                        if slots.len() >= MAX_CACHED {
                            return Err(FetchedKeyError::Unavailable(
                                "too many signing keys at once".into(),
                            ));
                        }
                    }
                    // Only a request that may fetch makes a slot.
                    self.charge(asker)?;
                    let slot = Arc::new(Slot::default());
                    slots.insert(name.to_string(), slot.clone());
                    (slot, true)
                }
            }
        };
        let mut cached = slot.cached.lock().await;
        let mut still_valid = None;
        if let Some(c) = cached.as_ref() {
            let fresh = match &c.outcome {
                Ok((key, expires)) => {
                    if Instant::now() < *expires {
                        still_valid = Some(key.clone());
                    }
                    c.at.elapsed() < KEEP && Instant::now() < *expires
                }
                Err(_) => c.at.elapsed() < KEEP_FAILURE,
            };
            if fresh {
                return c.outcome.clone().map(|(k, _)| k);
            }
        }
        if !charged && let Err(e) = self.charge(asker) {
            // A key that verified requests, kept past its keeping time but still
            // valid itself, serves on while the budgets refuse to fetch it again.
            if slot.verified.load(Ordering::Relaxed)
                && let Some(key) = still_valid
            {
                return Ok(key);
            }
            return Err(e);
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
    fn fetches_are_budgeted_per_client_and_per_source() {
        let mut b = Budgets::default();
        let now = Instant::now();
        let ip = |s: &str| Some(s.parse::<std::net::IpAddr>().unwrap());
        let asker = |client| Asker {
            source: "sns",
            client,
        };
        for _ in 0..FETCHES_PER_MINUTE_PER_CLIENT {
            b.charge(asker(ip("192.0.2.1")), now).unwrap();
        }
        assert!(b.charge(asker(ip("192.0.2.1")), now).is_err());
        // Another client has a budget of its own.
        for _ in 0..FETCHES_PER_MINUTE_PER_CLIENT {
            b.charge(asker(ip("2001:db8::")), now).unwrap();
        }
        assert!(b.charge(asker(ip("2001:db8::")), now).is_err());
        // A client's budget is one across sources; another source's budget is its
        // own; this one's runs out at its bound.
        let other = |client| Asker {
            source: "paypal",
            client,
        };
        assert!(b.charge(other(ip("192.0.2.1")), now).is_err());
        b.charge(other(ip("192.0.2.2")), now).unwrap();
        let mut n = 2 * FETCHES_PER_MINUTE_PER_CLIENT;
        let mut host = 0;
        while n < FETCHES_PER_MINUTE_PER_SOURCE {
            host += 1;
            b.charge(asker(ip(&format!("198.51.100.{host}"))), now)
                .unwrap();
            n += 1;
        }
        assert!(b.charge(asker(ip("203.0.113.7")), now).is_err());
        // A minute later every budget is whole again.
        let later = now + Duration::from_secs(61);
        b.charge(asker(ip("192.0.2.1")), later).unwrap();
    }

    #[tokio::test]
    async fn a_key_that_verified_a_request_is_never_evicted_for_one_that_has_not() {
        let keys = FetchedKeys::new().unwrap();
        let fetched = std::sync::atomic::AtomicUsize::new(0);
        let fetch = || async {
            fetched.fetch_add(1, Ordering::SeqCst);
            Ok((Arc::<[u8]>::from(&b"key"[..]), Instant::now() + KEEP))
        };
        let genuine = Asker {
            source: "sns",
            client: Some("192.0.2.1".parse().unwrap()),
        };
        keys.kept("genuine", genuine, fetch).await.unwrap();
        keys.verified(&KeyName("genuine".into()));
        // Many forgers, each within its own budget, fill the cache over and over.
        for n in 0..(3 * MAX_CACHED) {
            let forger = Asker {
                source: &format!("source-{}", n / FETCHES_PER_MINUTE_PER_SOURCE),
                client: Some(format!("10.0.{}.{}", n / 250, n % 250).parse().unwrap()),
            };
            keys.kept(&format!("forged-{n}"), forger, fetch)
                .await
                .unwrap();
        }
        let before = fetched.load(Ordering::SeqCst);
        keys.kept("genuine", genuine, fetch).await.unwrap();
        assert_eq!(fetched.load(Ordering::SeqCst), before, "fetched again");
        // A request over its budget makes no slot.
        let spent = Asker {
            source: "sns",
            client: Some("192.0.2.9".parse().unwrap()),
        };
        for n in 0..FETCHES_PER_MINUTE_PER_CLIENT {
            keys.kept(&format!("spent-{n}"), spent, fetch)
                .await
                .unwrap();
        }
        let slots = keys.slots.lock().unwrap().len();
        assert!(keys.kept("one-more", spent, fetch).await.is_err());
        assert_eq!(keys.slots.lock().unwrap().len(), slots);
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
