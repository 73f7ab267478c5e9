//! Completions, group-committed: the forwarder completes each delivery on its own,
//! and most completions are one statement (a delivery that is its entry's only one
//! and leaves no ordered line: `Finished::needs_transaction`). Those waiting when a
//! committer is free go into one transaction, their statements sent together and
//! counted with one row of `counts` per source and minute: a transaction, a commit
//! record and a counter row per batch instead of per delivery. The rest take the
//! path of one transaction each (`delivery::complete`).
//!
//! Each completion of a batch changes its own delivery's row and its own entry's
//! (an entry with one delivery), so batches wait on each other only when one
//! delivery is completed twice at once (a stale lease's holder and the current
//! one); a deadlock between two such batches rolls both back whole, and the one
//! PostgreSQL chose is run again.

use std::collections::HashMap;
use std::sync::Arc;

use deadpool_postgres::GenericClient;
use tokio::sync::{mpsc, oneshot};

use super::PgShared;
use super::cached::Cached as _;
use super::delivery::complete_row;
use crate::store::Finished;
use crate::store::activity::{Counted, minute_of};
use crate::store::{Completion, StoreError};

/// A completion waiting for its batch.
pub(super) struct Waiting {
    pub(super) finished: Finished,
    pub(super) completion: Completion,
    pub(super) now: i64,
    pub(super) reply: oneshot::Sender<Result<bool, StoreError>>,
}

/// Start `committers` tasks taking batches of up to `batch_max` from `rx`.
pub(super) fn start(
    shared: Arc<PgShared>,
    rx: mpsc::Receiver<Waiting>,
    committers: usize,
    batch_max: usize,
) {
    super::committers::start(shared, rx, committers, batch_max, commit);
}

/// Commit one batch and answer each of its completions.
async fn commit(shared: Arc<PgShared>, batch: Vec<Waiting>) {
    let mut outcome = Err(StoreError::Unavailable("no attempt"));
    for _ in 0..super::committers::RETRIES {
        outcome = super::connect::with(&shared.relaxed, shared.timeout, async |conn| {
            let c = &*conn;
            // `BEGIN` goes out with the batch's first statement (see `accept`).
            let begin = async { Ok::<_, StoreError>(c.batch_execute("BEGIN").await?) };
            let rows = futures_util::future::try_join_all(
                batch
                    .iter()
                    .map(|w| complete_row(c, &w.finished, &w.completion, w.now, false)),
            );
            let done = async {
                let ((), applied) = futures_util::future::try_join(begin, rows).await?;
                count(c, &batch, &applied).await?;
                Ok::<_, StoreError>(applied)
            };
            match done.await {
                Ok(applied) => {
                    c.batch_execute("COMMIT").await?;
                    Ok(applied)
                }
                Err(e) => {
                    let _ = c.batch_execute("ROLLBACK").await;
                    Err(e)
                }
            }
        })
        .await;
        match &outcome {
            Err(e) if super::connect::retryable(e) => continue,
            _ => break,
        }
    }
    match outcome {
        Ok(applied) => {
            for (w, (applied, _)) in batch.into_iter().zip(applied) {
                let _ = w.reply.send(Ok(applied));
            }
        }
        Err(e) => {
            for w in batch {
                let _ = w.reply.send(Err(super::fan_out(&e)));
            }
        }
    }
}

/// The batch's applied completions, counted: delivered and failed per source and
/// minute, one row each.
async fn count(
    c: &impl GenericClient,
    batch: &[Waiting],
    applied: &[(bool, bool)],
) -> Result<(), StoreError> {
    let mut counts: HashMap<(&str, i64), (i64, i64)> = HashMap::new();
    for (w, (applied, _)) in batch.iter().zip(applied) {
        if !applied {
            continue;
        }
        let slot = counts
            .entry((w.finished.source.as_str(), minute_of(w.now)))
            .or_default();
        match Counted::of(&w.completion) {
            Some(Counted::Delivered) => slot.0 += 1,
            Some(Counted::Failed) => slot.1 += 1,
            None => {}
        }
    }
    counts.retain(|_, (d, f)| *d + *f > 0);
    if counts.is_empty() {
        return Ok(());
    }
    let (mut sources, mut minutes, mut delivered, mut failed) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for ((s, m), (d, f)) in counts {
        sources.push(s);
        minutes.push(m);
        delivered.push(d);
        failed.push(f);
    }
    c.execute_cached(
        "INSERT INTO counts (source, minute, delivered, failed)
         SELECT * FROM unnest($1::text[], $2::int8[], $3::int8[], $4::int8[])",
        &[&sources, &minutes, &delivered, &failed],
    )
    .await?;
    Ok(())
}
