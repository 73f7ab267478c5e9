//! The admin API: inspect, replay, discard, pause. Its own listener.
//!
//! Every `/admin/*` route, the OpenAPI document included, needs `Authorization:
//! Bearer <token>` when a token is configured; the comparison is over SHA-256
//! digests in constant time, so neither content nor length leaks. `/healthz`,
//! `/readyz` and `/metrics` (in `telemetry`) stay open. The request and response
//! types here are also what the CLI uses.
//!
//! [`guard`] wraps the whole listener. Without a token, the listener is reachable by
//! any web page open in a browser on the same host, so it refuses what a browser
//! sends on a page's behalf: an `Origin` header, or a `Host` other than a loopback
//! literal (DNS rebinding). With or without a token, a body must be JSON, which a
//! page cannot send cross-site without a CORS preflight that nothing here answers.
//!
//! Replays keep the entry id (the consumer's idempotency key) and get a fresh retry
//! budget. A bulk replay spreads its entries over time at `admin.replay_rate` per
//! second, so replaying a large dead-letter queue never stampedes the destination.

use std::collections::HashMap;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::{Arc, Mutex};

use axum::Json;
use axum::Router;
use axum::body::{Bytes, HttpBody as _};
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, RawQuery, Request, State};
use axum::http::{HeaderMap, Method, StatusCode, Version, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use serde::{Deserialize, Serialize};
use sha2::Digest as _;
use subtle::ConstantTimeEq;

use crate::clock::system_now_ms as now_ms;
use crate::config::Secret;
use crate::store::{
    Attempt, AuditEvent, ListQuery, ListedEntry, MAX_PAGE, Status, Store, StoreError, Transition,
};

/// The OpenAPI document of this API (kept in the repository, served as is).
pub const OPENAPI: &str = include_str!("../openapi.json");

/// Largest page of a listing.
pub const DEFAULT_LIMIT: usize = 50;
/// Entries one bulk replay may queue.
pub const BULK_REPLAY_MAX: usize = 100_000;

/// What the admin handlers share. Built once by `app`.
pub struct AdminState {
    pub store: Arc<dyn Store>,
    /// SHA-256 of the bearer token, when one is configured.
    pub token_digest: Option<[u8; 32]>,
    /// Configured source names and the signature header of each (redacted on display).
    pub sources: Vec<(String, String)>,
    pub replay_rate: u32,
    /// The next free slot (unix ms) of bulk replays in this process.
    pub replay_horizon: Mutex<i64>,
}

impl AdminState {
    pub fn new(
        store: Arc<dyn Store>,
        token: Option<&Secret>,
        sources: Vec<(String, String)>,
        replay_rate: u32,
    ) -> AdminState {
        AdminState {
            store,
            token_digest: token.map(|t| sha2::Sha256::digest(t.expose().as_bytes()).into()),
            sources,
            replay_rate: replay_rate.max(1),
            replay_horizon: Mutex::new(0),
        }
    }

    fn has_source(&self, name: &str) -> bool {
        self.sources.iter().any(|(n, _)| n == name)
    }
}

/// An admin API error: `{"error": "..."}` with the right status.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    #[error("{0}")]
    BadRequest(String),
    #[error("unauthorized: missing or wrong bearer token")]
    Unauthorized,
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    Forbidden(Refusal),
    #[error("unsupported media type: a request body must be JSON (Content-Type: application/json)")]
    UnsupportedMediaType,
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Why a listener without an admin token refused a request (see [`guard`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The request carries an `Origin` header: a browser sent it for a web page.
    CrossSite,
    /// The `Host` is missing or not a loopback literal: possibly a DNS-rebound name.
    HostNotLoopback,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Refusal::CrossSite => {
                "cross-site request refused: without an admin token the admin API answers only requests without an Origin header; set an admin token to use it from elsewhere"
            }
            Refusal::HostNotLoopback => {
                "host not loopback: without an admin token the admin API answers only requests addressed to 127.0.0.1, [::1] or localhost; set an admin token to use it from elsewhere"
            }
        })
    }
}

