//! The one error type of both HTTP listeners (ingest and admin), and the one place
//! where an error becomes an answer: its status, its `{"error": "..."}` body, its
//! headers (`Retry-After`, `WWW-Authenticate`) and its outcome label.
//!
//! 4xx answers carry a short, precise reason (never an expected signature or a
//! secret). 5xx answers are generic: the cause stays in the error's source chain and
//! goes to the log, not to the client.

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

mod op;

pub use op::OpError;

use crate::config::ReloadRefused;
use crate::provider::VerifyError;
use crate::store::StoreError;

/// Why a request to either listener failed. The `Display` text is what the client
/// reads in `{"error": "..."}`.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    // --- Either listener: routing.
    /// No route matches the path.
    #[error("not found")]
    NotFound,
    #[error("method not allowed")]
    MethodNotAllowed,

    // --- Ingest.
    #[error("unknown source {0:?}")]
    UnknownSource(String),
    #[error(transparent)]
    Unverified(#[from] VerifyError),
    #[error("body larger than {limit} bytes")]
    TooLarge { limit: usize },
    #[error("timed out reading the body")]
    BodyTimeout,
    #[error("could not read the body")]
    BodyRead,
    /// The shared body budget is spent; bodies in flight finish within seconds.
    #[error("too many request bodies in flight, retry later")]
    Busy,
    /// The client's address is not in the source's `allow_ips`; the body was not
    /// read.
    #[error("this address may not send to this source")]
    IpNotAllowed,
    /// The source is over its request limit (`[sources.limits]`); the body was not
    /// read.
    #[error("over this source's request limit, retry in {retry_after_secs} s")]
    RateLimited { retry_after_secs: u64 },
    /// The certificate a request names could not be fetched now (certificate
    /// schemes): 503 with `Retry-After`, so that the provider retries.
    #[error("the signing certificate cannot be fetched now, retry later")]
    CertificateUnavailable(String),
    /// An SNS subscription the source confirms (`confirm_subscriptions`) could not
    /// be confirmed now: nothing stored, 503 with `Retry-After` so that SNS sends
    /// the confirmation again.
    #[error("the subscription could not be confirmed now, retry later")]
    SubscriptionUnconfirmed(String),
    /// The store could not take a webhook: no 2xx, and a `Retry-After` so that the
    /// provider retries. The ingest handler logs the cause on the request's line.
    #[error("store unavailable, retry later")]
    NotStored(#[source] StoreError),

    // --- Admin API.
    /// A malformed parameter or body; the text names it and what it should be.
    #[error("{0}")]
    BadRequest(String),
    /// The admin bearer token is missing or wrong.
    #[error("unauthorized: missing or wrong bearer token")]
    Unauthorized,
    /// Too many wrong tokens came from this client lately (`admin::throttle`): the
    /// token was not checked.
    #[error("too many failed attempts from this client; retry in {retry_after_secs} s")]
    Throttled { retry_after_secs: u64 },
    /// An operation refused (`crate::operations`): the status follows its variant.
    #[error(transparent)]
    Op(#[from] OpError),
    /// The admin listener has no token and the request may come from a web page.
    #[error(transparent)]
    Refused(#[from] Refusal),
    #[error("unsupported media type: a request body must be JSON (Content-Type: application/json)")]
    NotJson,
    /// The forwarder is not running yet (or any more): nothing can be pulled.
    #[error("the gateway is not delivering now, retry later")]
    NotDelivering,
    /// A consumer token has as many long polls waiting as it may.
    #[error("too many long polls of this token are waiting; retry later")]
    TooManyWaiting,
}

/// What a replay or discard applied to: an entry, or one route's delivery of it
/// (also how `operations::OpError` names it).
pub(crate) fn what(id: &str, route: &Option<String>) -> String {
    match route {
        Some(r) => format!("the delivery of entry {id:?} through route {r:?}"),
        None => format!("entry {id:?}"),
    }
}

/// Why an admin listener without a token refused a request (see `admin::guard`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The request carries an `Origin` header, or a `Sec-Fetch-Site` that names
    /// another site: a browser sent it for a web page.
    #[error(
        "cross-site request refused: without an admin token the admin API answers only requests without an Origin header whose Sec-Fetch-Site, if any, is same-origin or none; set an admin token to use it from elsewhere"
    )]
    CrossSite,
    /// The `Host` is missing or not a loopback literal: possibly a DNS-rebound name.
    #[error(
        "host not loopback: without an admin token the admin API answers only requests addressed to 127.0.0.1, [::1] or localhost; set an admin token to use it from elsewhere"
    )]
    HostNotLoopback,
}

