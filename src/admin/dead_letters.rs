//! Dead letters grouped by failure (`crate::operations::dead_letters`): `GET
//! /admin/dead-letters` answers the groups, and the console's Dead letters page
//! shows them.
//!
//! A group is replayed as one bulk replay (`POST /admin/dead-letters/replay`): its
//! deliveries are queued oldest first at `admin.replay_rate` per second
//! (`operations::bulk::replay_paced`), never all at once.
//!
//! Each route's newest `operations::dead_letters::GROUPED_MAX` dead deliveries are grouped (the store reads
//! no body for them); a route with more says so (`scanned` < `dead`), and a replayed
//! group makes room for the next.

use std::sync::Arc;

use super::body::Body;
use axum::Json;
use axum::extract::{RawQuery, State};
use axum::http::StatusCode;

use super::AdminState;
use super::actor::ApiActor;
use super::dto::{DeadLetterGroups, DeadLetterReplay, ReplayResult};
use super::entries::{json_object, query_map};
use crate::error::ApiError;

pub(super) async fn list(
    State(admin): State<Arc<AdminState>>,
    RawQuery(raw): RawQuery,
) -> Result<Json<DeadLetterGroups>, ApiError> {
    let q = query_map(raw);
    let source = q
        .get("source")
        .filter(|s| !s.is_empty())
        .map(String::as_str);
    let route = q.get("route").filter(|s| !s.is_empty()).map(String::as_str);
    Ok(Json(
        crate::operations::dead_letters::dead_letter_groups(&admin.ops, source, route).await?,
    ))
}

pub(super) async fn replay(
    State(admin): State<Arc<AdminState>>,
    ApiActor(by): ApiActor,
    Body(body): Body,
) -> Result<(StatusCode, Json<ReplayResult>), ApiError> {
    let req: DeadLetterReplay = json_object(&body).ok_or_else(|| {
        ApiError::BadRequest(
            "a JSON body {\"source\": \"…\", \"route\": \"…\", \"failure\": \"HTTP 422\"} is required"
                .into(),
        )
    })?;
    let done = crate::operations::dead_letters::replay_group(
        &admin.ops,
        &req.source,
        &req.route,
        &req.failure,
        &by,
    )
    .await?;
    Ok((StatusCode::ACCEPTED, Json(done)))
}
