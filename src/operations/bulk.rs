//! Bulk replays, paced: the entries a filter (or a dead-letter group) selects are
//! queued oldest first at the configured rate per second, never all at once, each
//! process keeping its own horizon of scheduled replays.

use super::dto::ReplayResult;
use super::entries::rfc3339;
use super::{OpError, Operations};
use crate::store::{Actor, Transition};

/// Entries one bulk replay may queue.
pub const BULK_REPLAY_MAX: usize = 100_000;

/// Replay the entries `ids` (newest first, as listings give them) through `route` or
/// every delivery that qualifies, as `by`: oldest first, spread at
/// `admin.replay_rate` per second after whatever this process already queued, so a
/// large dead-letter queue never stampedes the destination. Ids that no longer
/// qualify (replayed or purged since) are skipped. Should writing the replays fall
/// behind their schedule (a slow store), the rest of the schedule moves later
/// ([`ReplaySchedule`]) instead of sending what fell behind at once.
pub async fn replay_paced(
    ops: &Operations,
    mut ids: Vec<String>,
    route: Option<&str>,
    by: &Actor,
) -> Result<ReplayResult, OpError> {
    ids.truncate(BULK_REPLAY_MAX);
    ids.reverse();
    let now = ops.clock.now_ms();
    let step = 1000.0 / f64::from(ops.replay_rate);
    let start = {
        let mut horizon = ops.replay_horizon.lock().unwrap_or_else(|p| p.into_inner());
        let start = (*horizon).max(now);
        *horizon = start + (ids.len() as f64 * step) as i64;
        start
    };
    let mut schedule = ReplaySchedule::new(start, step);
    let mut queued = 0u64;
    let mut last_due = None;
    for id in &ids {
        let at = schedule.next(ops.clock.now_ms());
        let started = std::time::SystemTime::now();
        let done = ops.store.replay(id, route, at, by, now).await?;
        ops.traces.action(super::entries::action_span(
            "replay", id, route, by, started, done,
        ));
        if done == Transition::Done {
            queued += 1;
            last_due = Some(at);
        }
    }
    if let Some(last) = last_due {
        // A schedule that slipped keeps the next bulk replay behind it.
        let mut horizon = ops.replay_horizon.lock().unwrap_or_else(|p| p.into_inner());
        *horizon = (*horizon).max(last + step.ceil() as i64);
    }
    tracing::info!(queued, rate = ops.replay_rate, "bulk replay queued");
    Ok(ReplayResult {
        queued,
        last_due_at: last_due.map(rfc3339),
    })
}

/// When each replay of a bulk replay is due: one every `step` ms from `start`, and
/// never earlier than `step` after the one before nor earlier than the moment it is
/// written. Written on time (the usual case), the replays are due at `start`,
/// `start + step`, … ; written late, each is due as it is written, still a `step`
/// apart, so a slow store delays the replays rather than bunching them.
struct ReplaySchedule {
    /// The earliest the next replay may be due: a step after the one before.
    earliest: f64,
    step: f64,
}

impl ReplaySchedule {
    fn new(start: i64, step: f64) -> ReplaySchedule {
        ReplaySchedule {
            earliest: start as f64,
            step,
        }
    }

    /// The due time (unix ms) of the next replay, written at `now`.
    fn next(&mut self, now: i64) -> i64 {
        let at = self.earliest.max(now as f64);
        self.earliest = at + self.step;
        at.ceil() as i64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bulk_replay_written_on_time_is_due_one_step_apart() {
        let mut s = ReplaySchedule::new(1_000, 10.0);
        let due: Vec<i64> = (0..4).map(|_| s.next(1_000)).collect();
        assert_eq!(due, [1_000, 1_010, 1_020, 1_030]);
    }

    #[test]
    fn a_bulk_replay_written_late_moves_later_and_never_bunches() {
        let mut s = ReplaySchedule::new(1_000, 10.0);
        assert_eq!(s.next(1_000), 1_000);
        assert_eq!(s.next(1_001), 1_010);
        // The store stalled for half a second: what is written after it is due as it
        // is written, a step apart, not all at once.
        assert_eq!(s.next(1_500), 1_500);
        assert_eq!(s.next(1_501), 1_510);
        assert_eq!(s.next(1_502), 1_520);
        // Writing caught up with the moved schedule: a step apart again.
        assert_eq!(s.next(1_503), 1_530);
    }

    #[test]
    fn a_fractional_step_keeps_the_rate() {
        // 3 a second: 333.3 ms apart, 30 replays span 29 steps (9,667 ms), not 29 × 333.
        let mut s = ReplaySchedule::new(0, 1000.0 / 3.0);
        let due: Vec<i64> = (0..30).map(|_| s.next(0)).collect();
        assert_eq!(due[29], 9_667);
        assert!(due.windows(2).all(|w| w[1] - w[0] >= 333));
    }
}
