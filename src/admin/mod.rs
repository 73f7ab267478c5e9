//! The admin API on its own listener: the router, the bearer-token check, the guard
//! around the whole listener, and the state the handlers share. The handlers live in
//! `entries` (inspect, replay, discard), `bulk_replay` (replay what a filter
//! selects, paced), `dead_letters` (dead deliveries grouped by failure, and a
//! group's paced replay), `sources` (pause and resume sources and routes, stats),
//! `handshakes` (a source's secret handshake: arm it, its secrets, forget one),
//! `gateways` (the gateways sharing the store, with their configuration versions),
//! `audit` and `rejections` (the requests ingest refused); each reads its request, calls the operation (`crate::operations`, which
//! the console calls too) and answers JSON; a refused operation is an
//! [`ApiError::Op`], answered in `crate::error` with every other error. The wire types are [`dto`] (`operations::dto`), which is all the
//! CLI uses of this module.
//!
//! Every `/admin/*` route, the OpenAPI document included, needs `Authorization:
//! Bearer <token>` when a token is configured; the comparison is over SHA-256
//! digests in constant time, so neither content nor length leaks. `/healthz`,
//! `/readyz` and `/metrics` (in `probes`) stay open.
//!
//! [`guard`] wraps the whole listener. Without a token, the listener is reachable by
//! any web page open in a browser on the same host, so it refuses what a browser
//! sends on a page's behalf: an `Origin` header, a `Sec-Fetch-Site` of `cross-site`
//! or `same-site` (a GET from an `<img>` or a link carries no `Origin`, and would
//! make the gateway run a search for another site's page), or a `Host` other than a
//! loopback literal (DNS rebinding). Clients that are not browsers (curl, the CLI,
//! probes, Prometheus) send neither header. With or without a token, a body must be JSON, which a
//! page cannot send cross-site without a CORS preflight that nothing here answers.
//! The console (`/console/…`, served on this listener by `crate::console`) is the
//! one exception: its own pages send form POSTs with their `Origin`, so under
//! `/console/` the guard lets through an `Origin` equal to the request's loopback
//! `Host`, and form bodies, which the console checks itself (form token, origin).

mod actor;
mod audit;
mod body;
mod bulk_replay;
mod config;
mod dead_letters;
mod entries;
mod gateways;
mod handshakes;
pub mod probes;
mod rejections;
mod routes;
mod sources;
pub mod throttle;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use axum::Router;
use axum::body::HttpBody as _;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, Version, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use sha2::Digest as _;
use subtle::ConstantTimeEq;

use crate::config::Secret;
use crate::error::{ApiError, Refusal};
use crate::operations::Operations;
use crate::serve::Peer;

use throttle::{LockedOut, Throttle};

pub use crate::operations::dto;
pub use actor::client_address;
pub use entries::{DEFAULT_LIMIT, parse_time};

/// The OpenAPI document of this API (kept in the repository, served as is).
pub const OPENAPI: &str = include_str!("../../openapi.json");

/// The shortest admin token that is not warned about at start, in characters.
pub const MIN_TOKEN_CHARS: usize = 24;

/// Whether `token` is shorter than [`MIN_TOKEN_CHARS`].
pub fn token_is_short(token: &Secret) -> bool {
    token.expose().chars().count() < MIN_TOKEN_CHARS
}

/// What the admin handlers share. Built once by `app`.
pub struct AdminState {
    /// The operations the API (and the console) performs.
    pub ops: Operations,
    /// SHA-256 of the bearer token, when one is configured.
    pub token_digest: Option<[u8; 32]>,
    /// Failed bearer checks and console logins, per client.
    pub throttle: Throttle,
}

impl AdminState {
    pub fn new(ops: Operations, token: Option<&Secret>, failed_auth_allowance: u32) -> AdminState {
        AdminState {
            ops,
            token_digest: token.map(|t| sha2::Sha256::digest(t.expose().as_bytes()).into()),
            throttle: Throttle::new(failed_auth_allowance),
        }
    }

    /// Whether `presented` is the configured token: SHA-256 digests compared in
    /// constant time, so neither content nor length leaks. False without a token.
    /// The bearer check and the console's login both ask this.
    pub fn token_matches(&self, presented: &str) -> bool {
        self.token_digest.as_ref().is_some_and(|want| {
            let got: [u8; 32] = sha2::Sha256::digest(presented.as_bytes()).into();
            bool::from(got.ct_eq(want))
        })
    }

