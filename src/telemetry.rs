//! Logs, metrics and health: the only module that installs a tracing subscriber or a
//! metrics exporter. Serves `/metrics` (Prometheus text), `/healthz` (process up) and
//! `/readyz` (store reachable) on the admin listener, open even when an admin token
//! is configured (see [`router`]).
//!
//! Modules record through the `metrics` facade; names follow Prometheus conventions
//! (`hookgate_…_total`, `…_seconds`) and labels are bounded (source and destination
//! names from the configuration, fixed outcome sets; never event or entry ids).
//!
//! Log lines carry source, entry id, event id and outcome; nothing in hookgate logs
//! secrets, signatures or bodies, and dependencies are capped at `info` unless
//! `RUST_LOG` names them, so their trace output cannot leak a header either.

use std::sync::{Arc, OnceLock};

use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tracing_subscriber::EnvFilter;

use crate::config::LogFormat;
use crate::forward::retry::{Decision, Outcome};
use crate::provider::VerifyError;
use crate::store::{Store, StoreError};

/// Install the global subscriber. `RUST_LOG` filters (default `info`).
pub fn init(format: LogFormat) {
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
        "tower",
        "axum",
    ] {
        if !spec.contains(dep)
            && let Ok(d) = format!("{dep}=info").parse()
        {
            filter = filter.add_directive(d);
        }
    }
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
        LogFormat::Human => builder.try_init(),
    };
}

/// An enum of metric label values, with `ALL` (every variant, in declaration order)
/// and `label()`. Declared through this macro, a variant cannot lack its label nor be
/// left out of `ALL`, so [`register_families`] registers every value the code emits.
/// Attributes (docs, derives, `#[error]`) pass through to the enum and its variants.
macro_rules! label_values {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident => $label:literal, )+
        }
    ) => {
        $(#[$meta])*
        $vis enum $name {
            $( $(#[$vmeta])* $variant, )+
        }

        impl $name {
            /// Every variant, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant,)+];

            /// The metric label value.
            pub fn label(&self) -> &'static str {
                match self {
                    $( $name::$variant => $label, )+
                }
            }
        }
    };
}
pub(crate) use label_values;

label_values! {
    /// How a request to either listener ended: on the ingest listener, label `outcome`
    /// of `hookgate_ingest_requests_total`; the admin API's outcomes are not counted.
    /// One vocabulary for both, so that an error has one label (`ApiError::outcome`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum RequestOutcome {
        Accepted => "accepted",
        Duplicate => "duplicate",
        /// A verified handshake (Slack's `url_verification`) was answered.
        Handshake => "handshake",
        Unverified => "unverified",
        TooLarge => "too_large",
        BodyTimeout => "body_timeout",
        BodyRead => "body_read",
        /// The body budget was spent (503).
        Busy => "busy",
        StoreError => "store_error",
        /// Counted under the source `_unknown`.
        UnknownSource => "unknown_source",
        /// No such route (never counted: no source to count under), or no such entry
        /// or source in the admin API.
        NotFound => "not_found",
        /// The routing fallback for a known path: answered, never counted.
        MethodNotAllowed => "method_not_allowed",
        // The admin API's own refusals (never counted).
        /// A malformed parameter or body.
        BadRequest => "bad_request",
        /// A missing or wrong bearer token.
        Unauthorized => "unauthorized",
        /// The entry's status does not allow the replay or discard.
        Conflict => "conflict",
        /// No admin token is set and a browser may have sent it for a web page.
        Refused => "refused",
        /// A request body that is not JSON.
        NotJson => "not_json",
    }
}

impl RequestOutcome {
    /// Whether this outcome is counted under a configured source's name (the others
    /// are counted under `_unknown`, or not at all).
    pub fn counted_per_source(self) -> bool {
        matches!(
            self,
            RequestOutcome::Accepted
                | RequestOutcome::Duplicate
                | RequestOutcome::Handshake
                | RequestOutcome::Unverified
                | RequestOutcome::TooLarge
                | RequestOutcome::BodyTimeout
                | RequestOutcome::BodyRead
                | RequestOutcome::Busy
                | RequestOutcome::StoreError
        )
    }
}

/// The `source` label of ingest requests to a name that is not configured.
pub const UNKNOWN_SOURCE: &str = "_unknown";

label_values! {
    /// What one delivery attempt got: label `result` of `hookgate_delivery_attempts_total`.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum DeliveryResult {
        Status2xx => "2xx",
        Status3xx => "3xx",
        Status4xx => "4xx",
        Status5xx => "5xx",
        /// A status outside 200–599.
        OtherStatus => "other",
        Timeout => "timeout",
        Connect => "connect",
        Io => "io",
    }
}

