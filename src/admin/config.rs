//! `GET /admin/config` (the configuration in force: its version, when and from
//! where it was loaded; never a secret) and `POST /admin/config/reload`
//! (`?dry_run=true`: what would change, nothing applied), which `hookgate reload`
//! calls. The reload itself is `app::reload`'s, reached through
//! `operations::config::ConfigControl`.

use std::sync::Arc;

use axum::Json;
use axum::extract::{RawQuery, State};

use super::AdminState;
use super::actor::ApiActor;
use super::entries::query_map;
use crate::error::ApiError;
use crate::operations::OpError;
use crate::operations::config::{ConfigInfo, Reloaded};

pub(super) async fn show(
    State(admin): State<Arc<AdminState>>,
) -> Result<Json<ConfigInfo>, ApiError> {
    let control = admin.ops.control.as_ref().ok_or(OpError::NoControl)?;
    Ok(Json(control.info()))
}

pub(super) async fn reload(
    State(admin): State<Arc<AdminState>>,
    ApiActor(by): ApiActor,
    RawQuery(raw): RawQuery,
) -> Result<Json<Reloaded>, ApiError> {
    let dry_run = match query_map(raw).get("dry_run").map(String::as_str) {
        None | Some("false") => false,
        Some("true") => true,
        Some(_) => {
            return Err(ApiError::BadRequest(
                "dry_run: use true or false".to_string(),
            ));
        }
    };
    let control = admin.ops.control.as_ref().ok_or(OpError::NoControl)?;
    tracing::info!(actor = ?by.name, client = ?by.client, dry_run, "configuration reload asked");
    let reloaded = control.reload(dry_run).await.map_err(OpError::from)?;
    Ok(Json(reloaded))
}
