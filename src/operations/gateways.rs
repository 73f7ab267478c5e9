//! The gateways sharing the store, as their heartbeats left them: what
//! `GET /admin/gateways`, `hookgate gateways` and the console's overview show.

use super::Operations;
use super::dto::{GatewayState, Gateways};
use super::entries::rfc3339;
use crate::store::StoreError;

/// The gateways seen within the last hour, by id.
pub async fn gateways(ops: &Operations) -> Result<Gateways, StoreError> {
    let gateways = ops
        .store
        .gateways()
        .await?
        .into_iter()
        .map(|g| GatewayState {
            id: g.id,
            host: g.host,
            version: g.version,
            started: rfc3339(g.started),
            last_seen: rfc3339(g.last_seen),
            alive: g.alive,
        })
        .collect();
    Ok(Gateways { gateways })
}
