//! The retry policy: whether an attempt's outcome is retried (classify) and when
//! (schedule), kept apart and pure: no clock, no randomness of its own.
//!
//! It reads the sender's typed [`Outcome`]: delivered is a success, refused is final
//! and goes to the DLQ, and everything else (slow down, unavailable, unreachable,
//! timed out) is retried. (For HTTP: a 2xx delivers; 408, 429, 5xx, refused or reset
//! connections, DNS and TLS failures and timeouts are retried; 3xx and other 4xx are
//! final: see `sender::http`.)
//! Backoff is exponential with full jitter: the n-th retry waits a uniform random
//! time in `[0, min(cap, base·2^(n-1))]`; a `Retry-After` from the destination sets a
//! floor, bounded by the cap. The budget is attempts AND age: an entry is dead after
//! `max_attempts` attempts or once it is `max_age` old, whichever comes first.

use std::time::Duration;

use super::sender::Outcome;

/// What to make of an outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Success,
    Retry,
    /// Final failure: no point retrying.
    Fail,
}

/// Delivered is a success, refused is final, every other outcome is retried.
pub fn classify(outcome: &Outcome) -> Verdict {
    match outcome {
        Outcome::Delivered { .. } => Verdict::Success,
        Outcome::Refused(_) => Verdict::Fail,
        Outcome::SlowDown { .. }
        | Outcome::Unavailable { .. }
        | Outcome::Unreachable(_)
        | Outcome::TimedOut(_) => Verdict::Retry,
    }
}

/// The retry budget and backoff shape of a source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    pub max_attempts: u32,
    pub max_age: Duration,
    pub base: Duration,
    pub cap: Duration,
}

/// The policy's decision after an attempt: how the entry's claim is completed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// The destination took it: complete the entry as delivered.
    MarkDelivered,
    /// Try again at this time (unix ms).
    RetryAt(i64),
    /// Move it to the dead-letter queue, for this reason.
    DeadLetter(String),
}

impl RetryPolicy {
    /// The backoff ceiling before retry number `retry` (1 for the first retry).
    pub fn ceiling(&self, retry: u32) -> Duration {
        let factor = 2u32.saturating_pow(retry.saturating_sub(1).min(31));
        self.base.saturating_mul(factor).min(self.cap)
    }

    /// The longest a delivery's last retry can come after its first attempt, each
    /// attempt taking up to `timeout`: every backoff at its ceiling, within
    /// `max_age`. (A pause or an open breaker can hold a retry longer.)
    pub fn span(&self, timeout: Duration) -> Duration {
        let mut total = Duration::ZERO;
        for retry in 1..self.max_attempts {
            total = total
                .saturating_add(self.ceiling(retry))
                .saturating_add(timeout);
            if total >= self.max_age {
                return self.max_age;
            }
        }
        total.min(self.max_age)
    }

    /// The delay before retry number `retry`; `jitter` is uniform in `[0, 1)`.
    pub fn delay(&self, retry: u32, retry_after: Option<Duration>, jitter: f64) -> Duration {
        let jitter = if jitter.is_finite() {
            jitter.clamp(0.0, 1.0)
        } else {
            0.0
        };
        let jittered = self.ceiling(retry).mul_f64(jitter);
        match retry_after {
            Some(ra) => jittered.max(ra.min(self.cap)),
            None => jittered,
        }
    }

    /// Decide what follows attempt number `attempt` of an entry received at
    /// `received_at`, which ended with `outcome` at `now` (both unix ms).
    pub fn decide(
        &self,
        attempt: u32,
        received_at: i64,
        outcome: &Outcome,
        now: i64,
        jitter: f64,
    ) -> Decision {
        match classify(outcome) {
            Verdict::Success => Decision::MarkDelivered,
            Verdict::Fail => Decision::DeadLetter(format!("not retryable: {}", describe(outcome))),
            Verdict::Retry => {
                let deadline = received_at
                    .saturating_add(i64::try_from(self.max_age.as_millis()).unwrap_or(i64::MAX));
                if attempt >= self.max_attempts {
                    return Decision::DeadLetter(format!(
                        "retry budget exhausted: {attempt} attempts; last: {}",
                        describe(outcome)
                    ));
                }
                if now >= deadline {
                    return Decision::DeadLetter(format!(
                        "retry budget exhausted: older than {}; last: {}",
                        humantime::format_duration(self.max_age),
                        describe(outcome)
                    ));
                }
                let delay = self.delay(attempt, outcome.retry_after(), jitter);
                let at = now.saturating_add(i64::try_from(delay.as_millis()).unwrap_or(i64::MAX));
                // The last attempt happens at the deadline at the latest.
                Decision::RetryAt(at.min(deadline))
            }
        }
    }
}

