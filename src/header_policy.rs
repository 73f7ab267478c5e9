//! Which received headers hookgate keeps, and which it passes on to the internal app.
//!
//! Everything a sender put in a request is untrusted, and some of it is a credential:
//! `Authorization`, `Cookie`, `Proxy-Authorization`, and a provider's token header
//! (`X-Gitlab-Token` *is* the shared secret). Those are neither stored nor forwarded
//! unless the source names them in `pass_headers` (`"*"` does not name them). Headers
//! a proxy would set (`Forwarded`, `X-Forwarded-*`, `X-Real-IP`) are stored (the
//! operator may want to see them) but only passed on when named, so a client cannot
//! inject them into what the internal app receives. Hop-by-hop and framing headers
//! are neither kept nor passed; hookgate's own delivery headers always replace any
//! received header of the same name.
//!
//! Ingest asks [`HeaderPolicy::keeps`] before storing, the forwarder asks
//! [`HeaderPolicy::passes`] before sending; both hold the same policy per source, so
//! what is passed was necessarily stored.

use http::HeaderName;

/// Credential headers of every source, whatever the provider.
pub const CREDENTIAL_HEADERS: &[&str] = &["authorization", "proxy-authorization", "cookie"];

/// Hop-by-hop and framing headers: part of one HTTP exchange, not of the webhook.
fn hop_by_hop(name: &str) -> bool {
    matches!(
        name,
        "connection"
            | "keep-alive"
            | "transfer-encoding"
            | "te"
            | "trailer"
            | "upgrade"
            | "proxy-connection"
            | "content-length"
            | "expect"
    )
}

/// Headers a reverse proxy sets about the client; a client can send them too.
fn proxy_set(name: &str) -> bool {
    name == "forwarded" || name == "x-real-ip" || name.starts_with("x-forwarded-")
}

/// One source's header policy.
#[derive(Debug, Clone)]
pub struct HeaderPolicy {
    /// Lowercase names of the credential headers (the defaults and the provider's).
    credentials: Vec<String>,
    /// `pass_headers` contains `"*"`.
    all: bool,
    /// The lowercase names `pass_headers` lists explicitly.
    named: Vec<String>,
}

impl HeaderPolicy {
    /// The policy of a source: its `pass_headers` (lowercase; `"*"` for all ordinary
    /// headers) and its provider's credential headers.
    pub fn new(pass_headers: &[String], provider_credentials: &[HeaderName]) -> HeaderPolicy {
        let mut credentials: Vec<String> =
            CREDENTIAL_HEADERS.iter().map(|s| s.to_string()).collect();
        for h in provider_credentials {
            let n = h.as_str().to_string();
            if !credentials.contains(&n) {
                credentials.push(n);
            }
        }
        HeaderPolicy {
            credentials,
            all: pass_headers.iter().any(|h| h == "*"),
            named: pass_headers
                .iter()
                .filter(|h| *h != "*")
                .map(|h| h.to_ascii_lowercase())
                .collect(),
        }
    }

    fn named(&self, name: &str) -> bool {
        self.named.iter().any(|n| n == name)
    }

    /// Whether the header is a credential that `pass_headers` does not name.
    fn withheld_credential(&self, name: &str) -> bool {
        self.credentials.iter().any(|c| c == name) && !self.named(name)
    }

    /// Whether a received header (lowercase name) is stored with the entry.
    pub fn keeps(&self, name: &str) -> bool {
        !hop_by_hop(name) && !self.withheld_credential(name)
    }

    /// Whether a stored header (lowercase name) is passed on to the destination.
    pub fn passes(&self, name: &str) -> bool {
        if hop_by_hop(name)
            || name == "host"
            || name.starts_with("webhook-")
            || name.starts_with("hookgate-")
            || self.withheld_credential(name)
        {
            return false;
        }
        if self.named(name) || name == "content-type" {
            return true;
        }
        self.all && !proxy_set(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(pass: &[&str]) -> HeaderPolicy {
        let pass: Vec<String> = pass.iter().map(|s| s.to_string()).collect();
        HeaderPolicy::new(&pass, &[HeaderName::from_static("x-gitlab-token")])
    }

    #[test]
    fn credentials_are_neither_kept_nor_passed_unless_named() {
        let all = policy(&["*"]);
        for h in [
            "authorization",
            "cookie",
            "proxy-authorization",
            "x-gitlab-token",
        ] {
            assert!(!all.keeps(h), "{h} kept");
            assert!(!all.passes(h), "{h} passed");
        }
        let named = policy(&["*", "Authorization", "x-gitlab-token"]);
        assert!(named.keeps("authorization") && named.passes("authorization"));
        assert!(named.keeps("x-gitlab-token") && named.passes("x-gitlab-token"));
        assert!(!named.keeps("cookie"));
    }

    #[test]
    fn proxy_headers_are_kept_but_passed_only_when_named() {
        let all = policy(&["*"]);
        for h in [
            "forwarded",
            "x-forwarded-for",
            "x-forwarded-host",
            "x-real-ip",
        ] {
            assert!(all.keeps(h), "{h}");
            assert!(!all.passes(h), "{h}");
        }
        assert!(policy(&["x-forwarded-for"]).passes("x-forwarded-for"));
    }

    #[test]
    fn ordinary_headers_follow_pass_headers() {
        let all = policy(&["*"]);
        assert!(all.keeps("stripe-signature") && all.passes("stripe-signature"));
        assert!(!all.keeps("connection") && all.keeps("host") && !all.passes("host"));
        assert!(!all.passes("webhook-id") && !all.passes("hookgate-source"));
        let none = policy(&[]);
        assert!(none.keeps("stripe-signature") && !none.passes("stripe-signature"));
        assert!(none.passes("content-type"));
    }
}