    /// Check `presented` for `client` under the throttle: `Ok(true)` for the
    /// token, `Ok(false)` for a wrong one (counted), `Err` while `client` is locked
    /// out (nothing checked). The bearer check and the console's login both ask this.
    pub fn check_token(&self, client: IpAddr, presented: &str) -> Result<bool, LockedOut> {
        let now = self.ops.clock.now_ms();
        self.throttle.check(client, now)?;
        let ok = self.token_matches(presented);
        if ok {
            self.throttle.succeeded(client);
        } else {
            self.throttle.failed(client, now);
        }
        Ok(ok)
    }
}

/// What the admin API knows of a configured source.
pub use crate::operations::SourceFacts as AdminSource;

pub fn router(state: Arc<AdminState>) -> Router {
    let protected = Router::new()
        .route(
            "/admin/openapi.json",
            get(|| async { ([(header::CONTENT_TYPE, "application/json")], OPENAPI) }),
        )
        .route("/admin/entries", get(entries::list))
        .route("/admin/entries/{id}", get(entries::show))
        .route("/admin/entries/{id}/replay", post(entries::replay))
        .route("/admin/entries/{id}/discard", post(entries::discard))
        .route("/admin/entries/{id}/preview", post(entries::preview))
        .route("/admin/replay", post(bulk_replay::bulk_replay))
        .route("/admin/dead-letters", get(dead_letters::list))
        .route("/admin/dead-letters/replay", post(dead_letters::replay))
        .route("/admin/rejections", get(rejections::list))
        .route("/admin/rejections/groups", get(rejections::groups))
        .route("/admin/sources", get(sources::list))
        .route("/admin/sources/{name}/pause", post(sources::pause))
        .route("/admin/sources/{name}/resume", post(sources::resume))
        .route("/admin/sources/{name}/reconcile", post(sources::reconcile))
        .route(
            "/admin/sources/{name}/routes/{route}/pause",
            post(sources::pause_route),
        )
        .route(
            "/admin/sources/{name}/routes/{route}/resume",
            post(sources::resume_route),
        )
        .route(
            "/admin/sources/{name}/handshake",
            get(handshakes::show).post(handshakes::arm),
        )
        .route(
            "/admin/sources/{name}/secrets/{id}",
            delete(handshakes::forget),
        )
        .route("/admin/stats", get(sources::stats))
        .route("/admin/gateways", get(gateways::list))
        .route("/admin/audit", get(audit::list))
        .route("/admin/routes", get(routes::list))
        .route(
            "/admin/routes/{source}/{route}/discard",
            post(routes::discard),
        )
        .route("/admin/config", get(config::show))
        .route("/admin/config/reload", post(config::reload))
        // Auth wraps only the routes above: the fallbacks answer 404 and 405 alike.
        .route_layer(middleware::from_fn_with_state(state.clone(), require_token));
    Router::new()
        .merge(protected)
        .method_not_allowed_fallback(|| async { ApiError::MethodNotAllowed })
        .fallback(|| async { ApiError::NotFound })
        .with_state(state)
}

async fn require_token(
    State(admin): State<Arc<AdminState>>,
    req: Request,
    next: Next,
) -> Result<Response, ApiError> {
    if admin.token_digest.is_some() {
        let presented = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim)
            .unwrap_or_default();
        match admin.check_token(client_of(&req), presented) {
            Ok(true) => {}
            Ok(false) => return Err(ApiError::Unauthorized),
            Err(LockedOut { retry_after_secs }) => {
                return Err(ApiError::Throttled { retry_after_secs });
            }
        }
    }
    Ok(next.run(req).await)
}

/// The client a request counts as (`serve::Peer`); the unspecified address for a
/// request that came without one (it is throttled with every other such request).
pub fn client_of(req: &Request) -> IpAddr {
    req.extensions()
        .get::<Peer>()
        .map_or(IpAddr::V6(Ipv6Addr::UNSPECIFIED), |p| p.client)
}

