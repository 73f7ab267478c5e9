//! The embedded store: SQLite in WAL mode, one writer thread doing group commit.
//!
//! # Why one writer thread
//!
//! A 2xx must mean the entry survives a crash, so every acknowledged write is
//! fsynced (`synchronous=FULL`). One fsync per request caps this disk at about 3,000
//! commits per second; sharing one commit between all the requests that arrived
//! while the previous one was being flushed costs nothing in latency and multiplies
//! throughput by ten. So every write goes to a dedicated OS thread over a bounded
//! channel; the thread takes whatever is queued (up to `batch_max`), applies each
//! operation inside its own savepoint (one failing operation never takes the others
//! down), commits once, and only then answers every waiter. If the commit fails,
//! every operation of the batch fails and ingest answers 503.
//!
//! Reads use a separate connection (WAL lets them run beside the writer) on the
//! blocking thread pool. rusqlite types never leave this file.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use rusqlite::{Connection, OpenFlags, OptionalExtension, TransactionBehavior, params};
use tokio::sync::{mpsc, oneshot};

use super::{
    Accepted, Entry, ListQuery, MAX_PAGE, NewEntry, Page, Status, Store, StoreError,
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
    updated_at      INTEGER NOT NULL,
    headers         TEXT NOT NULL,
    body            BLOB NOT NULL
);
CREATE INDEX entries_due ON entries(next_attempt_at) WHERE status = 'pending';
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
"#];

/// How long a caller waits for the writer before giving up with 503.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// Queue depth in front of the writer; a full queue pushes back on ingest.
const QUEUE_DEPTH: usize = 8192;

type Reply<T> = oneshot::Sender<Result<T, StoreError>>;

/// A write, queued for the writer thread.
enum Op {
    Accept(NewEntry, Reply<Accepted>),
    SetPaused(String, bool, Reply<()>),
}

pub struct SqliteStore {
    /// Feeds the writer thread; dropping it (in `close`) ends the thread.
    tx: Mutex<Option<mpsc::Sender<Op>>>,
    /// The read connection, used on the blocking pool.
    reader: Arc<Mutex<Connection>>,
    /// The writer thread, joined on close so the last batch is committed.
    writer: Mutex<Option<std::thread::JoinHandle<()>>>,
}

fn open_conn(path: &PathBuf) -> Result<Connection, rusqlite::Error> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    conn.busy_timeout(Duration::from_secs(5))?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    // FULL: every commit is fsynced before it returns. This is the durability promise.
    conn.pragma_update(None, "synchronous", "FULL")?;
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
        std::fs::create_dir_all(&dir)?;
        let path = dir.join(DB_FILE);
        let mut writer = open_conn(&path)?;
        migrate(&mut writer)?;
        let reader = open_conn(&path)?;
        let (tx, rx) = mpsc::channel(QUEUE_DEPTH);
        let handle = std::thread::Builder::new()
            .name("hookgate-sqlite-writer".into())
            .spawn(move || writer_loop(writer, rx, batch_max))?;
        Ok(SqliteStore {
            tx: Mutex::new(Some(tx)),
            reader: Arc::new(Mutex::new(reader)),
            writer: Mutex::new(Some(handle)),
        })
    }

    async fn submit<T>(&self, make: impl FnOnce(Reply<T>) -> Op) -> Result<T, StoreError> {
        let sender = self
            .tx
            .lock()
            .map_err(|_| StoreError::Unavailable("writer lock poisoned".into()))?
            .clone()
            .ok_or_else(|| StoreError::Unavailable("store is closed".into()))?;
        let (reply, rx) = oneshot::channel();
        let work = async move {
            sender
                .send(make(reply))
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
        let reader = self.reader.clone();
        tokio::task::spawn_blocking(move || {
            let conn = reader
                .lock()
                .map_err(|_| StoreError::Unavailable("reader lock poisoned".into()))?;
            f(&conn)
        })
        .await
        .map_err(|e| StoreError::Unavailable(format!("read task failed: {e}")))?
    }
}

fn writer_loop(mut conn: Connection, mut rx: mpsc::Receiver<Op>, batch_max: usize) {
    let mut batch = Vec::with_capacity(batch_max);
    while let Some(first) = rx.blocking_recv() {
        batch.push(first);
        while batch.len() < batch_max {
            match rx.try_recv() {
                Ok(op) => batch.push(op),
                Err(_) => break,
            }
        }
        commit_batch(&mut conn, &mut batch);
    }
    tracing::debug!("sqlite writer stopped");
}

/// The outcome of one operation, held until the batch commits.
enum Done {
    Accept(Reply<Accepted>, Result<Accepted, StoreError>),
    Unit(Reply<()>, Result<(), StoreError>),
}

