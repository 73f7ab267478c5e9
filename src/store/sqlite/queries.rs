//! The embedded store's SQL for entries as a whole: accept, reads, listings,
//! counters and pauses. What changes a delivery (claims, completions, replays,
//! discards) is in `delivery`; how rows become entries and deliveries, in `rows`.
//!
//! Each function takes the connection it runs on: the writer's transaction (for
//! writes, see `writer`) or the read connection. None of them commits; the writer
//! commits the batch they are part of.

use rusqlite::{Connection, OptionalExtension, params};

use super::lines;
use super::rows::{bump_activity, parse_origin};
use crate::store::activity::minute_of;
use crate::store::{
    Accepted, Attempt, AuditEvent, DeadLetter, IdPage, ListQuery, ListedEntry, MinuteActivity,
    NewEntry, Page, PauseTarget, RouteStats, SourceStats, Status, StoreError, id_floor,
};

/// Dedupe and store a new entry with a pending delivery per route, due at once; an
/// entry without routes is stored filtered (`Store::accept`).
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
    bump_activity(conn, &e.source, minute_of(e.received_at), "received")?;
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
    let (status, next) = match e.routes.is_empty() {
        true => (Status::Filtered, None),
        false => (Status::Pending, Some(e.received_at)),
    };
    // The headers and body apart from the entry's row (see `schema::PAYLOADS`).
    conn.prepare_cached("INSERT INTO payloads (headers, body) VALUES (?1, ?2)")?
        .execute(params![headers, e.body.as_ref()])?;
    let payload = conn.last_insert_rowid();
    conn.prepare_cached(
        "INSERT INTO entries (id, source, event_id, event_type, dedupe_key, received_at,
                              status, attempts, next_attempt_at, budget_start, updated_at,
                              headers, body, payload, origin)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 0, ?8, ?6, ?9, '', x'', ?10, ?11)",
    )?
    .execute(params![
        e.id,
        e.source,
        e.event_id,
        e.event_type,
        e.dedupe_key,
        e.received_at,
        status.as_str(),
        next,
        now,
        payload,
        e.origin.as_str(),
    ])?;
    super::search::index_entry(conn, e)?;
    for (position, route) in e.routes.iter().enumerate() {
        let order = e.ordering.iter().find(|o| &o.route == route);
        // An ordered delivery joins its key's line: behind its first member, or (an
        // entry stored after a later one of its key) in front of it.
        let first = match order {
            Some(o) => lines::line_head(conn, &e.source, route, &o.key)?,
            None => None,
        };
        let behind = first.as_deref().is_some_and(|f| f < e.id.as_str());
        conn.prepare_cached(
            // A route named twice is one delivery (routes come without repeats).
            "INSERT OR IGNORE INTO deliveries (entry_id, route, position, source, status,
                                               attempts, next_attempt_at, budget_start,
                                               budget_attempts, updated_at, order_key,
                                               order_block, behind)
             VALUES (?1, ?2, ?3, ?4, 'pending', 0, ?5, ?5, 0, ?6, ?7, ?8, ?9)",
        )?
        .execute(params![
            e.id,
            route,
            i64::try_from(position).unwrap_or(i64::MAX),
            e.source,
            e.received_at,
            now,
            order.map(|o| o.key.as_str()),
            order.is_some_and(|o| o.block),
            behind,
        ])?;
        if let (Some(o), Some(_), false) = (order, &first, behind) {
            lines::settle_line(conn, &e.source, route, &o.key, &e.id)?;
        }
    }
    Ok(Accepted::New(e.id.clone()))
}

/// What a listing reads: no headers, no body (neither the payloads nor, for an entry
/// stored before them, the overflow pages of its row).
/// The entry's attempts, next attempt and last error are derived from its deliveries
/// as [`Entry::summary`] derives them (the row keeps only the status).
const LISTED_COLUMNS: &str = "e.id, e.source, e.event_id, e.event_type, e.received_at, e.status, \
     (SELECT coalesce(sum(x.attempts), 0) FROM deliveries x WHERE x.entry_id = e.id), \
     (SELECT min(x.next_attempt_at) FROM deliveries x \
        WHERE x.entry_id = e.id AND x.status = 'pending'), \
     (SELECT x.last_error FROM deliveries x \
        WHERE x.entry_id = e.id AND x.status != 'delivered' AND x.last_error IS NOT NULL \
        ORDER BY x.position LIMIT 1), \
     e.origin";

