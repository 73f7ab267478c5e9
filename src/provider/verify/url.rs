//! The URL a provider called, for specs that sign it (`{url}`): the configured
//! `public_url` with the received query, and the port variants that Twilio's own
//! validators accept.

/// The URL a provider called: `public_url` (configured, without query) followed by
/// the query string of the received request, if any.
pub fn request_url(public_url: &str, query: Option<&str>) -> String {
    match query {
        Some(q) => format!("{public_url}?{q}"),
        None => public_url.to_string(),
    }
}

/// The forms of `url` a provider with `url_port = "either"` may have signed: without
/// any port, and with its port (the scheme's default when it names none).
pub fn port_variants(url: &str) -> Vec<String> {
    let Some(scheme_end) = url.find("://") else {
        return vec![url.to_string()];
    };
    let start = scheme_end + 3;
    let end = url[start..]
        .find(['/', '?', '#'])
        .map_or(url.len(), |i| start + i);
    let authority = &url[start..end];
    let host_start = authority.rfind('@').map_or(0, |i| i + 1);
    let host_port = &authority[host_start..];
    let (host, port) = match host_port.rfind(':') {
        Some(i)
            if i + 1 < host_port.len()
                && !host_port[i..].contains(']')
                && host_port[i + 1..].bytes().all(|b| b.is_ascii_digit()) =>
        {
            (&host_port[..i], Some(&host_port[i + 1..]))
        }
        _ => (host_port, None),
    };
    let default = match url[..scheme_end].to_ascii_lowercase().as_str() {
        "https" => Some("443"),
        "http" => Some("80"),
        _ => None,
    };
    let prefix = &url[..start + host_start];
    let suffix = &url[end..];
    let mut out = vec![format!("{prefix}{host}{suffix}")];
    if let Some(p) = port.or(default) {
        out.push(format!("{prefix}{host}:{p}{suffix}"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_variants_follow_twilio_validators() {
        assert_eq!(
            port_variants("https://mycompany.com/myapp.php?foo=1&bar=2"),
            [
                "https://mycompany.com/myapp.php?foo=1&bar=2",
                "https://mycompany.com:443/myapp.php?foo=1&bar=2"
            ]
        );
        assert_eq!(
            port_variants("http://mycompany.com:1234/myapp.php"),
            [
                "http://mycompany.com/myapp.php",
                "http://mycompany.com:1234/myapp.php"
            ]
        );
        assert_eq!(
            port_variants("https://u:p@[::1]:8443?x=1"),
            ["https://u:p@[::1]?x=1", "https://u:p@[::1]:8443?x=1"]
        );
        assert_eq!(
            port_variants("https://[::1]/"),
            ["https://[::1]/", "https://[::1]:443/"]
        );
        assert_eq!(port_variants("not a url"), ["not a url"]);
    }
}
