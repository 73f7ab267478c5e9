//! A spec told to a human: what a provider verifies and what a source using it
//! needs, as `hookgate providers` prints it. Values are written in spec syntax, so
//! what is printed can be pasted back into a spec.

use super::{
    Algorithm, Handshake, HeaderFormat, SecretEncoding, Segment, Spec, UrlPort, ValueSource,
    ValueTemplate,
};

/// What a provider verifies and what a source using it needs, one line per aspect.
pub fn describe(spec: &Spec) -> Vec<(&'static str, String)> {
    vec![
        ("signature", signature(spec)),
        ("timestamp", timestamp(spec)),
        ("event id", event_id(spec)),
        ("event type", event_type(spec)),
        ("object", object(spec)),
        ("handshake", handshake(spec)),
        ("ranges", ranges(spec)),
        ("config", config(spec)),
        ("sign", sign(spec)),
    ]
}

/// How the signature is made and where it is: algorithms, encoding, location, the
/// signed content.
fn signature(spec: &Spec) -> String {
    let algorithms: Vec<&str> = spec.algorithms.iter().map(|a| a.name()).collect();
    let location = match &spec.signature_from {
        ValueSource::Header(_) => {
            let names: Vec<&str> = spec.signature_headers().map(|h| h.as_str()).collect();
            match names.as_slice() {
                [one] => format!("header {one}"),
                many => format!("header {} (any of them)", many.join(" or ")),
            }
        }
        other => other.to_string(),
    };
    let shape = match &spec.format {
        HeaderFormat::Plain { prefix } if prefix.is_empty() => String::new(),
        HeaderFormat::Plain { prefix } => format!(" after {prefix:?}"),
        HeaderFormat::Jws { claims } if claims.is_empty() => " as a compact JWS".to_string(),
        HeaderFormat::Jws { claims } => {
            let held: Vec<String> = claims.iter().map(|(k, v)| format!("{k}={v:?}")).collect();
            format!(" as a compact JWS with {}", held.join(", "))
        }
        HeaderFormat::Kv { signature_keys, .. } => {
            format!(" as {} of a key/value list", signature_keys.join("/"))
        }
    };
    if spec.algorithm() == Algorithm::Token {
        format!("token: {location} equals the secret (constant time)")
    } else {
        let mut s = format!(
            "{}, {}, {location}{shape}, over {}",
            algorithms.join(" or "),
            spec.encoding.name(),
            // One line: a newline the template signs is shown as TOML writes it.
            spec.content_text().replace('\n', "\\n")
        );
        if spec.url_port == UrlPort::Either {
            s.push_str(" (URL with or without its port)");
        }
        if let Some(src) = &spec.body_sha256 {
            s.push_str(&format!("; a body digest in {src} stands in for the form"));
        }
        s
    }
}

/// The signed timestamp and its replay window.
fn timestamp(spec: &Spec) -> String {
    match &spec.timestamp {
        Some(t) => format!(
            "{}, {}, within {} either way",
            t.from,
            t.unit.name(),
            humantime::format_duration(t.tolerance)
        ),
        None => "none signed (no replay window)".into(),
    }
}

/// The templates a value is taken from, in the order they are tried.
fn templates(ts: &[ValueTemplate]) -> String {
    ts.iter()
        .map(|t| t.text.as_str())
        .collect::<Vec<_>>()
        .join(", else ")
}

/// Where the event id comes from, and whether the signature covers it.
fn event_id(spec: &Spec) -> String {
    if spec.event_id.is_empty() && spec.content.contains(&Segment::FormSorted) {
        "none: the hash of the signed form parameters dedupes".to_string()
    } else if spec.event_id.is_empty() {
        "none: the body hash dedupes".to_string()
    } else if spec.event_id_is_signed() {
        format!("{} (signed)", templates(&spec.event_id))
    } else {
        format!(
            "{} (unsigned: dedupes together with the body hash)",
            templates(&spec.event_id)
        )
    }
}

