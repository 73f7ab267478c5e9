//! The embedded store: SQLite in WAL mode, one writer thread doing group commit.
//!
//! # Why one writer thread, and a syncer behind it
//!
//! A 2xx must mean the entry survives a crash, so every acknowledged write is
//! fsynced. One fsync per request caps this disk at about 3,000 commits per second;
//! sharing one commit between all the requests that arrived meanwhile multiplies
//! throughput. So every write goes to a dedicated OS thread over a bounded channel;
//! the thread takes whatever is queued (up to `batch_max`), applies the operations in
//! one transaction (if one fails, the others are retried one by one, so a bad
//! operation never takes its neighbours down), and commits.
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
//! Checkpoints run on a third thread, off the commit path.
//!
//! Reads use a separate connection (WAL lets them run beside the writer) on the
//! blocking thread pool. rusqlite types never leave this file.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use rusqlite::{Connection, OpenFlags, OptionalExtension, TransactionBehavior, params};
use tokio::sync::{mpsc, oneshot, watch};

use super::private;
use super::{
    Accepted, Attempt, AuditEvent, Claim, Completion, Entry, IdPage, ListQuery, ListedEntry,
    MAX_PAGE, NewEntry, Page, Purged, SourceStats, Status, Store, StoreError, Transition,
    decode_headers, encode_headers, now_ms,
};
use crate::config::EmbeddedConfig;

/// The database file inside the store directory.
pub const DB_FILE: &str = "hookgate.db";

