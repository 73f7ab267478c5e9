//! Which routes have new work: one counter per route of a source, moved by the store
//! of this process when it stores work for that route ([`crate::store::Store::work_signal`]).
//!
//! A route loop waits on its own route's counter, so an accept wakes only the routes
//! its entry went to: with one signal for every route, each accept woke every route
//! of every source to claim (a write) and find nothing, which a source with a long
//! line behind a blocked head paid for at every webhook of any other source
//! (BENCHMARKS.md, a long blocked line).

use std::collections::HashMap;
use std::sync::Mutex;

use tokio::sync::watch;

/// What a write gives the routes: new work for some routes of one source, or for
/// any route (a replay, leases taken back: rare, and the store does not say where).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Wake {
    Routes { source: String, routes: Vec<String> },
    All,
}

impl Wake {
    /// New work for one route of `source`.
    pub(crate) fn route(source: &str, route: &str) -> Wake {
        Wake::Routes {
            source: source.to_string(),
            routes: vec![route.to_string()],
        }
    }
}

/// The counters, one per (source, route) somebody waits on; held by each backend.
#[derive(Debug, Default)]
pub(crate) struct WorkSignals {
    routes: Mutex<HashMap<(String, String), watch::Sender<u64>>>,
}

impl WorkSignals {
    /// The counter of `route` of `source`; created at the first subscriber. A route
    /// nobody waits on yet needs no wake: its loop claims before it first waits.
    pub(crate) fn subscribe(&self, source: &str, route: &str) -> watch::Receiver<u64> {
        let mut routes = self.routes.lock().unwrap_or_else(|p| p.into_inner());
        routes
            .entry((source.to_string(), route.to_string()))
            .or_insert_with(|| watch::channel(0).0)
            .subscribe()
    }

    /// Move the counters `wake` names.
    pub(crate) fn wake(&self, wake: &Wake) {
        let routes = self.routes.lock().unwrap_or_else(|p| p.into_inner());
        let bump = |tx: &watch::Sender<u64>| tx.send_modify(|n| *n = n.wrapping_add(1));
        match wake {
            Wake::All => routes.values().for_each(bump),
            Wake::Routes {
                source,
                routes: named,
            } => {
                for route in named {
                    if let Some(tx) = routes.get(&(source.clone(), route.clone())) {
                        bump(tx);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A wake moves the counters of the routes it names, and no other.
    #[test]
    fn a_wake_moves_only_the_routes_it_names() {
        let signals = WorkSignals::default();
        let mut a = signals.subscribe("s", "a");
        let mut b = signals.subscribe("s", "b");
        let mut other = signals.subscribe("t", "a");
        signals.wake(&Wake::route("s", "a"));
        assert!(a.has_changed().unwrap());
        assert!(!b.has_changed().unwrap());
        assert!(!other.has_changed().unwrap());
        a.borrow_and_update();
        signals.wake(&Wake::All);
        assert!(a.has_changed().unwrap() && b.has_changed().unwrap());
        assert!(other.has_changed().unwrap());
        b.borrow_and_update();
        other.borrow_and_update();
    }
}