/// Values taken from `ts`, and whether the signature covers them.
fn signed_or_not(spec: &Spec, ts: &[ValueTemplate]) -> String {
    match spec.all_signed(ts) {
        true => format!("{} (signed)", templates(ts)),
        false => format!(
            "{} (unsigned: a replay can change it; route filters and ordering keys on it are warned about)",
            templates(ts)
        ),
    }
}

/// Where the event type comes from.
fn event_type(spec: &Spec) -> String {
    if spec.event_type.is_empty() {
        "none".to_string()
    } else {
        signed_or_not(spec, &spec.event_type)
    }
}

/// Where the event's object (an ordering key) comes from.
fn object(spec: &Spec) -> String {
    if spec.event_object.is_empty() {
        "none (order.by = \"provider\" is refused)".to_string()
    } else {
        signed_or_not(spec, &spec.event_object)
    }
}

/// The handshake the provider makes, and how it is answered.
fn handshake(spec: &Spec) -> String {
    match spec.handshake {
        Some(h @ Handshake::HookSecret) => format!(
            "{} (taken only while an operator armed it, from the handshake whose URL carries the arming's token: `hookgate sources handshake` prints the target URL; its secret is kept in the store)",
            h.name()
        ),
        Some(h) => format!(
            "{} (answered only after verification, not stored)",
            h.name()
        ),
        None => "none".into(),
    }
}

/// What a source's `secret` is for this provider.
fn secret(spec: &Spec) -> String {
    match (spec.algorithm(), &spec.jwk) {
        (_, Some(j)) => format!(
            "secret = client_id:secret, the API credentials the JWS's key is asked for by kid at {} (https on {})",
            j.url.text,
            j.hosts.join(", ")
        ),
        (a, None) if a.is_certificate() => match &spec.certificate {
            Some(c) => {
                let bound = match &c.secret_matches {
                    Some(src) => format!("the value of {src} the source takes"),
                    None => "the value signed as {secret}".to_string(),
                };
                format!(
                    "secret = {bound}; the key is the certificate at {} (https on {})",
                    c.url,
                    c.hosts.join(", ")
                )
            }
            None => "secret".to_string(),
        },
        (a, None) if a.is_public_key() => format!(
            "secret = the provider's public key ({})",
            spec.secret_encoding.name()
        ),
        (Algorithm::Token, None) => "secret = the token the provider sends".into(),
        _ => match spec.secret_encoding {
            SecretEncoding::Utf8 => "secret (its UTF-8 bytes are the key)".to_string(),
            SecretEncoding::WhsecBase64 => "secret (whsec_ and base64, decoded)".to_string(),
            other => format!("secret ({}, decoded)", other.name()),
        },
    }
}

/// What a source of this provider configures.
fn config(spec: &Spec) -> String {
    let secret = secret(spec);
    let secret = if spec.handshake == Some(Handshake::HookSecret) {
        format!("nothing: the key comes in the handshake; a configured {secret} verifies as well")
    } else {
        secret
    };
    if spec.signs_url() {
        format!("{secret}; public_url = the URL the provider calls")
    } else {
        secret
    }
}

/// Whether `hookgate sign` can sign for this provider.
fn sign(spec: &Spec) -> String {
    if spec.algorithm().is_public_key() {
        "no: signatures need the provider's private key".to_string()
    } else {
        format!("yes ({})", spec.algorithm().name())
    }
}

/// The address ranges the provider publishes.
fn ranges(spec: &Spec) -> String {
    match &spec.ranges {
        Some(r) if r.url != r.published => format!(
            "{} at {} (fetched from {}: fetch_base, for tests)",
            r.published, r.pointer, r.url
        ),
        Some(r) => format!(
            "{} at {} (allow_ips = \"provider\")",
            r.published, r.pointer
        ),
        None => "none published (allow_ips takes a list)".into(),
    }
}
