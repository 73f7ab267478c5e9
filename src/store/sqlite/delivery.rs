//! The embedded store's deliveries: each route's delivery of an entry is a row of
//! `deliveries` (see `schema`, migration 2), claimed, completed, replayed and
//! discarded on its own; the entry's row keeps the summary of its deliveries
//! status ([`Status::of_entry`]), kept in step in the same transaction by
//! [`refresh_entry`]; the rest of its summary ([`crate::store::Entry::summary`]) is derived when
//! read.
//!
//! Like `queries`, every function takes the connection it runs on and none commits.

use rusqlite::{Connection, OptionalExtension, params};

use super::lines::{head_left, settle_delivery};
use super::rows::{bump_activity, load_deliveries, load_entry, parse_status};
use crate::store::activity::{Counted, minute_of};
use crate::store::{
    Actor, Attempt, Claim, Completion, Finished, SKIP_ACTION, SKIP_ACTOR, SKIP_NOTE, Status,
    StoreError, Transition, attempt_error,
};

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
    set_entry_status(conn, id, status, now)
}

/// Set the entry's status, and `updated_at` when that changes it.
fn set_entry_status(
    conn: &Connection,
    id: &str,
    status: Status,
    now: i64,
) -> Result<(), StoreError> {
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
/// the attempt in flight; `deliveries_leased` holds only the leases that may hold a
/// head back: of a delivery discarded, or put behind, while its attempt was in
/// flight). (A macro, so that the queries below are constants.)
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
                 AND o.lease_until > ?3 AND (o.status != 'pending' OR o.behind = 1)))"
    };
}

/// Up to `?4` claimable deliveries, due first, through `deliveries_route`, where
/// the pending deliveries not behind a head are one range in due order, so a claim
/// never reads a line's waiting deliveries.
const DUE: &str = concat!(
    "SELECT entry_id FROM deliveries INDEXED BY deliveries_route WHERE ",
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
        "INSERT OR IGNORE INTO attempts (entry_id, route, n, at, status_code, error, latency_ms,
                                         failure, answer)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
    )?
    .execute(params![
        id,
        route,
        a.n,
        a.at,
        a.status_code,
        a.error,
        i64::try_from(a.latency_ms).unwrap_or(i64::MAX),
        a.failure.map(|f| f.name()),
        a.answer
    ])?;
    Ok(())
}

/// Record what happened to a claimed delivery (`Store::complete`); `true` when
/// applied: the delivery through `route` is pending and leased to `token`.
pub(super) fn complete(
    conn: &Connection,
    f: &Finished,
    completion: &Completion,
    now: i64,
) -> Result<bool, StoreError> {
    let (source, id, route, token) = (
        f.source.as_str(),
        f.id.as_str(),
        f.route.as_str(),
        f.token.as_str(),
    );
    let attempt = match completion {
        Completion::Delivered { attempt } | Completion::Retry { attempt, .. } => Some(attempt),
        Completion::Dead { attempt, .. } => attempt.as_ref(),
        Completion::Release { .. } | Completion::Filtered { .. } => None,
    };
    let (status, next, last_error): (Status, Option<i64>, Option<String>) = match completion {
        Completion::Delivered { .. } => (Status::Delivered, None, None),
        Completion::Retry { attempt, at } => (Status::Pending, Some(*at), attempt_error(attempt)),
        Completion::Dead { reason, .. } => (Status::Dead, None, Some(reason.clone())),
        Completion::Release { at } => (Status::Pending, Some(*at), None),
        Completion::Filtered { reason } => (Status::Filtered, None, Some(reason.clone())),
    };
    let applied =
        conn.prepare_cached(
            "UPDATE deliveries SET status = ?1, next_attempt_at = ?2,
                 last_error = coalesce(?3, last_error), attempts = attempts + ?4,
                 lease_owner = NULL, lease_until = NULL, updated_at = ?5,
                 behind = behind AND ?1 = 'pending',
                 last_failure = coalesce(?9, last_failure)
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
            token,
            attempt.and_then(|a| a.failure).map(|f| f.name())
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
        match (applied, f.sole) {
            // Its one delivery's status is the entry's (a discarded one's did not
            // change).
            (true, true) => set_entry_status(conn, id, status, now)?,
            (false, true) => {}
            (_, false) => refresh_entry(conn, id, now)?,
        }
    }
    if applied && let Some(counted) = Counted::of(completion) {
        let column = match counted {
            Counted::Delivered => "delivered",
            Counted::Failed => "failed",
        };
        bump_activity(conn, source, minute_of(now), column)?;
    }
    // A delivery that ended (delivered, or dead with `skip`) leaves its line: the
    // next one becomes the head (a dead one with `block` stays first, and the line
    // waits). A dead head of an ordered line that lets the next one go says so.
    if applied
        && matches!(
            completion,
            Completion::Delivered { .. } | Completion::Dead { .. } | Completion::Filtered { .. }
        )
        && let Some(order) = &f.order
    {
        head_left(conn, source, route, &order.key)?;
        if !order.block && matches!(completion, Completion::Dead { .. }) {
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

/// Add an event to the audit trail of entry `id`.
pub(super) fn audit(
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
            "UPDATE deliveries SET status = 'discarded', next_attempt_at = NULL, updated_at = ?3,
                 behind = 0
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
mod tests;
