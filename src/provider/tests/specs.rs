//! The spec format on the whole catalogue: per-source overrides, errors that name
//! the key, templates that round-trip to text, and which event ids count as signed.

use super::*;

#[test]
fn provider_options_override_the_generic_hmac_provider() {
    let reg = Registry::builtin().unwrap();
    let opts: toml::Table = toml::from_str(
        "[signature]\nheader = \"X-Acme-Sig\"\nprefix = \"sha256=\"\nencoding = \"base64\"\n[event]\nid = \"json:/event_id\"\n",
    )
    .unwrap();
    let spec = reg.resolve("hmac", Some(&opts)).unwrap();
    assert_eq!(spec.signature_header().unwrap().as_str(), "x-acme-sig");
    assert_eq!(spec.encoding, spec::Encoding::Base64);
    assert!(spec.vectors.is_empty());

    let bad: toml::Table = toml::from_str("[signature]\nencoding = \"rot13\"\n").unwrap();
    // The key is named by the cause, which is chained.
    let err = format!(
        "{:#}",
        anyhow::Error::from(reg.resolve("hmac", Some(&bad)).unwrap_err())
    );
    assert!(err.contains("signature.encoding"), "{err}");
    assert!(reg.resolve("nope", None).is_err());
}

/// Spec texts (after `name` and `[signature]`) and the key each one's error names.
const FORMAT_ERRORS: &[(&str, &str)] = &[
    ("algorithm = \"hmac-sha256\"\n", "signature.header"),
    (
        "algorithm = \"hmac-sha256\"\nheader = \"X\"\nfrom = \"json:/sig\"\n",
        "signature.from",
    ),
    (
        "algorithm = \"hmac-sha256\"\nfrom = \"json:/sig\"\n",
        "signature.from",
    ),
    (
        "algorithm = \"hmac-sha256\"\nfrom = \"signature:x\"\ncontent = \"{json:/a}\"\n",
        "signature.from",
    ),
    (
        "algorithm = [\"hmac-sha1\", \"ed25519\"]\nheader = \"X\"\n",
        "signature.algorithm",
    ),
    ("algorithm = []\nheader = \"X\"\n", "signature.algorithm"),
    (
        "algorithm = \"ed25519\"\nheader = \"X\"\n",
        "signature.secret_encoding",
    ),
    (
        "algorithm = \"hmac-sha256\"\nheader = \"X\"\nurl_port = \"maybe\"\n",
        "signature.url_port",
    ),
    (
        "algorithm = \"hmac-sha256\"\nheader = \"X\"\nbody_sha256 = \"query:h\"\n",
        "signature.body_sha256",
    ),
    (
        "algorithm = \"hmac-sha256\"\nheader = \"X\"\ncontent = \"{url}\"\n",
        "signature.content",
    ),
    (
        "algorithm = \"hmac-sha256\"\nheader = \"X\"\n[event]\nid = \"form:\"\n",
        "event.id",
    ),
    (
        "algorithm = \"hmac-sha256\"\nheader = \"X\"\n[event]\ntype = \"{json:/a\"\n",
        "event.type",
    ),
    (
        "algorithm = \"hmac-sha256\"\nheader = \"X\"\n[event]\nid = \"lit\"\n",
        "event.id",
    ),
    (
        "algorithm = \"ed25519\"\nheader = \"X\"\nsecret_encoding = \"hex\"\n[handshake]\nkind = \"zoom-url-validation\"\n",
        "handshake.kind",
    ),
    (
        "algorithm = \"hmac-sha256\"\nheader = [\"X-A\", \"x-a\"]\n",
        "signature.header",
    ),
    (
        "algorithm = \"hmac-sha256\"\nheader = []\n",
        "signature.header",
    ),
    (
        "algorithm = \"hmac-sha256\"\nheader = [\"X-A\", \"X-B\"]\ncontent = \"{header:X-B}{body}\"\n",
        "signature.content",
    ),
    (
        "algorithm = \"hmac-sha256\"\nheader = [\"X-A\", \"X-B\"]\ncontent = \"{timestamp}{body}\"\n[timestamp]\nfrom = \"header:X-B\"\ntolerance = \"5m\"\n",
        "timestamp.from",
    ),
    (
        "algorithm = \"hmac-sha256\"\nheader = \"X\"\ncontent = \"{timestamp}{body}\"\n[timestamp]\nfrom = \"header:T\"\nunit = \"iso\"\ntolerance = \"5m\"\n",
        "timestamp.unit",
    ),
];

#[test]
fn spec_format_errors_name_the_key() {
    let base = "name = \"x\"\n[signature]\n";
    let cases = FORMAT_ERRORS;
    for (text, key) in cases {
        let err = Spec::from_toml(&format!("{base}{text}"))
            .unwrap_err()
            .to_string();
        assert!(err.contains(key), "{text:?}: {err}");
    }
}

