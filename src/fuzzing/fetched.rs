//! Target `fetched`: what a source learns from outside its webhooks, and whose
//! address a request comes from: a provider's published ranges
//! (`allowlist::fetch::parse`), a certificate scheme's URL check
//! (`provider::certificate::check_url`) and certificate reader (`rsa_key_of`), a
//! `[jwk]` scheme's key answer (`provider::jwk::ec_key_of`) and the SNS confirmation
//! URL check (`ingest::subscription::subscribe_url`), and the client address behind
//! trusted proxies (`serve::forwarded::client_address`).
//!
//! Input: a first line that picks the part (`ranges`, `url`, `cert`, `jwk`,
//! `subscribe`, `forwarded`),
//! then the part's own lines, an empty line, and a body:
//! * `ranges`: line 2 the JSON pointer, line 3 (optional) the field; the body is the
//!   fetched document.
//! * `url`: line 2 the URL a request names; checked against SNS's and PayPal's rules.
//! * `cert`: the body is a certificate (PEM or DER).
//! * `jwk`: line 2 the key id; the body is the key API's answer.
//! * `subscribe`: the body is an SNS confirmation message.
//! * `forwarded`: line 2 the peer address, then `name: value` header lines.
//!
//! Checked beyond "no panic": parsed ranges are sorted, without repeats, within the
//! bound; an accepted certificate URL is `https://` on a host the rule names; a key
//! taken from a JWK is a point of P-256; an SNS confirmation URL visited is `https://`
//! on SNS's hosts with `Action=ConfirmSubscription`; the
//! client address is the peer, or an address that a forwarding header holds.

use std::net::IpAddr;

use super::{head_and_rest, text};
use crate::allowlist::fetch::{self, MAX_RANGES};
use crate::provider::certificate::{check_url, rsa_key_of};
use crate::provider::spec::{CertificateRule, Ranges, ValueSource};
use crate::serve::forwarded::{ClientIpHeader, client_address};

pub fn fetched(data: &[u8]) {
    let (head, body) = head_and_rest(data);
    match text(head.first()).as_str() {
        "ranges" => ranges(&head, body),
        "url" => url(&text(head.get(1))),
        "cert" => {
            let _ = rsa_key_of(body, std::time::SystemTime::now());
        }
        "jwk" => {
            if let Ok((point, _)) =
                crate::provider::jwk::ec_key_of(body, &text(head.get(1)), 1_700_000_000)
            {
                assert!(p256::ecdsa::VerifyingKey::from_sec1_bytes(&point).is_ok());
            }
        }
        "subscribe" => {
            let rule = crate::provider::certificate::sns_rule(None);
            if let Ok(url) = crate::ingest::subscription::subscribe_url(&rule, body) {
                let uri: http::Uri = url.parse().expect("a visited URL parses");
                assert_eq!(uri.scheme_str(), Some("https"));
                let host = uri.host().unwrap_or_default();
                assert!(
                    host.starts_with("sns.") && host.contains(".amazonaws.com"),
                    "{url}"
                );
                assert!(url.contains("Action=ConfirmSubscription"), "{url}");
            }
        }
        "forwarded" => forwarded(&head),
        _ => {}
    }
}

fn ranges(head: &[&[u8]], body: &[u8]) {
    let spec = Ranges {
        url: "https://example.com/".into(),
        published: "https://example.com/".into(),
        pointer: text(head.get(1)),
        field: head.get(2).map(|l| String::from_utf8_lossy(l).into_owned()),
    };
    if let Ok(list) = fetch::parse(body, &spec) {
        assert!(!list.is_empty() && list.len() <= MAX_RANGES);
        assert!(list.windows(2).all(|w| w[0] < w[1]), "sorted, no repeats");
    }
}

fn url(named: &str) {
    let rules = [
        crate::provider::certificate::sns_rule(None),
        CertificateRule {
            url: ValueSource::Json("/cert".into()),
            hosts: vec!["api.paypal.com".into(), "api.sandbox.paypal.com".into()],
            path_prefix: Some("/v1/notifications/certs/".into()),
            path_suffix: None,
            secret_matches: None,
            fetch_base: Some("http://127.0.0.1:9".into()),
        },
    ];
    for rule in &rules {
        let Ok(got) = check_url(rule, named) else {
            continue;
        };
        let uri: http::Uri = named.parse().expect("an accepted URL parses");
        assert_eq!(uri.scheme_str(), Some("https"));
        let host = uri
            .host()
            .expect("an accepted URL has a host")
            .to_ascii_lowercase();
        assert!(
            rule.hosts.iter().any(|p| {
                let (p, h): (Vec<&str>, Vec<&str>) =
                    (p.split('.').collect(), host.split('.').collect());
                p.len() == h.len() && p.iter().zip(&h).all(|(p, h)| *p == "*" || p == h)
            }),
            "{host} is not a host of the rule"
        );
        if let Some(base) = &rule.fetch_base {
            assert!(got.fetched.starts_with(base.as_str()));
        } else {
            assert_eq!(got.fetched, named);
        }
    }
}

fn forwarded(head: &[&[u8]]) {
    let Ok(peer) = text(head.get(1)).trim().parse::<IpAddr>() else {
        return;
    };
    let mut headers = http::HeaderMap::new();
    for line in head.iter().skip(2) {
        let line = String::from_utf8_lossy(line);
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        if let (Ok(n), Ok(v)) = (
            http::HeaderName::from_bytes(name.trim().as_bytes()),
            http::HeaderValue::from_str(value.trim()),
        ) {
            headers.append(n, v);
        }
    }
    let trusted: Vec<ipnet::IpNet> = vec![
        "10.0.0.0/8".parse().expect("a range"),
        "::1/128".parse().expect("a range"),
        "127.0.0.0/8".parse().expect("a range"),
    ];
    for header in [
        ClientIpHeader::XForwardedFor,
        ClientIpHeader::Forwarded,
        ClientIpHeader::XRealIp,
    ] {
        let got = client_address(peer, &headers, &trusted, header);
        if got == peer.to_canonical() {
            continue;
        }
        // The client came from the one header read: one of its hops names it.
        let named = headers
            .get_all(header.name())
            .iter()
            .flat_map(|v| {
                v.to_str()
                    .unwrap_or("")
                    .split([',', ';', '=', '"', ' ', '[', ']'])
                    .filter_map(|t| {
                        t.parse::<IpAddr>()
                            .ok()
                            .or_else(|| t.parse::<std::net::SocketAddr>().ok().map(|s| s.ip()))
                    })
                    .map(|ip| ip.to_canonical())
                    .collect::<Vec<_>>()
            })
            .any(|ip| ip == got);
        assert!(named, "{got} is in no {} header", header.name());
        assert!(trusted.iter().any(|n| n.contains(&peer.to_canonical())));
    }
}
