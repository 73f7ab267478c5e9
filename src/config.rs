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

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use figment::Figment;
use figment::providers::{Env, Format, Toml};
use serde::Deserialize;

/// The defaults every layer starts from. `deploy/hookgate.example.toml` spells out
/// the same values with comments.
const DEFAULTS: &str = r#"
[server]
listen = "0.0.0.0:8080"
max_body_bytes = 1048576
body_budget_bytes = 67108864
header_read_timeout = "10s"
body_read_timeout = "30s"
max_headers = 100
max_connections = 4096
shutdown_grace = "10s"

[admin]
listen = "127.0.0.1:8081"
token_env = "HOOKGATE_ADMIN_TOKEN"
replay_rate = 50

[store]
kind = "embedded"
path = "./hookgate-data"
url = "redis://127.0.0.1:6379"
prefix = "hg"
cluster = false
connections = 4
timeout = "5s"
batch_max = 256

[forwarder]
lease = "60s"
poll_interval = "1s"
shutdown_grace = "10s"
breaker_failures = 5
breaker_cooldown = "30s"
maintenance_interval = "10s"

[retention]
delivered = "7d"
dead = "30d"

[alerts]
interval = "60s"

[log]
format = "human"
"#;

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
    #[error("{0}")]
    Figment(Box<figment::Error>),
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

// ---------------------------------------------------------------------------
// Raw model: what the file says.
// ---------------------------------------------------------------------------

/// One string or a list of strings (`secret_env = "A"` or `secret_env = ["A", "B"]`).
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

