//! Calls to a provider's API, as every reconciliation makes them: bounded in time and
//! size, JSON in and out, the provider's rate limits honoured.
//!
//! A 429 (or GitHub's 403 with `x-ratelimit-remaining: 0`) with a short
//! `Retry-After` is waited out and tried again; a 5xx or a transport error is tried
//! again after a short backoff. What is still failing after [`TRIES`] ends the
//! pass with a typed [`ApiError`]: the pass backs off (a long `Retry-After` is kept
//! as the earliest next pass) and the error is counted by its kind. Nothing here
//! ever logs a credential or a response body.

use std::time::Duration;

use futures_util::StreamExt as _;
use http::HeaderMap;

/// Tries of one call before its error ends the pass.
pub const TRIES: u32 = 3;
/// The longest `Retry-After` waited out inside a pass; a longer one ends the pass
/// and is kept as the earliest next one.
pub const MAX_WAIT_IN_PASS: Duration = Duration::from_secs(30);
/// How long one call may take.
pub const TIMEOUT: Duration = Duration::from_secs(30);
/// The largest answer read (a page of 100 events with their objects).
pub const MAX_BYTES: usize = 16 << 20;

/// Why a call to the provider's API failed.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// 401 or 403: the credential is wrong, revoked or lacks a permission.
    #[error("the API refused the credential (HTTP {0})")]
    Unauthorized(u16),
    /// 429, or GitHub's exhausted rate limit, still after waiting; `retry_after`
    /// is what the provider asked for.
    #[error("the API's rate limit was reached")]
    RateLimited { retry_after: Option<Duration> },
    /// Any other answer that is not a success.
    #[error("the API answered HTTP {0}")]
    Status(u16),
    /// No answer: connection refused or reset, TLS, or the [`TIMEOUT`].
    #[error("the API could not be reached")]
    Transport(#[source] reqwest::Error),
    /// An answer larger than [`MAX_BYTES`].
    #[error("the API's answer is larger than {MAX_BYTES} bytes")]
    TooLarge,
    /// An answer that is not what the provider documents.
    #[error("the API's answer is not what its documentation says")]
    Decode(#[source] serde_json::Error),
    /// A link or cursor that leaves the configured API.
    #[error("the API's next page is outside the API's base URL")]
    ForeignLink,
    /// The App's JWT could not be signed.
    #[error("the GitHub App's JWT could not be signed")]
    Jwt(#[source] jsonwebtoken::errors::Error),
}

impl ApiError {
    /// The `kind` label of `hookgate_reconcile_errors_total`.
    pub fn kind(&self) -> &'static str {
        match self {
            ApiError::Unauthorized(_) => "unauthorized",
            ApiError::RateLimited { .. } => "rate_limited",
            ApiError::Status(s) if *s >= 500 => "server",
            ApiError::Status(_) => "refused",
            ApiError::Transport(e) if e.is_timeout() => "timeout",
            ApiError::Transport(_) => "transport",
            ApiError::TooLarge | ApiError::Decode(_) | ApiError::ForeignLink => "answer",
            ApiError::Jwt(_) => "credential",
        }
    }

    /// The earliest next pass the provider asked for, if it asked.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            ApiError::RateLimited { retry_after } => *retry_after,
            _ => None,
        }
    }
}

/// An answer read whole: its status, headers and body.
pub struct Answer {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: bytes::Bytes,
}

impl Answer {
    pub fn json<T: serde::de::DeserializeOwned>(&self) -> Result<T, ApiError> {
        serde_json::from_slice(&self.body).map_err(ApiError::Decode)
    }
}

/// The client every reconciliation uses: no redirects, bounded in time.
pub fn client() -> Result<reqwest::Client, reqwest::Error> {
    crate::tls::install_provider();
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(TIMEOUT)
        .connect_timeout(Duration::from_secs(10))
        .user_agent(concat!("hookgate/", env!("CARGO_PKG_VERSION")))
        .build()
}

/// What the provider asks to wait, from `Retry-After` (seconds) or GitHub's
/// `x-ratelimit-reset` (unix seconds) when its `x-ratelimit-remaining` is 0.
pub fn asked_wait(headers: &HeaderMap, now_s: i64) -> Option<Duration> {
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(secs) = text("retry-after").and_then(|v| v.trim().parse::<u64>().ok()) {
        return Some(Duration::from_secs(secs));
    }
    if text("x-ratelimit-remaining").map(str::trim) == Some("0")
        && let Some(reset) = text("x-ratelimit-reset").and_then(|v| v.trim().parse::<i64>().ok())
    {
        return Some(Duration::from_secs(
            reset.saturating_sub(now_s).max(1) as u64
        ));
    }
    None
}

