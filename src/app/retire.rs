//! Routes leaving the route table and coming back, told to the route registry
//! (`store::routes`) each time a table is put in force (at start and at every
//! reload).
//!
//! A route no table has any more is marked retired: its pending deliveries are
//! kept, unsent (no loop claims them), listed and counted. A retired route that
//! comes back with the same destination simply resumes. One that comes back with
//! another destination while it still holds deliveries is paused, with a control
//! audit record: those deliveries were meant for another app, and go only once an
//! operator resumes the route (or discards them).

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

use super::table::Table;
use crate::store::{Actor, ControlAction, ControlEvent, KnownRoute, Store, StoreError};

/// The fingerprint of `destination` on a store whose salt is `salt`: hex of the
/// first 8 bytes of an HMAC-SHA256 (a URL may hold a password; the registry keeps
/// nothing it would reveal).
pub fn fingerprint(destination: &str, salt: &[u8; 32]) -> String {
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(salt) else {
        return String::new();
    };
    mac.update(destination.as_bytes());
    hex::encode(&mac.finalize().into_bytes()[..8])
}

/// Tell the registry which routes `table` has: those it lacks are retired now, and
/// a retired route back with another destination and deliveries waiting is paused.
/// A store that cannot answer leaves the registry as it was (said in the log); the
/// table stays in force either way.
pub async fn settle(store: &dyn Store, table: &Table, salt: &[u8; 32], now: i64) {
    if let Err(e) = try_settle(store, table, salt, now).await {
        tracing::warn!(error = %e, "cannot update the route registry; retired routes may be listed late");
    }
}

async fn try_settle(
    store: &dyn Store,
    table: &Table,
    salt: &[u8; 32],
    now: i64,
) -> Result<(), StoreError> {
    let known = store.known_routes().await?;
    let mut remember = Vec::new();
    for route in &table.forward.routes {
        let destination = fingerprint(&route.destination, salt);
        let before = known
            .iter()
            .find(|k| k.source == route.source && k.route == route.name);
        if let Some(k) = before
            && k.retired_at.is_some()
            && k.destination != destination
        {
            let pending = store.route_stats(&route.source, &route.name).await?.pending;
            if pending > 0 {
                hold(store, &route.source, &route.name, pending, now).await?;
            }
        }
        if before.is_none_or(|k| k.destination != destination || k.retired_at.is_some()) {
            remember.push(KnownRoute {
                source: route.source.clone(),
                route: route.name.clone(),
                destination,
                retired_at: None,
            });
        }
    }
    for k in known {
        let in_force = table
            .forward
            .routes
            .iter()
            .any(|r| r.source == k.source && r.name == k.route);
        if !in_force && k.retired_at.is_none() {
            let pending = store.route_stats(&k.source, &k.route).await?.pending;
            const MSG: &str = "route retired: its pending deliveries wait, unsent, until a route of that name comes back (or they are discarded)";
            match pending {
                0 => tracing::info!(source = %k.source, route = %k.route, pending, "{MSG}"),
                _ => tracing::warn!(source = %k.source, route = %k.route, pending, "{MSG}"),
            }
            remember.push(KnownRoute {
                retired_at: Some(now),
                ..k
            });
        }
    }
    store.remember_routes(&remember).await
}

/// Pause `route` of `source`, back with another destination while `pending`
/// deliveries meant for the old one wait.
async fn hold(
    store: &dyn Store,
    source: &str,
    route: &str,
    pending: u64,
    now: i64,
) -> Result<(), StoreError> {
    store
        .record_control(&ControlEvent {
            at: now,
            action: ControlAction::Pause,
            source: source.to_string(),
            route: Some(route.to_string()),
            by: Actor::from("reload"),
        })
        .await?;
    store.set_paused(source, Some(route), true).await?;
    tracing::warn!(
        source,
        route,
        pending,
        "a retired route is back with another destination: paused, so that its kept deliveries reach the new destination only once an operator resumes it (or discards them)"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fingerprint_is_keyed_and_hides_the_url() {
        let url = "https://user:S3cretPW@app.internal/hooks";
        let a = fingerprint(url, &[1; 32]);
        assert_eq!(a.len(), 16);
        assert_eq!(a, fingerprint(url, &[1; 32]));
        assert_ne!(a, fingerprint(url, &[2; 32]));
        assert_ne!(a, fingerprint("https://app.internal/hooks", &[1; 32]));
        assert!(!a.contains("S3cret"));
    }
}