impl ApiError {
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::NotFound | ApiError::UnknownSource(_) => StatusCode::NOT_FOUND,
            ApiError::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::Unverified(_) | ApiError::Unauthorized => StatusCode::UNAUTHORIZED,
            ApiError::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::BodyTimeout => StatusCode::REQUEST_TIMEOUT,
            ApiError::BodyRead | ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::Op(op) => op_status(op),
            ApiError::Refused(_) | ApiError::IpNotAllowed => StatusCode::FORBIDDEN,
            ApiError::Throttled { .. }
            | ApiError::RateLimited { .. }
            | ApiError::TooManyWaiting => StatusCode::TOO_MANY_REQUESTS,
            ApiError::NotJson => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiError::Busy
            | ApiError::CertificateUnavailable(_)
            | ApiError::SubscriptionUnconfirmed(_)
            | ApiError::NotStored(_)
            | ApiError::NotDelivering => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// The outcome label of this error, for metrics and logs (a small fixed set).
    pub fn outcome(&self) -> RequestOutcome {
        match self {
            ApiError::NotFound => RequestOutcome::NotFound,
            ApiError::Op(op) => op_outcome(op),
            ApiError::MethodNotAllowed => RequestOutcome::MethodNotAllowed,
            ApiError::UnknownSource(_) => RequestOutcome::UnknownSource,
            ApiError::Unverified(_) => RequestOutcome::Unverified,
            ApiError::TooLarge { .. } => RequestOutcome::TooLarge,
            ApiError::BodyTimeout => RequestOutcome::BodyTimeout,
            ApiError::BodyRead => RequestOutcome::BodyRead,
            ApiError::Busy => RequestOutcome::Busy,
            ApiError::NotStored(_) => RequestOutcome::StoreError,
            ApiError::BadRequest(_) => RequestOutcome::BadRequest,
            ApiError::Unauthorized => RequestOutcome::Unauthorized,
            ApiError::Throttled { .. } => RequestOutcome::Throttled,
            ApiError::RateLimited { .. } => RequestOutcome::RateLimited,
            ApiError::IpNotAllowed => RequestOutcome::IpNotAllowed,
            ApiError::CertificateUnavailable(_) => RequestOutcome::CertificateUnavailable,
            ApiError::SubscriptionUnconfirmed(_) => RequestOutcome::SubscriptionUnconfirmed,
            ApiError::Refused(_) => RequestOutcome::Refused,
            ApiError::NotJson => RequestOutcome::NotJson,
            ApiError::NotDelivering => RequestOutcome::Busy,
            ApiError::TooManyWaiting => RequestOutcome::Throttled,
        }
    }

    /// When a client may try again, for the failures that an automated sender (a
    /// provider) should retry: its own webhook was not stored, or the body budget was
    /// spent (bodies in flight finish within seconds).
    fn retry_after(&self) -> Option<&'static str> {
        match self {
            ApiError::NotStored(_) => Some("5"),
            ApiError::CertificateUnavailable(_) | ApiError::SubscriptionUnconfirmed(_) => {
                Some("30")
            }
            ApiError::Busy | ApiError::NotDelivering | ApiError::TooManyWaiting => Some("1"),
            _ => None,
        }
    }
}

