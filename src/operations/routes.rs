//! Every route, as `GET /admin/routes`, `hookgate routes` and the console's Sources
//! page show them: the routes of the table in force, and the routes a reload
//! retired that still hold deliveries (`store::routes`), with what each holds; and
//! the discard, with a note, of everything a retired route holds.

use serde::{Deserialize, Serialize};

use super::{OpError, Operations};
use crate::store::{Actor, ListQuery, MAX_PAGE, Status, StoreError};

/// One route and what it holds.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RouteInfo {
    pub source: String,
    pub route: String,
    /// `active` (in the table in force) or `retired` (a reload removed it; its
    /// pending deliveries wait, unsent).
    pub state: RouteStateKind,
    /// The destination, an HTTP URL's userinfo and query redacted (active routes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destination: Option<String>,
    /// What kind of destination: `http`, `nats` or `amqp` (active routes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// When it was retired (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retired_at: Option<String>,
    pub pending: u64,
    pub dead: u64,
    /// A pull route's consumers as this gateway saw them, the most recent first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consumers: Option<Vec<ConsumerInfo>>,
}

/// A consumer of a pull route: the token it presented, where it pulled from, and
/// when this gateway last saw it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ConsumerInfo {
    pub token: String,
    pub address: String,
    /// RFC 3339.
    pub last_seen: String,
}

/// Whether a route is in the table in force.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RouteStateKind {
    Active,
    Retired,
}

/// What a discard of a retired route's deliveries did.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RetiredDiscarded {
    pub source: String,
    pub route: String,
    /// Deliveries discarded.
    pub discarded: u64,
    /// Whether the route left the registry (nothing of it is pending any more).
    pub forgotten: bool,
}

/// Every route of the table in force, in configuration order, then every retired
/// one the registry holds.
pub async fn routes(ops: &Operations) -> Result<Vec<RouteInfo>, StoreError> {
    let catalog = ops.catalog.load();
    let mut out = Vec::new();
    for r in &catalog.routes {
        let stats = ops.store.route_stats(&r.source, &r.route).await?;
        let consumers = (r.kind == crate::config::DestinationKind::Pull).then(|| {
            ops.pulls
                .as_ref()
                .map(|p| p.consumers(&r.source, &r.route))
                .unwrap_or_default()
                .into_iter()
                .map(|c| ConsumerInfo {
                    token: c.token,
                    address: c.address,
                    last_seen: super::entries::rfc3339(c.last_seen),
                })
                .collect()
        });
        out.push(RouteInfo {
            source: r.source.clone(),
            route: r.route.clone(),
            state: RouteStateKind::Active,
            destination: Some(r.destination.clone()),
            kind: Some(r.kind.as_str().to_string()),
            retired_at: None,
            pending: stats.pending,
            dead: stats.dead,
            consumers,
        });
    }
    let mut retired: Vec<_> = ops
        .store
        .known_routes()
        .await?
        .into_iter()
        .filter(|k| {
            !catalog
                .routes
                .iter()
                .any(|r| r.source == k.source && r.route == k.route)
        })
        .collect();
    retired.sort_by(|a, b| (&a.source, &a.route).cmp(&(&b.source, &b.route)));
    for k in retired {
        let stats = ops.store.route_stats(&k.source, &k.route).await?;
        out.push(RouteInfo {
            state: RouteStateKind::Retired,
            destination: None,
            kind: None,
            retired_at: k.retired_at.map(super::entries::rfc3339),
            pending: stats.pending,
            dead: stats.dead,
            consumers: None,
            source: k.source,
            route: k.route,
        });
    }
    Ok(out)
}

/// Discard every pending delivery of the retired `route` of `source`, each with
/// `note` in its entry's audit trail; the route leaves the registry once nothing of
/// it is pending. A route of the table in force is refused: its deliveries are
/// discarded one by one, or the route paused.
pub async fn discard_retired(
    ops: &Operations,
    source: &str,
    route: &str,
    note: &str,
    by: &Actor,
) -> Result<RetiredDiscarded, OpError> {
    let note = super::entries::checked_note(note)?;
    if ops
        .catalog
        .load()
        .routes
        .iter()
        .any(|r| r.source == source && r.route == route)
    {
        return Err(OpError::RouteInForce {
            name: source.to_string(),
            route: route.to_string(),
        });
    }
    let known = ops.store.known_routes().await?;
    if !known.iter().any(|k| k.source == source && k.route == route) {
        return Err(OpError::NoSuchRoute {
            name: source.to_string(),
            route: route.to_string(),
        });
    }
    let mut discarded = 0u64;
    let mut cursor = None;
    loop {
        let page = ops
            .store
            .list_ids(&ListQuery {
                source: Some(source.to_string()),
                route: Some(route.to_string()),
                status: Some(Status::Pending),
                event_type: None,
                event_id: None,
                since: None,
                until: None,
                limit: MAX_PAGE,
                cursor,
            })
            .await?;
        for id in &page.ids {
            match super::entries::discard_entry(ops, id, Some(route), by, note).await {
                Ok(_) => discarded += 1,
                // Gone or no longer pending meanwhile: nothing to discard.
                Err(OpError::NoSuchEntry(_) | OpError::NotDiscardable { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    let left = ops.store.route_stats(source, route).await?.pending;
    let forgotten = left == 0;
    if forgotten {
        ops.store.forget_route(source, route).await?;
    }
    tracing::info!(
        source,
        route,
        discarded,
        forgotten,
        "a retired route's deliveries discarded"
    );
    Ok(RetiredDiscarded {
        source: source.to_string(),
        route: route.to_string(),
        discarded,
        forgotten,
    })
}
