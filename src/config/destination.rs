//! Where a route delivers, as a type: an HTTP(S) URL, a NATS JetStream subject
//! (`nats://` or `tls://`), a RabbitMQ exchange (`amqp://` or `amqps://`), or
//! `pull` (consumers take the deliveries under `/pull/`), and the credentials a
//! route names by reference: a broker's, or the token a pull route's consumers
//! present (`pull_token_env`).
//!
//! A queue destination's URL never holds a credential (it is shown by the API and
//! the console, and logged): `destination_user_env` / `destination_password_env`,
//! `destination_token_env` (NATS) or `destination_credentials_file` (a NATS creds
//! file) name where they are. The subject (NATS) and the routing key (RabbitMQ) may
//! hold `{source}`, `{route}` and `{event_type}`; each value is escaped into one
//! subject token ([`Template`]), so that no event type can add a token, a wildcard
//! or a separator.

use std::path::PathBuf;

use super::{ConfigError, Secret, redact_url};

/// What kind of destination a route delivers to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DestinationKind {
    Http,
    Nats,
    Amqp,
    /// Nothing is sent: consumers pull the deliveries.
    Pull,
}

impl DestinationKind {
    /// Its name in metrics, the API and the console: `http`, `nats`, `amqp`, `pull`.
    pub fn as_str(self) -> &'static str {
        match self {
            DestinationKind::Http => "http",
            DestinationKind::Nats => "nats",
            DestinationKind::Amqp => "amqp",
            DestinationKind::Pull => "pull",
        }
    }

    /// Whether it is a broker (the queue destinations).
    pub fn is_broker(self) -> bool {
        matches!(self, DestinationKind::Nats | DestinationKind::Amqp)
    }
}

/// A route's destination, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Destination {
    /// An absolute http:// or https:// URL (the route's `destination`).
    Http,
    Nats(NatsDestination),
    Amqp(AmqpDestination),
    /// `destination = "pull"`: the deliveries wait for consumers (`/pull/`).
    Pull,
}

/// The `destination` of a pull route.
pub const PULL: &str = "pull";

impl Destination {
    pub fn kind(&self) -> DestinationKind {
        match self {
            Destination::Http => DestinationKind::Http,
            Destination::Nats(_) => DestinationKind::Nats,
            Destination::Amqp(_) => DestinationKind::Amqp,
            Destination::Pull => DestinationKind::Pull,
        }
    }

    /// The subject or routing key template, for a queue destination.
    pub fn template(&self) -> Option<&Template> {
        match self {
            Destination::Http | Destination::Pull => None,
            Destination::Nats(n) => Some(&n.subject),
            Destination::Amqp(a) => Some(&a.routing_key),
        }
    }
}

/// `nats://host:4222[,host2:4222…]/<subject>` (`tls://` for TLS).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NatsDestination {
    /// Each server as `nats://host:port` (or `tls://host:port`).
    pub servers: Vec<String>,
    pub tls: bool,
    pub subject: Template,
}

/// `amqp://host:5672/<vhost>?exchange=…&routing_key=…` (`amqps://` for TLS).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AmqpDestination {
    pub tls: bool,
    pub host: String,
    pub port: u16,
    /// The virtual host, decoded (`/` when the URL names none).
    pub vhost: String,
    /// The exchange (`""`: the default exchange, which routes by queue name).
    pub exchange: String,
    pub routing_key: Template,
}

/// The credentials a queue destination is reached with, read when the
/// configuration is loaded (a creds file: when connecting).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Credentials {
    /// A NATS credentials file (a user JWT and its NKey seed).
    CredsFile(PathBuf),
    UserPassword {
        user: Secret,
        password: Secret,
    },
    /// A NATS token.
    Token(Secret),
    /// The token a pull route's consumers present (`pull_token_env`).
    PullToken(Secret),
}

/// The `destination_*` keys that name a route's broker credentials.
#[derive(Debug, Default, Clone)]
pub struct CredentialKeys {
    pub credentials_file: Option<String>,
    pub user_env: Option<String>,
    pub password_env: Option<String>,
    pub token_env: Option<String>,
    /// `pull_token_env`: a pull route's consumer token.
    pub pull_token_env: Option<String>,
}