impl IntoResponse for AdminError {
    fn into_response(self) -> Response {
        let status = match &self {
            AdminError::BadRequest(_) => StatusCode::BAD_REQUEST,
            AdminError::Unauthorized => StatusCode::UNAUTHORIZED,
            AdminError::NotFound(_) => StatusCode::NOT_FOUND,
            AdminError::Conflict(_) => StatusCode::CONFLICT,
            AdminError::Forbidden(_) => StatusCode::FORBIDDEN,
            AdminError::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            AdminError::Store(_) => StatusCode::SERVICE_UNAVAILABLE,
        };
        let message = match &self {
            AdminError::Store(e) => {
                tracing::error!(error = %e, "admin: store error");
                "store unavailable, retry later".to_string()
            }
            other => other.to_string(),
        };
        let mut resp = (status, Json(serde_json::json!({ "error": message }))).into_response();
        if matches!(self, AdminError::Unauthorized) {
            resp.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Bearer"),
            );
        }
        resp
    }
}

// ---------------------------------------------------------------------------
// DTOs (shared with the CLI).
// ---------------------------------------------------------------------------

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EntrySummary {
    pub id: String,
    pub source: String,
    pub event_id: Option<String>,
    pub event_type: Option<String>,
    pub received_at: String,
    pub status: Status,
    pub attempts: u32,
    pub next_attempt_at: Option<String>,
    pub last_error: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EntryList {
    pub entries: Vec<EntrySummary>,
    pub next_cursor: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HeaderDto {
    pub name: String,
    pub value: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AttemptDto {
    pub n: u32,
    pub at: String,
    pub status_code: Option<u16>,
    pub error: Option<String>,
    pub latency_ms: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AuditDto {
    pub at: String,
    pub action: String,
    pub actor: String,
    pub note: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EntryDetail {
    #[serde(flatten)]
    pub summary: EntrySummary,
    pub headers: Vec<HeaderDto>,
    /// `utf8` or `base64`.
    pub body_encoding: String,
    pub body: String,
    pub attempt_log: Vec<AttemptDto>,
    pub audit: Vec<AuditDto>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ReplayFilter {
    #[serde(default)]
    pub source: Option<String>,
    #[serde(default)]
    pub status: Option<String>,
    #[serde(default)]
    pub event_type: Option<String>,
    #[serde(default)]
    pub since: Option<String>,
    #[serde(default)]
    pub until: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReplayResult {
    pub queued: u64,
    /// When the last queued entry is due (RFC 3339), given the replay rate.
    pub last_due_at: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TransitionResult {
    pub id: String,
    pub status: Status,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DiscardRequest {
    pub note: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SourceState {
    pub source: String,
    pub paused: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SourceStatsDto {
    pub source: String,
    pub paused: bool,
    pub received: u64,
    pub duplicates: u64,
    pub unverified: u64,
    pub pending: u64,
    pub delivered: u64,
    pub dead: u64,
    pub discarded: u64,
    pub oldest_pending_age_seconds: Option<u64>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Stats {
    pub sources: Vec<SourceStatsDto>,
}

// ---------------------------------------------------------------------------
// Router.
// ---------------------------------------------------------------------------

pub fn router(state: Arc<AdminState>) -> Router {
    let protected = Router::new()
        .route(
            "/admin/openapi.json",
            get(|| async { ([(header::CONTENT_TYPE, "application/json")], OPENAPI) }),
        )
        .route("/admin/entries", get(list_entries))
        .route("/admin/entries/{id}", get(show_entry))
        .route("/admin/entries/{id}/replay", post(replay_entry))
        .route("/admin/entries/{id}/discard", post(discard_entry))
        .route("/admin/replay", post(bulk_replay))
        .route("/admin/sources", get(list_sources))
        .route("/admin/sources/{name}/pause", post(pause))
        .route("/admin/sources/{name}/resume", post(resume))
        .route("/admin/stats", get(stats))
        // Auth wraps only the routes above: the fallbacks answer 404 and 405 alike.
        .route_layer(middleware::from_fn_with_state(state.clone(), require_token));
    Router::new()
        .merge(protected)
        .method_not_allowed_fallback(|| async {
            (
                StatusCode::METHOD_NOT_ALLOWED,
                Json(serde_json::json!({"error": "method not allowed"})),
            )
        })
        .fallback(|| async { AdminError::NotFound("not found".into()) })
        .with_state(state)
}

async fn require_token(
    State(st): State<Arc<AdminState>>,
    req: Request,
    next: Next,
) -> Result<Response, AdminError> {
    if let Some(want) = &st.token_digest {
        let got = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(|t| -> [u8; 32] { sha2::Sha256::digest(t.trim().as_bytes()).into() });
        let ok = got.is_some_and(|g| bool::from(g.ct_eq(want)));
        if !ok {
            return Err(AdminError::Unauthorized);
        }
    }
    Ok(next.run(req).await)
}

/// The middleware around the whole admin listener (the API, `/metrics` and the
/// probes): without a token, refuse what a browser sends on a web page's behalf; in
/// any case, refuse a POST body that is not JSON. A refused request changes nothing.
pub async fn guard(
    State(st): State<Arc<AdminState>>,
    req: Request,
    next: Next,
) -> Result<Response, AdminError> {
    if st.token_digest.is_none()
        && let Some(refusal) = browser_request(&req)
    {
        tracing::warn!(
            method = %req.method(),
            path = %req.uri().path(),
            reason = ?refusal,
            "admin: refused a request (no admin token is configured)"
        );
        return Err(AdminError::Forbidden(refusal));
    }
    if req.method() == Method::POST && carries_body(&req) && !is_json(req.headers()) {
        return Err(AdminError::UnsupportedMediaType);
    }
    Ok(next.run(req).await)
}

/// Whether `req` may come from a web page in a local browser. Browsers send `Origin`
/// on every cross-origin request a page can read and on every POST; a page that
/// reached this listener through a rebound DNS name sends that name as `Host`.
fn browser_request(req: &Request) -> Option<Refusal> {
    if req.headers().contains_key(header::ORIGIN) {
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

fn rfc3339(ms: i64) -> String {
    let t =
        std::time::UNIX_EPOCH + std::time::Duration::from_millis(u64::try_from(ms).unwrap_or(0));
    humantime::format_rfc3339_millis(t).to_string()
}

/// A time parameter: RFC 3339 (any offset), or unix seconds. Times before 1970
/// count as 1970.
fn parse_time(name: &str, v: &str) -> Result<i64, AdminError> {
    let bad = || {
        AdminError::BadRequest(format!(
            "{name}: {v:?} is not a time; use RFC 3339 (2026-11-21T10:00:00Z) or unix seconds"
        ))
    };
    if !v.is_empty() && v.len() <= 11 && v.bytes().all(|b| b.is_ascii_digit()) {
        return v.parse::<i64>().map(|s| s * 1000).map_err(|_| bad());
    }
    // Every valid form is ASCII; byte offsets below rely on it.
    if !v.is_ascii() {
        return Err(bad());
    }
    // Split a numeric offset off (RFC 3339 allows "+05:30" or "Z"); humantime takes Z.
    let upper = v.to_ascii_uppercase();
    let (base, offset_secs) = match upper.len().checked_sub(6).map(|i| upper.split_at(i)) {
        Some((base, off))
            if base.contains('T')
                && (off.starts_with('+') || off.starts_with('-'))
                && off.as_bytes().get(3) == Some(&b':') =>
        {
            let h: i64 = off[1..3].parse().map_err(|_| bad())?;
            let m: i64 = off[4..6].parse().map_err(|_| bad())?;
            let sign = if off.starts_with('-') { -1 } else { 1 };
            (format!("{base}Z"), sign * (h * 3600 + m * 60))
        }
        _ => (upper.clone(), 0),
    };
    // humantime covers 1970..=9999; anything earlier is before every entry anyway.
    if base.len() > 5
        && base.as_bytes()[4] == b'-'
        && base[..4].parse::<u32>().is_ok_and(|y| y < 1970)
    {
        return Ok(0);
    }
    let t = humantime::parse_rfc3339_weak(&base).map_err(|_| bad())?;
    let ms = match t.duration_since(std::time::UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_millis()).unwrap_or(i64::MAX),
        Err(_) => 0,
    };
    Ok(ms.saturating_sub(offset_secs * 1000).max(0))
}

fn parse_status(v: &str) -> Result<Status, AdminError> {
    Status::parse(v).ok_or_else(|| {
        AdminError::BadRequest(format!(
            "status: {v:?} is not one of pending, delivered, dead, discarded"
        ))
    })
}

fn summary(e: &ListedEntry) -> EntrySummary {
    EntrySummary {
        id: e.id.clone(),
        source: e.source.clone(),
        event_id: e.event_id.clone(),
        event_type: e.event_type.clone(),
        received_at: rfc3339(e.received_at),
        status: e.status,
        attempts: e.attempts,
        next_attempt_at: match e.status {
            Status::Pending => e.next_attempt_at.map(rfc3339),
            _ => None,
        },
        last_error: e.last_error.clone(),
    }
}

/// Header names whose values are credentials or signatures.
fn is_sensitive(name: &str, signature_header: &str) -> bool {
    let n = name.to_ascii_lowercase();
    n == signature_header
        || matches!(
            n.as_str(),
            "authorization" | "proxy-authorization" | "cookie" | "set-cookie" | "x-api-key"
        )
        || [
            "signature",
            "token",
            "secret",
            "hmac",
            "password",
            "api-key",
        ]
        .iter()
        .any(|s| n.contains(s))
}

/// Parse a JSON object body into `T` (serde would also take an array for a struct).
fn json_object<T: serde::de::DeserializeOwned>(body: &[u8]) -> Option<T> {
    match serde_json::from_slice::<serde_json::Value>(body).ok()? {
        v @ serde_json::Value::Object(_) => serde_json::from_value(v).ok(),
        _ => None,
    }
}

fn query_map(raw: Option<String>) -> HashMap<String, String> {
    form_urlencoded::parse(raw.unwrap_or_default().as_bytes())
        .into_owned()
        .collect()
}

fn path_param(p: Result<Path<String>, PathRejection>) -> Result<String, AdminError> {
    p.map(|Path(v)| v)
        .map_err(|e| AdminError::BadRequest(format!("invalid path: {e}")))
}

// ---------------------------------------------------------------------------
// Handlers.
// ---------------------------------------------------------------------------

async fn list_entries(
    State(st): State<Arc<AdminState>>,
    RawQuery(raw): RawQuery,
) -> Result<Json<EntryList>, AdminError> {
    let q = query_map(raw);
    let limit = match q.get("limit") {
        Some(v) => v
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=MAX_PAGE).contains(n))
            .ok_or_else(|| {
                AdminError::BadRequest(format!("limit: {v:?} must be between 1 and {MAX_PAGE}"))
            })?,
        None => DEFAULT_LIMIT,
    };
    let query = ListQuery {
        source: q.get("source").filter(|s| !s.is_empty()).cloned(),
        status: q.get("status").map(|s| parse_status(s)).transpose()?,
        event_type: q.get("event_type").filter(|s| !s.is_empty()).cloned(),
        since: q.get("since").map(|v| parse_time("since", v)).transpose()?,
        until: q.get("until").map(|v| parse_time("until", v)).transpose()?,
        limit,
        cursor: q.get("cursor").filter(|s| !s.is_empty()).cloned(),
    };
    let page = st.store.list(&query).await?;
    Ok(Json(EntryList {
        entries: page.entries.iter().map(summary).collect(),
        next_cursor: page.next_cursor,
    }))
}

async fn show_entry(
    State(st): State<Arc<AdminState>>,
    id: Result<Path<String>, PathRejection>,
) -> Result<Json<EntryDetail>, AdminError> {
    let id = path_param(id)?;
    let e = st
        .store
        .get(&id)
        .await?
        .ok_or_else(|| AdminError::NotFound(format!("no entry {id:?}")))?;
    let attempts: Vec<Attempt> = st.store.attempts(&id).await?;
    let audit: Vec<AuditEvent> = st.store.audit(&id).await?;
    let sig_header = st
        .sources
        .iter()
        .find(|(n, _)| *n == e.source)
        .map(|(_, h)| h.clone())
        .unwrap_or_default();
    let headers = e
        .headers
        .iter()
        .map(|h| HeaderDto {
            name: h.name.clone(),
            value: if is_sensitive(&h.name, &sig_header) {
                "[redacted]".to_string()
            } else {
                String::from_utf8_lossy(&h.value).into_owned()
            },
        })
        .collect();
    let (body_encoding, body) = match std::str::from_utf8(&e.body) {
        Ok(text) => ("utf8".to_string(), text.to_string()),
        Err(_) => ("base64".to_string(), B64.encode(&e.body)),
    };
    Ok(Json(EntryDetail {
        summary: summary(&e.listed()),
        headers,
        body_encoding,
        body,
        attempt_log: attempts
            .into_iter()
            .map(|a| AttemptDto {
                n: a.n,
                at: rfc3339(a.at),
                status_code: a.status_code,
                error: a.error,
                latency_ms: a.latency_ms,
            })
            .collect(),
        audit: audit
            .into_iter()
            .map(|a| AuditDto {
                at: rfc3339(a.at),
                action: a.action,
                actor: a.actor,
                note: a.note,
            })
            .collect(),
    }))
}

/// Who did it: the `X-Hookgate-Actor` header (the CLI sends the user name), else "admin".
fn actor(headers: &HeaderMap) -> String {
    headers
        .get("x-hookgate-actor")
        .and_then(|v| v.to_str().ok())
        .map(|s| s.chars().take(100).collect::<String>())
        .filter(|s| !s.trim().is_empty())
        .unwrap_or_else(|| "admin".to_string())
}

async fn replay_entry(
    State(st): State<Arc<AdminState>>,
    headers: HeaderMap,
    id: Result<Path<String>, PathRejection>,
) -> Result<Response, AdminError> {
    let id = path_param(id)?;
    let now = now_ms();
    match st.store.replay(&id, now, &actor(&headers), now).await? {
        Transition::Done => {
            tracing::info!(entry_id = %id, "replay queued");
            Ok((
                StatusCode::ACCEPTED,
                Json(TransitionResult {
                    id,
                    status: Status::Pending,
                }),
            )
                .into_response())
        }
        Transition::NotFound => Err(AdminError::NotFound(format!("no entry {id:?}"))),
        Transition::Conflict(s) => Err(AdminError::Conflict(format!(
            "entry {id:?} is {}; only delivered, dead or discarded entries can be replayed",
            s.as_str()
        ))),
    }
}

async fn discard_entry(
    State(st): State<Arc<AdminState>>,
    headers: HeaderMap,
    id: Result<Path<String>, PathRejection>,
    body: Bytes,
) -> Result<Json<TransitionResult>, AdminError> {
    let id = path_param(id)?;
    let req: DiscardRequest = json_object(&body).ok_or_else(|| {
        AdminError::BadRequest("a JSON body {\"note\": \"why\"} is required".into())
    })?;
    let note = req.note.trim();
    if note.is_empty() {
        return Err(AdminError::BadRequest("note must not be empty".into()));
    }
    if note.len() > 2000 {
        return Err(AdminError::BadRequest(
            "note is longer than 2000 bytes".into(),
        ));
    }
    match st
        .store
        .discard(&id, &actor(&headers), note, now_ms())
        .await?
    {
        Transition::Done => {
            tracing::info!(entry_id = %id, "entry discarded");
            Ok(Json(TransitionResult {
                id,
                status: Status::Discarded,
            }))
        }
        Transition::NotFound => Err(AdminError::NotFound(format!("no entry {id:?}"))),
        Transition::Conflict(s) => Err(AdminError::Conflict(format!(
            "entry {id:?} is {}; only pending or dead entries can be discarded",
            s.as_str()
        ))),
    }
}

async fn bulk_replay(
    State(st): State<Arc<AdminState>>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<(StatusCode, Json<ReplayResult>), AdminError> {
    let f: ReplayFilter = if body.is_empty() {
        ReplayFilter::default()
    } else {
        json_object(&body).ok_or_else(|| {
            AdminError::BadRequest(
                "the filter must be a JSON object: {\"source\", \"status\", \"event_type\", \"since\", \"until\"}"
                    .into(),
            )
        })?
    };
    let status = match f.status.as_deref() {
        None => Status::Dead,
        Some(s) => parse_status(s)?,
    };
    if status == Status::Pending {
        return Err(AdminError::BadRequest(
            "status: pending entries are already queued".into(),
        ));
    }
    if let Some(s) = &f.source
        && !st.has_source(s)
    {
        return Err(AdminError::NotFound(format!("no source {s:?}")));
    }
    let mut query = ListQuery {
        source: f.source.clone().filter(|s| !s.is_empty()),
        status: Some(status),
        event_type: f.event_type.clone().filter(|s| !s.is_empty()),
        since: f
            .since
            .as_deref()
            .map(|v| parse_time("since", v))
            .transpose()?,
        until: f
            .until
            .as_deref()
            .map(|v| parse_time("until", v))
            .transpose()?,
        limit: 500,
        cursor: None,
    };
    // Collect first, then queue: replayed entries leave the status being listed.
    // Ids only: a bulk replay never reads an entry it does not need.
    let mut ids = Vec::new();
    loop {
        let page = st.store.list_ids(&query).await?;
        ids.extend(page.ids);
        match page.next_cursor {
            Some(c) if ids.len() < BULK_REPLAY_MAX => query.cursor = Some(c),
            _ => break,
        }
    }
    ids.truncate(BULK_REPLAY_MAX);
    // Oldest first, spread at the replay rate after whatever this process already queued.
    ids.reverse();
    let who = actor(&headers);
    let now = now_ms();
    let step = 1000.0 / f64::from(st.replay_rate);
    let start = {
        let mut h = st.replay_horizon.lock().unwrap_or_else(|p| p.into_inner());
        let start = (*h).max(now);
        *h = start + (ids.len() as f64 * step) as i64;
        start
    };
    let mut queued = 0u64;
    let mut last_due = None;
    for (i, id) in ids.iter().enumerate() {
        let at = start + (i as f64 * step) as i64;
        if st.store.replay(id, at, &who, now).await? == Transition::Done {
            queued += 1;
            last_due = Some(at);
        }
    }
    tracing::info!(queued, rate = st.replay_rate, "bulk replay queued");
    Ok((
        StatusCode::ACCEPTED,
        Json(ReplayResult {
            queued,
            last_due_at: last_due.map(rfc3339),
        }),
    ))
}

async fn list_sources(
    State(st): State<Arc<AdminState>>,
) -> Result<Json<Vec<SourceState>>, AdminError> {
    let paused = st.store.paused_sources().await?;
    Ok(Json(
        st.sources
            .iter()
            .map(|(n, _)| SourceState {
                source: n.clone(),
                paused: paused.contains(n),
            })
            .collect(),
    ))
}

async fn set_paused(
    st: &AdminState,
    name: Result<Path<String>, PathRejection>,
    paused: bool,
) -> Result<Json<SourceState>, AdminError> {
    let name = path_param(name)?;
    if !st.has_source(&name) {
        return Err(AdminError::NotFound(format!("no source {name:?}")));
    }
    st.store.set_paused(&name, paused).await?;
    tracing::info!(source = %name, paused, "source delivery {}", if paused { "paused" } else { "resumed" });
    Ok(Json(SourceState {
        source: name,
        paused,
    }))
}

async fn pause(
    State(st): State<Arc<AdminState>>,
    name: Result<Path<String>, PathRejection>,
) -> Result<Json<SourceState>, AdminError> {
    set_paused(&st, name, true).await
}

async fn resume(
    State(st): State<Arc<AdminState>>,
    name: Result<Path<String>, PathRejection>,
) -> Result<Json<SourceState>, AdminError> {
    set_paused(&st, name, false).await
}

async fn stats(State(st): State<Arc<AdminState>>) -> Result<Json<Stats>, AdminError> {
    let paused = st.store.paused_sources().await?;
    let now = now_ms();
    let mut out = Vec::with_capacity(st.sources.len());
    for (name, _) in &st.sources {
        let s = st.store.stats(name).await?;
        out.push(SourceStatsDto {
            source: name.clone(),
            paused: paused.contains(name),
            received: s.received,
            duplicates: s.duplicates,
            unverified: s.unverified,
            pending: s.pending,
            delivered: s.delivered,
            dead: s.dead,
            discarded: s.discarded,
            oldest_pending_age_seconds: s
                .oldest_pending_at
                .map(|t| u64::try_from((now - t) / 1000).unwrap_or(0)),
        });
    }
    Ok(Json(Stats { sources: out }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sensitive_headers_are_recognised() {
        for h in [
            "stripe-signature",
            "X-Hub-Signature-256",
            "x-shopify-hmac-sha256",
            "authorization",
            "x-gitlab-token",
            "webhook-signature",
            "cookie",
        ] {
            assert!(is_sensitive(h, "stripe-signature"), "{h}");
        }
        for h in ["content-type", "user-agent", "x-github-event", "webhook-id"] {
            assert!(!is_sensitive(h, "x-hub-signature-256"), "{h}");
        }
    }

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

    #[test]
    fn times_parse_as_rfc3339_or_unix_seconds() {
        assert_eq!(
            parse_time("since", "1700000000").unwrap(),
            1_700_000_000_000
        );
        assert_eq!(
            parse_time("since", "2023-11-14T22:13:20Z").unwrap(),
            1_700_000_000_000
        );
        assert!(parse_time("since", "yesterday").is_err());
        assert!(parse_time("since", "").is_err());
        assert!(parse_time("since", "\u{80}\u{80}0\u{80}").is_err());
        assert!(parse_time("since", "2023-11-14T22:13:20+05:3\u{e9}").is_err());
        assert_eq!(
            parse_time("since", "2023-11-15T03:43:20+05:30").unwrap(),
            1_700_000_000_000
        );
        assert_eq!(
            parse_time("since", "2023-11-14t22:13:20.5z").unwrap(),
            1_700_000_000_500
        );
        assert_eq!(parse_time("since", "1900-01-01T00:00:00Z").unwrap(), 0);
    }
}
