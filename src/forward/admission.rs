//! Whether a delivery may go out, as values that cannot be forgotten.
//!
//! A half-open breaker lets exactly one probe through and waits for its verdict;
//! a probe that ends without one (nothing was due, the claim failed, the delivery
//! was given back, paused, discarded, or its task was cancelled) must hand the
//! probe back, or the breaker stays half-open for good and every route to that
//! destination stops. That hand-back was written out at seven places; here it is
//! [`ProbePermit`]'s `Drop`, and only [`ProbePermit::record`] consumes a permit
//! without it. Likewise a delivery is registered as in flight (where a discard
//! finds it to cancel it) by an [`InFlight`] guard whose drop unregisters it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;

use super::breaker::{Breaker, Gate};
use crate::clock::Clock;

/// What the breaker says to an attempt now.
pub(super) enum Admission {
    Allow,
    /// Half-open: this attempt is the one that tests the destination.
    Probe(ProbePermit),
    /// Open until this time (unix ms).
    Deny(i64),
}

/// Ask the breaker of a destination whether an attempt may go out at `now`.
pub(super) fn admit(breaker: &Arc<Breaker>, clock: &Clock, now: i64) -> Admission {
    match breaker.gate(now) {
        Gate::Allow => Admission::Allow,
        Gate::Probe => Admission::Probe(ProbePermit {
            breaker: breaker.clone(),
            clock: clock.clone(),
            recorded: false,
        }),
        Gate::Deny(until) => Admission::Deny(until),
    }
}

/// The half-open breaker's one probe. Dropped without [`ProbePermit::record`], it
/// goes back to the breaker, which grants the next probe at once.
pub(super) struct ProbePermit {
    breaker: Arc<Breaker>,
    clock: Clock,
    recorded: bool,
}

impl ProbePermit {
    /// The probe's verdict (`healthy`: the destination answered sensibly); true
    /// when it opened the breaker again.
    pub(super) fn record(mut self, healthy: bool, now: i64) -> bool {
        self.recorded = true;
        self.breaker.record(healthy, now)
    }
}

impl Drop for ProbePermit {
    fn drop(&mut self) {
        if !self.recorded {
            self.breaker.release_probe(self.clock.now_ms());
        }
    }
}

/// The deliveries in flight, by (entry id, route): a discard cancels its token.
pub(super) type InFlightMap = Mutex<HashMap<(String, String), CancellationToken>>;

/// One delivery registered as in flight, until dropped.
pub(super) struct InFlight<'a> {
    map: &'a InFlightMap,
    key: (String, String),
    /// Cancelled when an operator discards the delivery.
    pub(super) discarded: CancellationToken,
}

impl<'a> InFlight<'a> {
    pub(super) fn register(map: &'a InFlightMap, id: &str, route: &str) -> InFlight<'a> {
        let key = (id.to_string(), route.to_string());
        let discarded = CancellationToken::new();
        if let Ok(mut m) = map.lock() {
            m.insert(key.clone(), discarded.clone());
        }
        InFlight {
            map,
            key,
            discarded,
        }
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if let Ok(mut m) = self.map.lock() {
            m.remove(&self.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn opened(clock: &Clock) -> Arc<Breaker> {
        let breaker = Arc::new(Breaker::new(1, Duration::from_millis(100)));
        breaker.record(false, clock.now_ms());
        breaker
    }

    /// A delivery task holding the probe, cancelled mid-flight (aborted while it
    /// waits on its destination), hands the probe back: the breaker grants the next
    /// one instead of staying half-open for good.
    #[tokio::test]
    async fn a_probe_cancelled_mid_flight_goes_back_to_the_breaker() {
        let clock = Clock::system();
        let breaker = opened(&clock);
        let after_cooldown = clock.now_ms() + 1_000;
        let Admission::Probe(permit) = admit(&breaker, &clock, after_cooldown) else {
            panic!("the cooldown is over: a probe");
        };
        assert!(matches!(
            admit(&breaker, &clock, after_cooldown),
            Admission::Deny(_)
        ));
        let (started_tx, started_rx) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(async move {
            let _probe = permit;
            let _ = started_tx.send(());
            // The destination never answers.
            std::future::pending::<()>().await;
        });
        started_rx.await.unwrap();
        task.abort();
        assert!(task.await.unwrap_err().is_cancelled());
        assert!(matches!(
            admit(&breaker, &clock, clock.now_ms()),
            Admission::Probe(_)
        ));
    }

    /// A recorded probe is the breaker's verdict, not handed back: a healthy one
    /// closes it, a failed one opens it again.
    #[test]
    fn a_recorded_probe_is_the_verdict() {
        let clock = Clock::system();
        let breaker = opened(&clock);
        let later = clock.now_ms() + 1_000;
        let Admission::Probe(permit) = admit(&breaker, &clock, later) else {
            panic!("a probe");
        };
        assert!(!permit.record(false, later));
        assert!(matches!(admit(&breaker, &clock, later), Admission::Deny(_)));
        let much_later = later + 10_000;
        let Admission::Probe(permit) = admit(&breaker, &clock, much_later) else {
            panic!("a probe");
        };
        permit.record(true, much_later);
        assert!(matches!(
            admit(&breaker, &clock, much_later),
            Admission::Allow
        ));
    }

    /// A delivery is findable in flight while its guard lives, and only then.
    #[test]
    fn in_flight_ends_with_its_guard() {
        let map = InFlightMap::default();
        let guard = InFlight::register(&map, "e1", "r");
        let token = map
            .lock()
            .unwrap()
            .get(&("e1".to_string(), "r".to_string()))
            .cloned()
            .unwrap();
        token.cancel();
        assert!(guard.discarded.is_cancelled());
        drop(guard);
        assert!(map.lock().unwrap().is_empty());
    }
}
