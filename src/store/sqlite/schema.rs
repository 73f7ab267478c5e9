//! The embedded store's schema and connections: the tables and indexes (as
//! migrations, counted by `PRAGMA user_version`), and the settings every connection
//! opens with.

use std::path::Path;
use std::time::Duration;

use rusqlite::config::DbConfig;
use rusqlite::{Connection, OpenFlags};

use crate::store::{Backend, DEFAULT_ROUTE, StoreError};

/// The database file inside the store directory.
pub(super) const DB_FILE: &str = "hookgate.db";

/// Schema migrations, applied in order; `PRAGMA user_version` records how many ran.
/// Each runs in one transaction, and none is ever undone (a store a newer release
/// migrated is refused: see [`migrate`]).
///
/// 1. The store before routes: an entry is one delivery.
/// 2. Routes ([`ROUTES`]).
/// 3. Ordered delivery ([`ORDERING`]).
/// 4. Payloads in a table of their own ([`PAYLOADS`]).
/// 5. The session and client of an audit event ([`AUDIT_ORIGIN`]).
/// 6. Only the heads of ordered lines are scheduled ([`LINES`]).
/// 7. Leaner line indexes ([`LEAN_LINES`]).
/// 8. The failure kind of each attempt, and of a delivery's last ([`FAILURE_KINDS`]).
/// 9. How each entry came, and reconciliation's leases and states ([`ORIGINS`]).
/// 10. A broker's answer to each attempt ([`ANSWERS`]).
const MIGRATIONS: &[&str] = &[
    V1_ENTRIES,
    ROUTES,
    ORDERING,
    PAYLOADS,
    AUDIT_ORIGIN,
    LINES,
    LEAN_LINES,
    FAILURE_KINDS,
    ORIGINS,
    ANSWERS,
];

/// What a queue destination answered an attempt (a stream and its sequence, a
/// confirm): what the console and the API show. Attempts recorded before have none.
const ANSWERS: &str = r#"
ALTER TABLE attempts ADD COLUMN answer TEXT;
"#;

/// How an entry came (`store::Origin`, by its name): `received` for every entry
/// stored before (a column with a constant default rewrites no row). A release that
/// does not know it would store recovered entries as received, so this is a
/// migration (such a release refuses the store).
///
/// `reconcile` keeps, per source, reconciliation's lease (its `holder` and `until`,
/// both NULL once released) and the state its holder saved last (`reconcile`);
/// retention never reads it.
const ORIGINS: &str = r#"
ALTER TABLE entries ADD COLUMN origin TEXT NOT NULL DEFAULT 'received';
CREATE TABLE reconcile (
    source TEXT PRIMARY KEY,
    holder TEXT,
    until  INTEGER,
    state  TEXT
) WITHOUT ROWID;
"#;

/// The kind of a failed attempt (`crate::failure`, by its canonical name), and of
/// the last failed attempt of a delivery, which its dead letter is grouped by.
/// Attempts recorded before have none.
const FAILURE_KINDS: &str = r#"
ALTER TABLE attempts ADD COLUMN failure TEXT;
ALTER TABLE deliveries ADD COLUMN last_failure TEXT;
"#;

/// Where an operator action came from: the console session (a hash of its nonce)
/// and the client address. Older events have neither.
const AUDIT_ORIGIN: &str = r#"
ALTER TABLE audit ADD COLUMN session TEXT;
ALTER TABLE audit ADD COLUMN client TEXT;
"#;

/// The version after which every entry is delivered through routes ([`ROUTES`]).
const ROUTES_VERSION: usize = 2;

/// The first schema: each entry carries its one delivery's state (status, attempts,
/// lease, budget) in its own row.
const V1_ENTRIES: &str = r#"
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
"#;

