//! What the internal app receives: the original raw body and content type (or what
//! the route's transform made of them: `hookgate-transformed: true` says so), the
//! provider's own headers (configurable), and hookgate's delivery headers.
//!
//! `webhook-id` is the entry id (stable across retries and replays, and the same for
//! every route: the consumer's idempotency key); `hookgate-route` names the route; `webhook-timestamp` is the time of this attempt; when the source
//! has a `destination_secret`, `webhook-signature` is the Standard Webhooks v1
//! signature over `{webhook-id}.{webhook-timestamp}.{body}`, so the app verifies
//! hookgate with any Standard Webhooks library. `hookgate-body-signed: false` and
//! `hookgate-event-type-signed: false` say when the provider's signature did not
//! cover the body or the event type. `hookgate-origin: reconciled` or
//! `hookgate-origin: redelivered` says that reconciliation recovered the webhook
//! (admitted from the provider's API, or sent again at its request); a webhook
//! received as sent has none. hookgate's own headers replace any received header of
//! the same name.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use hmac::{Hmac, KeyInit, Mac};
use http::{HeaderMap, HeaderName, HeaderValue};

use crate::header_policy::HeaderPolicy;
use crate::store::Entry;
use crate::transform::Shaped;

/// The Standard Webhooks v1 signature of a delivery.
pub fn sign(key: &[u8], id: &str, timestamp: i64, body: &[u8]) -> String {
    let mut mac = match Hmac::<sha2::Sha256>::new_from_slice(key) {
        Ok(m) => m,
        // HMAC accepts keys of any length; this arm is unreachable in practice.
        Err(_) => return String::new(),
    };
    mac.update(id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    format!("v1,{}", B64.encode(mac.finalize().into_bytes()))
}

/// Which attempt a request is: of which route of which source, its number on that
/// route, and when (unix seconds).
#[derive(Debug, Clone, Copy)]
pub struct AttemptOf<'a> {
    pub source: &'a str,
    pub route: &'a str,
    pub attempt: u32,
    pub now_secs: i64,
}

/// What the provider's signature vouches for, said on every delivery where it does
/// not: `hookgate-body-signed: false` and `hookgate-event-type-signed: false`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Vouched {
    /// The signature covers the whole body.
    pub body: bool,
    /// The signature covers the value the event type is read from (not GitHub's
    /// `X-GitHub-Event` header, for one).
    pub event_type: bool,
}

/// Received headers that describe the stored body's bytes, which a transformed
/// body does not keep.
const BODY_HEADERS: [&str; 4] = ["content-type", "content-encoding", "content-md5", "digest"];

/// The headers of one delivery attempt. `transformed` is what the route's program
/// made of the body, when it has one: its content type and headers replace the
/// received ones, and the signature covers its body.
pub fn headers(
    entry: &Entry,
    of: AttemptOf<'_>,
    pass: &HeaderPolicy,
    vouched: Vouched,
    signing_key: Option<&[u8]>,
    transformed: Option<&Shaped>,
) -> HeaderMap {
    let mut h = HeaderMap::new();
    for hd in &entry.headers {
        if !pass.passes(&hd.name) {
            continue;
        }
        if transformed.is_some() && BODY_HEADERS.contains(&hd.name.as_str()) {
            continue;
        }
        if let (Ok(n), Ok(v)) = (
            HeaderName::from_bytes(hd.name.as_bytes()),
            HeaderValue::from_bytes(&hd.value),
        ) {
            h.append(n, v);
        }
    }
    let body: &[u8] = match transformed {
        Some(t) => {
            for (name, value) in t
                .headers
                .iter()
                .chain([&("content-type".to_string(), t.content_type.clone())])
            {
                if let (Ok(n), Ok(v)) = (
                    HeaderName::from_bytes(name.as_bytes()),
                    HeaderValue::from_str(value),
                ) {
                    h.insert(n, v);
                }
            }
            &t.body
        }
        None => &entry.body,
    };
    let mut set = |name: &'static str, value: &str| {
        if let Ok(v) = HeaderValue::from_str(value) {
            h.insert(HeaderName::from_static(name), v);
        }
    };
    set("webhook-id", &entry.id);
    set("webhook-timestamp", &of.now_secs.to_string());
    if let Some(key) = signing_key {
        set(
            "webhook-signature",
            &sign(key, &entry.id, of.now_secs, body),
        );
    }
    if transformed.is_some() {
        set(crate::transform::TRANSFORMED_HEADER, "true");
    }
    set("hookgate-source", of.source);
    set("hookgate-route", of.route);
    set("hookgate-attempt", &of.attempt.to_string());
    if let Some(id) = &entry.event_id {
        set("hookgate-event-id", id);
    }
    if let Some(t) = &entry.event_type {
        set("hookgate-event-type", t);
        if !vouched.event_type {
            // Anyone replaying a captured request could have chosen this type.
            set("hookgate-event-type-signed", "false");
        }
    }
    if !vouched.body {
        // The provider signed only part of the request: nothing vouches for the body.
        set("hookgate-body-signed", "false");
    }
    if entry.origin.is_recovered() {
        set("hookgate-origin", entry.origin.as_str());
    }
    h
}

