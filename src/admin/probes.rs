//! The probes and scrape endpoint: `/healthz` (the process is up), `/readyz` (the
//! store takes writes: see `store::Readiness`) and `/metrics` (Prometheus text),
//! served on the admin listener and on `admin.probe_listen`. They live with the
//! admin API, above the store, so that `telemetry` stays a leaf every room may use.

use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;

use crate::store::{Readiness, Store, StoreError};
use crate::telemetry::{dropped_log_lines, install_metrics};

/// The probes and `/metrics`. None of them needs the admin token: probes say only
/// ok or ready, and Prometheus scrapers are configured per target, without the
/// token; the metrics carry counts, configured source names and destination hosts,
/// never webhook data or a secret. (Without a token, the admin listener's guard,
/// `admin::guard`, still refuses browser requests to them.)
pub fn router(store: Arc<dyn Store>, readiness: Arc<Readiness>) -> Router {
    Router::new()
        .route(
            "/healthz",
            get(|| async { Json(serde_json::json!({"status": "ok"})) }),
        )
        .route("/readyz", get(readyz))
        .route("/metrics", get(render_metrics))
        .with_state((store, readiness))
}

async fn render_metrics() -> impl IntoResponse {
    match install_metrics() {
        Some(h) => {
            metrics::counter!("hookgate_log_lines_dropped_total").absolute(dropped_log_lines());
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

async fn readyz(
    State((store, readiness)): State<(Arc<dyn Store>, Arc<Readiness>)>,
) -> impl IntoResponse {
    let probe = store.ping().await;
    if readiness.check(probe.as_ref().map(|_| ())) {
        return (StatusCode::OK, Json(serde_json::json!({"status": "ready"})));
    }
    // (`Readiness` logs each change with its cause; a probe per poll would flood.)
    let status = match probe {
        // Reachable, but it may evict keys: the operator's fix is in the log.
        Err(StoreError::Evicting { .. }) => "store may evict keys",
        Err(StoreError::NoSpace { .. }) => "store short of disk space",
        Err(StoreError::Unsafe(_)) => "store cannot keep acknowledged webhooks safe",
        Err(StoreError::ReplicasMissing { .. }) => "store has too few replicas online",
        Err(StoreError::Timeout(_)) | Err(StoreError::Backend { .. }) => {
            "store unreachable or refusing writes"
        }
        Err(_) => "store unavailable",
        Ok(()) => "store refused a recent write",
    };
    (
        StatusCode::SERVICE_UNAVAILABLE,
        Json(serde_json::json!({ "status": status })),
    )
}
