//! The entry handlers of the admin API: list, show, replay and discard, with the
//! parsing of their query parameters and bodies (shared with the other handlers).
//!
//! Replays keep the entry id (the consumer's idempotency key) and get a fresh retry
//! budget. Replay and discard take a route (in their JSON body), or apply to every
//! delivery that qualifies. Replaying many entries at once is `bulk_replay`'s.

use std::collections::HashMap;
use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;

use super::actor::ApiActor;
use super::dto::{self, EntryDetail, EntryList, EntrySummary, TransitionResult};
use super::{AdminState, path_param};
use crate::error::ApiError;
use crate::store::{Actor, ListQuery, ListedEntry, MAX_PAGE, Status, Transition};

/// The page size of a listing that names no `limit` (the largest is `MAX_PAGE`).
pub const DEFAULT_LIMIT: usize = 50;

pub(super) async fn list(
    State(admin): State<Arc<AdminState>>,
    RawQuery(raw): RawQuery,
) -> Result<Json<EntryList>, ApiError> {
    let q = query_map(raw);
    let limit = match q.get("limit") {
        Some(v) => v
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=MAX_PAGE).contains(n))
            .ok_or_else(|| {
                ApiError::BadRequest(format!("limit: {v:?} must be between 1 and {MAX_PAGE}"))
            })?,
        None => DEFAULT_LIMIT,
    };
    let query = ListQuery {
        source: q.get("source").filter(|s| !s.is_empty()).cloned(),
        route: q.get("route").filter(|s| !s.is_empty()).cloned(),
        status: q.get("status").map(|s| parse_status(s)).transpose()?,
        event_type: q.get("event_type").filter(|s| !s.is_empty()).cloned(),
        event_id: q.get("event_id").filter(|s| !s.is_empty()).cloned(),
        since: q.get("since").map(|v| parse_time("since", v)).transpose()?,
        until: q.get("until").map(|v| parse_time("until", v)).transpose()?,
        limit,
        cursor: q.get("cursor").filter(|s| !s.is_empty()).cloned(),
    };
    let page = admin.store.list(&query).await?;
    Ok(Json(EntryList {
        entries: page.entries.iter().map(summary).collect(),
        next_cursor: page.next_cursor,
    }))
}

pub(super) async fn show(
    State(admin): State<Arc<AdminState>>,
    id: Result<Path<String>, PathRejection>,
) -> Result<Json<EntryDetail>, ApiError> {
    let id = path_param(id)?;
    Ok(Json(entry_detail(&admin, &id).await?))
}

/// Everything about entry `id`, as `GET /admin/entries/{id}` answers it: its
/// headers with credentials and signatures redacted, its body, its deliveries, every
/// attempt and the audit trail.
pub async fn entry_detail(admin: &AdminState, id: &str) -> Result<EntryDetail, ApiError> {
    let entry = admin
        .store
        .get(id)
        .await?
        .ok_or_else(|| ApiError::NoSuchEntry(id.to_string()))?;
    let attempts = admin.store.attempts(id).await?;
    let audit = admin.store.audit(id).await?;
    let sig_header = admin
        .source(&entry.source)
        .map(|s| s.signature_header.clone())
        .unwrap_or_default();
    let headers = entry
        .headers
        .iter()
        .map(|h| dto::Header {
            name: h.name.clone(),
            value: if is_sensitive(&h.name, &sig_header) {
                "[redacted]".to_string()
            } else {
                String::from_utf8_lossy(&h.value).into_owned()
            },
        })
        .collect();
    let (body_encoding, body) = match std::str::from_utf8(&entry.body) {
        Ok(text) => ("utf8".to_string(), text.to_string()),
        Err(_) => ("base64".to_string(), B64.encode(&entry.body)),
    };
    Ok(EntryDetail {
        summary: summary(&entry.listed()),
        headers,
        body_encoding,
        body,
        deliveries: entry
            .deliveries
            .iter()
            .map(|d| dto::Delivery {
                route: d.route.clone(),
                status: d.status,
                attempts: d.attempts,
                next_attempt_at: match d.status {
                    Status::Pending => d.next_attempt_at.map(rfc3339),
                    _ => None,
                },
                last_error: d.last_error.clone(),
                order: d.order.as_ref().map(|o| dto::DeliveryOrder {
                    key: o.key.clone(),
                    on_dead: o.on_dead().into(),
                }),
            })
            .collect(),
        attempt_log: attempts
            .into_iter()
            .map(|a| dto::Attempt {
                route: a.route,
                n: a.n,
                at: rfc3339(a.at),
                status_code: a.status_code,
                error: a.error,
                latency_ms: a.latency_ms,
            })
            .collect(),
        audit: audit
            .into_iter()
            .map(|a| dto::AuditEvent {
                at: rfc3339(a.at),
                action: a.action,
                actor: a.actor,
                note: a.note,
                route: a.route,
                session: a.session,
                client: a.client,
            })
            .collect(),
    })
}

