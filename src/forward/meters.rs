//! The metric handles of one route, looked up once when the route is built.
//!
//! A `metrics::counter!` with labels builds its label strings and looks the series up
//! in the recorder's registry at every call; on the delivery path that was a handful
//! of allocations and hash lookups per delivery (and a parse of the destination URL
//! for the breaker gauge's label, at every delivery and every claim loop). A route
//! holds its handles instead; recording through one is an atomic add.

use metrics::{Counter, Gauge, Histogram};

use super::retry::Decision;
use super::sender::Outcome;
use crate::failure::Failure;
use crate::telemetry::SourceRoutes;

crate::telemetry::label_values! {
    /// What one delivery attempt got: label `result` of `hookgate_delivery_attempts_total`.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum DeliveryResult {
        Status2xx => "2xx",
        Status3xx => "3xx",
        Status4xx => "4xx",
        Status5xx => "5xx",
        /// A status outside 200–599.
        OtherStatus => "other",
        Timeout => "timeout",
        Connect => "connect",
        Tls => "tls",
        Io => "io",
        /// Delivered to a destination that answers no HTTP status (a broker's
        /// acknowledgement).
        Delivered => "delivered",
        AuthRefused => "auth_refused",
        NotFound => "not_found",
        TooLarge => "too_large",
        /// The route's transform failed; nothing was sent.
        Transform => "transform",
        LeaseExpired => "lease_expired",
        Nacked => "nacked",
        Erased => "erased",
        /// An operator discarded the entry while it was sent.
        Cancelled => "cancelled",
    }
}

crate::telemetry::label_values! {
    /// What became of an entry after an attempt: label `outcome` of
    /// `hookgate_deliveries_total`.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum DeliveryOutcome {
        Delivered => "delivered",
        Retry => "retry",
        Dead => "dead",
    }
}

pub struct RouteMeters {
    /// `hookgate_delivery_attempts_total`, by `DeliveryResult` (its `ALL` order).
    attempts: Vec<Counter>,
    /// `hookgate_deliveries_total`, by `DeliveryOutcome` (its `ALL` order).
    outcomes: Vec<Counter>,
    pub delivery_seconds: Histogram,
    pub retries_scheduled: Counter,
    pub dead_lettered: Counter,
    /// `hookgate_slot_waits_expired_total`: claimed deliveries given back unsent
    /// because no destination slot (or no transform worker) came within their lease.
    pub slot_waits_expired: Counter,
    /// `hookgate_circuit_breaker_state` of the route's destination origin.
    pub breaker_state: Gauge,
    /// `hookgate_transform_skipped_total`: deliveries the transform skipped.
    pub transform_skipped: Counter,
    /// `hookgate_transform_seconds`: how long runs of the route's transform took.
    pub transform_seconds: Histogram,
}

impl RouteMeters {
    /// The handles of route `route` of `source`, delivering to `origin`. Take them
    /// after the recorder is installed (handles taken before it record nothing).
    pub fn new(source: &str, route: &str, origin: String) -> RouteMeters {
        let (s, r) = (source.to_string(), route.to_string());
        RouteMeters {
            attempts: DeliveryResult::ALL
                .iter()
                .map(|result| {
                    metrics::counter!("hookgate_delivery_attempts_total", "source" => s.clone(), "route" => r.clone(), "result" => result.label())
                })
                .collect(),
            outcomes: DeliveryOutcome::ALL
                .iter()
                .map(|outcome| {
                    metrics::counter!("hookgate_deliveries_total", "source" => s.clone(), "route" => r.clone(), "outcome" => outcome.label())
                })
                .collect(),
            delivery_seconds: metrics::histogram!("hookgate_delivery_seconds", "source" => s.clone(), "route" => r.clone()),
            retries_scheduled: metrics::counter!("hookgate_retries_scheduled_total", "source" => s.clone(), "route" => r.clone()),
            dead_lettered: metrics::counter!("hookgate_dead_lettered_total", "source" => s.clone(), "route" => r.clone()),
            slot_waits_expired: metrics::counter!("hookgate_slot_waits_expired_total", "source" => s.clone(), "route" => r.clone()),
            transform_skipped: metrics::counter!("hookgate_transform_skipped_total", "source" => s.clone(), "route" => r.clone()),
            transform_seconds: metrics::histogram!("hookgate_transform_seconds", "source" => s, "route" => r),
            breaker_state: metrics::gauge!("hookgate_circuit_breaker_state", "destination" => origin),
        }
    }

    pub fn attempt(&self, result: DeliveryResult) {
        if let Some(c) = self.attempts.get(result as usize) {
            c.increment(1);
        }
    }

    pub fn outcome(&self, outcome: DeliveryOutcome) {
        if let Some(c) = self.outcomes.get(outcome as usize) {
            c.increment(1);
        }
    }
}

/// What one attempt got, as label `result` of `hookgate_delivery_attempts_total`:
/// the HTTP status class of a delivery, or its failure's kind.
pub fn result_of(outcome: &Outcome) -> DeliveryResult {
    match outcome {
        Outcome::Delivered {
            status: Some(code), ..
        } => status_class(*code),
        Outcome::Delivered { status: None, .. } => DeliveryResult::Delivered,
        failed => failed
            .kind()
            .map_or(DeliveryResult::OtherStatus, result_of_kind),
    }
}

