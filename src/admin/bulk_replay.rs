//! Bulk replay: `POST /admin/replay`, apart from the single-entry handlers in
//! `entries` so that each file stays one concern; the paced replay itself, which the
//! dead-letter replays share, is `crate::operations::bulk`.
//!
//! A bulk replay collects the ids of the entries its filter selects, then spreads
//! their replays over time at `admin.replay_rate` per second after whatever this
//! process already queued, so replaying a large dead-letter queue never stampedes
//! the destination.

use std::sync::Arc;

use super::body::Body;
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;

use super::AdminState;
use super::actor::ApiActor;
use super::dto::{ReplayFilter, ReplayResult};
use super::entries::{json_object, parse_status, parse_time};
use crate::error::{ApiError, OpError};
use crate::store::{ListQuery, Status};

pub(super) async fn bulk_replay(
    State(admin): State<Arc<AdminState>>,
    ApiActor(by): ApiActor,
    Body(body): Body,
) -> Result<(StatusCode, Json<ReplayResult>), ApiError> {
    let f: ReplayFilter = if body.is_empty() {
        ReplayFilter::default()
    } else {
        json_object(&body).ok_or_else(|| {
            ApiError::BadRequest(
                "the filter must be a JSON object: {\"source\", \"route\", \"status\", \"event_type\", \"since\", \"until\"}"
                    .into(),
            )
        })?
    };
    let status = match f.status.as_deref() {
        None => Status::Dead,
        Some(s) => parse_status(s)?,
    };
    if status == Status::Pending {
        return Err(ApiError::BadRequest(
            "status: pending entries are already queued".into(),
        ));
    }
    let source = f.source.clone().filter(|s| !s.is_empty());
    let route = f.route.clone().filter(|r| !r.is_empty());
    if let Some(s) = &source
        && !admin.ops.has_source(s)
    {
        return Err(OpError::NoSuchSource(s.clone()).into());
    }
    // A route without a source: that route of every source that has one.
    if let (Some(s), Some(r)) = (&source, &route)
        && !admin.ops.source(s).is_some_and(|s| s.has_route(r))
    {
        return Err(OpError::NoSuchRoute {
            name: s.clone(),
            route: r.clone(),
        }
        .into());
    }
    let mut query = ListQuery {
        source,
        route: route.clone(),
        status: Some(status),
        event_type: f.event_type.clone().filter(|s| !s.is_empty()),
        event_id: None,
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
        let page = admin.ops.store.list_ids(&query).await?;
        ids.extend(page.ids);
        match page.next_cursor {
            Some(c) if ids.len() < crate::operations::bulk::BULK_REPLAY_MAX => {
                query.cursor = Some(c)
            }
            _ => break,
        }
    }
    ids.truncate(crate::operations::bulk::BULK_REPLAY_MAX);
    let done =
        crate::operations::bulk::replay_paced(&admin.ops, ids, route.as_deref(), &by).await?;
    Ok((StatusCode::ACCEPTED, Json(done)))
}