/// The status of a refused operation.
fn op_status(op: &OpError) -> StatusCode {
    match op {
        OpError::Invalid(_) => StatusCode::BAD_REQUEST,
        OpError::NoSuchEntry(_)
        | OpError::NoSuchSource(_)
        | OpError::NoSuchRoute { .. }
        | OpError::NoSuchSecret { .. }
        | OpError::NoDelivery { .. } => StatusCode::NOT_FOUND,
        OpError::NotReplayable { .. }
        | OpError::NotDiscardable { .. }
        | OpError::NoHandshake(_)
        | OpError::RouteInForce { .. }
        | OpError::NoControl
        | OpError::NotReconciled(_)
        | OpError::ReconcileBusy { .. }
        | OpError::Reload(ReloadRefused::NoFile) => StatusCode::CONFLICT,
        OpError::Reload(_) => StatusCode::UNPROCESSABLE_ENTITY,
        OpError::ReconcileFailed { .. } => StatusCode::BAD_GATEWAY,
        OpError::Store(_) | OpError::TransformUnavailable | OpError::Random(_) => {
            StatusCode::SERVICE_UNAVAILABLE
        }
    }
}

/// The outcome label of a refused operation.
fn op_outcome(op: &OpError) -> RequestOutcome {
    match op {
        OpError::Invalid(_)
        | OpError::Reload(ReloadRefused::Invalid(_))
        | OpError::Reload(ReloadRefused::NeedsRestart(_)) => RequestOutcome::BadRequest,
        OpError::NoSuchEntry(_)
        | OpError::NoSuchSource(_)
        | OpError::NoSuchRoute { .. }
        | OpError::NoSuchSecret { .. }
        | OpError::NoDelivery { .. } => RequestOutcome::NotFound,
        OpError::NotReplayable { .. }
        | OpError::NotDiscardable { .. }
        | OpError::NoHandshake(_)
        | OpError::RouteInForce { .. }
        | OpError::NoControl
        | OpError::NotReconciled(_)
        | OpError::ReconcileBusy { .. }
        | OpError::Reload(ReloadRefused::NoFile) => RequestOutcome::Conflict,
        OpError::ReconcileFailed { .. } => RequestOutcome::ProviderApi,
        OpError::Store(_) => RequestOutcome::StoreError,
        OpError::TransformUnavailable | OpError::Random(_) => RequestOutcome::Busy,
    }
}

/// A store call of an admin handler that failed: a refused operation (503, logged
/// when answered: the admin API has no per-request log line to carry it).
impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> ApiError {
        ApiError::Op(OpError::Store(e))
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if let ApiError::Op(OpError::Store(cause)) = &self {
            tracing::error!(error = %cause, "admin: store error");
        }
        if let ApiError::Op(OpError::Random(cause)) = &self {
            tracing::error!(error = %cause, "admin: the operating system's random source failed");
        }
        let mut resp = (
            self.status(),
            Json(serde_json::json!({ "error": self.to_string() })),
        )
            .into_response();
        if let Some(secs) = self.retry_after() {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static(secs));
        }
        if let ApiError::Throttled { retry_after_secs }
        | ApiError::RateLimited { retry_after_secs } = self
        {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(retry_after_secs));
        }
        if matches!(self, ApiError::Unauthorized) {
            resp.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
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

crate::telemetry::label_values! {
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
        /// Over the source's request limit (429, body not read).
        RateLimited => "rate_limited",
        /// From an address outside the source's `allow_ips` (403, body not read).
        IpNotAllowed => "ip_not_allowed",
        /// The signing certificate the request names could not be fetched (503).
        CertificateUnavailable => "certificate_unavailable",
        /// An SNS subscription the gateway confirms could not be confirmed (503).
        SubscriptionUnconfirmed => "subscription_unconfirmed",
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
        /// Too many wrong tokens from one client: answered 429 unchecked.
        Throttled => "throttled",
        /// The entry's status does not allow the replay or discard.
        Conflict => "conflict",
        /// No admin token is set and a browser may have sent it for a web page.
        Refused => "refused",
        /// A request body that is not JSON.
        NotJson => "not_json",
        /// The provider's API failed an on-demand reconciliation (502).
        ProviderApi => "provider_api",
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
                | RequestOutcome::RateLimited
                | RequestOutcome::IpNotAllowed
                | RequestOutcome::CertificateUnavailable
                | RequestOutcome::SubscriptionUnconfirmed
                | RequestOutcome::StoreError
        )
    }
}

/// The `source` label of ingest requests to a name that is not configured.
pub const UNKNOWN_SOURCE: &str = "_unknown";
