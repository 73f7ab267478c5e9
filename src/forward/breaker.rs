//! A circuit breaker per destination.
//!
//! After `threshold` consecutive destination failures (timeouts, connection errors,
//! 429, 5xx) the breaker opens: the forwarder stops claiming entries for that
//! destination, so they wait without burning attempts. After the cooldown one probe
//! is let through (half-open): success closes the breaker, failure opens it again
//! with a doubled cooldown (at most 10× the configured one). Time is passed in.
//!
//! The probe is claimed with `Store::claim_probe`: a due delivery that failed before
//! (a retry) rather than a new one, when there is one. A destination that fails only
//! first attempts (it answers 503 to each event's first delivery, 200 to a retry)
//! then accepts the probe and the breaker closes; a probe of a new delivery would
//! fail every time, and the cooldown would only grow.
//!
//! A destination that comes back after an outage faces every entry that waited, all
//! overdue at once. So a breaker that closes after a probe ramps up: [`Breaker::ramp`]
//! allows one attempt in flight, doubling every [`RAMP_STEP_MS`], up to the
//! destination's concurrency (slow start, as TCP does).

use std::sync::Mutex;
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Closed { failures: u32 },
    Open { until: i64, cooldown_ms: i64 },
    HalfOpen { cooldown_ms: i64 },
}

/// Whether an attempt may go out now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Gate {
    Allow,
    /// Half-open: exactly this one attempt tests the destination.
    Probe,
    /// Open until this time (unix ms).
    Deny(i64),
}

/// How often the slow start after a recovery doubles the allowed concurrency.
pub const RAMP_STEP_MS: i64 = 500;

#[derive(Debug)]
pub struct Breaker {
    state: Mutex<State>,
    /// When the breaker last closed after being open (unix ms); 0 when it never was.
    recovered_at: Mutex<i64>,
    threshold: u32,
    cooldown_ms: i64,
}

