//! Where each source's entries go: its routes (each a destination and its sender,
//! retry policy, headers, signing key and rate limit), and what routes sharing a
//! destination share (one breaker, one concurrency limit per destination origin,
//! `scheme://host:port`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;

use super::Plan;
use super::breaker::Breaker;
use super::meters::RouteMeters;
use super::pace::Pace;
use super::request;
use super::retry::RetryPolicy;
use super::sender::{self, Connections, Sender, SenderError};
use crate::config::ForwarderConfig;
use crate::header_policy::HeaderPolicy;
use crate::transform::Transforms;

/// Where and how the entries of one source are delivered through one of its routes.
pub struct Route {
    pub source: String,
    /// The route's name (`default` for a source configured with `destination`).
    pub name: String,
    pub destination: String,
    /// What sends to `destination` (chosen by its scheme).
    pub sender: Arc<dyn Sender>,
    pub signing_key: Option<Vec<u8>>,
    pub policy: RetryPolicy,
    /// How long one send may take: the sender holds to it, and a claim's lease
    /// leaves room for it.
    pub timeout: Duration,
    pub concurrency: usize,
    /// Which stored headers go to the destination.
    pub headers: HeaderPolicy,
    /// Whether the provider's signature covers the whole body; when it does not,
    /// deliveries say so (`hookgate-body-signed: false`).
    pub body_signed: bool,
    /// Whether the signature covers the event type; when it does not, deliveries say
    /// so (`hookgate-event-type-signed: false`).
    pub event_type_signed: bool,
    /// Attempts in flight to the destination origin, shared by every source that
    /// delivers there.
    pub permits: Arc<Semaphore>,
    /// Shared by every source with the same destination origin.
    pub breaker: Arc<Breaker>,
    /// The route's rate limit and how it adapts, when it has one. The send slots
    /// themselves are the store's, so that every process keeps one pace.
    pub pace: Option<std::sync::Mutex<Pace>>,
    /// The gateway's transforms, when this route has one.
    pub transforms: Option<Arc<Transforms>>,
    /// Its metric handles.
    pub(super) meters: RouteMeters,
    /// The configuration it was built from: a reload that leaves it (and the
    /// facts below) as it was keeps this route.
    pub config: crate::config::RouteConfig,
    /// Its source's provider facts.
    pub facts: ProviderFacts,
}

/// Why the routes could not be built.
#[derive(Debug, thiserror::Error)]
#[error("route {source_name}/{route}")]
pub struct RouteError {
    source_name: String,
    route: String,
    #[source]
    cause: SenderError,
}

/// The key of a destination's breaker, and how logs and metrics name a destination:
/// `scheme://host:port` only. A `user:password@` in the URL never leaves the route.
pub fn origin(url: &str) -> String {
    if url == crate::config::PULL {
        return url.to_string();
    }
    // A NATS destination may list several servers: the first names it.
    let first;
    let url = match url.split_once("://") {
        Some((scheme, rest)) if rest.split('/').next().is_some_and(|a| a.contains(',')) => {
            let authority = rest.split('/').next().unwrap_or("");
            let server = authority.split(',').next().unwrap_or("").trim();
            first = format!("{scheme}://{server}");
            first.as_str()
        }
        _ => url,
    };
    match url.parse::<http::Uri>() {
        Ok(u) => {
            let host = u.host().unwrap_or("");
            // A broker's default port is named, so that the breaker and the broker's
            // connection gauge name one broker alike.
            let default = match u.scheme_str() {
                Some("nats" | "tls") => Some(4222),
                Some("amqp") => Some(5672),
                Some("amqps") => Some(5671),
                _ => None,
            };
            match u.port_u16().or(default) {
                Some(port) => format!("{}://{host}:{port}", u.scheme_str().unwrap_or("http")),
                None => format!("{}://{host}", u.scheme_str().unwrap_or("http")),
            }
        }
        // Not a URL (config validation refuses those): name nothing of it.
        Err(_) => "invalid-url".to_string(),
    }
}

/// What the forwarder needs to know of a source's provider. (A source the facts do
/// not name: its provider signs the whole body and the event type, and has no
/// credential headers.)
#[derive(Debug, Clone, PartialEq)]
pub struct ProviderFacts {
    /// The provider's credential headers: never passed on unless a route names them.
    pub credential_headers: Vec<http::HeaderName>,
    pub body_signed: bool,
    /// Whether the signature covers the event type, whichever alternative yields it.
    pub event_type_signed: bool,
}

impl Default for ProviderFacts {
    fn default() -> ProviderFacts {
        ProviderFacts {
            credential_headers: Vec::new(),
            body_signed: true,
            event_type_signed: true,
        }
    }
}

