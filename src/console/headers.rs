//! The headers on every console answer: a strict Content-Security-Policy (only this
//! origin's files, no inline script or style, no plugins, no framing, forms only to
//! this origin), `X-Frame-Options: DENY` for browsers that predate
//! `frame-ancestors`, no content sniffing, no referrer to any other origin, and no
//! caching of pages that show webhook data.
//!
//! The referrer policy is `same-origin`, not `no-referrer`: under `no-referrer` a
//! browser sends `Origin: null` with the console's own form POSTs (the Fetch
//! standard ties the `Origin` of a POST to the referrer policy), and the origin check
//! of `cross_site` could no longer tell them from a sandboxed page's. `same-origin`
//! sends nothing more to other origins than `no-referrer` does.
//!
//! The policy is the second line of defence against stored XSS: webhook payloads are
//! attacker-controlled and every page escapes them; should one slip through, the
//! browser still runs no inline script and loads nothing from elsewhere.

use axum::http::{HeaderName, HeaderValue, header};
use axum::response::Response;

pub const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; object-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'";

const HEADERS: [(HeaderName, &str); 5] = [
    (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
    (header::X_FRAME_OPTIONS, "DENY"),
    (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
    (header::REFERRER_POLICY, "same-origin"),
    (header::CACHE_CONTROL, "no-store"),
];

/// Set the console's headers on `resp` (a `map_response` middleware).
pub async fn secure(mut resp: Response) -> Response {
    let h = resp.headers_mut();
    for (name, value) in HEADERS {
        h.insert(name, HeaderValue::from_static(value));
    }
    resp
}