/// Routes: an entry is delivered through one or more routes, each delivery with its
/// own row in `deliveries` (status, attempts, next attempt, lease, last error, retry
/// budget); `position` keeps the order of the entry's routes. The `entries` row keeps
/// `status`, `attempts`, `next_attempt_at` and `last_error` as the summary of its
/// deliveries (`Entry::summary`), written in the same transaction as every change of
/// a delivery, and `updated_at` as when the entry reached its current status (what
/// retention reads). Its `lease_*` and `budget_*` columns are no longer read (dropping
/// them would rewrite every row, bodies included).
///
/// Every existing entry gets one delivery through the default route holding what its
/// row held (status, attempts, budget, lease: a leased entry is claimed again once
/// its lease expires, or at the next start); its attempts go through the default
/// route too. A delivered entry's summary names no error (the summary only takes the
/// errors of deliveries not delivered).
///
/// One index, `deliveries_route` (source, route, status, next attempt), serves claims
/// (a route's pending deliveries by due time), counts by route and status, and
/// listings by route and status: a delivery that is not pending has no next attempt,
/// so within one status that is not `pending` the index is in entry id (arrival)
/// order. One index rather than two keeps an accept at one index entry per route.
const ROUTES: &str = r#"
CREATE TABLE deliveries (
    entry_id        TEXT NOT NULL,
    route           TEXT NOT NULL,
    position        INTEGER NOT NULL,
    source          TEXT NOT NULL,
    status          TEXT NOT NULL,
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at INTEGER,
    lease_owner     TEXT,
    lease_until     INTEGER,
    last_error      TEXT,
    budget_start    INTEGER NOT NULL,
    budget_attempts INTEGER NOT NULL DEFAULT 0,
    updated_at      INTEGER NOT NULL,
    PRIMARY KEY (entry_id, route)
) WITHOUT ROWID;
CREATE INDEX deliveries_route ON deliveries(source, route, status, next_attempt_at);
INSERT INTO deliveries (entry_id, route, position, source, status, attempts,
                        next_attempt_at, lease_owner, lease_until, last_error,
                        budget_start, budget_attempts, updated_at)
    SELECT id, 'default', 0, source, status, attempts, next_attempt_at, lease_owner,
           lease_until, last_error, budget_start, budget_attempts, updated_at
    FROM entries;
UPDATE deliveries SET next_attempt_at = NULL WHERE status != 'pending';
UPDATE entries SET lease_owner = NULL, lease_until = NULL WHERE lease_owner IS NOT NULL;
UPDATE entries SET last_error = NULL WHERE status = 'delivered' AND last_error IS NOT NULL;
DROP INDEX entries_due;

CREATE TABLE attempts_by_route (
    entry_id    TEXT NOT NULL,
    route       TEXT NOT NULL,
    n           INTEGER NOT NULL,
    at          INTEGER NOT NULL,
    status_code INTEGER,
    error       TEXT,
    latency_ms  INTEGER,
    PRIMARY KEY (entry_id, route, n)
) WITHOUT ROWID;
INSERT INTO attempts_by_route (entry_id, route, n, at, status_code, error, latency_ms)
    SELECT entry_id, 'default', n, at, status_code, error, latency_ms FROM attempts;
DROP TABLE attempts;
ALTER TABLE attempts_by_route RENAME TO attempts;

ALTER TABLE audit ADD COLUMN route TEXT;

CREATE TABLE paused_routes (
    source TEXT NOT NULL,
    route  TEXT NOT NULL,
    PRIMARY KEY (source, route)
) WITHOUT ROWID;
"#;

/// Ordered routes: a delivery's ordering key and policy for a dead head (see
/// `delivery`, the `claimable!` conditions). `deliveries_order` holds only ordered
/// deliveries, a key's line in arrival (entry id) order: an unordered delivery costs
/// it nothing (schema 6 replaces it: [`LINES`]). A release that does not know the
/// columns would claim ordered
/// deliveries out of order, so this is a migration (such a release refuses the
/// store) rather than a column added at open.
const ORDERING: &str = r#"
ALTER TABLE deliveries ADD COLUMN order_key TEXT;
ALTER TABLE deliveries ADD COLUMN order_block INTEGER NOT NULL DEFAULT 0;
CREATE INDEX deliveries_order ON deliveries(source, route, order_key, entry_id)
    WHERE order_key IS NOT NULL;
