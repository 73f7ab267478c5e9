//! The embedded store's SQL: every statement it runs, and how rows become entries.
//!
//! Each function takes the connection it runs on: the writer's transaction (for
//! writes, see `writer`) or the read connection. None of them commits; the writer
//! commits the batch they are part of.

use bytes::Bytes;
use rusqlite::{Connection, OptionalExtension, params};

use crate::store::{
    Accepted, Attempt, AuditEvent, Claim, Completion, Entry, IdPage, ListQuery, ListedEntry,
    NewEntry, Page, Purged, SourceStats, Status, StoreError, Transition, attempt_error,
    decode_headers, id_floor,
};

/// Dedupe and store a new entry (`Store::accept`).
pub(super) fn apply_accept(
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
    if let Some(status) = q.status {
        args.push(status.as_str().to_string().into());
        sql.push_str(&format!(" AND status = ?{}", args.len()));
    }
    if let Some(t) = &q.event_type {
        args.push(t.clone().into());
        sql.push_str(&format!(" AND event_type = ?{}", args.len()));
    }
    if let Some(since) = q.since {
        args.push(id_floor(since).into());
        sql.push_str(&format!(" AND id >= ?{}", args.len()));
    }
    if let Some(until) = q.until {
        args.push(id_floor(until).into());
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

/// One entry by id (`Store::get`).
pub(super) fn load_entry(conn: &Connection, id: &str) -> Result<Option<Entry>, StoreError> {
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

/// Record a claim's completion (`Store::complete`); `true` when applied.
pub(super) fn apply_complete(
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

/// A page of listed entries, newest first (`Store::list`).
pub(super) fn list(conn: &Connection, q: &ListQuery, limit: usize) -> Result<Page, StoreError> {
    let (sql, args) = list_sql(q, LISTED_COLUMNS, limit);
    let mut stmt = conn.prepare_cached(&sql)?;
    let mut rows = stmt.query(rusqlite::params_from_iter(args))?;
    let mut entries = Vec::new();
    while let Some(row) = rows.next()? {
        entries.push(row_to_listed(row)?);
    }
    Ok(Page::from_overfetched(entries, limit))
}

/// The ids of the page `list` would return (`Store::list_ids`).
pub(super) fn list_ids(
    conn: &Connection,
    q: &ListQuery,
    limit: usize,
) -> Result<IdPage, StoreError> {
    let (sql, args) = list_sql(q, "id", limit);
    let mut stmt = conn.prepare_cached(&sql)?;
    let ids = stmt
        .query_map(rusqlite::params_from_iter(args), |r| r.get::<_, String>(0))?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(IdPage::from_overfetched(ids, limit))
}

/// How many entries `source` holds, whatever their status.
pub(super) fn count(conn: &Connection, source: &str) -> Result<u64, StoreError> {
    let n: i64 = conn
        .prepare_cached("SELECT count(*) FROM entries WHERE source = ?1")?
        .query_row(params![source], |r| r.get(0))?;
    Ok(u64::try_from(n).unwrap_or(0))
}

/// How many entries of `source` have `status`.
pub(super) fn count_status(
    conn: &Connection,
    source: &str,
    status: Status,
) -> Result<u64, StoreError> {
    let n: i64 = conn
        .prepare_cached("SELECT count(*) FROM entries WHERE source = ?1 AND status = ?2")?
        .query_row(params![source, status.as_str()], |r| r.get(0))?;
    Ok(u64::try_from(n).unwrap_or(0))
}

pub(super) fn set_paused(conn: &Connection, source: &str, paused: bool) -> Result<(), StoreError> {
    conn.prepare_cached(
        "INSERT INTO sources (name, paused) VALUES (?1, ?2)
         ON CONFLICT(name) DO UPDATE SET paused = excluded.paused",
    )?
    .execute(params![source, paused])?;
    Ok(())
}

pub(super) fn paused_sources(conn: &Connection) -> Result<Vec<String>, StoreError> {
    let mut stmt =
        conn.prepare_cached("SELECT name FROM sources WHERE paused = 1 ORDER BY name")?;
    let names = stmt
        .query_map([], |r| r.get::<_, String>(0))?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(names)
}

/// Lease up to `limit` due, pending entries of an unpaused `source` until `until`
/// (`Store::claim`).
pub(super) fn claim(
    conn: &Connection,
    source: &str,
    now: i64,
    until: i64,
    limit: i64,
) -> Result<Vec<Claim>, StoreError> {
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
        conn.prepare_cached("UPDATE entries SET lease_owner = ?1, lease_until = ?2 WHERE id = ?3")?
            .execute(params![token, until, id])?;
        if let Some(entry) = load_entry(conn, &id)? {
            claims.push(Claim {
                token,
                stream_message: None,
                entry,
            });
        }
    }
    Ok(claims)
}

/// Every attempt of an entry, oldest first.
pub(super) fn attempts(conn: &Connection, id: &str) -> Result<Vec<Attempt>, StoreError> {
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
}

/// One retention pass (`Store::purge`).
pub(super) fn purge(
    conn: &Connection,
    now: i64,
    delivered_before: i64,
    dead_before: i64,
    limit: i64,
) -> Result<Purged, StoreError> {
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
}

/// The status of an entry, `None` when there is no such entry (or its status is
/// unknown).
fn status_of(conn: &Connection, id: &str) -> Result<Option<Status>, StoreError> {
    let status: Option<String> = conn
        .prepare_cached("SELECT status FROM entries WHERE id = ?1")?
        .query_row(params![id], |r| r.get(0))
        .optional()?;
    Ok(status.as_deref().and_then(Status::parse))
}

/// Queue an entry again at `at` with a fresh budget, audited (`Store::replay`).
pub(super) fn replay(
    conn: &Connection,
    id: &str,
    at: i64,
    actor: &str,
    now: i64,
) -> Result<Transition, StoreError> {
    let Some(status) = status_of(conn, id)? else {
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
}

/// Discard a pending or dead entry, audited with the note (`Store::discard`).
pub(super) fn discard(
    conn: &Connection,
    id: &str,
    actor: &str,
    note: &str,
    now: i64,
) -> Result<Transition, StoreError> {
    let Some(status) = status_of(conn, id)? else {
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
}

/// The audit trail of an entry, oldest first.
pub(super) fn audit(conn: &Connection, id: &str) -> Result<Vec<AuditEvent>, StoreError> {
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
}

pub(super) fn record_unverified(conn: &Connection, source: &str, n: i64) -> Result<(), StoreError> {
    conn.prepare_cached(
        "INSERT INTO stats (source, unverified) VALUES (?1, ?2)
         ON CONFLICT(source) DO UPDATE SET unverified = unverified + ?2",
    )?
    .execute(params![source, n])?;
    Ok(())
}

/// Counters and gauges of a source (`Store::stats`).
pub(super) fn stats(conn: &Connection, source: &str) -> Result<SourceStats, StoreError> {
    let mut stats = SourceStats::default();
    if let Some((received, duplicates, unverified)) = conn
        .prepare_cached("SELECT received, duplicates, unverified FROM stats WHERE source = ?1")?
        .query_row(params![source], |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, i64>(1)?,
                r.get::<_, i64>(2)?,
            ))
        })
        .optional()?
    {
        stats.received = u64::try_from(received).unwrap_or(0);
        stats.duplicates = u64::try_from(duplicates).unwrap_or(0);
        stats.unverified = u64::try_from(unverified).unwrap_or(0);
    }
    let mut stmt = conn
        .prepare_cached("SELECT status, count(*) FROM entries WHERE source = ?1 GROUP BY status")?;
    let counts = stmt
        .query_map(params![source], |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?))
        })?
        .collect::<Result<Vec<_>, _>>()?;
    for (status, n) in counts {
        let n = u64::try_from(n).unwrap_or(0);
        match Status::parse(&status) {
            Some(Status::Pending) => stats.pending = n,
            Some(Status::Delivered) => stats.delivered = n,
            Some(Status::Dead) => stats.dead = n,
            Some(Status::Discarded) => stats.discarded = n,
            None => {}
        }
    }
    stats.oldest_pending_at = conn
        .prepare_cached(
            "SELECT received_at FROM entries WHERE source = ?1 AND status = 'pending'
             ORDER BY id LIMIT 1",
        )?
        .query_row(params![source], |r| r.get(0))
        .optional()?;
    Ok(stats)
}

/// Release every lease (a previous run's); how many there were.
pub(super) fn release_leases(conn: &Connection) -> Result<usize, StoreError> {
    Ok(conn.execute(
        "UPDATE entries SET lease_owner = NULL, lease_until = NULL
         WHERE lease_owner IS NOT NULL",
        [],
    )?)
}

/// Whether the database answers a read (`Store::ping`).
pub(super) fn probe(conn: &Connection) -> Result<(), StoreError> {
    conn.query_row("SELECT count(*) FROM sqlite_master", [], |_| Ok(()))?;
    Ok(())
}
