//! Webhooks as each provider sends them: event bodies with a unique id, the headers
//! a provider signs them with, and a signature broken on purpose.

use hookgate::config::Secret;
use hookgate::provider::Registry;
use hookgate::provider::sign::{SignInput, sign};

use super::provider_for;

pub fn now_secs() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// The built-in providers, parsed once per test process: parsing and compiling 52
/// specs takes a debug build about a tenth of a second, far too long to repeat for
/// every request a test signs (tests sending 50 a second fell behind their schedule).
pub fn builtin() -> &'static Registry {
    static REGISTRY: std::sync::OnceLock<Registry> = std::sync::OnceLock::new();
    REGISTRY.get_or_init(|| Registry::builtin().expect("the built-in providers"))
}

/// The headers `provider` sends for `body`, signed with `secret` at `ts`.
pub fn sign_headers(
    provider: &str,
    secret: &str,
    body: &[u8],
    ts: i64,
    id: &str,
) -> Vec<(String, String)> {
    let spec = builtin().get(provider).unwrap();
    sign(
        spec,
        &Secret::new(secret),
        &SignInput {
            body,
            timestamp: ts,
            id,
            event_type: Some("test.event"),
            method: "POST",
            path: "/",
            url: None,
        },
    )
    .unwrap()
    .headers
    .into_iter()
    .map(|(n, v)| (n.to_string(), v))
    .collect()
}

/// A body with a unique event id for each provider's id location.
pub fn event_body(source: &str, id: &str) -> Vec<u8> {
    match provider_for(source) {
        "stripe" => format!(
            r#"{{"id":"{id}","object":"event","type":"payment_intent.succeeded","data":{{"object":{{"amount":2000}}}}}}"#
        ),
        "slack" => format!(
            r#"{{"type":"event_callback","event_id":"{id}","event":{{"type":"app_mention","text":"hi"}}}}"#
        ),
        _ => format!(r#"{{"id":"{id}","type":"thing.happened","n":1}}"#),
    }
    .into_bytes()
}

/// Change one character of the value of the header `name` (case-insensitive), the
/// `from_end`-th from its end, to another of the same alphabet: the value still
/// parses, and no longer verifies.
pub fn flip_signature(headers: &mut [(String, String)], name: &str, from_end: usize) {
    let (_, v) = headers
        .iter_mut()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .expect("signature header");
    let mut bytes = v.clone().into_bytes();
    let i = bytes.len() - from_end;
    bytes[i] = if bytes[i] == b'a' { b'b' } else { b'a' };
    *v = String::from_utf8(bytes).expect("an ASCII header value");
}