"#;

/// Payloads: a new entry's headers and body are a row of `payloads`, which its
/// `payload` column names; its own `headers` and `body` stay empty. The entry's row
/// is rewritten at every change of its status (`delivery::refresh_entry`), and
/// SQLite rewrites a changed row whole, a large body's overflow pages included: with
/// the body inline, a delivery wrote the body to the WAL a second time (about 9 KiB
/// for a 7 KiB body, against 1 KiB with the body apart). A payload is written once,
/// at the accept, and deleted with its entry.
///
/// Entries stored before keep their headers and body inline (their `payload` is
/// NULL, and reads take either): the migration rewrites no row, so it is instant on
/// a store of any size. A release that does not know `payloads` would read empty
/// bodies, so this is a migration (such a release refuses the store).
///
/// `payloads` has an `INTEGER PRIMARY KEY`, which `VACUUM` keeps: a new payload is
/// appended at the right edge of its B-tree, and the entry names it by number.
const PAYLOADS: &str = r#"
ALTER TABLE entries ADD COLUMN payload INTEGER;
CREATE TABLE payloads (
    n       INTEGER PRIMARY KEY,
    headers TEXT NOT NULL,
    body    BLOB NOT NULL
);
"#;

/// Lines: a claim reads only deliveries that may go, never those waiting behind the
/// head of their ordering key's line (before, it checked every pending delivery of
/// the route for an earlier one of its key, on the writer thread: a long line behind
/// a blocked or retrying head made every claim, and with it every source's ingest,
/// slow; BENCHMARKS.md, a long blocked line).
///
/// `behind` is 1 for a pending ordered delivery that waits behind an earlier
/// delivery of its key (one that is pending, or dead with `block`: a member of the
/// line), 0 otherwise; `delivery` keeps it in step at every change of a line
/// (accept, completion, replay, discard, purge). `deliveries_due` holds the pending
/// deliveries that are not behind, by route and due time: what a claim walks, so a
/// line costs a claim its head at most. `deliveries_line` replaces
/// `deliveries_order` and holds only the members of lines (in arrival order), so a
/// line's head, and whether a delivery has one before it, is one seek whatever its
/// key delivered before. `deliveries_leased` holds the ordered deliveries with a
/// lease: a head waits while another delivery of its key is leased (a replay or
/// discard while an attempt is in flight), and that check reads only those.
/// ([`LEAN_LINES`] folds `deliveries_due` into `deliveries_route` and narrows
/// `deliveries_leased`.)
///
/// Existing lines get their heads at once: a pending member with an earlier member
/// of its key is behind (the first member of a line keeps 0, so each row finds it in
/// one seek, whatever order SQLite updates the rows in). A release that does not
/// know `behind` would leave it stale, so this is a migration (such a release
/// refuses the store).
const LINES: &str = r#"
ALTER TABLE deliveries ADD COLUMN behind INTEGER NOT NULL DEFAULT 0;
DROP INDEX deliveries_order;
CREATE INDEX deliveries_line ON deliveries(source, route, order_key, entry_id)
    WHERE order_key IS NOT NULL AND (status = 'pending' OR (status = 'dead' AND order_block = 1));
UPDATE deliveries SET behind = 1
    WHERE order_key IS NOT NULL AND status = 'pending' AND EXISTS (
        SELECT 1 FROM deliveries o INDEXED BY deliveries_line
        WHERE o.source = deliveries.source AND o.route = deliveries.route
          AND o.order_key = deliveries.order_key AND o.entry_id < deliveries.entry_id
          AND (o.status = 'pending' OR (o.status = 'dead' AND o.order_block = 1)));
