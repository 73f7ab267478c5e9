//! The entry ingest stores for an event: its id, type and dedupe key as the
//! provider's spec reads them, the routes whose filters take it, the ordering key of
//! each ordered one, and the values of the source's indexed pointers.
//!
//! Two kinds of event become entries the same way: a request whose signature held
//! (`decide`), and an event reconciliation fetched itself from the provider's API
//! ([`fetched_entry`]; `crate::reconcile`), so that a recovered event is deduped,
//! routed and ordered exactly as its delivery would have been.

use bytes::Bytes;
use http::HeaderMap;

use super::Source;
use super::source::{matching_routes, order_key};
use crate::provider::Verified;
use crate::provider::verify;
use crate::routing::filter::Subject;
use crate::store::{Header, NewEntry, Origin, RouteOrder};

/// The entry for `verified`, with the headers kept of its request.
pub(super) fn entry_of(
    source: &Source,
    verified: &Verified<'_>,
    headers: Vec<Header>,
    body: &Bytes,
    now_ms: i64,
    origin: Origin,
) -> NewEntry {
    let identity = verified.identity();
    let event_type = verified.event_type();
    let routes = matching_routes(
        &source.routes,
        &Subject {
            event_type: event_type.as_deref(),
            body,
            headers: &headers,
        },
    );
    // Ordered routes: each entry's key (one without a key is delivered unordered).
    let ordering = source
        .routes
        .iter()
        .filter_map(|r| {
            let o = r.order.as_ref()?;
            if !routes.contains(&r.name) {
                return None;
            }
            Some(RouteOrder {
                route: r.name.clone(),
                key: order_key(verified.first_value(&o.by)?),
                block: o.block,
            })
        })
        .collect();
    NewEntry {
        id: uuid::Uuid::now_v7().to_string(),
        source: source.name.clone(),
        event_type,
        event_id: identity.event_id,
        dedupe_key: identity.dedupe_key,
        dedupe_ttl: source.dedupe_ttl,
        received_at: now_ms,
        headers,
        body: body.clone(),
        routes,
        ordering,
        index: crate::store::search::extract(&source.index, body),
        origin,
    }
}

/// The dedupe key an event fetched from the provider's API has (as its delivery's
/// would): what a pass looks up before it builds the entry of a missing one.
pub fn fetched_key(source: &Source, body: &Bytes) -> String {
    let headers = HeaderMap::new();
    let req = verify::Request {
        method: "POST",
        path: "/",
        url: None,
        headers: &headers,
        body,
    };
    source.verifier.fetched(req).dedupe_key()
}

/// The entry for an event fetched from the provider's API (a JSON document, as the
/// API rendered it): origin `reconciled`, with one stored header,
/// `content-type: application/json`. Nothing is verified: the event came over TLS
/// with the source's API credential.
pub fn fetched_entry(source: &Source, body: Bytes, now_ms: i64) -> NewEntry {
    let mut headers = HeaderMap::new();
    headers.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    let req = verify::Request {
        method: "POST",
        path: "/",
        url: None,
        headers: &headers,
        body: &body,
    };
    let verified = source.verifier.fetched(req);
    let kept = vec![Header {
        name: "content-type".to_string(),
        value: b"application/json".to_vec(),
    }];
    entry_of(source, &verified, kept, &body, now_ms, Origin::Reconciled)
}
