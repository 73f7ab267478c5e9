//! The route registry: every route a gateway on the store has had in force, with
//! a fingerprint of its destination and, once no table has it any more, when it was
//! retired.
//!
//! A route removed by a reload keeps its pending deliveries (they are neither sent
//! nor lost); the registry is what tells those routes apart from typos, lists them
//! (`GET /admin/routes`), counts what they hold (`hookgate_route_retired_pending`),
//! and says whether a route of the same name that comes back goes to the same
//! destination: when it does not, its kept deliveries wait for an operator's
//! resume rather than reach a different app unasked.

use serde::{Deserialize, Serialize};

/// One route of the registry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KnownRoute {
    pub source: String,
    pub route: String,
    /// A keyed digest of the destination URL (never the URL: it may hold a
    /// password): equal for the same destination on one store.
    pub destination: String,
    /// When the route left the route table (unix ms); `None` while a table has it.
    pub retired_at: Option<i64>,
}
