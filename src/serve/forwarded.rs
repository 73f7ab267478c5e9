//! The client's address behind reverse proxies (`server.trusted_proxies`).
//!
//! `X-Forwarded-For`, `Forwarded` and `X-Real-IP` are headers anyone can send, so
//! one of them is read, and only when the connection comes from a proxy the
//! configuration trusts: the one header those proxies write
//! (`server.client_ip_header`, [`ClientIpHeader`]). The others are never read: a
//! proxy passes through a header it does not write (nginx passes a client's
//! `Forwarded` on while it appends to `X-Forwarded-For`), so reading it would let the
//! client name itself. The header is read only as far as trusted proxies wrote it:
//! its list is walked from its right end (the hop that the nearest proxy appended)
//! leftwards, skipping trusted proxies; the first address that is not one is the
//! client. Whatever a client wrote to the left of that is never read. Without
//! `trusted_proxies` the connection's address is the client, whatever the headers
//! say.

use std::net::IpAddr;

use http::HeaderMap;
use ipnet::IpNet;

pub use crate::config::ClientIpHeader;

/// The most hops read from the right end of the forwarding headers.
const MAX_HOPS: usize = 32;

/// How a request's client is found: the proxies trusted to name it, and the
/// header they write (`server.trusted_proxies`, `server.client_ip_header`).
#[derive(Debug, Clone, Default)]
pub struct ClientIp {
    pub trusted: Vec<IpNet>,
    pub header: ClientIpHeader,
}

impl ClientIp {
    /// The client of a request that came over a connection from `peer`.
    pub fn address(&self, peer: IpAddr, headers: &HeaderMap) -> IpAddr {
        client_address(peer, headers, &self.trusted, self.header)
    }
}

