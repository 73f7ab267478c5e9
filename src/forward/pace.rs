//! A route's rate limit: the configured pace (`rate_limit = "20/s"`), its burst, and
//! how the pace adapts to what the destination answers.
//!
//! The limit is what the internal app said it can take; the gateway never sends
//! faster. It sends slower when the app says so: a 429 or a 503 halves the pace (down
//! to a sixteenth) and holds the route until the answer's `Retry-After` has passed;
//! every delivered attempt then wins back a thirty-second of the configured pace, so
//! a recovered app is back at full pace after a few dozen deliveries. Other failures
//! leave the pace alone: the retry policy and the circuit breaker deal with those.
//!
//! Pure: no clock, no I/O. The caller passes `now` (unix ms) and the answer. The
//! store keeps the shared arrival time of each route's sends (`Store::take_send_slot`).

use std::time::Duration;

pub use crate::config::RateLimit;

/// The lowest pace, as a share of the configured one.
pub const MIN_SHARE: f64 = 1.0 / 16.0;
/// What one delivered attempt wins back, as a share of the configured pace.
pub const RECOVERY_STEP: f64 = 1.0 / 32.0;
/// The longest hold a `Retry-After` may impose.
pub const MAX_HOLD: Duration = Duration::from_secs(3600);

/// What the destination answered, as far as the pace is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// A 2xx.
    Delivered,
    /// A 429 or a 503, with the answer's `Retry-After` if it had one.
    SlowDown { retry_after: Option<Duration> },
    /// Anything else (other statuses, timeouts, refused connections).
    Other,
}

impl Answer {
    /// The answer for an HTTP status and its `Retry-After`.
    pub fn of_status(code: u16, retry_after: Option<Duration>) -> Answer {
        match code {
            200..=299 => Answer::Delivered,
            429 | 503 => Answer::SlowDown { retry_after },
            _ => Answer::Other,
        }
    }
}

/// The pace a route sends at now.
#[derive(Debug, Clone, PartialEq)]
pub struct Pace {
    limit: RateLimit,
    /// The share of the configured pace in force, in `[MIN_SHARE, 1]`.
    share: f64,
    /// Nothing is sent before this time (unix ms).
    hold_until: i64,
}

impl Pace {
    pub fn new(limit: RateLimit) -> Pace {
        Pace {
            limit,
            share: 1.0,
            hold_until: i64::MIN,
        }
    }

    /// Deliveries per second allowed now.
    pub fn per_second(&self) -> f64 {
        self.limit.per_second * self.share
    }

    /// The time between two deliveries at the current pace (at least 1 ms).
    pub fn spacing(&self) -> Duration {
        Duration::from_secs_f64(1.0 / self.per_second()).max(Duration::from_millis(1))
    }

    /// The burst at the current pace: the configured one, scaled down with the pace.
    pub fn burst(&self) -> u32 {
        ((f64::from(self.limit.burst) * self.share).floor() as u32).max(1)
    }

    /// The earliest time (unix ms) anything may be sent to the route.
    pub fn hold_until(&self) -> i64 {
        self.hold_until
    }

    /// Adapt to an answer received at `now`.
    pub fn record(&mut self, answer: Answer, now: i64) {
        match answer {
            Answer::Delivered => self.share = (self.share + RECOVERY_STEP).min(1.0),
            Answer::SlowDown { retry_after } => {
                self.share = (self.share / 2.0).max(MIN_SHARE);
                let hold = retry_after.unwrap_or_else(|| self.spacing()).min(MAX_HOLD);
                let until = now.saturating_add(i64::try_from(hold.as_millis()).unwrap_or(i64::MAX));
                self.hold_until = self.hold_until.max(until);
            }
            Answer::Other => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_429_halves_the_pace_and_holds_for_its_retry_after() {
        let mut p = Pace::new(RateLimit::parse("20/s").unwrap());
        assert_eq!(p.spacing(), Duration::from_millis(50));
        p.record(Answer::of_status(429, Some(Duration::from_secs(2))), 10_000);
        assert_eq!(p.per_second(), 10.0);
        assert_eq!(p.hold_until(), 12_000);
        // A later, shorter hold never shortens the one in force.
        p.record(Answer::of_status(503, None), 10_500);
        assert_eq!(p.per_second(), 5.0);
        assert_eq!(p.hold_until(), 12_000);
        // An absurd Retry-After is capped.
        p.record(
            Answer::SlowDown {
                retry_after: Some(Duration::from_secs(86_400)),
            },
            0,
        );
        assert_eq!(p.hold_until(), 3_600_000);
    }

    #[test]
    fn the_pace_floors_at_a_sixteenth_and_recovers_with_deliveries() {
        let limit = RateLimit::parse("32/s").unwrap();
        let mut p = Pace::new(limit);
        for _ in 0..10 {
            p.record(Answer::SlowDown { retry_after: None }, 0);
        }
        assert_eq!(p.per_second(), 2.0);
        assert_eq!(p.burst(), 1);
        // Other failures change nothing.
        p.record(Answer::of_status(500, None), 0);
        p.record(Answer::Other, 0);
        assert_eq!(p.per_second(), 2.0);
        let mut steps = 0;
        while p.per_second() < limit.per_second {
            p.record(Answer::of_status(204, None), 0);
            steps += 1;
        }
        assert_eq!(steps, 30);
        p.record(Answer::Delivered, 0);
        assert_eq!(p.per_second(), 32.0, "never above the configured pace");
        assert_eq!(p.burst(), limit.burst);
    }
}
