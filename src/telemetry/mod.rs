//! Logs and metrics: the only module that installs a tracing subscriber or a
//! metrics exporter. A leaf: it imports no other room of hookgate, so every room may
//! record through it. Each room declares its own label vocabularies and registers
//! their zero series (`ingest`, `forward`, `alerts`, `provider`, `serve` and `store`
//! each have a `register_metrics`), beside the per-source families registered here; `/metrics` and
//! the probes are served by `admin::probes`.
//!
//! Modules record through the `metrics` facade; names follow Prometheus conventions
//! (`hookgate_…_total`, `…_seconds`) and labels are bounded (source and destination
//! names from the configuration, fixed outcome sets; never event or entry ids).
//!
//! Log lines carry source, entry id, event id and outcome; nothing in hookgate logs
//! secrets, signatures or bodies, and dependencies are capped at `info` unless
//! `RUST_LOG` names them, so their trace output cannot leak a header either.

mod labels;
pub mod throttle;
pub mod traces;

use std::sync::OnceLock;

use metrics::Unit;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tracing_appender::non_blocking::{ErrorCounter, NonBlocking, NonBlockingBuilder, WorkerGuard};
use tracing_subscriber::EnvFilter;

pub(crate) use labels::label_values;

/// Log lines that may wait for stderr (a few MiB at most): beyond them new lines are
/// dropped and counted (`hookgate_log_lines_dropped_total`), never waited for.
pub const LOG_QUEUE_LINES: usize = 16_384;

/// How log lines are written: for people, or one JSON object per line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Human,
    Json,
}

/// The dropped-line counter of the installed log writer.
static LOG_DROPS: OnceLock<ErrorCounter> = OnceLock::new();

/// The writer log lines go through: a bounded queue that a thread of its own writes
/// to `inner`. Writing a line never blocks the caller (a request, a delivery): when
/// `inner` falls behind by `lines` lines, new lines are dropped and counted.
pub fn log_writer<W: std::io::Write + Send + 'static>(
    inner: W,
    lines: usize,
) -> (NonBlocking, WorkerGuard) {
    NonBlockingBuilder::default()
        .buffered_lines_limit(lines)
        .lossy(true)
        .thread_name("hookgate-log")
        .finish(inner)
}