/// A short, log-safe description of an outcome: its failure's detail.
pub fn describe(outcome: &Outcome) -> String {
    match outcome.failed() {
        Some(f) => f.detail.clone(),
        None => "delivered".into(),
    }
}

/// Parse a `Retry-After` value: delta seconds, or an HTTP date relative to `now_ms`.
pub fn parse_retry_after(value: &str, now_ms: i64) -> Option<Duration> {
    let v = value.trim();
    if let Ok(secs) = v.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = httpdate_to_ms(v)?;
    Some(Duration::from_millis(
        u64::try_from(at - now_ms).unwrap_or(0),
    ))
}

fn httpdate_to_ms(v: &str) -> Option<i64> {
    let t = humantime::parse_rfc3339_weak(v).ok().or_else(|| {
        // IMF-fixdate: "Sun, 06 Nov 1994 08:49:37 GMT"
        let parts: Vec<&str> = v.split_whitespace().collect();
        if parts.len() != 6 || parts[5] != "GMT" {
            return None;
        }
        let month = [
            "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
        ]
        .iter()
        .position(|m| *m == parts[2])?
            + 1;
        let text = format!("{}-{:02}-{:0>2}T{}Z", parts[3], month, parts[1], parts[4]);
        humantime::parse_rfc3339(&text).ok()
    })?;
    let d = t.duration_since(std::time::UNIX_EPOCH).ok()?;
    i64::try_from(d.as_millis()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::failure::Failure;
    use crate::forward::sender::Failed;

    fn policy() -> RetryPolicy {
        RetryPolicy {
            max_attempts: 12,
            max_age: Duration::from_secs(24 * 3600),
            base: Duration::from_secs(60),
            cap: Duration::from_secs(12 * 3600),
        }
    }

    fn status(code: u16) -> Outcome {
        super::super::sender::http::of_status(code, None)
    }

    fn timeout() -> Outcome {
        Outcome::TimedOut(Failed::new(Failure::Timeout, "timeout after 10s"))
    }

    #[test]
    fn the_span_is_every_backoff_at_its_ceiling_within_max_age() {
        let short = RetryPolicy {
            max_attempts: 4,
            max_age: Duration::from_secs(3600),
            base: Duration::from_secs(1),
            cap: Duration::from_secs(3),
        };
        // Retries 1, 2, 3 wait at most 1 s, 2 s and 3 s; each attempt takes up to 1 s.
        assert_eq!(short.span(Duration::from_secs(1)), Duration::from_secs(9));
        let one = RetryPolicy {
            max_attempts: 1,
            ..short
        };
        assert_eq!(one.span(Duration::from_secs(1)), Duration::ZERO);
        assert_eq!(policy().span(Duration::from_secs(10)), policy().max_age);
    }

    #[test]
    fn classification_follows_the_contract() {
        for code in [200, 201, 204, 299] {
            assert_eq!(classify(&status(code)), Verdict::Success, "{code}");
        }
        for code in [408, 429, 500, 502, 503, 504, 599] {
            assert_eq!(classify(&status(code)), Verdict::Retry, "{code}");
        }
        for code in [100, 301, 302, 307, 400, 401, 403, 404, 410, 422] {
            assert_eq!(classify(&status(code)), Verdict::Fail, "{code}");
        }
        assert_eq!(classify(&timeout()), Verdict::Retry);
        assert_eq!(
            classify(&Outcome::Unreachable(Failed::new(
                Failure::Connect,
                "connect: refused"
            ))),
            Verdict::Retry
        );
        assert_eq!(
            classify(&Outcome::Unreachable(Failed::new(Failure::Io, "io: reset"))),
            Verdict::Retry
        );
        assert!(!status(404).is_destination_failure());
        assert!(status(503).is_destination_failure());
    }

    #[test]
    fn backoff_is_exponential_capped_and_fully_jittered() {
        let p = policy();
        assert_eq!(p.ceiling(1), Duration::from_secs(60));
        assert_eq!(p.ceiling(2), Duration::from_secs(120));
        assert_eq!(p.ceiling(10), Duration::from_secs(60 * 512));
        assert_eq!(p.ceiling(11), Duration::from_secs(12 * 3600));
        assert_eq!(p.ceiling(1000), Duration::from_secs(12 * 3600));
        assert_eq!(p.delay(3, None, 0.0), Duration::ZERO);
        assert_eq!(p.delay(3, None, 0.5), Duration::from_secs(120));
        assert!(p.delay(3, None, 0.999) < Duration::from_secs(240));
        assert_eq!(p.delay(3, None, f64::NAN), Duration::ZERO);
    }

    #[test]
    fn retry_after_is_a_floor_bounded_by_the_cap() {
        let p = policy();
        assert_eq!(
            p.delay(1, Some(Duration::from_secs(2)), 0.0),
            Duration::from_secs(2)
        );
        assert_eq!(
            p.delay(1, Some(Duration::from_secs(10 * 24 * 3600)), 0.0),
            p.cap
        );
        let decision = p.decide(
            1,
            0,
            &super::super::sender::http::of_status(429, Some(Duration::from_secs(2))),
            1_000,
            0.0,
        );
        assert_eq!(decision, Decision::RetryAt(3_000));
    }

    #[test]
    fn the_budget_is_attempts_and_age() {
        let p = RetryPolicy {
            max_attempts: 3,
            ..policy()
        };
        assert!(matches!(
            p.decide(1, 0, &status(503), 10, 0.5),
            Decision::RetryAt(_)
        ));
        assert!(matches!(
            p.decide(2, 0, &status(503), 10, 0.5),
            Decision::RetryAt(_)
        ));
        match p.decide(3, 0, &status(503), 10, 0.5) {
            Decision::DeadLetter(r) => {
                assert!(r.contains("3 attempts") && r.contains("HTTP 503"), "{r}")
            }
            other => panic!("{other:?}"),
        }
        let day = 24 * 3600 * 1000;
        match policy().decide(2, 0, &timeout(), day, 0.5) {
            Decision::DeadLetter(r) => {
                assert!(r.contains("older than") && r.contains("timeout"), "{r}")
            }
            other => panic!("{other:?}"),
        }
        // A retry never lands after the deadline.
        assert_eq!(
            policy().decide(10, 0, &status(500), day - 1000, 0.99),
            Decision::RetryAt(day)
        );
        assert!(
            matches!(policy().decide(1, 0, &status(404), 0, 0.5), Decision::DeadLetter(r) if r.contains("HTTP 404"))
        );
        assert_eq!(
            policy().decide(5, 0, &status(200), 0, 0.5),
            Decision::MarkDelivered
        );
    }

    #[test]
    fn default_schedule_spreads_twelve_attempts_over_the_day() {
        // The README table: ceilings and expected (mean) cumulative delay.
        let p = policy();
        let ceilings: u64 = (1..12).map(|n| p.ceiling(n).as_secs()).sum();
        // Worst case reaches past the 24 h age budget, the mean stays within it.
        assert!(ceilings > 24 * 3600, "{ceilings}");
        assert!(ceilings / 2 < 24 * 3600);
        assert!(ceilings / 2 > 8 * 3600);
    }

    #[test]
    fn retry_after_parses_seconds_and_http_dates() {
        assert_eq!(parse_retry_after("120", 0), Some(Duration::from_secs(120)));
        let now = 784_111_777_000 - 10_000; // 10 s before the date below
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", now),
            Some(Duration::from_secs(10))
        );
        assert_eq!(parse_retry_after("soon", 0), None);
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", now + 60_000),
            Some(Duration::ZERO)
        );
    }
}
