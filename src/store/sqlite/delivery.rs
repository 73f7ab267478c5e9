//! The embedded store's deliveries: each route's delivery of an entry is a row of
//! `deliveries` (see `schema`, migration 2), claimed, completed, replayed and
//! discarded on its own; the entry's row keeps the summary of its deliveries
//! status ([`Status::of_entry`]), kept in step in the same transaction by
//! [`refresh_entry`]; the rest of its summary ([`crate::store::Entry::summary`]) is derived when
//! read.
//!
//! Like `queries`, every function takes the connection it runs on and none commits.

use rusqlite::{Connection, OptionalExtension, params};

use super::lines::settle_delivery;
use super::queries::{bump_activity, load_entry};
use crate::store::activity::{Counted, minute_of};
use crate::store::{
    Actor, Attempt, Claim, Completion, Delivery, DeliveryOrder, SKIP_ACTION, SKIP_ACTOR, SKIP_NOTE,
    Status, StoreError, Transition, attempt_error,
};

/// What a delivery row holds, in route order: the columns [`row_to_delivery`] reads.
const DELIVERY_COLUMNS: &str = "route, status, attempts, next_attempt_at, last_error, \
     budget_start, budget_attempts, order_key, order_block";

fn parse_status(id: &str, status: &str) -> Result<Status, StoreError> {
    match Status::parse(status) {
        Some(Status::Filtered) | None => Err(StoreError::Corrupt {
            id: id.to_string(),
            problem: format!("a delivery with status {status:?}"),
        }),
        Some(s) => Ok(s),
    }
}

fn row_to_delivery(id: &str, r: &rusqlite::Row<'_>) -> Result<Delivery, StoreError> {
    let status: String = r.get(1)?;
    Ok(Delivery {
        route: r.get(0)?,
        status: parse_status(id, &status)?,
        attempts: u32::try_from(r.get::<_, i64>(2)?).unwrap_or(u32::MAX),
        next_attempt_at: r.get(3)?,
        last_error: r.get(4)?,
        budget_start: r.get(5)?,
        budget_attempts: u32::try_from(r.get::<_, i64>(6)?).unwrap_or(0),
        order: r
            .get::<_, Option<String>>(7)?
            .map(|key| -> Result<DeliveryOrder, rusqlite::Error> {
                Ok(DeliveryOrder {
                    key,
                    block: r.get(8)?,
                })
            })
            .transpose()?,
    })
}

/// The deliveries of an entry, in the order of its routes.
pub(super) fn load_deliveries(conn: &Connection, id: &str) -> Result<Vec<Delivery>, StoreError> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {DELIVERY_COLUMNS} FROM deliveries WHERE entry_id = ?1 ORDER BY position"
    ))?;
    let mut rows = stmt.query(params![id])?;
    let mut out = Vec::new();
    while let Some(row) = rows.next()? {
        out.push(row_to_delivery(id, row)?);
    }
    Ok(out)
}

