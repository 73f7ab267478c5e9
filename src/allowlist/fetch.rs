//! Fetching a provider's published ranges: bounded in time and in size, pinned to
//! the host the spec names (no redirect is followed, and a spec's URL is `https://`
//! or, for tests, a loopback `fetch_base`), and read from the JSON document at the
//! spec's pointer.

use std::time::Duration;

use futures_util::StreamExt as _;
use ipnet::IpNet;

use crate::provider::spec::Ranges;

/// The longest answer read.
pub const MAX_BYTES: usize = 1 << 20;
/// The most ranges one list may hold.
pub const MAX_RANGES: usize = 10_000;
/// The longest a fetch may take, connection included.
pub const TIMEOUT: Duration = Duration::from_secs(10);

/// Why a fetch brought no list. The list in force stays.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error("the request failed")]
    Request(#[source] reqwest::Error),
    #[error("answered HTTP {0}")]
    Status(u16),
    #[error("the answer is larger than {MAX_BYTES} bytes")]
    TooLarge,
    #[error("the answer is not JSON")]
    NotJson(#[source] serde_json::Error),
    #[error("no array of ranges at {0:?}")]
    NoArray(String),
    #[error("item {index} of the list is not an address or a range")]
    NotARange { index: usize },
    #[error("the list is empty")]
    Empty,
    #[error("the list has more than {MAX_RANGES} ranges")]
    TooMany,
}

impl FetchError {
    /// A short label for logs.
    pub fn kind(&self) -> &'static str {
        match self {
            FetchError::Request(_) => "request",
            FetchError::Status(_) => "status",
            FetchError::TooLarge => "too_large",
            FetchError::NotJson(_) => "not_json",
            FetchError::NoArray(_) => "no_array",
            FetchError::NotARange { .. } => "not_a_range",
            FetchError::Empty => "empty",
            FetchError::TooMany => "too_many",
        }
    }
}

/// The client every fetch of ranges uses: no redirects, bounded in time.
pub fn client() -> Result<reqwest::Client, reqwest::Error> {
    crate::tls::install_provider();
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(TIMEOUT)
        .connect_timeout(TIMEOUT)
        .user_agent(concat!("hookgate/", env!("CARGO_PKG_VERSION")))
        .build()
}

/// Fetch `ranges.url` and read the list from it: sorted, without repeats.
pub async fn fetch(client: &reqwest::Client, ranges: &Ranges) -> Result<Vec<IpNet>, FetchError> {
    let resp = client
        .get(&ranges.url)
        .header(http::header::ACCEPT, "application/json")
        .send()
        .await
        .map_err(FetchError::Request)?;
    if !resp.status().is_success() {
        return Err(FetchError::Status(resp.status().as_u16()));
    }
    if resp.content_length().is_some_and(|n| n > MAX_BYTES as u64) {
        return Err(FetchError::TooLarge);
    }
    let mut body = Vec::new();
    let mut stream = resp.bytes_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(FetchError::Request)?;
        if body.len() + chunk.len() > MAX_BYTES {
            return Err(FetchError::TooLarge);
        }
        body.extend_from_slice(&chunk);
    }
    parse(&body, ranges)
}

/// The ranges in `body` at `ranges.pointer` (each item a string, or an object whose
/// `ranges.field` is one): sorted, without repeats. An item may be an address alone
/// (Stripe lists addresses), taken as its /32 or /128.
pub fn parse(body: &[u8], ranges: &Ranges) -> Result<Vec<IpNet>, FetchError> {
    let doc: serde_json::Value = serde_json::from_slice(body).map_err(FetchError::NotJson)?;
    let items = doc
        .pointer(&ranges.pointer)
        .and_then(|v| v.as_array())
        .ok_or_else(|| FetchError::NoArray(ranges.pointer.clone()))?;
    if items.len() > MAX_RANGES {
        return Err(FetchError::TooMany);
    }
    let mut out = Vec::with_capacity(items.len());
    for (index, item) in items.iter().enumerate() {
        let text = match &ranges.field {
            Some(field) => item.get(field).and_then(|v| v.as_str()),
            None => item.as_str(),
        }
        .ok_or(FetchError::NotARange { index })?;
        out.push(parse_range(text).ok_or(FetchError::NotARange { index })?);
    }
    if out.is_empty() {
        return Err(FetchError::Empty);
    }
    out.sort();
    out.dedup();
    Ok(out)
}

/// A range as a provider writes it: a CIDR (host bits cleared) or an address.
fn parse_range(text: &str) -> Option<IpNet> {
    let text = text.trim();
    match text.parse::<std::net::IpAddr>() {
        Ok(addr) => Some(IpNet::from(addr)),
        Err(_) => text.parse::<IpNet>().ok().map(|n| n.trunc()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(pointer: &str, field: Option<&str>) -> Ranges {
        Ranges {
            url: "https://example.com/".into(),
            published: "https://example.com/".into(),
            pointer: pointer.into(),
            field: field.map(str::to_string),
        }
    }

    #[test]
    fn github_stripe_and_object_lists_parse() {
        let github = br#"{"verifiable_password_authentication":false,"hooks":["192.30.252.0/22","185.199.108.0/22","2a0a:a440::/29","192.30.252.0/22"],"web":["1.2.3.4/32"]}"#;
        let got = parse(github, &spec("/hooks", None)).unwrap();
        let shown: Vec<String> = got.iter().map(|n| n.to_string()).collect();
        assert_eq!(
            shown,
            ["185.199.108.0/22", "192.30.252.0/22", "2a0a:a440::/29"]
        );
        let stripe = br#"{"WEBHOOKS":["3.18.12.63","3.130.192.231"]}"#;
        let got = parse(stripe, &spec("/WEBHOOKS", None)).unwrap();
        assert_eq!(got[0].to_string(), "3.18.12.63/32");
        let objects = br#"{"items":[{"cidr":"13.52.5.0/25"},{"cidr":"10.0.0.1/8"}]}"#;
        let got = parse(objects, &spec("/items", Some("cidr"))).unwrap();
        let shown: Vec<String> = got.iter().map(|n| n.to_string()).collect();
        assert_eq!(shown, ["10.0.0.0/8", "13.52.5.0/25"]);
    }

    #[test]
    fn a_list_that_is_not_one_is_refused() {
        let s = spec("/hooks", None);
        assert!(matches!(parse(b"<html>", &s), Err(FetchError::NotJson(_))));
        assert!(matches!(
            parse(br#"{"web":[]}"#, &s),
            Err(FetchError::NoArray(_))
        ));
        assert!(matches!(
            parse(br#"{"hooks":[]}"#, &s),
            Err(FetchError::Empty)
        ));
        assert!(matches!(
            parse(br#"{"hooks":["192.0.2.0/24","everywhere"]}"#, &s),
            Err(FetchError::NotARange { index: 1 })
        ));
        assert!(matches!(
            parse(br#"{"hooks":[7]}"#, &s),
            Err(FetchError::NotARange { index: 0 })
        ));
        let many = format!(
            "{{\"hooks\":[{}]}}",
            vec!["\"192.0.2.1\""; MAX_RANGES + 1].join(",")
        );
        assert!(matches!(
            parse(many.as_bytes(), &s),
            Err(FetchError::TooMany)
        ));
    }
}