/// The client of a request that came over a connection from `peer`, read from
/// `header` when `peer` is one of the `trusted` proxies.
pub fn client_address(
    peer: IpAddr,
    headers: &HeaderMap,
    trusted: &[IpNet],
    header: ClientIpHeader,
) -> IpAddr {
    let peer = peer.to_canonical();
    let is_trusted = |ip: &IpAddr| trusted.iter().any(|net| net.contains(ip));
    if !is_trusted(&peer) {
        return peer;
    }
    let hops = match header {
        ClientIpHeader::Forwarded => forwarded_for(headers).unwrap_or_default(),
        ClientIpHeader::XForwardedFor => x_forwarded_for(headers, "x-forwarded-for"),
        ClientIpHeader::XRealIp => x_forwarded_for(headers, "x-real-ip"),
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

/// The hops of `X-Forwarded-For` (or of `X-Real-IP`, a list of one), left to
/// right, across every such header.
fn x_forwarded_for(headers: &HeaderMap, name: &str) -> Vec<Option<IpAddr>> {
    headers
        .get_all(name)
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

    const XFF: ClientIpHeader = ClientIpHeader::XForwardedFor;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn forwarding_headers_count_only_from_trusted_proxies() {
        let trusted: Vec<IpNet> = vec!["10.0.0.0/8".parse().unwrap(), "::1/128".parse().unwrap()];
        let xff = headers(&[("x-forwarded-for", "203.0.113.9, 192.0.2.7")]);
        // Not from a proxy: the headers are not read.
        assert_eq!(
            client_address(ip("198.51.100.1"), &xff, &trusted, XFF),
            ip("198.51.100.1")
        );
        assert_eq!(
            client_address(ip("10.0.0.2"), &xff, &[], XFF),
            ip("10.0.0.2")
        );
        // From a proxy: the rightmost hop that is not a trusted proxy; what the
        // client wrote to its left (203.0.113.9) is not believed.
        assert_eq!(
            client_address(ip("10.0.0.2"), &xff, &trusted, XFF),
            ip("192.0.2.7")
        );
        // Through two proxies.
        let two = headers(&[("x-forwarded-for", "192.0.2.7, 10.1.1.1")]);
        assert_eq!(
            client_address(ip("10.0.0.2"), &two, &trusted, XFF),
            ip("192.0.2.7")
        );
        // Split over several headers, with ports and v4-mapped v6.
        let split = headers(&[
            ("x-forwarded-for", "1.1.1.1"),
            ("x-forwarded-for", "[2001:db8::5]:4711"),
        ]);
        assert_eq!(
            client_address(ip("::1"), &split, &trusted, XFF),
            ip("2001:db8::5")
        );
        assert_eq!(
            client_address(ip("::ffff:10.0.0.2"), &xff, &trusted, XFF),
            ip("192.0.2.7")
        );
        // A hop no one could name: the nearest proxy stands for the client.
        let unknown = headers(&[("x-forwarded-for", "192.0.2.7, unknown")]);
        assert_eq!(
            client_address(ip("10.0.0.2"), &unknown, &trusted, XFF),
            ip("10.0.0.2")
        );
        // No header at all: the proxy itself.
        assert_eq!(
            client_address(ip("10.0.0.2"), &HeaderMap::new(), &trusted, XFF),
            ip("10.0.0.2")
        );
        // Every hop a proxy: the leftmost.
        let proxies = headers(&[("x-forwarded-for", "10.9.9.9, 10.1.1.1")]);
        assert_eq!(
            client_address(ip("10.0.0.2"), &proxies, &trusted, XFF),
            ip("10.9.9.9")
        );
    }

    #[test]
    fn forwarded_is_read_as_rfc_7239_writes_it() {
        const FWD: ClientIpHeader = ClientIpHeader::Forwarded;
        let trusted: Vec<IpNet> = vec!["10.0.0.0/8".parse().unwrap()];
        let h = headers(&[(
            "forwarded",
            "for=198.51.100.3;proto=https, for=\"[2001:db8:cafe::17]:4711\";by=10.0.0.1",
        )]);
        assert_eq!(
            client_address(ip("10.0.0.2"), &h, &trusted, FWD),
            ip("2001:db8:cafe::17")
        );
        let hidden = headers(&[("forwarded", "for=_hidden")]);
        assert_eq!(
            client_address(ip("10.0.0.2"), &hidden, &trusted, FWD),
            ip("10.0.0.2")
        );
        // Read only when configured: behind a proxy that writes X-Forwarded-For.
        assert_eq!(
            client_address(ip("10.0.0.2"), &h, &trusted, XFF),
            ip("10.0.0.2")
        );
    }

    #[test]
    fn only_the_header_the_proxies_write_is_read() {
        let trusted: Vec<IpNet> = vec!["10.0.0.0/8".parse().unwrap()];
        // A proxy appended the client's address to X-Forwarded-For and passed the
        // client's own Forwarded and X-Real-IP on.
        let both = headers(&[
            ("x-forwarded-for", "203.0.113.9"),
            ("forwarded", "for=192.0.2.5"),
            ("x-real-ip", "192.0.2.6"),
        ]);
        assert_eq!(
            client_address(ip("10.0.0.2"), &both, &trusted, XFF),
            ip("203.0.113.9")
        );
        // A proxy that writes Forwarded (and passes X-Forwarded-For on).
        assert_eq!(
            client_address(ip("10.0.0.2"), &both, &trusted, ClientIpHeader::Forwarded),
            ip("192.0.2.5")
        );
        // A proxy that sets X-Real-IP.
        assert_eq!(
            client_address(ip("10.0.0.2"), &both, &trusted, ClientIpHeader::XRealIp),
            ip("192.0.2.6")
        );
        let none = headers(&[("x-forwarded-for", "203.0.113.9")]);
        assert_eq!(
            client_address(ip("10.0.0.2"), &none, &trusted, ClientIpHeader::XRealIp),
            ip("10.0.0.2")
        );
        // Without trusted proxies, none is read.
        assert_eq!(
            client_address(ip("10.0.0.2"), &both, &[], ClientIpHeader::Forwarded),
            ip("10.0.0.2")
        );
    }
}