CREATE INDEX deliveries_due ON deliveries(source, route, next_attempt_at)
    WHERE status = 'pending' AND behind = 0;
CREATE INDEX deliveries_leased ON deliveries(source, route, order_key, lease_until)
    WHERE order_key IS NOT NULL AND lease_until IS NOT NULL;
"#;

/// Lines at the cost of no line: [`LINES`] gave every delivery two more index
/// entries to write and remove (`deliveries_due` beside `deliveries_route`, and on
/// an ordered route `deliveries_leased` at every claim and completion), which slowed
/// the drain of an ordered route by 15-20 % and of the others by 6-15 %
/// (BENCHMARKS.md, a long blocked line).
///
/// `deliveries_route` takes `behind` before the due time and is again the one index
/// claims walk: the pending deliveries not behind a head are one range of it, in due
/// order. A delivery that is not pending is never behind (`delivery` clears the mark
/// when a delivery leaves `pending`), so within a status that is not `pending` the
/// index stays in entry id order, as listings need.
///
/// `deliveries_leased` holds only the leases that may hold a line's head back: of a
/// delivery discarded while its attempt was in flight, and of one that a replay put
/// behind an earlier entry of its key while its attempt was in flight. The head's own
/// lease, the one every claim takes, is not in it, so an ordered delivery claimed and
/// delivered writes it nothing.
const LEAN_LINES: &str = r#"
UPDATE deliveries SET behind = 0 WHERE behind = 1 AND status != 'pending';
DROP INDEX deliveries_due;
DROP INDEX deliveries_route;
CREATE INDEX deliveries_route ON deliveries(source, route, status, behind, next_attempt_at);
DROP INDEX deliveries_leased;
CREATE INDEX deliveries_leased ON deliveries(source, route, order_key, lease_until)
    WHERE order_key IS NOT NULL AND lease_until IS NOT NULL
      AND (status != 'pending' OR behind = 1);
"#;

/// Indexes created at open when missing, outside [`MIGRATIONS`]: an index changes no
/// format (a release that does not know it reads and writes the store as before,
/// and SQLite keeps it up to date), so it gets no schema version, which would make
/// older releases refuse the store.
///
/// `deliveries_retried` holds the pending deliveries that were attempted before, by
/// route and due time: what a half-open breaker's probe looks for first
/// (`delivery::claim_probe`). It is partial: a new delivery and an ended one are not
/// in it, so an accept and a delivery that succeeds at its first attempt cost it
/// nothing; a failed attempt adds the delivery, and its end removes it.
const INDEXES: &[(&str, &str)] = &[(
    "deliveries_retried",
    "CREATE INDEX IF NOT EXISTS deliveries_retried ON deliveries(source, route, next_attempt_at)
         WHERE status = 'pending' AND attempts > 0",
)];