/// The middleware around the whole admin listener (the API, `/metrics` and the
/// probes): without a token, refuse what a browser sends on a web page's behalf; in
/// any case, refuse a POST body that is not JSON. A refused request changes nothing.
/// Every answer is marked not to be cached or sniffed (the console's pages set
/// their own headers besides).
pub async fn guard(State(admin): State<Arc<AdminState>>, req: Request, next: Next) -> Response {
    let mut resp = match refuse(&admin, &req) {
        Some(refused) => refused.into_response(),
        None => next.run(req).await,
    };
    let h = resp.headers_mut();
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.entry(header::CACHE_CONTROL)
        .or_insert(HeaderValue::from_static("no-store"));
    resp
}

/// Why the guard refuses `req`, if it does.
fn refuse(admin: &AdminState, req: &Request) -> Option<ApiError> {
    if admin.token_digest.is_none()
        && let Some(refusal) = browser_request(req)
    {
        // A page open in a browser can send these in a loop: repeats are counted.
        const MSG: &str = "admin: refused a request (no admin token is configured)";
        if crate::telemetry::throttle::hit(MSG, &format!("{refusal:?}")) {
            tracing::warn!(
                method = %req.method(),
                path = %req.uri().path(),
                reason = ?refusal,
                "{MSG}"
            );
        }
        return Some(ApiError::Refused(refusal));
    }
    if req.method() == Method::POST
        && carries_body(req)
        && !is_json(req.headers())
        && !is_console(req.uri().path())
    {
        return Some(ApiError::NotJson);
    }
    None
}

/// Whether `req` may come from a web page in a local browser. Browsers send `Origin`
/// on every cross-origin request a page can read and on every POST; a page that
/// reached this listener through a rebound DNS name sends that name as `Host`. The
/// console's own pages send their origin, which is the (loopback) `Host`'s.
fn browser_request(req: &Request) -> Option<Refusal> {
    if let Some(origin) = req.headers().get(header::ORIGIN)
        && !(is_console(req.uri().path()) && origin_is_host(origin, req.headers()))
    {
        return Some(Refusal::CrossSite);
    }
    if req
        .headers()
        .get_all(SEC_FETCH_SITE)
        .iter()
        .any(|site| !fetched_by_this_origin(site))
    {
        return Some(Refusal::CrossSite);
    }
    // HTTP/1.1 absolute-form targets (and HTTP/2) carry the host in the URI too.
    let uri_host_ok = req
        .uri()
        .authority()
        .is_none_or(|a| is_loopback_host(a.as_str()));
    let mut hosts = req.headers().get_all(header::HOST).iter().peekable();
    let has_host = hosts.peek().is_some() || req.uri().authority().is_some();
    let hosts_ok = hosts.all(|v| v.to_str().is_ok_and(is_loopback_host));
    // HTTP/1.0 does not require a Host; a browser always sends one.
    let host_required = req.version() != Version::HTTP_10 && req.version() != Version::HTTP_09;
    if !uri_host_ok || !hosts_ok || (host_required && !has_host) {
        return Some(Refusal::HostNotLoopback);
    }
    None
}

/// The header a browser sets on every request it sends, saying which site asked.
const SEC_FETCH_SITE: &str = "sec-fetch-site";

/// Whether a `Sec-Fetch-Site` value says a page of this origin asked (`same-origin`)
/// or the user did (`none`: typed, a bookmark). `same-site` is another port or
/// subdomain of the host, another site as far as this listener is concerned; a
/// value this does not know is refused too.
fn fetched_by_this_origin(site: &HeaderValue) -> bool {
    let site = site.as_bytes();
    site.eq_ignore_ascii_case(b"same-origin") || site.eq_ignore_ascii_case(b"none")
}

/// The console's paths: `/console` and everything under `/console/`.
fn is_console(path: &str) -> bool {
    path == "/console" || path.starts_with("/console/")
}

/// Whether `origin` is `http://` and the request's one `Host` (whether that is
/// loopback is checked apart).
fn origin_is_host(origin: &HeaderValue, headers: &HeaderMap) -> bool {
    let mut hosts = headers.get_all(header::HOST).iter();
    let (Some(host), None) = (hosts.next(), hosts.next()) else {
        return false;
    };
    let origin_host = origin.to_str().ok().and_then(|o| o.strip_prefix("http://"));
    matches!((origin_host, host.to_str()), (Some(o), Ok(h)) if o.eq_ignore_ascii_case(h))
}