/// Schema migrations, applied in order; `PRAGMA user_version` records how many ran.
const MIGRATIONS: &[&str] = &[r#"
CREATE TABLE entries (
    id              TEXT PRIMARY KEY,
    source          TEXT NOT NULL,
    event_id        TEXT,
    event_type      TEXT,
    dedupe_key      TEXT NOT NULL,
    received_at     INTEGER NOT NULL,
    status          TEXT NOT NULL,
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at INTEGER,
    lease_owner     TEXT,
    lease_until     INTEGER,
    last_error      TEXT,
    budget_start    INTEGER NOT NULL,
    budget_attempts INTEGER NOT NULL DEFAULT 0,
    updated_at      INTEGER NOT NULL,
    headers         TEXT NOT NULL,
    body            BLOB NOT NULL
);
CREATE INDEX entries_due ON entries(source, next_attempt_at) WHERE status = 'pending';
CREATE INDEX entries_done ON entries(status, updated_at) WHERE status != 'pending';
CREATE INDEX entries_source ON entries(source, id);
CREATE INDEX entries_status ON entries(status, id);
CREATE INDEX entries_source_status ON entries(source, status, id);
CREATE TABLE dedupe (
    source     TEXT NOT NULL,
    dkey       TEXT NOT NULL,
    entry_id   TEXT NOT NULL,
    expires_at INTEGER NOT NULL,
    PRIMARY KEY (source, dkey)
) WITHOUT ROWID;
CREATE INDEX dedupe_expiry ON dedupe(expires_at);
CREATE TABLE attempts (
    entry_id    TEXT NOT NULL,
    n           INTEGER NOT NULL,
    at          INTEGER NOT NULL,
    status_code INTEGER,
    error       TEXT,
    latency_ms  INTEGER,
    PRIMARY KEY (entry_id, n)
) WITHOUT ROWID;
CREATE TABLE audit (
    entry_id TEXT NOT NULL,
    at       INTEGER NOT NULL,
    action   TEXT NOT NULL,
    actor    TEXT,
    note     TEXT
);
CREATE INDEX audit_entry ON audit(entry_id, at);
CREATE TABLE sources (
    name   TEXT PRIMARY KEY,
    paused INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;
CREATE TABLE stats (
    source     TEXT PRIMARY KEY,
    received   INTEGER NOT NULL DEFAULT 0,
    duplicates INTEGER NOT NULL DEFAULT 0,
    unverified INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;
"#];

/// How long a read waits for the read connection before giving up with 503
/// (`StoreError::Timeout`). Reads are short (a listing reads no body), so a read
/// that waits this long is stuck behind something that should not be; the caller
/// hears so instead of waiting forever.
pub const READ_WAIT: Duration = Duration::from_secs(5);
/// How long `ping` waits for its connection (only another ping holds it).
const PROBE_WAIT: Duration = Duration::from_secs(1);

/// How long a caller waits for the writer before giving up with 503.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// Queue depth in front of the writer; a full queue pushes back on ingest.
const QUEUE_DEPTH: usize = 8192;

/// A write job. `run` applies it (and may run a second time, alone, if its batch has
/// to be retried without a failing neighbour); `finish` answers the caller after the
/// commit (`Ok`) or its failure (`Err`).
type Run = Box<dyn FnMut(&Connection, i64) -> bool + Send>;
type Finish = Box<dyn FnOnce(Result<(), String>) + Send>;

struct Op {
    run: Run,
    finish: Finish,
    /// Whether committing it creates work for the forwarder.
    notify: bool,
    /// Whether its caller may only hear back once the commit is on disk. Leases and
    /// delivery records need not wait: if a crash loses them, the entry is simply
    /// delivered again (at-least-once).
    durable: bool,
}

pub struct SqliteStore {
    /// Feeds the writer thread; dropping it (in `close`) ends the thread.
    tx: Mutex<Option<mpsc::Sender<Op>>>,
    /// The read connection, used on the blocking pool; a read waits at most
    /// `READ_WAIT` for it.
    reader: Arc<tokio::sync::Mutex<Connection>>,
    /// `ping`'s own connection: a long read never makes `/readyz` wait.
    probe: Arc<tokio::sync::Mutex<Connection>>,
    /// The writer thread, joined on close so the last batch is committed.
    writer: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// Bumped after a commit that stored new entries.
    work: watch::Receiver<u64>,
    /// Pauses and discards made through this store.
    controls: super::Controls,
    /// Set (once, for good) when an fsync failed.
    stopped: watch::Receiver<bool>,
}

/// Fault injection for tests: `HOOKGATE_FAULT_FSYNC_AFTER=n` makes every WAL fsync
/// after the n-th fail, as a failing disk would. Read once when the store opens.
const FAULT_FSYNC_AFTER: &str = "HOOKGATE_FAULT_FSYNC_AFTER";

/// Why every write fails once the store stopped.
const STOPPED: &str = "the embedded store stopped after a failed fsync; restart hookgate to recover from what is on disk";

fn open_conn(path: &PathBuf) -> Result<Connection, rusqlite::Error> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    conn.busy_timeout(Duration::from_secs(5))?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    // FULL on every connection except the writer, which commits with NORMAL and has
    // the WAL fsynced by the syncer thread before anyone is answered (see
    // `writer_loop`): the same durability, with the fsync off the commit path.
    conn.pragma_update(None, "synchronous", "FULL")?;
    conn.pragma_update(None, "cache_size", -16384)?; // 16 MiB
    // Well above the size at which the WAL restarts (`WAL_RESTART_FRAMES`, ~16 MiB,
    // which a busy writer overshoots while the checkpointer catches up): a
    // restart reuses the file as it is (truncating it stalls the writer, and the
    // blocks would have to be allocated again: BENCHMARKS.md, the WAL restart); only a
    // WAL that grew past this while a restart could not happen is cut back.
    conn.pragma_update(None, "journal_size_limit", 128 * 1024 * 1024)?;
    // Checkpoints run on their own thread (see `checkpointer`), not inside commits.
    conn.pragma_update(None, "wal_autocheckpoint", 0)?;
    Ok(conn)
}

fn migrate(conn: &mut Connection) -> Result<(), rusqlite::Error> {
    let version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
    let version = usize::try_from(version).unwrap_or(0);
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(version) {
        let tx = conn.transaction()?;
        tx.execute_batch(sql)?;
        tx.pragma_update(
            None,
            "user_version",
            i64::try_from(i + 1).unwrap_or(i64::MAX),
        )?;
        tx.commit()?;
    }
    Ok(())
}

impl SqliteStore {
    pub async fn open(cfg: &EmbeddedConfig) -> Result<SqliteStore, StoreError> {
        let dir = cfg.path.clone();
        let batch_max = cfg.batch_max.max(1);
        tokio::task::spawn_blocking(move || Self::open_blocking(dir, batch_max))
            .await
            .map_err(|e| StoreError::Unavailable(format!("open task failed: {e}")))?
    }

    fn open_blocking(dir: PathBuf, batch_max: usize) -> Result<SqliteStore, StoreError> {
        // Webhook bodies carry customer data: a private directory, private files (see
        // `store::private`), settled before SQLite creates anything.
        private::prepare_dir(&dir)?;
        let path = dir.join(DB_FILE);
        for suffix in ["", "-wal", "-shm", "-journal"] {
            private::tighten_file(&dir.join(format!("{DB_FILE}{suffix}")))?;
        }
        private::create_file(&path)?;
        let mut writer = open_conn(&path)?;
        migrate(&mut writer)?;
        writer.pragma_update(None, "synchronous", "NORMAL")?;
        // Our own handle on the WAL: fdatasync flushes the file whichever descriptor
        // wrote it. The migration's write made sure the file exists.
        let wal = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(dir.join(format!("{DB_FILE}-wal")))?;
        let reader = open_conn(&path)?;
        let probe = open_conn(&path)?;
        let (tx, rx) = mpsc::channel(QUEUE_DEPTH);
        let (work_tx, work_rx) = watch::channel(0u64);
        let (stopped_tx, stopped_rx) = watch::channel(false);
        let fault_after = std::env::var(FAULT_FSYNC_AFTER)
            .ok()
            .and_then(|v| v.parse::<u64>().ok());
        let shared = Arc::new(Checkpointing::default());
        let checkpoint_conn = open_conn(&path)?;
        let writeback = Writeback::open(&path)?;
        let checkpoint_shared = shared.clone();
        std::thread::Builder::new()
            .name("hookgate-sqlite-checkpoint".into())
            .spawn(move || checkpointer(checkpoint_conn, writeback, checkpoint_shared))?;
        let handle = std::thread::Builder::new()
            .name("hookgate-sqlite-writer".into())
            .spawn(move || {
                let sync = Syncing {
                    wal,
                    work: work_tx,
                    stopped: stopped_tx,
                    fault_after,
                };
                writer_loop(writer, sync, rx, batch_max, &shared);
                shared.stop.store(true, std::sync::atomic::Ordering::SeqCst);
            })?;
        Ok(SqliteStore {
            tx: Mutex::new(Some(tx)),
            reader: Arc::new(tokio::sync::Mutex::new(reader)),
            probe: Arc::new(tokio::sync::Mutex::new(probe)),
            writer: Mutex::new(Some(handle)),
            work: work_rx,
            controls: super::Controls::new(),
            stopped: stopped_rx,
        })
    }

    /// Run `f` on the writer thread inside the next group commit; answer after commit.
    async fn write<T: Send + 'static>(
        &self,
        notify: bool,
        f: impl FnMut(&Connection, i64) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        self.submit(notify, true, f).await
    }

    /// A write whose caller need not wait for the fsync (claims, completions, purges).
    async fn write_fast<T: Send + 'static>(
        &self,
        notify: bool,
        f: impl FnMut(&Connection, i64) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        self.submit(notify, false, f).await
    }

    async fn submit<T: Send + 'static>(
        &self,
        notify: bool,
        durable: bool,
        f: impl FnMut(&Connection, i64) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let sender = self
            .tx
            .lock()
            .map_err(|_| StoreError::Unavailable("writer lock poisoned".into()))?
            .clone()
            .ok_or_else(|| StoreError::Unavailable("store is closed".into()))?;
        let (reply, rx) = oneshot::channel::<Result<T, StoreError>>();
        let slot: Arc<Mutex<Option<Result<T, StoreError>>>> = Arc::new(Mutex::new(None));
        let run_slot = slot.clone();
        let mut f = f;
        let run = move |conn: &Connection, now: i64| -> bool {
            let result = f(conn, now);
            let ok = result.is_ok();
            if let Ok(mut s) = run_slot.lock() {
                *s = Some(result);
            }
            ok
        };
        let finish = move |commit: Result<(), String>| {
            let result = slot
                .lock()
                .ok()
                .and_then(|mut s| s.take())
                .unwrap_or_else(|| Err(StoreError::Unavailable("job did not run".into())));
            let _ = reply.send(match commit {
                Ok(()) => result,
                Err(e) => Err(StoreError::Unavailable(e)),
            });
        };
        let op = Op {
            run: Box::new(run),
            finish: Box::new(finish),
            notify,
            durable,
        };
        let work = async move {
            sender
                .send(op)
                .await
                .map_err(|_| StoreError::Unavailable("writer stopped".into()))?;
            rx.await
                .map_err(|_| StoreError::Unavailable("writer dropped the request".into()))?
        };
        tokio::time::timeout(WRITE_TIMEOUT, work)
            .await
            .map_err(|_| StoreError::Timeout(WRITE_TIMEOUT))?
    }

    async fn read<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        run_on(&self.reader, READ_WAIT, f).await
    }
}

/// Run `f` with `conn` on the blocking pool, after waiting at most `wait` for it.
async fn run_on<T: Send + 'static>(
    conn: &Arc<tokio::sync::Mutex<Connection>>,
    wait: Duration,
    f: impl FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
) -> Result<T, StoreError> {
    let guard = tokio::time::timeout(wait, conn.clone().lock_owned())
        .await
        .map_err(|_| StoreError::Timeout(wait))?;
    tokio::task::spawn_blocking(move || f(&guard))
        .await
        .map_err(|e| StoreError::Unavailable(format!("read task failed: {e}")))?
}

