//! The secret-handshake handlers of the admin API: arm a source's handshake, read
//! its state, forget an established secret (`crate::operations::handshakes`).

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};

use super::actor::ApiActor;
use super::entries::json_object;
use super::{AdminState, path_param};
use crate::error::ApiError;
use crate::operations::dto::{ArmHandshake, HandshakeState};
use crate::operations::handshakes;

pub(super) async fn arm(
    State(admin): State<Arc<AdminState>>,
    ApiActor(by): ApiActor,
    name: Result<Path<String>, PathRejection>,
    body: Bytes,
) -> Result<Json<HandshakeState>, ApiError> {
    let name = path_param(name)?;
    let req: ArmHandshake = if body.is_empty() {
        ArmHandshake::default()
    } else {
        json_object(&body).ok_or_else(|| {
            ApiError::BadRequest("the body must be a JSON object: {\"within_secs\": 600}".into())
        })?
    };
    let within = req
        .within_secs
        .map_or(handshakes::DEFAULT_WINDOW, Duration::from_secs);
    Ok(Json(handshakes::arm(&admin.ops, &name, within, &by).await?))
}

pub(super) async fn show(
    State(admin): State<Arc<AdminState>>,
    name: Result<Path<String>, PathRejection>,
) -> Result<Json<HandshakeState>, ApiError> {
    Ok(Json(
        handshakes::state(&admin.ops, &path_param(name)?).await?,
    ))
}

pub(super) async fn forget(
    State(admin): State<Arc<AdminState>>,
    ApiActor(by): ApiActor,
    p: Result<Path<(String, String)>, PathRejection>,
) -> Result<Json<HandshakeState>, ApiError> {
    let (name, id) = path_param(p)?;
    Ok(Json(handshakes::forget(&admin.ops, &name, &id, &by).await?))
}
