//! Target `routing`: what runs on a verified body before it is stored: route filters
//! (event-type globs, body and header predicates), JSON pointers, ordering keys and
//! the form parser.
//!
//! Input: a TOML head (`event_type`, `templates`: value templates such as
//! `json:/data/object/id` or `{header:X-Key}-{json:/id}`, `headers`: name and value
//! pairs, and a `[filter]` table as a route writes it), an empty line, then the body.
//! A head that is not valid TOML still runs the body through fixed pointers.
//!
//! Checked beyond "no panic": the body's values found by pointer (without building the
//! document) agree with `serde_json`'s `Value::pointer`; the form parser agrees with
//! `form_urlencoded` whenever it accepts; a filter that takes everything matches.

use std::sync::{Arc, OnceLock};

use http::{HeaderMap, HeaderName, HeaderValue};
use serde::Deserialize;

use super::head_and_rest;
use crate::config::Secret;
use crate::header::Header;
use crate::provider::sign::{SignInput, sign};
use crate::provider::spec::{ValueTemplate, parse_value_template};
use crate::provider::verify::{Request, parse_form};
use crate::provider::{Registry, Spec, Verifier};
use crate::routing::filter::{Filter, RawFilter, Subject};

#[derive(Debug, Default, Deserialize)]
struct Head {
    event_type: Option<String>,
    #[serde(default)]
    templates: Vec<String>,
    #[serde(default)]
    headers: Vec<(String, String)>,
    filter: Option<RawFilter>,
}

/// The generic `hmac` provider, the one the target signs with to reach the
/// extraction of verified values.
fn hmac() -> &'static Arc<Spec> {
    static SPEC: OnceLock<Arc<Spec>> = OnceLock::new();
    SPEC.get_or_init(|| {
        let registry = match Registry::builtin() {
            Ok(r) => r,
            Err(e) => panic!("the built-in registry: {e}"),
        };
        match registry.get("hmac") {
            Some(s) => s.clone(),
            None => panic!("no built-in hmac provider"),
        }
    })
}

pub fn routing(data: &[u8]) {
    let (lines, body) = head_and_rest(data);
    let head_text = String::from_utf8_lossy(&lines.join(&b'\n')).into_owned();
    let head: Head = toml::from_str(&head_text).unwrap_or_default();

    let stored: Vec<Header> = head
        .headers
        .iter()
        .map(|(n, v)| Header {
            name: n.to_ascii_lowercase(),
            value: v.as_bytes().to_vec(),
        })
        .collect();
    if let Some(raw) = &head.filter
        && let Ok(filter) = Filter::compile("sources.routes.filter", raw)
    {
        let subject = Subject {
            event_type: head.event_type.as_deref(),
            body,
            headers: &stored,
        };
        let matched = filter.matches(&subject);
        if filter.takes_everything() {
            assert!(matched, "a filter that takes everything refused an entry");
        }
        let _ = filter.describe();
        let _ = filter.reads();
    }

    let mut templates: Vec<ValueTemplate> = head
        .templates
        .iter()
        .filter_map(|t| parse_value_template(t).ok())
        .collect();
    for fixed in [
        "json:/id",
        "json:/data/object/id",
        "json:/0",
        "json:/a~1b/c~0d",
    ] {
        if let Ok(t) = parse_value_template(fixed) {
            templates.push(t);
        }
    }
    values_agree(body, &head.headers, &templates);
    form_agrees(body);
}

/// Every template's value, read from a verified request, against `serde_json`.
fn values_agree(body: &[u8], headers: &[(String, String)], templates: &[ValueTemplate]) {
    let spec = hmac();
    let secret = Secret::new("routing-secret");
    let Ok(verifier) = Verifier::new(spec.clone(), std::slice::from_ref(&secret)) else {
        return;
    };
    let input = SignInput {
        body,
        timestamp: 1_700_000_000,
        id: "evt",
        event_type: None,
        method: "POST",
        path: "/ingest/fuzz",
        url: None,
    };
    let Ok(signed) = sign(spec, &secret, &input) else {
        return;
    };
    let mut map = HeaderMap::new();
    for (n, v) in headers {
        if let (Ok(n), Ok(v)) = (
            HeaderName::from_bytes(n.as_bytes()),
            HeaderValue::from_str(v),
        ) {
            map.append(n, v);
        }
    }
    for (n, v) in &signed.headers {
        if let Ok(v) = HeaderValue::from_str(v) {
            map.insert(n.clone(), v);
        }
    }
    let req = Request {
        method: "POST",
        path: "/ingest/fuzz",
        url: None,
        headers: &map,
        body,
    };
    let Ok(verified) = verifier.verify(req, 1_700_000_000) else {
        panic!("a body signed with the hmac provider does not verify");
    };
    let document: Option<serde_json::Value> = serde_json::from_slice(body).ok();
    // JSON's grammar allows what serde_json cannot hold in a `Value` (a `\uD83D`
    // escape without its pair, a number beyond f64): hookgate reads the values at
    // its pointers without decoding the rest, so such a document has no reference
    // reading to compare with.
    if document.is_none() && serde_json::from_slice::<serde::de::IgnoredAny>(body).is_ok() {
        return;
    }
    for t in templates {
        let found = verified.first_value(std::slice::from_ref(t));
        // A bare `json:` pointer is checked against serde_json's reading of it.
        let Some(ptr) = t.text.strip_prefix("json:") else {
            continue;
        };
        if t.text.contains('{') {
            continue;
        }
        let expected = document
            .as_ref()
            .and_then(|d| d.pointer(ptr))
            .and_then(|v| match v {
                serde_json::Value::String(s) => (!s.is_empty()).then(|| s.clone()),
                serde_json::Value::Number(_) | serde_json::Value::Bool(_) => Some(v.to_string()),
                _ => None,
            });
        match (&found, &expected) {
            (Some(f), Some(e)) if f == e => {}
            // Numbers are kept as written: the same number, maybe spelled otherwise.
            (Some(f), Some(e))
                if serde_json::from_str::<serde_json::Value>(f).ok()
                    == serde_json::from_str::<serde_json::Value>(e).ok()
                    && f.starts_with(|c: char| c == '-' || c.is_ascii_digit()) => {}
            (None, None) => {}
            _ => panic!("pointer {ptr:?}: found {found:?}, serde_json reads {expected:?}"),
        }
    }
}

/// The strict form parser agrees with `form_urlencoded` on every form it accepts.
fn form_agrees(body: &[u8]) {
    let Ok(pairs) = parse_form(body) else {
        return;
    };
    let reference: Vec<(String, String)> = form_urlencoded::parse(body).into_owned().collect();
    assert_eq!(
        pairs, reference,
        "the form parser and form_urlencoded disagree"
    );
}