impl DeliveryResult {
    pub fn of(outcome: &Outcome) -> DeliveryResult {
        match outcome {
            Outcome::Status { code, .. } => match code {
                200..=299 => DeliveryResult::Status2xx,
                300..=399 => DeliveryResult::Status3xx,
                400..=499 => DeliveryResult::Status4xx,
                500..=599 => DeliveryResult::Status5xx,
                _ => DeliveryResult::OtherStatus,
            },
            Outcome::Timeout => DeliveryResult::Timeout,
            Outcome::Connect(_) => DeliveryResult::Connect,
            Outcome::Io(_) => DeliveryResult::Io,
        }
    }
}

label_values! {
    /// What became of an entry after an attempt: label `outcome` of
    /// `hookgate_deliveries_total`.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum DeliveryOutcome {
        Delivered => "delivered",
        Retry => "retry",
        Dead => "dead",
    }
}

impl DeliveryOutcome {
    pub fn of(decision: &Decision) -> DeliveryOutcome {
        match decision {
            Decision::MarkDelivered => DeliveryOutcome::Delivered,
            Decision::RetryAt(_) => DeliveryOutcome::Retry,
            Decision::DeadLetter(_) => DeliveryOutcome::Dead,
        }
    }
}

label_values! {
    /// Label `result` of `hookgate_alerts_sent_total`.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum AlertResult {
        Sent => "sent",
        Failed => "failed",
    }
}

/// Register every metric family with a zero series for each configured source (and
/// each destination origin), for every label value the code can emit. Without this a
/// series is born at its first event, and Prometheus, having no earlier sample, sees
/// no increase: `increase(hookgate_dead_lettered_total[15m]) > 0` would never fire
/// on the first dead letter. Call after [`install_metrics`] (handles taken before it
/// are no-ops). Registering never changes a value already there. Histograms
/// registered without an observation are rendered with a zero count, sum and buckets.
pub fn register_families(sources: &[String], destinations: &[String]) {
    use metrics::{counter, gauge, histogram};
    for outcome in RequestOutcome::ALL {
        if !outcome.counted_per_source() {
            continue;
        }
        for s in sources {
            counter!("hookgate_ingest_requests_total", "source" => s.clone(), "outcome" => outcome.label()).increment(0);
        }
    }
    counter!("hookgate_ingest_requests_total", "source" => UNKNOWN_SOURCE, "outcome" => RequestOutcome::UnknownSource.label()).increment(0);
    for s in sources {
        for reason in VerifyError::ALL {
            counter!("hookgate_ingest_unverified_total", "source" => s.clone(), "reason" => reason.label()).increment(0);
        }
        // Registered, not observed: rendered with a zero count.
        let _ = histogram!("hookgate_ingest_ack_seconds", "source" => s.clone());
        for result in DeliveryResult::ALL {
            counter!("hookgate_delivery_attempts_total", "source" => s.clone(), "result" => result.label()).increment(0);
        }
        for outcome in DeliveryOutcome::ALL {
            counter!("hookgate_deliveries_total", "source" => s.clone(), "outcome" => outcome.label()).increment(0);
        }
        counter!("hookgate_retries_scheduled_total", "source" => s.clone()).increment(0);
        counter!("hookgate_dead_lettered_total", "source" => s.clone()).increment(0);
        let _ = histogram!("hookgate_delivery_seconds", "source" => s.clone());
        gauge!("hookgate_pending_entries", "source" => s.clone()).increment(0.0);
        gauge!("hookgate_dead_entries", "source" => s.clone()).increment(0.0);
        gauge!("hookgate_oldest_pending_age_seconds", "source" => s.clone()).increment(0.0);
    }
    for d in destinations {
        gauge!("hookgate_circuit_breaker_state", "destination" => d.clone()).increment(0.0);
    }
    for result in AlertResult::ALL {
        counter!("hookgate_alerts_sent_total", "result" => result.label()).increment(0);
    }
}

/// Latency buckets (seconds) for the ack and delivery histograms.
const BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

static PROMETHEUS: OnceLock<Option<PrometheusHandle>> = OnceLock::new();

/// Install the Prometheus recorder (once per process) and describe the metrics.
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
            Some(handle)
        })
        .as_ref()
}

