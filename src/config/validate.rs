//! From what the file says to what the program uses: [`validate`] checks every
//! section of a [`RawConfig`] and builds the [`Config`], naming the key of the first
//! problem it finds.

use std::net::SocketAddr;

use super::durations::parse_duration;
use super::raw::{
    RawAdmin, RawAlerts, RawConfig, RawForwarder, RawLog, RawRetention, RawServer, RawSource,
    RawStore, RawTelemetry,
};
use super::source::validate_source;
use super::{
    AdminConfig, AlertsConfig, ClientIpHeader, Config, ConfigError, EmbeddedConfig,
    ForwarderConfig, LogConfig, LogFormat, PgSslMode, PostgresConfig, RedisConfig, RetentionConfig,
    Secret, ServerConfig, SourceConfig, StoreConfig, TelemetryConfig, TraceSettings, redact_url,
};

fn parse_addr(key: &str, value: &str) -> Result<SocketAddr, ConfigError> {
    value.parse().map_err(|_| {
        ConfigError::invalid(
            key,
            format!("invalid listen address {value:?}; use e.g. \"0.0.0.0:8080\""),
        )
    })
}

/// Check every section of `raw` and build the [`Config`]; `env` reads the secrets
/// that `*_env` keys name. The sections are checked one after the other, in this
/// order, and the first problem found is the one reported.
pub(super) fn validate(
    raw: RawConfig,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Config, ConfigError> {
    let server = validate_server(&raw.server)?;
    let admin = validate_admin(&raw.admin, env)?;
    let store = validate_store(&raw.store)?;
    let forwarder = validate_forwarder(&raw.forwarder)?;
    let retention = validate_retention(&raw.retention)?;
    let alerts = validate_alerts(raw.alerts, env)?;
    let log = validate_log(&raw.log)?;
    let telemetry = validate_telemetry(&raw.telemetry)?;
    let sources = validate_sources(raw.sources, &forwarder, env)?;
    Ok(Config {
        server,
        admin,
        store,
        forwarder,
        retention,
        alerts,
        log,
        telemetry,
        providers_dir: raw.providers_dir,
        transform_worker: None,
        sources,
    })
}

/// `[server]`: the ingest listener, its body bounds, timeouts and connection caps.
fn validate_server(raw: &RawServer) -> Result<ServerConfig, ConfigError> {
    let server = ServerConfig {
        listen: parse_addr("server.listen", &raw.listen)?,
        max_body_bytes: match raw.max_body_bytes {
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
        body_budget_bytes: usize::try_from(raw.body_budget_bytes).map_err(|_| {
            ConfigError::invalid("server.body_budget_bytes", "too large for this platform")
        })?,
        header_read_timeout: parse_duration(
            "server.header_read_timeout",
            &raw.header_read_timeout,
        )?,
        body_read_timeout: parse_duration("server.body_read_timeout", &raw.body_read_timeout)?,
        body_first_byte_timeout: parse_duration(
            "server.body_first_byte_timeout",
            &raw.body_first_byte_timeout,
        )?,
        min_body_rate: raw.min_body_rate,
        max_headers: raw.max_headers,
        max_connections: raw.max_connections.max(1),
        max_connections_per_client: match raw.max_connections_per_client {
            0 => None,
            n => Some(n),
        },
        client_ipv6_prefix: match raw.client_ipv6_prefix {
            p @ 16..=128 => p,
            _ => {
                return Err(ConfigError::invalid(
                    "server.client_ipv6_prefix",
                    "must be between 16 and 128 (bits of an IPv6 address that make one client)",
                ));
            }
        },
        shutdown_grace: parse_duration("server.shutdown_grace", &raw.shutdown_grace)?,
        trusted_proxies: raw
            .trusted_proxies
            .iter()
            .map(|text| super::parse_cidr("server.trusted_proxies", text))
            .collect::<Result<_, _>>()?,
        client_ip_header: match raw.client_ip_header.as_str() {
            "x-forwarded-for" => ClientIpHeader::XForwardedFor,
            "forwarded" => ClientIpHeader::Forwarded,
            "x-real-ip" => ClientIpHeader::XRealIp,
            _ => {
                return Err(ConfigError::invalid(
                    "server.client_ip_header",
                    "must be \"x-forwarded-for\", \"forwarded\" or \"x-real-ip\": the one header the trusted proxies write",
                ));
            }
        },
        allowlist_refresh: parse_duration("server.allowlist_refresh", &raw.allowlist_refresh)?,
    };
    if server.allowlist_refresh < std::time::Duration::from_secs(1) {
        return Err(ConfigError::invalid(
            "server.allowlist_refresh",
            "must be at least 1s",
        ));
    }
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
    Ok(server)
}

/// `[admin]`: the admin listener (loopback unless a token is set), the probes'
/// listener, the request timeout, the replay rate and the console's origin.
fn validate_admin(
    raw: &RawAdmin,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<AdminConfig, ConfigError> {
    let admin_listen = parse_addr("admin.listen", &raw.listen)?;
    let token = match raw.token_env.as_deref() {
        Some(var) if !var.is_empty() => env(var).filter(|t| !t.is_empty()).map(Secret::new),
        _ => None,
    };
    if token.is_none() && !admin_listen.ip().is_loopback() {
        return Err(ConfigError::invalid(
            "admin.listen",
            format!(
                "{admin_listen} is not a loopback address and no admin token is set; \
                 set the variable named by admin.token_env ({}) or bind 127.0.0.1",
                raw.token_env.as_deref().unwrap_or("unset")
            ),
        ));
    }
    let probe_listen = match raw.probe_listen.as_deref() {
        None | Some("") => None,
        Some(addr) => Some(parse_addr("admin.probe_listen", addr)?),
    };
    if let Some(addr) = probe_listen
        && token.is_none()
        && !addr.ip().is_loopback()
    {
        return Err(ConfigError::invalid(
            "admin.probe_listen",
            format!(
                "{addr} is not a loopback address and no admin token is set; \
                 set the variable named by admin.token_env or bind 127.0.0.1"
            ),
        ));
    }
    let request_timeout = parse_duration("admin.request_timeout", &raw.request_timeout)?;
    if request_timeout.is_zero() {
        return Err(ConfigError::invalid(
            "admin.request_timeout",
            "must be more than 0",
        ));
    }
    if raw.replay_rate == 0 {
        return Err(ConfigError::invalid(
            "admin.replay_rate",
            "must be at least 1 entry per second",
        ));
    }
    Ok(AdminConfig {
        listen: admin_listen,
        probe_listen,
        request_timeout,
        token,
        replay_rate: raw.replay_rate,
        public_origin: match raw.public_origin.as_deref() {
            None | Some("") => None,
            Some(o) => Some(public_origin(o)?),
        },
        failed_auth_allowance: raw.failed_auth_allowance,
    })
}

/// `[store]`: the embedded store or Redis, and the timeout of a store call.
fn validate_store(raw: &RawStore) -> Result<StoreConfig, ConfigError> {
    let store_timeout = parse_duration("store.timeout", &raw.timeout)?;
    if store_timeout.is_zero() {
        return Err(ConfigError::invalid("store.timeout", "must be more than 0"));
    }
    if raw.require_sync_standby && raw.kind != "postgres" {
        return Err(ConfigError::invalid(
            "store.require_sync_standby",
            "applies to store.kind = \"postgres\" only",
        ));
    }
    let store = match raw.kind.as_str() {
        "embedded" => StoreConfig::Embedded(EmbeddedConfig {
            path: raw.path.clone(),
            batch_max: raw.batch_max.clamp(1, 4096),
            min_free_bytes: raw.min_free_bytes,
            timeout: store_timeout,
        }),
        "redis" => {
            if !(raw.url.starts_with("redis://")
                || raw.url.starts_with("rediss://")
                || raw.url.starts_with("redis+unix://")
                || raw.url.starts_with("unix://"))
            {
                return Err(ConfigError::invalid(
                    "store.url",
                    format!(
                        "{:?} is not a redis URL; use redis://host:port",
                        redact_url(&raw.url)
                    ),
                ));
            }
            if raw.prefix.is_empty() || raw.prefix.contains(['{', '}']) {
                return Err(ConfigError::invalid(
                    "store.prefix",
                    "must be non-empty and must not contain '{' or '}'",
                ));
            }
            StoreConfig::Redis(RedisConfig {
                url: raw.url.clone(),
                cluster: raw.cluster,
                prefix: raw.prefix.clone(),
                connections: raw.connections.clamp(1, 64),
                timeout: store_timeout,
                min_replicas: raw.min_replicas,
            })
        }
        "postgres" => {
            if !(raw.url.starts_with("postgres://") || raw.url.starts_with("postgresql://")) {
                return Err(ConfigError::invalid(
                    "store.url",
                    format!(
                        "{:?} is not a PostgreSQL URL; use postgres://user@host:5432/db",
                        redact_url(&raw.url)
                    ),
                ));
            }
            let query = raw.url.split_once('?').map_or("", |(_, q)| q);
            let param = |name: &str| {
                form_urlencoded::parse(query.as_bytes())
                    .find(|(k, _)| k == name)
                    .map(|(_, v)| v.into_owned())
            };
            let mode = match param("sslmode") {
                None => None,
                Some(text) => Some(PgSslMode::parse(&text).ok_or_else(|| {
                    ConfigError::invalid(
                        "store.url",
                        format!(
                            "sslmode={text:?} is not supported; use disable, prefer, require or verify-full"
                        ),
                    )
                })?),
            };
            if param("sslrootcert").is_some()
                && let Some(mode) = mode.filter(|m| *m != PgSslMode::VerifyFull)
            {
                return Err(ConfigError::invalid(
                    "store.url",
                    format!(
                        "sslrootcert is read with sslmode=verify-full (or no sslmode), not sslmode={}",
                        mode.label()
                    ),
                ));
            }
            if !valid_schema_name(&raw.prefix) {
                return Err(ConfigError::invalid(
                    "store.prefix",
                    "names the PostgreSQL schema: 1 to 63 of a-z, 0-9 and _, not starting with a digit",
                ));
            }
            if let Some(why) = unusable_schema_name(&raw.prefix) {
                return Err(ConfigError::invalid(
                    "store.prefix",
                    format!("{:?} {why}; choose another prefix", raw.prefix),
                ));
            }
            StoreConfig::Postgres(PostgresConfig {
                url: raw.url.clone(),
                schema: raw.prefix.clone(),
                connections: raw.connections.clamp(2, 256),
                batch_max: raw.batch_max.clamp(1, 4096),
                timeout: store_timeout,
                require_sync_standby: raw.require_sync_standby,
            })
        }
        other => {
            return Err(ConfigError::invalid(
                "store.kind",
                format!(
                    "unknown store kind {other:?}; use \"embedded\", \"redis\" or \"postgres\""
                ),
            ));
        }
    };
    // Only Redis waits for replicas (`WAIT`); elsewhere the key would promise nothing.
    if raw.min_replicas > 0 && !matches!(store, StoreConfig::Redis(_)) {
        return Err(ConfigError::invalid(
            "store.min_replicas",
            format!(
                "waits for Redis replicas (WAIT) and only applies to store.kind = \"redis\"; \
                 store.kind is {:?}: remove the key or set it to 0",
                raw.kind
            ),
        ));
    }
    Ok(store)
}

/// A PostgreSQL schema name hookgate can use unquoted: lower case, so that it is
/// the name PostgreSQL folds it to.
fn valid_schema_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

/// PostgreSQL's reserved key words (its SQL Key Words appendix: "reserved" and
/// "reserved (can be function or type)"), which hookgate's statements cannot use
/// as the unquoted schema name they are written with.
const RESERVED_WORDS: &[&str] = &[
    "all",
    "analyse",
    "analyze",
    "and",
    "any",
    "array",
    "as",
    "asc",
    "asymmetric",
    "authorization",
    "binary",
    "both",
    "case",
    "cast",
    "check",
    "collate",
    "collation",
    "column",
    "concurrently",
    "constraint",
    "create",
    "cross",
    "current_catalog",
    "current_date",
    "current_role",
    "current_schema",
    "current_time",
    "current_timestamp",
    "current_user",
    "default",
    "deferrable",
    "desc",
    "distinct",
    "do",
    "else",
    "end",
    "except",
    "false",
    "fetch",
    "for",
    "foreign",
    "freeze",
    "from",
    "full",
    "grant",
    "group",
    "having",
    "ilike",
    "in",
    "initially",
    "inner",
    "intersect",
    "into",
    "is",
    "isnull",
    "join",
    "lateral",
    "leading",
    "left",
    "like",
    "limit",
    "localtime",
    "localtimestamp",
    "natural",
    "not",
    "notnull",
    "null",
    "offset",
    "on",
    "only",
    "or",
    "order",
    "outer",
    "overlaps",
    "placing",
    "primary",
    "references",
    "returning",
    "right",
    "select",
    "session_user",
    "similar",
    "some",
    "symmetric",
    "system_user",
    "table",
    "tablesample",
    "then",
    "to",
    "trailing",
    "true",
    "union",
    "unique",
    "user",
    "using",
    "variadic",
    "verbose",
    "when",
    "where",
    "window",
    "with",
];

/// Why a well-formed `store.prefix` cannot name hookgate's schema, if it cannot: a
/// reserved word fails at the first statement, `public` is where every other
/// application's tables live, and `pg_*` and `information_schema` are PostgreSQL's.
fn unusable_schema_name(name: &str) -> Option<&'static str> {
    if RESERVED_WORDS.contains(&name) {
        Some("is a reserved word of PostgreSQL's SQL")
    } else if name == "public" {
        Some("is the schema every database user shares; hookgate's tables need one of their own")
    } else if name.starts_with("pg_") || name == "information_schema" {
        Some("is a name PostgreSQL keeps for its own schemas")
    } else {
        None
    }
}

/// The most address space a transform worker may be given.
const MAX_TRANSFORM_MEMORY: u64 = 64 << 30;

/// `[forwarder]`: the lease, the polling and maintenance intervals, the breaker.
fn validate_forwarder(raw: &RawForwarder) -> Result<ForwarderConfig, ConfigError> {
    let forwarder = ForwarderConfig {
        lease: parse_duration("forwarder.lease", &raw.lease)?,
        poll_interval: parse_duration("forwarder.poll_interval", &raw.poll_interval)?,
        shutdown_grace: parse_duration("forwarder.shutdown_grace", &raw.shutdown_grace)?,
        breaker_failures: raw.breaker_failures.max(1),
        breaker_cooldown: parse_duration("forwarder.breaker_cooldown", &raw.breaker_cooldown)?,
        maintenance_interval: parse_duration(
            "forwarder.maintenance_interval",
            &raw.maintenance_interval,
        )?,
        ingest_first: raw.ingest_first,
        transform_memory_bytes: raw.transform_memory_bytes,
    };
    if !(crate::transform::pool::MIN_MEMORY..=MAX_TRANSFORM_MEMORY)
        .contains(&forwarder.transform_memory_bytes)
    {
        return Err(ConfigError::invalid(
            "forwarder.transform_memory_bytes",
            format!(
                "must be between {} (384 MiB: a worker's stack and code) and {MAX_TRANSFORM_MEMORY} (64 GiB)",
                crate::transform::pool::MIN_MEMORY
            ),
        ));
    }
    if forwarder.poll_interval.is_zero() || forwarder.maintenance_interval.is_zero() {
        return Err(ConfigError::invalid(
            "forwarder.poll_interval",
            "poll_interval and maintenance_interval must be greater than 0",
        ));
    }
    Ok(forwarder)
}

/// `[retention]`: how long delivered and dead entries are kept.
fn validate_retention(raw: &RawRetention) -> Result<RetentionConfig, ConfigError> {
    Ok(RetentionConfig {
        delivered: parse_duration("retention.delivered", &raw.delivered)?,
        dead: parse_duration("retention.dead", &raw.dead)?,
    })
}

/// `[alerts]`: the webhook dead deliveries are announced to (written, or read from
/// the environment), and the interval of the announcements.
fn validate_alerts(
    raw: RawAlerts,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<AlertsConfig, ConfigError> {
    let alerts_url = match (raw.webhook_url, raw.webhook_url_env) {
        (Some(url), None) => Some(url),
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
    if let Some(url) = &alerts_url
        && !(url.starts_with("http://") || url.starts_with("https://"))
    {
        return Err(ConfigError::invalid(
            "alerts.webhook_url",
            "must be an http:// or https:// URL",
        ));
    }
    let alerts = AlertsConfig {
        webhook_url: alerts_url.map(Secret::new),
        interval: parse_duration("alerts.interval", &raw.interval)?,
    };
    if alerts.interval.is_zero() {
        return Err(ConfigError::invalid(
            "alerts.interval",
            "must be greater than 0",
        ));
    }
    Ok(alerts)
}

/// `[telemetry]`: where traces are exported (none without `otlp_endpoint`), and
/// which share of webhooks.
fn validate_telemetry(raw: &RawTelemetry) -> Result<TelemetryConfig, ConfigError> {
    if !(0.0..=1.0).contains(&raw.sample_ratio) {
        return Err(ConfigError::invalid(
            "telemetry.sample_ratio",
            "must be between 0 and 1",
        ));
    }
    if raw.service_name.trim().is_empty() {
        return Err(ConfigError::invalid(
            "telemetry.service_name",
            "must not be empty",
        ));
    }
    let timeout = parse_duration("telemetry.export_timeout", &raw.export_timeout)?;
    if timeout.is_zero() {
        return Err(ConfigError::invalid(
            "telemetry.export_timeout",
            "must be greater than 0",
        ));
    }
    let traces = match raw.otlp_endpoint.as_deref().filter(|e| !e.is_empty()) {
        None => None,
        Some(endpoint) => {
            let url = crate::telemetry::traces::traces_url(endpoint);
            match url.parse::<http::Uri>() {
                Ok(u) if u.authority().is_some_and(|a| a.as_str().contains('@')) => {
                    return Err(ConfigError::invalid(
                        "telemetry.otlp_endpoint",
                        "must not hold credentials: give the collector's headers in OTEL_EXPORTER_OTLP_HEADERS",
                    ));
                }
                Ok(u) if matches!(u.scheme_str(), Some("http" | "https")) && u.host().is_some() => {
                }
                _ => {
                    return Err(ConfigError::invalid(
                        "telemetry.otlp_endpoint",
                        "must be an http:// or https:// URL (the collector's OTLP/HTTP base, such as http://collector:4318)",
                    ));
                }
            }
            Some(TraceSettings {
                endpoint: endpoint.to_string(),
                sample_ratio: raw.sample_ratio,
                service_name: raw.service_name.clone(),
                timeout,
            })
        }
    };
    Ok(TelemetryConfig { traces })
}

/// `[log]`: the log format.
fn validate_log(raw: &RawLog) -> Result<LogConfig, ConfigError> {
    Ok(LogConfig {
        format: match raw.format.as_str() {
            "human" => LogFormat::Human,
            "json" => LogFormat::Json,
            other => {
                return Err(ConfigError::invalid(
                    "log.format",
                    format!("unknown log format {other:?}; use \"human\" or \"json\""),
                ));
            }
        },
    })
}

/// `[[sources]]`: each source and its routes (see [`validate_source`]), with unique
/// names, and a forwarder lease longer than every route's delivery timeout.
fn validate_sources(
    raw_sources: Vec<RawSource>,
    forwarder: &ForwarderConfig,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<SourceConfig>, ConfigError> {
    let mut sources = Vec::with_capacity(raw_sources.len());
    for (index, raw_source) in raw_sources.into_iter().enumerate() {
        let source = validate_source(index, raw_source, env)?;
        if sources
            .iter()
            .any(|earlier: &SourceConfig| earlier.name == source.name)
        {
            return Err(ConfigError::invalid(
                format!("sources[{index}].name"),
                format!("duplicate source name {:?}", source.name),
            ));
        }
        for (r, route) in source.routes.iter().enumerate() {
            if forwarder.lease <= route.delivery.timeout {
                return Err(ConfigError::invalid(
                    "forwarder.lease",
                    format!(
                        "the lease ({}) must be longer than the delivery timeout of route {:?} of source {:?} ({}, sources[{index}].routes[{r}]): \
                         a claimed entry starts at once and its attempt may last that long",
                        humantime::format_duration(forwarder.lease),
                        route.name,
                        source.name,
                        humantime::format_duration(route.delivery.timeout),
                    ),
                ));
            }
        }
        sources.push(source);
    }
    Ok(sources)
}

/// `admin.public_origin` as a browser's `Origin` header names it: the scheme and
/// host in lower case, the port only when it is not the scheme's default.
fn public_origin(value: &str) -> Result<String, ConfigError> {
    let bad = |why: &str| ConfigError::invalid("admin.public_origin", why.to_string());
    let uri: http::Uri = value
        .parse()
        .map_err(|_| bad("must be an origin: http(s)://host[:port]"))?;
    let (scheme, default_port) = match uri.scheme_str().map(str::to_ascii_lowercase).as_deref() {
        Some("http") => ("http", 80),
        Some("https") => ("https", 443),
        _ => return Err(bad("must start with http:// or https://")),
    };
    let authority = uri.authority().ok_or_else(|| bad("must name a host"))?;
    if authority.as_str().contains('@') || uri.query().is_some() || !matches!(uri.path(), "" | "/")
    {
        return Err(bad(
            "must be an origin only: no user, path or query (http(s)://host[:port])",
        ));
    }
    let host = authority.host().to_ascii_lowercase();
    Ok(match authority.port_u16() {
        Some(p) if p != default_port => format!("{scheme}://{host}:{p}"),
        _ => format!("{scheme}://{host}"),
    })
}

#[cfg(test)]
mod tests {
    use super::super::from_toml_str;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn bad_duration_names_the_key() {
        let err = from_toml_str("[retention]\ndead = \"forever\"\n", &no_env).unwrap_err();
        assert!(err.to_string().starts_with("retention.dead:"), "{err}");
    }

    #[test]
    fn min_replicas_is_for_redis_only_and_zero_is_allowed_everywhere() {
        use super::super::StoreConfig;
        let redis = "[store]\nkind = \"redis\"\nmin_replicas = 2\n";
        match from_toml_str(redis, &no_env).unwrap().store {
            StoreConfig::Redis(r) => assert_eq!(r.min_replicas, 2),
            other => panic!("{other:?}"),
        }
        match from_toml_str("[store]\nkind = \"redis\"\n", &no_env)
            .unwrap()
            .store
        {
            StoreConfig::Redis(r) => assert_eq!(r.min_replicas, 0, "off by default"),
            other => panic!("{other:?}"),
        }
        assert!(from_toml_str("[store]\nmin_replicas = 0\n", &no_env).is_ok());
        let err = from_toml_str("[store]\nmin_replicas = 1\n", &no_env)
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("store.min_replicas:") && err.contains("\"embedded\""),
            "{err}"
        );
    }

    /// The PostgreSQL store: its keys, its URL's `sslmode` and schema name checked
    /// with the rest of the configuration (`check-config` says so before a start);
    /// `require_sync_standby` applies to it alone.
    #[test]
    fn the_postgres_store_takes_its_keys_and_refuses_what_it_cannot_use() {
        use super::super::StoreConfig;
        let ok = "[store]\nkind = \"postgres\"\n\
                  url = \"postgres://u:pw@h1:5432,h2:5433/db?target_session_attrs=read-write&sslmode=verify-full\"\n\
                  prefix = \"hookgate_a\"\nconnections = 8\nrequire_sync_standby = true\n";
        match from_toml_str(ok, &no_env).unwrap().store {
            StoreConfig::Postgres(p) => {
                assert_eq!(p.schema, "hookgate_a");
                assert_eq!(p.connections, 8);
                assert!(p.require_sync_standby);
            }
            other => panic!("{other:?}"),
        }
        for (toml, key) in [
            (
                "[store]\nkind = \"postgres\"\nurl = \"postgres://u:secret@h/db?sslmode=verify-ca\"\n",
                "store.url:",
            ),
            (
                "[store]\nkind = \"postgres\"\nurl = \"redis://h\"\n",
                "store.url:",
            ),
            (
                "[store]\nkind = \"postgres\"\nurl = \"postgres://h/db\"\nprefix = \"Hg-1\"\n",
                "store.prefix:",
            ),
            (
                "[store]\nkind = \"redis\"\nrequire_sync_standby = true\n",
                "store.require_sync_standby:",
            ),
            (
                "[store]\nkind = \"postgres\"\nurl = \"postgres://u:secret@h/db?sslmode=require&sslrootcert=/ca.pem\"\n",
                "store.url:",
            ),
        ] {
            let err = from_toml_str(toml, &no_env).unwrap_err().to_string();
            assert!(err.starts_with(key), "{toml}: {err}");
            assert!(!err.contains("secret"), "{err}");
        }
    }

    /// A prefix PostgreSQL would refuse at the first statement, or one that is not
    /// hookgate's own, is refused with the rest of the configuration.
    #[test]
    fn a_prefix_that_is_a_reserved_word_or_not_hookgates_own_is_refused() {
        let with = |prefix: &str| {
            from_toml_str(
                &format!(
                    "[store]\nkind = \"postgres\"\nurl = \"postgres://h/db\"\nprefix = \"{prefix}\"\n"
                ),
                &no_env,
            )
        };
        for bad in [
            "user",
            "select",
            "order",
            "public",
            "pg_temp",
            "information_schema",
        ] {
            let err = with(bad).unwrap_err().to_string();
            assert!(
                err.starts_with("store.prefix:") && err.contains(bad),
                "{bad}: {err}"
            );
        }
        for good in ["hg", "users", "hookgate_user", "public_hooks", "pgx"] {
            assert!(with(good).is_ok(), "{good}");
        }
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
    fn the_public_origin_is_kept_as_a_browser_names_it() {
        let origin = |v: &str| {
            from_toml_str(&format!("[admin]\npublic_origin = \"{v}\"\n"), &no_env)
                .map(|c| c.admin.public_origin)
        };
        assert_eq!(
            origin("HTTPS://Admin.Example:443/").unwrap().as_deref(),
            Some("https://admin.example")
        );
        assert_eq!(
            origin("http://127.0.0.1:8081").unwrap().as_deref(),
            Some("http://127.0.0.1:8081")
        );
        assert_eq!(origin("").unwrap(), None);
        for bad in [
            "admin.example",
            "ftp://admin.example",
            "https://u:p@admin.example",
            "https://admin.example/console",
            "https://admin.example/?x=1",
        ] {
            let err = origin(bad).unwrap_err().to_string();
            assert!(err.starts_with("admin.public_origin:"), "{bad}: {err}");
        }
    }
}
