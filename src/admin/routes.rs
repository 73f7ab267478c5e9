//! `GET /admin/routes` (every route of the table in force and every route a reload
//! retired, with what each holds) and `POST /admin/routes/{source}/{route}/discard`
//! (a retired route's pending deliveries discarded, with a note); the operations
//! are `crate::operations::routes`.

use std::sync::Arc;

use axum::Json;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};

use super::actor::ApiActor;
use super::body::Body;
use super::entries::json_object;
use super::{AdminState, path_param};
use crate::error::ApiError;
use crate::operations::routes::{RetiredDiscarded, RouteInfo};

/// The body of a retired route's discard.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct DiscardRetired {
    note: String,
}

pub(super) async fn list(
    State(admin): State<Arc<AdminState>>,
) -> Result<Json<Vec<RouteInfo>>, ApiError> {
    Ok(Json(crate::operations::routes::routes(&admin.ops).await?))
}

pub(super) async fn discard(
    State(admin): State<Arc<AdminState>>,
    ApiActor(by): ApiActor,
    names: Result<Path<(String, String)>, PathRejection>,
    Body(body): Body,
) -> Result<Json<RetiredDiscarded>, ApiError> {
    let (source, route) = path_param(names)?;
    let req: DiscardRetired = json_object(&body).ok_or_else(|| {
        ApiError::BadRequest("a JSON body {\"note\": \"why\"} is required".into())
    })?;
    let done =
        crate::operations::routes::discard_retired(&admin.ops, &source, &route, &req.note, &by)
            .await?;
    Ok(Json(done))
}
