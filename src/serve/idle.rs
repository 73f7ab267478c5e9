//! Which connections of a listener are idle, oldest first, and shedding them.
//!
//! A connection is idle while it has no request in progress: from its accept until
//! hyper has parsed a request head, and again between a response and the next
//! request on a keep-alive connection. An idle connection costs a connection slot
//! and gives nothing back, and thousands that send nothing would otherwise hold
//! `server.max_connections` for up to `header_read_timeout` while a signed webhook
//! waits. So when the listener nears its cap, the accept loop sheds (closes) the
//! connection that has been idle the longest to make room for the new one. The
//! oldest goes first because the connections a flood opened first are the ones that
//! had the most time to send a request and did not, while a client that just
//! connected, or just got its answer, is at the back of the line. Connections that
//! have never completed a request go before every one that has: a provider's pooled
//! keep-alive connection, idle between its webhooks, survives a flood of new
//! connections that send nothing. A connection with a request in progress (head
//! parsed, body or handler running, answer being written) is never in the table; only
//! a stalled body may be shed from it, by [`super::body`], when nothing here is idle.
//!
//! [`super::tracked`] tells the table when a request starts and when its answer has
//! been handed to hyper; the connection's task selects on its [`Connection::shed`]
//! token and drops the hyper connection when it fires.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;
use tokio::time::Instant;

use super::SHED_AFTER;
use tokio_util::sync::CancellationToken;

/// The idle connections of one listener.
#[derive(Debug)]
pub(super) struct IdleConnections {
    table: Mutex<Table>,
    /// Woken whenever a connection becomes idle: an accept that waits for a
    /// connection slot while every connection is busy looks again.
    became_idle: Notify,
    /// `hookgate_connections_idle{listener}`.
    gauge: metrics::Gauge,
}

#[derive(Debug, Default)]
struct Table {
    /// The next idle key: keys only grow, so the first entry has been idle longest.
    next_key: u64,
    /// Idle connections that never completed a request, by when they were accepted:
    /// each one's shed token.
    fresh: BTreeMap<u64, (Instant, CancellationToken)>,
    /// Idle connections that have answered a request, by when they became idle.
    used: BTreeMap<u64, (Instant, CancellationToken)>,
}

impl Table {
    #[cfg(test)]
    fn len(&self) -> usize {
        self.fresh.len() + self.used.len()
    }
}

/// One connection as the table sees it: shared by the connection's task, its
/// service, and the guard of the request in progress.
#[derive(Debug)]
pub(super) struct Connection {
    table: Arc<IdleConnections>,
    /// Cancelled to shed the connection; the connection's task selects on it.
    shed: CancellationToken,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Requests started and not yet answered (one at a time on HTTP/1.1).
    requests: usize,
    /// The connection's key in the table while it is idle.
    idle_key: Option<u64>,
    /// The connection's task has ended: it never goes back into the table.
    closed: bool,
    /// A request on it has been answered.
    used: bool,
}

/// A request in progress on a connection: the connection is busy until the last one
/// is dropped (with the response body, once hyper has taken all of it).
#[derive(Debug)]
pub(super) struct Busy(Arc<Connection>);

impl IdleConnections {
    pub(super) fn new(gauge: metrics::Gauge) -> Arc<IdleConnections> {
        Arc::new(IdleConnections {
            table: Mutex::new(Table::default()),
            became_idle: Notify::new(),
            gauge,
        })
    }

    /// A newly accepted connection, idle from now.
    pub(super) fn accepted(self: &Arc<Self>) -> Arc<Connection> {
        let conn = Arc::new(Connection {
            table: self.clone(),
            shed: CancellationToken::new(),
            state: Mutex::new(State::default()),
        });
        {
            let mut state = conn.state();
            state.idle_key = Some(self.insert(conn.shed.clone(), false));
        }
        conn
    }

    /// Shed the connection idle the longest among those that never completed a
    /// request, else among the others: cancel its token and take it out of the table.
    /// False when no connection is idle, or the one to go has been idle for less
    /// than [`SHED_AFTER`] at `now` (it may be about to send its request).
    pub(super) fn shed_oldest(&self, now: Instant) -> bool {
        let mut table = self.lock();
        let tier = if table.fresh.is_empty() {
            &mut table.used
        } else {
            &mut table.fresh
        };
        let Some(entry) = tier.first_entry() else {
            return false;
        };
        if now.saturating_duration_since(entry.get().0) < SHED_AFTER {
            return false;
        }
        let (_, token) = entry.remove();
        token.cancel();
        self.gauge.decrement(1.0);
        true
    }

