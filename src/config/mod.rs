//! Configuration: what the operator writes, layered and validated once at start.
//!
//! Two stages, as in ripgrep's `LowArgs`/`HiArgs`: [`RawConfig`] is the serde model of
//! the TOML file (unknown keys are errors), merged by figment from built-in defaults,
//! then the file (`--config` or `HOOKGATE_CONFIG`), then `HOOKGATE_*` environment
//! variables with `__` for nesting (`HOOKGATE_STORE__KIND=redis`). [`Config`] is the
//! validated result: durations parsed, addresses resolved, secrets read from the
//! environment. Every error names the key that is wrong, and nothing starts until the
//! whole configuration is valid.
//!
//! The environment layer only looks at variables whose first segment is a known
//! top-level key. `HOOKGATE_CONFIG` and the secrets that `*_env` keys point at (such as
//! `HOOKGATE_ADMIN_TOKEN`) are values, not configuration keys, so they are never
//! misread as such.
//!
//! Here: the validated model, the layering, the error type and the handling of
//! secrets. [`raw`] is what the file says; `validate` checks it section by section;
//! `source` holds a source's validated form and the checks for one `[[sources]]`
//! entry, the largest section; `route` one of its routes.

mod defaults;
mod destination;
pub mod diff;
mod durations;
mod expect;
mod rate_limit;
pub mod raw;
mod reconcile;
mod reload;
mod route;
mod source;
mod validate;

use defaults::DEFAULTS;
pub use defaults::{
    DEFAULT_CONCURRENCY, DEFAULT_CONNECT_TIMEOUT, DEFAULT_DEDUPE_TTL, DEFAULT_MAX_AGE,
    DEFAULT_MAX_ATTEMPTS, DEFAULT_RETRY_BASE, DEFAULT_RETRY_CAP, DEFAULT_TIMEOUT,
};
pub use destination::{
    AmqpDestination, Credentials, Destination, DestinationKind, NO_EVENT_TYPE, NatsDestination,
    PULL, Template,
};
pub(crate) use durations::parse_duration;
pub use expect::{EXPECT_WINDOW_MAX, EXPECT_WINDOW_MIN, Expect, Expectation};
pub use rate_limit::{RateLimit, RateLimitError};
pub use raw::RawConfig;
pub use reconcile::{
    DEFAULT_RECONCILE_INTERVAL, DEFAULT_RECONCILE_LOOKBACK, GitHubAuth, GitHubHook,
    RECONCILE_PROVIDERS, ReconcileApi, ReconcileConfig, ReconcileProvider,
};
pub use reload::ReloadRefused;
pub use route::{
    DEFAULT_ROUTE, DeliveryConfig, MAX_ROUTES, OrderBy, OrderConfig, RetryConfig, RouteConfig,
    valid_route_name,
};
pub use source::{AllowIps, INDEXES_MAX, SourceConfig};

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use figment::Figment;
use figment::providers::{Env, Format, Toml};

/// The top-level keys the environment layer may set.
const TOP_LEVEL_KEYS: &[&str] = &[
    "server",
    "alerts",
    "forwarder",
    "admin",
    "store",
    "retention",
    "log",
    "providers_dir",
];

/// A configuration error. The message always names the offending key.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file or the environment does not fit the model (an unknown key, a wrong
    /// type). Figment's own message names the key and is the whole message, so it is
    /// shown rather than chained.
    #[error("{0}")]
    Figment(Box<figment::Error>),
    /// A value that fits the model but is not usable.
    #[error("{key}: {problem}")]
    Invalid { key: String, problem: String },
}

impl ConfigError {
    pub fn invalid(key: impl Into<String>, problem: impl Into<String>) -> Self {
        ConfigError::Invalid {
            key: key.into(),
            problem: problem.into(),
        }
    }
}

impl From<figment::Error> for ConfigError {
    fn from(e: figment::Error) -> Self {
        ConfigError::Figment(Box::new(redact_values(e)))
    }
}

/// Whether a key's value may be a credential: a secret, a token, a password, or a URL
/// (which may carry a password or a token).
fn secret_bearing(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    ["secret", "token", "password", "url", "destination"]
        .iter()
        .any(|s| key.contains(s))
}

