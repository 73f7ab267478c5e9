//! What the configuration file says, before anything is checked.
//!
//! The serde model that figment fills from the defaults, the file and the
//! environment. Unknown keys are errors (`deny_unknown_fields`), so a misspelt key is
//! named instead of silently ignored. Values stay as written (durations and addresses
//! are strings here); validation turns this into a [`super::Config`].

use std::path::PathBuf;

use serde::Deserialize;

use crate::routing::filter::RawFilter;

/// One string or a list of strings, for keys that take either: `secret_env = "A"` or
/// `secret_env = ["A", "B"]` here, `signature.algorithm`, `event.id` and `event.type`
/// in provider specs.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

impl OneOrMany {
    pub fn into_vec(self) -> Vec<String> {
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
    pub telemetry: RawTelemetry,
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
    pub body_first_byte_timeout: String,
    pub min_body_rate: u64,
    pub max_headers: usize,
    pub max_connections: usize,
    pub max_connections_per_client: usize,
    pub client_ipv6_prefix: u8,
    pub shutdown_grace: String,
    /// CIDRs of the reverse proxies whose `X-Forwarded-For` / `Forwarded` name the
    /// client.
    pub trusted_proxies: Vec<String>,
    /// The one header those proxies write: `x-forwarded-for`, `forwarded` or
    /// `x-real-ip`.
    pub client_ip_header: String,
    /// How often a provider's published address ranges are fetched again.
    pub allowlist_refresh: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAdmin {
    pub listen: String,
    #[serde(default)]
    pub probe_listen: Option<String>,
    pub request_timeout: String,
    #[serde(default)]
    pub token_env: Option<String>,
    pub replay_rate: u32,
    #[serde(default)]
    pub public_origin: Option<String>,
    pub failed_auth_allowance: u32,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawStore {
    pub kind: String,
    pub path: PathBuf,
    pub url: String,
    pub prefix: String,
    pub cluster: bool,
    pub min_replicas: u32,
    pub connections: usize,
    pub timeout: String,
    pub batch_max: usize,
    pub min_free_bytes: u64,
    pub require_sync_standby: bool,
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
    pub ingest_first: usize,
    pub transform_memory_bytes: u64,
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
pub struct RawTelemetry {
    #[serde(default)]
    pub otlp_endpoint: Option<String>,
    pub sample_ratio: f64,
    pub service_name: String,
    pub export_timeout: String,
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
    /// Files that each hold one secret (a mounted secret volume): read at start and
    /// at every reload, so that a rotation needs no restart.
    #[serde(default)]
    pub secret_file: Option<OneOrMany>,
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
    /// A queue destination's credentials, by reference: a NATS creds file, or the
    /// variables holding a user and password, or a NATS token.
    #[serde(default)]
    pub destination_credentials_file: Option<String>,
    #[serde(default)]
    pub destination_user_env: Option<String>,
    #[serde(default)]
    pub destination_password_env: Option<String>,
    #[serde(default)]
    pub destination_token_env: Option<String>,
    /// A pull route's consumer token, by the environment variable holding it.
    #[serde(default)]
    pub pull_token_env: Option<String>,
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
    /// The routes: each a destination with its own settings. A source has either
    /// `destination` (one route named `default`) or `routes`.
    #[serde(default)]
    pub routes: Option<Vec<RawRoute>>,
    /// The ordering of the one route `destination` stands for.
    #[serde(default)]
    pub order: Option<RawOrder>,
    /// Keep the bodies of refused requests (their first bytes) in the rejection log.
    #[serde(default)]
    pub keep_rejected_bodies: bool,
    /// Indexed JSON pointers of the body, by name (`[sources.index]`).
    #[serde(default)]
    pub index: std::collections::BTreeMap<String, String>,
    /// The token a provider's endpoint check carries (Meta's `hub.verify_token`).
    #[serde(default)]
    pub verify_token: Option<String>,
    #[serde(default)]
    pub verify_token_env: Option<String>,
    /// AWS SNS: the gateway visits a verified `SubscriptionConfirmation`'s
    /// `SubscribeURL` before storing it.
    #[serde(default)]
    pub confirm_subscriptions: bool,
    /// `allow_ips = ["192.0.2.0/24", …]` or `allow_ips = "provider"`.
    #[serde(default)]
    pub allow_ips: Option<OneOrMany>,
    /// `[sources.expect]`: how much the source is expected to send.
    #[serde(default)]
    pub expect: Option<RawExpect>,
    /// `[sources.reconcile]`: compare with what the provider's API says it sent.
    #[serde(default)]
    pub reconcile: Option<RawReconcile>,
    /// `[sources.limits]`: what the source's senders may send.
    #[serde(default)]
    pub limits: Option<RawSourceLimits>,
}

/// One `[[sources.routes]]` entry. Its `retry` and `delivery` keys override the
/// source's, key by key.
/// `[sources.limits]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSourceLimits {
    /// `"100/s"`: requests the source takes, shared by every gateway on the store.
    #[serde(default)]
    pub requests: Option<String>,
    /// Requests that may come at once above the pace (a tenth of a second's worth
    /// when not given).
    #[serde(default)]
    pub burst: Option<u32>,
    /// `"10/s"`: requests failing verification one client may send (the default
    /// when `requests` is set).
    #[serde(default)]
    pub unverified_per_client: Option<String>,
}

/// `[sources.expect]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawExpect {
    /// `"1/1h"`: fewer webhooks than this in the window, and the source is quiet.
    #[serde(default)]
    pub at_least: Option<String>,
    /// Learn what the source usually sends at each hour of the week instead.
    #[serde(default)]
    pub learn: bool,
}

/// `[sources.reconcile]`: the keys of every provider's API; `config::reconcile`
/// checks that a source uses its own provider's.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawReconcile {
    /// `"5m"`: how often a pass runs.
    #[serde(default)]
    pub interval: Option<String>,
    /// `"3d"`: how far back a pass looks.
    #[serde(default)]
    pub lookback: Option<String>,
    /// The API's base URL (GitHub Enterprise Server, a proxy, a test's fake API).
    #[serde(default)]
    pub api_base: Option<String>,
    /// `"1m"`: how long a listed delivery or event is left to the provider's own
    /// delivery before a pass judges it.
    #[serde(default)]
    pub settle: Option<String>,
    /// GitHub: `repos/OWNER/REPO/hooks/ID`, `orgs/ORG/hooks/ID` or `app`.
    #[serde(default)]
    pub hook: Option<String>,
    /// GitHub: the variable holding a token that may read the hook.
    #[serde(default)]
    pub token_env: Option<String>,
    #[serde(default)]
    pub token_file: Option<String>,
    /// GitHub App: its id (or client id), with `private_key_file`.
    #[serde(default)]
    pub app_id: Option<String>,
    #[serde(default)]
    pub private_key_file: Option<String>,
    /// Stripe, Square: the variable holding the API's secret key or access token.
    #[serde(default)]
    pub api_key_env: Option<String>,
    #[serde(default)]
    pub api_key_file: Option<String>,
    /// Stripe: the webhook endpoint (`we_…`) that calls this source.
    #[serde(default)]
    pub endpoint: Option<String>,
    /// Square: the webhook subscription (`wbhk_…`) that calls this source.
    #[serde(default)]
    pub subscription: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRoute {
    pub name: String,
    pub destination: String,
    #[serde(default)]
    pub destination_secret: Option<String>,
    #[serde(default)]
    pub destination_secret_env: Option<String>,
    /// A queue destination's credentials, by reference: a NATS creds file, or the
    /// variables holding a user and password, or a NATS token.
    #[serde(default)]
    pub destination_credentials_file: Option<String>,
    #[serde(default)]
    pub destination_user_env: Option<String>,
    #[serde(default)]
    pub destination_password_env: Option<String>,
    #[serde(default)]
    pub destination_token_env: Option<String>,
    /// A pull route's consumer token, by the environment variable holding it.
    #[serde(default)]
    pub pull_token_env: Option<String>,
    /// Shorthand for `delivery.rate_limit`.
    #[serde(default)]
    pub rate_limit: Option<String>,
    #[serde(default)]
    pub retry: Option<RawRetry>,
    #[serde(default)]
    pub delivery: Option<RawDelivery>,
    #[serde(default)]
    pub filter: Option<RawFilter>,
    #[serde(default)]
    pub order: Option<RawOrder>,
    /// A jq program that turns the stored body into what the destination receives.
    #[serde(default)]
    pub transform: Option<String>,
    /// `body` (the default: the output is the body) or `envelope` (the output is
    /// `{body, headers, content_type}`).
    #[serde(default)]
    pub transform_output: Option<String>,
    /// The most one run of the program may take (default 50ms).
    #[serde(default)]
    pub transform_timeout: Option<String>,
}

/// `[sources.routes.order]` (or `[sources.order]` for a source's one `destination`):
/// the route delivers the entries with the same key one at a time, in arrival order.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawOrder {
    /// Where the key is: `json:/pointer`, `header:Name`, or `provider` (the
    /// provider's object id, `event.object` of its spec).
    pub by: String,
    /// `skip` (default) or `block`.
    #[serde(default)]
    pub on_dead: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
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
    #[serde(default)]
    pub rate_limit: Option<String>,
}

impl RawDelivery {
    /// These settings, each one this table does not set taken from `base`.
    pub fn over(self, base: &RawDelivery) -> RawDelivery {
        RawDelivery {
            timeout: self.timeout.or_else(|| base.timeout.clone()),
            connect_timeout: self
                .connect_timeout
                .or_else(|| base.connect_timeout.clone()),
            concurrency: self.concurrency.or(base.concurrency),
            pass_headers: self.pass_headers.or_else(|| base.pass_headers.clone()),
            rate_limit: self.rate_limit.or_else(|| base.rate_limit.clone()),
        }
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
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

impl RawRetry {
    /// These settings, each one this table does not set taken from `base`.
    pub fn over(self, base: &RawRetry) -> RawRetry {
        RawRetry {
            max_attempts: self.max_attempts.or(base.max_attempts),
            max_age: self.max_age.or_else(|| base.max_age.clone()),
            base: self.base.or_else(|| base.base.clone()),
            cap: self.cap.or_else(|| base.cap.clone()),
        }
    }
}
