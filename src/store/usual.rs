//! What a source usually receives at this hour of the week, learned from the
//! store's per-minute arrivals (`[sources.expect] learn = true`).
//!
//! Traffic has a weekly rhythm (a billing run on Monday mornings, nothing on Sunday
//! nights), so a fixed `at_least` either cries wolf at night or sleeps through a
//! silence at noon. The baseline of an hour is the median of what arrived in the
//! same hour of the week over the last [`WEEKS`] weeks that the source had traffic
//! around (at least [`MIN_WEEKS`] of them, else it is still learning); the source
//! is quiet when the last [`HOURS`] hours together received under
//! [`QUIET_FRACTION`] of their baselines together. The counts are the store's,
//! every gateway's arrivals, kept [`ACTIVITY_RETENTION`](super::ACTIVITY_RETENTION)
//! (4 weeks and a day). Both the forwarder's `hookgate_source_quiet` and the
//! console's Sources page read it here.

use std::time::Duration;

use super::{Reads, StoreError};

/// The hours judged together: the last three.
pub const HOURS: usize = 3;
/// The weeks a baseline looks back over.
pub const WEEKS: usize = 4;
/// The weeks of history a baseline needs.
pub const MIN_WEEKS: usize = 2;
/// Under this share of the baseline, the source is quiet.
pub const QUIET_FRACTION: f64 = 0.1;

const HOUR_MS: i64 = 3_600_000;
const WEEK_MS: i64 = 7 * 24 * HOUR_MS;
/// A week counts as history when the source received anything in the day before
/// its hours' end.
const HISTORY_PROBE_MS: i64 = 24 * HOUR_MS;

/// The last hours against what the source usually receives then.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Usual {
    /// Entries stored in the last [`HOURS`] hours.
    pub recent: u64,
    /// The sum of the hours' baselines (each the median of its weeks).
    pub baseline: f64,
    /// The weeks the baselines come from (fewer than [`MIN_WEEKS`]: learning).
    pub weeks: usize,
}

impl Usual {
    /// Not enough history yet to say what is usual.
    pub fn learning(&self) -> bool {
        self.weeks < MIN_WEEKS
    }

    /// The fewest arrivals that are not quiet: a tenth of the baseline.
    pub fn threshold(&self) -> u64 {
        (self.baseline * QUIET_FRACTION).ceil() as u64
    }

    /// Whether the last hours fell under a tenth of their baseline (never while
    /// learning, nor for hours that usually see nothing).
    pub fn quiet(&self) -> bool {
        !self.learning()
            && self.baseline > 0.0
            && (self.recent as f64) < self.baseline * QUIET_FRACTION
    }

    /// The window judged.
    pub fn window() -> Duration {
        Duration::from_secs(HOURS as u64 * 3600)
    }
}

/// Judge `recent` (per hour, oldest first) against `weeks` (the same hours in each
/// week of history).
pub fn judge(recent: [u64; HOURS], weeks: &[[u64; HOURS]]) -> Usual {
    let mut baseline = 0.0;
    if weeks.len() >= MIN_WEEKS {
        for h in 0..HOURS {
            let mut counts: Vec<u64> = weeks.iter().map(|w| w[h]).collect();
            counts.sort_unstable();
            let n = counts.len();
            baseline += if n % 2 == 1 {
                counts[n / 2] as f64
            } else {
                (counts[n / 2 - 1] + counts[n / 2]) as f64 / 2.0
            };
        }
    }
    Usual {
        recent: recent.iter().sum(),
        baseline,
        weeks: weeks.len(),
    }
}

/// Per hour, the entries `source` stored in the [`HOURS`] hours before `end`,
/// oldest first; and whether it stored anything in the day before `end`.
async fn hours_before(
    store: &dyn Reads,
    source: &str,
    end: i64,
) -> Result<([u64; HOURS], bool), StoreError> {
    let start = end - HOURS as i64 * HOUR_MS;
    let probe = end - HISTORY_PROBE_MS.max(HOURS as i64 * HOUR_MS);
    let minutes = store.activity(source, probe, end).await?;
    let mut per_hour = [0u64; HOURS];
    for m in &minutes {
        if m.minute >= start {
            let h = usize::try_from((m.minute - start) / HOUR_MS).unwrap_or(0);
            if let Some(slot) = per_hour.get_mut(h) {
                *slot += m.received;
            }
        }
    }
    Ok((per_hour, minutes.iter().any(|m| m.received > 0)))
}

/// What `source` received in the last [`HOURS`] hours before `now` (unix ms),
/// against the same hours of the last [`WEEKS`] weeks it had traffic around.
pub async fn usual(store: &dyn Reads, source: &str, now: i64) -> Result<Usual, StoreError> {
    let (recent, _) = hours_before(store, source, now).await?;
    let mut weeks = Vec::with_capacity(WEEKS);
    for k in 1..=WEEKS as i64 {
        let (hours, alive) = hours_before(store, source, now - k * WEEK_MS).await?;
        if alive {
            weeks.push(hours);
        }
    }
    Ok(judge(recent, &weeks))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_baseline_is_the_median_of_each_hour_over_the_weeks_of_history() {
        // Learning: one week of history says nothing.
        let one = judge([0, 0, 0], &[[100, 100, 100]]);
        assert!(one.learning() && !one.quiet());
        // Medians 10, 25 (even: the middle two's mean) and 5: a baseline of 40.
        let u = judge(
            [1, 1, 1],
            &[[10, 20, 5], [10, 30, 5], [500, 30, 0], [0, 20, 9]],
        );
        assert_eq!(u.baseline, 10.0 + 25.0 + 5.0);
        assert_eq!(u.weeks, 4);
        assert_eq!(u.threshold(), 4);
        assert!(u.quiet(), "3 is under a tenth of 40");
        assert!(
            !judge(
                [2, 2, 1],
                &[[10, 20, 5], [10, 30, 5], [500, 30, 0], [0, 20, 9]]
            )
            .quiet()
        );
        // Hours that usually see nothing are never quiet.
        assert!(!judge([0, 0, 0], &[[0, 0, 0], [0, 0, 0]]).quiet());
        // One outlier week moves nothing.
        let u = judge([0, 0, 0], &[[1000, 1000, 1000], [0, 0, 0], [0, 0, 0]]);
        assert!(!u.quiet());
    }
}
