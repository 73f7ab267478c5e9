//! Why an operation (`crate::operations`) was refused: one type for every front
//! end. The admin API answers it through [`super::ApiError::Op`] (its status and
//! JSON error are decided in `error`), the console renders its own page for it.
//! It lives with the HTTP errors, below the operations, so that `ApiError` wraps it
//! instead of restating its variants.

use super::what;
use crate::config::ReloadRefused;
use crate::store::{Status, StoreError};

#[derive(Debug, thiserror::Error)]
pub enum OpError {
    /// A malformed parameter; the text names it and what it should be.
    #[error("{0}")]
    Invalid(String),
    #[error("no entry {0:?}")]
    NoSuchEntry(String),
    #[error("no source {0:?}")]
    NoSuchSource(String),
    #[error("source {name:?} has no route {route:?}")]
    NoSuchRoute { name: String, route: String },
    /// The source's provider establishes no secret in a handshake.
    #[error(
        "source {0:?} has no secret handshake: its provider's spec has no [handshake] kind = \"hook-secret\""
    )]
    NoHandshake(String),
    #[error("source {name:?} keeps no established secret {id:?}")]
    NoSuchSecret { name: String, id: String },
    #[error("entry {id:?} has no delivery through route {route:?}")]
    NoDelivery { id: String, route: String },
    /// The delivery's status does not allow a replay.
    #[error("{} is {}; only delivered, dead, discarded or filtered deliveries can be replayed", what(.id, .route), .status.as_str())]
    NotReplayable {
        id: String,
        route: Option<String>,
        status: Status,
    },
    /// The delivery's status does not allow a discard.
    #[error("{} is {}; only pending or dead deliveries can be discarded", what(.id, .route), .status.as_str())]
    NotDiscardable {
        id: String,
        route: Option<String>,
        status: Status,
    },
    #[error("store unavailable, retry later")]
    Store(#[from] StoreError),
    /// No transform worker could be started to run a preview.
    #[error("cannot run the route's transform now, retry later")]
    TransformUnavailable,
    /// A route of the table in force, where an operation takes only a retired one.
    #[error(
        "route {route:?} of source {name:?} is in force: pause it, or discard its deliveries one by one"
    )]
    RouteInForce { name: String, route: String },
    /// A configuration reload was refused.
    #[error(transparent)]
    Reload(#[from] ReloadRefused),
    /// The gateway has no configuration control (it was built without one).
    #[error("this gateway cannot reload its configuration")]
    NoControl,
    /// The source has no `[sources.reconcile]`.
    #[error(
        "source {0:?} has no [sources.reconcile]: reconciliation needs the provider's API and its credential"
    )]
    NotReconciled(String),
    /// A gateway holds the source's reconciliation lease, or its passes back off
    /// after failures, until `until` (unix ms).
    #[error(
        "source {name:?} is being reconciled by {holder} until {until} (unix ms); ask again then"
    )]
    ReconcileBusy {
        name: String,
        holder: String,
        until: i64,
    },
    /// The provider's API failed the pass (`kind` as `hookgate_reconcile_errors_total`
    /// counts it).
    #[error("the reconciliation failed ({kind}): {message}")]
    ReconcileFailed { kind: &'static str, message: String },
    /// The operating system's random source failed (a handshake's token).
    #[error("cannot draw a random token now, retry later")]
    Random(#[source] getrandom::Error),
}