/// `$meta` for a run of route `route`'s transform on `entry` (see
/// `transform::meta`).
pub fn transform_meta(entry: &Entry, route: &str) -> Vec<u8> {
    crate::transform::meta(
        crate::transform::MetaOf {
            source: &entry.source,
            route,
            entry_id: &entry.id,
            event_id: entry.event_id.as_deref(),
            event_type: entry.event_type.as_deref(),
            received_at: entry.received_at,
        },
        entry
            .headers
            .iter()
            .map(|h| (h.name.as_str(), h.value.as_slice())),
    )
}

/// Decode a destination secret: `whsec_<base64>` as in Standard Webhooks, or any
/// other string used as its bytes.
pub fn decode_destination_secret(secret: &str) -> Vec<u8> {
    match secret.strip_prefix("whsec_") {
        Some(b64) => B64
            .decode(b64)
            .unwrap_or_else(|_| secret.as_bytes().to_vec()),
        None => secret.as_bytes().to_vec(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{Header, Origin, Status};

    #[test]
    fn signature_matches_the_standard_webhooks_vector() {
        let key = decode_destination_secret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw");
        assert_eq!(
            sign(
                &key,
                "msg_p5jXN8AQM9LWM0D4loKWxJek",
                1614265330,
                br#"{"test": 2432232314}"#
            ),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
    }

    #[test]
    fn delivery_headers_replace_received_ones_and_filter_hop_by_hop() {
        let entry = Entry {
            id: "e1".into(),
            source: "s".into(),
            event_id: Some("evt".into()),
            event_type: None,
            dedupe_key: "id:evt".into(),
            received_at: 0,
            status: Status::Pending,
            attempts: 0,
            next_attempt_at: None,
            last_error: None,
            deliveries: Vec::new(),
            origin: Origin::Received,
            headers: vec![
                Header {
                    name: "content-type".into(),
                    value: b"application/json".to_vec(),
                },
                Header {
                    name: "stripe-signature".into(),
                    value: b"t=1,v1=ab".to_vec(),
                },
                Header {
                    name: "webhook-id".into(),
                    value: b"forged".to_vec(),
                },
                Header {
                    name: "host".into(),
                    value: b"gateway".to_vec(),
                },
            ],
            body: bytes::Bytes::from_static(b"{}"),
        };
        let all = HeaderPolicy::new(&["*".to_string()], &[]);
        let of = |attempt| AttemptOf {
            source: "s",
            route: "billing",
            attempt,
            now_secs: 100,
        };
        let both = Vouched {
            body: true,
            event_type: true,
        };
        let h = headers(&entry, of(2), &all, both, None, None);
        assert_eq!(h["hookgate-route"], "billing");
        assert_eq!(h["webhook-id"], "e1");
        assert_eq!(h.get_all("webhook-id").iter().count(), 1);
        assert_eq!(h["stripe-signature"], "t=1,v1=ab");
        assert_eq!(h["hookgate-attempt"], "2");
        assert_eq!(h["hookgate-event-id"], "evt");
        assert!(h.get("host").is_none());
        assert!(h.get("hookgate-event-type").is_none());
        assert!(h.get("webhook-signature").is_none());
        assert!(h.get("hookgate-body-signed").is_none());
        assert!(h.get("hookgate-event-type-signed").is_none());
        let only = headers(
            &entry,
            of(1),
            &HeaderPolicy::new(&[], &[]),
            Vouched {
                body: false,
                event_type: false,
            },
            Some(b"k"),
            None,
        );
        assert_eq!(only["hookgate-body-signed"], "false");
        assert!(only.get("stripe-signature").is_none());
        assert_eq!(only["content-type"], "application/json");
        assert!(only.get("webhook-signature").is_some());
    }

    #[test]
    fn a_recovered_entry_says_how_it_came_and_a_received_one_says_nothing() {
        let mut entry = Entry {
            id: "e1".into(),
            source: "s".into(),
            event_id: None,
            event_type: None,
            dedupe_key: "k".into(),
            received_at: 0,
            status: Status::Pending,
            attempts: 0,
            next_attempt_at: None,
            last_error: None,
            deliveries: Vec::new(),
            origin: Origin::Received,
            headers: vec![Header {
                name: "hookgate-origin".into(),
                value: b"forged".to_vec(),
            }],
            body: bytes::Bytes::from_static(b"{}"),
        };
        let of = AttemptOf {
            source: "s",
            route: "r",
            attempt: 1,
            now_secs: 100,
        };
        let all = HeaderPolicy::new(&["*".to_string()], &[]);
        let both = Vouched {
            body: true,
            event_type: true,
        };
        for (origin, want) in [
            (Origin::Reconciled, "reconciled"),
            (Origin::Redelivered, "redelivered"),
        ] {
            entry.origin = origin;
            let h = headers(&entry, of, &all, both, None, None);
            assert_eq!(h["hookgate-origin"], want);
            assert_eq!(h.get_all("hookgate-origin").iter().count(), 1);
        }
        // Not even the one the provider's request carried.
        entry.origin = Origin::Received;
        let none = headers(&entry, of, &all, both, None, None);
        assert!(none.get("hookgate-origin").is_none());
    }

    #[test]
    fn a_transformed_body_is_what_is_described_and_signed() {
        let entry = Entry {
            id: "e1".into(),
            source: "s".into(),
            event_id: None,
            event_type: None,
            dedupe_key: "k".into(),
            received_at: 0,
            status: Status::Pending,
            attempts: 0,
            next_attempt_at: None,
            last_error: None,
            deliveries: Vec::new(),
            origin: Origin::Received,
            headers: vec![
                Header {
                    name: "content-type".into(),
                    value: b"application/json".to_vec(),
                },
                Header {
                    name: "content-encoding".into(),
                    value: b"gzip".to_vec(),
                },
                Header {
                    name: "x-kept".into(),
                    value: b"1".to_vec(),
                },
            ],
            body: bytes::Bytes::from_static(b"{\"a\":1}"),
        };
        let shaped = Shaped {
            body: b"a=1".to_vec(),
            content_type: "application/x-www-form-urlencoded".into(),
            headers: vec![("x-kind".into(), "push".into())],
        };
        let of = AttemptOf {
            source: "s",
            route: "legacy",
            attempt: 1,
            now_secs: 100,
        };
        let all = HeaderPolicy::new(&["*".to_string()], &[]);
        let both = Vouched {
            body: true,
            event_type: true,
        };
        let h = headers(&entry, of, &all, both, Some(b"k"), Some(&shaped));
        assert_eq!(h["content-type"], "application/x-www-form-urlencoded");
        assert!(h.get("content-encoding").is_none());
        assert_eq!(h["x-kept"], "1");
        assert_eq!(h["x-kind"], "push");
        assert_eq!(h["hookgate-transformed"], "true");
        assert_eq!(
            h["webhook-signature"],
            sign(b"k", "e1", 100, b"a=1").as_str()
        );
        let plain = headers(&entry, of, &all, both, Some(b"k"), None);
        assert!(plain.get("hookgate-transformed").is_none());
        assert_eq!(
            plain["webhook-signature"],
            sign(b"k", "e1", 100, b"{\"a\":1}").as_str()
        );
    }
}
