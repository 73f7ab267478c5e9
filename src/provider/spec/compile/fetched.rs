//! The parts of a spec that make the gateway fetch something (`[ranges]`, `[jwk]`,
//! `[certificate]`), compiled: each names the https hosts it may be fetched from,
//! and a `fetch_base` (for tests) only ever points at loopback.

use super::Invalid;
use crate::provider::spec::raw::{RawCertificate, RawJwk, RawRanges};
use crate::provider::spec::template::{parse_source, parse_value_template};
use crate::provider::spec::{
    Algorithm, CertificateRule, HeaderFormat, JwkRule, Ranges, Segment, SpecError,
};

/// `[ranges]` and `fetch_base`: an `https://` URL with a JSON pointer, fetched from
/// the loopback `fetch_base` instead when the spec sets one (tests).
pub(super) fn compile_ranges(
    raw: Option<&RawRanges>,
    fetch_base: Option<&str>,
    invalid: Invalid<'_>,
) -> Result<Option<Ranges>, SpecError> {
    let base = compile_fetch_base(fetch_base, invalid)?;
    let Some(raw) = raw else { return Ok(None) };
    let uri: http::Uri = raw
        .url
        .parse()
        .map_err(|_| invalid.at("ranges.url", format!("{:?} is not a URL", raw.url)))?;
    if uri.scheme_str() != Some("https") || uri.host().is_none_or(str::is_empty) {
        return Err(invalid.at(
            "ranges.url",
            format!("{:?} must be an https:// URL", raw.url),
        ));
    }
    if !(raw.pointer.is_empty() || raw.pointer.starts_with('/')) {
        return Err(invalid.at(
            "ranges.pointer",
            format!("{:?} is not a JSON pointer", raw.pointer),
        ));
    }
    let path = uri.path_and_query().map(|p| p.as_str()).unwrap_or("/");
    Ok(Some(Ranges {
        url: match base {
            Some(base) => format!("{base}{path}"),
            None => raw.url.clone(),
        },
        published: raw.url.clone(),
        pointer: raw.pointer.clone(),
        field: raw.field.clone(),
    }))
}

/// `fetch_base`: a loopback `http://` origin (tests only), when the spec sets one.
fn compile_fetch_base(
    fetch_base: Option<&str>,
    invalid: Invalid<'_>,
) -> Result<Option<String>, SpecError> {
    fetch_base
        .map(|base| {
            loopback_origin(base).ok_or_else(|| {
                invalid.at(
                    "fetch_base",
                    "must be a loopback http:// origin without a path (http://127.0.0.1:PORT): it is for tests".into(),
                )
            })
        })
        .transpose()
}

/// `text` as an `http://` origin on a loopback address (`127.0.0.0/8`, `::1`,
/// `localhost`), without a trailing slash; `None` when it is anything else.
fn loopback_origin(text: &str) -> Option<String> {
    let uri: http::Uri = text.parse().ok()?;
    if uri.scheme_str() != Some("http") || uri.path_and_query().is_some_and(|p| p.as_str() != "/") {
        return None;
    }
    let host = uri.host()?;
    let loopback = host == "localhost"
        || host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    loopback.then(|| text.trim_end_matches('/').to_string())
}

/// Host patterns: DNS labels, `*` for exactly one, the last two fixed.
fn check_hosts(key: &'static str, hosts: &[String], invalid: Invalid<'_>) -> Result<(), SpecError> {
    for host in hosts {
        let labels_ok = host.split('.').count() >= 2
            && host.split('.').all(|label| {
                label == "*"
                    || (!label.is_empty()
                        && label
                            .bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b == b'-'))
            });
        // A pattern needs a fixed registrable part: `*.com` would take any host.
        let fixed = host.split('.').rev().take(2).all(|l| l != "*");
        if !labels_ok || !fixed {
            return Err(invalid.at(
                key,
                format!(
                    "{host:?} is not a host pattern (labels, `*` for one label, the last two fixed)"
                ),
            ));
        }
    }
    Ok(())
}