/// Log lines dropped so far because stderr could not keep up.
pub fn dropped_log_lines() -> u64 {
    LOG_DROPS
        .get()
        .map(|c| u64::try_from(c.dropped_lines()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// Install the global subscriber, writing through [`log_writer`]. `RUST_LOG` filters
/// (default `info`). Keep the guard until the process exits: dropping it writes out
/// the lines still queued.
pub fn init(format: LogFormat) -> Option<WorkerGuard> {
    let spec = std::env::var("RUST_LOG").unwrap_or_else(|_| "info".to_string());
    let mut filter = EnvFilter::new(&spec);
    // Dependencies may log request details at debug/trace; keep them at info unless the
    // operator named them explicitly.
    for dep in [
        "hyper",
        "hyper_util",
        "h2",
        "reqwest",
        "redis",
        "rusqlite",
        // At debug it logs every statement with its parameters: bodies, headers.
        "tokio_postgres",
        "deadpool_postgres",
        "rustls",
        "tower",
        "axum",
    ] {
        if !spec.contains(dep)
            && let Ok(d) = format!("{dep}=info").parse()
        {
            filter = filter.add_directive(d);
        }
    }
    let (writer, guard) = log_writer(std::io::stderr(), LOG_QUEUE_LINES);
    let drops = writer.error_counter();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer);
    let installed = match format {
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
        LogFormat::Human => builder.try_init(),
    };
    match installed {
        Ok(()) => {
            let _ = LOG_DROPS.set(drops);
            Some(guard)
        }
        // Another subscriber is in place (tests): it writes its own way.
        Err(_) => None,
    }
}

/// A configured source and the names of its routes: the label values of the
/// per-source and per-route metric families.
#[derive(Debug, Clone)]
pub struct SourceRoutes {
    pub source: String,
    pub routes: Vec<String>,
}

/// Register the per-source families that have no label vocabulary of their own with
/// a zero series for each configured source (the rooms register theirs: see the
/// module doc), and the process-wide ones. Without this a
/// series is born at its first event, and Prometheus, having no earlier sample, sees
/// no increase: `increase(hookgate_dead_lettered_total[15m]) > 0` would never fire
/// on the first dead letter. Call after [`install_metrics`] (handles taken before it
/// are no-ops). Registering never changes a value already there. Histograms
/// registered without an observation are rendered with a zero count, sum and buckets.
pub fn register_families(sources: &[SourceRoutes]) {
    use metrics::{counter, gauge, histogram};
    for SourceRoutes { source: s, .. } in sources {
        // Registered, not observed: rendered with a zero count.
        let _ = histogram!("hookgate_ingest_ack_seconds", "source" => s.clone());
        counter!("hookgate_entries_filtered_total", "source" => s.clone()).increment(0);
        counter!("hookgate_store_early_purged_total", "source" => s.clone()).increment(0);
        gauge!("hookgate_pending_entries", "source" => s.clone()).increment(0.0);
        gauge!("hookgate_dead_entries", "source" => s.clone()).increment(0.0);
        gauge!("hookgate_oldest_pending_age_seconds", "source" => s.clone()).increment(0.0);
    }
    counter!("hookgate_log_lines_dropped_total").increment(0);
    for ready in ["true", "false"] {
        counter!("hookgate_store_readiness_changes_total", "ready" => ready).increment(0);
    }
    // Set to 1 when the store opens (`store::Readiness`); registering keeps its value.
    gauge!("hookgate_store_ready").increment(0.0);
    gauge!("hookgate_ingest_storing").increment(0.0);
    counter!("hookgate_ingest_saturated_windows_total").increment(0);
}

/// Latency buckets (seconds) for the ack and delivery histograms.
const BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

static PROMETHEUS: OnceLock<Option<PrometheusHandle>> = OnceLock::new();

/// How often the histograms' recent observations are folded into their buckets.
const UPKEEP_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

/// Install the Prometheus recorder (once per process) and describe the metrics.
///
/// The recorder keeps every histogram observation in a queue until an upkeep folds
/// the queue into the buckets; only a scrape ran one, so a gateway nobody scraped
/// grew by every ack, delivery and store write it measured, for as long as it ran.
/// A thread of its own (`hg-metrics`) now runs the upkeep every five seconds.
pub fn install_metrics() -> Option<&'static PrometheusHandle> {
    PROMETHEUS
        .get_or_init(|| {
            let handle = PrometheusBuilder::new()
                .set_buckets(BUCKETS)
                .ok()?
                .install_recorder()
                .map_err(|e| tracing::warn!(error = %e, "cannot install the metrics recorder"))
                .ok()?;
            describe();
            let upkeep = handle.clone();
            if let Err(e) = std::thread::Builder::new()
                .name("hg-metrics".into())
                .spawn(move || {
                    loop {
                        std::thread::sleep(UPKEEP_EVERY);
                        upkeep.run_upkeep();
                    }
                })
            {
                tracing::warn!(error = %e, "cannot start the metrics upkeep thread; histograms are folded at each scrape only");
            }
            Some(handle)
        })
        .as_ref()
}

/// What a metric family is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Counter,
    Gauge,
    Histogram,
}

