//! Every write of the embedded store: the writer thread (group commit) and the syncer
//! thread behind it (the fsync), and the handle the store submits writes through.
//!
//! # Why one writer thread, and a syncer behind it
//!
//! A 2xx must mean the entry survives a crash, so every acknowledged write is
//! fsynced. One fsync per request would cap the store at the disk's fsync rate
//! (BENCHMARKS.md, what bounds each figure); sharing one commit between all the
//! requests that arrived meanwhile multiplies throughput. So every write goes to a
//! dedicated OS thread over a bounded channel; the thread takes whatever is queued
//! (up to `batch_max`), applies the writes in one transaction (if one fails, the
//! others are retried one by one, so a bad write never takes its neighbours down),
//! and commits.
//!
//! The writer commits with `synchronous=NORMAL` (no fsync inside the commit) and hands
//! the batch's answers to a syncer thread, which `fdatasync`s the WAL file and only
//! then answers. The writer goes on with the next batch while the disk flushes, and
//! one fsync covers every batch committed in the meantime. The durability is that of
//! `synchronous=FULL`: nobody hears "stored" before the WAL frames of their commit are
//! on disk (SQLite recovers committed WAL frames at open). If an fsync fails, the
//! store stops for good (fail-stop, as PostgreSQL does since "fsyncgate"): after a
//! failed fsync the kernel may have dropped the dirty pages and a later fsync can
//! succeed without them, so nothing on disk can be trusted to hold what was
//! committed. Every answer waiting on it, and every write after it, is a failure
//! (503: never a `duplicate` for a row that may not be on disk), `/readyz` answers
//! 503, and `serve` drains and exits non-zero; a restart recovers from what is on
//! disk.
//!
//! Some writes need not wait for the fsync (leases, delivery records, purges): they
//! are answered at their commit, and the fsync follows with the next batch's. If a
//! crash loses them, the entry is simply delivered again (at-least-once).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rusqlite::{Connection, TransactionBehavior};
use tokio::sync::{mpsc, oneshot, watch};

use super::checkpoint::{Checkpointer, Checkpointing, copy_wal_tail};
use crate::clock::Clock;
use crate::store::{Backend, StoreError, Wake, WorkSignals};

crate::telemetry::label_values! {
    /// What a write of the embedded store is for: label `kind` of
    /// `hookgate_store_write_wait_seconds`, how long a write waited in the writer's
    /// queue before its batch began.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum WriteKind {
        /// A new webhook: its 2xx waits for this write.
        Accept => "accept",
        /// A claim of due deliveries (their leases).
        Claim => "claim",
        /// A delivery's completion.
        Complete => "complete",
        /// Everything else (operator actions, retention, housekeeping).
        Other => "other",
    }
}

/// Queue depth in front of the writer; a full queue pushes back on ingest.
const QUEUE_DEPTH: usize = 8192;

/// Fault injection for tests: `HOOKGATE_FAULT_FSYNC_AFTER=n` makes every WAL fsync
/// after the n-th fail, as a failing disk would. Read once when the store opens.
const FAULT_FSYNC_AFTER: &str = "HOOKGATE_FAULT_FSYNC_AFTER";

/// A write's statements, run inside the batch's transaction with the batch's clock.
/// They keep their own result for the caller and say whether they succeeded; they
/// may run a second time, alone, if the batch is retried without a failing
/// neighbour.
type Statements = Box<dyn FnMut(&Connection, i64) -> bool + Send>;

/// Answers a write's caller once its commit is known: `Ok` after the commit (and,
/// for a write that waits for it, the fsync), or why it failed.
type Reply = Box<dyn FnOnce(Result<(), CommitFailure>) + Send>;

/// One write on its way to the writer thread.
struct WriteJob {
    kind: WriteKind,
    /// When it was submitted: how long it queued is measured when its batch begins.
    queued: Instant,
    statements: Statements,
    reply: Reply,
    /// The routes committing it gives new work to, if any.
    wake: Option<Wake>,
    /// Whether its caller may only hear back once the commit is on disk.
    wait_for_fsync: bool,
    /// Set when the caller stopped waiting (it answered 503 at its deadline): a write
    /// still queued then is dropped, not committed behind the caller's back.
    abandoned: Arc<AtomicBool>,
}

/// Marks a write abandoned when its caller's future is dropped before the answer.
struct AbandonOnDrop(Option<Arc<AtomicBool>>);

