//! `GET /admin/audit`: the control audit, the pauses and resumes of sources and
//! routes with who made them (actor, console session, client address), newest first.
//! The console's Sources page shows the same list through [`control_events`].

use std::sync::Arc;

use axum::Json;
use axum::extract::{RawQuery, State};

use super::AdminState;
use super::dto::ControlEvent;
use super::entries::query_map;
use crate::error::ApiError;
use crate::store::CONTROL_AUDIT_KEEP;

/// How many events a request that names no `limit` gets.
pub const DEFAULT_AUDIT_LIMIT: usize = 100;

pub(super) async fn list(
    State(admin): State<Arc<AdminState>>,
    RawQuery(raw): RawQuery,
) -> Result<Json<Vec<ControlEvent>>, ApiError> {
    let q = query_map(raw);
    let limit = match q.get("limit") {
        None => DEFAULT_AUDIT_LIMIT,
        Some(l) => l
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=CONTROL_AUDIT_KEEP).contains(n))
            .ok_or_else(|| {
                ApiError::BadRequest(format!(
                    "limit must be a number from 1 to {CONTROL_AUDIT_KEEP}"
                ))
            })?,
    };
    Ok(Json(
        crate::operations::audit::control_events(&admin.ops, limit).await?,
    ))
}
