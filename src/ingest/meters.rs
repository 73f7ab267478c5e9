//! Ingest's metrics: each source's handles for the outcomes every accepted request
//! has, the verification failures counted in memory until they are flushed to the
//! store, and the zero series registered at start.

use std::collections::HashMap;

use crate::error::RequestOutcome;

/// A source's ingest metrics for the outcomes every accepted request has, registered
/// once: the hot path bumps a handle instead of building a labelled key and looking
/// it up in the registry on every request. Rarer outcomes use the macros.
#[derive(Debug, Clone)]
pub struct SourceMetrics {
    pub(super) accepted: metrics::Counter,
    pub(super) duplicate: metrics::Counter,
    pub(super) handshake: metrics::Counter,
    /// Entries stored that no route's filter selected.
    pub(super) filtered: metrics::Counter,
    pub(super) ack_seconds: metrics::Histogram,
}

impl SourceMetrics {
    /// Register the handles of `source` with the installed recorder (install it
    /// first: handles taken before are no-ops).
    pub fn new(source: &str) -> Self {
        let requests = |outcome: RequestOutcome| metrics::counter!("hookgate_ingest_requests_total", "source" => source.to_string(), "outcome" => outcome.label());
        SourceMetrics {
            accepted: requests(RequestOutcome::Accepted),
            duplicate: requests(RequestOutcome::Duplicate),
            handshake: requests(RequestOutcome::Handshake),
            filtered: metrics::counter!("hookgate_entries_filtered_total", "source" => source.to_string()),
            ack_seconds: metrics::histogram!("hookgate_ingest_ack_seconds", "source" => source.to_string()),
        }
    }
}

/// Verification failures per source, counted in memory and added to the store's
/// counters by [`flush_unverified`] once a second, so that a flood of forged requests
/// never turns into a flood of store writes.
#[derive(Debug, Default)]
pub struct UnverifiedCounts(std::sync::Mutex<HashMap<String, u64>>);

impl UnverifiedCounts {
    pub(super) fn bump(&self, source: &str) {
        if let Ok(mut m) = self.0.lock() {
            *m.entry(source.to_string()).or_default() += 1;
        }
    }

    pub(super) fn take(&self) -> HashMap<String, u64> {
        self.0
            .lock()
            .map(|mut m| std::mem::take(&mut *m))
            .unwrap_or_default()
    }
}

/// Register `hookgate_ingest_requests_total` with a zero series for every configured
/// source and every outcome counted per source, and the unknown source's, so that
/// the first scrape lists them all.
pub fn register_metrics(sources: &[crate::telemetry::SourceRoutes]) {
    use crate::error::{RequestOutcome, UNKNOWN_SOURCE};
    for outcome in RequestOutcome::ALL {
        if !outcome.counted_per_source() {
            continue;
        }
        for s in sources {
            metrics::counter!("hookgate_ingest_requests_total", "source" => s.source.clone(), "outcome" => outcome.label()).increment(0);
        }
    }
    metrics::counter!("hookgate_ingest_requests_total", "source" => UNKNOWN_SOURCE, "outcome" => RequestOutcome::UnknownSource.label()).increment(0);
}