fn row_to_listed(r: &rusqlite::Row<'_>) -> Result<ListedEntry, StoreError> {
    let id: String = r.get(0)?;
    let status: String = r.get(5)?;
    let origin: String = r.get(9)?;
    Ok(ListedEntry {
        origin: parse_origin(&id, &origin)?,
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
///
/// With a route, the entries that have a delivery through it, and `status` is that
/// delivery's. With a source and a status too, the page is read from the deliveries'
/// index (`deliveries_route`: source, route, status, behind, next attempt), newest first
/// (pending deliveries are sorted: they are in due order there); otherwise the
/// entries are scanned newest first and each is looked up in `deliveries` by its
/// primary key, which stops as soon as the page is full when most entries qualify.
fn list_sql(q: &ListQuery, columns: &str, limit: usize) -> (String, Vec<rusqlite::types::Value>) {
    let mut args: Vec<rusqlite::types::Value> = Vec::new();
    let mut arg = |v: rusqlite::types::Value| {
        args.push(v);
        format!("?{}", args.len())
    };
    let mut sql;
    // The id column the page is ordered and bounded by.
    let id;
    match (&q.route, &q.source, q.status) {
        (Some(route), Some(source), Some(status)) => {
            let (source, route) = (arg(source.clone().into()), arg(route.clone().into()));
            // A delivery that is not pending has no next attempt and is not behind:
            // naming that lets the index (source, route, status, behind, next attempt)
            // give the rows in id order.
            let ended = match status {
                Status::Pending => "",
                _ => " AND d.behind = 0 AND d.next_attempt_at IS NULL",
            };
            let status = arg(status.as_str().to_string().into());
            sql = format!(
                "SELECT {columns} FROM deliveries d JOIN entries e ON e.id = d.entry_id
                 WHERE d.source = {source} AND d.route = {route} AND d.status = {status}{ended}"
            );
            id = "d.entry_id";
        }
        (Some(route), source, status) => {
            let route = arg(route.clone().into());
            let status = match status {
                Some(s) => format!(" AND d.status = {}", arg(s.as_str().to_string().into())),
                None => String::new(),
            };
            sql = format!(
                "SELECT {columns} FROM entries e WHERE EXISTS (SELECT 1 FROM deliveries d
                     WHERE d.entry_id = e.id AND d.route = {route}{status})"
            );
            if let Some(s) = source {
                sql.push_str(&format!(" AND e.source = {}", arg(s.clone().into())));
            }
            id = "e.id";
        }
        (None, source, status) => {
            sql = format!("SELECT {columns} FROM entries e WHERE 1 = 1");
            if let Some(s) = source {
                sql.push_str(&format!(" AND e.source = {}", arg(s.clone().into())));
            }
            if let Some(status) = status {
                let status = arg(status.as_str().to_string().into());
                sql.push_str(&format!(" AND e.status = {status}"));
            }
            id = "e.id";
        }
    }
    if let Some(t) = &q.event_type {
        sql.push_str(&format!(" AND e.event_type = {}", arg(t.clone().into())));
    }
    if let Some(t) = &q.event_id {
        sql.push_str(&format!(" AND e.event_id = {}", arg(t.clone().into())));
    }
    if let Some(since) = q.since {
        sql.push_str(&format!(" AND {id} >= {}", arg(id_floor(since).into())));
    }
    if let Some(below) = q.scan_below() {
        sql.push_str(&format!(" AND {id} < {}", arg(below.into())));
    }
    sql.push_str(&format!(" ORDER BY {id} DESC LIMIT {}", limit + 1));
    (sql, args)
}

/// `source`'s activity in the minutes starting in `[since, until)` (`Store::activity`).
pub(super) fn activity(
    conn: &Connection,
    source: &str,
    since: i64,
    until: i64,
) -> Result<Vec<MinuteActivity>, StoreError> {
    let rows = conn
        .prepare_cached(
            "SELECT minute, received, delivered, failed FROM activity
             WHERE source = ?1 AND minute >= ?2 AND minute < ?3 ORDER BY minute",
        )?
        .query_map(params![source, since, until], |r| {
            let n = |i| r.get::<_, i64>(i).map(|v| u64::try_from(v).unwrap_or(0));
            Ok(MinuteActivity {
                minute: r.get(0)?,
                received: n(1)?,
                delivered: n(2)?,
                failed: n(3)?,
            })
        })?
        .collect::<Result<_, _>>()?;
    Ok(rows)
}

/// The dead deliveries of `route` of `source`, newest entry first
/// (`Store::dead_letters`): the route index in entry id order, and each entry's row
/// by its key, never its headers or body.
pub(super) fn dead_letters(
    conn: &Connection,
    source: &str,
    route: &str,
    limit: usize,
) -> Result<Vec<DeadLetter>, StoreError> {
    let rows = conn
        .prepare_cached(
            "SELECT d.entry_id, e.event_id, e.event_type, e.received_at, d.updated_at,
                    d.attempts, d.last_error, d.last_failure
             FROM deliveries d JOIN entries e ON e.id = d.entry_id
             WHERE d.source = ?1 AND d.route = ?2 AND d.status = 'dead'
               AND d.next_attempt_at IS NULL
             ORDER BY d.entry_id DESC LIMIT ?3",
        )?
        .query_map(
            params![source, route, i64::try_from(limit).unwrap_or(i64::MAX)],
            |r| {
                Ok(DeadLetter {
                    id: r.get(0)?,
                    event_id: r.get(1)?,
                    event_type: r.get(2)?,
                    received_at: r.get(3)?,
                    dead_at: r.get(4)?,
                    attempts: r.get(5)?,
                    last_error: r.get(6)?,
                    failure: crate::failure::stored(r.get::<_, Option<String>>(7)?.as_deref()),
                })
            },
        )?
        .collect::<Result<_, _>>()?;
    Ok(rows)
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

/// Pause or resume a source (`route: None`) or one of its routes.
pub(super) fn set_paused(
    conn: &Connection,
    source: &str,
    route: Option<&str>,
    paused: bool,
) -> Result<(), StoreError> {
    match (route, paused) {
        (None, _) => conn
            .prepare_cached(
                "INSERT INTO sources (name, paused) VALUES (?1, ?2)
                 ON CONFLICT(name) DO UPDATE SET paused = excluded.paused",
            )?
            .execute(params![source, paused])?,
        (Some(route), true) => conn
            .prepare_cached("INSERT OR IGNORE INTO paused_routes (source, route) VALUES (?1, ?2)")?
            .execute(params![source, route])?,
        (Some(route), false) => conn
            .prepare_cached("DELETE FROM paused_routes WHERE source = ?1 AND route = ?2")?
            .execute(params![source, route])?,
    };
    Ok(())
}

/// The paused sources and routes, sorted.
pub(super) fn paused(conn: &Connection) -> Result<Vec<PauseTarget>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT name, NULL FROM sources WHERE paused = 1
         UNION ALL SELECT source, route FROM paused_routes",
    )?;
    let mut targets = stmt
        .query_map([], |r| {
            Ok(PauseTarget {
                source: r.get(0)?,
                route: r.get(1)?,
            })
        })?
        .collect::<Result<Vec<_>, _>>()?;
    targets.sort();
    Ok(targets)
}

/// Every attempt of an entry through every route, oldest first (ties by route, then
/// number).
pub(super) fn attempts(conn: &Connection, id: &str) -> Result<Vec<Attempt>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT route, n, at, status_code, error, latency_ms, failure, answer FROM attempts
         WHERE entry_id = ?1 ORDER BY at, route, n",
    )?;
    let rows = stmt
        .query_map(params![id], |r| {
            Ok(Attempt {
                route: r.get(0)?,
                n: r.get(1)?,
                at: r.get(2)?,
                status_code: r.get(3)?,
                failure: crate::failure::stored(r.get::<_, Option<String>>(6)?.as_deref()),
                error: r.get(4)?,
                latency_ms: u64::try_from(r.get::<_, i64>(5)?).unwrap_or(0),
                answer: r.get(7)?,
            })
        })?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(rows)
}

