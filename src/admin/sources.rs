//! The source handlers of the admin API: list the configured sources and their
//! routes, pause and resume the delivery of a source or of one route, and their
//! counters (`/admin/stats`); the operations are `crate::operations::sources`,
//! which the console's pages call too.

use std::sync::Arc;

use axum::Json;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};

use super::actor::ApiActor;
use super::dto::{SourceState, Stats};
use super::{AdminState, path_param};
use crate::error::ApiError;

pub(super) async fn list(
    State(admin): State<Arc<AdminState>>,
) -> Result<Json<Vec<SourceState>>, ApiError> {
    Ok(Json(
        crate::operations::sources::source_states(&admin.ops).await?,
    ))
}

pub(super) async fn pause(
    State(admin): State<Arc<AdminState>>,
    ApiActor(by): ApiActor,
    name: Result<Path<String>, PathRejection>,
) -> Result<Json<SourceState>, ApiError> {
    Ok(Json(
        crate::operations::sources::set_paused(&admin.ops, &path_param(name)?, None, true, &by)
            .await?,
    ))
}

pub(super) async fn resume(
    State(admin): State<Arc<AdminState>>,
    ApiActor(by): ApiActor,
    name: Result<Path<String>, PathRejection>,
) -> Result<Json<SourceState>, ApiError> {
    Ok(Json(
        crate::operations::sources::set_paused(&admin.ops, &path_param(name)?, None, false, &by)
            .await?,
    ))
}

pub(super) async fn pause_route(
    State(admin): State<Arc<AdminState>>,
    ApiActor(by): ApiActor,
    p: Result<Path<(String, String)>, PathRejection>,
) -> Result<Json<SourceState>, ApiError> {
    let (name, route) = path_param(p)?;
    Ok(Json(
        crate::operations::sources::set_paused(&admin.ops, &name, Some(&route), true, &by).await?,
    ))
}

pub(super) async fn resume_route(
    State(admin): State<Arc<AdminState>>,
    ApiActor(by): ApiActor,
    p: Result<Path<(String, String)>, PathRejection>,
) -> Result<Json<SourceState>, ApiError> {
    let (name, route) = path_param(p)?;
    Ok(Json(
        crate::operations::sources::set_paused(&admin.ops, &name, Some(&route), false, &by).await?,
    ))
}

pub(super) async fn stats(State(admin): State<Arc<AdminState>>) -> Result<Json<Stats>, ApiError> {
    Ok(Json(
        crate::operations::sources::current_stats(&admin.ops).await?,
    ))
}
