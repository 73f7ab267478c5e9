//! A source's request limit (`[sources.limits] requests = "100/s"`).
//!
//! A sender that floods a source (a provider replaying a backlog, a misconfigured
//! integration, a forger who found the URL) must not take the gateway or its store
//! from everything else. Every request to a limited source takes a slot of a GCRA
//! pace kept in the store ([`crate::store::Pacing::take_request_slot`]), so every
//! gateway on one store shares one limit. Over it, the request is answered 429 with
//! `Retry-After` (every provider retries a 429) before its body is read.
//!
//! The refusals are counted (`hookgate_ingest_requests_total{outcome="rate_limited"}`)
//! and logged once per burst: when the source goes over its limit, and when it comes
//! back under, with how many were refused in between.
//!
//! When the store cannot answer, the request is let through: the limit protects the
//! gateway, it does not decide what is genuine, and the store write that follows
//! decides whether the webhook can be taken at all.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use crate::config::RateLimit;
use crate::error::ApiError;
use crate::store::Store;
use crate::telemetry;

/// One source's limit and the state of its current burst.
#[derive(Debug)]
pub struct RequestLimit {
    /// One request per `spacing`, up to `burst` at once.
    spacing: Duration,
    burst: u32,
    per_second: f64,
    /// Whether the last request was refused (a burst is going on).
    over: AtomicBool,
    /// Requests refused in the current burst.
    refused: AtomicU64,
}

impl RequestLimit {
    pub fn new(limit: RateLimit) -> RequestLimit {
        RequestLimit {
            spacing: Duration::from_secs_f64(1.0 / limit.per_second),
            burst: limit.burst,
            per_second: limit.per_second,
            over: AtomicBool::new(false),
            refused: AtomicU64::new(0),
        }
    }

    /// Take a request slot of `source` at `now_ms`: `Ok(())` when the request may be
    /// read, [`ApiError::RateLimited`] when the source is over its limit.
    /// A store that does not answer within `timeout` lets the request through.
    pub async fn admit(
        &self,
        store: &dyn Store,
        source: &str,
        now_ms: i64,
        timeout: Duration,
    ) -> Result<(), ApiError> {
        let slot = tokio::time::timeout(
            timeout,
            store.take_request_slot(source, now_ms, self.spacing, self.burst),
        )
        .await
        .unwrap_or(Err(crate::store::StoreError::Timeout(timeout)));
        match slot {
            Ok(None) => {
                if self.over.swap(false, Ordering::Relaxed) {
                    let refused = self.refused.swap(0, Ordering::Relaxed);
                    tracing::info!(
                        source,
                        refused,
                        "ingest: source back under its request limit"
                    );
                }
                Ok(())
            }
            Ok(Some(at)) => {
                self.refused.fetch_add(1, Ordering::Relaxed);
                if !self.over.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        source,
                        limit_per_second = self.per_second,
                        burst = self.burst,
                        "ingest: source over its request limit, answering 429 until it is back under"
                    );
                }
                Err(ApiError::RateLimited {
                    retry_after_secs: retry_after_secs(at, now_ms),
                })
            }
            Err(e) => {
                const MSG: &str =
                    "ingest: the request limit could not be checked; request let through";
                if telemetry::throttle::hit(MSG, source) {
                    tracing::warn!(source, error = %e, "{MSG}");
                }
                Ok(())
            }
        }
    }
}

/// Whole seconds from `now_ms` until `at_ms`, rounded up, at least one: what
/// `Retry-After` says.
fn retry_after_secs(at_ms: i64, now_ms: i64) -> u64 {
    let wait = at_ms.saturating_sub(now_ms).max(1);
    u64::try_from(wait.div_euclid(1000) + i64::from(wait.rem_euclid(1000) != 0))
        .unwrap_or(1)
        .max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_rounds_up_to_whole_seconds() {
        assert_eq!(retry_after_secs(1_000, 1_000), 1);
        assert_eq!(retry_after_secs(1_010, 1_000), 1);
        assert_eq!(retry_after_secs(2_000, 1_000), 1);
        assert_eq!(retry_after_secs(2_001, 1_000), 2);
        assert_eq!(retry_after_secs(0, 1_000), 1);
    }
}
