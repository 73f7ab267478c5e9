//! The HTTP boundary's one error type, mapped to answers in one place.
//!
//! 4xx answers carry a short, precise reason (never an expected signature or a
//! secret). 5xx answers are generic: the cause goes to the log line of the request,
//! not to the client.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use crate::provider::VerifyError;
use crate::store::StoreError;
use crate::telemetry::IngestOutcome;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("unknown source {0:?}")]
    UnknownSource(String),
    #[error("not found")]
    NotFound,
    #[error("method not allowed")]
    MethodNotAllowed,
    #[error(transparent)]
    Unverified(#[from] VerifyError),
    #[error("body larger than {limit} bytes")]
    TooLarge { limit: usize },
    #[error("timed out reading the body")]
    BodyTimeout,
    #[error("could not read the body")]
    BodyRead,
    #[error("too many request bodies in flight, retry later")]
    Busy,
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl ApiError {
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::UnknownSource(_) | ApiError::NotFound => StatusCode::NOT_FOUND,
            ApiError::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::Unverified(_) => StatusCode::UNAUTHORIZED,
            ApiError::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::BodyTimeout => StatusCode::REQUEST_TIMEOUT,
            ApiError::BodyRead => StatusCode::BAD_REQUEST,
            ApiError::Busy | ApiError::Store(_) => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// The outcome category for metrics (a small fixed set).
    pub fn outcome(&self) -> IngestOutcome {
        match self {
            ApiError::UnknownSource(_) => IngestOutcome::UnknownSource,
            ApiError::NotFound => IngestOutcome::NotFound,
            ApiError::MethodNotAllowed => IngestOutcome::MethodNotAllowed,
            ApiError::Unverified(_) => IngestOutcome::Unverified,
            ApiError::TooLarge { .. } => IngestOutcome::TooLarge,
            ApiError::BodyTimeout => IngestOutcome::BodyTimeout,
            ApiError::BodyRead => IngestOutcome::BodyRead,
            ApiError::Busy => IngestOutcome::Busy,
            ApiError::Store(_) => IngestOutcome::StoreError,
        }
    }

    /// A stable label for logs and metrics.
    pub fn code(&self) -> &'static str {
        match self {
            ApiError::UnknownSource(_) => "unknown_source",
            ApiError::NotFound => "not_found",
            ApiError::MethodNotAllowed => "method_not_allowed",
            ApiError::Unverified(e) => e.code(),
            ApiError::TooLarge { .. } => "too_large",
            ApiError::BodyTimeout => "body_timeout",
            ApiError::BodyRead => "body_read",
            ApiError::Busy => "busy",
            ApiError::Store(_) => "store_unavailable",
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        let message = match &self {
            // Don't expose internals: the provider only needs to know to retry.
            ApiError::Store(_) => "store unavailable, retry later".to_string(),
            other => other.to_string(),
        };
        let mut resp = (status, Json(serde_json::json!({ "error": message }))).into_response();
        let retry_after = match self {
            ApiError::Store(_) => Some("5"),
            // Bodies in flight finish within seconds.
            ApiError::Busy => Some("1"),
            _ => None,
        };
        if let Some(secs) = retry_after {
            resp.headers_mut().insert(
                axum::http::header::RETRY_AFTER,
                axum::http::HeaderValue::from_static(secs),
            );
        }
        resp
    }
}

/// The answer when a handler panics (a bug): a generic 500 instead of a dropped
/// connection, and one ERROR line. Used by the `CatchPanicLayer` around each router.
pub fn panic_response(panic: Box<dyn std::any::Any + Send + 'static>) -> Response {
    let what = panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_default();
    let what: String = what.chars().take(200).collect();
    tracing::error!(panic = %what, "a request handler panicked; answered 500");
    (
        StatusCode::INTERNAL_SERVER_ERROR,
        Json(serde_json::json!({ "error": "internal error" })),
    )
        .into_response()
}
