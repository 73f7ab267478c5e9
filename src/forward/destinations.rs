//! Asking each queue destination's broker, before anything is delivered, whether
//! the destination exists and takes a publish, and what it keeps that bears on the
//! route's promises (a stream's duplicate window against the route's retries).
//!
//! `hookgate check-config --connect` prints every answer ([`check_all`]); at start
//! (and after a reload that builds a new route) the gateway logs them
//! ([`log_checks`]), without waiting for them: a broker that is down at start is
//! the retries' business, not a reason to refuse to start.

use std::sync::Arc;
use std::time::Duration;

use super::retry::RetryPolicy;
use super::route::{Route, origin};
use super::sender::{self, Check, Connections, Identity, Sender};
use crate::config::{RouteConfig, SourceConfig};

/// What one route's broker said.
#[derive(Debug, Clone)]
pub struct DestinationCheck {
    pub source: String,
    pub route: String,
    /// `scheme://host:port` of the broker (never a credential).
    pub broker: String,
    pub check: Check,
}

/// A message of `route` of `source` to check with: no event type.
fn sample(source: &str, route: &str) -> Identity {
    Identity {
        entry_id: "check".to_string(),
        source: source.to_string(),
        route: route.to_string(),
        generation: 0,
        event_type: None,
    }
}

/// The longest a retry of `route` can come after its first attempt.
fn span(route: &RouteConfig) -> Duration {
    RetryPolicy {
        max_attempts: route.retry.max_attempts,
        max_age: route.retry.max_age,
        base: route.retry.base,
        cap: route.retry.cap,
    }
    .span(route.delivery.timeout)
}

/// Check every queue destination of `sources`, one at a time, on connections of
/// their own (closed when this returns).
pub async fn check_all(sources: &[SourceConfig]) -> Vec<DestinationCheck> {
    let connections = Connections::default();
    let mut out = Vec::new();
    for s in sources {
        for r in s.routes.iter().filter(|r| r.target.kind().is_broker()) {
            let check = match sender::sender(r, &connections) {
                Ok(sender) => one(sender.as_ref(), &s.name, r).await,
                Err(e) => Check::failed(e.to_string()),
            };
            out.push(DestinationCheck {
                source: s.name.clone(),
                route: r.name.clone(),
                broker: origin(&r.destination),
                check,
            });
        }
    }
    out
}

async fn one(sender: &dyn Sender, source: &str, route: &RouteConfig) -> Check {
    sender
        .check(&sample(source, &route.name), span(route))
        .await
        .unwrap_or_else(|| Check::failed("nothing to check"))
}

/// Log what each queue destination of `routes` says, in the background: facts at
/// info, what weakens a promise and a destination not ready at warn.
pub fn log_checks(routes: &[Arc<Route>]) {
    let routes: Vec<Arc<Route>> = routes
        .iter()
        .filter(|r| r.config.target.kind().is_broker())
        .cloned()
        .collect();
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    if routes.is_empty() {
        return;
    }
    runtime.spawn(async move {
        for r in routes {
            let check = one(r.sender.as_ref(), &r.source, &r.config).await;
            let broker = origin(&r.destination);
            if check.ok {
                tracing::info!(source = %r.source, route = %r.name, broker = %broker, facts = %check.facts.join("; "), "queue destination ready");
            } else {
                tracing::warn!(source = %r.source, route = %r.name, broker = %broker, facts = %check.facts.join("; "), "queue destination not ready: its deliveries wait and retry");
            }
            for w in &check.warnings {
                tracing::warn!(source = %r.source, route = %r.name, broker = %broker, "{w}");
            }
        }
    });
}
