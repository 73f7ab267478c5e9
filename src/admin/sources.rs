//! The source handlers of the admin API: list the configured sources and their
//! routes, pause and resume the delivery of a source or of one route, and their
//! counters (`/admin/stats`, and [`current_stats`], which the console shares). The
//! console's Sources page shares [`source_states`] and [`set_paused`] too.

use std::sync::Arc;

use axum::Json;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};

use super::actor::ApiActor;
use super::dto::{RouteState, RouteStats, SourceState, SourceStats, Stats};
use super::{AdminSource, AdminState, path_param};
use crate::error::ApiError;
use crate::store::{Actor, ControlAction, ControlEvent, PauseTarget, StoreError};

/// What is paused, as the store says now.
struct Paused(Vec<PauseTarget>);

impl Paused {
    async fn read(admin: &AdminState) -> Result<Paused, ApiError> {
        Ok(Paused(admin.store.paused().await?))
    }

    fn source(&self, source: &str) -> bool {
        self.0
            .iter()
            .any(|t| t.source == source && t.route.is_none())
    }

    fn route(&self, source: &str, route: &str) -> bool {
        self.0
            .iter()
            .any(|t| t.source == source && t.route.as_deref() == Some(route))
    }

    fn state(&self, s: &AdminSource) -> SourceState {
        SourceState {
            source: s.name.clone(),
            paused: self.source(&s.name),
            routes: s
                .routes
                .iter()
                .map(|r| RouteState {
                    route: r.clone(),
                    paused: self.route(&s.name, r),
                })
                .collect(),
        }
    }
}

pub(super) async fn list(
    State(admin): State<Arc<AdminState>>,
) -> Result<Json<Vec<SourceState>>, ApiError> {
    Ok(Json(source_states(&admin).await?))
}

/// Every configured source and its routes, each with whether it is paused, as the
/// store says now: what `GET /admin/sources` answers and the console's Sources page
/// shows.
pub async fn source_states(admin: &AdminState) -> Result<Vec<SourceState>, StoreError> {
    let paused = Paused(admin.store.paused().await?);
    Ok(admin.sources.iter().map(|s| paused.state(s)).collect())
}

/// Pause or resume a source (`route: None`) or one of its routes, as `by`; answers
/// the source's state afterwards. An unknown source or route changes nothing. The
/// admin API's pause and resume handlers and the console's buttons both call this.
///
/// The control audit records the change before it is made: a change is never
/// unaudited, though a record may name a change whose store write then failed (the
/// caller was answered 503 and may try again).
pub async fn set_paused(
    admin: &AdminState,
    name: &str,
    route: Option<&str>,
    paused: bool,
    by: &Actor,
) -> Result<SourceState, ApiError> {
    let source = admin
        .source(name)
        .ok_or_else(|| ApiError::NoSuchSource(name.to_string()))?;
    if let Some(r) = route
        && !source.has_route(r)
    {
        return Err(ApiError::NoSuchRoute {
            name: name.to_string(),
            route: r.to_string(),
        });
    }
    admin
        .store
        .record_control(&ControlEvent {
            at: admin.clock.now_ms(),
            action: ControlAction::of(paused),
            source: name.to_string(),
            route: route.map(str::to_string),
            by: by.clone(),
        })
        .await?;
    admin.store.set_paused(name, route, paused).await?;
    tracing::info!(
        source = %name,
        route = route.unwrap_or(""),
        paused,
        "delivery {}",
        if paused { "paused" } else { "resumed" }
    );
    let now = Paused::read(admin).await?;
    Ok(now.state(source))
}

pub(super) async fn pause(
    State(admin): State<Arc<AdminState>>,
    ApiActor(by): ApiActor,
    name: Result<Path<String>, PathRejection>,
) -> Result<Json<SourceState>, ApiError> {
    Ok(Json(
        set_paused(&admin, &path_param(name)?, None, true, &by).await?,
    ))
}

pub(super) async fn resume(
    State(admin): State<Arc<AdminState>>,
    ApiActor(by): ApiActor,
    name: Result<Path<String>, PathRejection>,
) -> Result<Json<SourceState>, ApiError> {
    Ok(Json(
        set_paused(&admin, &path_param(name)?, None, false, &by).await?,
    ))
}

pub(super) async fn pause_route(
    State(admin): State<Arc<AdminState>>,
    ApiActor(by): ApiActor,
    p: Result<Path<(String, String)>, PathRejection>,
) -> Result<Json<SourceState>, ApiError> {
    let (name, route) = path_param(p)?;
    Ok(Json(
        set_paused(&admin, &name, Some(&route), true, &by).await?,
    ))
}

pub(super) async fn resume_route(
    State(admin): State<Arc<AdminState>>,
    ApiActor(by): ApiActor,
    p: Result<Path<(String, String)>, PathRejection>,
) -> Result<Json<SourceState>, ApiError> {
    let (name, route) = path_param(p)?;
    Ok(Json(
        set_paused(&admin, &name, Some(&route), false, &by).await?,
    ))
}

pub(super) async fn stats(State(admin): State<Arc<AdminState>>) -> Result<Json<Stats>, ApiError> {
    Ok(Json(current_stats(&admin).await?))
}

/// The counters of every configured source and route, and what is paused, as the
/// store says now: what `/admin/stats` answers and the console's overview shows.
pub async fn current_stats(admin: &AdminState) -> Result<Stats, StoreError> {
    let paused = Paused(admin.store.paused().await?);
    let now = admin.clock.now_ms();
    let age = |at: Option<i64>| at.map(|t| u64::try_from((now - t) / 1000).unwrap_or(0));
    let mut out = Vec::with_capacity(admin.sources.len());
    for s in &admin.sources {
        let counts = admin.store.stats(&s.name).await?;
        let mut routes = Vec::with_capacity(s.routes.len());
        for r in &s.routes {
            let rs = admin.store.route_stats(&s.name, r).await?;
            routes.push(RouteStats {
                route: r.clone(),
                paused: paused.route(&s.name, r),
                pending: rs.pending,
                delivered: rs.delivered,
                dead: rs.dead,
                discarded: rs.discarded,
                oldest_pending_age_seconds: age(rs.oldest_pending_at),
                blocked_keys: rs.blocked_keys,
            });
        }
        out.push(SourceStats {
            source: s.name.clone(),
            paused: paused.source(&s.name),
            received: counts.received,
            duplicates: counts.duplicates,
            unverified: counts.unverified,
            pending: counts.pending,
            delivered: counts.delivered,
            dead: counts.dead,
            discarded: counts.discarded,
            filtered: counts.filtered,
            oldest_pending_age_seconds: age(counts.oldest_pending_at),
            routes,
        });
    }
    Ok(Stats { sources: out })
}
