//! Whether this instance should get webhooks: `/readyz` answers 503 while the store
//! refuses writes, so a load balancer sends them to another instance.
//!
//! Two things decide it. The probe itself (`Store::ping`: a write on Redis, which a
//! Redis out of memory, read-only or unreachable refuses; on the embedded store the
//! writer, the free-space floor and a read) and what ingest saw: a write refused by
//! the store marks the instance not ready at once, and it stays so until a write
//! succeeds, or, when no traffic comes (a load balancer took the instance out),
//! until [`FAILURE_HOLD`] has passed and the probe succeeds. Each change is logged
//! and counted (`hookgate_store_ready`, `hookgate_store_readiness_changes_total`).

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::StoreError;

/// How long a refused write keeps `/readyz` at 503 when no write follows it.
pub const FAILURE_HOLD: Duration = Duration::from_secs(5);

#[derive(Debug)]
pub struct Readiness {
    state: Mutex<State>,
    /// Set while a refused write stands (`State::refused_at` is set) or the store is
    /// not ready: every ingest write that succeeds reads it, and only takes the lock
    /// when it is set.
    troubled: AtomicBool,
}

#[derive(Debug)]
struct State {
    /// When the last refused write happened, while no write succeeded after it.
    refused_at: Option<Instant>,
    /// What `/readyz` last said (and the gauge shows).
    ready: bool,
}

impl Default for Readiness {
    fn default() -> Readiness {
        Readiness::new()
    }
}

impl Readiness {
    /// Ready: the store just opened (and `hookgate_store_ready` says so).
    pub fn new() -> Readiness {
        metrics::gauge!("hookgate_store_ready").set(1.0);
        Readiness {
            state: Mutex::new(State {
                refused_at: None,
                ready: true,
            }),
            troubled: AtomicBool::new(false),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // A poisoned lock only means a panic elsewhere; the state is still valid.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// An ingest write failed; `e` decides whether it says the store refuses writes
    /// (an entry the store could not encode does not).
    pub fn write_failed(&self, e: &StoreError) {
        if !e.refuses_writes() {
            return;
        }
        let mut s = self.state();
        s.refused_at = Some(Instant::now());
        set(&mut s, false, Some(e));
        self.troubled.store(true, Ordering::Relaxed);
    }

    /// An ingest write succeeded: the store takes writes.
    pub fn write_succeeded(&self) {
        if !self.troubled.load(Ordering::Relaxed) {
            return;
        }
        let mut s = self.state();
        s.refused_at = None;
        set(&mut s, true, None);
        self.troubled.store(false, Ordering::Relaxed);
    }

    /// `/readyz`'s verdict, given the store's probe.
    pub fn check(&self, probe: Result<(), &StoreError>) -> bool {
        let mut s = self.state();
        let refused_recently = s.refused_at.is_some_and(|at| at.elapsed() < FAILURE_HOLD);
        let ready = probe.is_ok() && !refused_recently;
        if ready {
            s.refused_at = None;
        }
        set(&mut s, ready, probe.err());
        self.troubled.store(!ready, Ordering::Relaxed);
        ready
    }
}

/// Record the verdict; log and count it when it changed.
fn set(s: &mut State, ready: bool, cause: Option<&StoreError>) {
    metrics::gauge!("hookgate_store_ready").set(if ready { 1.0 } else { 0.0 });
    if s.ready == ready {
        return;
    }
    s.ready = ready;
    metrics::counter!(
        "hookgate_store_readiness_changes_total",
        "ready" => if ready { "true" } else { "false" }
    )
    .increment(1);
    match cause {
        _ if ready => tracing::info!("the store takes writes again: /readyz answers 200"),
        Some(e) => tracing::warn!(error = %e, "the store refuses writes: /readyz answers 503"),
        None => tracing::warn!("the store refuses writes: /readyz answers 503"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_write_makes_it_unready_until_a_write_succeeds() {
        let r = Readiness::new();
        assert!(r.check(Ok(())));
        r.write_failed(&StoreError::Timeout(Duration::from_secs(1)));
        assert!(!r.check(Ok(())), "a refused write outweighs a good probe");
        r.write_succeeded();
        assert!(r.check(Ok(())));
        assert!(!r.check(Err(&StoreError::Stopped)));
    }

    #[test]
    fn an_entry_that_cannot_be_encoded_says_nothing_about_the_store() {
        let r = Readiness::new();
        r.write_failed(&StoreError::Corrupt {
            id: "x".into(),
            problem: "bad".into(),
        });
        assert!(r.check(Ok(())));
    }
}