pub(super) async fn replay(
    State(admin): State<Arc<AdminState>>,
    ApiActor(by): ApiActor,
    id: Result<Path<String>, PathRejection>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let id = path_param(id)?;
    let req: dto::ReplayRequest = if body.is_empty() {
        dto::ReplayRequest::default()
    } else {
        json_object(&body).ok_or_else(|| {
            ApiError::BadRequest("the body must be a JSON object: {\"route\": \"name\"}".into())
        })?
    };
    let route = req.route.filter(|r| !r.is_empty());
    let done = replay_entry(&admin, &id, route.as_deref(), &by).await?;
    Ok((StatusCode::ACCEPTED, Json(done)).into_response())
}

/// Replay entry `id` now, through `route` or every delivery that qualifies (see
/// `Store::replay`), as `by`; the answer says where its ordered deliveries wait.
pub async fn replay_entry(
    admin: &AdminState,
    id: &str,
    route: Option<&str>,
    by: &Actor,
) -> Result<TransitionResult, ApiError> {
    let now = admin.clock.now_ms();
    let lines = lines_before_replay(admin, id, route).await?;
    match admin.store.replay(id, route, now, by, now).await? {
        Transition::Done => {
            tracing::info!(entry_id = %id, route = route.unwrap_or(""), "replay queued");
            Ok(TransitionResult {
                id: id.to_string(),
                status: Status::Pending,
                lines: line_places(id, lines),
            })
        }
        Transition::NotFound => Err(ApiError::NoSuchEntry(id.to_string())),
        Transition::NoSuchRoute => Err(ApiError::NoDelivery {
            id: id.to_string(),
            route: route.unwrap_or_default().to_string(),
        }),
        Transition::Conflict(status) => Err(ApiError::NotReplayable {
            id: id.to_string(),
            route: route.map(str::to_string),
            status,
        }),
    }
}

/// The lines a replay of entry `id` (through `route`, or every delivery that
/// qualifies) puts its ordered deliveries back into: per such delivery, its route,
/// its key and the key's line as it is before the replay. Read before, not after:
/// once replayed, a delivery at the head of its line may be sent and gone before
/// the answer is written.
async fn lines_before_replay(
    admin: &AdminState,
    id: &str,
    route: Option<&str>,
) -> Result<Vec<(String, String, Vec<String>)>, ApiError> {
    let Some(entry) = admin.store.get(id).await? else {
        return Ok(Vec::new());
    };
    // The deliveries `Store::replay` queues: the named route's (unless pending);
    // otherwise every dead or discarded one, or, when none is and all were
    // delivered, all of them.
    let ended = |s: Status| matches!(s, Status::Dead | Status::Discarded);
    let resend = !entry.deliveries.iter().any(|d| ended(d.status))
        && entry
            .deliveries
            .iter()
            .all(|d| d.status == Status::Delivered);
    let mut lines = Vec::new();
    for d in &entry.deliveries {
        let queued = match route {
            Some(r) => r == d.route && d.status != Status::Pending,
            None => ended(d.status) || resend,
        };
        if let (true, Some(order)) = (queued, &d.order) {
            let line = admin
                .store
                .order_line(&entry.source, &d.route, &order.key)
                .await?;
            lines.push((d.route.clone(), order.key.clone(), line));
        }
    }
    Ok(lines)
}

/// Where entry `id` waits in each of `lines` (as read before its replay): after the
/// deliveries of its key that arrived before it (or are in flight), before those
/// that arrived after it.
fn line_places(id: &str, lines: Vec<(String, String, Vec<String>)>) -> Vec<dto::LinePlace> {
    lines
        .into_iter()
        .map(|(route, key, line)| {
            let count = |f: &dyn Fn(&str) -> bool| {
                u64::try_from(line.iter().filter(|x| f(x.as_str())).count()).unwrap_or(u64::MAX)
            };
            dto::LinePlace {
                route,
                key,
                ahead: count(&|x| x < id),
                behind: count(&|x| x > id),
            }
        })
        .collect()
}

pub(super) async fn discard(
    State(admin): State<Arc<AdminState>>,
    ApiActor(by): ApiActor,
    id: Result<Path<String>, PathRejection>,
    body: Bytes,
) -> Result<Json<TransitionResult>, ApiError> {
    let id = path_param(id)?;
    let req: dto::DiscardRequest = json_object(&body).ok_or_else(|| {
        ApiError::BadRequest("a JSON body {\"note\": \"why\"} is required".into())
    })?;
    let route = req.route.filter(|r| !r.is_empty());
    let done = discard_entry(&admin, &id, route.as_deref(), &by, &req.note).await?;
    Ok(Json(done))
}

