//! The source handlers of the admin API: list the configured sources and their
//! routes, pause and resume the delivery of a source or of one route, and their
//! counters (`/admin/stats`); the operations are `crate::operations::sources`,
//! which the console's pages call too.

use std::sync::Arc;

use axum::Json;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};

use super::actor::ApiActor;
use super::body::Body;
use super::dto::{ReconcileRequest, SourceState, Stats};
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

/// `POST /admin/sources/{name}/reconcile`: a reconciliation pass now. The body is
/// optional: `{"since": "6h", "dry_run": true}` (both optional; unknown fields are
/// refused by name).
pub(super) async fn reconcile(
    State(admin): State<Arc<AdminState>>,
    ApiActor(by): ApiActor,
    name: Result<Path<String>, PathRejection>,
    Body(body): Body,
) -> Result<Json<crate::reconcile::Report>, ApiError> {
    let name = path_param(name)?;
    let ask = if body.is_empty() {
        ReconcileRequest::default()
    } else {
        reconcile_request(&body)?
    };
    let since = ask
        .since
        .map(|s| {
            crate::config::parse_duration("since", &s).map_err(|_| {
                ApiError::BadRequest("since must be a duration such as \"6h\" or \"3d\"".into())
            })
        })
        .transpose()?;
    Ok(Json(
        crate::operations::reconcile::reconcile(
            &admin.ops,
            &name,
            since,
            ask.dry_run.unwrap_or(false),
            &by,
        )
        .await?,
    ))
}

/// Read the body of a reconcile request: a JSON object with `since` (a duration)
/// and `dry_run` (a boolean) at most.
fn reconcile_request(body: &[u8]) -> Result<ReconcileRequest, ApiError> {
    let not_object = || {
        ApiError::BadRequest(
            "the body must be a JSON object: {\"since\": \"6h\", \"dry_run\": true}".into(),
        )
    };
    let serde_json::Value::Object(fields) =
        serde_json::from_slice::<serde_json::Value>(body).map_err(|_| not_object())?
    else {
        return Err(not_object());
    };
    if let Some(unknown) = fields
        .keys()
        .find(|k| !matches!(k.as_str(), "since" | "dry_run"))
    {
        let shown: String = unknown.escape_debug().take(64).collect();
        return Err(ApiError::BadRequest(format!(
            "unknown field \"{shown}\" in the body: the fields are since (\"6h\") and dry_run (true or false)"
        )));
    }
    serde_json::from_value(serde_json::Value::Object(fields)).map_err(|_| {
        ApiError::BadRequest("since must be a string (\"6h\") and dry_run true or false".into())
    })
}