/// Build the routes of every source. Routes delivering to the same destination
/// origin share one breaker and one concurrency limit (the smallest configured).
/// `facts` gives each source's provider facts (by source name).
/// `transforms` runs the routes' transforms.
///
/// With the routes of the table in force (`previous`, at a reload), what has not
/// changed is kept: a route whose configuration, provider facts, breaker, limit and
/// transforms are as before is the same [`Route`] (its loop goes on undisturbed), a
/// destination keeps its breaker (an open breaker stays open) and its slots when
/// its limit is unchanged, and the senders the connections they share
/// (`connections`, carried from one table to the next).
pub fn routes(
    sources: &[crate::config::SourceConfig],
    cfg: &ForwarderConfig,
    facts: &HashMap<String, ProviderFacts>,
    transforms: &Arc<Transforms>,
    connections: &Connections,
    previous: Option<&Plan>,
) -> Result<Vec<Arc<Route>>, RouteError> {
    let all = || {
        sources
            .iter()
            .flat_map(|s| s.routes.iter().map(move |r| (s, r)))
    };
    let mut limits: HashMap<String, usize> = HashMap::new();
    for (_, r) in all() {
        let l = limits
            .entry(origin(&r.destination))
            .or_insert(r.delivery.concurrency);
        *l = (*l).min(r.delivery.concurrency);
    }
    let before: Vec<&Arc<Route>> = previous
        .map(|p| p.routes.iter().collect())
        .unwrap_or_default();
    let same_breaker = previous.is_some_and(|p| {
        p.cfg.breaker_failures == cfg.breaker_failures
            && p.cfg.breaker_cooldown == cfg.breaker_cooldown
    });
    let mut shared: HashMap<String, (Arc<Breaker>, Arc<Semaphore>)> = HashMap::new();
    all()
        .map(|(s, r)| {
            let key = origin(&r.destination);
            let limit = limits.get(&key).copied().unwrap_or(r.delivery.concurrency);
            let (breaker, permits) = shared
                .entry(key.clone())
                .or_insert_with(|| {
                    let old = before.iter().find(|o| origin(&o.destination) == key);
                    let breaker = match old {
                        Some(o) if same_breaker => o.breaker.clone(),
                        _ => Arc::new(Breaker::new(cfg.breaker_failures, cfg.breaker_cooldown)),
                    };
                    let permits = match old {
                        Some(o) if o.concurrency == limit => o.permits.clone(),
                        _ => Arc::new(Semaphore::new(limit)),
                    };
                    (breaker, permits)
                })
                .clone();
            let source_facts = facts.get(&s.name).cloned().unwrap_or_default();
            let program = transforms.has(&s.name, &r.name).then(|| transforms.clone());
            if let Some(old) = before
                .iter()
                .find(|o| o.source == s.name && o.name == r.name)
                && old.config == *r
                && old.facts == source_facts
                && Arc::ptr_eq(&old.breaker, &breaker)
                && Arc::ptr_eq(&old.permits, &permits)
                && match (&old.transforms, &program) {
                    (None, None) => true,
                    (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                    _ => false,
                }
            {
                return Ok(Arc::clone(old));
            }
            let sender = sender::sender(r, connections).map_err(|cause| RouteError {
                source_name: s.name.clone(),
                route: r.name.clone(),
                cause,
            })?;
            Ok(Arc::new(Route {
                meters: RouteMeters::new(&s.name, &r.name, origin(&r.destination)),
                source: s.name.clone(),
                name: r.name.clone(),
                destination: r.destination.clone(),
                sender,
                signing_key: r
                    .destination_secret
                    .as_ref()
                    .map(|k| request::decode_destination_secret(k.expose())),
                policy: RetryPolicy {
                    max_attempts: r.retry.max_attempts,
                    max_age: r.retry.max_age,
                    base: r.retry.base,
                    cap: r.retry.cap,
                },
                timeout: r.delivery.timeout,
                concurrency: limit,
                headers: HeaderPolicy::new(
                    &r.delivery.pass_headers,
                    &source_facts.credential_headers,
                ),
                body_signed: source_facts.body_signed,
                event_type_signed: source_facts.event_type_signed,
                permits,
                breaker,
                pace: r
                    .delivery
                    .rate_limit
                    .map(|l| std::sync::Mutex::new(Pace::new(l))),
                transforms: program,
                config: r.clone(),
                facts: source_facts,
            }))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn https_destinations_have_a_tls_provider() {
        // A refused HTTPS connection is an ordinary connect error, not a panic for
        // want of a crypto provider.
        let c = sender::http::client(Duration::from_secs(1)).unwrap();
        let err = c.post("https://127.0.0.1:1/").send().await.unwrap_err();
        assert!(err.is_connect(), "{err}");
    }

    #[test]
    fn origin_keys_scheme_host_and_port() {
        assert_eq!(origin("http://a.example:8080/x?y"), "http://a.example:8080");
        assert_eq!(origin("https://a.example/x"), "https://a.example");
        assert_eq!(
            origin("http://user:S3cretPW@a.example:81/x"),
            "http://a.example:81"
        );
        assert_eq!(origin("http://[::1]:81/x"), "http://[::1]:81");
        assert_eq!(origin("nats://a:4222,b:4222/x.y"), "nats://a:4222");
        assert_eq!(origin("tls://a/x"), "tls://a:4222");
        assert_eq!(origin("amqps://mq/?exchange=x"), "amqps://mq:5671");
        assert_eq!(
            origin("amqp://mq:5672/v?exchange=e&routing_key=k"),
            "amqp://mq:5672"
        );
    }
}
