//! Reconcile a source with its provider now (`crate::reconcile`), over a chosen
//! window, as a dry run if asked: what the admin API's `POST
//! /admin/sources/{name}/reconcile` and `hookgate reconcile` do.

use std::time::Duration;

use super::{OpError, Operations};
use crate::reconcile::{Ask, Report, RunError};
use crate::store::Actor;

/// The longest window an on-demand run judges (the longest a provider keeps; a
/// pass caps it further by what its provider keeps): a longer `since` is taken as
/// this.
pub const MAX_SINCE: Duration = Duration::from_secs(30 * 24 * 3600);

/// Run a pass over `name` now, judging what the provider sent in the last `since`
/// (from the high-water mark when `None`), and without acting when `dry_run`.
pub async fn reconcile(
    ops: &Operations,
    name: &str,
    since: Option<Duration>,
    dry_run: bool,
    by: &Actor,
) -> Result<Report, OpError> {
    if !ops.has_source(name) {
        return Err(OpError::NoSuchSource(name.to_string()));
    }
    let Some(reconciler) = &ops.reconciler else {
        return Err(OpError::NotReconciled(name.to_string()));
    };
    if since.is_some_and(|s| s.is_zero()) {
        return Err(OpError::Invalid(
            "since must be a duration of at least 1s (\"6h\", \"3d\")".into(),
        ));
    }
    let since = since.map(|s| s.min(MAX_SINCE));
    let report = reconciler
        .run_now(name, Ask { since, dry_run })
        .await
        .map_err(|e| match e {
            RunError::NotReconciled(n) => OpError::NotReconciled(n),
            RunError::Busy {
                name,
                holder,
                until,
            } => OpError::ReconcileBusy {
                name,
                holder,
                until,
            },
            RunError::Failed(f) => OpError::ReconcileFailed {
                kind: f.kind(),
                message: f.to_string(),
            },
        })?;
    tracing::info!(
        source = name,
        actor = %by.name,
        dry_run,
        missing = report.missing,
        admitted = report.admitted,
        asked = report.asked,
        "reconcile: run on demand"
    );
    Ok(report)
}