/// `127.0.0.0/8`, `[::1]` or `localhost`, each with an optional port.
fn is_loopback_host(value: &str) -> bool {
    let (host_ok, port) = match value.strip_prefix('[') {
        Some(rest) => match rest.split_once(']') {
            Some((ip, port)) => (ip.parse::<Ipv6Addr>().is_ok_and(|a| a.is_loopback()), port),
            None => return false,
        },
        None => {
            let (host, port) = match value.find(':') {
                Some(i) => value.split_at(i),
                None => (value, ""),
            };
            (
                host.eq_ignore_ascii_case("localhost")
                    || host.parse::<Ipv4Addr>().is_ok_and(|a| a.is_loopback()),
                port,
            )
        }
    };
    let port_ok = port.is_empty()
        || port.strip_prefix(':').is_some_and(|p| {
            !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) && p.parse::<u16>().is_ok()
        });
    host_ok && port_ok
}

/// Whether a request has a body: a `Content-Length` above 0 or a chunked body (the
/// body's size hint covers both, for HTTP/1.1 and HTTP/2 alike).
fn carries_body(req: &Request) -> bool {
    req.body().size_hint().exact() != Some(0)
}

/// `Content-Type: application/json`, with or without parameters, in any case.
fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json"))
}

/// A path parameter, or a 400 that says what was wrong with it.
fn path_param<T>(p: Result<Path<T>, PathRejection>) -> Result<T, ApiError> {
    p.map(|Path(v)| v)
        .map_err(|e| ApiError::BadRequest(format!("invalid path: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_hosts_are_literals_with_an_optional_port() {
        for h in [
            "127.0.0.1",
            "127.0.0.1:8081",
            "127.3.4.5:1",
            "[::1]",
            "[::1]:8081",
            "localhost",
            "LocalHost:65535",
        ] {
            assert!(is_loopback_host(h), "{h}");
        }
        for h in [
            "",
            "evil.example",
            "evil.example:8081",
            "localhost.evil.example",
            "localhost.",
            "127.0.0.1.nip.io",
            "127.1",
            "10.0.0.1:8081",
            "0.0.0.0:8081",
            "[::]:8081",
            "[::ffff:7f00:1]",
            "::1",
            "[::1",
            "[::1]x",
            "127.0.0.1:",
            "127.0.0.1:65536",
            "127.0.0.1:+80",
            "127.0.0.1:80:80",
            "localhost:80@evil.example",
        ] {
            assert!(!is_loopback_host(h), "{h}");
        }
    }

    #[test]
    fn the_console_takes_only_its_own_origin() {
        let mut h = HeaderMap::new();
        h.insert(header::HOST, "127.0.0.1:8081".parse().unwrap());
        let same: HeaderValue = "http://127.0.0.1:8081".parse().unwrap();
        assert!(origin_is_host(&same, &h));
        for other in [
            "http://127.0.0.1:9999",
            "https://127.0.0.1:8081",
            "http://evil.example",
            "null",
            "http://127.0.0.1:8081.evil.example",
        ] {
            assert!(!origin_is_host(&other.parse().unwrap(), &h), "{other}");
        }
        h.append(header::HOST, "127.0.0.1:8081".parse().unwrap());
        assert!(!origin_is_host(&same, &h), "two Host headers");
        assert!(is_console("/console") && is_console("/console/login"));
        for p in ["/", "/consoles", "/console%2F", "/admin/console/x"] {
            assert!(!is_console(p), "{p}");
        }
    }

    #[test]
    fn only_a_fetch_of_this_origin_or_the_user_passes_sec_fetch_site() {
        for (v, ok) in [
            ("same-origin", true),
            ("none", true),
            ("Same-Origin", true),
            ("cross-site", false),
            ("same-site", false),
            ("", false),
            ("same-origin, cross-site", false),
        ] {
            let value = HeaderValue::from_str(v).unwrap();
            assert_eq!(fetched_by_this_origin(&value), ok, "{v}");
        }
    }

    #[test]
    fn json_content_types_allow_parameters_and_any_case() {
        let mut h = HeaderMap::new();
        assert!(!is_json(&h));
        for (v, ok) in [
            ("application/json", true),
            ("Application/JSON; charset=utf-8", true),
            (" application/json ;charset=UTF-8", true),
            ("text/plain", false),
            ("application/x-www-form-urlencoded", false),
            ("multipart/form-data; boundary=x", false),
            ("application/json-seq", false),
            ("application/jsonx", false),
        ] {
            h.insert(header::CONTENT_TYPE, v.parse().unwrap());
            assert_eq!(is_json(&h), ok, "{v}");
        }
    }
}
