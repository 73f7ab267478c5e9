//! The admin listener's probes and scrape endpoint: `/healthz` (the process is up),
//! `/readyz` (the store answers, reads and writes) and `/metrics` (Prometheus text).

use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;

use super::{dropped_log_lines, install_metrics};
use crate::store::{Store, StoreError};

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
