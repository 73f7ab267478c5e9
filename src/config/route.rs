//! One route of a source: a destination with its own delivery settings, retry
//! policy, rate limit and filter.
//!
//! A source writes either `destination = "…"` (shorthand for one route named
//! `default`, with the source's `retry` and `delivery` tables) or `[[sources.routes]]`
//! entries, whose `retry` and `delivery` keys override the source's key by key, so
//! that what every route shares is written once.

use std::time::Duration;

use super::defaults::{
    DEFAULT_CONCURRENCY, DEFAULT_CONNECT_TIMEOUT, DEFAULT_MAX_AGE, DEFAULT_MAX_ATTEMPTS,
    DEFAULT_RETRY_BASE, DEFAULT_RETRY_CAP, DEFAULT_TIMEOUT,
};
use super::destination::{self, CredentialKeys, Credentials, Destination};
use super::durations::parse_duration;
use super::raw::{RawDelivery, RawOrder, RawRetry, RawRoute};
use super::{ConfigError, RateLimit, Secret};
use crate::routing::filter::{Filter, RawFilter};
use crate::transform::TransformConfig;

impl RouteConfig {
    /// The destination as the API, the console and logs show it: an HTTP URL with
    /// its userinfo and query redacted; a queue destination as written (it holds
    /// no credential: configuration refuses one, and its query is the exchange and
    /// routing key).
    pub fn shown_destination(&self) -> String {
        if self.target.kind() != super::DestinationKind::Http {
            self.destination.clone()
        } else {
            super::redact_url(&self.destination)
        }
    }
}

impl RouteConfig {
    /// A pull route's consumer token.
    pub fn pull_token(&self) -> Option<&Secret> {
        match &self.credentials {
            Some(Credentials::PullToken(t)) => Some(t),
            _ => None,
        }
    }
}

/// The name of the one route of a source configured with `destination`, and of the
/// route every entry stored before routes existed is delivered through.
pub const DEFAULT_ROUTE: &str = "default";

/// The most routes one source may have.
pub const MAX_ROUTES: usize = 32;

/// A route name: what configuration accepts, and what stores and metrics key by.
/// Lowercase ASCII letters, digits, `-` and `_`, at most 32 bytes (no `.`, `:` or
/// `/`, which the stores use as separators).
pub fn valid_route_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 32
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
}

#[derive(Debug, Clone, PartialEq)]
pub struct RouteConfig {
    pub name: String,
    pub destination: String,
    /// What `destination` is: an HTTP URL, a NATS subject, a RabbitMQ exchange.
    pub target: Destination,
    /// A queue destination's credentials, or a pull route's consumer token.
    pub credentials: Option<Credentials>,
    pub destination_secret: Option<Secret>,
    pub retry: RetryConfig,
    pub delivery: DeliveryConfig,
    /// Which entries the route takes; the default takes every one.
    pub filter: Filter,
    /// Ordered delivery per key; `None`: deliveries go in parallel, in any order.
    pub order: Option<OrderConfig>,
    /// The jq program that shapes what the destination receives; `None`: the
    /// stored body as it came.
    pub transform: Option<TransformConfig>,
}

/// An ordered route's key and its policy for a dead head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrderConfig {
    pub by: OrderBy,
    /// `on_dead = "block"`: a dead delivery holds its key's line until an operator
    /// replays or discards it; `skip` (`false`, the default) lets the next one go.
    pub block: bool,
}

/// Where an entry's ordering key is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OrderBy {
    /// The provider's object id (`event.object` of its spec).
    Provider,
    /// A value source as provider specs write them: `json:/pointer` or `header:Name`.
    Value(String),
}

/// Check an `order` table under `key`.
pub(super) fn order(key: &str, raw: Option<RawOrder>) -> Result<Option<OrderConfig>, ConfigError> {
    let Some(raw) = raw else {
        return Ok(None);
    };
    let by = match raw.by.as_str() {
        "provider" => OrderBy::Provider,
        s if s.strip_prefix("json:").is_some_and(|p| p.starts_with('/'))
            || s.strip_prefix("header:")
                .is_some_and(|h| http::HeaderName::from_bytes(h.as_bytes()).is_ok()) =>
        {
            OrderBy::Value(s.to_string())
        }
        other => {
            return Err(ConfigError::invalid(
                format!("{key}.order.by"),
                format!(
                    "{other:?}: use json:/pointer (e.g. json:/data/object/id), header:Name, or provider"
                ),
            ));
        }
    };
    let block = match raw.on_dead.as_deref() {
        None | Some("skip") => false,
        Some("block") => true,
        Some(other) => {
            return Err(ConfigError::invalid(
                format!("{key}.order.on_dead"),
                format!("{other:?}: use \"skip\" or \"block\""),
            ));
        }
    };
    Ok(Some(OrderConfig { by, block }))
}

