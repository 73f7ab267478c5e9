//! The one clock: what time it is, for ingest (signature windows, arrival times), the
//! admin API (replays, discards) and the forwarder (claims, leases, retries).
//!
//! Everything that needs the time of day is handed a [`Clock`] by the composition
//! root instead of reading the system clock itself, so a test (or a benchmark) can
//! run the whole gateway at a time of its choosing; elapsed time (timeouts,
//! deadlines) is measured on the monotonic clock. The pure parts (the verification
//! engine, the retry policy, the breaker) take `now` as an argument and never see a
//! clock at all. In the gateway two readers of the system clock remain: a fetched
//! certificate's validity (`provider::certificate`) and the wall times of trace
//! spans.

use std::sync::Arc;

/// A source of the current time, in unix milliseconds. Cheap to clone.
#[derive(Clone)]
pub struct Clock(Arc<dyn Fn() -> i64 + Send + Sync>);

impl Clock {
    /// The system's wall clock.
    pub fn system() -> Clock {
        Clock(Arc::new(system_now_ms))
    }

    /// A clock that reads `now` (unix milliseconds) each time it is asked.
    pub fn from_fn(now: impl Fn() -> i64 + Send + Sync + 'static) -> Clock {
        Clock(Arc::new(now))
    }

    /// Unix milliseconds.
    pub fn now_ms(&self) -> i64 {
        (self.0)()
    }

    /// Unix seconds (rounded down), the grain of providers' signed timestamps.
    pub fn now_secs(&self) -> i64 {
        self.now_ms().div_euclid(1000)
    }
}

impl std::fmt::Debug for Clock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Clock({})", self.now_ms())
    }
}

/// The system clock in unix milliseconds (0 before 1970, saturating far after).
pub fn system_now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_round_down_including_before_1970() {
        assert_eq!(
            Clock::from_fn(|| 1_700_000_000_999).now_secs(),
            1_700_000_000
        );
        assert_eq!(Clock::from_fn(|| -1).now_secs(), -1);
        let sys = Clock::system();
        let (a, b) = (system_now_ms(), sys.now_ms());
        assert!(b >= a && b - a < 60_000, "{a} {b}");
    }
}
