//! A source's request limit (`[sources.limits] requests = "100/s"`), and the
//! budget of unverified requests per client that comes with it
//! (`unverified_per_client`, 10 a second by default).
//!
//! A sender that floods a source (a provider replaying a backlog, a misconfigured
//! integration) must not take the gateway or its store from everything else. But a
//! limit anyone can spend is a way to deny the provider: a forger who found the URL
//! would have the provider's genuine webhooks refused. So a request takes a slot of
//! the source's limit only once its signature verifies: a GCRA pace kept in the
//! store ([`crate::store::Pacing::take_request_slot`]), so every gateway on one store
//! shares one limit. Over it, the request is answered 429 with `Retry-After` (every
//! provider retries a 429), and until then the source counts as over: later
//! requests are answered 429 from their headers, before their body is read.
//!
//! A request that fails verification is charged to its client instead (an IPv4
//! address, an IPv6 prefix; behind trusted proxies, the client they name): a budget
//! kept in this process. A client over it is answered 429 from its headers, before
//! its body is read, so a forger spends their own budget and nobody else's.
//!
//! The refusals are counted (`hookgate_ingest_requests_total{outcome="rate_limited"}`)
//! and logged when the source goes over its limit and when it comes back under, at
//! most once per [`telemetry::throttle::WINDOW`] each (a limit met at the edge would
//! go over and back many times a second).
//!
//! When the store cannot answer, the request is let through: the limit protects the
//! gateway, it does not decide what is genuine, and the store write that follows
//! decides whether the webhook can be taken at all.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use crate::config::RateLimit;
use crate::error::ApiError;
use crate::store::Store;
use crate::telemetry;

/// The most clients whose unverified requests are remembered at once; past it,
/// the ones whose budget is whole again are forgotten, and a new client is
/// refused until there is room (a flood from that many addresses at once).
const MAX_CLIENTS: usize = 65_536;

/// One source's limit and the state of its current burst.
#[derive(Debug)]
pub struct RequestLimit {
    /// One request per `spacing`, up to `burst` at once.
    spacing: Duration,
    burst: u32,
    per_second: f64,
    /// Until when (unix ms) the source counts as over its limit: requests are
    /// answered 429 from their headers until then. 0: not over.
    over_until: AtomicI64,
    /// Whether the last verified request was refused (a burst is going on).
    over: AtomicBool,
    /// Requests refused in the current burst.
    refused: AtomicU64,
    /// The budget of unverified requests per client.
    unverified: Option<ClientBudget>,
}

impl RequestLimit {
    /// The limit of verified requests, `None` for none; and the budget of
    /// unverified ones per client.
    pub fn new(limit: Option<RateLimit>, unverified_per_client: Option<RateLimit>) -> RequestLimit {
        let (spacing, burst, per_second) = match limit {
            Some(l) => (
                Duration::from_secs_f64(1.0 / l.per_second),
                l.burst,
                l.per_second,
            ),
            None => (Duration::ZERO, 0, 0.0),
        };
        RequestLimit {
            spacing,
            burst,
            per_second,
            over_until: AtomicI64::new(0),
            over: AtomicBool::new(false),
            refused: AtomicU64::new(0),
            unverified: unverified_per_client.map(ClientBudget::new),
        }
    }

    /// Whether the source has a limit of verified requests.
    fn limits_verified(&self) -> bool {
        self.per_second > 0.0
    }

    /// What the headers alone decide, before the body is read: 429 when the source
    /// is over its limit (as last found), or when `client` spent its budget of
    /// unverified requests.
    pub fn refuse_early(&self, client: Option<IpAddr>, now_ms: i64) -> Result<(), ApiError> {
        let over_until = self.over_until.load(Ordering::Relaxed);
        if now_ms < over_until {
            self.refused.fetch_add(1, Ordering::Relaxed);
            return Err(ApiError::RateLimited {
                retry_after_secs: retry_after_secs(over_until, now_ms),
            });
        }
        if let (Some(budget), Some(client)) = (&self.unverified, client)
            && let Some(at) = budget.spent_until(client, now_ms)
        {
            return Err(ApiError::RateLimited {
                retry_after_secs: retry_after_secs(at, now_ms),
            });
        }
        Ok(())
    }

    /// Charge a request that failed verification to `client`'s budget.
    pub fn unverified(&self, client: Option<IpAddr>, now_ms: i64) {
        if let (Some(budget), Some(client)) = (&self.unverified, client) {
            budget.charge(client, now_ms);
        }
    }

