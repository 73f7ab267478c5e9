//! The source handlers of the admin API: list the configured sources, pause and
//! resume their delivery, and their counters (`/admin/stats`).

use std::sync::Arc;

use axum::Json;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};

use super::dto::{SourceState, SourceStats, Stats};
use super::{AdminState, path_param};
use crate::error::ApiError;

pub(super) async fn list(
    State(admin): State<Arc<AdminState>>,
) -> Result<Json<Vec<SourceState>>, ApiError> {
    let paused = admin.store.paused_sources().await?;
    Ok(Json(
        admin
            .sources
            .iter()
            .map(|(n, _)| SourceState {
                source: n.clone(),
                paused: paused.contains(n),
            })
            .collect(),
    ))
}

async fn set_paused(
    admin: &AdminState,
    name: Result<Path<String>, PathRejection>,
    paused: bool,
) -> Result<Json<SourceState>, ApiError> {
    let name = path_param(name)?;
    if !admin.has_source(&name) {
        return Err(ApiError::NoSuchSource(name));
    }
    admin.store.set_paused(&name, paused).await?;
    tracing::info!(source = %name, paused, "source delivery {}", if paused { "paused" } else { "resumed" });
    Ok(Json(SourceState {
        source: name,
        paused,
    }))
}

pub(super) async fn pause(
    State(admin): State<Arc<AdminState>>,
    name: Result<Path<String>, PathRejection>,
) -> Result<Json<SourceState>, ApiError> {
    set_paused(&admin, name, true).await
}

pub(super) async fn resume(
    State(admin): State<Arc<AdminState>>,
    name: Result<Path<String>, PathRejection>,
) -> Result<Json<SourceState>, ApiError> {
    set_paused(&admin, name, false).await
}

pub(super) async fn stats(State(admin): State<Arc<AdminState>>) -> Result<Json<Stats>, ApiError> {
    let paused = admin.store.paused_sources().await?;
    let now = admin.clock.now_ms();
    let mut out = Vec::with_capacity(admin.sources.len());
    for (name, _) in &admin.sources {
        let counts = admin.store.stats(name).await?;
        out.push(SourceStats {
            source: name.clone(),
            paused: paused.contains(name),
            received: counts.received,
            duplicates: counts.duplicates,
            unverified: counts.unverified,
            pending: counts.pending,
            delivered: counts.delivered,
            dead: counts.dead,
            discarded: counts.discarded,
            oldest_pending_age_seconds: counts
                .oldest_pending_at
                .map(|t| u64::try_from((now - t) / 1000).unwrap_or(0)),
        });
    }
    Ok(Json(Stats { sources: out }))
}