/// Longest note a discard keeps, in characters.
pub const MAX_NOTE_CHARS: usize = 2000;

/// Whitespace around a note, and a note of nothing else: Unicode's, and the byte
/// order mark, so that what the OpenAPI document's pattern (`[^\s\u0085]`, in
/// ECMAScript's regex dialect) calls blank is exactly what is refused here.
fn blank(c: char) -> bool {
    c.is_whitespace() || c == '\u{feff}'
}

/// Discard entry `id`'s delivery through `route`, or every pending or dead one, as
/// `actor`, with `note` (required: why it will never be delivered).
pub async fn discard_entry(
    admin: &AdminState,
    id: &str,
    route: Option<&str>,
    by: &Actor,
    note: &str,
) -> Result<TransitionResult, ApiError> {
    let note = note.trim_matches(blank);
    if note.is_empty() {
        return Err(ApiError::BadRequest("note must not be empty".into()));
    }
    if note.chars().count() > MAX_NOTE_CHARS {
        return Err(ApiError::BadRequest(format!(
            "note is longer than {MAX_NOTE_CHARS} characters"
        )));
    }
    let done = admin
        .store
        .discard(id, route, by, note, admin.clock.now_ms())
        .await?;
    match done {
        Transition::Done => {
            tracing::info!(entry_id = %id, route = route.unwrap_or(""), "entry discarded");
            // The entry's status after the discard (other routes may still be pending
            // or delivered).
            let status = admin
                .store
                .get(id)
                .await?
                .map(|e| e.status)
                .unwrap_or(Status::Discarded);
            Ok(TransitionResult {
                id: id.to_string(),
                status,
                lines: Vec::new(),
            })
        }
        Transition::NotFound => Err(ApiError::NoSuchEntry(id.to_string())),
        Transition::NoSuchRoute => Err(ApiError::NoDelivery {
            id: id.to_string(),
            route: route.unwrap_or_default().to_string(),
        }),
        Transition::Conflict(status) => Err(ApiError::NotDiscardable {
            id: id.to_string(),
            route: route.map(str::to_string),
            status,
        }),
    }
}

/// Unix milliseconds as RFC 3339 (UTC, with milliseconds).
pub fn rfc3339(ms: i64) -> String {
    let t =
        std::time::UNIX_EPOCH + std::time::Duration::from_millis(u64::try_from(ms).unwrap_or(0));
    humantime::format_rfc3339_millis(t).to_string()
}

/// A time parameter: RFC 3339 (any offset), or unix seconds. Times before 1970
/// count as 1970.
pub fn parse_time(name: &str, v: &str) -> Result<i64, ApiError> {
    let bad = || {
        ApiError::BadRequest(format!(
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

pub(super) fn parse_status(v: &str) -> Result<Status, ApiError> {
    Status::parse(v).ok_or_else(|| {
        ApiError::BadRequest(format!(
            "status: {v:?} is not one of pending, delivered, dead, discarded, filtered"
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
pub(super) fn json_object<T: serde::de::DeserializeOwned>(body: &[u8]) -> Option<T> {
    match serde_json::from_slice::<serde_json::Value>(body).ok()? {
        v @ serde_json::Value::Object(_) => serde_json::from_value(v).ok(),
        _ => None,
    }
}

pub(super) fn query_map(raw: Option<String>) -> HashMap<String, String> {
    form_urlencoded::parse(raw.unwrap_or_default().as_bytes())
        .into_owned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replayed_delivery_waits_after_earlier_arrivals_and_before_later_ones() {
        let line = |ids: &[&str]| ids.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let places = line_places(
            "b",
            vec![
                ("r".into(), "k".into(), line(&["a", "b", "c", "d"])),
                ("s".into(), "k2".into(), line(&["c"])),
            ],
        );
        assert_eq!(
            (places[0].ahead, places[0].behind),
            (1, 2),
            "its own place is not counted"
        );
        assert_eq!((places[1].ahead, places[1].behind), (0, 1));
    }

    #[test]
    fn blank_is_what_the_documented_pattern_calls_blank() {
        for c in [
            ' ', '\t', '\n', '\u{85}', '\u{a0}', '\u{2028}', '\u{3000}', '\u{feff}',
        ] {
            assert!(blank(c), "{c:?}");
        }
        for c in ['a', '.', '\u{200b}', '\u{e9}'] {
            assert!(!blank(c), "{c:?}");
        }
    }

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