/// Tables created at open when missing, outside [`MIGRATIONS`] for the reason the
/// [`INDEXES`] are: a release that does not know one reads and writes the store as
/// before (it only leaves the table's counts behind).
///
/// `activity` holds the per-minute counters of each source (`store::activity`), one
/// row per source and minute that had any, kept for `ACTIVITY_RETENTION` (the purge
/// removes older rows). `control_audit`, `revoked_sessions` and `console_settings`
/// hold the console's records (`controls`); `rejections` and `rejection_counts` the
/// requests ingest refused (`rejections`); `entry_index` the values of the sources'
/// indexed pointers, one row per entry and index (`search`); `provider_ranges` the
/// last good address ranges fetched per URL (`crate::allowlist`); `known_routes`
/// the route registry (`store::routes`);
/// `armed_handshakes` and `established_secrets` the armed secret handshakes (each
/// with the hash of its token) and the secrets they gave (`store::secrets`);
/// `gateways` the heartbeats of the serving processes and `store_settings` the
/// configuration salt (`store::gateways`).
const TABLES: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS known_routes (
        source      TEXT NOT NULL,
        route       TEXT NOT NULL,
        destination TEXT NOT NULL,
        retired_at  INTEGER,
        PRIMARY KEY (source, route)
    ) WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS gateways (
        id        TEXT PRIMARY KEY,
        host      TEXT NOT NULL,
        version   TEXT NOT NULL,
        started   INTEGER NOT NULL,
        last_seen INTEGER NOT NULL
    ) WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS store_settings (
        name  TEXT PRIMARY KEY,
        value BLOB NOT NULL
    ) WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS activity (
        source    TEXT NOT NULL,
        minute    INTEGER NOT NULL,
        received  INTEGER NOT NULL DEFAULT 0,
        delivered INTEGER NOT NULL DEFAULT 0,
        failed    INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (source, minute)
    ) WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS control_audit (
        seq     INTEGER PRIMARY KEY AUTOINCREMENT,
        at      INTEGER NOT NULL,
        action  TEXT NOT NULL,
        source  TEXT NOT NULL,
        route   TEXT,
        actor   TEXT NOT NULL,
        session TEXT,
        client  TEXT
    )",
    "CREATE TABLE IF NOT EXISTS revoked_sessions (
        id         TEXT PRIMARY KEY,
        expires_at INTEGER NOT NULL
    ) WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS console_settings (
        name  TEXT PRIMARY KEY,
        value INTEGER NOT NULL
    ) WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS rejections (
        id      TEXT PRIMARY KEY,
        at      INTEGER NOT NULL,
        grp     TEXT NOT NULL,
        source  TEXT NOT NULL,
        known   INTEGER NOT NULL,
        reason  TEXT NOT NULL,
        status  INTEGER NOT NULL,
        client  TEXT,
        size    INTEGER,
        digest  TEXT,
        headers TEXT NOT NULL,
        body    BLOB
    ) WITHOUT ROWID",
    "CREATE INDEX IF NOT EXISTS rejections_group ON rejections(grp, reason, id)",
    "CREATE INDEX IF NOT EXISTS rejections_at ON rejections(at)",
    "CREATE TABLE IF NOT EXISTS entry_index (
        source   TEXT NOT NULL,
        name     TEXT NOT NULL,
        value    TEXT NOT NULL,
        entry_id TEXT NOT NULL,
        PRIMARY KEY (source, name, value, entry_id)
    ) WITHOUT ROWID",
    "CREATE INDEX IF NOT EXISTS entry_index_entry ON entry_index(entry_id)",
    "CREATE TABLE IF NOT EXISTS armed_handshakes (
        source     TEXT PRIMARY KEY,
        until      INTEGER NOT NULL,
        token_hash TEXT NOT NULL
    ) WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS established_secrets (
        source         TEXT NOT NULL,
        id             TEXT NOT NULL,
        secret         TEXT NOT NULL,
        established_at INTEGER NOT NULL,
        PRIMARY KEY (source, id)
    ) WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS provider_ranges (
        url        TEXT PRIMARY KEY,
        ranges     TEXT NOT NULL,
        fetched_at INTEGER NOT NULL
    ) WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS rejection_counts (
        grp     TEXT NOT NULL,
        reason  TEXT NOT NULL,
        hour    INTEGER NOT NULL,
        count   INTEGER NOT NULL,
        last_at INTEGER NOT NULL,
        PRIMARY KEY (grp, reason, hour)
    ) WITHOUT ROWID",
];

/// Tables dropped at open: what this release no longer reads.
///
/// `handshakes` held the armings made before an arming had a token: an arming with
/// no token would take the handshake of anyone who polls the endpoint, so none is
/// honoured (the operator arms again), and `armed_handshakes` replaced the table.
const RETIRED: &[&str] = &["DROP TABLE IF EXISTS handshakes"];

