//! Logs and health: the only module that installs a tracing subscriber, and the
//! `/healthz` (process up) and `/readyz` (store reachable) endpoints of the admin
//! listener.
//!
//! Log lines carry source, entry id, event id and outcome; nothing in hookgate logs
//! secrets, signatures or bodies, and dependencies are capped at `info` unless
//! `RUST_LOG` names them, so their trace output cannot leak a header either.

use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
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

pub fn router(store: Arc<dyn Store>) -> Router {
    Router::new()
        .route(
            "/healthz",
            get(|| async { Json(serde_json::json!({"status": "ok"})) }),
        )
        .route("/readyz", get(readyz))
        .with_state(store)
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
