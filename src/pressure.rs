//! Ingest first: while webhooks arrive faster than the gateway can store them, the
//! forwarder steps back to a small share, so that providers keep hearing their 200
//! in milliseconds.
//!
//! A gateway delivers with the cores and the store it ingests with, and a delivery
//! costs it about what an accept costs (the HTTP exchange, a claim and a completion
//! through the store; BENCHMARKS.md, the delivering gateway). When ingest has room,
//! that is the right trade: a webhook reaches its app milliseconds after it arrived.
//! During a burst that saturates the gateway it is not: every delivery sent then
//! slows the acknowledgements that providers time out on, while the store (a durable
//! queue) could hold it for the seconds the burst lasts. So while ingest is
//! saturated, the forwarder claims one delivery for every [`SHARE`] webhooks stored
//! (never none: a long storm still drains), and catches up once the burst is over.
//!
//! *Saturated* means: on average over each of two [`WINDOW`]s in a row, at least
//! `threshold` verified webhooks were waiting for their write at once (the time they
//! waited, summed, over the window's length: Little's law). A closed loop of
//! providers' retries or a burst keeps that many waiting window after window (at 64
//! connections, 44–58 in every window measured); at an ordinary load the average
//! stays low even when a slow `fdatasync` piles a few dozen up for 10–20 ms. (A
//! yield on the count at one moment was measured and not kept: at half of the
//! maximum load it took every disk hiccup for a burst, and the end-to-end p99 went
//! from 86 ms to 922 ms. The count at one moment is no better within a window: group
//! commit answers a whole batch at once, so it falls to 0 at every fsync even during
//! a burst.) Near the gateway's capacity for ingesting and delivering at once, the
//! average reaches the threshold too, and a backlog builds that the little capacity
//! left takes long to deliver (BENCHMARKS.md, "Ingest first"). Only verified
//! webhooks count: a client that is not a provider cannot make the forwarder step
//! back.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

/// How long the count must stay at the threshold for ingest to be saturated.
pub const WINDOW: Duration = Duration::from_millis(100);

/// While ingest is saturated, one delivery is claimed for every this many webhooks
/// stored.
pub const SHARE: u64 = 20;

/// How busy ingest is, as the forwarder needs to know it: fed by the ingest handler,
/// judged every [`WINDOW`] by [`run`], read by the forwarder's route loops.
#[derive(Debug)]
pub struct IngestPressure {
    /// The count at which ingest is saturated; 0: never.
    threshold: usize,
    /// The time webhooks whose write ended in this window waited for it, in µs:
    /// over the window's length, how many waited at once on average (Little's law).
    waited_us: AtomicU64,
    /// Webhooks whose write ended (stored, duplicate or failed), ever.
    stored: AtomicU64,
    /// Whether the last window was at the threshold.
    above: AtomicBool,
    saturated: AtomicBool,
    /// `stored` when the current saturation began.
    base: AtomicU64,
    /// Deliveries claimed since the current saturation began.
    granted: AtomicU64,
}

/// One verified webhook waiting for its write, until dropped.
#[must_use]
pub struct Storing<'a> {
    pressure: &'a IngestPressure,
    since: Instant,
}

impl Drop for Storing<'_> {
    fn drop(&mut self) {
        self.pressure.ended(self.since.elapsed());
    }
}

impl IngestPressure {
    /// `threshold`: `forwarder.ingest_first`; 0 turns ingest first off.
    pub fn new(threshold: usize) -> IngestPressure {
        IngestPressure {
            threshold,
            waited_us: AtomicU64::new(0),
            stored: AtomicU64::new(0),
            above: AtomicBool::new(false),
            saturated: AtomicBool::new(false),
            base: AtomicU64::new(0),
            granted: AtomicU64::new(0),
        }
    }

    /// A verified webhook goes to the store: it counts as waiting until the guard
    /// is dropped.
    pub fn storing(&self) -> Storing<'_> {
        Storing {
            pressure: self,
            since: Instant::now(),
        }
    }

    /// A webhook's write ended after it `waited`.
    fn ended(&self, waited: Duration) {
        let waited = u64::try_from(waited.as_micros()).unwrap_or(u64::MAX);
        self.waited_us.fetch_add(waited, Ordering::Relaxed);
        self.stored.fetch_add(1, Ordering::Relaxed);
    }

    /// Whether ingest is saturated: the last two windows were.
    pub fn saturated(&self) -> bool {
        self.saturated.load(Ordering::Relaxed)
    }

    /// How many of `want` deliveries a route may claim now: all of them unless
    /// ingest is saturated; then `want` once the webhooks stored since the
    /// saturation began have earned that much of a share (and none until then), so
    /// that a claim (a write) still takes several deliveries.
    pub fn share(&self, want: usize) -> usize {
        if !self.saturated() {
            return want;
        }
        let earned = self
            .stored
            .load(Ordering::Relaxed)
            .saturating_sub(self.base.load(Ordering::Relaxed))
            / SHARE;
        let want_n = want as u64;
        let granted = self
            .granted
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |g| {
                (earned.saturating_sub(g) >= want_n).then_some(g + want_n)
            });
        if granted.is_ok() { want } else { 0 }
    }

    /// Give back `n` of a share that was not claimed (the store had fewer due).
    pub fn give_back(&self, n: usize) {
        if n > 0 && self.saturated() {
            let n = n as u64;
            let _ = self
                .granted
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |g| {
                    Some(g.saturating_sub(n))
                });
        }
    }

    /// End a window of `length`: judge it, and start the next one. Returns how many
    /// webhooks waited for their write at once, on average, during it.
    fn tick(&self, length: Duration) -> f64 {
        let waited = self.waited_us.swap(0, Ordering::Relaxed) as f64;
        let average = waited / (length.as_micros().max(1) as f64);
        let above = self.threshold > 0 && average >= self.threshold as f64;
        // Two windows in a row: one busy window is a hiccup, not a burst.
        let saturated = self.above.swap(above, Ordering::Relaxed) && above;
        if saturated && !self.saturated() {
            self.base
                .store(self.stored.load(Ordering::Relaxed), Ordering::Relaxed);
            self.granted.store(0, Ordering::Relaxed);
        }
        self.saturated.store(saturated, Ordering::Relaxed);
        average
    }
}