    /// Resolves once a connection becomes idle after this call (see
    /// [`tokio::sync::futures::Notified::enable`] for registering before a check).
    pub(super) fn became_idle(&self) -> tokio::sync::futures::Notified<'_> {
        self.became_idle.notified()
    }

    fn insert(&self, token: CancellationToken, used: bool) -> u64 {
        let key = {
            let mut table = self.lock();
            let key = table.next_key;
            table.next_key += 1;
            let since = Instant::now();
            if used {
                table.used.insert(key, (since, token));
            } else {
                table.fresh.insert(key, (since, token));
            }
            self.gauge.increment(1.0);
            key
        };
        self.became_idle.notify_waiters();
        key
    }

    fn remove(&self, key: u64) {
        let mut table = self.lock();
        if table
            .fresh
            .remove(&key)
            .or_else(|| table.used.remove(&key))
            .is_some()
        {
            self.gauge.decrement(1.0);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    #[cfg(test)]
    fn idle(&self) -> usize {
        self.lock().len()
    }
}

impl Connection {
    /// Cancelled when the connection is shed.
    pub(super) fn shed(&self) -> &CancellationToken {
        &self.shed
    }

    /// A request head has been parsed: the connection is busy until the returned
    /// guard is dropped. A connection shed a moment before stays shed (it was idle
    /// when the accept loop chose it); its task is already closing it.
    pub(super) fn request_started(self: &Arc<Self>) -> Busy {
        let mut state = self.state();
        state.requests += 1;
        if let Some(key) = state.idle_key.take() {
            self.table.remove(key);
        }
        Busy(self.clone())
    }

    /// The connection's task has ended: take it out of the table for good.
    pub(super) fn closed(&self) {
        let mut state = self.state();
        state.closed = true;
        if let Some(key) = state.idle_key.take() {
            self.table.remove(key);
        }
    }

    fn request_ended(&self) {
        let mut state = self.state();
        state.requests = state.requests.saturating_sub(1);
        state.used = true;
        if state.requests == 0 && !state.closed && !self.shed.is_cancelled() {
            state.idle_key = Some(self.table.insert(self.shed.clone(), true));
        }
    }

    /// Lock order: a connection's state, then the table.
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.request_ended();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> Arc<IdleConnections> {
        IdleConnections::new(metrics::Gauge::noop())
    }

    fn later() -> Instant {
        Instant::now() + SHED_AFTER
    }

    #[test]
    fn a_connection_idle_for_less_than_the_minimum_is_not_shed() {
        let t = table();
        let a = t.accepted();
        assert!(!t.shed_oldest(Instant::now()));
        assert!(!a.shed().is_cancelled());
        assert!(t.shed_oldest(later()));
        assert!(a.shed().is_cancelled());
    }

    #[test]
    fn the_connection_idle_longest_is_shed_first_and_a_busy_one_never() {
        let t = table();
        let busy = t.accepted();
        let first = t.accepted();
        let second = t.accepted();
        let request = busy.request_started();
        assert!(t.shed_oldest(later()));
        assert!(first.shed().is_cancelled());
        assert!(!busy.shed().is_cancelled() && !second.shed().is_cancelled());
        assert!(t.shed_oldest(later()));
        assert!(second.shed().is_cancelled());
        assert!(!t.shed_oldest(later()), "only the busy connection is left");
        assert!(!busy.shed().is_cancelled());
        drop(request);
        assert_eq!(t.idle(), 1, "answered: idle again");
    }

    #[test]
    fn a_keep_alive_connection_goes_to_the_back_of_the_line_after_its_answer() {
        let t = table();
        let a = t.accepted();
        let b = t.accepted();
        drop(a.request_started());
        assert!(t.shed_oldest(later()));
        assert!(b.shed().is_cancelled(), "b has been idle longer than a");
        assert!(!a.shed().is_cancelled());
    }

    #[test]
    fn a_connection_that_answered_a_request_is_shed_after_every_fresh_one() {
        let t = table();
        let pooled = t.accepted();
        drop(pooled.request_started());
        let fresh: Vec<_> = (0..3).map(|_| t.accepted()).collect();
        for _ in 0..3 {
            assert!(t.shed_oldest(later()));
            assert!(!pooled.shed().is_cancelled());
        }
        assert!(fresh.iter().all(|c| c.shed().is_cancelled()));
        assert!(t.shed_oldest(later()));
        assert!(pooled.shed().is_cancelled(), "the used one goes last");
    }

    #[test]
    fn a_closed_or_shed_connection_never_comes_back() {
        let t = table();
        let a = t.accepted();
        let request = a.request_started();
        a.closed();
        drop(request);
        assert_eq!(t.idle(), 0);
        let b = t.accepted();
        let request = b.request_started();
        // Shed by the loop between its choice and the request (nothing idle here, so
        // cancel by hand as the loop does).
        b.shed().cancel();
        drop(request);
        assert_eq!(t.idle(), 0);
    }
}