/// The audit trail of an entry, oldest first.
pub(super) fn audit(conn: &Connection, id: &str) -> Result<Vec<AuditEvent>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT at, action, actor, note, route, session, client FROM audit
         WHERE entry_id = ?1 ORDER BY at, rowid",
    )?;
    let rows = stmt
        .query_map(params![id], |r| {
            Ok(AuditEvent {
                route: r.get(4)?,
                at: r.get(0)?,
                action: r.get(1)?,
                actor: r.get::<_, Option<String>>(2)?.unwrap_or_default(),
                note: r.get(3)?,
                session: r.get(5)?,
                client: r.get(6)?,
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
    let counts = status_counts(
        conn,
        "SELECT status, count(*) FROM entries WHERE source = ?1 GROUP BY status",
        params![source],
    )?;
    for (status, n) in counts {
        match status {
            Some(Status::Pending) => stats.pending = n,
            Some(Status::Delivered) => stats.delivered = n,
            Some(Status::Dead) => stats.dead = n,
            Some(Status::Discarded) => stats.discarded = n,
            Some(Status::Filtered) => stats.filtered = n,
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

/// The (status, count) rows of a `SELECT status, count(*) … GROUP BY status`; an
/// unknown status is left out.
fn status_counts(
    conn: &Connection,
    sql: &str,
    args: impl rusqlite::Params,
) -> Result<Vec<(Option<Status>, u64)>, StoreError> {
    let mut stmt = conn.prepare_cached(sql)?;
    let rows = stmt
        .query_map(args, |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(rows
        .into_iter()
        .map(|(status, n)| (Status::parse(&status), u64::try_from(n).unwrap_or(0)))
        .collect())
}

/// The deliveries through `route` of `source`, by status (`Store::route_stats`).
pub(super) fn route_stats(
    conn: &Connection,
    source: &str,
    route: &str,
) -> Result<RouteStats, StoreError> {
    let mut stats = RouteStats::default();
    let counts = status_counts(
        conn,
        "SELECT status, count(*) FROM deliveries WHERE source = ?1 AND route = ?2
         GROUP BY status",
        params![source, route],
    )?;
    for (status, n) in counts {
        match status {
            Some(Status::Pending) => stats.pending = n,
            Some(Status::Delivered) => stats.delivered = n,
            Some(Status::Dead) => stats.dead = n,
            Some(Status::Discarded) => stats.discarded = n,
            Some(Status::Filtered) | None => {}
        }
    }
    // Ids sort by arrival: the smallest pending one is the oldest (a scan of the
    // route's pending deliveries in the index, which are in due order).
    stats.oldest_pending_at = conn
        .prepare_cached(
            "SELECT e.received_at FROM entries e WHERE e.id = (
                 SELECT min(d.entry_id) FROM deliveries d
                 WHERE d.source = ?1 AND d.route = ?2 AND d.status = 'pending')",
        )?
        .query_row(params![source, route], |r| r.get(0))
        .optional()?;
    stats.blocked_keys = lines::blocked_keys(conn, source, route)?;
    Ok(stats)
}

/// Whether the database answers a read (`Store::ping`).
pub(super) fn probe(conn: &Connection) -> Result<(), StoreError> {
    conn.query_row("SELECT count(*) FROM sqlite_master", [], |_| Ok(()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::store::Header;
    use crate::store::sqlite::rows::load_entry;
    use crate::store::sqlite::{delivery, schema};
    use bytes::Bytes;

    fn new_entry(id: &str) -> NewEntry {
        NewEntry {
            id: id.to_string(),
            source: "s".into(),
            event_id: Some(id.to_string()),
            event_type: None,
            dedupe_key: format!("id:{id}"),
            dedupe_ttl: Duration::from_secs(60),
            received_at: 1_000,
            headers: vec![Header {
                name: "x-sig".into(),
                value: b"v1=abc".to_vec(),
            }],
            body: Bytes::from(vec![7u8; 7 * 1024]),
            routes: vec!["default".into()],
            ordering: Vec::new(),
            index: Vec::new(),
            origin: crate::store::Origin::Received,
        }
    }

    fn scalar(conn: &Connection, sql: &str) -> i64 {
        conn.query_row(sql, [], |r| r.get(0)).unwrap()
    }

    /// A new entry's headers and body are its payload's, not its row's: a completion
    /// that rewrites the row writes no body again. The entry reads whole, and a
    /// purge deletes its payload with it.
    #[test]
    fn an_entry_keeps_its_body_in_its_payload_and_the_purge_deletes_it() {
        let dir = tempfile::tempdir().unwrap();
        let mut conn = schema::open_connection(&dir.path().join(schema::DB_FILE)).unwrap();
        schema::migrate(&mut conn).unwrap();
        let e = new_entry("0001");
        apply_accept(&conn, &e, &crate::store::encode_headers(&e.headers), 1_000).unwrap();
        assert_eq!(
            scalar(&conn, "SELECT length(body) + length(headers) FROM entries"),
            0,
            "the row holds neither"
        );
        let read = load_entry(&conn, "0001").unwrap().unwrap();
        assert_eq!(
            (read.body, read.headers),
            (e.body.clone(), e.headers.clone())
        );

        let claim = delivery::claim(&conn, "s", "default", 2_000, 60_000, 1)
            .unwrap()
            .pop()
            .unwrap();
        assert_eq!(claim.entry.body, e.body);
        let done = crate::store::Completion::Delivered {
            attempt: Attempt {
                route: "default".into(),
                n: 1,
                at: 2_000,
                status_code: Some(200),
                failure: None,
                error: None,
                latency_ms: 1,
                answer: None,
            },
        };
        let finished = crate::store::Finished::of(&claim);
        assert!(delivery::complete(&conn, &finished, &done, 2_000).unwrap());
        assert_eq!(load_entry(&conn, "0001").unwrap().unwrap().body, e.body);

        let purged = super::super::retention::purge(&conn, 10_000, 5_000, 5_000, 100).unwrap();
        assert_eq!(purged.entries, 1);
        assert_eq!(scalar(&conn, "SELECT count(*) FROM payloads"), 0);
        assert_eq!(scalar(&conn, "SELECT count(*) FROM entries"), 0);
    }
}
