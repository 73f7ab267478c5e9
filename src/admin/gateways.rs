//! `GET /admin/gateways`: the gateways sharing the store, their configuration
//! versions and whether they are alive (`crate::operations::gateways`).

use std::sync::Arc;

use axum::Json;
use axum::extract::State;

use super::AdminState;
use super::dto::Gateways;
use crate::error::ApiError;

pub(super) async fn list(State(admin): State<Arc<AdminState>>) -> Result<Json<Gateways>, ApiError> {
    Ok(Json(
        crate::operations::gateways::gateways(&admin.ops).await?,
    ))
}
