//! The client's address behind reverse proxies (`server.trusted_proxies`).
//!
//! `X-Forwarded-For` and `Forwarded` are headers anyone can send, so they are read
//! only when the connection comes from a proxy the configuration trusts, and then
//! only as far as trusted proxies wrote them: the list is walked from its right end
//! (the hop that the nearest proxy appended) leftwards, skipping trusted proxies;
//! the first address that is not one is the client. Whatever a client wrote to the
//! left of that is never read. Without `trusted_proxies` the connection's address
//! is the client, whatever the headers say.

use std::net::IpAddr;

use http::HeaderMap;
use ipnet::IpNet;

/// The most hops read from the right end of the forwarding headers.
const MAX_HOPS: usize = 32;

/// The client of a request that came over a connection from `peer`.
pub fn client_address(peer: IpAddr, headers: &HeaderMap, trusted: &[IpNet]) -> IpAddr {
    let peer = peer.to_canonical();
    let is_trusted = |ip: &IpAddr| trusted.iter().any(|net| net.contains(ip));
    if !is_trusted(&peer) {
        return peer;
    }
    let hops = match forwarded_for(headers) {
        Some(hops) => hops,
        None => x_forwarded_for(headers),
    };
    // The nearest hop known so far: a trusted proxy.
    let mut nearest = peer;
    for hop in hops.iter().rev().take(MAX_HOPS) {
        match hop {
            // A hop a proxy could not name: the client is beyond what is known; the
            // nearest proxy stands for it (and an allowlist refuses it).
            None => return nearest,
            Some(ip) if is_trusted(ip) => nearest = *ip,
            Some(ip) => return *ip,
        }
    }
    nearest
}

/// The hops of `X-Forwarded-For`, left to right, across every such header.
fn x_forwarded_for(headers: &HeaderMap) -> Vec<Option<IpAddr>> {
    headers
        .get_all("x-forwarded-for")
        .iter()
        .flat_map(|v| v.to_str().unwrap_or("?").split(','))
        .map(|hop| parse_hop(hop.trim()))
        .collect()
}

/// The `for=` hops of `Forwarded` (RFC 7239), left to right; `None` without the
/// header.
fn forwarded_for(headers: &HeaderMap) -> Option<Vec<Option<IpAddr>>> {
    let mut any = false;
    let mut hops = Vec::new();
    for value in headers.get_all(http::header::FORWARDED) {
        any = true;
        let Ok(value) = value.to_str() else {
            hops.push(None);
            continue;
        };
        for element in value.split(',') {
            let hop = element.split(';').find_map(|pair| {
                let (k, v) = pair.trim().split_once('=')?;
                k.trim().eq_ignore_ascii_case("for").then(|| v.trim())
            });
            hops.push(hop.and_then(|v| parse_hop(v.trim_matches('"'))));
        }
    }
    any.then_some(hops)
}

/// One hop: an address, with or without a port (`192.0.2.1:4711`,
/// `[2001:db8::1]:4711`); `None` for anything else (`unknown`, `_hidden`).
fn parse_hop(text: &str) -> Option<IpAddr> {
    if let Ok(ip) = text.parse::<IpAddr>() {
        return Some(ip.to_canonical());
    }
    if let Ok(sock) = text.parse::<std::net::SocketAddr>() {
        return Some(sock.ip().to_canonical());
    }
    text.strip_prefix('[')
        .and_then(|t| t.strip_suffix(']'))
        .and_then(|t| t.parse::<IpAddr>().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        h
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn forwarding_headers_count_only_from_trusted_proxies() {
        let trusted: Vec<IpNet> = vec!["10.0.0.0/8".parse().unwrap(), "::1/128".parse().unwrap()];
        let xff = headers(&[("x-forwarded-for", "203.0.113.9, 192.0.2.7")]);
        // Not from a proxy: the headers are not read.
        assert_eq!(
            client_address(ip("198.51.100.1"), &xff, &trusted),
            ip("198.51.100.1")
        );
        assert_eq!(client_address(ip("10.0.0.2"), &xff, &[]), ip("10.0.0.2"));
        // From a proxy: the rightmost hop that is not a trusted proxy; what the
        // client wrote to its left (203.0.113.9) is not believed.
        assert_eq!(
            client_address(ip("10.0.0.2"), &xff, &trusted),
            ip("192.0.2.7")
        );
        // Through two proxies.
        let two = headers(&[("x-forwarded-for", "192.0.2.7, 10.1.1.1")]);
        assert_eq!(
            client_address(ip("10.0.0.2"), &two, &trusted),
            ip("192.0.2.7")
        );
        // Split over several headers, with ports and v4-mapped v6.
        let split = headers(&[
            ("x-forwarded-for", "1.1.1.1"),
            ("x-forwarded-for", "[2001:db8::5]:4711"),
        ]);
        assert_eq!(
            client_address(ip("::1"), &split, &trusted),
            ip("2001:db8::5")
        );
        assert_eq!(
            client_address(ip("::ffff:10.0.0.2"), &xff, &trusted),
            ip("192.0.2.7")
        );
        // A hop no one could name: the nearest proxy stands for the client.
        let unknown = headers(&[("x-forwarded-for", "192.0.2.7, unknown")]);
        assert_eq!(
            client_address(ip("10.0.0.2"), &unknown, &trusted),
            ip("10.0.0.2")
        );
        // No header at all: the proxy itself.
        assert_eq!(
            client_address(ip("10.0.0.2"), &HeaderMap::new(), &trusted),
            ip("10.0.0.2")
        );
        // Every hop a proxy: the leftmost.
        let proxies = headers(&[("x-forwarded-for", "10.9.9.9, 10.1.1.1")]);
        assert_eq!(
            client_address(ip("10.0.0.2"), &proxies, &trusted),
            ip("10.9.9.9")
        );
    }

    #[test]
    fn forwarded_is_read_as_rfc_7239_writes_it() {
        let trusted: Vec<IpNet> = vec!["10.0.0.0/8".parse().unwrap()];
        let h = headers(&[(
            "forwarded",
            "for=198.51.100.3;proto=https, for=\"[2001:db8:cafe::17]:4711\";by=10.0.0.1",
        )]);
        assert_eq!(
            client_address(ip("10.0.0.2"), &h, &trusted),
            ip("2001:db8:cafe::17")
        );
        // Forwarded wins over X-Forwarded-For when both are there.
        let both = headers(&[
            ("forwarded", "for=192.0.2.60"),
            ("x-forwarded-for", "203.0.113.1"),
        ]);
        assert_eq!(
            client_address(ip("10.0.0.2"), &both, &trusted),
            ip("192.0.2.60")
        );
        let hidden = headers(&[("forwarded", "for=_hidden")]);
        assert_eq!(
            client_address(ip("10.0.0.2"), &hidden, &trusted),
            ip("10.0.0.2")
        );
    }
}
