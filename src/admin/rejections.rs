//! `GET /admin/rejections`: the newest requests ingest refused (filters by source,
//! reason and time, a cursor), and `GET /admin/rejections/groups`: every refusal
//! counted per source and reason since a time, each with a hint
//! (`operations::rejections`).

use std::sync::Arc;

use axum::Json;
use axum::extract::{RawQuery, State};

use super::AdminState;
use super::dto::{RejectionGroups, RejectionList};
use super::entries::{parse_time, query_map};
use crate::error::ApiError;
use crate::operations::rejections::{self, DEFAULT_WINDOW_MS};
use crate::store::RejectionQuery;
use crate::store::rejection::REJECTIONS_PAGE_MAX;

/// How many rows a request that names no `limit` gets.
pub const DEFAULT_LIMIT: usize = 50;

pub(super) async fn list(
    State(admin): State<Arc<AdminState>>,
    RawQuery(raw): RawQuery,
) -> Result<Json<RejectionList>, ApiError> {
    let q = query_map(raw);
    let limit = match q.get("limit") {
        None => DEFAULT_LIMIT,
        Some(v) => v
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=REJECTIONS_PAGE_MAX).contains(n))
            .ok_or_else(|| {
                ApiError::BadRequest(format!(
                    "limit: {v:?} must be between 1 and {REJECTIONS_PAGE_MAX}"
                ))
            })?,
    };
    let query = RejectionQuery {
        source: q.get("source").filter(|s| !s.is_empty()).cloned(),
        reason: q.get("reason").filter(|s| !s.is_empty()).cloned(),
        before: q.get("cursor").filter(|s| !s.is_empty()).cloned(),
        since: q.get("since").map(|v| parse_time("since", v)).transpose()?,
        limit,
    };
    Ok(Json(rejections::list(&admin.ops, &query).await?))
}

pub(super) async fn groups(
    State(admin): State<Arc<AdminState>>,
    RawQuery(raw): RawQuery,
) -> Result<Json<RejectionGroups>, ApiError> {
    let q = query_map(raw);
    let since = match q.get("since") {
        Some(v) => parse_time("since", v)?,
        None => admin.ops.clock.now_ms() - DEFAULT_WINDOW_MS,
    };
    Ok(Json(rejections::groups(&admin.ops, since).await?))
}