#[test]
fn value_sources_and_templates_round_trip_to_text() {
    for s in [
        "header:x-a",
        "signature:t",
        "json:/a/b",
        "form:payload",
        "form:payload#/trigger_id",
        "query:bodySHA256",
    ] {
        assert_eq!(spec::parse_source(s).unwrap().to_string(), s);
    }
    let t = spec::parse_value_template("{json:/type}.{json:/action}").unwrap();
    assert_eq!(t.sources().count(), 2);
    assert!(t.single().is_none());
    let reg = Registry::builtin().unwrap();
    for spec in reg.iter() {
        let again = spec::parse_template(&spec.content_text()).unwrap();
        assert_eq!(again, spec.content, "{}", spec.name);
    }
}

#[test]
fn event_ids_are_signed_only_where_the_signature_covers_them() {
    let reg = Registry::builtin().unwrap();
    let signed: Vec<&str> = reg
        .iter()
        .filter(|s| s.event_id_is_signed())
        .map(|s| s.name.as_str())
        .collect();
    assert_eq!(
        signed,
        [
            "adyen",
            "aws-sns",
            "box",
            "circleci",
            "clerk",
            "coinbase-commerce",
            "discord",
            "intercom",
            "linear",
            "mailgun",
            "mux",
            "notion",
            "paddle",
            "resend",
            "slack",
            "square",
            "standard-webhooks",
            "stripe",
            "svix",
            "trello",
            "twitch",
            "typeform",
            "vercel",
            "workos",
        ]
    );
}

#[test]
fn rfc3339_timestamps_parse_with_any_offset_and_format_in_utc() {
    use spec::TimeUnit;
    let unit = TimeUnit::Rfc3339;
    assert_eq!(unit.parse("2023-11-14T22:13:20Z"), Some(1_700_000_000));
    assert_eq!(unit.parse("2023-11-14T14:13:20-08:00"), Some(1_700_000_000));
    assert_eq!(
        unit.parse("2023-11-14T22:13:20.634234626Z"),
        Some(1_700_000_000)
    );
    for bad in [
        "",
        "1700000000",
        "2023-11-14 22:13:20",
        "2023-11-14T22:13:20",
    ] {
        assert_eq!(unit.parse(bad), None, "{bad:?}");
    }
    assert_eq!(unit.parse(&"9".repeat(41)), None);
    assert_eq!(unit.format(1_700_000_000), "2023-11-14T22:13:20Z");
    assert_eq!(
        TimeUnit::Milliseconds.parse("1700000000999"),
        Some(1_700_000_000)
    );
    assert_eq!(TimeUnit::Seconds.parse("+1"), None);
}

#[test]
fn ranges_are_fetched_over_https_or_from_a_loopback_test_base() {
    let spec = |top: &str, ranges: &str| {
        Spec::from_toml(&format!(
            "name = \"x\"\n{top}[signature]\nalgorithm = \"hmac-sha256\"\nheader = \"X\"\n[ranges]\n{ranges}"
        ))
    };
    let good = "url = \"https://api.example.com/meta?v=1\"\npointer = \"/hooks\"\n";
    let s = spec("", good).unwrap();
    let r = s.ranges.unwrap();
    assert_eq!(r.url, "https://api.example.com/meta?v=1");
    let s = spec("fetch_base = \"http://127.0.0.1:4567\"\n", good).unwrap();
    let r = s.ranges.unwrap();
    assert_eq!(r.url, "http://127.0.0.1:4567/meta?v=1");
    assert_eq!(r.published, "https://api.example.com/meta?v=1");
    assert!(spec("fetch_base = \"http://[::1]:80/\"\n", good).is_ok());
    for (top, ranges, key) in [
        ("fetch_base = \"http://192.0.2.1:80\"\n", good, "fetch_base"),
        (
            "fetch_base = \"https://127.0.0.1:80\"\n",
            good,
            "fetch_base",
        ),
        (
            "fetch_base = \"http://127.0.0.1:80/x\"\n",
            good,
            "fetch_base",
        ),
        (
            "",
            "url = \"http://api.example.com/meta\"\npointer = \"/hooks\"\n",
            "ranges.url",
        ),
        (
            "",
            "url = \"https://api.example.com/meta\"\npointer = \"hooks\"\n",
            "ranges.pointer",
        ),
    ] {
        let err = spec(top, ranges).unwrap_err().to_string();
        assert!(err.contains(key), "{top}{ranges}: {err}");
    }
    // No built-in spec sends its fetches anywhere but the provider.
    let reg = Registry::builtin().unwrap();
    for s in reg.iter() {
        if let Some(r) = &s.ranges {
            assert_eq!(r.url, r.published, "{}", s.name);
            assert!(r.url.starts_with("https://"), "{}", s.name);
        }
    }
    assert!(reg.get("github").unwrap().ranges.is_some());
    assert!(reg.get("stripe").unwrap().ranges.is_some());
}
