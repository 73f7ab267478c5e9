//! The console's defence against cross-site requests: a form POST is taken only when
//! the browser says it came from a console page of this same origin, and it carries
//! the form token of the console that rendered it.
//!
//! The session cookie is `SameSite=Strict`, so a browser does not send it with a
//! request that another site starts; the checks here hold without relying on that
//! (older browsers, a console without a token, which has no cookie at all): a
//! browser names the page that sent a POST in `Origin` and says where the request
//! comes from in `Sec-Fetch-Site`, and a page on another origin cannot read a
//! console page to learn its form token.

use axum::http::{HeaderMap, Uri, header};

/// Why a console POST was refused as cross-site. The text is shown to the user.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CrossSite {
    /// `Origin` names another origin than the one the request was sent to.
    #[error("this form was sent from another site (its Origin is not this console)")]
    OtherOrigin,
    /// `Sec-Fetch-Site` says another origin's page started the request.
    #[error("this form was sent from another site (Sec-Fetch-Site)")]
    SecFetchSite,
    /// The form token is missing or is not this console's.
    #[error("this form is not from this console or has expired: reload the page and try again")]
    FormToken,
}

/// The form field that carries the form token.
pub const FORM_TOKEN_FIELD: &str = "csrf";

/// Whether the browser says a request came from a page of the origin it was sent to:
/// `Sec-Fetch-Site`, when sent, must be `same-origin`, and `Origin`, when sent, must
/// be the console's origin, scheme, host and port alike: `public_origin`
/// (`admin.public_origin`, for a console behind a TLS-terminating proxy) when set,
/// else `http://` and the request's own host (the `Host` header, or the authority
/// of the target). A page served over another scheme is another origin.
pub fn same_origin(
    headers: &HeaderMap,
    uri: &Uri,
    public_origin: Option<&str>,
) -> Result<(), CrossSite> {
    if let Some(site) = headers.get("sec-fetch-site")
        && site.as_bytes() != b"same-origin"
    {
        return Err(CrossSite::SecFetchSite);
    }
    if let Some(origin) = headers.get(header::ORIGIN) {
        let origin = origin.to_str().ok();
        let same = match public_origin {
            Some(want) => origin.is_some_and(|o| o.eq_ignore_ascii_case(want)),
            None => {
                let origin_host = origin.and_then(|o| o.strip_prefix("http://"));
                let host = request_host(headers, uri);
                matches!((origin_host, host), (Some(o), Some(h)) if o.eq_ignore_ascii_case(h))
            }
        };
        if !same {
            return Err(CrossSite::OtherOrigin);
        }
    }
    Ok(())
}

/// The host a request was sent to: the one `Host` header (HTTP/1.1), else the
/// target's authority (HTTP/2). Two `Host` headers name none.
fn request_host<'a>(headers: &'a HeaderMap, uri: &'a Uri) -> Option<&'a str> {
    let mut hosts = headers.get_all(header::HOST).iter();
    match (hosts.next(), hosts.next()) {
        (Some(h), None) => h.to_str().ok(),
        (None, None) => uri.authority().map(|a| a.as_str()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (n, v) in pairs {
            h.append(*n, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn a_same_origin_post_passes_and_others_are_refused() {
        let uri: Uri = "/console/logout".parse().unwrap();
        let ok = [
            vec![("host", "127.0.0.1:8081")],
            vec![
                ("host", "127.0.0.1:8081"),
                ("origin", "http://127.0.0.1:8081"),
                ("sec-fetch-site", "same-origin"),
            ],
            vec![
                ("host", "Admin.Example"),
                ("origin", "http://admin.example"),
            ],
        ];
        for h in ok {
            assert_eq!(same_origin(&headers(&h), &uri, None), Ok(()), "{h:?}");
        }
        let refused = [
            (
                vec![
                    ("host", "127.0.0.1:8081"),
                    ("origin", "http://127.0.0.1:9999"),
                ],
                CrossSite::OtherOrigin,
            ),
            (
                vec![("host", "127.0.0.1:8081"), ("origin", "null")],
                CrossSite::OtherOrigin,
            ),
            // Another scheme is another origin.
            (
                vec![
                    ("host", "127.0.0.1:8081"),
                    ("origin", "https://127.0.0.1:8081"),
                ],
                CrossSite::OtherOrigin,
            ),
            (
                vec![
                    ("host", "127.0.0.1:8081"),
                    ("host", "evil.example"),
                    ("origin", "http://evil.example"),
                ],
                CrossSite::OtherOrigin,
            ),
            (
                vec![("host", "127.0.0.1:8081"), ("sec-fetch-site", "same-site")],
                CrossSite::SecFetchSite,
            ),
            (
                vec![("host", "127.0.0.1:8081"), ("sec-fetch-site", "cross-site")],
                CrossSite::SecFetchSite,
            ),
        ];
        for (h, why) in refused {
            assert_eq!(same_origin(&headers(&h), &uri, None), Err(why), "{h:?}");
        }
        // HTTP/2: the authority of the target is the host.
        let h2: Uri = "http://127.0.0.1:8081/console/logout".parse().unwrap();
        let h = headers(&[("origin", "http://127.0.0.1:8081")]);
        assert_eq!(same_origin(&h, &h2, None), Ok(()));
    }

    #[test]
    fn behind_a_proxy_the_public_origin_is_the_one_origin() {
        let uri: Uri = "/console/logout".parse().unwrap();
        let public = Some("https://admin.example");
        let h = headers(&[
            ("host", "10.0.0.5:8081"),
            ("origin", "https://Admin.Example"),
        ]);
        assert_eq!(same_origin(&h, &uri, public), Ok(()));
        for origin in [
            "http://admin.example",
            "https://admin.example:8443",
            "https://evil.example",
            "http://10.0.0.5:8081",
        ] {
            let h = headers(&[("host", "10.0.0.5:8081"), ("origin", origin)]);
            assert_eq!(
                same_origin(&h, &uri, public),
                Err(CrossSite::OtherOrigin),
                "{origin}"
            );
        }
    }
}