/// Prepared statements kept per connection: more than the store has (the listing
/// queries vary with their filters, a few dozen shapes).
const STATEMENT_CACHE: usize = 64;

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
    // Every statement is prepared once per connection (`prepare_cached`); rusqlite
    // keeps 16 by default, fewer than the writer runs (accept, claim, complete,
    // replay, discard, purge...), and an evicted one is compiled again on its next use.
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
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
    // The planner's stability guarantee: a statement's plan never depends on the
    // values bound to it. Without it, SQLite ties some plans to a bound value (an
    // entry's outer join to its payload, a delivery's routes in order were seen
    // doing so) and compiles such a statement again whenever its bindings are
    // cleared, which the statement cache does after every use: a third of the
    // writer's time went to compiling the same statements while it delivered
    // (BENCHMARKS.md, the delivering gateway). No query here needs a bound value to
    // choose its index: partial indexes are matched by literals.
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)?;
    Ok(conn)
}

/// A store whose schema is newer than this release knows: it was migrated by a
/// newer hookgate, and reading it with this one would misread it.
#[derive(Debug, thiserror::Error)]
#[error(
    "the store's schema is version {found}, newer than this hookgate knows ({known}): \
     it was migrated by a newer release, and migrations are one-way; run that release"
)]
pub(super) struct NewerSchema {
    found: i64,
    known: usize,
}

/// Apply the migrations the database has not seen yet, each in its own transaction,
/// then create the [`TABLES`] and [`INDEXES`] it lacks and drop the [`RETIRED`]
/// ones. The move to routes of a store written before them is logged once, when it
/// runs, with how many entries it moved; a new store is created silently. A store
/// with a schema newer than [`MIGRATIONS`] is refused.
pub(super) fn migrate(conn: &mut Connection) -> Result<(), StoreError> {
    let version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
    let from = usize::try_from(version).unwrap_or(0);
    if from > MIGRATIONS.len() {
        return Err(StoreError::backend(
            Backend::Sqlite,
            NewerSchema {
                found: version,
                known: MIGRATIONS.len(),
            },
        ));
    }
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(from) {
        let tx = conn.transaction()?;
        tx.execute_batch(sql)?;
        let to = i + 1;
        tx.pragma_update(None, "user_version", i64::try_from(to).unwrap_or(i64::MAX))?;
        // Counted inside the migration's transaction: what it moved.
        let moved: Option<(i64, i64)> = match to == ROUTES_VERSION && from > 0 {
            true => Some((
                tx.query_row("SELECT count(*) FROM deliveries", [], |r| r.get(0))?,
                tx.query_row("SELECT count(*) FROM attempts", [], |r| r.get(0))?,
            )),
            false => None,
        };
        tx.commit()?;
        if let Some((entries, attempts)) = moved {
            tracing::info!(
                from_version = from,
                to_version = to,
                entries,
                attempts,
                route = DEFAULT_ROUTE,
                "migrated the store to routes: each entry is now delivered through the default \
                 route, as it was (one-way: an older hookgate cannot read the store now)"
            );
        }
    }
    for sql in TABLES.iter().chain(RETIRED) {
        conn.execute_batch(sql)?;
    }
    for (name, sql) in INDEXES {
        let exists: bool = conn.query_row(
            "SELECT EXISTS (SELECT 1 FROM sqlite_schema WHERE type = 'index' AND name = ?1)",
            [name],
            |r| r.get(0),
        )?;
        if !exists {
            conn.execute_batch(sql)?;
            if from > 0 {
                tracing::info!(index = name, "created an index the store did not have yet");
            }
        }
    }
    Ok(())
}

/// The writer's own setting: it commits with `synchronous=NORMAL` (no fsync inside
/// the commit) and has the WAL fsynced by the syncer thread before anyone is answered
/// (see `writer`): the durability of `FULL`, with the fsync off the commit path.
pub(super) fn writer_settings(conn: &Connection) -> Result<(), rusqlite::Error> {
    conn.pragma_update(None, "synchronous", "NORMAL")
}

#[cfg(test)]
mod tests;