fn status_class(code: u16) -> DeliveryResult {
    match code {
        200..=299 => DeliveryResult::Status2xx,
        300..=399 => DeliveryResult::Status3xx,
        400..=499 => DeliveryResult::Status4xx,
        500..=599 => DeliveryResult::Status5xx,
        _ => DeliveryResult::OtherStatus,
    }
}

/// The `result` label of an attempt that failed with `kind`.
pub fn result_of_kind(kind: Failure) -> DeliveryResult {
    match kind {
        Failure::Status(code) => status_class(code),
        Failure::Timeout => DeliveryResult::Timeout,
        Failure::Connect => DeliveryResult::Connect,
        Failure::Tls => DeliveryResult::Tls,
        Failure::Io => DeliveryResult::Io,
        Failure::AuthRefused => DeliveryResult::AuthRefused,
        Failure::NotFound => DeliveryResult::NotFound,
        Failure::TooLarge => DeliveryResult::TooLarge,
        Failure::Transform(_) => DeliveryResult::Transform,
        Failure::LeaseExpired => DeliveryResult::LeaseExpired,
        Failure::Nacked => DeliveryResult::Nacked,
        Failure::Erased => DeliveryResult::Erased,
        Failure::Cancelled => DeliveryResult::Cancelled,
    }
}

/// What became of the delivery, as label `outcome` of `hookgate_deliveries_total`.
pub fn outcome_of(decision: &Decision) -> DeliveryOutcome {
    match decision {
        Decision::MarkDelivered => DeliveryOutcome::Delivered,
        Decision::RetryAt(_) => DeliveryOutcome::Retry,
        Decision::DeadLetter(_) => DeliveryOutcome::Dead,
    }
}

/// Register the delivery families with a zero series for every configured route
/// and every label value (`DeliveryResult`, `DeliveryOutcome`), and the breaker
/// gauge of every destination, so that the first scrape lists them all.
pub fn register_metrics(sources: &[SourceRoutes], destinations: &[String]) {
    use metrics::{counter, gauge, histogram};
    for SourceRoutes { source: s, routes } in sources {
        // 1 while a source with `[sources.expect]` is quiet; 0 for every other.
        gauge!("hookgate_source_quiet", "source" => s.clone()).increment(0.0);
        for r in routes {
            let route = || r.clone();
            for result in DeliveryResult::ALL {
                counter!("hookgate_delivery_attempts_total", "source" => s.clone(), "route" => route(), "result" => result.label()).increment(0);
            }
            for outcome in DeliveryOutcome::ALL {
                counter!("hookgate_deliveries_total", "source" => s.clone(), "route" => route(), "outcome" => outcome.label()).increment(0);
            }
            counter!("hookgate_retries_scheduled_total", "source" => s.clone(), "route" => route())
                .increment(0);
            counter!("hookgate_dead_lettered_total", "source" => s.clone(), "route" => route())
                .increment(0);
            counter!("hookgate_slot_waits_expired_total", "source" => s.clone(), "route" => route())
                .increment(0);
            counter!("hookgate_transform_skipped_total", "source" => s.clone(), "route" => route())
                .increment(0);
            let _ =
                histogram!("hookgate_delivery_seconds", "source" => s.clone(), "route" => route());
            let _ =
                histogram!("hookgate_transform_seconds", "source" => s.clone(), "route" => route());
            gauge!("hookgate_route_pending_deliveries", "source" => s.clone(), "route" => route())
                .increment(0.0);
            gauge!("hookgate_route_dead_deliveries", "source" => s.clone(), "route" => route())
                .increment(0.0);
            gauge!("hookgate_route_blocked_keys", "source" => s.clone(), "route" => route())
                .increment(0.0);
            gauge!("hookgate_route_retired_pending", "source" => s.clone(), "route" => route())
                .increment(0.0);
            gauge!("hookgate_route_oldest_pending_age_seconds", "source" => s.clone(), "route" => route()).increment(0.0);
        }
    }
    for d in destinations {
        gauge!("hookgate_circuit_breaker_state", "destination" => d.clone()).increment(0.0);
        let kind = match d.split_once("://").map(|(scheme, _)| scheme) {
            Some("nats" | "tls") => "nats",
            Some("amqp" | "amqps") => "amqp",
            _ => continue,
        };
        gauge!("hookgate_broker_connected", "kind" => kind, "broker" => d.clone()).increment(0.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delivery_results_cover_every_status_class() {
        let status = |code| super::super::sender::http::of_status(code, None);
        assert_eq!(result_of(&status(204)).label(), "2xx");
        assert_eq!(result_of(&status(302)).label(), "3xx");
        assert_eq!(result_of(&status(429)).label(), "4xx");
        assert_eq!(result_of(&status(503)).label(), "5xx");
        assert_eq!(result_of(&status(700)).label(), "other");
        assert_eq!(result_of_kind(Failure::Timeout).label(), "timeout");
        assert_eq!(result_of_kind(Failure::Tls).label(), "tls");
        assert_eq!(
            result_of(&Outcome::Delivered {
                status: None,
                answer: None
            })
            .label(),
            "delivered"
        );
        assert_eq!(
            result_of_kind(Failure::Transform(
                crate::failure::TransformFailure::Runtime
            ))
            .label(),
            "transform"
        );
    }
}