/// Figment errors quote the value they could not use (`found string "whsec_…"`);
/// for a key that may hold a credential, say only what kind of value it was.
fn redact_values(e: figment::Error) -> figment::Error {
    use figment::error::{Actual, Kind};
    let redact = |a: Actual| match a {
        Actual::Str(_) => Actual::Other("a string (value not shown)".into()),
        Actual::Bytes(_) => Actual::Other("bytes (value not shown)".into()),
        Actual::Char(_)
        | Actual::Bool(_)
        | Actual::Unsigned(_)
        | Actual::Signed(_)
        | Actual::Float(_)
        | Actual::Other(_) => Actual::Other("a value (not shown)".into()),
        other => other,
    };
    let mut errors: Vec<figment::Error> = e.into_iter().collect();
    for err in &mut errors {
        if !err.path.iter().any(|k| secret_bearing(k)) {
            continue;
        }
        err.kind = match std::mem::replace(&mut err.kind, Kind::Message(String::new())) {
            Kind::InvalidType(a, exp) => Kind::InvalidType(redact(a), exp),
            Kind::InvalidValue(a, exp) => Kind::InvalidValue(redact(a), exp),
            other => other,
        };
    }
    // `into_iter` yields the newest error first; chain them back oldest first.
    let mut rest = errors.into_iter().rev();
    match rest.next() {
        Some(first) => rest.fold(first, |acc, e| acc.chain(e)),
        None => figment::Error::from("invalid configuration".to_string()),
    }
}

/// An address range as a configuration writes it: a CIDR (`192.0.2.0/24`,
/// `2001:db8::/32`) or a single address (`192.0.2.7`, as a /32 or /128). Host bits
/// set below the prefix are refused: `10.0.0.1/8` is more likely a typo than a range.
pub fn parse_cidr(key: &str, text: &str) -> Result<ipnet::IpNet, ConfigError> {
    let text = text.trim();
    if let Ok(addr) = text.parse::<std::net::IpAddr>() {
        return Ok(ipnet::IpNet::from(addr));
    }
    match text.parse::<ipnet::IpNet>() {
        Ok(net) if net.trunc() == net => Ok(net),
        Ok(net) => Err(ConfigError::invalid(
            key,
            format!(
                "{text:?} has bits set below its prefix: write {} for the range, or the address alone",
                net.trunc()
            ),
        )),
        Err(_) => Err(ConfigError::invalid(
            key,
            format!("{text:?} is not an address or a CIDR range (192.0.2.0/24, 2001:db8::/32)"),
        )),
    }
}

/// A URL with its credentials hidden, for messages and listings: the userinfo, and
/// the query string (tokens often ride there).
pub fn redact_url(url: &str) -> String {
    let url = match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => format!("{}://[redacted]@{}", &url[..s], &url[at + 1..]),
        _ => url.to_string(),
    };
    match url.split_once('?') {
        Some((base, _)) => format!("{base}?[redacted]"),
        None => url,
    }
}

/// A secret value. `Debug` and `Display` never print it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(s: impl Into<String>) -> Self {
        Secret(s.into())
    }
    /// The secret itself. Call sites are few and deliberate: key derivation and the
    /// admin token comparison.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret([redacted])")
    }
}

/// The validated configuration: what the program uses.
#[derive(Debug, Clone)]
pub struct Config {
    pub server: ServerConfig,
    pub admin: AdminConfig,
    pub store: StoreConfig,
    pub forwarder: ForwarderConfig,
    pub retention: RetentionConfig,
    pub alerts: AlertsConfig,
    pub log: LogConfig,
    pub telemetry: TelemetryConfig,
    pub providers_dir: Option<PathBuf>,
    pub sources: Vec<SourceConfig>,
    /// The executable the gateway starts as `<it> transform-worker` to run the
    /// routes' transforms; `None`: the running executable. Not a configuration
    /// key: a program that embeds the gateway (its tests) sets it.
    pub transform_worker: Option<PathBuf>,
}

