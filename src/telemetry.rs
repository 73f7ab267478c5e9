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
use crate::store::Store;

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
        "Ingest requests by source and outcome (accepted, duplicate, handshake, unverified, too_large, body_timeout, body_read, store_error, unknown_source, method_not_allowed)"
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
        "Delivery attempts by source and result (2xx, 3xx, 4xx, 5xx, timeout, connect, io)"
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
            tracing::warn!(error = %e, "readyz: store unreachable");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                Json(serde_json::json!({"status": "store unreachable"})),
            )
        }
    }
}
