//! The admin API: inspect, replay, discard, pause. Its own listener.
//!
//! Every `/admin/*` route except the OpenAPI document needs `Authorization: Bearer
//! <token>` when a token is configured; the comparison is over SHA-256 digests in
//! constant time, so neither content nor length leaks. `/healthz` and `/readyz` are
//! open (probes). The request and response types here are also what the CLI uses.
//!
//! Replays keep the entry id (the consumer's idempotency key) and get a fresh retry
//! budget. A bulk replay spreads its entries over time at `admin.replay_rate` per
//! second, so replaying a large dead-letter queue never stampedes the destination.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, RawQuery, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use serde::{Deserialize, Serialize};
use sha2::Digest as _;
use subtle::ConstantTimeEq;

use crate::config::Secret;
use crate::store::{
    Attempt, AuditEvent, Entry, ListQuery, MAX_PAGE, Status, Store, StoreError, Transition, now_ms,
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
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl IntoResponse for AdminError {
    fn into_response(self) -> Response {
        let status = match &self {
            AdminError::BadRequest(_) => StatusCode::BAD_REQUEST,
            AdminError::Unauthorized => StatusCode::UNAUTHORIZED,
            AdminError::NotFound(_) => StatusCode::NOT_FOUND,
            AdminError::Conflict(_) => StatusCode::CONFLICT,
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
        .route("/admin/entries", get(list_entries))
        .route("/admin/entries/{id}", get(show_entry))
        .route("/admin/entries/{id}/replay", post(replay_entry))
        .route("/admin/entries/{id}/discard", post(discard_entry))
        .route("/admin/replay", post(bulk_replay))
        .route("/admin/sources", get(list_sources))
        .route("/admin/sources/{name}/pause", post(pause))
        .route("/admin/sources/{name}/resume", post(resume))
        .route("/admin/stats", get(stats))
        // Auth wraps only the routes above; the document and the probes stay open.
        .route_layer(middleware::from_fn_with_state(state.clone(), require_token));
    Router::new()
        .route(
            "/admin/openapi.json",
            get(|| async { ([(header::CONTENT_TYPE, "application/json")], OPENAPI) }),
        )
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

fn summary(e: &Entry) -> EntrySummary {
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
        summary: summary(&e),
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
    let mut ids = Vec::new();
    loop {
        let page = st.store.list(&query).await?;
        ids.extend(page.entries.into_iter().map(|e| e.id));
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