impl Breaker {
    pub fn new(threshold: u32, cooldown: Duration) -> Breaker {
        Breaker {
            state: Mutex::new(State::Closed { failures: 0 }),
            recovered_at: Mutex::new(0),
            threshold: threshold.max(1),
            cooldown_ms: i64::try_from(cooldown.as_millis())
                .unwrap_or(i64::MAX)
                .max(1),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A poisoned lock only means a panic elsewhere; the state is still valid.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Ask before claiming or sending.
    pub(super) fn gate(&self, now: i64) -> Gate {
        let mut s = self.lock();
        match *s {
            State::Closed { .. } => Gate::Allow,
            State::Open { until, cooldown_ms } if now >= until => {
                *s = State::HalfOpen { cooldown_ms };
                Gate::Probe
            }
            State::Open { until, .. } => Gate::Deny(until),
            // A probe is in flight; everything else waits for its verdict.
            State::HalfOpen { cooldown_ms } => Gate::Deny(now + cooldown_ms.min(1000)),
        }
    }

    /// A probe was granted but ended without a verdict (nothing was sent, or its
    /// task was cancelled): let the next gate grant a probe again. Only
    /// `admission::ProbePermit`'s drop calls it.
    pub(super) fn release_probe(&self, now: i64) {
        let mut s = self.lock();
        if let State::HalfOpen { cooldown_ms } = *s {
            *s = State::Open {
                until: now,
                cooldown_ms,
            };
        }
    }

    /// Report an attempt's result (`healthy`: the destination answered sensibly).
    /// Returns true when this report opened the breaker.
    pub fn record(&self, healthy: bool, now: i64) -> bool {
        let mut s = self.lock();
        match (*s, healthy) {
            (State::HalfOpen { .. }, true) => {
                *s = State::Closed { failures: 0 };
                *self.recovered_at.lock().unwrap_or_else(|p| p.into_inner()) = now;
                false
            }
            (_, true) => {
                *s = State::Closed { failures: 0 };
                false
            }
            (State::Closed { failures }, false) => {
                let failures = failures + 1;
                if failures >= self.threshold {
                    *s = State::Open {
                        until: now + self.cooldown_ms,
                        cooldown_ms: self.cooldown_ms,
                    };
                    true
                } else {
                    *s = State::Closed { failures };
                    false
                }
            }
            // Late reports of attempts that started before the breaker opened do not
            // stretch the cooldown; only a failed probe does.
            (State::Open { .. }, false) => false,
            (State::HalfOpen { cooldown_ms }, false) => {
                let next = cooldown_ms
                    .saturating_mul(2)
                    .min(self.cooldown_ms.saturating_mul(10));
                *s = State::Open {
                    until: now + next,
                    cooldown_ms: next,
                };
                false
            }
        }
    }

    /// How many attempts may be in flight now, out of `max`: `max`, except during the
    /// slow start after a recovery (1, 2, 4, … doubling every [`RAMP_STEP_MS`]).
    pub fn ramp(&self, now: i64, max: usize) -> usize {
        let since = *self.recovered_at.lock().unwrap_or_else(|p| p.into_inner());
        if since == 0 {
            return max;
        }
        let steps = (now - since).max(0) / RAMP_STEP_MS;
        if steps >= 20 {
            return max;
        }
        (1usize << steps).clamp(1, max.max(1))
    }

    /// The breaker's state now, for logs and metrics.
    pub fn state(&self) -> BreakerState {
        match *self.lock() {
            State::Closed { .. } => BreakerState::Closed,
            State::Open { .. } => BreakerState::Open,
            State::HalfOpen { .. } => BreakerState::HalfOpen,
        }
    }
}

/// What a breaker lets through, as logs and metrics show it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakerState {
    Closed,
    HalfOpen,
    Open,
}

impl BreakerState {
    /// The value of `hookgate_circuit_breaker_state`: 0 closed, 1 half-open, 2 open.
    pub fn gauge(self) -> f64 {
        match self {
            BreakerState::Closed => 0.0,
            BreakerState::HalfOpen => 1.0,
            BreakerState::Open => 2.0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_after_consecutive_failures_and_probes_after_cooldown() {
        let b = Breaker::new(3, Duration::from_secs(10));
        assert_eq!(b.gate(0), Gate::Allow);
        assert!(!b.record(false, 0));
        assert!(!b.record(false, 0));
        assert!(!b.record(true, 0), "a success resets the count");
        assert!(!b.record(false, 0));
        assert!(!b.record(false, 0));
        assert!(b.record(false, 1_000));
        assert_eq!(b.state(), BreakerState::Open);
        assert_eq!(b.gate(5_000), Gate::Deny(11_000));
        assert_eq!(b.gate(11_000), Gate::Probe);
        assert!(
            matches!(b.gate(11_001), Gate::Deny(_)),
            "one probe at a time"
        );
        // The probe fails: open again, cooldown doubled.
        b.record(false, 12_000);
        assert_eq!(b.gate(12_000), Gate::Deny(32_000));
        assert_eq!(b.gate(32_000), Gate::Probe);
        b.release_probe(32_500);
        assert_eq!(
            b.gate(32_500),
            Gate::Probe,
            "an unused probe is granted again"
        );
        b.record(true, 33_000);
        assert_eq!(b.state(), BreakerState::Closed);
        assert_eq!(b.gate(33_000), Gate::Allow);
    }

    #[test]
    fn recovery_ramps_up_concurrency() {
        let b = Breaker::new(1, Duration::from_secs(1));
        assert_eq!(b.ramp(0, 16), 16, "no ramp before any outage");
        b.record(false, 0);
        assert_eq!(b.gate(1_000), Gate::Probe);
        b.record(true, 1_000);
        assert_eq!(b.ramp(1_000, 16), 1);
        assert_eq!(b.ramp(1_499, 16), 1);
        assert_eq!(b.ramp(1_500, 16), 2);
        assert_eq!(b.ramp(2_000, 16), 4);
        assert_eq!(b.ramp(3_000, 16), 16);
        assert_eq!(b.ramp(100_000, 16), 16);
    }

    #[test]
    fn late_failures_while_open_do_not_stretch_the_cooldown() {
        let b = Breaker::new(2, Duration::from_secs(30));
        b.record(false, 0);
        b.record(false, 0);
        for _ in 0..14 {
            b.record(false, 10);
        }
        assert_eq!(b.gate(10), Gate::Deny(30_000));
    }

    #[test]
    fn cooldown_growth_is_bounded() {
        let b = Breaker::new(1, Duration::from_secs(1));
        b.record(false, 0);
        let mut now = 0;
        for _ in 0..20 {
            now += 100_000;
            assert_eq!(b.gate(now), Gate::Probe);
            b.record(false, now);
        }
        assert_eq!(b.gate(now), Gate::Deny(now + 10_000));
    }
}