/// The WAL is restarted from its beginning once it holds this many frames (a frame is
/// a 4 KiB page plus a 24-byte header, so about 16 MiB; below `journal_size_limit`).
/// A short WAL keeps acknowledgement tails low at the same throughput (BENCHMARKS.md,
/// the WAL restart size, measured both ways) and keeps less on disk.
const WAL_RESTART_FRAMES: i64 = 4096;
/// The tail the writer is asked to copy: at most the frames appended during one
/// checkpoint pass short enough to let no more than this many pile up (about 2 MiB).
const WAL_TAIL_FRAMES: i64 = 512;
/// Back-to-back passes after which a longer tail is handed over (up to
/// `WAL_LONG_TAIL_FRAMES`, ~16 MiB, tens of milliseconds for the writer), so that the
/// WAL restarts even when the disk is too slow for the passes to get shorter.
const WAL_MAX_PASSES: u32 = 6;
/// The longest tail ever handed to the writer: a longer one would stall acknowledgements
/// for too long, so the checkpointer keeps copying (and the WAL keeps growing) until
/// the load lets a pass catch up.
const WAL_LONG_TAIL_FRAMES: i64 = 4096;
/// Rounds (of 100 ms) a handed-over tail may wait for an idle writer before the
/// checkpointer takes it back and copies it itself.
const WAL_TAIL_PATIENCE: u32 = 5;

const TAIL_NONE: u8 = 0;
const TAIL_HANDED: u8 = 1;
const TAIL_COPYING: u8 = 2;

/// What the checkpointer and the writer share.
#[derive(Default)]
struct Checkpointing {
    /// Set when the writer has stopped: the checkpointer runs a last full checkpoint.
    stop: std::sync::atomic::AtomicBool,
    /// `TAIL_NONE`, or `TAIL_HANDED` by the checkpointer when it has copied all but a
    /// short tail of a long WAL, or `TAIL_COPYING` while the writer (between two
    /// batches) or the checkpointer (taking it back from an idle writer) copies it.
    tail: std::sync::atomic::AtomicU8,
}

/// `PRAGMA wal_checkpoint(PASSIVE)`: (frames in the WAL, frames copied into the db).
fn checkpoint(conn: &Connection) -> Result<(i64, i64), rusqlite::Error> {
    conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| {
        Ok((r.get(1)?, r.get(2)?))
    })
}

/// Copy the WAL back into the database on its own thread, so that commits (and the
/// acknowledgements waiting on them) never pay for a long checkpoint. PASSIVE never
/// blocks the writer.
///
/// A checkpoint alone never lets the WAL restart under steady load: SQLite writes
/// from the start of the WAL again only when a write transaction begins after every
/// frame has been copied, and the writer appends new frames while the checkpointer
/// copies. An ever-growing WAL costs more than disk space: every frame lands in a
/// freshly allocated file block (zeroed, then copied into by the kernel), which made
/// up half of the writer's CPU time under load. So once the WAL is long and the
/// checkpointer has caught up to a short tail, it hands the tail to the writer, which
/// copies it between two batches (a few milliseconds); the next batch then overwrites
/// the WAL from its beginning, in blocks the page cache already holds.
fn checkpointer(conn: Connection, writeback: Writeback, shared: Arc<Checkpointing>) {
    use std::sync::atomic::Ordering;
    // While the WAL is long: the frame count at the previous pass, and how many
    // passes have run back to back.
    let mut chasing: Option<(i64, u32)> = None;
    // Rounds a handed-over tail has waited for the writer.
    let mut waited = 0u32;
    while !shared.stop.load(Ordering::SeqCst) {
        if chasing.is_none() {
            std::thread::sleep(Duration::from_millis(100));
        }
        match shared.tail.load(Ordering::SeqCst) {
            TAIL_NONE => waited = 0,
            TAIL_HANDED => {
                chasing = None;
                waited += 1;
                // The writer is idle (it copies the tail after its next batch): take
                // the tail back rather than leave the WAL unchecked.
                if waited >= WAL_TAIL_PATIENCE && copy_wal_tail(&conn, &shared) {
                    writeback.start();
                    waited = 0;
                }
                continue;
            }
            _ => {
                // The writer is copying it.
                chasing = None;
                continue;
            }
        }
        // A pass copies the frames the WAL held when it began; the writer appends
        // more meanwhile. So when the WAL is long, pass again at once: each pass is
        // shorter than the one before, until the frames appended during one pass
        // (what the next leaves behind too) make a short tail.
        let pass = checkpoint(&conn);
        writeback.start();
        chasing = match pass {
            // Only a complete pass (nothing held back by a reader) leaves just a tail.
            Ok((log, copied)) if log >= WAL_RESTART_FRAMES && copied == log => match chasing {
                Some((previous, passes)) if log >= previous => {
                    let appended = log - previous;
                    if appended <= WAL_TAIL_FRAMES
                        || (passes >= WAL_MAX_PASSES && appended <= WAL_LONG_TAIL_FRAMES)
                    {
                        shared.tail.store(TAIL_HANDED, Ordering::SeqCst);
                        None
                    } else {
                        Some((log, passes.saturating_add(1)))
                    }
                }
                // The WAL restarted meanwhile: start over.
                Some(_) | None => Some((log, 1)),
            },
            Ok(_) => None,
            Err(e) => {
                tracing::warn!(error = %e, "sqlite: checkpoint failed");
                None
            }
        };
    }
    // A final full checkpoint once the writer has stopped.
    let _ = conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()));
}