impl OneOrMany {
    fn into_vec(self) -> Vec<String> {
        match self {
            OneOrMany::One(s) => vec![s],
            OneOrMany::Many(v) => v,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    pub server: RawServer,
    pub admin: RawAdmin,
    pub store: RawStore,
    pub forwarder: RawForwarder,
    pub retention: RawRetention,
    pub alerts: RawAlerts,
    pub log: RawLog,
    #[serde(default)]
    pub providers_dir: Option<PathBuf>,
    #[serde(default)]
    pub sources: Vec<RawSource>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawServer {
    pub listen: String,
    pub max_body_bytes: u64,
    pub body_budget_bytes: u64,
    pub header_read_timeout: String,
    pub body_read_timeout: String,
    pub max_headers: usize,
    pub max_connections: usize,
    pub shutdown_grace: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAdmin {
    pub listen: String,
    #[serde(default)]
    pub token_env: Option<String>,
    pub replay_rate: u32,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawStore {
    pub kind: String,
    pub path: PathBuf,
    pub url: String,
    pub prefix: String,
    pub cluster: bool,
    pub connections: usize,
    pub timeout: String,
    pub batch_max: usize,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawForwarder {
    pub lease: String,
    pub poll_interval: String,
    pub shutdown_grace: String,
    pub breaker_failures: u32,
    pub breaker_cooldown: String,
    pub maintenance_interval: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRetention {
    pub delivered: String,
    pub dead: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAlerts {
    #[serde(default)]
    pub webhook_url: Option<String>,
    #[serde(default)]
    pub webhook_url_env: Option<String>,
    pub interval: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLog {
    pub format: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSource {
    pub name: String,
    pub provider: String,
    #[serde(default)]
    pub secret: Option<String>,
    #[serde(default)]
    pub secrets: Option<Vec<String>>,
    #[serde(default)]
    pub secret_env: Option<OneOrMany>,
    #[serde(default)]
    pub destination: Option<String>,
    /// The URL the provider is configured to call, for providers that sign it
    /// (Twilio, Square, HubSpot): scheme, host and path, without query.
    #[serde(default)]
    pub public_url: Option<String>,
    #[serde(default)]
    pub destination_secret: Option<String>,
    #[serde(default)]
    pub destination_secret_env: Option<String>,
    #[serde(default)]
    pub dedupe_ttl: Option<String>,
    /// Overrides deep-merged into the provider spec before it is compiled, e.g.
    /// `[sources.provider_options.signature] header = "X-Sig"` for the generic `hmac`
    /// provider, or `[sources.provider_options.timestamp] tolerance = "10m"`.
    #[serde(default)]
    pub provider_options: Option<toml::Table>,
    #[serde(default)]
    pub retry: Option<RawRetry>,
    #[serde(default)]
    pub delivery: Option<RawDelivery>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawDelivery {
    #[serde(default)]
    pub timeout: Option<String>,
    #[serde(default)]
    pub connect_timeout: Option<String>,
    #[serde(default)]
    pub concurrency: Option<usize>,
    #[serde(default)]
    pub pass_headers: Option<Vec<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRetry {
    #[serde(default)]
    pub max_attempts: Option<u32>,
    #[serde(default)]
    pub max_age: Option<String>,
    #[serde(default)]
    pub base: Option<String>,
    #[serde(default)]
    pub cap: Option<String>,
}

// ---------------------------------------------------------------------------
// Validated model: what the program uses.
// ---------------------------------------------------------------------------

#[derive(Debug, Clone)]
pub struct Config {
    pub server: ServerConfig,
    pub admin: AdminConfig,
    pub store: StoreConfig,
    pub forwarder: ForwarderConfig,
    pub retention: RetentionConfig,
    pub alerts: AlertsConfig,
    pub log: LogConfig,
    pub providers_dir: Option<PathBuf>,
    pub sources: Vec<SourceConfig>,
}

#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub listen: SocketAddr,
    pub max_body_bytes: usize,
    /// Bytes all request bodies in flight may hold together; beyond it, 503.
    pub body_budget_bytes: usize,
    pub header_read_timeout: Duration,
    pub body_read_timeout: Duration,
    pub max_headers: usize,
    pub max_connections: usize,
    pub shutdown_grace: Duration,
}

#[derive(Debug, Clone)]
pub struct AdminConfig {
    pub listen: SocketAddr,
    pub token: Option<Secret>,
    /// Most entries per second a bulk replay schedules.
    pub replay_rate: u32,
}

#[derive(Debug, Clone)]
pub enum StoreConfig {
    Embedded(EmbeddedConfig),
    Redis(RedisConfig),
}

#[derive(Debug, Clone)]
pub struct EmbeddedConfig {
    pub path: PathBuf,
    /// Most writes one group commit may carry.
    pub batch_max: usize,
}

#[derive(Debug, Clone)]
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
}

#[derive(Debug, Clone)]
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
}

#[derive(Debug, Clone)]
pub struct RetentionConfig {
    pub delivered: Duration,
    pub dead: Duration,
}

#[derive(Debug, Clone)]
pub struct AlertsConfig {
    /// A Slack-compatible incoming webhook told when entries go dead (a secret: the
    /// URL is the credential).
    pub webhook_url: Option<Secret>,
    /// One message per source per interval.
    pub interval: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Human,
    Json,
}

#[derive(Debug, Clone)]
pub struct LogConfig {
    pub format: LogFormat,
}

#[derive(Debug, Clone)]
pub struct SourceConfig {
    pub name: String,
    pub provider: String,
    /// Every secret that verifies (several during a rotation). Never empty.
    pub secrets: Vec<Secret>,
    pub destination: String,
    /// The URL the provider calls (absolute http(s), no query or fragment), for
    /// providers whose signature covers it.
    pub public_url: Option<String>,
    pub destination_secret: Option<Secret>,
    pub dedupe_ttl: Duration,
    pub provider_options: Option<toml::Table>,
    pub retry: RetryConfig,
    pub delivery: DeliveryConfig,
}

#[derive(Debug, Clone)]
pub struct RetryConfig {
    pub max_attempts: u32,
    pub max_age: Duration,
    /// Backoff ceiling of the first retry; it doubles per attempt up to `cap`.
    pub base: Duration,
    pub cap: Duration,
}

#[derive(Debug, Clone)]
pub struct DeliveryConfig {
    /// Total time for one attempt (connect, send, response headers and body).
    pub timeout: Duration,
    pub connect_timeout: Duration,
    /// Most attempts in flight to this source's destination.
    pub concurrency: usize,
    /// Which received headers are passed through to the destination; `*` is all
    /// (hop-by-hop and framing headers never are).
    pub pass_headers: Vec<String>,
}

pub const DEFAULT_DEDUPE_TTL: Duration = Duration::from_secs(7 * 24 * 3600);
pub const DEFAULT_MAX_ATTEMPTS: u32 = 12;
pub const DEFAULT_MAX_AGE: Duration = Duration::from_secs(24 * 3600);
pub const DEFAULT_RETRY_BASE: Duration = Duration::from_secs(60);
pub const DEFAULT_RETRY_CAP: Duration = Duration::from_secs(12 * 3600);
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
pub const DEFAULT_CONCURRENCY: usize = 16;

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
    validate(raw, env)
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
    validate(raw, env)
}

pub fn parse_duration(key: &str, value: &str) -> Result<Duration, ConfigError> {
    humantime::parse_duration(value.trim()).map_err(|e| {
        ConfigError::invalid(
            key,
            format!("invalid duration {value:?} ({e}); use e.g. \"30s\", \"5m\", \"24h\", \"7d\""),
        )
    })
}

fn parse_addr(key: &str, value: &str) -> Result<SocketAddr, ConfigError> {
    value.parse().map_err(|_| {
        ConfigError::invalid(
            key,
            format!("invalid listen address {value:?}; use e.g. \"0.0.0.0:8080\""),
        )
    })
}

fn validate(raw: RawConfig, env: &dyn Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
    let server = ServerConfig {
        listen: parse_addr("server.listen", &raw.server.listen)?,
        max_body_bytes: match raw.server.max_body_bytes {
            0 => {
                return Err(ConfigError::invalid(
                    "server.max_body_bytes",
                    "must be greater than 0",
                ));
            }
            n => usize::try_from(n).map_err(|_| {
                ConfigError::invalid("server.max_body_bytes", "too large for this platform")
            })?,
        },
        body_budget_bytes: usize::try_from(raw.server.body_budget_bytes).map_err(|_| {
            ConfigError::invalid("server.body_budget_bytes", "too large for this platform")
        })?,
        header_read_timeout: parse_duration(
            "server.header_read_timeout",
            &raw.server.header_read_timeout,
        )?,
        body_read_timeout: parse_duration(
            "server.body_read_timeout",
            &raw.server.body_read_timeout,
        )?,
        max_headers: raw.server.max_headers,
        max_connections: raw.server.max_connections.max(1),
        shutdown_grace: parse_duration("server.shutdown_grace", &raw.server.shutdown_grace)?,
    };
    if server.body_budget_bytes < server.max_body_bytes {
        return Err(ConfigError::invalid(
            "server.body_budget_bytes",
            format!(
                "{} is smaller than server.max_body_bytes ({}); a body of the largest size could never be read",
                server.body_budget_bytes, server.max_body_bytes
            ),
        ));
    }
    if server.body_budget_bytes > u32::MAX as usize {
        return Err(ConfigError::invalid(
            "server.body_budget_bytes",
            "must be at most 4294967295 (4 GiB)",
        ));
    }
    if server.max_headers == 0 {
        return Err(ConfigError::invalid(
            "server.max_headers",
            "must be greater than 0",
        ));
    }

    let admin_listen = parse_addr("admin.listen", &raw.admin.listen)?;
    let token = match raw.admin.token_env.as_deref() {
        Some(var) if !var.is_empty() => env(var).filter(|t| !t.is_empty()).map(Secret::new),
        _ => None,
    };
    if token.is_none() && !admin_listen.ip().is_loopback() {
        return Err(ConfigError::invalid(
            "admin.listen",
            format!(
                "{admin_listen} is not a loopback address and no admin token is set; \
                 set the variable named by admin.token_env ({}) or bind 127.0.0.1",
                raw.admin.token_env.as_deref().unwrap_or("unset")
            ),
        ));
    }
    if raw.admin.replay_rate == 0 {
        return Err(ConfigError::invalid(
            "admin.replay_rate",
            "must be at least 1 entry per second",
        ));
    }
    let admin = AdminConfig {
        listen: admin_listen,
        token,
        replay_rate: raw.admin.replay_rate,
    };

    let store = match raw.store.kind.as_str() {
        "embedded" => StoreConfig::Embedded(EmbeddedConfig {
            path: raw.store.path.clone(),
            batch_max: raw.store.batch_max.clamp(1, 4096),
        }),
        "redis" => {
            if !(raw.store.url.starts_with("redis://")
                || raw.store.url.starts_with("rediss://")
                || raw.store.url.starts_with("redis+unix://")
                || raw.store.url.starts_with("unix://"))
            {
                return Err(ConfigError::invalid(
                    "store.url",
                    format!(
                        "{:?} is not a redis URL; use redis://host:port",
                        redact_url(&raw.store.url)
                    ),
                ));
            }
            if raw.store.prefix.is_empty() || raw.store.prefix.contains(['{', '}']) {
                return Err(ConfigError::invalid(
                    "store.prefix",
                    "must be non-empty and must not contain '{' or '}'",
                ));
            }
            StoreConfig::Redis(RedisConfig {
                url: raw.store.url.clone(),
                cluster: raw.store.cluster,
                prefix: raw.store.prefix.clone(),
                connections: raw.store.connections.clamp(1, 64),
                timeout: parse_duration("store.timeout", &raw.store.timeout)?,
            })
        }
        other => {
            return Err(ConfigError::invalid(
                "store.kind",
                format!("unknown store kind {other:?}; use \"embedded\" or \"redis\""),
            ));
        }
    };

    let forwarder = ForwarderConfig {
        lease: parse_duration("forwarder.lease", &raw.forwarder.lease)?,
        poll_interval: parse_duration("forwarder.poll_interval", &raw.forwarder.poll_interval)?,
        shutdown_grace: parse_duration("forwarder.shutdown_grace", &raw.forwarder.shutdown_grace)?,
        breaker_failures: raw.forwarder.breaker_failures.max(1),
        breaker_cooldown: parse_duration(
            "forwarder.breaker_cooldown",
            &raw.forwarder.breaker_cooldown,
        )?,
        maintenance_interval: parse_duration(
            "forwarder.maintenance_interval",
            &raw.forwarder.maintenance_interval,
        )?,
    };
    if forwarder.poll_interval.is_zero() || forwarder.maintenance_interval.is_zero() {
        return Err(ConfigError::invalid(
            "forwarder.poll_interval",
            "poll_interval and maintenance_interval must be greater than 0",
        ));
    }

    let retention = RetentionConfig {
        delivered: parse_duration("retention.delivered", &raw.retention.delivered)?,
        dead: parse_duration("retention.dead", &raw.retention.dead)?,
    };

    let alerts_url = match (raw.alerts.webhook_url, raw.alerts.webhook_url_env) {
        (Some(u), None) => Some(u),
        (None, Some(var)) => match env(&var) {
            Some(v) if !v.is_empty() => Some(v),
            _ => {
                return Err(ConfigError::invalid(
                    "alerts.webhook_url_env",
                    format!("environment variable {var} is not set or empty"),
                ));
            }
        },
        (None, None) => None,
        (Some(_), Some(_)) => {
            return Err(ConfigError::invalid(
                "alerts.webhook_url",
                "set webhook_url or webhook_url_env, not both",
            ));
        }
    };
    if let Some(u) = &alerts_url
        && !(u.starts_with("http://") || u.starts_with("https://"))
    {
        return Err(ConfigError::invalid(
            "alerts.webhook_url",
            "must be an http:// or https:// URL",
        ));
    }
    let alerts = AlertsConfig {
        webhook_url: alerts_url.map(Secret::new),
        interval: parse_duration("alerts.interval", &raw.alerts.interval)?,
    };
    if alerts.interval.is_zero() {
        return Err(ConfigError::invalid(
            "alerts.interval",
            "must be greater than 0",
        ));
    }

    let log = LogConfig {
        format: match raw.log.format.as_str() {
            "human" => LogFormat::Human,
            "json" => LogFormat::Json,
            other => {
                return Err(ConfigError::invalid(
                    "log.format",
                    format!("unknown log format {other:?}; use \"human\" or \"json\""),
                ));
            }
        },
    };

    let mut sources = Vec::with_capacity(raw.sources.len());
    for (i, s) in raw.sources.into_iter().enumerate() {
        let source = validate_source(i, s, env)?;
        if sources.iter().any(|o: &SourceConfig| o.name == source.name) {
            return Err(ConfigError::invalid(
                format!("sources[{i}].name"),
                format!("duplicate source name {:?}", source.name),
            ));
        }
        if forwarder.lease <= source.delivery.timeout {
            return Err(ConfigError::invalid(
                "forwarder.lease",
                format!(
                    "the lease ({}) must be longer than sources[{i}].delivery.timeout ({}, source {:?}): \
                     a claimed entry starts at once and its attempt may last that long",
                    humantime::format_duration(forwarder.lease),
                    humantime::format_duration(source.delivery.timeout),
                    source.name
                ),
            ));
        }
        sources.push(source);
    }

    Ok(Config {
        server,
        admin,
        store,
        forwarder,
        retention,
        alerts,
        log,
        providers_dir: raw.providers_dir,
        sources,
    })
}

/// A source name is a URL path segment and part of store keys.
fn valid_source_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
}

fn validate_source(
    i: usize,
    s: RawSource,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<SourceConfig, ConfigError> {
    let key = |field: &str| format!("sources[{i}].{field}");
    if !valid_source_name(&s.name) {
        return Err(ConfigError::invalid(
            key("name"),
            format!(
                "{:?} is not a valid source name; use 1-64 characters from [A-Za-z0-9._-]",
                s.name
            ),
        ));
    }
    let mut secrets = Vec::new();
    if let Some(v) = s.secret {
        secrets.push(Secret::new(v));
    }
    for v in s.secrets.unwrap_or_default() {
        secrets.push(Secret::new(v));
    }
    for var in s.secret_env.map(OneOrMany::into_vec).unwrap_or_default() {
        match env(&var) {
            Some(v) if !v.is_empty() => secrets.push(Secret::new(v)),
            _ => {
                return Err(ConfigError::invalid(
                    key("secret_env"),
                    format!("environment variable {var} is not set or empty"),
                ));
            }
        }
    }
    if secrets.iter().any(|s| s.expose().is_empty()) {
        return Err(ConfigError::invalid(key("secrets"), "a secret is empty"));
    }
    if secrets.is_empty() {
        return Err(ConfigError::invalid(
            key("secret"),
            format!(
                "source {:?} has no secret; set secret, secrets or secret_env",
                s.name
            ),
        ));
    }
    let destination = match s.destination {
        Some(d) => {
            let uri: http::Uri = d.parse().map_err(|_| {
                ConfigError::invalid(
                    key("destination"),
                    format!("{:?} is not a valid URL", redact_url(&d)),
                )
            })?;
            match uri.scheme_str() {
                Some("http") | Some("https") if uri.host().is_some() => d,
                _ => {
                    return Err(ConfigError::invalid(
                        key("destination"),
                        format!(
                            "{:?} must be an absolute http:// or https:// URL",
                            redact_url(&d)
                        ),
                    ));
                }
            }
        }
        None => {
            return Err(ConfigError::invalid(
                key("destination"),
                format!("source {:?} has no destination URL", s.name),
            ));
        }
    };
    let public_url = match s.public_url {
        None => None,
        Some(u) => {
            let valid = u.parse::<http::Uri>().is_ok_and(|uri| {
                matches!(uri.scheme_str(), Some("http") | Some("https"))
                    && uri.host().is_some_and(|h| !h.is_empty())
            });
            if !valid {
                return Err(ConfigError::invalid(
                    key("public_url"),
                    format!(
                        "{:?} must be an absolute http:// or https:// URL",
                        redact_url(&u)
                    ),
                ));
            }
            if u.contains(['?', '#']) {
                return Err(ConfigError::invalid(
                    key("public_url"),
                    format!(
                        "{:?} has a query or fragment; give the URL without them (the query of each request is added to it)",
                        redact_url(&u)
                    ),
                ));
            }
            Some(u)
        }
    };
    let destination_secret = match (s.destination_secret, s.destination_secret_env) {
        (Some(v), None) => Some(Secret::new(v)),
        (None, Some(var)) => match env(&var) {
            Some(v) if !v.is_empty() => Some(Secret::new(v)),
            _ => {
                return Err(ConfigError::invalid(
                    key("destination_secret_env"),
                    format!("environment variable {var} is not set or empty"),
                ));
            }
        },
        (None, None) => None,
        (Some(_), Some(_)) => {
            return Err(ConfigError::invalid(
                key("destination_secret"),
                "set destination_secret or destination_secret_env, not both",
            ));
        }
    };
    let dedupe_ttl = match s.dedupe_ttl {
        Some(v) => parse_duration(&key("dedupe_ttl"), &v)?,
        None => DEFAULT_DEDUPE_TTL,
    };
    if dedupe_ttl < Duration::from_secs(1) {
        return Err(ConfigError::invalid(
            key("dedupe_ttl"),
            "must be at least 1s",
        ));
    }
    let r = s.retry.unwrap_or(RawRetry {
        max_attempts: None,
        max_age: None,
        base: None,
        cap: None,
    });
    let opt_duration = |field: &str, v: Option<String>, default: Duration| match v {
        Some(v) => parse_duration(&key(field), &v),
        None => Ok(default),
    };
    let retry = RetryConfig {
        max_attempts: match r.max_attempts {
            Some(0) => {
                return Err(ConfigError::invalid(
                    key("retry.max_attempts"),
                    "must be at least 1",
                ));
            }
            Some(n) => n,
            None => DEFAULT_MAX_ATTEMPTS,
        },
        max_age: opt_duration("retry.max_age", r.max_age, DEFAULT_MAX_AGE)?,
        base: opt_duration("retry.base", r.base, DEFAULT_RETRY_BASE)?,
        cap: opt_duration("retry.cap", r.cap, DEFAULT_RETRY_CAP)?,
    };
    if retry.base.is_zero() || retry.cap < retry.base {
        return Err(ConfigError::invalid(
            key("retry.cap"),
            "retry.base must be greater than 0 and retry.cap at least retry.base",
        ));
    }
    let d = s.delivery.unwrap_or_default();
    let delivery = DeliveryConfig {
        timeout: opt_duration("delivery.timeout", d.timeout, DEFAULT_TIMEOUT)?,
        connect_timeout: opt_duration(
            "delivery.connect_timeout",
            d.connect_timeout,
            DEFAULT_CONNECT_TIMEOUT,
        )?,
        concurrency: match d.concurrency {
            Some(0) => {
                return Err(ConfigError::invalid(
                    key("delivery.concurrency"),
                    "must be at least 1",
                ));
            }
            Some(n) => n.min(1024),
            None => DEFAULT_CONCURRENCY,
        },
        pass_headers: d
            .pass_headers
            .unwrap_or_else(|| vec!["*".to_string()])
            .into_iter()
            .map(|h| h.to_ascii_lowercase())
            .collect(),
    };
    if delivery.timeout.is_zero() {
        return Err(ConfigError::invalid(
            key("delivery.timeout"),
            "must be greater than 0",
        ));
    }
    Ok(SourceConfig {
        name: s.name,
        provider: s.provider,
        secrets,
        destination,
        public_url,
        destination_secret,
        dedupe_ttl,
        provider_options: s.provider_options,
        retry,
        delivery,
    })
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
    fn bad_duration_names_the_key() {
        let err = from_toml_str("[retention]\ndead = \"forever\"\n", &no_env).unwrap_err();
        assert!(err.to_string().starts_with("retention.dead:"), "{err}");
    }

    #[test]
    fn secrets_from_value_list_and_env() {
        let text = r#"
[[sources]]
name = "s"
provider = "github"
secret = "a"
secrets = ["b", "c"]
secret_env = ["X", "Y"]
destination = "http://127.0.0.1:3000/"
"#;
        let env = |k: &str| match k {
            "X" => Some("d".to_string()),
            "Y" => Some("e".to_string()),
            _ => None,
        };
        let cfg = from_toml_str(text, &env).unwrap();
        let got: Vec<&str> = cfg.sources[0].secrets.iter().map(Secret::expose).collect();
        assert_eq!(got, ["a", "b", "c", "d", "e"]);
    }

    #[test]
    fn missing_secret_env_is_named() {
        let text = r#"
[[sources]]
name = "s"
provider = "github"
secret_env = "NOPE"
destination = "http://127.0.0.1:3000/"
"#;
        let err = from_toml_str(text, &no_env).unwrap_err().to_string();
        assert!(
            err.contains("sources[0].secret_env") && err.contains("NOPE"),
            "{err}"
        );
    }

    #[test]
    fn public_admin_without_token_is_rejected() {
        let err = from_toml_str("[admin]\nlisten = \"0.0.0.0:8081\"\n", &no_env)
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("admin.listen:"), "{err}");
        let env = |k: &str| (k == "HOOKGATE_ADMIN_TOKEN").then(|| "t".to_string());
        assert!(from_toml_str("[admin]\nlisten = \"0.0.0.0:8081\"\n", &env).is_ok());
    }

    #[test]
    fn secret_debug_is_redacted() {
        let s = Secret::new("hunter2");
        assert!(!format!("{s:?}").contains("hunter2"));
    }

    #[test]
    fn bad_source_name_and_destination() {
        let err = from_toml_str(
            "[[sources]]\nname = \"a/b\"\nprovider = \"github\"\nsecret = \"x\"\ndestination = \"http://h/\"\n",
            &no_env,
        )
        .unwrap_err()
        .to_string();
        assert!(err.starts_with("sources[0].name:"), "{err}");
        let err = from_toml_str(
            "[[sources]]\nname = \"a\"\nprovider = \"github\"\nsecret = \"x\"\ndestination = \"ftp://h/\"\n",
            &no_env,
        )
        .unwrap_err()
        .to_string();
        assert!(err.starts_with("sources[0].destination:"), "{err}");
    }

    #[test]
    fn public_url_is_an_absolute_url_without_query() {
        let src = |u: &str| {
            format!(
                "[[sources]]\nname = \"a\"\nprovider = \"twilio\"\nsecret = \"x\"\ndestination = \"http://h/\"\npublic_url = \"{u}\"\n"
            )
        };
        let cfg = from_toml_str(&src("https://hooks.example.com/ingest/a"), &no_env).unwrap();
        assert_eq!(
            cfg.sources[0].public_url.as_deref(),
            Some("https://hooks.example.com/ingest/a")
        );
        for bad in [
            "/ingest/a",
            "ftp://h/x",
            "https://h/x?a=1",
            "https://h/x#f",
            "not a url",
        ] {
            let err = from_toml_str(&src(bad), &no_env).unwrap_err().to_string();
            assert!(err.starts_with("sources[0].public_url:"), "{bad}: {err}");
        }
    }
}