impl Config {
    /// Every secret of the configuration, in configuration order: the admin token,
    /// the alerts' webhook URL, each source's secrets, verify token and
    /// reconciliation credential, each route's destination secret. (The configuration's version covers them through an
    /// HMAC; nothing else should need them all.)
    pub fn secrets(&self) -> Vec<&Secret> {
        let mut out: Vec<&Secret> = Vec::new();
        out.extend(&self.admin.token);
        out.extend(&self.alerts.webhook_url);
        for s in &self.sources {
            out.extend(&s.secrets);
            out.extend(&s.verify_token);
            for r in &s.routes {
                out.extend(&r.destination_secret);
            }
            if let Some(r) = &s.reconcile {
                out.push(r.api.credential());
            }
        }
        out
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct ServerConfig {
    pub listen: SocketAddr,
    pub max_body_bytes: usize,
    /// Bytes all request bodies in flight may hold together; beyond it, 503.
    pub body_budget_bytes: usize,
    pub header_read_timeout: Duration,
    pub body_read_timeout: Duration,
    /// Longest wait for a body's first byte once ingest reads it.
    pub body_first_byte_timeout: Duration,
    /// Bytes per second a body must keep up after its first byte; 0: no minimum.
    pub min_body_rate: u64,
    pub max_headers: usize,
    pub max_connections: usize,
    /// Most connections one client (an IPv4 address, an IPv6 prefix) may hold open;
    /// `None` (`0` in the file): no per-client cap, for a gateway behind a proxy
    /// whose connections all come from the proxy's few addresses.
    pub max_connections_per_client: Option<usize>,
    /// How many leading bits of an IPv6 address make one client (default 56: a
    /// customer network is handed a /56 or a /48, and every address in it is free
    /// to its owner, so counting per address or per /64 would cap nothing).
    pub client_ipv6_prefix: u8,
    pub shutdown_grace: Duration,
    /// The reverse proxies whose forwarding headers name the client
    /// (`crate::serve::forwarded`); empty: those headers are never read.
    pub trusted_proxies: Vec<ipnet::IpNet>,
    /// The one header the trusted proxies write to name the client; the others are
    /// never read.
    pub client_ip_header: ClientIpHeader,
    /// How often a provider's published address ranges are fetched again
    /// (`allow_ips = "provider"`).
    pub allowlist_refresh: Duration,
}

/// The one header the trusted proxies write to name the client
/// (`server.client_ip_header`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ClientIpHeader {
    /// `X-Forwarded-For: client, proxy1, …`, each proxy appending (nginx's
    /// `$proxy_add_x_forwarded_for`, HAProxy's `option forwardfor`, most load
    /// balancers).
    #[default]
    XForwardedFor,
    /// RFC 7239's `Forwarded: for=…`, each proxy appending an element.
    Forwarded,
    /// `X-Real-IP: client`, which the proxy sets (overwriting the client's).
    XRealIp,
}

impl ClientIpHeader {
    /// The header's name, as written in the configuration and on the wire.
    pub fn name(self) -> &'static str {
        match self {
            ClientIpHeader::XForwardedFor => "x-forwarded-for",
            ClientIpHeader::Forwarded => "forwarded",
            ClientIpHeader::XRealIp => "x-real-ip",
        }
    }
}

/// The `sslmode` of a PostgreSQL `store.url`, as hookgate reads it (the config
/// checks it, `store::postgres::connect` acts on it). libpq's `allow` is `prefer`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PgSslMode {
    Disable,
    Prefer,
    Require,
    VerifyFull,
}

impl PgSslMode {
    /// The mode `text` names, if hookgate supports it.
    pub fn parse(text: &str) -> Option<PgSslMode> {
        Some(match text {
            "disable" => PgSslMode::Disable,
            "prefer" | "allow" => PgSslMode::Prefer,
            "require" => PgSslMode::Require,
            "verify-full" => PgSslMode::VerifyFull,
            _ => return None,
        })
    }

