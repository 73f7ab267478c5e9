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

/// The configured limit of a route.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateLimit {
    /// Sustained deliveries per second.
    pub per_second: f64,
    /// Deliveries that may go out at once above the sustained pace: a tenth of a
    /// second's worth, at least one. In any one-second window the destination sees
    /// at most `per_second + burst` deliveries.
    pub burst: u32,
}

/// Why a `rate_limit` value is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "rate limit {text:?}: {problem} (write it as a count per unit: \"20/s\", \"600/m\", \"1000/h\")"
)]
pub struct RateLimitError {
    pub text: String,
    pub problem: &'static str,
}

impl RateLimit {
    /// Parse `"<count>/<unit>"`, the unit being `s`, `m` or `h`.
    pub fn parse(text: &str) -> Result<RateLimit, RateLimitError> {
        let err = |problem| RateLimitError {
            text: text.to_string(),
            problem,
        };
        let (count, unit) = text.trim().split_once('/').ok_or(err("no `/`"))?;
        let count: f64 = count
            .trim()
            .parse()
            .map_err(|_| err("the count is not a number"))?;
        if !count.is_finite() || count <= 0.0 {
            return Err(err("the count must be above zero"));
        }
        let seconds = match unit.trim() {
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return Err(err("the unit is not s, m or h")),
        };
        let per_second = count / seconds;
        // Below one delivery a day the limit says "never" in all but name.
        if per_second < 1.0 / 86_400.0 {
            return Err(err("the pace is below one delivery a day"));
        }
        let burst = (per_second / 10.0).floor().clamp(1.0, f64::from(u32::MAX)) as u32;
        Ok(RateLimit { per_second, burst })
    }
}

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
    fn limits_parse_with_their_burst() {
        let l = RateLimit::parse("20/s").unwrap();
        assert_eq!((l.per_second, l.burst), (20.0, 2));
        let l = RateLimit::parse(" 600 / m ").unwrap();
        assert_eq!((l.per_second, l.burst), (10.0, 1));
        let l = RateLimit::parse("1000/h").unwrap();
        assert!((l.per_second - 1000.0 / 3600.0).abs() < 1e-9);
        assert_eq!(l.burst, 1);
        assert_eq!(RateLimit::parse("2.5/s").unwrap().per_second, 2.5);
        assert_eq!(RateLimit::parse("500/s").unwrap().burst, 50);
        for bad in [
            "20", "20/d", "0/s", "-1/s", "x/s", "NaN/s", "inf/s", "1/h/2", "0.001/h",
        ] {
            assert!(RateLimit::parse(bad).is_err(), "{bad}");
        }
        let e = RateLimit::parse("20/d").unwrap_err().to_string();
        assert!(e.contains("\"20/d\"") && e.contains("unit"), "{e}");
    }

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