fn commit_batch(conn: &mut Connection, batch: &mut Vec<Op>) {
    let tx = match conn.transaction_with_behavior(TransactionBehavior::Immediate) {
        Ok(tx) => tx,
        Err(e) => {
            tracing::error!(error = %e, "sqlite: cannot begin a transaction");
            fail_all(batch.drain(..), &e.to_string());
            return;
        }
    };
    let mut tx = tx;
    let now = now_ms();
    let mut done = Vec::with_capacity(batch.len());
    for op in batch.drain(..) {
        let mut sp = match tx.savepoint() {
            Ok(sp) => sp,
            Err(e) => {
                fail_all(std::iter::once(op), &e.to_string());
                continue;
            }
        };
        let d = match op {
            Op::Accept(entry, reply) => Done::Accept(reply, apply_accept(&sp, &entry, now)),
            Op::SetPaused(source, paused, reply) => Done::Unit(
                reply,
                sp.execute(
                    "INSERT INTO sources (name, paused) VALUES (?1, ?2)
                     ON CONFLICT(name) DO UPDATE SET paused = excluded.paused",
                    params![source, paused],
                )
                .map(|_| ())
                .map_err(StoreError::from),
            ),
        };
        let ok = match &d {
            Done::Accept(_, r) => r.is_ok(),
            Done::Unit(_, r) => r.is_ok(),
        };
        if ok {
            if let Err(e) = sp.commit() {
                tracing::error!(error = %e, "sqlite: savepoint release failed");
            }
        } else {
            let _ = sp.rollback();
        }
        done.push(d);
    }
    match tx.commit() {
        Ok(()) => {
            for d in done {
                match d {
                    Done::Accept(reply, r) => {
                        let _ = reply.send(r);
                    }
                    Done::Unit(reply, r) => {
                        let _ = reply.send(r);
                    }
                }
            }
        }
        Err(e) => {
            tracing::error!(error = %e, "sqlite: commit failed; the batch is answered 503");
            let msg = format!("commit failed: {e}");
            for d in done {
                match d {
                    Done::Accept(reply, _) => {
                        let _ = reply.send(Err(StoreError::Unavailable(msg.clone())));
                    }
                    Done::Unit(reply, _) => {
                        let _ = reply.send(Err(StoreError::Unavailable(msg.clone())));
                    }
                }
            }
        }
    }
}

fn fail_all(ops: impl Iterator<Item = Op>, why: &str) {
    for op in ops {
        let err = StoreError::Unavailable(why.to_string());
        match op {
            Op::Accept(_, reply) => {
                let _ = reply.send(Err(err));
            }
            Op::SetPaused(_, _, reply) => {
                let _ = reply.send(Err(err));
            }
        }
    }
}

fn apply_accept(conn: &Connection, e: &NewEntry, now: i64) -> Result<Accepted, StoreError> {
    let existing: Option<String> = conn
        .prepare_cached(
            "SELECT entry_id FROM dedupe WHERE source = ?1 AND dkey = ?2 AND expires_at > ?3",
        )?
        .query_row(params![e.source, e.dedupe_key, now], |r| r.get(0))
        .optional()?;
    if let Some(id) = existing {
        return Ok(Accepted::Duplicate(id));
    }
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
                              status, attempts, next_attempt_at, updated_at, headers, body)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'pending', 0, ?6, ?7, ?8, ?9)",
    )?
    .execute(params![
        e.id,
        e.source,
        e.event_id,
        e.event_type,
        e.dedupe_key,
        e.received_at,
        now,
        encode_headers(&e.headers),
        e.body.as_ref(),
    ])?;
    Ok(Accepted::New(e.id.clone()))
}

const ENTRY_COLUMNS: &str = "id, source, event_id, event_type, dedupe_key, received_at, status, \
                             attempts, next_attempt_at, last_error, headers, body";

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
        headers: decode_headers(&id, &headers)?,
        body: Bytes::from(body),
        id,
    })
}

#[async_trait]
impl Store for SqliteStore {
    async fn accept(&self, entry: NewEntry) -> Result<Accepted, StoreError> {
        self.submit(|reply| Op::Accept(entry, reply)).await
    }

    async fn get(&self, id: &str) -> Result<Option<Entry>, StoreError> {
        let id = id.to_string();
        self.read(move |conn| {
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT {ENTRY_COLUMNS} FROM entries WHERE id = ?1"
            ))?;
            let mut rows = stmt.query(params![id])?;
            match rows.next()? {
                Some(row) => Ok(Some(row_to_entry(row)?)),
                None => Ok(None),
            }
        })
        .await
    }

    async fn list(&self, query: &ListQuery) -> Result<Page, StoreError> {
        let q = query.clone();
        let limit = q.limit.clamp(1, MAX_PAGE);
        self.read(move |conn| {
            let mut sql = format!("SELECT {ENTRY_COLUMNS} FROM entries WHERE 1 = 1");
            let mut args: Vec<rusqlite::types::Value> = Vec::new();
            if let Some(s) = &q.source {
                args.push(s.clone().into());
                sql.push_str(&format!(" AND source = ?{}", args.len()));
            }
            if let Some(st) = q.status {
                args.push(st.as_str().to_string().into());
                sql.push_str(&format!(" AND status = ?{}", args.len()));
            }
            if let Some(c) = &q.cursor {
                args.push(c.clone().into());
                sql.push_str(&format!(" AND id < ?{}", args.len()));
            }
            sql.push_str(&format!(" ORDER BY id DESC LIMIT {}", limit + 1));
            let mut stmt = conn.prepare_cached(&sql)?;
            let mut rows = stmt.query(rusqlite::params_from_iter(args))?;
            let mut entries = Vec::new();
            while let Some(row) = rows.next()? {
                entries.push(row_to_entry(row)?);
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
        let source = source.to_string();
        self.submit(|reply| Op::SetPaused(source, paused, reply))
            .await
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

    async fn ping(&self) -> Result<(), StoreError> {
        self.read(|conn| {
            conn.query_row("SELECT 1", [], |_| Ok(()))?;
            Ok(())
        })
        .await
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
