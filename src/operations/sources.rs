//! Sources and routes: which are paused, pausing and resuming them (recorded in the
//! control audit), and the counters of each.

use super::dto::{RouteState, RouteStats, SourceState, SourceStats, Stats};
use super::{OpError, Operations, SourceFacts};
use crate::store::{Actor, ControlAction, ControlEvent, PauseTarget, StoreError};

/// What is paused, as the store says now.
struct Paused(Vec<PauseTarget>);

impl Paused {
    async fn read(ops: &Operations) -> Result<Paused, OpError> {
        Ok(Paused(ops.store.paused().await?))
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

    fn state(&self, s: &SourceFacts) -> SourceState {
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

/// Every configured source and its routes, each with whether it is paused, as the
/// store says now: what `GET /admin/sources` answers and the console's Sources page
/// shows.
pub async fn source_states(ops: &Operations) -> Result<Vec<SourceState>, StoreError> {
    let paused = Paused(ops.store.paused().await?);
    Ok(ops.sources().iter().map(|s| paused.state(s)).collect())
}

/// Pause or resume a source (`route: None`) or one of its routes, as `by`; answers
/// the source's state afterwards. An unknown source or route changes nothing. The
/// admin API's pause and resume handlers and the console's buttons both call this.
///
/// The control audit records the change before it is made: a pause is never
/// unaudited, though a record may name a change whose store write then failed (the
/// caller was answered 503 and may try again). A resume whose record the store
/// refuses (a Redis out of memory) still resumes, the record in the log instead:
/// refusing it would keep a full store from draining.
pub async fn set_paused(
    ops: &Operations,
    name: &str,
    route: Option<&str>,
    paused: bool,
    by: &Actor,
) -> Result<SourceState, OpError> {
    let source = ops
        .source(name)
        .ok_or_else(|| OpError::NoSuchSource(name.to_string()))?;
    if let Some(r) = route
        && !source.has_route(r)
    {
        return Err(OpError::NoSuchRoute {
            name: name.to_string(),
            route: r.to_string(),
        });
    }
    let recorded = ops
        .store
        .record_control(&ControlEvent {
            at: ops.clock.now_ms(),
            action: ControlAction::of(paused),
            source: name.to_string(),
            route: route.map(str::to_string),
            by: by.clone(),
        })
        .await;
    match (recorded, paused) {
        (Ok(()), _) => {}
        (Err(e), true) => return Err(e.into()),
        // A resume is what lets a store that is full (Redis at `maxmemory` refuses
        // every addition, the audit record included) drain: it goes ahead, and the
        // log keeps the record the store refused.
        (Err(e), false) => tracing::warn!(
            source = %name,
            route = route.unwrap_or(""),
            actor = ?by.name,
            session = by.session.as_deref().unwrap_or(""),
            client = by.client.as_deref().unwrap_or(""),
            error = %e,
            "the store refused the control audit record of this resume; resuming anyway"
        ),
    }
    ops.store.set_paused(name, route, paused).await?;
    tracing::info!(
        source = %name,
        route = route.unwrap_or(""),
        paused,
        "delivery {}",
        if paused { "paused" } else { "resumed" }
    );
    let now = Paused::read(ops).await?;
    Ok(now.state(&source))
}

/// The counters of every configured source and route, and what is paused, as the
/// store says now: what `/admin/stats` answers and the console's overview shows.
pub async fn current_stats(ops: &Operations) -> Result<Stats, StoreError> {
    let paused = Paused(ops.store.paused().await?);
    let now = ops.clock.now_ms();
    let age = |at: Option<i64>| at.map(|t| u64::try_from((now - t) / 1000).unwrap_or(0));
    let sources = ops.sources();
    let mut out = Vec::with_capacity(sources.len());
    for s in &sources {
        let counts = ops.store.stats(&s.name).await?;
        let mut routes = Vec::with_capacity(s.routes.len());
        for r in &s.routes {
            let rs = ops.store.route_stats(&s.name, r).await?;
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
