//! A part of the live route table, as the part of the gateway that reads it sees
//! it: ingest its sources, the forwarder its routes, the operations and the
//! console theirs.
//!
//! The table itself (`app::table`) is one immutable value behind one swap point;
//! a reload compiles a new one and swaps it in. Each reader is handed a [`Live`]
//! of its own part, so that it reads the current table at every use without
//! knowing the table's type (which names every layer) and keeps what it loaded
//! for as long as it works with it: an attempt already sent finishes under the
//! version it started with.

use std::sync::Arc;

use tokio::sync::watch;

/// One part of the current route table: [`Live::load`] is the part of the table
/// in force now; [`Live::changes`] moves at every swap.
pub struct Live<T: ?Sized> {
    read: Arc<dyn Fn() -> Arc<T> + Send + Sync>,
    changes: watch::Receiver<u64>,
}

impl<T: ?Sized> Clone for Live<T> {
    fn clone(&self) -> Self {
        Live {
            read: self.read.clone(),
            changes: self.changes.clone(),
        }
    }
}

impl<T: ?Sized + Send + Sync + 'static> Live<T> {
    /// The part `read` takes from the current table; `changes` moves at every swap.
    pub fn new(
        read: impl Fn() -> Arc<T> + Send + Sync + 'static,
        changes: watch::Receiver<u64>,
    ) -> Live<T> {
        Live {
            read: Arc::new(read),
            changes,
        }
    }

    /// A part that never changes (a gateway's parts built by a test).
    pub fn fixed(value: Arc<T>) -> Live<T> {
        let (_, changes) = watch::channel(0);
        Live::new(move || value.clone(), changes)
    }

    /// The part of the table in force now. Hold it for one unit of work (a request,
    /// an attempt), not across them.
    pub fn load(&self) -> Arc<T> {
        (self.read)()
    }

    /// A receiver that is told of every swap of the table (its generation).
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.changes.clone()
    }
}

impl<T: ?Sized> std::fmt::Debug for Live<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Live(..)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reader_sees_each_swap_and_keeps_what_it_loaded() {
        let current = Arc::new(arc_swap::ArcSwap::from_pointee(vec![1]));
        let (tx, rx) = watch::channel(0u64);
        let table = current.clone();
        let live: Live<Vec<i32>> = Live::new(move || table.load_full(), rx);
        let held = live.load();
        let changes = live.changes();
        current.store(Arc::new(vec![2]));
        tx.send_modify(|g| *g += 1);
        assert!(changes.has_changed().unwrap());
        assert_eq!(*live.load(), vec![2]);
        assert_eq!(*held, vec![1], "what a reader loaded stays as it was");
    }
}
