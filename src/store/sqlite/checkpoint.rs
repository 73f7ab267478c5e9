//! The checkpointer: copies the WAL back into the database on a thread of its own,
//! so that commits (and the acknowledgements waiting on them) never pay for a long
//! checkpoint, and makes the WAL restart from its beginning under steady load.
//!
//! It also starts the kernel's writeback of the pages it copied (`Writeback`, the
//! one `unsafe` call of the store).

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rusqlite::Connection;

/// Start the checkpointer thread. It runs until the writer sets `shared.stop`, then
/// makes a last full checkpoint and closes its connection.
pub(super) fn start(
    conn: Connection,
    writeback: Writeback,
    shared: Arc<Checkpointing>,
) -> std::io::Result<Checkpointer> {
    let thread = {
        let shared = shared.clone();
        std::thread::Builder::new()
            .name("hg-sqlite-ckpt".into())
            .spawn(move || checkpointer(conn, writeback, shared))?
    };
    Ok(Checkpointer { shared, thread })
}

/// The checkpointer thread, and what it shares with the writer.
pub(super) struct Checkpointer {
    pub(super) shared: Arc<Checkpointing>,
    thread: std::thread::JoinHandle<()>,
}

impl Checkpointer {
    /// Stop it (should the writer not have) and wait for its last checkpoint, so that
    /// a store opened again on the same files (in the same process) never meets a
    /// checkpoint of the one before. Blocks.
    pub(super) fn finish(self) {
        self.shared
            .stop
            .store(true, std::sync::atomic::Ordering::SeqCst);
        let _ = self.thread.join();
    }
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
/// `WAL_LONG_TAIL_FRAMES`, ~16 MiB, a copy that holds the writer back), so that the
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
pub(super) struct Checkpointing {
    /// Set when the writer has stopped: the checkpointer runs a last full checkpoint.
    pub(super) stop: std::sync::atomic::AtomicBool,
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
/// freshly allocated file block (zeroed, then copied into by the kernel), which took
/// most of the writer's CPU time under load (BENCHMARKS.md, the WAL now restarts
/// under load). So once the WAL is long and the checkpointer has caught up to a short
/// tail, it hands the tail to the writer, which copies it between two batches (short,
/// so the batch after waits little); the next batch then overwrites the WAL from its
/// beginning, in blocks the page cache already holds.
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
                const MSG: &str = "sqlite: checkpoint failed";
                if crate::telemetry::throttle::hit(MSG, "") {
                    tracing::warn!(error = %e, "{MSG}");
                }
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
/// (the writer's, when it copies a WAL tail) paid for all of them, a stall far longer
/// than one pass's (BENCHMARKS.md, the tail copy). Starting the writeback after each
/// pass keeps that backlog to one pass. Failure only costs that stall, so it is
/// logged and ignored.
pub(super) struct Writeback(#[cfg(target_os = "linux")] Arc<std::fs::File>);

impl Writeback {
    /// A descriptor on the database file, shared per path and kept for the life of the
    /// process: closing any descriptor of a file drops every POSIX lock the process
    /// holds on it, SQLite's included, so ours is never closed while SQLite's
    /// connections may be open.
    #[cfg(target_os = "linux")]
    pub(super) fn open(path: &std::path::Path) -> std::io::Result<Writeback> {
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
    pub(super) fn open(_path: &std::path::Path) -> std::io::Result<Writeback> {
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
pub(super) fn copy_wal_tail(conn: &Connection, shared: &Checkpointing) -> bool {
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
        const MSG: &str = "sqlite: checkpoint of the WAL's tail failed";
        if crate::telemetry::throttle::hit(MSG, "") {
            tracing::warn!(error = %e, "{MSG}");
        }
    }
    shared.tail.store(TAIL_NONE, Ordering::SeqCst);
    true
}