/// Starts writing the database file's dirty pages to disk, without waiting for them.
///
/// A PASSIVE checkpoint that the writer outran leaves the pages it copied dirty in the
/// page cache (SQLite fsyncs the database only after a pass that copied everything);
/// they would pile up for the kernel's 30 s writeback, and whichever fsync came first
/// (the writer's, when it copies a WAL tail) paid for all of them, a stall an order
/// of magnitude longer than one pass's (BENCHMARKS.md, the checkpoint writeback).
/// Starting the writeback after each pass keeps that backlog to one pass. Failure only costs that stall, so it is logged and ignored.
struct Writeback(#[cfg(target_os = "linux")] Arc<std::fs::File>);

impl Writeback {
    /// A descriptor on the database file, shared per path and kept for the life of the
    /// process: closing any descriptor of a file drops every POSIX lock the process
    /// holds on it, SQLite's included, so ours is never closed while SQLite's
    /// connections may be open.
    #[cfg(target_os = "linux")]
    fn open(path: &std::path::Path) -> std::io::Result<Writeback> {
        use std::collections::HashMap;
        use std::sync::OnceLock;
        static FILES: OnceLock<Mutex<HashMap<PathBuf, Arc<std::fs::File>>>> = OnceLock::new();
        let key = std::fs::canonicalize(path)?;
        let mut files = FILES
            .get_or_init(Default::default)
            .lock()
            .map_err(|_| std::io::Error::other("writeback registry poisoned"))?;
        if let Some(f) = files.get(&key) {
            return Ok(Writeback(f.clone()));
        }
        let f = Arc::new(std::fs::File::open(&key)?);
        files.insert(key, f.clone());
        Ok(Writeback(f))
    }

    #[cfg(not(target_os = "linux"))]
    fn open(_path: &std::path::Path) -> std::io::Result<Writeback> {
        Ok(Writeback())
    }

    #[cfg(target_os = "linux")]
    fn start(&self) {
        use std::os::fd::AsRawFd;
        // SAFETY: the descriptor belongs to a file that is never closed (see `open`);
        // the call reads no memory of ours.
        let rc =
            unsafe { libc::sync_file_range(self.0.as_raw_fd(), 0, 0, libc::SYNC_FILE_RANGE_WRITE) };
        if rc != 0 {
            tracing::debug!(error = %std::io::Error::last_os_error(), "sqlite: cannot start the database file's writeback");
        }
    }

    /// Elsewhere the kernel's own writeback has to do.
    #[cfg(not(target_os = "linux"))]
    fn start(&self) {}
}

/// Copy the short tail the checkpointer handed over, so that the next transaction
/// restarts the WAL: on the writer thread between two batches, or on the checkpointer
/// taking it back from an idle writer. Whoever claims it copies it; false if there was
/// nothing to claim.
fn copy_wal_tail(conn: &Connection, shared: &Checkpointing) -> bool {
    use std::sync::atomic::Ordering;
    if shared
        .tail
        .compare_exchange(
            TAIL_HANDED,
            TAIL_COPYING,
            Ordering::SeqCst,
            Ordering::SeqCst,
        )
        .is_err()
    {
        return false;
    }
    if let Err(e) = checkpoint(conn) {
        tracing::warn!(error = %e, "sqlite: checkpoint of the WAL's tail failed");
    }
    shared.tail.store(TAIL_NONE, Ordering::SeqCst);
    true
}

/// A committed batch waiting for its fsync: each caller's answer, and whether the
/// batch holds new work for the forwarder.
struct Committed {
    answers: Vec<(Finish, Result<(), String>)>,
    notify: bool,
}

/// The writer: applies and commits batches back to back, while the syncer thread
/// fsyncs the WAL behind it and only then answers the callers. A commit never waits
/// for the disk, and one fsync covers every batch committed while the previous one
/// was in flight.
fn writer_loop(
    mut conn: Connection,
    sync: Syncing,
    mut rx: mpsc::Receiver<Op>,
    batch_max: usize,
    checkpointing: &Checkpointing,
) {
    let (sync_tx, sync_rx) = std::sync::mpsc::channel::<Committed>();
    let stopped = sync.stopped.subscribe();
    let syncer = std::thread::Builder::new()
        .name("hookgate-sqlite-sync".into())
        .spawn(move || syncer(sync, sync_rx));
    let mut batch = Vec::with_capacity(batch_max);
    while let Some(first) = rx.blocking_recv() {
        batch.push(first);
        while batch.len() < batch_max {
            match rx.try_recv() {
                Ok(op) => batch.push(op),
                Err(_) => break,
            }
        }
        if *stopped.borrow() {
            // Fail-stop: nothing more is written after a failed fsync.
            for op in batch.drain(..) {
                (op.finish)(Err(STOPPED.into()));
            }
            continue;
        }
        let notify = batch.iter().any(|op| op.notify);
        let durable: Vec<bool> = batch.iter().map(|op| op.durable).collect();
        let mut answers = Vec::with_capacity(batch.len());
        for ((finish, result), durable) in
            commit_batch(&mut conn, &mut batch).into_iter().zip(durable)
        {
            if durable {
                answers.push((finish, result));
            } else {
                // Committed (visible to every later read); the fsync follows with the
                // next batch's.
                finish(result);
            }
        }
        let committed = Committed { answers, notify };
        if let Err(std::sync::mpsc::SendError(lost)) = sync_tx.send(committed) {
            for (finish, _) in lost.answers {
                finish(Err("the sync thread stopped".into()));
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

/// What the syncer thread owns.
struct Syncing {
    /// Our own handle on the WAL file.
    wal: std::fs::File,
    /// Bumped after an fsync that made new work durable (wakes the forwarder).
    work: watch::Sender<u64>,
    /// Set for good when an fsync fails.
    stopped: watch::Sender<bool>,
    /// Fault injection: fsyncs after this many fail (see [`FAULT_FSYNC_AFTER`]).
    fault_after: Option<u64>,
}

/// fsync the WAL for every committed batch (coalescing what queued up meanwhile),
/// then answer: a 2xx only ever follows a successful fsync. After a failed fsync,
/// every answer is a failure and the store is stopped (see the module docs).
fn syncer(sync: Syncing, rx: std::sync::mpsc::Receiver<Committed>) {
    let mut fsyncs = 0u64;
    while let Ok(first) = rx.recv() {
        let mut pending = vec![first];
        while let Ok(more) = rx.try_recv() {
            pending.push(more);
        }
        let needs_sync = pending
            .iter()
            .any(|c| c.answers.iter().any(|(_, r)| r.is_ok()));
        let synced: Result<(), String> = if *sync.stopped.borrow() {
            Err(STOPPED.into())
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
                format!("fsync failed: {e}")
            })
        } else {
            Ok(())
        };
        let notify = synced.is_ok() && pending.iter().any(|c| c.notify);
        for c in pending {
            for (finish, result) in c.answers {
                finish(match (&synced, result) {
                    (Ok(()), r) => r,
                    (Err(e), Ok(())) => Err(e.clone()),
                    (Err(_), Err(e)) => Err(e),
                });
            }
        }
        if notify {
            sync.work.send_modify(|n| *n = n.wrapping_add(1));
        }
    }
}

/// Apply every job in one transaction and commit once; return each caller's answer
/// (to be given after the WAL is fsynced). If a job fails, the batch is rolled back
/// and each job is applied again in a transaction of its own, so one bad job never
/// takes its neighbours down.
fn commit_batch(conn: &mut Connection, batch: &mut Vec<Op>) -> Vec<(Finish, Result<(), String>)> {
    let now = now_ms();
    match conn.transaction_with_behavior(TransactionBehavior::Immediate) {
        Ok(tx) => {
            let mut ok = true;
            for op in batch.iter_mut() {
                if !(op.run)(&tx, now) {
                    ok = false;
                    break;
                }
            }
            if ok {
                let result = tx.commit().map_err(|e| {
                    tracing::error!(error = %e, "sqlite: commit failed; the batch is answered 503");
                    format!("commit failed: {e}")
                });
                return batch
                    .drain(..)
                    .map(|op| (op.finish, result.clone()))
                    .collect();
            }
            // Dropping the transaction rolls it back; the jobs are retried one by one.
        }
        Err(e) => {
            tracing::error!(error = %e, "sqlite: cannot begin a transaction; the batch fails");
            let msg = format!("cannot begin a transaction: {e}");
            return batch
                .drain(..)
                .map(|op| (op.finish, Err(msg.clone())))
                .collect();
        }
    }
    let mut answers = Vec::with_capacity(batch.len());
    for mut op in batch.drain(..) {
        let outcome = match conn.transaction_with_behavior(TransactionBehavior::Immediate) {
            Ok(tx) => {
                if (op.run)(&tx, now) {
                    tx.commit().map_err(|e| format!("commit failed: {e}"))
                } else {
                    // The job's own error is in its result; nothing to commit.
                    drop(tx);
                    Ok(())
                }
            }
            Err(e) => Err(format!("cannot begin a transaction: {e}")),
        };
        answers.push((op.finish, outcome));
    }
    answers
}

fn apply_accept(
    conn: &Connection,
    e: &NewEntry,
    headers: &str,
    now: i64,
) -> Result<Accepted, StoreError> {
    let existing: Option<String> = conn
        .prepare_cached(
            "SELECT entry_id FROM dedupe WHERE source = ?1 AND dkey = ?2 AND expires_at > ?3",
        )?
        .query_row(params![e.source, e.dedupe_key, now], |r| r.get(0))
        .optional()?;
    if let Some(id) = existing {
        bump_stat(conn, &e.source, "duplicates")?;
        return Ok(Accepted::Duplicate(id));
    }
    bump_stat(conn, &e.source, "received")?;
    let ttl_ms = i64::try_from(e.dedupe_ttl.as_millis()).unwrap_or(i64::MAX / 2);
    conn.prepare_cached(
        "INSERT INTO dedupe (source, dkey, entry_id, expires_at) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT(source, dkey) DO UPDATE SET entry_id = excluded.entry_id,
                                                 expires_at = excluded.expires_at",
    )?
    .execute(params![
        e.source,
        e.dedupe_key,
        e.id,
        now.saturating_add(ttl_ms)
    ])?;
    conn.prepare_cached(
        "INSERT INTO entries (id, source, event_id, event_type, dedupe_key, received_at,
                              status, attempts, next_attempt_at, budget_start, updated_at,
                              headers, body)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'pending', 0, ?6, ?6, ?7, ?8, ?9)",
    )?
    .execute(params![
        e.id,
        e.source,
        e.event_id,
        e.event_type,
        e.dedupe_key,
        e.received_at,
        now,
        headers,
        e.body.as_ref(),
    ])?;
    Ok(Accepted::New(e.id.clone()))
}

const ENTRY_COLUMNS: &str = "id, source, event_id, event_type, dedupe_key, received_at, status, \
                             attempts, next_attempt_at, last_error, headers, body, \
                             budget_start, budget_attempts";

/// What a listing reads: no headers, no body (SQLite then never touches the
/// overflow pages that hold a large body).
const LISTED_COLUMNS: &str = "id, source, event_id, event_type, received_at, status, attempts, \
                              next_attempt_at, last_error";

fn row_to_listed(r: &rusqlite::Row<'_>) -> Result<ListedEntry, StoreError> {
    let id: String = r.get(0)?;
    let status: String = r.get(5)?;
    Ok(ListedEntry {
        source: r.get(1)?,
        event_id: r.get(2)?,
        event_type: r.get(3)?,
        received_at: r.get(4)?,
        status: Status::parse(&status).ok_or_else(|| StoreError::Corrupt {
            id: id.clone(),
            problem: format!("unknown status {status:?}"),
        })?,
        attempts: u32::try_from(r.get::<_, i64>(6)?).unwrap_or(u32::MAX),
        next_attempt_at: r.get(7)?,
        last_error: r.get(8)?,
        id,
    })
}

/// The query of a listing page (`limit + 1` rows, to know whether another follows).
fn list_sql(q: &ListQuery, columns: &str, limit: usize) -> (String, Vec<rusqlite::types::Value>) {
    let mut sql = format!("SELECT {columns} FROM entries WHERE 1 = 1");
    let mut args: Vec<rusqlite::types::Value> = Vec::new();
    if let Some(s) = &q.source {
        args.push(s.clone().into());
        sql.push_str(&format!(" AND source = ?{}", args.len()));
    }
    if let Some(st) = q.status {
        args.push(st.as_str().to_string().into());
        sql.push_str(&format!(" AND status = ?{}", args.len()));
    }
    if let Some(t) = &q.event_type {
        args.push(t.clone().into());
        sql.push_str(&format!(" AND event_type = ?{}", args.len()));
    }
    if let Some(since) = q.since {
        args.push(super::id_floor(since).into());
        sql.push_str(&format!(" AND id >= ?{}", args.len()));
    }
    if let Some(until) = q.until {
        args.push(super::id_floor(until).into());
        sql.push_str(&format!(" AND id < ?{}", args.len()));
    }
    if let Some(c) = &q.cursor {
        args.push(c.clone().into());
        sql.push_str(&format!(" AND id < ?{}", args.len()));
    }
    sql.push_str(&format!(" ORDER BY id DESC LIMIT {}", limit + 1));
    (sql, args)
}

/// Add one to a per-source counter.
fn bump_stat(conn: &Connection, source: &str, column: &'static str) -> Result<(), StoreError> {
    conn.prepare_cached(&format!(
        "INSERT INTO stats (source, {column}) VALUES (?1, 1)
         ON CONFLICT(source) DO UPDATE SET {column} = {column} + 1"
    ))?
    .execute(params![source])?;
    Ok(())
}

fn row_to_entry(r: &rusqlite::Row<'_>) -> Result<Entry, StoreError> {
    let id: String = r.get(0)?;
    let status: String = r.get(6)?;
    let headers: String = r.get(10)?;
    let body: Vec<u8> = r.get(11)?;
    let attempts: i64 = r.get(7)?;
    Ok(Entry {
        source: r.get(1)?,
        event_id: r.get(2)?,
        event_type: r.get(3)?,
        dedupe_key: r.get(4)?,
        received_at: r.get(5)?,
        status: Status::parse(&status).ok_or_else(|| StoreError::Corrupt {
            id: id.clone(),
            problem: format!("unknown status {status:?}"),
        })?,
        attempts: u32::try_from(attempts).unwrap_or(u32::MAX),
        next_attempt_at: r.get(8)?,
        last_error: r.get(9)?,
        budget_start: r.get(12)?,
        budget_attempts: u32::try_from(r.get::<_, i64>(13)?).unwrap_or(0),
        headers: decode_headers(&id, &headers)?,
        body: Bytes::from(body),
        id,
    })
}

fn load_entry(conn: &Connection, id: &str) -> Result<Option<Entry>, StoreError> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {ENTRY_COLUMNS} FROM entries WHERE id = ?1"
    ))?;
    let mut rows = stmt.query(params![id])?;
    match rows.next()? {
        Some(row) => Ok(Some(row_to_entry(row)?)),
        None => Ok(None),
    }
}

