//! The entry handlers of the admin API: list, show, replay and discard, with the
//! parsing of their query parameters and bodies (shared with the other handlers).
//!
//! Replays keep the entry id (the consumer's idempotency key) and get a fresh retry
//! budget. Replay and discard take a route (in their JSON body), or apply to every
//! delivery that qualifies. Replaying many entries at once is `bulk_replay`'s.

use std::collections::HashMap;
use std::sync::Arc;

use super::body::Body;
use axum::Json;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use super::actor::ApiActor;
use super::dto::{self, EntryDetail, EntryList, TransitionResult};
use super::{AdminState, path_param};
use crate::error::ApiError;
use crate::operations::search::{PredicateKind, parse_predicates, search_entries};
use crate::store::{ListQuery, MAX_PAGE, Status};

/// The page size of a listing that names no `limit` (the largest is `MAX_PAGE`).
pub const DEFAULT_LIMIT: usize = 50;

pub(super) async fn list(
    State(admin): State<Arc<AdminState>>,
    RawQuery(raw): RawQuery,
) -> Result<Json<EntryList>, ApiError> {
    let raw_query = raw.clone();
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
    // Payload predicates (each parameter may repeat): see `operations::search`.
    let pairs: Vec<_> = form_urlencoded::parse(raw_query.as_deref().unwrap_or_default().as_bytes())
        .filter_map(|(k, v)| Some((PredicateKind::from_param(&k)?, v)))
        .collect();
    let predicates = parse_predicates(pairs.iter().map(|(k, v)| (*k, v.as_ref())))?;
    Ok(Json(search_entries(&admin.ops, query, predicates).await?))
}

pub(super) async fn show(
    State(admin): State<Arc<AdminState>>,
    id: Result<Path<String>, PathRejection>,
) -> Result<Json<EntryDetail>, ApiError> {
    let id = path_param(id)?;
    Ok(Json(
        crate::operations::entries::entry_detail(&admin.ops, &id).await?,
    ))
}

pub(super) async fn replay(
    State(admin): State<Arc<AdminState>>,
    ApiActor(by): ApiActor,
    id: Result<Path<String>, PathRejection>,
    Body(body): Body,
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
    let done =
        crate::operations::entries::replay_entry(&admin.ops, &id, route.as_deref(), &by).await?;
    Ok((StatusCode::ACCEPTED, Json(done)).into_response())
}

/// `POST /admin/entries/{id}/preview`: what a route would send, without sending.
pub(super) async fn preview(
    State(admin): State<Arc<AdminState>>,
    id: Result<Path<String>, PathRejection>,
    Body(body): Body,
) -> Result<Json<dto::Preview>, ApiError> {
    let id = path_param(id)?;
    let req: dto::PreviewRequest = if body.is_empty() {
        dto::PreviewRequest::default()
    } else {
        json_object(&body).ok_or_else(|| {
            ApiError::BadRequest("the body must be a JSON object: {\"route\": \"name\"}".into())
        })?
    };
    let route = req.route.filter(|r| !r.is_empty());
    Ok(Json(
        crate::operations::preview::preview(&admin.ops, &id, route.as_deref()).await?,
    ))
}

pub(super) async fn discard(
    State(admin): State<Arc<AdminState>>,
    ApiActor(by): ApiActor,
    id: Result<Path<String>, PathRejection>,
    Body(body): Body,
) -> Result<Json<TransitionResult>, ApiError> {
    let id = path_param(id)?;
    let req: dto::DiscardRequest = json_object(&body).ok_or_else(|| {
        ApiError::BadRequest("a JSON body {\"note\": \"why\"} is required".into())
    })?;
    let route = req.route.filter(|r| !r.is_empty());
    let done = crate::operations::entries::discard_entry(
        &admin.ops,
        &id,
        route.as_deref(),
        &by,
        &req.note,
    )
    .await?;
    Ok(Json(done))
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