impl CredentialKeys {
    fn any(&self) -> bool {
        self.credentials_file.is_some()
            || self.user_env.is_some()
            || self.password_env.is_some()
            || self.token_env.is_some()
    }
}

/// A subject or routing key with placeholders.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    parts: Vec<Part>,
    text: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Text(String),
    Source,
    Route,
    EventType,
}

/// What an entry without an event type puts in place of `{event_type}`.
pub const NO_EVENT_TYPE: &str = "_";

impl Template {
    /// Parse `text`: literal parts and `{source}`, `{route}`, `{event_type}`.
    pub fn parse(text: &str) -> Result<Template, String> {
        let mut parts = Vec::new();
        let mut rest = text;
        while let Some(open) = rest.find('{') {
            if open > 0 {
                parts.push(Part::Text(rest[..open].to_string()));
            }
            let Some(close) = rest[open..].find('}') else {
                return Err(format!("{text:?} has a {{ that is not closed"));
            };
            parts.push(match &rest[open + 1..open + close] {
                "source" => Part::Source,
                "route" => Part::Route,
                "event_type" => Part::EventType,
                other => {
                    return Err(format!(
                        "{{{other}}} is no placeholder; use {{source}}, {{route}} or {{event_type}}"
                    ));
                }
            });
            rest = &rest[open + close + 1..];
        }
        if !rest.is_empty() {
            parts.push(Part::Text(rest.to_string()));
        }
        let t = Template {
            parts,
            text: text.to_string(),
        };
        // Every token of a subject rendered from it must be well formed.
        let sample = t.render("s", "r", Some("e"));
        if sample.is_empty() || sample.len() > 255 {
            return Err(format!(
                "{text:?} must make a subject of 1 to 255 characters"
            ));
        }
        for token in sample.split('.') {
            if token.is_empty() {
                return Err(format!(
                    "{text:?} has an empty token (two dots, or a dot at an end)"
                ));
            }
            if token == "*" || token == ">" {
                return Err(format!(
                    "{text:?} has a wildcard; a publish names one subject"
                ));
            }
            if let Some(c) = token.chars().find(|c| !c.is_ascii_graphic()) {
                return Err(format!(
                    "{text:?} holds {c:?}; use printable ASCII without spaces"
                ));
            }
        }
        Ok(t)
    }

    /// The template as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether it reads the event type.
    pub fn reads_event_type(&self) -> bool {
        self.parts.contains(&Part::EventType)
    }

    /// Whether it has no placeholder (one subject for every message).
    pub fn is_fixed(&self) -> bool {
        self.parts.iter().all(|p| matches!(p, Part::Text(_)))
    }

    /// The subject of one message: each value escaped into one token.
    pub fn render(&self, source: &str, route: &str, event_type: Option<&str>) -> String {
        let mut out = String::with_capacity(self.text.len() + 16);
        for p in &self.parts {
            match p {
                Part::Text(t) => out.push_str(t),
                Part::Source => escape_token(source, &mut out),
                Part::Route => escape_token(route, &mut out),
                Part::EventType => match event_type {
                    Some(e) if !e.is_empty() => escape_token(e, &mut out),
                    _ => out.push_str(NO_EVENT_TYPE),
                },
            }
        }
        out
    }

    /// The subjects one route of one source can make, as a stream's subject filter
    /// reads them: `{event_type}` as a one-token wildcard (`*`).
    pub fn filter(&self, source: &str, route: &str) -> String {
        let mut out = String::new();
        for p in &self.parts {
            match p {
                Part::Text(t) => out.push_str(t),
                Part::Source => escape_token(source, &mut out),
                Part::Route => escape_token(route, &mut out),
                Part::EventType => out.push('*'),
            }
        }
        out
    }
}

