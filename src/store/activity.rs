//! Per-minute activity counters of a source: entries received, deliveries that
//! succeeded, attempts that failed. They feed the console's charts (per minute over
//! the last hour, per hour over the last 7 days) and what a source usually receives
//! at an hour of the week (`usual`, over 4 weeks) from the store itself, so every
//! process sharing a store draws the same charts and no metrics system is needed.
//!
//! Each counter moves in the same atomic write as what it counts (an accept, a
//! completion), and is kept for [`ACTIVITY_RETENTION`], then dropped: bounded at
//! about 41,800 minutes per source (a row per minute that had any).

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// How long per-minute counters are kept: the 4 weeks a learned baseline looks
/// back over (`usual`), and a day of margin.
pub const ACTIVITY_RETENTION: Duration = Duration::from_secs(29 * 24 * 3600);

/// Milliseconds in a minute.
pub(crate) const MINUTE_MS: i64 = 60_000;

/// What happened to a source in one minute.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MinuteActivity {
    /// Unix ms of the minute's start (a multiple of 60,000).
    pub minute: i64,
    /// Entries stored (duplicates excluded).
    pub received: u64,
    /// Deliveries that succeeded (one per route).
    pub delivered: u64,
    /// Delivery attempts that failed (retried or dead).
    pub failed: u64,
}

/// The start of the minute holding `ms`.
pub(crate) fn minute_of(ms: i64) -> i64 {
    ms - ms.rem_euclid(MINUTE_MS)
}

/// Which counter a completion moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Counted {
    Delivered,
    Failed,
}

impl Counted {
    /// The counter `completion` moves, if any (a release moves none; a dead letter
    /// without an attempt, discarded before it was tried, none either).
    pub(crate) fn of(completion: &super::Completion) -> Option<Counted> {
        match completion {
            super::Completion::Delivered { .. } => Some(Counted::Delivered),
            super::Completion::Retry { .. } => Some(Counted::Failed),
            super::Completion::Dead { attempt, .. } => attempt.as_ref().map(|_| Counted::Failed),
            super::Completion::Release { .. } | super::Completion::Filtered { .. } => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_time_falls_in_its_minute() {
        assert_eq!(minute_of(1_800_000_059_999), 1_800_000_000_000);
        assert_eq!(minute_of(1_800_000_060_000), 1_800_000_060_000);
        assert_eq!(minute_of(-1), -60_000);
    }
}