/// Keep the entry's row in step with its deliveries: its status (derived with
/// [`Status::of_entry`]) and, when that status changes, `updated_at` (since when the
/// entry has its status: retention counts from there). The row is written only when
/// the status changes (a retry, or one route's completion among several, leaves it
/// as it is); an entry stored before payloads holds its body in that row, which the
/// write then copies (`schema::PAYLOADS`). The rest of the summary (attempts, next
/// attempt, last error) is derived from the deliveries when read.
fn refresh_entry(conn: &Connection, id: &str, now: i64) -> Result<(), StoreError> {
    let statuses: Vec<String> = conn
        .prepare_cached("SELECT status FROM deliveries WHERE entry_id = ?1")?
        .query_map(params![id], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    let status = Status::of_entry(
        statuses
            .iter()
            .map(|s| parse_status(id, s))
            .collect::<Result<Vec<_>, _>>()?,
    );
    conn.prepare_cached(
        "UPDATE entries SET status = ?2, updated_at = ?3 WHERE id = ?1 AND status != ?2",
    )?
    .execute(params![id, status.as_str(), now])?;
    Ok(())
}

/// The entry's status from its row, `None` when there is no such entry.
fn entry_status(conn: &Connection, id: &str) -> Result<Option<Status>, StoreError> {
    let status: Option<String> = conn
        .prepare_cached("SELECT status FROM entries WHERE id = ?1")?
        .query_row(params![id], |r| r.get(0))
        .optional()?;
    status
        .map(|s| {
            Status::parse(&s).ok_or_else(|| StoreError::Corrupt {
                id: id.to_string(),
                problem: format!("unknown status {s:?}"),
            })
        })
        .transpose()
}

/// The conditions of every claim of a delivery through route `?2` of source `?1` at
/// `?3`: pending, due, not leased (or its lease ran out), neither the source nor the
/// route paused, and, for an ordered delivery, the head of its key's line (`behind`
/// is 0: no earlier delivery of its key is pending or dead with `block`; see
/// `lines::settle_line`) while none of its key is leased (a replay or discard waits for
/// the attempt in flight; `deliveries_leased` holds only leased ordered
/// deliveries). (A macro, so that the queries below are constants.)
macro_rules! claimable {
    () => {
        "source = ?1 AND route = ?2 AND status = 'pending' AND behind = 0
           AND next_attempt_at <= ?3
           AND (lease_until IS NULL OR lease_until <= ?3)
           AND NOT EXISTS (SELECT 1 FROM sources WHERE name = ?1 AND paused = 1)
           AND NOT EXISTS (SELECT 1 FROM paused_routes WHERE source = ?1 AND route = ?2)
           AND (deliveries.order_key IS NULL OR NOT EXISTS (
               SELECT 1 FROM deliveries o INDEXED BY deliveries_leased
               WHERE o.source = ?1 AND o.route = ?2 AND o.order_key = deliveries.order_key
                 AND o.lease_until > ?3 AND o.entry_id != deliveries.entry_id))"
    };
}

/// Up to `?4` claimable deliveries, due first, through `deliveries_due`: the
/// pending deliveries not behind a head, so a claim never reads a line's waiting
/// deliveries.
const DUE: &str = concat!(
    "SELECT entry_id FROM deliveries INDEXED BY deliveries_due WHERE ",
    claimable!(),
    " ORDER BY next_attempt_at LIMIT ?4"
);

/// The claimable delivery attempted before that is due first. `deliveries_retried`
/// (see `schema`) holds only the pending deliveries attempted before; it is named
/// because the planner would otherwise walk `deliveries_route` through every due
/// new delivery before the first retried one (a whole backlog, on the writer
/// thread).
const RETRIED: &str = concat!(
    "SELECT entry_id FROM deliveries INDEXED BY deliveries_retried WHERE ",
    claimable!(),
    " AND attempts > 0 ORDER BY next_attempt_at LIMIT 1"
);

/// Lease up to `limit` due, pending deliveries through `route` of `source` until
/// `until`, unless the source or the route is paused (`Store::claim`). Each claim
/// carries the whole entry.
pub(super) fn claim(
    conn: &Connection,
    source: &str,
    route: &str,
    now: i64,
    until: i64,
    limit: i64,
) -> Result<Vec<Claim>, StoreError> {
    let ids = due(conn, source, route, now, limit)?;
    lease(conn, ids, route, until)
}

/// Lease the one delivery through `route` of `source` a half-open breaker's probe
/// sends (`Store::claim_probe`): the due one attempted before with the earliest
/// next attempt, else the first one `claim` would take.
pub(super) fn claim_probe(
    conn: &Connection,
    source: &str,
    route: &str,
    now: i64,
    until: i64,
) -> Result<Option<Claim>, StoreError> {
    let retried: Option<String> = conn
        .prepare_cached(RETRIED)?
        .query_row(params![source, route, now], |r| r.get(0))
        .optional()?;
    let ids = match retried {
        Some(id) => vec![id],
        None => due(conn, source, route, now, 1)?,
    };
    Ok(lease(conn, ids, route, until)?.pop())
}

/// The entry ids of up to `limit` claimable deliveries through `route` of `source`
/// at `now`, due first.
fn due(
    conn: &Connection,
    source: &str,
    route: &str,
    now: i64,
    limit: i64,
) -> Result<Vec<String>, StoreError> {
    Ok(conn
        .prepare_cached(DUE)?
        .query_map(params![source, route, now, limit], |r| r.get(0))?
        .collect::<Result<_, _>>()?)
}

/// Lease the deliveries through `route` of the entries `ids` until `until`, each
/// under a token of its own.
fn lease(
    conn: &Connection,
    ids: Vec<String>,
    route: &str,
    until: i64,
) -> Result<Vec<Claim>, StoreError> {
    let mut claims = Vec::with_capacity(ids.len());
    for id in ids {
        let token = uuid::Uuid::now_v7().simple().to_string();
        conn.prepare_cached(
            "UPDATE deliveries SET lease_owner = ?1, lease_until = ?2
             WHERE entry_id = ?3 AND route = ?4",
        )?
        .execute(params![token, until, id, route])?;
        let Some(entry) = load_entry(conn, &id)? else {
            continue;
        };
        let Some(delivery) = entry.delivery(route).cloned() else {
            continue;
        };
        claims.push(Claim {
            entry,
            delivery,
            token,
            stream_message: None,
        });
    }
    Ok(claims)
}

fn insert_attempt(conn: &Connection, id: &str, route: &str, a: &Attempt) -> Result<(), StoreError> {
    conn.prepare_cached(
        "INSERT OR IGNORE INTO attempts (entry_id, route, n, at, status_code, error, latency_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    )?
    .execute(params![
        id,
        route,
        a.n,
        a.at,
        a.status_code,
        a.error,
        i64::try_from(a.latency_ms).unwrap_or(i64::MAX)
    ])?;
    Ok(())
}

/// Record what happened to a claimed delivery (`Store::complete`); `true` when
/// applied: the delivery through `route` is pending and leased to `token`.
pub(super) fn complete(
    conn: &Connection,
    source: &str,
    id: &str,
    route: &str,
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
    let applied =
        conn.prepare_cached(
            "UPDATE deliveries SET status = ?1, next_attempt_at = ?2,
                 last_error = coalesce(?3, last_error), attempts = attempts + ?4,
                 lease_owner = NULL, lease_until = NULL, updated_at = ?5
             WHERE entry_id = ?6 AND route = ?7 AND lease_owner = ?8 AND status = 'pending'",
        )?
        .execute(params![
            status.as_str(),
            next,
            last_error,
            i64::from(attempt.is_some()),
            now,
            id,
            route,
            token
        ])? == 1;
    // Only the lease holder's attempt is recorded: a completion that lost its lease
    // (or is repeated after a lost reply) changes nothing. But a delivery discarded
    // while this attempt ran (discard keeps the lease) records the attempt, and stays
    // discarded.
    let recorded = applied
        || conn
            .prepare_cached(
                "UPDATE deliveries SET attempts = attempts + ?1, lease_owner = NULL,
                     lease_until = NULL, updated_at = ?2
                 WHERE entry_id = ?3 AND route = ?4 AND lease_owner = ?5
                   AND status = 'discarded'",
            )?
            .execute(params![i64::from(attempt.is_some()), now, id, route, token])?
            == 1;
    if recorded {
        if let Some(a) = attempt {
            insert_attempt(conn, id, route, a)?;
        }
        refresh_entry(conn, id, now)?;
    }
    if applied && let Some(counted) = Counted::of(completion) {
        let column = match counted {
            Counted::Delivered => "delivered",
            Counted::Failed => "failed",
        };
        bump_activity(conn, source, minute_of(now), column)?;
    }
    // A delivery that ended (delivered, or dead with `skip`) leaves its line: the
    // next one becomes the head.
    if applied
        && matches!(
            completion,
            Completion::Delivered { .. } | Completion::Dead { .. }
        )
    {
        settle_delivery(conn, id, route)?;
    }
    // A dead head of an ordered line that lets the next one go says so.
    if applied && matches!(completion, Completion::Dead { .. }) {
        let skips: bool = conn
            .prepare_cached(
                "SELECT order_key IS NOT NULL AND order_block = 0 FROM deliveries
                 WHERE entry_id = ?1 AND route = ?2",
            )?
            .query_row(params![id, route], |r| r.get(0))?;
        if skips {
            audit(
                conn,
                id,
                now,
                SKIP_ACTION,
                &Actor::from(SKIP_ACTOR),
                Some(SKIP_NOTE),
                Some(route),
            )?;
        }
    }
    Ok(applied)
}

/// The status of each delivery of an entry, in route order.
fn delivery_statuses(conn: &Connection, id: &str) -> Result<Vec<(String, Status)>, StoreError> {
    Ok(load_deliveries(conn, id)?
        .into_iter()
        .map(|d| (d.route, d.status))
        .collect())
}

/// The deliveries an operator's action applies to: the named one if `qualifies`
/// lets it, or, without a name, every one it lets (or `fallback`'s pick when none
/// does). `Err` holds the refusal.
fn targets(
    conn: &Connection,
    id: &str,
    route: Option<&str>,
    qualifies: impl Fn(Status) -> bool,
    fallback: impl Fn(&[(String, Status)]) -> Vec<String>,
) -> Result<Result<Vec<String>, Transition>, StoreError> {
    let Some(entry) = entry_status(conn, id)? else {
        return Ok(Err(Transition::NotFound));
    };
    let deliveries = delivery_statuses(conn, id)?;
    if let Some(route) = route {
        return Ok(match deliveries.iter().find(|(r, _)| r == route) {
            None => Err(Transition::NoSuchRoute),
            Some((r, s)) if qualifies(*s) => Ok(vec![r.clone()]),
            Some((_, s)) => Err(Transition::Conflict(*s)),
        });
    }
    let mut chosen: Vec<String> = deliveries
        .iter()
        .filter(|(_, s)| qualifies(*s))
        .map(|(r, _)| r.clone())
        .collect();
    if chosen.is_empty() {
        chosen = fallback(&deliveries);
    }
    Ok(match chosen.is_empty() {
        true => Err(Transition::Conflict(entry)),
        false => Ok(chosen),
    })
}

fn audit(
    conn: &Connection,
    id: &str,
    now: i64,
    action: &str,
    by: &Actor,
    note: Option<&str>,
    route: Option<&str>,
) -> Result<(), StoreError> {
    conn.prepare_cached(
        "INSERT INTO audit (entry_id, at, action, actor, note, route, session, client)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    )?
    .execute(params![
        id, now, action, by.name, note, route, by.session, by.client
    ])?;
    Ok(())
}

/// Queue deliveries of an entry again at `at`, each with a fresh budget, audited
/// (`Store::replay`): the named one unless it is pending; without a name, every dead
/// or discarded one, or, when every one was delivered, all of them.
pub(super) fn replay(
    conn: &Connection,
    id: &str,
    route: Option<&str>,
    at: i64,
    by: &Actor,
    now: i64,
) -> Result<Transition, StoreError> {
    let chosen = match route {
        Some(_) => targets(conn, id, route, |s| s != Status::Pending, |_| Vec::new())?,
        None => targets(
            conn,
            id,
            None,
            |s| matches!(s, Status::Dead | Status::Discarded),
            |all| match all.iter().all(|(_, s)| *s == Status::Delivered) {
                true => all.iter().map(|(r, _)| r.clone()).collect(),
                false => Vec::new(),
            },
        )?,
    };
    let routes = match chosen {
        Ok(routes) => routes,
        Err(refused) => return Ok(refused),
    };
    for r in &routes {
        conn.prepare_cached(
            "UPDATE deliveries SET status = 'pending', next_attempt_at = ?3,
                 budget_start = ?4, budget_attempts = attempts,
                 lease_owner = NULL, lease_until = NULL, updated_at = ?4
             WHERE entry_id = ?1 AND route = ?2",
        )?
        .execute(params![id, r, at, now])?;
        // Back in its line: its head if it is the first, behind otherwise.
        settle_delivery(conn, id, r)?;
    }
    audit(conn, id, now, "replay", by, None, route)?;
    refresh_entry(conn, id, now)?;
    Ok(Transition::Done)
}

/// Discard deliveries of an entry, audited with the note (`Store::discard`): the
/// named one if pending or dead, or every pending or dead one. The routes discarded
/// come with `Done`.
pub(super) fn discard(
    conn: &Connection,
    id: &str,
    route: Option<&str>,
    by: &Actor,
    note: &str,
    now: i64,
) -> Result<(Transition, Vec<String>), StoreError> {
    let routes = match targets(
        conn,
        id,
        route,
        |s| matches!(s, Status::Pending | Status::Dead),
        |_| Vec::new(),
    )? {
        Ok(routes) => routes,
        Err(refused) => return Ok((refused, Vec::new())),
    };
    for r in &routes {
        // The lease stays: a worker delivering it right now records its attempt.
        conn.prepare_cached(
            "UPDATE deliveries SET status = 'discarded', next_attempt_at = NULL, updated_at = ?3
             WHERE entry_id = ?1 AND route = ?2",
        )?
        .execute(params![id, r, now])?;
        // Out of its line: the next one becomes the head once the lease, if any,
        // ends (see `claimable!`).
        settle_delivery(conn, id, r)?;
    }
    audit(conn, id, now, "discard", by, Some(note), route)?;
    refresh_entry(conn, id, now)?;
    Ok((Transition::Done, routes))
}

/// Release every lease (a previous run's); how many there were.
pub(super) fn release_leases(conn: &Connection) -> Result<usize, StoreError> {
    Ok(conn.execute(
        "UPDATE deliveries SET lease_owner = NULL, lease_until = NULL
         WHERE lease_owner IS NOT NULL",
        [],
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::sqlite::schema;

    /// What SQLite plans for `sql` (a claim query), one line per step.
    fn plan(conn: &Connection, sql: &str) -> Vec<String> {
        let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
        let args: Vec<rusqlite::types::Value> = vec![
            String::from("s").into(),
            String::from("r").into(),
            0i64.into(),
            1i64.into(),
        ];
        let n = stmt.parameter_count();
        stmt.query_map(rusqlite::params_from_iter(args.into_iter().take(n)), |r| {
            r.get::<_, String>(3)
        })
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
    }

    /// Claims and probes walk an index in due order from the route's first due
    /// delivery (no sort, no scan of the table): a claim only the deliveries that
    /// are not behind a line's head, a probe only deliveries attempted before.
    #[test]
    fn claims_read_the_route_index_in_due_order() {
        let dir = tempfile::tempdir().unwrap();
        let mut conn = schema::open_connection(&dir.path().join(schema::DB_FILE)).unwrap();
        schema::migrate(&mut conn).unwrap();
        let due = plan(&conn, DUE);
        assert!(
            due[0].contains(
                "USING INDEX deliveries_due (source=? AND route=? AND next_attempt_at<?)"
            ),
            "{due:?}"
        );
        let retried = plan(&conn, RETRIED);
        assert!(
            retried[0].contains(
                "USING INDEX deliveries_retried (source=? AND route=? AND next_attempt_at<?)"
            ),
            "{retried:?}"
        );
        for p in [&due, &retried] {
            assert!(!p.iter().any(|l| l.contains("TEMP B-TREE")), "{p:?}");
        }
    }

    /// A new entry of source `s` through route `r`, stored at `at`; ordered by `key`
    /// (`block`ing its line when dead) when there is one.
    fn accept(conn: &Connection, id: &str, key: Option<&str>, at: i64) {
        let e = crate::store::NewEntry {
            id: id.to_string(),
            source: "s".into(),
            event_id: Some(id.to_string()),
            event_type: None,
            dedupe_key: id.to_string(),
            dedupe_ttl: std::time::Duration::from_secs(3600),
            received_at: at,
            headers: Vec::new(),
            body: bytes::Bytes::from_static(b"{}"),
            routes: vec!["r".into()],
            ordering: key
                .map(|k| crate::store::RouteOrder {
                    route: "r".into(),
                    key: k.to_string(),
                    block: true,
                })
                .into_iter()
                .collect(),
        };
        super::super::queries::apply_accept(conn, &e, "[]", at).unwrap();
    }

    /// What one claim reads, with `waiting` deliveries behind the dead (blocking)
    /// head of key `blocked` and as many behind the retrying head of key `retrying`
    /// (due in an hour), beside one due unordered delivery: the claim hands out
    /// that one alone. Answers the virtual machine steps of the claim's query and
    /// the rows it read by walking a table or index from one end (full-scan steps).
    fn claim_reads(waiting: usize) -> (i32, i32) {
        let dir = tempfile::tempdir().unwrap();
        let mut conn = schema::open_connection(&dir.path().join(schema::DB_FILE)).unwrap();
        schema::migrate(&mut conn).unwrap();
        let tx = conn.transaction().unwrap();
        accept(&tx, "b0000000", Some("blocked"), 1_000);
        accept(&tx, "r0000000", Some("retrying"), 1_000);
        let heads = claim(&tx, "s", "r", 2_000, 60_000, 10).unwrap();
        assert_eq!(heads.len(), 2);
        for head in heads {
            let completion = match head.entry.id.as_str() {
                "b0000000" => Completion::Dead {
                    attempt: None,
                    reason: "gone".into(),
                },
                _ => Completion::Release { at: 3_600_000 },
            };
            let done = complete(
                &tx,
                "s",
                &head.entry.id,
                "r",
                &head.token,
                &completion,
                2_000,
            );
            assert!(done.unwrap());
        }
        for n in 1..=waiting {
            accept(&tx, &format!("b{n:07}"), Some("blocked"), 3_000);
            accept(&tx, &format!("r{n:07}"), Some("retrying"), 3_000);
        }
        accept(&tx, "u0000000", None, 3_000);
        tx.commit().unwrap();
        let stmt = conn.prepare_cached(DUE).unwrap();
        stmt.reset_status(rusqlite::StatementStatus::VmStep);
        stmt.reset_status(rusqlite::StatementStatus::FullscanStep);
        drop(stmt);
        let claimed = claim(&conn, "s", "r", 4_000, 70_000, 10).unwrap();
        let ids: Vec<&str> = claimed.iter().map(|c| c.entry.id.as_str()).collect();
        assert_eq!(ids, ["u0000000"]);
        let stmt = conn.prepare_cached(DUE).unwrap();
        (
            stmt.get_status(rusqlite::StatementStatus::VmStep),
            stmt.get_status(rusqlite::StatementStatus::FullscanStep),
        )
    }

    /// A claim reads no delivery that waits behind a line's head: with 20,000
    /// behind a blocked head and 20,000 behind a retrying one, it does the work it
    /// does with one behind each (before, it read every one of them and looked for
    /// an earlier delivery of its key, on the writer thread).
    #[test]
    fn a_claim_reads_no_delivery_waiting_behind_a_head() {
        let (short_steps, short_scans) = claim_reads(1);
        let (long_steps, long_scans) = claim_reads(20_000);
        assert_eq!((short_scans, long_scans), (0, 0));
        assert!(short_steps < 200, "{short_steps} steps");
        assert_eq!(
            long_steps, short_steps,
            "the line's length costs the claim nothing"
        );
    }

    /// A retention pass reads the entries past their cutoff through `entries_done`
    /// (status and `updated_at`), never every delivered entry's row: on the writer
    /// thread, that walk stalled ingest at each maintenance pass.
    #[test]
    fn retention_reads_only_the_entries_past_their_cutoff() {
        let dir = tempfile::tempdir().unwrap();
        let mut conn = schema::open_connection(&dir.path().join(schema::DB_FILE)).unwrap();
        schema::migrate(&mut conn).unwrap();
        let purge = plan(&conn, super::super::retention::PURGE_CANDIDATES);
        let searches: Vec<&String> = purge.iter().filter(|l| l.contains("entries")).collect();
        assert_eq!(searches.len(), 2, "{purge:?}");
        for s in searches {
            assert!(
                s.contains("USING INDEX entries_done (status=? AND updated_at<?)"),
                "{purge:?}"
            );
        }
    }
}