fn insert_attempt(conn: &Connection, id: &str, a: &Attempt) -> Result<(), StoreError> {
    conn.prepare_cached(
        "INSERT OR IGNORE INTO attempts (entry_id, n, at, status_code, error, latency_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )?
    .execute(params![
        id,
        a.n,
        a.at,
        a.status_code,
        a.error,
        i64::try_from(a.latency_ms).unwrap_or(i64::MAX)
    ])?;
    Ok(())
}

fn apply_complete(
    conn: &Connection,
    id: &str,
    token: &str,
    completion: &Completion,
    now: i64,
) -> Result<bool, StoreError> {
    let attempt = match completion {
        Completion::Delivered { attempt } | Completion::Retry { attempt, .. } => Some(attempt),
        Completion::Dead { attempt, .. } => attempt.as_ref(),
        Completion::Release { .. } => None,
    };
    let (status, next, last_error): (Status, Option<i64>, Option<String>) = match completion {
        Completion::Delivered { .. } => (Status::Delivered, None, None),
        Completion::Retry { attempt, at } => (Status::Pending, Some(*at), attempt_error(attempt)),
        Completion::Dead { reason, .. } => (Status::Dead, None, Some(reason.clone())),
        Completion::Release { at } => (Status::Pending, Some(*at), None),
    };
    let changed = conn
        .prepare_cached(
            "UPDATE entries SET status = ?1, next_attempt_at = ?2,
                 last_error = coalesce(?3, last_error), attempts = attempts + ?4,
                 lease_owner = NULL, lease_until = NULL, updated_at = ?5
             WHERE id = ?6 AND lease_owner = ?7 AND status = 'pending'",
        )?
        .execute(params![
            status.as_str(),
            next,
            last_error,
            i64::from(attempt.is_some()),
            now,
            id,
            token
        ])?;
    // Only the lease holder's attempt is recorded: a completion that lost its lease
    // (or is retried after a lost reply) changes nothing.
    if changed == 1
        && let Some(a) = attempt
    {
        insert_attempt(conn, id, a)?;
    }
    if changed == 0 {
        // Discarded while this attempt ran (discard keeps the lease): the attempt is
        // recorded, the status stays discarded.
        let ran = conn
            .prepare_cached(
                "UPDATE entries SET attempts = attempts + ?1, lease_owner = NULL, lease_until = NULL
                 WHERE id = ?2 AND lease_owner = ?3 AND status = 'discarded'",
            )?
            .execute(params![i64::from(attempt.is_some()), id, token])?;
        if ran == 1
            && let Some(a) = attempt
        {
            insert_attempt(conn, id, a)?;
        }
    }
    Ok(changed == 1)
}

/// The text kept as `last_error` for a failed attempt.
pub(crate) fn attempt_error(a: &Attempt) -> Option<String> {
    match (&a.error, a.status_code) {
        (Some(e), _) => Some(e.clone()),
        (None, Some(code)) => Some(format!("HTTP {code}")),
        (None, None) => None,
    }
}

#[async_trait]
impl Store for SqliteStore {
    async fn accept(&self, entry: NewEntry) -> Result<Accepted, StoreError> {
        // Encode on the caller's thread: the writer thread is the bottleneck.
        let headers = encode_headers(&entry.headers);
        self.write(true, move |conn, now| {
            apply_accept(conn, &entry, &headers, now)
        })
        .await
    }

    async fn get(&self, id: &str) -> Result<Option<Entry>, StoreError> {
        let id = id.to_string();
        self.read(move |conn| load_entry(conn, &id)).await
    }

    async fn list(&self, query: &ListQuery) -> Result<Page, StoreError> {
        let q = query.clone();
        let limit = q.limit.clamp(1, MAX_PAGE);
        self.read(move |conn| {
            let (sql, args) = list_sql(&q, LISTED_COLUMNS, limit);
            let mut stmt = conn.prepare_cached(&sql)?;
            let mut rows = stmt.query(rusqlite::params_from_iter(args))?;
            let mut entries = Vec::new();
            while let Some(row) = rows.next()? {
                entries.push(row_to_listed(row)?);
            }
            let next_cursor = if entries.len() > limit {
                entries.truncate(limit);
                entries.last().map(|e| e.id.clone())
            } else {
                None
            };
            Ok(Page {
                entries,
                next_cursor,
            })
        })
        .await
    }

    async fn list_ids(&self, query: &ListQuery) -> Result<IdPage, StoreError> {
        let q = query.clone();
        let limit = q.limit.clamp(1, MAX_PAGE);
        self.read(move |conn| {
            let (sql, args) = list_sql(&q, "id", limit);
            let mut stmt = conn.prepare_cached(&sql)?;
            let mut ids = stmt
                .query_map(rusqlite::params_from_iter(args), |r| r.get::<_, String>(0))?
                .collect::<Result<Vec<_>, _>>()?;
            let next_cursor = if ids.len() > limit {
                ids.truncate(limit);
                ids.last().cloned()
            } else {
                None
            };
            Ok(IdPage { ids, next_cursor })
        })
        .await
    }

    async fn count(&self, source: &str) -> Result<u64, StoreError> {
        let source = source.to_string();
        self.read(move |conn| {
            let n: i64 = conn
                .prepare_cached("SELECT count(*) FROM entries WHERE source = ?1")?
                .query_row(params![source], |r| r.get(0))?;
            Ok(u64::try_from(n).unwrap_or(0))
        })
        .await
    }

    async fn set_paused(&self, source: &str, paused: bool) -> Result<(), StoreError> {
        let name = source.to_string();
        self.write(false, move |conn, _| {
            conn.prepare_cached(
                "INSERT INTO sources (name, paused) VALUES (?1, ?2)
                 ON CONFLICT(name) DO UPDATE SET paused = excluded.paused",
            )?
            .execute(params![name, paused])?;
            Ok(())
        })
        .await?;
        self.controls.send(super::Control::Paused {
            source: source.to_string(),
            paused,
        });
        Ok(())
    }

    async fn paused_sources(&self) -> Result<Vec<String>, StoreError> {
        self.read(|conn| {
            let mut stmt =
                conn.prepare_cached("SELECT name FROM sources WHERE paused = 1 ORDER BY name")?;
            let names = stmt
                .query_map([], |r| r.get::<_, String>(0))?
                .collect::<Result<Vec<_>, _>>()?;
            Ok(names)
        })
        .await
    }

    async fn claim(
        &self,
        source: &str,
        _worker: &str,
        now: i64,
        limit: usize,
        lease: Duration,
    ) -> Result<Vec<Claim>, StoreError> {
        let source = source.to_string();
        let until = now.saturating_add(i64::try_from(lease.as_millis()).unwrap_or(i64::MAX / 2));
        let limit = i64::try_from(limit.max(1)).unwrap_or(1);
        self.write_fast(false, move |conn, _| {
            let ids: Vec<String> = conn
                .prepare_cached(
                    "SELECT id FROM entries
                     WHERE source = ?1 AND status = 'pending' AND next_attempt_at <= ?2
                       AND (lease_until IS NULL OR lease_until <= ?2)
                       AND NOT EXISTS (SELECT 1 FROM sources WHERE name = ?1 AND paused = 1)
                     ORDER BY next_attempt_at LIMIT ?3",
                )?
                .query_map(params![source, now, limit], |r| r.get(0))?
                .collect::<Result<_, _>>()?;
            let mut claims = Vec::with_capacity(ids.len());
            for id in ids {
                let token = uuid::Uuid::now_v7().simple().to_string();
                conn.prepare_cached(
                    "UPDATE entries SET lease_owner = ?1, lease_until = ?2 WHERE id = ?3",
                )?
                .execute(params![token, until, id])?;
                if let Some(entry) = load_entry(conn, &id)? {
                    claims.push(Claim {
                        token,
                        message: String::new(),
                        entry,
                    });
                }
            }
            Ok(claims)
        })
        .await
    }

    async fn complete(
        &self,
        claim: &Claim,
        _worker: &str,
        completion: Completion,
        now: i64,
    ) -> Result<bool, StoreError> {
        let id = claim.entry.id.clone();
        let token = claim.token.clone();
        let notify = matches!(completion, Completion::Release { .. });
        self.write_fast(notify, move |conn, _| {
            apply_complete(conn, &id, &token, &completion, now)
        })
        .await
    }

    async fn attempts(&self, id: &str) -> Result<Vec<Attempt>, StoreError> {
        let id = id.to_string();
        self.read(move |conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT n, at, status_code, error, latency_ms FROM attempts
                 WHERE entry_id = ?1 ORDER BY n",
            )?;
            let rows = stmt
                .query_map(params![id], |r| {
                    Ok(Attempt {
                        n: r.get(0)?,
                        at: r.get(1)?,
                        status_code: r.get(2)?,
                        error: r.get(3)?,
                        latency_ms: u64::try_from(r.get::<_, i64>(4)?).unwrap_or(0),
                    })
                })?
                .collect::<Result<Vec<_>, _>>()?;
            Ok(rows)
        })
        .await
    }

    async fn count_status(&self, source: &str, status: Status) -> Result<u64, StoreError> {
        let source = source.to_string();
        self.read(move |conn| {
            let n: i64 = conn
                .prepare_cached("SELECT count(*) FROM entries WHERE source = ?1 AND status = ?2")?
                .query_row(params![source, status.as_str()], |r| r.get(0))?;
            Ok(u64::try_from(n).unwrap_or(0))
        })
        .await
    }

    async fn purge(
        &self,
        now: i64,
        delivered_before: i64,
        dead_before: i64,
        limit: usize,
    ) -> Result<Purged, StoreError> {
        let limit = i64::try_from(limit.max(1)).unwrap_or(1);
        self.write_fast(false, move |conn, _| {
            let ids: Vec<String> = conn
                .prepare_cached(
                    "SELECT id FROM (SELECT id FROM entries
                         WHERE status = 'delivered' AND updated_at < ?1 LIMIT ?3)
                     UNION ALL
                     SELECT id FROM (SELECT id FROM entries
                         WHERE status IN ('dead', 'discarded') AND updated_at < ?2 LIMIT ?3)",
                )?
                .query_map(params![delivered_before, dead_before, limit], |r| r.get(0))?
                .collect::<Result<_, _>>()?;
            for id in &ids {
                conn.prepare_cached("DELETE FROM attempts WHERE entry_id = ?1")?
                    .execute(params![id])?;
                conn.prepare_cached("DELETE FROM audit WHERE entry_id = ?1")?
                    .execute(params![id])?;
                conn.prepare_cached("DELETE FROM entries WHERE id = ?1")?
                    .execute(params![id])?;
            }
            let keys = conn
                .prepare_cached(
                    "DELETE FROM dedupe WHERE (source, dkey) IN
                       (SELECT source, dkey FROM dedupe WHERE expires_at <= ?1 LIMIT ?2)",
                )?
                .execute(params![now, limit])?;
            Ok(Purged {
                entries: ids.len() as u64,
                dedupe_keys: keys as u64,
            })
        })
        .await
    }

    fn work_signal(&self) -> watch::Receiver<u64> {
        self.work.clone()
    }

    fn controls(&self) -> tokio::sync::broadcast::Receiver<super::Control> {
        self.controls.subscribe()
    }

    async fn maintain(&self, _sources: &[String]) -> Result<(), StoreError> {
        Ok(())
    }

    async fn replay(
        &self,
        id: &str,
        at: i64,
        actor: &str,
        now: i64,
    ) -> Result<Transition, StoreError> {
        let id = id.to_string();
        let actor = actor.to_string();
        self.write(true, move |conn, _| {
            let status: Option<String> = conn
                .prepare_cached("SELECT status FROM entries WHERE id = ?1")?
                .query_row(params![id], |r| r.get(0))
                .optional()?;
            let Some(status) = status.as_deref().and_then(Status::parse) else {
                return Ok(Transition::NotFound);
            };
            if status == Status::Pending {
                return Ok(Transition::Conflict(status));
            }
            conn.prepare_cached(
                "UPDATE entries SET status = 'pending', next_attempt_at = ?2,
                     budget_start = ?3, budget_attempts = attempts,
                     lease_owner = NULL, lease_until = NULL, updated_at = ?3
                 WHERE id = ?1",
            )?
            .execute(params![id, at, now])?;
            conn.prepare_cached(
                "INSERT INTO audit (entry_id, at, action, actor, note) VALUES (?1, ?2, 'replay', ?3, NULL)",
            )?
            .execute(params![id, now, actor])?;
            Ok(Transition::Done)
        })
        .await
    }

    async fn discard(
        &self,
        id: &str,
        actor: &str,
        note: &str,
        now: i64,
    ) -> Result<Transition, StoreError> {
        let entry_id = id.to_string();
        let actor = actor.to_string();
        let note = note.to_string();
        let t = self.write(false, move |conn, _| {
            let id = &entry_id;
            let status: Option<String> = conn
                .prepare_cached("SELECT status FROM entries WHERE id = ?1")?
                .query_row(params![id], |r| r.get(0))
                .optional()?;
            let Some(status) = status.as_deref().and_then(Status::parse) else {
                return Ok(Transition::NotFound);
            };
            if !matches!(status, Status::Pending | Status::Dead) {
                return Ok(Transition::Conflict(status));
            }
            // The lease stays: a worker delivering it right now records its attempt.
            conn.prepare_cached(
                "UPDATE entries SET status = 'discarded', next_attempt_at = NULL, updated_at = ?2
                 WHERE id = ?1",
            )?
            .execute(params![id, now])?;
            conn.prepare_cached(
                "INSERT INTO audit (entry_id, at, action, actor, note) VALUES (?1, ?2, 'discard', ?3, ?4)",
            )?
            .execute(params![id, now, actor, note])?;
            Ok(Transition::Done)
        })
        .await?;
        if t == Transition::Done {
            self.controls
                .send(super::Control::Discarded { id: id.to_string() });
        }
        Ok(t)
    }

    async fn audit(&self, id: &str) -> Result<Vec<AuditEvent>, StoreError> {
        let id = id.to_string();
        self.read(move |conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT at, action, actor, note FROM audit WHERE entry_id = ?1 ORDER BY at, rowid",
            )?;
            let rows = stmt
                .query_map(params![id], |r| {
                    Ok(AuditEvent {
                        at: r.get(0)?,
                        action: r.get(1)?,
                        actor: r.get::<_, Option<String>>(2)?.unwrap_or_default(),
                        note: r.get(3)?,
                    })
                })?
                .collect::<Result<Vec<_>, _>>()?;
            Ok(rows)
        })
        .await
    }

    async fn record_unverified(&self, source: &str, n: u64) -> Result<(), StoreError> {
        let source = source.to_string();
        let n = i64::try_from(n).unwrap_or(i64::MAX);
        self.write(false, move |conn, _| {
            conn.prepare_cached(
                "INSERT INTO stats (source, unverified) VALUES (?1, ?2)
                 ON CONFLICT(source) DO UPDATE SET unverified = unverified + ?2",
            )?
            .execute(params![source, n])?;
            Ok(())
        })
        .await
    }

    async fn stats(&self, source: &str) -> Result<SourceStats, StoreError> {
        let source = source.to_string();
        self.read(move |conn| {
            let mut st = SourceStats::default();
            if let Some((r, d, u)) = conn
                .prepare_cached(
                    "SELECT received, duplicates, unverified FROM stats WHERE source = ?1",
                )?
                .query_row(params![source], |r| {
                    Ok((
                        r.get::<_, i64>(0)?,
                        r.get::<_, i64>(1)?,
                        r.get::<_, i64>(2)?,
                    ))
                })
                .optional()?
            {
                st.received = u64::try_from(r).unwrap_or(0);
                st.duplicates = u64::try_from(d).unwrap_or(0);
                st.unverified = u64::try_from(u).unwrap_or(0);
            }
            let mut stmt = conn.prepare_cached(
                "SELECT status, count(*) FROM entries WHERE source = ?1 GROUP BY status",
            )?;
            let counts = stmt
                .query_map(params![source], |r| {
                    Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?))
                })?
                .collect::<Result<Vec<_>, _>>()?;
            for (status, n) in counts {
                let n = u64::try_from(n).unwrap_or(0);
                match Status::parse(&status) {
                    Some(Status::Pending) => st.pending = n,
                    Some(Status::Delivered) => st.delivered = n,
                    Some(Status::Dead) => st.dead = n,
                    Some(Status::Discarded) => st.discarded = n,
                    None => {}
                }
            }
            st.oldest_pending_at = conn
                .prepare_cached(
                    "SELECT received_at FROM entries WHERE source = ?1 AND status = 'pending'
                     ORDER BY id LIMIT 1",
                )?
                .query_row(params![source], |r| r.get(0))
                .optional()?;
            Ok(st)
        })
        .await
    }

    async fn recover(&self) -> Result<(), StoreError> {
        // The embedded store is served by one process: leases held by a previous run
        // (which crashed or was killed) are released now instead of after they expire.
        let released = self
            .write(true, |conn, _| {
                Ok(conn.execute(
                    "UPDATE entries SET lease_owner = NULL, lease_until = NULL
                     WHERE lease_owner IS NOT NULL",
                    [],
                )?)
            })
            .await?;
        if released > 0 {
            tracing::warn!(
                released,
                "released leases left by a previous run; those entries are delivered again"
            );
        }
        Ok(())
    }

    async fn ping(&self) -> Result<(), StoreError> {
        if *self.stopped.borrow() {
            return Err(StoreError::Stopped);
        }
        let writer_running = self
            .tx
            .lock()
            .map(|tx| tx.as_ref().is_some_and(|s| !s.is_closed()))
            .unwrap_or(false);
        if !writer_running {
            return Err(StoreError::Unavailable("the writer has stopped".into()));
        }
        // On its own connection: a long admin read holds the reader, not this.
        run_on(&self.probe, PROBE_WAIT, |conn| {
            conn.query_row("SELECT count(*) FROM sqlite_master", [], |_| Ok(()))?;
            Ok(())
        })
        .await
    }

    fn stopped(&self) -> watch::Receiver<bool> {
        self.stopped.clone()
    }

    async fn close(&self) {
        // Dropping the last sender ends the writer loop after it drains the queue.
        if let Ok(mut tx) = self.tx.lock() {
            tx.take();
        }
        let handle = self.writer.lock().ok().and_then(|mut h| h.take());
        if let Some(h) = handle {
            let _ = tokio::task::spawn_blocking(move || h.join()).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A read that cannot get the read connection within `READ_WAIT` answers
    /// `Timeout` (503) instead of waiting forever; `ping` has its own connection.
    #[tokio::test(start_paused = true)]
    async fn a_read_waits_for_the_reader_at_most_read_wait_and_ping_not_at_all() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(&EmbeddedConfig {
            path: dir.path().join("data"),
            batch_max: 8,
        })
        .await
        .unwrap();
        let held = store.reader.clone().lock_owned().await;
        let started = tokio::time::Instant::now();
        let got = store.list(&ListQuery::default()).await;
        assert!(
            matches!(got, Err(StoreError::Timeout(d)) if d == READ_WAIT),
            "{got:?}"
        );
        assert!(started.elapsed() >= READ_WAIT);
        store.ping().await.unwrap();
        drop(held);
        assert!(
            store
                .list(&ListQuery::default())
                .await
                .unwrap()
                .entries
                .is_empty()
        );
        store.close().await;
    }
}