/// Judge `pressure` every [`WINDOW`] until `shutdown`; publishes
/// `hookgate_ingest_storing` (how many waited at once, on average, in the last
/// window) and `hookgate_ingest_saturated_windows_total` (windows found saturated).
pub async fn run(pressure: Arc<IngestPressure>, shutdown: CancellationToken) {
    let average_gauge = metrics::gauge!("hookgate_ingest_storing");
    let saturated_windows = metrics::counter!("hookgate_ingest_saturated_windows_total");
    let mut every = tokio::time::interval(WINDOW);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut began = every.tick().await;
    loop {
        let ended = tokio::select! {
            _ = shutdown.cancelled() => return,
            t = every.tick() => t,
        };
        let average = pressure.tick(ended.duration_since(began));
        began = ended;
        average_gauge.set(average);
        if pressure.saturated() {
            saturated_windows.increment(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `n` webhooks, each of which waited `each` for its write.
    fn stored(p: &IngestPressure, n: usize, each: Duration) {
        for _ in 0..n {
            p.ended(each);
        }
    }

    #[test]
    fn two_windows_at_the_threshold_saturate_and_one_below_ends_it() {
        let p = IngestPressure::new(40);
        // 1,000 webhooks in 100 ms, 5 ms each: 50 at once on average.
        stored(&p, 1_000, Duration::from_millis(5));
        assert_eq!(p.tick(WINDOW), 50.0);
        assert!(!p.saturated(), "one busy window is a hiccup");
        stored(&p, 1_000, Duration::from_millis(5));
        p.tick(WINDOW);
        assert!(p.saturated());
        // A slow fsync that piled up many for a moment: 400 at 4 ms, the window's
        // average stays under the threshold.
        stored(&p, 400, Duration::from_millis(4));
        assert_eq!(p.tick(WINDOW), 16.0);
        assert!(!p.saturated());
        stored(&p, 1_000, Duration::from_millis(5));
        p.tick(WINDOW);
        assert!(!p.saturated(), "it takes two windows again");
    }

    #[test]
    fn while_saturated_one_delivery_is_claimed_for_every_share_stored() {
        let p = IngestPressure::new(2);
        assert_eq!(p.share(16), 16, "not saturated: everything");
        for _ in 0..2 {
            stored(&p, 100, Duration::from_millis(10));
            p.tick(WINDOW);
        }
        assert!(p.saturated());
        assert_eq!(p.share(16), 0, "nothing stored yet since it began");
        stored(&p, (3 * SHARE + 5) as usize, Duration::from_millis(1));
        assert_eq!(p.share(4), 0, "three earned: not yet four");
        assert_eq!(p.share(2), 2);
        assert_eq!(p.share(2), 0, "one left");
        assert_eq!(p.share(1), 1);
        p.give_back(2);
        assert_eq!(p.share(2), 2);
        // A quiet window ends the saturation.
        p.tick(WINDOW);
        assert!(!p.saturated());
        assert_eq!(p.share(16), 16);
    }

    #[test]
    fn a_threshold_of_zero_never_saturates() {
        let p = IngestPressure::new(0);
        for _ in 0..3 {
            stored(&p, 10_000, Duration::from_millis(10));
            p.tick(WINDOW);
        }
        assert!(!p.saturated());
        assert_eq!(p.share(16), 16);
    }

    #[tokio::test(start_paused = true)]
    async fn run_judges_each_window_until_shutdown() {
        let p = Arc::new(IngestPressure::new(1));
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(run(p.clone(), shutdown.clone()));
        // Two windows with 20 webhooks that waited 10 ms each, in their middle: 2 at
        // once on average.
        tokio::time::sleep(WINDOW / 2).await;
        for _ in 0..2 {
            stored(&p, 20, Duration::from_millis(10));
            tokio::time::sleep(WINDOW).await;
        }
        assert!(p.saturated());
        tokio::time::sleep(WINDOW).await;
        assert!(!p.saturated(), "a window with none");
        shutdown.cancel();
        task.await.expect("run ends");
    }

    #[test]
    fn a_guard_counts_the_time_its_webhook_waited() {
        let p = IngestPressure::new(1);
        let guard = p.storing();
        std::thread::sleep(Duration::from_millis(20));
        drop(guard);
        assert!(p.tick(Duration::from_millis(10)) >= 2.0);
        assert_eq!(p.stored.load(Ordering::Relaxed), 1);
    }
}