/// `[jwk]`: for a JWS signed with a key the provider's API gives by its `kid`
/// (ES256), the URL asked (a value template) and the hosts it may be on.
pub(super) fn compile_jwk(
    raw: Option<&RawJwk>,
    algorithms: &[Algorithm],
    format: &HeaderFormat,
    fetch_base: Option<&str>,
    invalid: Invalid<'_>,
) -> Result<Option<JwkRule>, SpecError> {
    let Some(raw) = raw else {
        return Ok(None);
    };
    if !matches!(format, HeaderFormat::Jws { .. }) || algorithms != [Algorithm::EcdsaP256Sha256] {
        return Err(invalid.at(
            "jwk",
            "[jwk] gives the key of an ES256 JWS: format = \"jws\", algorithm = \"ecdsa-p256-sha256\"".into(),
        ));
    }
    let url = parse_value_template(&raw.url).map_err(|problem| invalid.at("jwk.url", problem))?;
    if !raw.url.starts_with("https://") {
        return Err(invalid.at("jwk.url", "the key's API is asked over https://".into()));
    }
    if raw.hosts.is_empty() {
        return Err(invalid.at(
            "jwk.hosts",
            "name the hosts the key's API may be on: the source's credentials go there".into(),
        ));
    }
    check_hosts("jwk.hosts", &raw.hosts, invalid)?;
    Ok(Some(JwkRule {
        url,
        hosts: raw.hosts.clone(),
        fetch_base: compile_fetch_base(fetch_base, invalid)?,
    }))
}

/// `[certificate]`: required by the `rsa-*` algorithms and refused without them;
/// `{secret}` in the signed content only with them.
pub(super) fn compile_certificate(
    raw: Option<&RawCertificate>,
    algorithms: &[Algorithm],
    content: &[Segment],
    fetch_base: Option<&str>,
    invalid: Invalid<'_>,
) -> Result<Option<CertificateRule>, SpecError> {
    let certificate_scheme = algorithms.iter().any(|a| a.is_certificate());
    if content.contains(&Segment::Secret) && !certificate_scheme {
        return Err(invalid.at(
            "signature.content",
            "{secret} is for certificate schemes (rsa-*), where the secret is a value the receiver knows".into(),
        ));
    }
    let raw = match (raw, certificate_scheme) {
        (None, false) => return Ok(None),
        (Some(_), false) => {
            return Err(invalid.at(
                "certificate",
                "a certificate checks rsa-* signatures; the algorithm is not one".into(),
            ));
        }
        (None, true) => {
            return Err(invalid.at(
                "certificate",
                "rsa-* signatures need [certificate]: where the request names its certificate"
                    .into(),
            ));
        }
        (Some(raw), true) => raw,
    };
    let url = parse_source(&raw.url).map_err(|problem| invalid.at("certificate.url", problem))?;
    if raw.hosts.is_empty() {
        return Err(invalid.at(
            "certificate.hosts",
            "name the hosts certificates may come from: a certificate from anywhere proves nothing"
                .into(),
        ));
    }
    check_hosts("certificate.hosts", &raw.hosts, invalid)?;
    let secret_matches = match &raw.secret_matches {
        Some(src) => Some(
            parse_source(src)
                .map_err(|problem| invalid.at("certificate.secret_matches", problem))?,
        ),
        None => None,
    };
    if secret_matches.is_none() && !content.contains(&Segment::Secret) {
        return Err(invalid.at(
            "certificate.secret_matches",
            "nothing binds a request to the source: anyone the provider signs for could post; sign {secret} or set secret_matches".into(),
        ));
    }
    let fetch_base = compile_fetch_base(fetch_base, invalid)?;
    Ok(Some(CertificateRule {
        url,
        hosts: raw.hosts.iter().map(|h| h.to_ascii_lowercase()).collect(),
        path_prefix: raw.path_prefix.clone(),
        path_suffix: raw.path_suffix.clone(),
        secret_matches,
        fetch_base,
    }))
}