fn describe() {
    use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
    describe_counter!(
        "hookgate_ingest_requests_total",
        "Ingest requests by source and outcome (accepted, duplicate, handshake, unverified, too_large, body_timeout, body_read, busy, store_error; unknown_source under source _unknown)"
    );
    describe_counter!(
        "hookgate_ingest_unverified_total",
        "Ingest requests refused by verification, by source and reason"
    );
    describe_histogram!(
        "hookgate_ingest_ack_seconds",
        Unit::Seconds,
        "Time from request to 2xx for stored (or duplicate) webhooks"
    );
    describe_counter!(
        "hookgate_delivery_attempts_total",
        "Delivery attempts by source and result (2xx, 3xx, 4xx, 5xx, other, timeout, connect, io)"
    );
    describe_counter!(
        "hookgate_deliveries_total",
        "Attempt outcomes by source: delivered, retry, dead"
    );
    describe_counter!(
        "hookgate_retries_scheduled_total",
        "Retries scheduled after a failed attempt, by source"
    );
    describe_counter!(
        "hookgate_dead_lettered_total",
        "Entries moved to the dead-letter queue, by source"
    );
    describe_histogram!(
        "hookgate_delivery_seconds",
        Unit::Seconds,
        "Duration of delivery attempts, by source"
    );
    describe_gauge!(
        "hookgate_pending_entries",
        "Entries waiting for delivery, by source"
    );
    describe_gauge!(
        "hookgate_dead_entries",
        "Entries in the dead-letter queue, by source"
    );
    describe_gauge!(
        "hookgate_oldest_pending_age_seconds",
        Unit::Seconds,
        "Age of the oldest pending entry, by source (0 when none)"
    );
    describe_gauge!(
        "hookgate_circuit_breaker_state",
        "Circuit breaker per destination: 0 closed, 1 half-open, 2 open"
    );
    describe_counter!(
        "hookgate_alerts_sent_total",
        "Alert webhook messages, by result (sent, failed)"
    );
}

/// The probes and `/metrics`. None of them needs the admin token: probes say only
/// ok or ready, and Prometheus scrapers are configured per target, without the
/// token; the metrics carry counts, configured source names and destination hosts,
/// never webhook data or a secret. (Without a token, the admin listener's guard,
/// `admin::guard`, still refuses browser requests to them.)
pub fn router(store: Arc<dyn Store>) -> Router {
    Router::new()
        .route(
            "/healthz",
            get(|| async { Json(serde_json::json!({"status": "ok"})) }),
        )
        .route("/readyz", get(readyz))
        .route("/metrics", get(render_metrics))
        .with_state(store)
}

async fn render_metrics() -> impl IntoResponse {
    match install_metrics() {
        Some(h) => {
            h.run_upkeep();
            (
                StatusCode::OK,
                [(
                    axum::http::header::CONTENT_TYPE,
                    "text/plain; version=0.0.4; charset=utf-8",
                )],
                h.render(),
            )
        }
        None => (
            StatusCode::SERVICE_UNAVAILABLE,
            [(
                axum::http::header::CONTENT_TYPE,
                "text/plain; charset=utf-8",
            )],
            "metrics recorder unavailable\n".to_string(),
        ),
    }
}

async fn readyz(State(store): State<Arc<dyn Store>>) -> impl IntoResponse {
    match store.ping().await {
        Ok(()) => (StatusCode::OK, Json(serde_json::json!({"status": "ready"}))),
        Err(e) => {
            tracing::warn!(error = %e, "readyz: store not ready");
            let status = match e {
                // Reachable, but it may evict keys: the operator's fix is in the log.
                StoreError::Evicting { .. } => "store may evict keys",
                _ => "store unreachable",
            };
            (
                StatusCode::SERVICE_UNAVAILABLE,
                Json(serde_json::json!({ "status": status })),
            )
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
        let readme = include_str!("../README.md");
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

    #[test]
    fn readme_table_lists_every_registered_family_and_label_value() {
        let handle = install_metrics().expect("recorder");
        register_families(&["unit_src".into()], &["http://127.0.0.1:9".into()]);
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
            VerifyError::ALL.iter().map(|r| r.label()).collect(),
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
            "hookgate_alerts_sent_total",
            AlertResult::ALL.iter().map(|r| r.label()).collect(),
        );
    }

    #[test]
    fn registered_series_start_at_zero_and_keep_later_values() {
        let handle = install_metrics().expect("recorder");
        register_families(&["unit_keep".into()], &[]);
        metrics::counter!("hookgate_dead_lettered_total", "source" => "unit_keep").increment(3);
        // A second registration (another gateway in this process) changes nothing.
        register_families(&["unit_keep".into()], &[]);
        let text = handle.render();
        assert!(
            text.contains("hookgate_dead_lettered_total{source=\"unit_keep\"} 3"),
            "{text}"
        );
        assert!(
            text.contains("hookgate_retries_scheduled_total{source=\"unit_keep\"} 0"),
            "{text}"
        );
        assert!(
            text.contains("hookgate_delivery_seconds_count{source=\"unit_keep\"} 0"),
            "an unobserved histogram is rendered with a zero count:\n{text}"
        );
    }

    #[test]
    fn delivery_results_cover_every_status_class() {
        let status = |code| Outcome::Status {
            code,
            retry_after: None,
        };
        assert_eq!(DeliveryResult::of(&status(204)).label(), "2xx");
        assert_eq!(DeliveryResult::of(&status(302)).label(), "3xx");
        assert_eq!(DeliveryResult::of(&status(429)).label(), "4xx");
        assert_eq!(DeliveryResult::of(&status(503)).label(), "5xx");
        assert_eq!(DeliveryResult::of(&status(700)).label(), "other");
        assert_eq!(DeliveryResult::of(&Outcome::Timeout).label(), "timeout");
    }
}