/// Every family this process exports, with its unit and help text: (kind, name,
/// unit, help).
const FAMILIES: &[(Kind, &str, Option<Unit>, &str)] = &[
    (
        Kind::Counter,
        "hookgate_ingest_requests_total",
        None,
        "Ingest requests by source and outcome (accepted, duplicate, handshake, unverified, too_large, body_timeout, body_read, busy, rate_limited, ip_not_allowed, certificate_unavailable, subscription_unconfirmed, store_error; unknown_source under source _unknown)",
    ),
    (
        Kind::Gauge,
        "hookgate_source_quiet",
        None,
        "1 while a source received fewer webhooks in its window than [sources.expect] at_least says (0 otherwise, and for a source without an expectation)",
    ),
    (
        Kind::Counter,
        "hookgate_reconcile_found_total",
        None,
        "What reconciliation found missing and did, by source and how (admitted from the API, asked for again, gave_up after the last ask)",
    ),
    (
        Kind::Counter,
        "hookgate_reconcile_recovered_total",
        None,
        "Webhooks recovered by reconciliation and stored, by source and origin (reconciled, redelivered)",
    ),
    (
        Kind::Counter,
        "hookgate_reconcile_errors_total",
        None,
        "Reconciliation passes that failed, by source and kind",
    ),
    (
        Kind::Gauge,
        "hookgate_reconcile_last_success_timestamp_seconds",
        None,
        "When a reconciliation pass of the source last ended well (unix seconds; 0 before the first)",
    ),
    (
        Kind::Counter,
        "hookgate_ingest_unverified_total",
        None,
        "Ingest requests refused by verification, by source and reason",
    ),
    (
        Kind::Histogram,
        "hookgate_ingest_ack_seconds",
        Some(Unit::Seconds),
        "Time from request to 2xx for stored (or duplicate) webhooks",
    ),
    (
        Kind::Counter,
        "hookgate_delivery_attempts_total",
        None,
        "Delivery attempts by source, route and result: the attempt's failure kind (2xx, 3xx, 4xx, 5xx, other, timeout, connect, tls, io, delivered, auth_refused, not_found, too_large, transform, lease_expired, nacked, erased, cancelled)",
    ),
    (
        Kind::Counter,
        "hookgate_deliveries_total",
        None,
        "Attempt outcomes by source and route: delivered, retry, dead",
    ),
    (
        Kind::Counter,
        "hookgate_retries_scheduled_total",
        None,
        "Retries scheduled after a failed attempt, by source and route",
    ),
    (
        Kind::Counter,
        "hookgate_dead_lettered_total",
        None,
        "Deliveries moved to the dead-letter queue, by source and route",
    ),
    (
        Kind::Counter,
        "hookgate_slot_waits_expired_total",
        None,
        "Claimed deliveries given back unsent because no destination slot (or no transform worker) came within their lease, by source and route",
    ),
    (
        Kind::Counter,
        "hookgate_transform_skipped_total",
        None,
        "Deliveries a route's transform skipped (no output; recorded filtered), by source and route",
    ),
    (
        Kind::Histogram,
        "hookgate_transform_seconds",
        Some(Unit::Seconds),
        "Duration of transform runs (waiting for a worker included), by source and route",
    ),
    (
        Kind::Counter,
        "hookgate_entries_filtered_total",
        None,
        "Entries stored that no route's filter selected (answered 200, never delivered), by source",
    ),
    (
        Kind::Histogram,
        "hookgate_delivery_seconds",
        Some(Unit::Seconds),
        "Duration of delivery attempts, by source and route",
    ),
    (
        Kind::Gauge,
        "hookgate_route_pending_deliveries",
        None,
        "Deliveries waiting, by source and route",
    ),
    (
        Kind::Gauge,
        "hookgate_route_dead_deliveries",
        None,
        "Deliveries in the dead-letter queue, by source and route",
    ),
    (
        Kind::Gauge,
        "hookgate_route_oldest_pending_age_seconds",
        Some(Unit::Seconds),
        "Arrival age of the oldest entry whose delivery through the route waits, by source and route (0 when none)",
    ),
    (
        Kind::Gauge,
        "hookgate_pending_entries",
        None,
        "Entries with a delivery waiting, by source",
    ),
    (
        Kind::Gauge,
        "hookgate_dead_entries",
        None,
        "Entries with a dead delivery and none waiting, by source",
    ),
    (
        Kind::Gauge,
        "hookgate_oldest_pending_age_seconds",
        Some(Unit::Seconds),
        "Age of the oldest pending entry, by source (0 when none)",
    ),
    (
        Kind::Gauge,
        "hookgate_circuit_breaker_state",
        None,
        "Circuit breaker per destination: 0 closed, 1 half-open, 2 open",
    ),
    (
        Kind::Gauge,
        "hookgate_pull_backlog",
        None,
        "Deliveries of a pull route waiting for a consumer, leased or not, by source and route",
    ),
    (
        Kind::Gauge,
        "hookgate_pull_oldest_age_seconds",
        Some(Unit::Seconds),
        "Arrival age of the oldest delivery a pull route holds, by source and route (0 when none)",
    ),
    (
        Kind::Gauge,
        "hookgate_pull_leased",
        None,
        "Deliveries of a pull route leased to consumers through this gateway, by source and route",
    ),
    (
        Kind::Counter,
        "hookgate_pull_acked_total",
        None,
        "Deliveries of a pull route its consumers acknowledged, by source and route",
    ),
    (
        Kind::Gauge,
        "hookgate_pull_consumer_seen_timestamp_seconds",
        Some(Unit::Seconds),
        "When this gateway last saw a consumer of a pull route (unix seconds; 0 when never), by source and route",
    ),
    (
        Kind::Gauge,
        "hookgate_broker_connected",
        None,
        "Whether the connection a queue destination's broker is reached over is up (1) or down (0), by kind (nats, amqp) and broker",
    ),
    (
        Kind::Gauge,
        "hookgate_route_blocked_keys",
        None,
        "Ordering keys of a route held by a dead head (on_dead = block) until an operator replays or discards it",
    ),
    (
        Kind::Gauge,
        "hookgate_route_retired_pending",
        None,
        "Pending deliveries a retired route keeps unsent (a reload removed the route; they go when it comes back), by source and route; 0 for a route in force",
    ),
    (
        Kind::Gauge,
        "hookgate_connections_open",
        None,
        "Open connections, by listener",
    ),
    (
        Kind::Gauge,
        "hookgate_connections_idle",
        None,
        "Open connections with no request in progress (no complete request head yet, or between keep-alive requests), by listener",
    ),
    (
        Kind::Counter,
        "hookgate_connections_refused_total",
        None,
        "Connections closed at accept before a byte was read, by listener and reason (per_client: the client held server.max_connections_per_client)",
    ),
    (
        Kind::Counter,
        "hookgate_connections_shed_total",
        None,
        "Idle connections closed to make room for a new one near server.max_connections, by listener",
    ),
    (
        Kind::Counter,
        "hookgate_ingest_bodies_shed_total",
        None,
        "Request bodies shed (answered 503, connection closed) because the source's share of server.body_budget_bytes was full and they had been reading longest, by source",
    ),
    (
        Kind::Counter,
        "hookgate_request_bodies_cut_total",
        None,
        "Request bodies ended before they were complete, by listener and reason (first_byte, too_slow: under server.min_body_rate, total: admin.request_timeout, shed: stalled when every connection slot was busy)",
    ),
    (
        Kind::Gauge,
        "hookgate_store_ready",
        None,
        "1 while /readyz says ready, 0 while the store refuses writes",
    ),
    (
        Kind::Gauge,
        "hookgate_store_unsafe",
        None,
        "PostgreSQL store: 1 while the server cannot keep an acknowledged webhook safe (fsync off, synchronous_commit off, in recovery, or no synchronous standby while store.require_sync_standby is set): new webhooks are refused",
    ),
    (
        Kind::Gauge,
        "hookgate_store_sync_standbys",
        None,
        "PostgreSQL store: synchronous standbys streaming (sync or quorum), as last checked",
    ),
    (
        Kind::Counter,
        "hookgate_store_readiness_changes_total",
        None,
        "Changes of readiness (ready=true: the store takes writes again; false: it refuses them)",
    ),
    (
        Kind::Histogram,
        "hookgate_store_write_wait_seconds",
        Some(Unit::Seconds),
        "Embedded store: how long a write waited in the writer's queue before its batch began, by kind (accept, claim, complete, other)",
    ),
    (
        Kind::Gauge,
        "hookgate_ingest_storing",
        None,
        "Verified webhooks waiting for their write at once, on average over the last 100 ms (ingest first compares it with forwarder.ingest_first)",
    ),
    (
        Kind::Counter,
        "hookgate_ingest_saturated_windows_total",
        None,
        "100 ms windows in which ingest was saturated and deliveries were held to their share (forwarder.ingest_first)",
    ),
    (
        Kind::Counter,
        "hookgate_store_early_purged_total",
        None,
        "Delivered entries purged before their retention ended because Redis was short of memory",
    ),
    (
        Kind::Counter,
        "hookgate_log_lines_dropped_total",
        None,
        "Log lines dropped because stderr could not keep up (logging never blocks a request)",
    ),
    (
        Kind::Counter,
        "hookgate_alerts_sent_total",
        None,
        "Alert webhook messages, by result (sent, failed)",
    ),
];

