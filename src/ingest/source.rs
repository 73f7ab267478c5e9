//! A configured source as ingest holds it in the route table: its verifier and
//! secrets, the headers it keeps, its routes' filters and ordering keys, its request
//! limit, allowlist and body share; and how an entry's routes and ordering keys are
//! taken from a verified request.

use std::sync::Arc;
use std::time::Duration;

use super::{SourceMetrics, body, hook_secret, limit};
use crate::config::{OrderBy, OrderConfig};
use crate::header_policy::HeaderPolicy;
use crate::provider::Verifier;
use crate::provider::spec::{Spec, ValueTemplate, parse_value_template};
use crate::routing::filter::{Filter, Subject};
use crate::store::MAX_ORDER_KEY;

/// A configured source, ready to verify requests.
#[derive(Debug, Clone)]
pub struct Source {
    pub name: String,
    pub verifier: Verifier,
    pub dedupe_ttl: Duration,
    /// The URL the provider calls, for providers that sign it.
    pub public_url: Option<String>,
    /// Which received headers are stored (credentials only when named).
    pub headers: HeaderPolicy,
    /// The source's routes, in configuration order, with their filters.
    pub routes: Vec<RouteFilter>,
    /// The part of the body budget this source's requests may hold.
    pub body_share: body::SourceShare,
    pub metrics: SourceMetrics,
    /// Keep the bodies (their first bytes) of refused requests in the rejection log.
    pub keep_rejected_bodies: bool,
    /// Indexed JSON pointers of the body, (name, pointer): their values are stored
    /// with each entry (`store::search`).
    pub index: Vec<(String, String)>,
    /// `[sources.limits] requests`: over it, 429 before the body is read.
    pub request_limit: Option<Arc<limit::RequestLimit>>,
    /// `allow_ips`: from any other address, 403 before the body is read.
    pub allowlist: Option<crate::allowlist::Allowlist>,
    /// The token of the provider's endpoint check (Meta's `hub.verify_token`).
    pub verify_token: Option<crate::config::Secret>,
    /// AWS SNS (`confirm_subscriptions`): visit a verified confirmation's
    /// `SubscribeURL` before storing it (`subscription`).
    pub confirm_subscriptions: bool,
    /// A provider whose secret arrives in a handshake (`hook-secret`): the keys,
    /// configured and established (`hook_secret`).
    pub established: Option<Arc<hook_secret::Established>>,
}

/// A route as ingest sees it: its name, which entries it takes, and where an
/// ordered route finds an entry's ordering key.
#[derive(Debug, Clone)]
pub struct RouteFilter {
    pub name: String,
    pub filter: Filter,
    pub order: Option<RouteOrdering>,
}

/// Where an ordered route finds an entry's key (alternatives, tried in order), and
/// its policy for a dead head.
#[derive(Debug, Clone)]
pub struct RouteOrdering {
    pub by: Vec<ValueTemplate>,
    pub block: bool,
}

/// Why an `order.by` cannot be used with a source's provider.
#[derive(Debug, thiserror::Error)]
pub enum OrderingError {
    #[error("{0}")]
    Template(String),
    #[error(
        "provider {0:?} names no object id (event.object in its spec); order by json:/pointer or header:Name"
    )]
    NoProviderObject(String),
}

impl RouteOrdering {
    /// The ordering of a route of a source whose provider is `spec` (`provider` by
    /// name, for the error).
    pub fn new(
        cfg: &OrderConfig,
        spec: &Spec,
        provider: &str,
    ) -> Result<RouteOrdering, OrderingError> {
        let by = match &cfg.by {
            OrderBy::Provider if spec.event_object.is_empty() => {
                return Err(OrderingError::NoProviderObject(provider.to_string()));
            }
            OrderBy::Provider => spec.event_object.clone(),
            OrderBy::Value(text) => {
                vec![parse_value_template(text).map_err(OrderingError::Template)?]
            }
        };
        Ok(RouteOrdering {
            by,
            block: cfg.block,
        })
    }
}

/// An ordering key as stored: as found, or its SHA-256 when longer than
/// [`MAX_ORDER_KEY`] (a webhook decides how long it is).
pub(super) fn order_key(found: String) -> String {
    if found.len() > MAX_ORDER_KEY {
        use sha2::Digest as _;
        format!(
            "sha256:{}",
            hex::encode(sha2::Sha256::digest(found.as_bytes()))
        )
    } else {
        found
    }
}

/// The routes whose filters take this entry, in configuration order. Runs once per
/// entry, after verification; a filter that takes everything costs nothing.
pub(super) fn matching_routes(routes: &[RouteFilter], subject: &Subject<'_>) -> Vec<String> {
    routes
        .iter()
        .filter(|r| r.filter.takes_everything() || r.filter.matches(subject))
        .map(|r| r.name.clone())
        .collect()
}