/// Send the request `make` builds (again for each try) and read its answer: a
/// success, or a typed error once retrying cannot help. `sleep` waits between tries
/// (the pass's clock, so paused-time tests run instantly).
pub async fn call(
    make: impl Fn() -> reqwest::RequestBuilder,
    now_s: impl Fn() -> i64,
) -> Result<Answer, ApiError> {
    let mut last: Option<ApiError> = None;
    for attempt in 0..TRIES {
        if attempt > 0 {
            let wait = match &last {
                Some(ApiError::RateLimited {
                    retry_after: Some(d),
                }) => *d,
                _ => Duration::from_millis(500 << attempt),
            };
            tokio::time::sleep(wait).await;
        }
        let error = match make().send().await {
            Err(e) => ApiError::Transport(e),
            Ok(resp) => {
                let status = resp.status().as_u16();
                let headers = resp.headers().clone();
                let limited = status == 429
                    || (status == 403
                        && headers
                            .get("x-ratelimit-remaining")
                            .and_then(|v| v.to_str().ok())
                            .map(str::trim)
                            == Some("0"));
                if limited {
                    let retry_after = asked_wait(&headers, now_s());
                    let e = ApiError::RateLimited { retry_after };
                    // A wait longer than a pass should hold ends it now.
                    if retry_after.is_some_and(|d| d > MAX_WAIT_IN_PASS) {
                        return Err(e);
                    }
                    e
                } else if status == 401 || status == 403 {
                    return Err(ApiError::Unauthorized(status));
                } else if (200..300).contains(&status) {
                    let body = read_bounded(resp).await?;
                    return Ok(Answer {
                        status,
                        headers,
                        body,
                    });
                } else if status >= 500 {
                    ApiError::Status(status)
                } else {
                    return Err(ApiError::Status(status));
                }
            }
        };
        last = Some(error);
    }
    Err(last.unwrap_or(ApiError::Status(0)))
}

async fn read_bounded(resp: reqwest::Response) -> Result<bytes::Bytes, ApiError> {
    if resp.content_length().is_some_and(|n| n > MAX_BYTES as u64) {
        return Err(ApiError::TooLarge);
    }
    let mut body = Vec::new();
    let mut stream = resp.bytes_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(ApiError::Transport)?;
        if body.len() + chunk.len() > MAX_BYTES {
            return Err(ApiError::TooLarge);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body.into())
}

/// `next` when it is a URL under `base` (a page link the API gave), so that a
/// credential never follows a link elsewhere.
pub fn within_base(base: &str, next: &str) -> Result<String, ApiError> {
    let base_url = reqwest::Url::parse(base).map_err(|_| ApiError::ForeignLink)?;
    let url = reqwest::Url::parse(next).map_err(|_| ApiError::ForeignLink)?;
    let same_origin = url.scheme() == base_url.scheme()
        && url.host_str() == base_url.host_str()
        && url.port_or_known_default() == base_url.port_or_known_default();
    let base_path = base_url.path().trim_end_matches('/');
    if same_origin && url.path().starts_with(base_path) {
        Ok(url.to_string())
    } else {
        Err(ApiError::ForeignLink)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wait_comes_from_retry_after_or_an_exhausted_github_limit() {
        let mut h = HeaderMap::new();
        assert_eq!(asked_wait(&h, 1000), None);
        h.insert("x-ratelimit-remaining", "0".parse().unwrap());
        h.insert("x-ratelimit-reset", "1090".parse().unwrap());
        assert_eq!(asked_wait(&h, 1000), Some(Duration::from_secs(90)));
        h.insert("retry-after", "7".parse().unwrap());
        assert_eq!(asked_wait(&h, 1000), Some(Duration::from_secs(7)));
        let mut spent = HeaderMap::new();
        spent.insert("x-ratelimit-remaining", "12".parse().unwrap());
        spent.insert("x-ratelimit-reset", "1090".parse().unwrap());
        assert_eq!(asked_wait(&spent, 1000), None);
    }

    #[test]
    fn a_page_link_must_stay_under_the_base() {
        let base = "https://ghe.example.com/api/v3";
        assert!(
            within_base(
                base,
                "https://ghe.example.com/api/v3/repos/a/b/hooks/1/deliveries?cursor=x"
            )
            .is_ok()
        );
        for foreign in [
            "https://evil.example.com/api/v3/repos",
            "http://ghe.example.com/api/v3/repos",
            "https://ghe.example.com:8443/api/v3/repos",
            "https://ghe.example.com/other",
            "not a url",
        ] {
            assert!(within_base(base, foreign).is_err(), "{foreign}");
        }
    }
}
