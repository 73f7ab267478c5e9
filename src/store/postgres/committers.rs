//! Group commit, the part accepts (`accept`) and completions (`finish`) share:
//! committer tasks that each take whatever waits in a queue when they are free (up
//! to `store.batch_max`) and commit it as one batch (each in one transaction, run
//! again whole, up to [`RETRIES`] times, when PostgreSQL rolled it back for a
//! deadlock).

use std::sync::Arc;
use tokio::sync::{Mutex, mpsc};

use super::PgShared;

/// How many times a batch a deadlock rolled back is run again.
pub(super) const RETRIES: usize = 3;

/// Start `committers` tasks, each taking a batch of up to `batch_max` waiting items
/// from `rx` at a time and handing it to `commit`.
pub(super) fn start<W, F, Fut>(
    shared: Arc<PgShared>,
    rx: mpsc::Receiver<W>,
    committers: usize,
    batch_max: usize,
    commit: F,
) where
    W: Send + 'static,
    F: Fn(Arc<PgShared>, Vec<W>) -> Fut + Copy + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let rx = Arc::new(Mutex::new(rx));
    for _ in 0..committers.max(1) {
        let (shared, rx) = (shared.clone(), rx.clone());
        tokio::spawn(async move {
            loop {
                let batch = {
                    let mut rx = rx.lock().await;
                    let Some(first) = rx.recv().await else {
                        return;
                    };
                    let mut batch = vec![first];
                    while batch.len() < batch_max {
                        match rx.try_recv() {
                            Ok(w) => batch.push(w),
                            Err(_) => break,
                        }
                    }
                    batch
                };
                commit(shared.clone(), batch).await;
            }
        });
    }
}