    pub fn label(self) -> &'static str {
        match self {
            PgSslMode::Disable => "disable",
            PgSslMode::Prefer => "prefer",
            PgSslMode::Require => "require",
            PgSslMode::VerifyFull => "verify-full",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct AdminConfig {
    pub listen: SocketAddr,
    /// Where `/healthz`, `/readyz` and `/metrics` are also served on a listener of
    /// their own, which admin API and console traffic cannot fill.
    pub probe_listen: Option<SocketAddr>,
    /// Bounds every request on the admin (and probe) listener: its head must arrive
    /// within it, and then its body within it of the head.
    pub request_timeout: Duration,
    pub token: Option<Secret>,
    /// Most entries per second a bulk replay schedules.
    pub replay_rate: u32,
    /// The origin browsers reach the console at (`scheme://host[:port]`, as a
    /// browser's `Origin` names it), when it is not `http://` and the request's
    /// `Host` (a TLS-terminating proxy). `https` makes the session cookie
    /// `__Host-` and `Secure`.
    pub public_origin: Option<String>,
    /// Wrong tokens (bearer or console login) a client may present before it is
    /// locked out, for longer after each further one (`admin::throttle`).
    pub failed_auth_allowance: u32,
}

#[derive(Debug, Clone, PartialEq)]
pub enum StoreConfig {
    Embedded(EmbeddedConfig),
    Redis(RedisConfig),
    Postgres(PostgresConfig),
}

impl StoreConfig {
    /// `store.kind` as configured.
    pub fn kind(&self) -> &'static str {
        match self {
            StoreConfig::Embedded(_) => "embedded",
            StoreConfig::Redis(_) => "redis",
            StoreConfig::Postgres(_) => "postgres",
        }
    }

    /// How long ingest waits for the store before it answers 503 (`store.timeout`,
    /// both stores); on Redis also each command's own timeout.
    pub fn timeout(&self) -> Duration {
        match self {
            StoreConfig::Embedded(c) => c.timeout,
            StoreConfig::Redis(c) => c.timeout,
            StoreConfig::Postgres(c) => c.timeout,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct EmbeddedConfig {
    pub path: PathBuf,
    /// Most writes one group commit may carry.
    pub batch_max: usize,
    /// Below this much free space on the store's filesystem, new entries are refused
    /// (503): what is left is kept for the deliveries of the entries already
    /// acknowledged (claims, completions, the WAL and its checkpoints). 0: no floor.
    pub min_free_bytes: u64,
    /// `store.timeout`: the longest an ingest request waits for its write.
    pub timeout: Duration,
}

#[derive(Debug, Clone, PartialEq)]
pub struct RedisConfig {
    /// One URL, or the comma-separated seed nodes of a Redis Cluster.
    pub url: String,
    /// Use the cluster client even with a single seed URL.
    pub cluster: bool,
    pub prefix: String,
    /// Multiplexed connections on the ingest path (several let Redis batch fsyncs
    /// under `appendfsync always`).
    pub connections: usize,
    pub timeout: Duration,
    /// `store.min_replicas`: the replicas that must acknowledge each accept (`WAIT`)
    /// before its 2xx, and that `/readyz` wants online; 0: none, no `WAIT`.
    pub min_replicas: u32,
}

#[derive(Debug, Clone, PartialEq)]
pub struct PostgresConfig {
    /// `postgres://user[:password]@host[:port][,host2[:port2]…]/db[?…]`: several
    /// hosts with `target_session_attrs=read-write` follow the primary after a
    /// failover; `sslmode` is `disable`, `prefer`, `require` or `verify-full`.
    /// Holds a password: never logged (see `redact_url`).
    pub url: String,
    /// The PostgreSQL schema hookgate's tables live in (`store.prefix`): two
    /// deployments with different prefixes share a database.
    pub schema: String,
    /// Connections in the pool (`store.connections`).
    pub connections: usize,
    /// Most accepts one group commit may carry (`store.batch_max`).
    pub batch_max: usize,
    /// `store.timeout`: the longest a store call waits (connect, pool, query).
    pub timeout: Duration,
    /// Refuse webhooks (and answer `/readyz` 503) unless at least one synchronous
    /// standby is listed and streaming: an acknowledged webhook then survives the
    /// primary's machine.
    pub require_sync_standby: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ForwarderConfig {
    /// How long a claimed entry stays leased; a crashed worker's entries are delivered
    /// again after it. Always longer than every source's delivery timeout.
    pub lease: Duration,
    /// Longest wait between claims when idle.
    pub poll_interval: Duration,
    /// How long in-flight deliveries may run after shutdown starts.
    pub shutdown_grace: Duration,
    /// Consecutive failures that open a destination's circuit breaker.
    pub breaker_failures: u32,
    /// How long an open breaker waits before a half-open probe.
    pub breaker_cooldown: Duration,
    /// How often retention, gauges and store housekeeping run.
    pub maintenance_interval: Duration,
    /// Ingest first: while at least this many verified webhooks wait for their write
    /// at once, on average over two 100 ms windows in a row, deliveries are held to
    /// a share (`crate::pressure`); 0: never.
    pub ingest_first: usize,
    /// The address space each transform worker may use, in bytes.
    pub transform_memory_bytes: u64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct RetentionConfig {
    pub delivered: Duration,
    pub dead: Duration,
}

#[derive(Debug, Clone, PartialEq)]
pub struct AlertsConfig {
    /// A Slack-compatible incoming webhook told when entries go dead (a secret: the
    /// URL is the credential).
    pub webhook_url: Option<Secret>,
    /// One message per source per interval.
    pub interval: Duration,
}

/// How log lines are written (the telemetry leaf owns the type).
pub use crate::telemetry::LogFormat;

#[derive(Debug, Clone, PartialEq)]
pub struct LogConfig {
    pub format: LogFormat,
}

/// Where traces go (the telemetry leaf owns the type).
pub use crate::telemetry::traces::TraceSettings;

/// `[telemetry]`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TelemetryConfig {
    /// `None`: traces are off.
    pub traces: Option<TraceSettings>,
}

/// Where configuration comes from: an explicit file, the `HOOKGATE_CONFIG`
/// variable, or neither (defaults and environment only).
pub fn config_path(explicit: Option<&Path>) -> Option<PathBuf> {
    explicit
        .map(Path::to_path_buf)
        .or_else(|| std::env::var_os("HOOKGATE_CONFIG").map(PathBuf::from))
}

/// Load and validate the configuration, reading secrets from the process environment.
pub fn load(file: Option<&Path>) -> Result<Config, ConfigError> {
    load_with_env(file, &|name| std::env::var(name).ok())
}

/// Like [`load`], with the environment lookup for `*_env` keys passed in (tests).
pub fn load_with_env(
    file: Option<&Path>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Config, ConfigError> {
    let mut figment = Figment::new().merge(Toml::string(DEFAULTS));
    if let Some(path) = file {
        if !path.exists() {
            return Err(ConfigError::invalid(
                "config",
                format!("file {} does not exist", path.display()),
            ));
        }
        figment = figment.merge(Toml::file_exact(path));
    }
    figment = figment.merge(Env::prefixed("HOOKGATE_").split("__").filter(|key| {
        let key = key.as_str();
        let first = key.split(['.']).next().unwrap_or_default();
        let first = first.split("__").next().unwrap_or_default();
        // Keys are not lowercased yet at this point.
        TOP_LEVEL_KEYS.iter().any(|k| k.eq_ignore_ascii_case(first))
    }));
    let raw: RawConfig = figment.extract()?;
    validate::validate(raw, env)
}

/// Load a configuration from a TOML string (defaults underneath, no environment).
pub fn from_toml_str(
    toml_text: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Config, ConfigError> {
    let raw: RawConfig = Figment::new()
        .merge(Toml::string(DEFAULTS))
        .merge(Toml::string(toml_text))
        .extract()?;
    validate::validate(raw, env)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn defaults_alone_are_valid_and_embedded() {
        let cfg = from_toml_str("", &no_env).unwrap();
        assert!(matches!(cfg.store, StoreConfig::Embedded(_)));
        assert_eq!(cfg.server.max_body_bytes, 1_048_576);
        assert!(cfg.admin.listen.ip().is_loopback());
        assert!(cfg.sources.is_empty());
    }

    #[test]
    fn the_per_client_connection_cap_defaults_to_256_and_0_turns_it_off() {
        let cfg = from_toml_str("", &no_env).unwrap();
        assert_eq!(cfg.server.max_connections_per_client, Some(256));
        let cfg = from_toml_str("[server]\nmax_connections_per_client = 0\n", &no_env).unwrap();
        assert_eq!(cfg.server.max_connections_per_client, None);
    }

    #[test]
    fn traces_are_off_unless_an_endpoint_is_set() {
        let cfg = from_toml_str("", &no_env).unwrap();
        assert!(cfg.telemetry.traces.is_none());
        let cfg = from_toml_str(
            "[telemetry]\notlp_endpoint = \"http://collector:4318/\"\nsample_ratio = 0.25\n",
            &no_env,
        )
        .unwrap();
        let t = cfg.telemetry.traces.unwrap();
        assert_eq!(t.sample_ratio, 0.25);
        assert_eq!(t.service_name, "hookgate");
        for (bad, key) in [
            (
                "otlp_endpoint = \"collector:4318\"",
                "telemetry.otlp_endpoint",
            ),
            ("otlp_endpoint = \"ftp://c\"", "telemetry.otlp_endpoint"),
            (
                "otlp_endpoint = \"http://u:PLANTED@c:4318\"",
                "telemetry.otlp_endpoint",
            ),
            ("sample_ratio = 1.5", "telemetry.sample_ratio"),
            ("export_timeout = \"0s\"", "telemetry.export_timeout"),
        ] {
            let err = from_toml_str(&format!("[telemetry]\n{bad}\n"), &no_env).unwrap_err();
            let text = err.to_string();
            assert!(text.contains(key), "{bad}: {text}");
            assert!(!text.contains("PLANTED"), "{text}");
        }
    }

    #[test]
    fn a_transform_worker_memory_outside_its_bounds_is_refused() {
        let cfg = from_toml_str("", &no_env).unwrap();
        assert_eq!(cfg.forwarder.transform_memory_bytes, 512 << 20);
        let cfg = from_toml_str(
            "[forwarder]\ntransform_memory_bytes = 1073741824\n",
            &no_env,
        );
        assert_eq!(cfg.unwrap().forwarder.transform_memory_bytes, 1 << 30);
        for bad in [0u64, 100 << 20, 65 << 30] {
            let err = from_toml_str(
                &format!("[forwarder]\ntransform_memory_bytes = {bad}\n"),
                &no_env,
            )
            .unwrap_err();
            assert!(
                err.to_string().contains("forwarder.transform_memory_bytes"),
                "{err}"
            );
        }
    }

    #[test]
    fn unknown_key_is_named() {
        let err = from_toml_str("[server]\nlisten_addr = \"x\"\n", &no_env).unwrap_err();
        assert!(err.to_string().contains("listen_addr"), "{err}");
    }

    #[test]
    fn errors_never_echo_a_value_that_may_be_a_credential() {
        let src = |extra: &str| {
            format!(
                "[[sources]]\nname = \"s\"\nprovider = \"stripe\"\ndestination = \"http://127.0.0.1:9/\"\n{extra}\n"
            )
        };
        for (toml, planted) in [
            (src("secrets = \"whsec_PLANTED1\""), "whsec_PLANTED1"),
            (src("secret = [\"x\", 7]\nsecret_env = 7"), "7"),
            (
                src("secret = \"a\"\ndestination_secret = [\"whsec_PLANTED2\"]"),
                "PLANTED2",
            ),
            (
                "[store]\nkind = \"redis\"\nurl = \"http://u:PLANTEDPW@h/\"\n".to_string(),
                "PLANTEDPW",
            ),
        ] {
            let err = from_toml_str(&toml, &no_env).unwrap_err().to_string();
            assert!(!err.contains(planted), "{toml}: {err}");
        }
        let err = from_toml_str(
            &src("secret = \"a\"").replace("http://127.0.0.1:9/", "ftp://u:PLANTEDPW@h/"),
            &no_env,
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("destination") && !err.contains("PLANTEDPW"),
            "{err}"
        );
        // Values of other keys are still quoted: they help.
        let err = from_toml_str("[server]\nmax_headers = \"many\"\n", &no_env)
            .unwrap_err()
            .to_string();
        assert!(err.contains("many"), "{err}");
    }

    #[test]
    fn secret_debug_is_redacted() {
        let s = Secret::new("hunter2");
        assert!(!format!("{s:?}").contains("hunter2"));
    }
}