impl Drop for AbandonOnDrop {
    fn drop(&mut self) {
        if let Some(flag) = self.0.take() {
            flag.store(true, Ordering::Relaxed);
        }
    }
}

/// Why a write's commit failed; shared by every write of the batch.
#[derive(Debug, Clone, thiserror::Error)]
pub(super) enum CommitFailure {
    #[error("cannot begin a transaction: {0}")]
    Begin(#[source] Arc<rusqlite::Error>),
    #[error("commit failed: {0}")]
    Commit(#[source] Arc<rusqlite::Error>),
    #[error("fsync of the WAL failed: {0}")]
    Fsync(#[source] Arc<std::io::Error>),
    #[error("the sync thread stopped")]
    SyncerGone,
    /// An earlier fsync failed: nothing more is written (see the module docs).
    #[error("the store stopped after a failed fsync")]
    Stopped,
}

impl From<CommitFailure> for StoreError {
    fn from(failure: CommitFailure) -> StoreError {
        match failure {
            CommitFailure::Stopped => StoreError::Stopped,
            CommitFailure::SyncerGone => StoreError::Unavailable("the sync thread stopped"),
            failure => StoreError::backend(Backend::Sqlite, failure),
        }
    }
}

/// What the syncer thread owns.
pub(super) struct Syncing {
    /// Our own handle on the WAL file.
    wal: std::fs::File,
    /// Moved after an fsync that made new work durable (wakes the routes' loops).
    work: Arc<WorkSignals>,
    /// Set for good when an fsync fails.
    stopped: watch::Sender<bool>,
    /// Fault injection: fsyncs after this many fail (see [`FAULT_FSYNC_AFTER`]).
    fault_after: Option<u64>,
}

impl Syncing {
    pub(super) fn new(
        wal: std::fs::File,
        work: Arc<WorkSignals>,
        stopped: watch::Sender<bool>,
    ) -> Syncing {
        Syncing {
            wal,
            work,
            stopped,
            fault_after: std::env::var(FAULT_FSYNC_AFTER)
                .ok()
                .and_then(|v| v.parse::<u64>().ok()),
        }
    }
}

/// The store's side of the writer thread: submits writes, and ends the thread.
pub(super) struct Writer {
    /// Feeds the writer thread; dropping it (in `close`) ends the thread.
    jobs: Mutex<Option<mpsc::Sender<WriteJob>>>,
    /// The writer thread, joined on close so the last batch is committed.
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// The checkpointer, finished on close after the writer (which tells it to stop)
    /// so that its last checkpoint is done when `close` returns.
    checkpointer: Mutex<Option<Checkpointer>>,
    /// How long a caller waits for its write (`store.timeout`) before it gives up
    /// with 503; a write still queued then is dropped.
    timeout: Duration,
}

impl Writer {
    /// Start the writer thread on `conn` (which the syncer thread follows). When it
    /// ends, it tells the checkpointer to stop.
    pub(super) fn start(
        conn: Connection,
        sync: Syncing,
        batch_max: usize,
        checkpointer: Checkpointer,
        clock: Clock,
        timeout: Duration,
    ) -> std::io::Result<Writer> {
        let (tx, rx) = mpsc::channel(QUEUE_DEPTH);
        let checkpointing = checkpointer.shared.clone();
        let thread = std::thread::Builder::new()
            .name("hg-sqlite-write".into())
            .spawn(move || {
                writer_loop(conn, sync, rx, batch_max, &checkpointing, &clock);
                checkpointing
                    .stop
                    .store(true, std::sync::atomic::Ordering::SeqCst);
            })?;
        Ok(Writer {
            jobs: Mutex::new(Some(tx)),
            thread: Mutex::new(Some(thread)),
            checkpointer: Mutex::new(Some(checkpointer)),
            timeout,
        })
    }

    /// Run `statements` on the writer thread inside the next group commit and answer
    /// with their result after the commit, and after its fsync when
    /// `wait_for_fsync`.
    pub(super) async fn submit<T: Send + 'static>(
        &self,
        kind: WriteKind,
        wake: Option<Wake>,
        wait_for_fsync: bool,
        mut statements: impl FnMut(&Connection, i64) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let sender = self
            .jobs
            .lock()
            .map_err(|_| StoreError::Unavailable("writer lock poisoned"))?
            .clone()
            .ok_or(StoreError::Unavailable("store is closed"))?;
        let (answer, answered) = oneshot::channel::<Result<T, StoreError>>();
        let slot: Arc<Mutex<Option<Result<T, StoreError>>>> = Arc::new(Mutex::new(None));
        let run_slot = slot.clone();
        let run = move |conn: &Connection, now: i64| -> bool {
            let result = statements(conn, now);
            let ok = result.is_ok();
            if let Ok(mut s) = run_slot.lock() {
                *s = Some(result);
            }
            ok
        };
        let reply = move |commit: Result<(), CommitFailure>| {
            let result = slot
                .lock()
                .ok()
                .and_then(|mut s| s.take())
                .unwrap_or(Err(StoreError::Unavailable("the write did not run")));
            let _ = answer.send(match commit {
                Ok(()) => result,
                Err(failure) => Err(failure.into()),
            });
        };
        let abandoned = Arc::new(AtomicBool::new(false));
        let job = WriteJob {
            kind,
            queued: Instant::now(),
            statements: Box::new(run),
            reply: Box::new(reply),
            wake,
            wait_for_fsync,
            abandoned: abandoned.clone(),
        };
        let mut guard = AbandonOnDrop(Some(abandoned));
        let work = async move {
            sender
                .send(job)
                .await
                .map_err(|_| StoreError::Unavailable("writer stopped"))?;
            answered
                .await
                .map_err(|_| StoreError::Unavailable("writer dropped the request"))?
        };
        let result = tokio::time::timeout(self.timeout, work)
            .await
            .map_err(|_| StoreError::Timeout(self.timeout))?;
        // Answered: the write ran (or failed) and is no longer queued.
        guard.0 = None;
        result
    }

    /// Whether the writer thread still takes writes.
    pub(super) fn is_running(&self) -> bool {
        self.jobs
            .lock()
            .map(|jobs| jobs.as_ref().is_some_and(|s| !s.is_closed()))
            .unwrap_or(false)
    }

    /// End the writer thread once it has committed what is queued, and wait for it
    /// and for the checkpointer's last checkpoint.
    pub(super) async fn close(&self) {
        // Dropping the last sender ends the writer loop after it drains the queue.
        if let Ok(mut jobs) = self.jobs.lock() {
            jobs.take();
        }
        let thread = self.thread.lock().ok().and_then(|mut h| h.take());
        let checkpointer = self.checkpointer.lock().ok().and_then(|mut c| c.take());
        let _ = tokio::task::spawn_blocking(move || {
            // The writer first: when it ends, it tells the checkpointer to stop.
            if let Some(h) = thread {
                let _ = h.join();
            }
            if let Some(c) = checkpointer {
                c.finish();
            }
        })
        .await;
    }
}

/// A committed batch waiting for its fsync: each caller's answer, and the routes its
/// writes gave new work to.
struct Committed {
    answers: Vec<(Reply, Result<(), CommitFailure>)>,
    wakes: Vec<Wake>,
}

/// The writer: applies and commits batches back to back, while the syncer thread
/// fsyncs the WAL behind it and only then answers the callers. A commit never waits
/// for the disk, and one fsync covers every batch committed while the previous one
/// was in flight.
fn writer_loop(
    mut conn: Connection,
    sync: Syncing,
    mut rx: mpsc::Receiver<WriteJob>,
    batch_max: usize,
    checkpointing: &Checkpointing,
    clock: &Clock,
) {
    let (sync_tx, sync_rx) = std::sync::mpsc::channel::<Committed>();
    let stopped = sync.stopped.subscribe();
    // Committed batches the syncer has not answered yet, and this thread, which the
    // syncer wakes when it has answered them (see `gather`).
    let unsynced = Arc::new(AtomicUsize::new(0));
    let flushed = Flushed {
        unsynced: unsynced.clone(),
        writer: std::thread::current(),
    };
    let syncer = std::thread::Builder::new()
        .name("hg-sqlite-sync".into())
        .spawn(move || syncer(sync, sync_rx, flushed));
    let mut batch = Vec::with_capacity(batch_max);
    let waits: Vec<metrics::Histogram> = WriteKind::ALL
        .iter()
        .map(
            |kind| metrics::histogram!("hookgate_store_write_wait_seconds", "kind" => kind.label()),
        )
        .collect();
    while let Some(first) = rx.blocking_recv() {
        batch.push(first);
        while batch.len() < batch_max {
            match rx.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        gather(&mut rx, &mut batch, batch_max, &unsynced);
        let began = Instant::now();
        for job in &batch {
            waits[job.kind as usize].record(began.duration_since(job.queued).as_secs_f64());
        }
        // A caller that gave up (and answered 503) does not get its write committed
        // behind its back; the provider's retry stores it.
        batch.retain(|job| !job.abandoned.load(Ordering::Relaxed));
        if batch.is_empty() {
            continue;
        }
        if *stopped.borrow() {
            // Fail-stop: nothing more is written after a failed fsync.
            for job in batch.drain(..) {
                (job.reply)(Err(CommitFailure::Stopped));
            }
            continue;
        }
        let wakes: Vec<Wake> = batch.iter_mut().filter_map(|job| job.wake.take()).collect();
        let wait_for_fsync: Vec<bool> = batch.iter().map(|job| job.wait_for_fsync).collect();
        let mut answers = Vec::with_capacity(batch.len());
        for ((reply, result), wait) in commit_batch(&mut conn, &mut batch, clock.now_ms())
            .into_iter()
            .zip(wait_for_fsync)
        {
            if wait {
                answers.push((reply, result));
            } else {
                // Committed (visible to every later read); the fsync follows with the
                // next batch's.
                reply(result);
            }
        }
        let committed = Committed { answers, wakes };
        unsynced.fetch_add(1, Ordering::SeqCst);
        if let Err(std::sync::mpsc::SendError(lost)) = sync_tx.send(committed) {
            unsynced.fetch_sub(1, Ordering::SeqCst);
            for (reply, _) in lost.answers {
                reply(Err(CommitFailure::SyncerGone));
            }
        }
        copy_wal_tail(&conn, checkpointing);
    }
    drop(sync_tx);
    if let Ok(handle) = syncer {
        let _ = handle.join();
    }
    tracing::debug!("sqlite writer stopped");
}

/// A batch this small is held back while an fsync is in flight (see [`gather`]).
const GATHER_BELOW: usize = 64;
/// The longest a batch is held back for an fsync in flight.
const GATHER_AT_MOST: Duration = Duration::from_millis(2);
/// How often a held-back batch looks for more writes.
const GATHER_POLL: Duration = Duration::from_micros(100);

/// While the syncer is flushing earlier batches, keep taking writes into a small
/// batch instead of committing it at once (until the syncer is done, the batch holds
/// `GATHER_BELOW` writes or a claim, or `GATHER_AT_MOST` has passed).
///
/// A batch committed while an fsync is in flight cannot be answered before the next
/// fsync anyway, so committing it early gains its callers nothing; but every commit
/// writes each B-tree page it touched to the WAL again (the right edge of the
/// entries table and of each index: some 50 KiB whether the batch holds one webhook
/// or sixty), and the checkpointer copies them all again. At moderate rates the
/// writer committed a few writes at a time, and those pages, not the webhooks, were
/// most of its work, the syncer's and the checkpointer's (BENCHMARKS.md, the
/// delivering gateway). Held back, a batch is committed as the disk frees up, once
/// per fsync, with what arrived meanwhile.
fn gather(
    rx: &mut mpsc::Receiver<WriteJob>,
    batch: &mut Vec<WriteJob>,
    batch_max: usize,
    unsynced: &AtomicUsize,
) {
    // A claim's deliveries cannot start before its answer, and its answer does not
    // wait for an fsync: it goes at once.
    if batch.iter().any(|job| job.kind == WriteKind::Claim) {
        return;
    }
    let until = Instant::now() + GATHER_AT_MOST;
    while batch.len() < GATHER_BELOW.min(batch_max)
        && unsynced.load(Ordering::SeqCst) > 0
        && Instant::now() < until
    {
        match rx.try_recv() {
            Ok(job) => batch.push(job),
            Err(mpsc::error::TryRecvError::Empty) => std::thread::park_timeout(GATHER_POLL),
            Err(mpsc::error::TryRecvError::Disconnected) => break,
        }
    }
}

/// How the syncer tells the writer that it has answered what was committed.
struct Flushed {
    unsynced: Arc<AtomicUsize>,
    writer: std::thread::Thread,
}

/// fsync the WAL for every committed batch (coalescing what queued up meanwhile),
/// then answer: a 2xx only ever follows a successful fsync. After a failed fsync,
/// every answer is a failure and the store is stopped (see the module docs).
fn syncer(sync: Syncing, rx: std::sync::mpsc::Receiver<Committed>, flushed: Flushed) {
    let mut fsyncs = 0u64;
    while let Ok(first) = rx.recv() {
        let mut pending = vec![first];
        while let Ok(more) = rx.try_recv() {
            pending.push(more);
        }
        let needs_sync = pending
            .iter()
            .any(|c| c.answers.iter().any(|(_, r)| r.is_ok()));
        let synced: Result<(), CommitFailure> = if *sync.stopped.borrow() {
            Err(CommitFailure::Stopped)
        } else if needs_sync {
            fsyncs += 1;
            let result = match sync.fault_after {
                Some(n) if fsyncs > n => Err(std::io::Error::other("injected fsync failure")),
                _ => sync.wal.sync_data(),
            };
            result.map_err(|e| {
                tracing::error!(
                    error = %e,
                    "sqlite: fsync of the WAL failed; the store stops: every write now answers 503, \
                     and hookgate exits once it has drained (a restart recovers from the disk)"
                );
                sync.stopped.send_replace(true);
                CommitFailure::Fsync(Arc::new(e))
            })
        } else {
            Ok(())
        };
        let batches = pending.len();
        let mut wakes = Vec::new();
        for c in pending {
            if synced.is_ok() {
                wakes.extend(c.wakes);
            }
            for (reply, result) in c.answers {
                reply(match (&synced, result) {
                    (Ok(()), r) => r,
                    (Err(e), Ok(())) => Err(e.clone()),
                    (Err(_), Err(e)) => Err(e),
                });
            }
        }
        for wake in &wakes {
            sync.work.wake(wake);
        }
        flushed.unsynced.fetch_sub(batches, Ordering::SeqCst);
        flushed.writer.unpark();
    }
}

/// Apply every write in one transaction and commit once; return each caller's answer
/// (to be given after the WAL is fsynced). If a write fails, the batch is rolled back
/// and each write is applied again in a transaction of its own, so one bad write
/// never takes its neighbours down.
fn commit_batch(
    conn: &mut Connection,
    batch: &mut Vec<WriteJob>,
    now: i64,
) -> Vec<(Reply, Result<(), CommitFailure>)> {
    match conn.transaction_with_behavior(TransactionBehavior::Immediate) {
        Ok(tx) => {
            let mut ok = true;
            for job in batch.iter_mut() {
                if !(job.statements)(&tx, now) {
                    ok = false;
                    break;
                }
            }
            if ok {
                let result = tx.commit().map_err(|e| {
                    const MSG: &str = "sqlite: commit failed; the batch is answered 503";
                    if crate::telemetry::throttle::hit(MSG, "") {
                        tracing::error!(error = %e, "{MSG}");
                    }
                    CommitFailure::Commit(Arc::new(e))
                });
                return batch
                    .drain(..)
                    .map(|job| (job.reply, result.clone()))
                    .collect();
            }
            // Dropping the transaction rolls it back; the writes are retried one by one.
        }
        Err(e) => {
            const MSG: &str = "sqlite: cannot begin a transaction; the batch fails";
            if crate::telemetry::throttle::hit(MSG, "") {
                tracing::error!(error = %e, "{MSG}");
            }
            let failure = CommitFailure::Begin(Arc::new(e));
            return batch
                .drain(..)
                .map(|job| (job.reply, Err(failure.clone())))
                .collect();
        }
    }
    let mut answers = Vec::with_capacity(batch.len());
    for mut job in batch.drain(..) {
        let outcome = match conn.transaction_with_behavior(TransactionBehavior::Immediate) {
            Ok(tx) => {
                if (job.statements)(&tx, now) {
                    tx.commit().map_err(|e| CommitFailure::Commit(Arc::new(e)))
                } else {
                    // The write's own error is in its result; nothing to commit.
                    drop(tx);
                    Ok(())
                }
            }
            Err(e) => Err(CommitFailure::Begin(Arc::new(e))),
        };
        answers.push((job.reply, outcome));
    }
    answers
}

/// Register `hookgate_store_write_wait_seconds` for every kind of write, so that the
/// first scrape lists them all (see `telemetry::register_families`).
pub(crate) fn register_metrics() {
    for kind in WriteKind::ALL {
        let _ = metrics::histogram!("hookgate_store_write_wait_seconds", "kind" => kind.label());
    }
}