/// Append `value` as (part of) one subject token: ASCII letters, digits, `-` and `_`
/// as they are, every other byte as `%XX`, so that a `.`, a space, `*` or `>` can
/// never split the subject or widen it.
fn escape_token(value: &str, out: &mut String) {
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || b == b'-' || b == b'_' {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
}

/// Check `url` (under `key`) as a destination of any kind.
pub(super) fn parse(key: &str, url: &str) -> Result<Destination, ConfigError> {
    if url == PULL {
        return Ok(Destination::Pull);
    }
    let scheme = url.split_once("://").map(|(s, _)| s);
    match scheme {
        Some("nats") | Some("tls") => nats(key, url).map(Destination::Nats),
        Some("amqp") | Some("amqps") => amqp(key, url).map(Destination::Amqp),
        _ => http(key, url).map(|()| Destination::Http),
    }
}

/// An absolute http(s) URL with a host. Errors never show a password written in it.
fn http(key: &str, url: &str) -> Result<(), ConfigError> {
    let uri: http::Uri = url.parse().map_err(|_| {
        ConfigError::invalid(key, format!("{:?} is not a valid URL", redact_url(url)))
    })?;
    match uri.scheme_str() {
        Some("http") | Some("https") if uri.host().is_some() => Ok(()),
        _ => Err(ConfigError::invalid(
            key,
            format!(
                "{:?} must be an absolute http://, https://, nats://, tls://, amqp:// or amqps:// URL",
                redact_url(url)
            ),
        )),
    }
}

/// Refuse a credential written in a queue destination's URL.
fn no_userinfo(key: &str, url: &str, authority: &str) -> Result<(), ConfigError> {
    if authority.contains('@') {
        return Err(ConfigError::invalid(
            key,
            format!(
                "{:?} holds credentials; name them with destination_user_env and destination_password_env (or destination_token_env, destination_credentials_file) instead",
                redact_url(url)
            ),
        ));
    }
    Ok(())
}

/// A `host[:port]` under `scheme` (a bracketed IPv6 address allowed), with the
/// scheme's default port.
fn host_port(scheme: &str, hp: &str, default_port: u16) -> Option<(String, u16)> {
    if hp.is_empty() || hp.contains(['/', '?', '#', '@']) {
        return None;
    }
    let u = reqwest::Url::parse(&format!("{scheme}://{hp}")).ok()?;
    let host = u.host_str().filter(|h| !h.is_empty())?.to_string();
    Some((host, u.port().unwrap_or(default_port)))
}

/// `nats://host:4222[,host:4222…]/<subject>` or `tls://…`.
fn nats(key: &str, url: &str) -> Result<NatsDestination, ConfigError> {
    let bad = |why: &str| ConfigError::invalid(key, format!("{:?}: {why}", redact_url(url)));
    let (scheme, rest) = url.split_once("://").ok_or_else(|| bad("not a URL"))?;
    let (authority, subject) = rest
        .split_once('/')
        .ok_or_else(|| bad("name the subject: nats://host:4222/<subject>"))?;
    no_userinfo(key, url, authority)?;
    if subject.contains(['?', '#']) {
        return Err(bad(
            "a NATS destination takes no query; its subject follows the host",
        ));
    }
    let servers = authority
        .split(',')
        .map(|hp| {
            host_port(scheme, hp.trim(), 4222)
                .map(|(h, p)| format!("{scheme}://{h}:{p}"))
                .ok_or_else(|| bad("each server is host or host:port, separated by commas"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let subject = Template::parse(subject).map_err(|e| bad(&e))?;
    Ok(NatsDestination {
        servers,
        tls: scheme == "tls",
        subject,
    })
}

/// `amqp://host:5672/<vhost>?exchange=…&routing_key=…` or `amqps://…`.
fn amqp(key: &str, url: &str) -> Result<AmqpDestination, ConfigError> {
    let bad = |why: &str| ConfigError::invalid(key, format!("{:?}: {why}", redact_url(url)));
    let (scheme, rest) = url.split_once("://").ok_or_else(|| bad("not a URL"))?;
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    no_userinfo(key, url, authority)?;
    let tls = scheme == "amqps";
    let (host, port) = host_port(scheme, authority, if tls { 5671 } else { 5672 })
        .ok_or_else(|| bad("the broker is host or host:port"))?;
    let u = reqwest::Url::parse(url).map_err(|_| bad("not a valid URL"))?;
    if u.fragment().is_some() {
        return Err(bad("a fragment (#) means nothing here"));
    }
    let path = u.path().strip_prefix('/').unwrap_or(u.path());
    if path.contains('/') {
        return Err(bad(
            "the path is the virtual host, one segment (write / as %2F)",
        ));
    }
    let vhost = match percent_encoding::percent_decode_str(path).decode_utf8() {
        Ok(v) if v.is_empty() => "/".to_string(),
        Ok(v) => v.into_owned(),
        Err(_) => return Err(bad("the virtual host is not UTF-8")),
    };
    let mut exchange = None;
    let mut routing_key = None;
    for (k, v) in u.query_pairs() {
        match k.as_ref() {
            "exchange" if exchange.is_none() => exchange = Some(v.into_owned()),
            "routing_key" if routing_key.is_none() => routing_key = Some(v.into_owned()),
            other => {
                return Err(bad(&format!(
                    "the query takes exchange and routing_key, once each, not {other:?}"
                )));
            }
        }
    }
    let exchange = exchange.unwrap_or_default();
    if exchange.len() > 255 || exchange.contains(|c: char| c.is_control()) {
        return Err(bad(
            "the exchange is at most 255 bytes, without control characters",
        ));
    }
    let routing_key = match routing_key {
        Some(k) => Template::parse(&k).map_err(|e| bad(&format!("routing_key {e}")))?,
        None if exchange.is_empty() => {
            return Err(bad(
                "name an exchange (exchange=…) or, for the default exchange, the queue (routing_key=…)",
            ));
        }
        // (A fanout or headers exchange routes without a key.)
        None => Template {
            parts: Vec::new(),
            text: String::new(),
        },
    };
    Ok(AmqpDestination {
        tls,
        host,
        port,
        vhost,
        exchange,
        routing_key,
    })
}

/// The credentials `keys` name for a destination of `kind` (under `key`, the
/// route's keys). `env` reads the environment.
pub(super) fn credentials(
    key: &str,
    kind: DestinationKind,
    keys: CredentialKeys,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<Credentials>, ConfigError> {
    match (&keys.pull_token_env, kind) {
        (Some(var), DestinationKind::Pull) if !keys.any() => {
            return match env(var) {
                Some(v) if v.len() >= 16 => Ok(Some(Credentials::PullToken(Secret::new(v)))),
                Some(v) if !v.is_empty() => Err(ConfigError::invalid(
                    format!("{key}.pull_token_env"),
                    format!("the token in {var} is shorter than 16 characters"),
                )),
                _ => Err(ConfigError::invalid(
                    format!("{key}.pull_token_env"),
                    format!("environment variable {var} is not set or empty"),
                )),
            };
        }
        (None, DestinationKind::Pull) => {
            return Err(ConfigError::invalid(
                format!("{key}.pull_token_env"),
                "a pull route needs pull_token_env: the environment variable holding its consumers' token",
            ));
        }
        (Some(_), DestinationKind::Pull) => {
            return Err(ConfigError::invalid(
                format!("{key}.destination_user_env"),
                "a pull route takes pull_token_env only: nothing is sent to a broker",
            ));
        }
        (Some(_), _) => {
            return Err(ConfigError::invalid(
                format!("{key}.pull_token_env"),
                "pull_token_env is for routes with destination = \"pull\"",
            ));
        }
        (None, _) => {}
    }
    if !keys.any() {
        return Ok(None);
    }
    if !kind.is_broker() {
        return Err(ConfigError::invalid(
            format!("{key}.destination_user_env"),
            "broker credentials are for nats://, tls://, amqp:// and amqps:// destinations; an HTTP destination is signed with destination_secret",
        ));
    }
    let read = |field: &str, var: &str| match env(var) {
        Some(v) if !v.is_empty() => Ok(Secret::new(v)),
        _ => Err(ConfigError::invalid(
            format!("{key}.{field}"),
            format!("environment variable {var} is not set or empty"),
        )),
    };
    match keys {
        CredentialKeys {
            credentials_file: Some(path),
            user_env: None,
            password_env: None,
            token_env: None,
            ..
        } if kind == DestinationKind::Nats => Ok(Some(Credentials::CredsFile(PathBuf::from(path)))),
        CredentialKeys {
            credentials_file: None,
            user_env: None,
            password_env: None,
            token_env: Some(var),
            ..
        } if kind == DestinationKind::Nats => Ok(Some(Credentials::Token(read(
            "destination_token_env",
            &var,
        )?))),
        CredentialKeys {
            credentials_file: None,
            user_env: Some(user),
            password_env: Some(password),
            token_env: None,
            ..
        } => Ok(Some(Credentials::UserPassword {
            user: read("destination_user_env", &user)?,
            password: read("destination_password_env", &password)?,
        })),
        _ if kind == DestinationKind::Amqp => Err(ConfigError::invalid(
            format!("{key}.destination_user_env"),
            "a RabbitMQ destination takes destination_user_env with destination_password_env",
        )),
        _ => Err(ConfigError::invalid(
            format!("{key}.destination_credentials_file"),
            "name one of: destination_credentials_file, destination_token_env, or destination_user_env with destination_password_env",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dest(url: &str) -> Result<Destination, String> {
        parse("r", url).map_err(|e| e.to_string())
    }

    #[test]
    fn each_scheme_is_its_kind() {
        assert_eq!(dest("http://a:1/x").unwrap(), Destination::Http);
        assert_eq!(dest("https://a/x").unwrap().kind(), DestinationKind::Http);
        let Destination::Nats(n) = dest("nats://a:4222, b ,[::1]:4333/webhooks.{source}").unwrap()
        else {
            panic!()
        };
        assert_eq!(
            n.servers,
            ["nats://a:4222", "nats://b:4222", "nats://[::1]:4333"]
        );
        assert!(!n.tls);
        assert_eq!(n.subject.render("stripe", "r", None), "webhooks.stripe");
        let Destination::Nats(n) = dest("tls://nats.internal/x").unwrap() else {
            panic!()
        };
        assert!(n.tls);
        assert_eq!(n.servers, ["tls://nats.internal:4222"]);
        let Destination::Amqp(a) =
            dest("amqps://mq:5000/prod%2Fa?exchange=hooks&routing_key={source}.{event_type}")
                .unwrap()
        else {
            panic!()
        };
        assert_eq!(
            (a.host.as_str(), a.port, a.vhost.as_str()),
            ("mq", 5000, "prod/a")
        );
        assert!(a.tls);
        assert_eq!(a.exchange, "hooks");
        assert_eq!(a.routing_key.render("gh", "r", Some("push")), "gh.push");
        let Destination::Amqp(a) = dest("amqp://mq?routing_key=jobs").unwrap() else {
            panic!()
        };
        assert_eq!(
            (a.port, a.vhost.as_str(), a.exchange.as_str()),
            (5672, "/", "")
        );
    }

    #[test]
    fn malformed_queue_destinations_are_refused_without_their_credentials() {
        for (url, says) in [
            ("nats://u:S3cretPW@a:4222/x", "destination_user_env"),
            ("nats://a:4222", "name the subject"),
            ("nats://a:4222/", "1 to 255"),
            ("nats://a:4222/a..b", "empty token"),
            ("nats://a:4222/a.*", "wildcard"),
            ("nats://a:4222/a.>", "wildcard"),
            ("nats://a:4222/a b", "printable"),
            ("nats://a:4222/{nope}", "no placeholder"),
            ("nats://a:4222/{source", "not closed"),
            ("nats://a:x/s", "host:port"),
            ("nats://,/s", "host:port"),
            ("nats://a/s?x=1", "no query"),
            (
                "amqp://guest:S3cretPW@mq/?exchange=x",
                "destination_user_env",
            ),
            ("amqp://mq/", "name an exchange"),
            ("amqp://mq/a/b?exchange=x", "one segment"),
            ("amqp://mq/?exchange=x&durable=1", "durable"),
            ("amqp://mq/?exchange=x&routing_key=a..b", "empty token"),
            ("ftp://a/x", "absolute"),
            ("http://", "URL"),
        ] {
            let e = dest(url).unwrap_err();
            assert!(e.contains(says), "{url}: {e}");
            assert!(!e.contains("S3cretPW"), "{e}");
        }
    }

    #[test]
    fn a_value_is_one_token_whatever_it_holds() {
        let t = Template::parse("webhooks.{source}.{event_type}").unwrap();
        assert!(t.reads_event_type() && !t.is_fixed());
        assert_eq!(t.filter("shop", "r"), "webhooks.shop.*");
        assert_eq!(
            t.render("stripe", "r", Some("invoice.paid")),
            "webhooks.stripe.invoice%2Epaid"
        );
        assert_eq!(
            t.render("s", "r", Some("a b>*%\u{e9}")),
            "webhooks.s.a%20b%3E%2A%25%C3%A9"
        );
        assert_eq!(t.render("s", "r", Some("")), "webhooks.s._");
        assert_eq!(t.render("s", "r", None), "webhooks.s._");
        let fixed = Template::parse("orders").unwrap();
        assert!(fixed.is_fixed() && !fixed.reads_event_type());
        assert_eq!(fixed.render("a", "b", Some("c")), "orders");
        assert_eq!(
            Template::parse("x-{route}")
                .unwrap()
                .render("a", "audit", None),
            "x-audit"
        );
    }

    #[test]
    fn credentials_go_by_reference_and_by_kind() {
        let env = |v: &str| match v {
            "U" => Some("hook".to_string()),
            "P" => Some("S3cretPW".to_string()),
            "T" => Some("tok".to_string()),
            _ => None,
        };
        let keys =
            |f: Option<&str>, u: Option<&str>, p: Option<&str>, t: Option<&str>| CredentialKeys {
                credentials_file: f.map(str::to_string),
                user_env: u.map(str::to_string),
                password_env: p.map(str::to_string),
                token_env: t.map(str::to_string),
                pull_token_env: None,
            };
        let nats = DestinationKind::Nats;
        let amqp = DestinationKind::Amqp;
        assert_eq!(
            credentials("r", nats, keys(None, None, None, None), &env).unwrap(),
            None
        );
        assert_eq!(
            credentials("r", nats, keys(Some("/x.creds"), None, None, None), &env).unwrap(),
            Some(Credentials::CredsFile("/x.creds".into()))
        );
        assert_eq!(
            credentials("r", nats, keys(None, None, None, Some("T")), &env).unwrap(),
            Some(Credentials::Token(Secret::new("tok")))
        );
        assert_eq!(
            credentials("r", amqp, keys(None, Some("U"), Some("P"), None), &env).unwrap(),
            Some(Credentials::UserPassword {
                user: Secret::new("hook"),
                password: Secret::new("S3cretPW")
            })
        );
        for (kind, k, says) in [
            (
                amqp,
                keys(None, None, None, Some("T")),
                "destination_password_env",
            ),
            (
                amqp,
                keys(Some("/x"), None, None, None),
                "destination_password_env",
            ),
            (nats, keys(None, Some("U"), None, None), "one of"),
            (nats, keys(Some("/x"), None, None, Some("T")), "one of"),
            (
                nats,
                keys(None, Some("U"), Some("NOPE"), None),
                "NOPE is not set",
            ),
            (
                DestinationKind::Http,
                keys(None, Some("U"), Some("P"), None),
                "destination_secret",
            ),
        ] {
            let e = credentials("r", kind, k, &env).unwrap_err().to_string();
            assert!(e.contains(says), "{e}");
            assert!(!e.contains("S3cretPW"));
        }
    }

    #[test]
    fn a_pull_route_takes_its_consumer_token_and_only_it() {
        assert_eq!(dest("pull").unwrap(), Destination::Pull);
        let env = |v: &str| match v {
            "LONG" => Some("0123456789abcdef-consumer".to_string()),
            "SHORT" => Some("short".to_string()),
            _ => None,
        };
        let pull = |var: Option<&str>| CredentialKeys {
            pull_token_env: var.map(str::to_string),
            ..CredentialKeys::default()
        };
        assert_eq!(
            credentials("r", DestinationKind::Pull, pull(Some("LONG")), &env).unwrap(),
            Some(Credentials::PullToken(Secret::new(
                "0123456789abcdef-consumer"
            )))
        );
        for (kind, keys, says) in [
            (DestinationKind::Pull, pull(None), "needs pull_token_env"),
            (
                DestinationKind::Pull,
                pull(Some("SHORT")),
                "shorter than 16",
            ),
            (DestinationKind::Pull, pull(Some("NOPE")), "NOPE is not set"),
            (
                DestinationKind::Http,
                pull(Some("LONG")),
                "destination = \"pull\"",
            ),
            (
                DestinationKind::Pull,
                CredentialKeys {
                    token_env: Some("LONG".into()),
                    ..pull(Some("LONG"))
                },
                "pull_token_env only",
            ),
        ] {
            let e = credentials("r", kind, keys, &env).unwrap_err().to_string();
            assert!(e.contains(says), "{e}");
            assert!(!e.contains("0123456789abcdef"), "{e}");
        }
    }
}
