//! Every default of the configuration in one place: the TOML layer every
//! configuration starts from (the global sections), and the per-source defaults a
//! source's keys fall back to. `deploy/hookgate.example.toml` spells out the same
//! values with comments.

use std::time::Duration;

/// The defaults every layer starts from. `deploy/hookgate.example.toml` spells out
/// the same values with comments.
pub(super) const DEFAULTS: &str = r#"
[server]
listen = "0.0.0.0:8080"
max_body_bytes = 1048576
body_budget_bytes = 67108864
header_read_timeout = "10s"
body_read_timeout = "30s"
body_first_byte_timeout = "5s"
min_body_rate = 8192
max_headers = 100
max_connections = 4096
max_connections_per_client = 256
client_ipv6_prefix = 56
shutdown_grace = "10s"
trusted_proxies = []
client_ip_header = "x-forwarded-for"
allowlist_refresh = "1h"

[admin]
listen = "127.0.0.1:8081"
request_timeout = "10s"
token_env = "HOOKGATE_ADMIN_TOKEN"
replay_rate = 50
failed_auth_allowance = 5

[store]
kind = "embedded"
path = "./hookgate-data"
url = "redis://127.0.0.1:6379"
prefix = "hg"
cluster = false
min_replicas = 0
connections = 4
timeout = "5s"
batch_max = 256
min_free_bytes = 67108864
require_sync_standby = false

[forwarder]
lease = "60s"
poll_interval = "1s"
shutdown_grace = "10s"
breaker_failures = 5
breaker_cooldown = "30s"
maintenance_interval = "10s"
ingest_first = 40
transform_memory_bytes = 536870912

[retention]
delivered = "7d"
dead = "30d"

[alerts]
interval = "60s"

[log]
format = "human"

[telemetry]
sample_ratio = 1.0
service_name = "hookgate"
export_timeout = "10s"
"#;

// A source's defaults, where its own keys are not set (see `source` and `route`).

/// `dedupe_ttl`: how long an event id is remembered.
pub const DEFAULT_DEDUPE_TTL: Duration = Duration::from_secs(7 * 24 * 3600);
/// `retry.max_attempts`: attempts before a delivery is dead.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 12;
/// `retry.max_age`: how long after arrival (or a replay) a delivery may still be retried.
pub const DEFAULT_MAX_AGE: Duration = Duration::from_secs(24 * 3600);
/// `retry.base`: the first backoff.
pub const DEFAULT_RETRY_BASE: Duration = Duration::from_secs(60);
/// `retry.cap`: the longest backoff.
pub const DEFAULT_RETRY_CAP: Duration = Duration::from_secs(12 * 3600);
/// `delivery.timeout`: how long one attempt may take.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// `delivery.connect_timeout`: how long connecting to a destination may take.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// `delivery.concurrency`: attempts in flight per destination.
pub const DEFAULT_CONCURRENCY: usize = 16;