    /// Take a request slot of `source` at `now_ms` for a verified request: `Ok(())`
    /// when it may be taken, [`ApiError::RateLimited`] when the source is over its
    /// limit. A store that does not answer within `timeout` lets the request through.
    pub async fn admit(
        &self,
        store: &dyn Store,
        source: &str,
        now_ms: i64,
        timeout: Duration,
    ) -> Result<(), ApiError> {
        if !self.limits_verified() {
            return Ok(());
        }
        let slot = tokio::time::timeout(
            timeout,
            store.take_request_slot(source, now_ms, self.spacing, self.burst),
        )
        .await
        .unwrap_or(Err(crate::store::StoreError::Timeout(timeout)));
        match slot {
            Ok(None) => {
                if self.over.swap(false, Ordering::Relaxed) {
                    const MSG: &str = "ingest: source back under its request limit";
                    let refused = self.refused.swap(0, Ordering::Relaxed);
                    if telemetry::throttle::hit(MSG, source) {
                        tracing::info!(source, refused, "{MSG}");
                    }
                }
                Ok(())
            }
            Ok(Some(at)) => {
                self.refused.fetch_add(1, Ordering::Relaxed);
                self.over_until.fetch_max(at, Ordering::Relaxed);
                if !self.over.swap(true, Ordering::Relaxed) {
                    const MSG: &str = "ingest: source over its request limit, answering 429 until it is back under";
                    if telemetry::throttle::hit(MSG, source) {
                        tracing::warn!(
                            source,
                            limit_per_second = self.per_second,
                            burst = self.burst,
                            "{MSG}"
                        );
                    }
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

/// A budget of requests per client, kept in this process: a GCRA pace per client,
/// its theoretical arrival time in unix ms.
#[derive(Debug)]
struct ClientBudget {
    spacing_ms: f64,
    /// How far ahead of now a client's arrival time may run: its burst, less one.
    tolerance_ms: f64,
    tats: Mutex<HashMap<IpAddr, f64>>,
}

impl ClientBudget {
    fn new(limit: RateLimit) -> ClientBudget {
        let spacing_ms = 1000.0 / limit.per_second;
        ClientBudget {
            spacing_ms,
            tolerance_ms: spacing_ms * f64::from(limit.burst.max(1) - 1),
            tats: Mutex::new(HashMap::new()),
        }
    }

    /// Until when (unix ms) `client` has spent its budget, if it has.
    fn spent_until(&self, client: IpAddr, now_ms: i64) -> Option<i64> {
        let tats = self.tats.lock().unwrap_or_else(|p| p.into_inner());
        if tats.len() >= MAX_CLIENTS && !tats.contains_key(&client) {
            return Some(now_ms + 1000);
        }
        let tat = *tats.get(&client)?;
        let open_at = tat - self.tolerance_ms;
        // Whole milliseconds, rounded up; the pace is far coarser.
        #[allow(clippy::cast_possible_truncation)]
        let open_at = open_at.ceil() as i64;
        (open_at > now_ms).then_some(open_at)
    }

    /// Count one request of `client` at `now_ms`.
    fn charge(&self, client: IpAddr, now_ms: i64) {
        #[allow(clippy::cast_precision_loss)]
        let now = now_ms as f64;
        let mut tats = self.tats.lock().unwrap_or_else(|p| p.into_inner());
        if tats.len() >= MAX_CLIENTS && !tats.contains_key(&client) {
            tats.retain(|_, tat| *tat > now);
            if tats.len() >= MAX_CLIENTS {
                return;
            }
        }
        let tat = tats.entry(client).or_insert(now);
        // A client that kept sending past its budget does not run up a debt
        // beyond it: the tolerance bounds how long it waits.
        *tat = (tat.max(now) + self.spacing_ms).min(now + self.tolerance_ms + self.spacing_ms);
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
    fn a_client_spends_its_own_budget_of_unverified_requests() {
        let limit = RequestLimit::new(
            None,
            Some(RateLimit {
                per_second: 10.0,
                burst: 10,
            }),
        );
        let (forger, genuine) = (
            Some("192.0.2.1".parse().unwrap()),
            Some("192.0.2.2".parse().unwrap()),
        );
        let now = 1_000_000;
        for _ in 0..10 {
            limit.refuse_early(forger, now).unwrap();
            limit.unverified(forger, now);
        }
        let Err(ApiError::RateLimited { retry_after_secs }) = limit.refuse_early(forger, now)
        else {
            panic!("the forger's budget is spent");
        };
        assert_eq!(retry_after_secs, 1);
        // Another client is untouched; the forger's budget comes back with time,
        // one request per tenth of a second, and a flood runs up no debt.
        limit.refuse_early(genuine, now).unwrap();
        for _ in 0..1000 {
            limit.unverified(forger, now);
        }
        assert!(limit.refuse_early(forger, now + 50).is_err());
        limit.refuse_early(forger, now + 200).unwrap();
    }

    #[test]
    fn retry_after_rounds_up_to_whole_seconds() {
        assert_eq!(retry_after_secs(1_000, 1_000), 1);
        assert_eq!(retry_after_secs(1_010, 1_000), 1);
        assert_eq!(retry_after_secs(2_000, 1_000), 1);
        assert_eq!(retry_after_secs(2_001, 1_000), 2);
        assert_eq!(retry_after_secs(0, 1_000), 1);
    }
}