#[derive(Debug, Clone, PartialEq)]
pub struct RetryConfig {
    pub max_attempts: u32,
    pub max_age: Duration,
    /// Backoff ceiling of the first retry; it doubles per attempt up to `cap`.
    pub base: Duration,
    pub cap: Duration,
}

#[derive(Debug, Clone, PartialEq)]
pub struct DeliveryConfig {
    /// Total time for one attempt (connect, send, response headers and body).
    pub timeout: Duration,
    pub connect_timeout: Duration,
    /// Most attempts in flight to this route's destination.
    pub concurrency: usize,
    /// Which received headers are passed through to the destination; `*` is all
    /// (hop-by-hop and framing headers never are).
    pub pass_headers: Vec<String>,
    /// The most this route's destination takes; `None`: no limit but concurrency.
    pub rate_limit: Option<RateLimit>,
}

/// What a route inherits from its source: the source's `retry`, `delivery` and
/// `destination_secret`.
pub(super) struct Inherited<'a> {
    pub retry: &'a RawRetry,
    pub delivery: &'a RawDelivery,
    pub destination_secret: Option<&'a Secret>,
}

/// The route a source's `destination` key stands for. `key` names the source's keys
/// (`sources[0]`).
pub(super) fn default_route(
    key: &str,
    destination: String,
    destination_secret: Option<Secret>,
    credentials: CredentialKeys,
    inherited: &Inherited<'_>,
    raw_order: Option<RawOrder>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<RouteConfig, ConfigError> {
    let target = destination::parse(&format!("{key}.destination"), &destination)?;
    Ok(RouteConfig {
        name: DEFAULT_ROUTE.to_string(),
        credentials: destination::credentials(key, target.kind(), credentials, env)?,
        target,
        destination,
        destination_secret,
        retry: retry(key, inherited.retry.clone())?,
        delivery: delivery(key, inherited.delivery.clone())?,
        filter: Filter::default(),
        order: order(key, raw_order)?,
        transform: None,
    })
}

/// Validate the `[[sources.routes]]` of the source whose keys `key` names.
pub(super) fn routes(
    key: &str,
    raw: Vec<RawRoute>,
    inherited: &Inherited<'_>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<RouteConfig>, ConfigError> {
    if raw.is_empty() {
        return Err(ConfigError::invalid(
            format!("{key}.routes"),
            "a source needs at least one route",
        ));
    }
    if raw.len() > MAX_ROUTES {
        return Err(ConfigError::invalid(
            format!("{key}.routes"),
            format!("at most {MAX_ROUTES} routes per source"),
        ));
    }
    let mut out: Vec<RouteConfig> = Vec::with_capacity(raw.len());
    for (i, r) in raw.into_iter().enumerate() {
        let rkey = format!("{key}.routes[{i}]");
        if !valid_route_name(&r.name) {
            return Err(ConfigError::invalid(
                format!("{rkey}.name"),
                format!(
                    "{:?} is not a valid route name; use 1-32 characters from [a-z0-9_-]",
                    r.name
                ),
            ));
        }
        if out.iter().any(|earlier| earlier.name == r.name) {
            return Err(ConfigError::invalid(
                format!("{rkey}.name"),
                format!("duplicate route name {:?}", r.name),
            ));
        }
        let mut raw_delivery = r.delivery.unwrap_or_default();
        match (r.rate_limit, &raw_delivery.rate_limit) {
            (Some(_), Some(_)) => {
                return Err(ConfigError::invalid(
                    format!("{rkey}.rate_limit"),
                    "set rate_limit or delivery.rate_limit, not both",
                ));
            }
            (Some(l), None) => raw_delivery.rate_limit = Some(l),
            (None, _) => {}
        }
        let destination_secret =
            match secret(&rkey, r.destination_secret, r.destination_secret_env, env)? {
                Some(s) => Some(s),
                None => inherited.destination_secret.cloned(),
            };
        let filter = compile_filter(&rkey, r.filter.unwrap_or_default())?;
        let order = order(&rkey, r.order)?;
        let transform = transform(&rkey, r.transform, r.transform_output, r.transform_timeout)?;
        let target = destination::parse(&format!("{rkey}.destination"), &r.destination)?;
        let credentials = destination::credentials(
            &rkey,
            target.kind(),
            CredentialKeys {
                credentials_file: r.destination_credentials_file,
                user_env: r.destination_user_env,
                password_env: r.destination_password_env,
                token_env: r.destination_token_env,
                pull_token_env: r.pull_token_env,
            },
            env,
        )?;
        out.push(RouteConfig {
            name: r.name,
            destination: r.destination,
            target,
            credentials,
            destination_secret,
            retry: retry(&rkey, r.retry.unwrap_or_default().over(inherited.retry))?,
            delivery: delivery(&rkey, raw_delivery.over(inherited.delivery))?,
            filter,
            order,
            transform,
        });
    }
    Ok(out)
}

/// Check a route's `transform`, `transform_output` and `transform_timeout`.
fn transform(
    rkey: &str,
    program: Option<String>,
    output: Option<String>,
    timeout: Option<String>,
) -> Result<Option<TransformConfig>, ConfigError> {
    let Some(program) = program else {
        if output.is_some() || timeout.is_some() {
            return Err(ConfigError::invalid(
                format!("{rkey}.transform"),
                "transform_output and transform_timeout need a transform program",
            ));
        }
        return Ok(None);
    };
    if let Err(e) = crate::transform::program::check(&program) {
        return Err(ConfigError::invalid(
            format!("{rkey}.transform"),
            e.to_string(),
        ));
    }
    let envelope = match output.as_deref() {
        None | Some("body") => false,
        Some("envelope") => true,
        Some(other) => {
            return Err(ConfigError::invalid(
                format!("{rkey}.transform_output"),
                format!("{other:?}: use \"body\" or \"envelope\""),
            ));
        }
    };
    let timeout = opt_duration(
        rkey,
        "transform_timeout",
        timeout,
        crate::transform::DEFAULT_TIMEOUT,
    )?;
    if timeout.is_zero() || timeout > crate::transform::MAX_TIMEOUT {
        return Err(ConfigError::invalid(
            format!("{rkey}.transform_timeout"),
            format!(
                "must be more than 0 and at most {}",
                humantime::format_duration(crate::transform::MAX_TIMEOUT)
            ),
        ));
    }
    Ok(Some(TransformConfig {
        program,
        envelope,
        timeout,
    }))
}

fn compile_filter(rkey: &str, raw: RawFilter) -> Result<Filter, ConfigError> {
    let fkey = format!("{rkey}.filter");
    Filter::compile(&fkey, &raw).map_err(|e| ConfigError::invalid(e.key, e.problem))
}

/// A `destination_secret` or `destination_secret_env` (at most one of them) under
/// `key`.
pub(super) fn secret(
    key: &str,
    value: Option<String>,
    var: Option<String>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<Secret>, ConfigError> {
    match (value, var) {
        (Some(v), None) => Ok(Some(Secret::new(v))),
        (None, Some(var)) => match env(&var) {
            Some(v) if !v.is_empty() => Ok(Some(Secret::new(v))),
            _ => Err(ConfigError::invalid(
                format!("{key}.destination_secret_env"),
                format!("environment variable {var} is not set or empty"),
            )),
        },
        (None, None) => Ok(None),
        (Some(_), Some(_)) => Err(ConfigError::invalid(
            format!("{key}.destination_secret"),
            "set destination_secret or destination_secret_env, not both",
        )),
    }
}

fn opt_duration(
    key: &str,
    field: &str,
    v: Option<String>,
    default: Duration,
) -> Result<Duration, ConfigError> {
    match v {
        Some(v) => parse_duration(&format!("{key}.{field}"), &v),
        None => Ok(default),
    }
}

fn retry(key: &str, raw: RawRetry) -> Result<RetryConfig, ConfigError> {
    let retry = RetryConfig {
        max_attempts: match raw.max_attempts {
            Some(0) => {
                return Err(ConfigError::invalid(
                    format!("{key}.retry.max_attempts"),
                    "must be at least 1",
                ));
            }
            Some(n) => n,
            None => DEFAULT_MAX_ATTEMPTS,
        },
        max_age: opt_duration(key, "retry.max_age", raw.max_age, DEFAULT_MAX_AGE)?,
        base: opt_duration(key, "retry.base", raw.base, DEFAULT_RETRY_BASE)?,
        cap: opt_duration(key, "retry.cap", raw.cap, DEFAULT_RETRY_CAP)?,
    };
    if retry.base.is_zero() || retry.cap < retry.base {
        return Err(ConfigError::invalid(
            format!("{key}.retry.cap"),
            "retry.base must be greater than 0 and retry.cap at least retry.base",
        ));
    }
    Ok(retry)
}

fn delivery(key: &str, raw: RawDelivery) -> Result<DeliveryConfig, ConfigError> {
    let delivery = DeliveryConfig {
        timeout: opt_duration(key, "delivery.timeout", raw.timeout, DEFAULT_TIMEOUT)?,
        connect_timeout: opt_duration(
            key,
            "delivery.connect_timeout",
            raw.connect_timeout,
            DEFAULT_CONNECT_TIMEOUT,
        )?,
        concurrency: match raw.concurrency {
            Some(0) => {
                return Err(ConfigError::invalid(
                    format!("{key}.delivery.concurrency"),
                    "must be at least 1",
                ));
            }
            Some(n) => n.min(1024),
            None => DEFAULT_CONCURRENCY,
        },
        pass_headers: raw
            .pass_headers
            .unwrap_or_else(|| vec!["*".to_string()])
            .into_iter()
            .map(|h| h.to_ascii_lowercase())
            .collect(),
        rate_limit: match raw.rate_limit {
            Some(text) => Some(RateLimit::parse(&text).map_err(|e| {
                ConfigError::invalid(format!("{key}.delivery.rate_limit"), e.to_string())
            })?),
            None => None,
        },
    };
    if delivery.timeout.is_zero() {
        return Err(ConfigError::invalid(
            format!("{key}.delivery.timeout"),
            "must be greater than 0",
        ));
    }
    Ok(delivery)
}

#[cfg(test)]
mod tests {
    use super::super::from_toml_str;
    use super::{OrderBy, OrderConfig};

    fn no_env(_: &str) -> Option<String> {
        None
    }

    const HEAD: &str =
        "[[sources]]\nname = \"stripe\"\nprovider = \"stripe\"\nsecret = \"whsec_x\"\n";

    #[test]
    fn destination_is_one_route_named_default() {
        let cfg = from_toml_str(
            &format!("{HEAD}destination = \"http://billing:3000/\"\n[sources.delivery]\nrate_limit = \"5/s\"\n"),
            &no_env,
        )
        .unwrap();
        let routes = &cfg.sources[0].routes;
        assert_eq!(routes.len(), 1);
        assert_eq!(routes[0].name, "default");
        assert_eq!(routes[0].destination, "http://billing:3000/");
        assert!(routes[0].delivery.rate_limit.is_some());
        assert!(routes[0].filter.takes_everything());
    }

    #[test]
    fn routes_inherit_the_source_settings_key_by_key() {
        let text = format!(
            r#"{HEAD}
[sources.retry]
max_attempts = 7
[sources.delivery]
timeout = "3s"
concurrency = 4

[[sources.routes]]
name = "billing"
destination = "http://billing:3000/webhooks/stripe"

[[sources.routes]]
name = "analytics"
destination = "http://analytics:8000/ingest"
rate_limit = "20/s"
retry.max_attempts = 2
delivery.concurrency = 2
filter.event_types = ["invoice.*", "customer.subscription.*"]
filter.match = [{{ pointer = "/data/object/livemode", equals = true }}]
"#
        );
        let cfg = from_toml_str(&text, &no_env).unwrap();
        let r = &cfg.sources[0].routes;
        assert_eq!(
            r.iter().map(|r| r.name.as_str()).collect::<Vec<_>>(),
            ["billing", "analytics"]
        );
        assert_eq!(r[0].retry.max_attempts, 7);
        assert_eq!(r[0].delivery.concurrency, 4);
        assert!(r[0].delivery.rate_limit.is_none());
        assert!(r[0].filter.takes_everything());
        assert_eq!(r[1].retry.max_attempts, 2);
        assert_eq!(r[1].delivery.concurrency, 2);
        assert_eq!(r[1].delivery.timeout, std::time::Duration::from_secs(3));
        assert!(r[1].delivery.rate_limit.is_some());
        assert!(!r[1].filter.takes_everything());
    }

    #[test]
    fn order_takes_a_value_source_or_the_provider_and_a_policy() {
        let text = format!(
            r#"{HEAD}
[[sources.routes]]
name = "a"
destination = "http://a/"
order = {{ by = "json:/data/object/id" }}
[[sources.routes]]
name = "b"
destination = "http://b/"
order = {{ by = "header:X-Shopify-Product-Id", on_dead = "block" }}
[[sources.routes]]
name = "c"
destination = "http://c/"
order = {{ by = "provider", on_dead = "skip" }}
[[sources.routes]]
name = "d"
destination = "http://d/"
"#
        );
        let cfg = from_toml_str(&text, &no_env).unwrap();
        let orders: Vec<Option<OrderConfig>> = cfg.sources[0]
            .routes
            .iter()
            .map(|r| r.order.clone())
            .collect();
        assert_eq!(
            orders,
            [
                Some(OrderConfig {
                    by: OrderBy::Value("json:/data/object/id".into()),
                    block: false
                }),
                Some(OrderConfig {
                    by: OrderBy::Value("header:X-Shopify-Product-Id".into()),
                    block: true
                }),
                Some(OrderConfig {
                    by: OrderBy::Provider,
                    block: false
                }),
                None,
            ]
        );
    }

    #[test]
    fn route_mistakes_name_their_key() {
        let cases = [
            (
                format!(
                    "{HEAD}destination = \"http://a/\"\n[[sources.routes]]\nname = \"b\"\ndestination = \"http://b/\"\n"
                ),
                "sources[0].destination",
            ),
            (HEAD.to_string(), "sources[0].destination"),
            (
                format!(
                    "{HEAD}[[sources.routes]]\nname = \"Bad.Name\"\ndestination = \"http://b/\"\n"
                ),
                "sources[0].routes[0].name",
            ),
            (
                format!(
                    "{HEAD}[[sources.routes]]\nname = \"a\"\ndestination = \"http://a/\"\n[[sources.routes]]\nname = \"a\"\ndestination = \"http://b/\"\n"
                ),
                "sources[0].routes[1].name",
            ),
            (
                format!("{HEAD}[[sources.routes]]\nname = \"a\"\ndestination = \"ftp://a/\"\n"),
                "sources[0].routes[0].destination",
            ),
            (
                format!(
                    "{HEAD}[[sources.routes]]\nname = \"a\"\ndestination = \"http://a/\"\nrate_limit = \"fast\"\n"
                ),
                "sources[0].routes[0].delivery.rate_limit",
            ),
            (
                format!(
                    "{HEAD}[[sources.routes]]\nname = \"a\"\ndestination = \"http://a/\"\nrate_limit = \"1/s\"\ndelivery.rate_limit = \"2/s\"\n"
                ),
                "sources[0].routes[0].rate_limit",
            ),
            (
                format!(
                    "{HEAD}[[sources.routes]]\nname = \"a\"\ndestination = \"http://a/\"\nfilter.match = [{{ pointer = \"nope\", equals = 1 }}]\n"
                ),
                "sources[0].routes[0].filter",
            ),
            (
                format!(
                    "{HEAD}[[sources.routes]]\nname = \"a\"\ndestination = \"http://a/\"\nfilter.colour = \"red\"\n"
                ),
                "colour",
            ),
            (
                format!(
                    "{HEAD}[[sources.routes]]\nname = \"a\"\ndestination = \"http://a/\"\norder.by = \"data.object.id\"\n"
                ),
                "sources[0].routes[0].order.by",
            ),
            (
                format!(
                    "{HEAD}[[sources.routes]]\nname = \"a\"\ndestination = \"http://a/\"\norder = {{ by = \"provider\", on_dead = \"wait\" }}\n"
                ),
                "sources[0].routes[0].order.on_dead",
            ),
            (
                format!(
                    "{HEAD}[sources.order]\nby = \"provider\"\n[[sources.routes]]\nname = \"a\"\ndestination = \"http://a/\"\n"
                ),
                "sources[0].order",
            ),
        ];
        for (text, key) in cases {
            let err = from_toml_str(&text, &no_env).unwrap_err().to_string();
            assert!(err.contains(key), "expected {key} in: {err}\n{text}");
        }
    }

    #[test]
    fn a_route_password_never_shows_in_errors() {
        let text = format!(
            "{HEAD}[[sources.routes]]\nname = \"a\"\ndestination = \"ftp://u:S3cretPW@a/\"\n"
        );
        let err = from_toml_str(&text, &no_env).unwrap_err().to_string();
        assert!(!err.contains("S3cretPW"), "{err}");
    }
}