fn describe() {
    for &(kind, name, unit, help) in FAMILIES {
        match (kind, unit) {
            (Kind::Counter, Some(u)) => metrics::describe_counter!(name, u, help),
            (Kind::Counter, None) => metrics::describe_counter!(name, help),
            (Kind::Gauge, Some(u)) => metrics::describe_gauge!(name, u, help),
            (Kind::Gauge, None) => metrics::describe_gauge!(name, help),
            (Kind::Histogram, Some(u)) => metrics::describe_histogram!(name, u, help),
            (Kind::Histogram, None) => metrics::describe_histogram!(name, help),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    /// README's Observability table: for each row, the metric names of its first
    /// column and the words of the whole row.
    fn readme_rows() -> Vec<(Vec<String>, BTreeSet<String>)> {
        let readme = include_str!("../../README.md");
        let section = readme
            .split("## Observability")
            .nth(1)
            .and_then(|s| s.split("\n## ").next())
            .expect("README has an Observability section");
        section
            .lines()
            .map(str::trim)
            .filter(|l| l.starts_with("| `hookgate_"))
            .map(|row| {
                let first = row.split('|').nth(1).unwrap_or_default();
                let names = first
                    .split('`')
                    .filter(|w| w.starts_with("hookgate_"))
                    .map(String::from)
                    .collect();
                let words = row
                    .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .filter(|w| !w.is_empty())
                    .map(String::from)
                    .collect();
                (names, words)
            })
            .collect()
    }

    fn row_of(rows: &[(Vec<String>, BTreeSet<String>)], family: &str) -> BTreeSet<String> {
        rows.iter()
            .find(|(names, _)| names.iter().any(|n| n == family))
            .map(|(_, words)| words.clone())
            .unwrap_or_else(|| panic!("README's metrics table has no row for {family}"))
    }

    /// A writer whose writes wait until the test drops the other end of its channel.
    struct Stuck(std::sync::mpsc::Receiver<()>);

    impl std::io::Write for Stuck {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            let _ = self.0.recv();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_stuck_stderr_drops_and_counts_lines_instead_of_blocking() {
        use std::io::Write as _;
        let (open, stuck) = std::sync::mpsc::channel::<()>();
        let (writer, guard) = log_writer(Stuck(stuck), 8);
        let started = std::time::Instant::now();
        for i in 0..1_000 {
            let mut w = writer.clone();
            w.write_all(format!("line {i}\n").as_bytes()).unwrap();
        }
        // A thousand lines against a writer that takes none: the caller never waited.
        assert!(started.elapsed() < std::time::Duration::from_secs(1));
        let dropped = writer.error_counter().dropped_lines();
        assert!(dropped >= 1_000 - 8 - 1, "{dropped}");
        drop(open);
        drop(guard);
    }

    fn one_route(source: &str) -> SourceRoutes {
        SourceRoutes {
            source: source.to_string(),
            routes: vec!["r1".to_string()],
        }
    }

    use crate::alerts::AlertResult;
    use crate::error::RequestOutcome;
    use crate::forward::{DeliveryOutcome, DeliveryResult};

    #[test]
    fn readme_table_lists_every_registered_family_and_label_value() {
        let handle = install_metrics().expect("recorder");
        register_families(&[one_route("unit_src")]);
        // The rooms that register their own vocabularies, as `app` calls them.
        crate::ingest::register_metrics(&[one_route("unit_src")]);
        crate::forward::register_metrics(
            &[one_route("unit_src")],
            &["http://127.0.0.1:9".into(), "nats://127.0.0.1:4222".into()],
        );
        crate::alerts::register_metrics();
        crate::provider::register_metrics(["unit_src"]);
        crate::serve::register_metrics();
        crate::store::register_metrics();
        crate::telemetry::traces::register_metrics();
        crate::app::register_reload_metrics();
        crate::forward::pull::register_metrics(&[("unit_src".into(), "unit_pull".into())]);
        crate::reconcile::register_metrics(["unit_src"]);
        crate::forward::register_gateway_metrics(&crate::forward::GatewayIdentity::new(
            "unit".into(),
            0,
        ));
        // A source's share of the body budget registers its shed counter.
        let _ = crate::ingest::body::BodyBudget::new(1 << 20).share("unit_src", 1024, false);
        crate::allowlist::refresh::register_metrics(&[std::sync::Arc::new(
            crate::allowlist::Published::new(
                "unit_provider",
                crate::provider::spec::Ranges {
                    url: "https://example.com/".into(),
                    published: "https://example.com/".into(),
                    pointer: "/hooks".into(),
                    field: None,
                },
            ),
        )]);
        let rendered: BTreeSet<String> = handle
            .render()
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .filter_map(|l| l.split_whitespace().next())
            .map(String::from)
            .collect();
        let rows = readme_rows();
        let documented: BTreeSet<String> =
            rows.iter().flat_map(|(names, _)| names.clone()).collect();
        assert_eq!(rendered, documented, "rendered families vs README's table");

        let check = |family: &str, labels: Vec<&str>| {
            let words = row_of(&rows, family);
            for l in labels {
                assert!(words.contains(l), "README's row of {family} lacks {l}");
            }
        };
        check(
            "hookgate_ingest_requests_total",
            RequestOutcome::ALL
                .iter()
                .filter(|o| o.counted_per_source() || **o == RequestOutcome::UnknownSource)
                .map(|o| o.label())
                .collect(),
        );
        check(
            "hookgate_ingest_unverified_total",
            crate::provider::VerifyError::ALL
                .iter()
                .map(|r| r.label())
                .collect(),
        );
        check(
            "hookgate_delivery_attempts_total",
            DeliveryResult::ALL.iter().map(|r| r.label()).collect(),
        );
        check(
            "hookgate_deliveries_total",
            DeliveryOutcome::ALL.iter().map(|r| r.label()).collect(),
        );
        check(
            "hookgate_reconcile_errors_total",
            crate::reconcile::ERROR_KINDS.to_vec(),
        );
        check(
            "hookgate_alerts_sent_total",
            AlertResult::ALL.iter().map(|r| r.label()).collect(),
        );
    }

    #[test]
    fn registered_series_start_at_zero_and_keep_later_values() {
        let handle = install_metrics().expect("recorder");
        register_families(&[one_route("unit_keep")]);
        crate::forward::register_metrics(&[one_route("unit_keep")], &[]);
        metrics::counter!("hookgate_dead_lettered_total", "source" => "unit_keep", "route" => "r1")
            .increment(3);
        // A second registration (another gateway in this process) changes nothing.
        crate::forward::register_metrics(&[one_route("unit_keep")], &[]);
        let text = handle.render();
        assert!(
            text.contains("hookgate_dead_lettered_total{source=\"unit_keep\",route=\"r1\"} 3"),
            "{text}"
        );
        assert!(
            text.contains("hookgate_retries_scheduled_total{source=\"unit_keep\",route=\"r1\"} 0"),
            "{text}"
        );
        assert!(
            text.contains("hookgate_delivery_seconds_count{source=\"unit_keep\",route=\"r1\"} 0"),
            "an unobserved histogram is rendered with a zero count:\n{text}"
        );
        assert!(
            text.contains("hookgate_entries_filtered_total{source=\"unit_keep\"} 0"),
            "{text}"
        );
    }
}
