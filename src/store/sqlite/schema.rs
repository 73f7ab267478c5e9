//! The embedded store's schema and connections: the tables and indexes (as
//! migrations, counted by `PRAGMA user_version`), and the settings every connection
//! opens with.

use std::path::Path;
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};

/// The database file inside the store directory.
pub(super) const DB_FILE: &str = "hookgate.db";

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

/// A connection to the database, with the store's settings. Every connection is
/// `synchronous=FULL`; the writer then lowers its own to `NORMAL` (see
/// [`writer_settings`]).
pub(super) fn open_connection(path: &Path) -> Result<Connection, rusqlite::Error> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    conn.busy_timeout(Duration::from_secs(5))?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    // FULL on every connection except the writer (see `writer_settings`).
    conn.pragma_update(None, "synchronous", "FULL")?;
    conn.pragma_update(None, "cache_size", -16384)?; // 16 MiB
    // Well above the size at which the WAL restarts (`WAL_RESTART_FRAMES`, ~16 MiB,
    // which a busy writer overshoots while the checkpointer catches up): a
    // restart reuses the file as it is (truncating it stalls the writer, and the
    // blocks would have to be allocated again: BENCHMARKS.md, the WAL restart); only a
    // WAL that grew past this while a restart could not happen is cut back.
    conn.pragma_update(None, "journal_size_limit", 128 * 1024 * 1024)?;
    // Checkpoints run on their own thread (see `checkpoint`), not inside commits.
    conn.pragma_update(None, "wal_autocheckpoint", 0)?;
    Ok(conn)
}

/// Apply the migrations the database has not seen yet, each in its own transaction.
pub(super) fn migrate(conn: &mut Connection) -> Result<(), rusqlite::Error> {
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

/// The writer's own setting: it commits with `synchronous=NORMAL` (no fsync inside
/// the commit) and has the WAL fsynced by the syncer thread before anyone is answered
/// (see `writer`): the durability of `FULL`, with the fsync off the commit path.
pub(super) fn writer_settings(conn: &Connection) -> Result<(), rusqlite::Error> {
    conn.pragma_update(None, "synchronous", "NORMAL")
}
