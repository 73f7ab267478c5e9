//! The PostgreSQL store's deliveries: claims (`FOR UPDATE SKIP LOCKED`, so
//! gateways claiming one route at once never wait for each other nor take one
//! delivery twice), completions, replays and discards, with the same rules as the
//! embedded store (`store::sqlite::delivery`, whose comments say why each is so).
//!
//! Every function runs in the transaction (or on the connection) it is given.
//! Transactions that change a line take its lock first (`lines`), then the
//! delivery rows, then the entry's row: one order, so that they seldom wait on each
//! other in a circle; when they do, PostgreSQL rolls one back and the caller runs it
//! again (`connect::retryable`).

use deadpool_postgres::GenericClient;

use super::cached::Cached as _;

use super::lines::{self, head_left, settle_line};
use super::rows::{delivery_status, load_entries};
use crate::store::activity::{Counted, minute_of};
use crate::store::{
    Actor, Claim, Completion, Finished, SKIP_ACTION, SKIP_ACTOR, SKIP_NOTE, Status, StoreError,
    Transition, attempt_error,
};

/// The conditions of a claim of a delivery `d` through route `$2` of source `$1` at
/// `$3` (see `store::sqlite::delivery`'s `claimable!`).
macro_rules! claimable {
    () => {
        "d.source = $1 AND d.route = $2 AND d.status = 'pending' AND NOT d.behind
           AND d.next_attempt_at <= $3
           AND (d.lease_until IS NULL OR d.lease_until <= $3)
           AND NOT EXISTS (SELECT 1 FROM paused_sources WHERE name = $1)
           AND NOT EXISTS (SELECT 1 FROM paused_routes WHERE source = $1 AND route = $2)
           AND (d.order_key IS NULL OR NOT EXISTS (
               SELECT 1 FROM deliveries o
               WHERE o.source = $1 AND o.route = $2 AND o.order_key = d.order_key
                 AND o.holds AND o.lease_until > $3))"
    };
}

/// Lease up to `$4` claimable deliveries, due first, until `$5`, each under a token
/// of its own, for gateway `$6`; locked rows (another gateway's claim in flight) are
/// skipped.
///
/// The leased rows are found again by their key (`entry_id = ANY (ARRAY(…))`), not
/// by a join to the chosen ones: a connection keeps the generic plan it made when
/// the table was empty, and a join planned then walked the whole primary key once
/// per chosen row (1.2 s a claim with 100,000 deliveries, until autovacuum's first
/// `ANALYZE` made it plan again). A key lookup has no other plan.
pub const CLAIM: &str = concat!(
    "WITH c AS (SELECT d.entry_id FROM deliveries d WHERE ",
    claimable!(),
    " ORDER BY d.next_attempt_at LIMIT $4 FOR UPDATE SKIP LOCKED)
     UPDATE deliveries t SET lease_owner = gen_random_uuid()::text, lease_until = $5,
         lease_holder = $6
     WHERE t.entry_id = ANY (ARRAY(SELECT entry_id FROM c)) AND t.route = $2
     RETURNING t.entry_id, t.lease_owner"
);

/// The same for the one due delivery attempted before with the earliest next
/// attempt (a half-open breaker's probe: `Store::claim_probe`).
const CLAIM_RETRIED: &str = concat!(
    "WITH c AS (SELECT d.entry_id FROM deliveries d WHERE ",
    claimable!(),
    " AND d.attempts > 0 ORDER BY d.next_attempt_at LIMIT 1 FOR UPDATE SKIP LOCKED)
     UPDATE deliveries t SET lease_owner = gen_random_uuid()::text, lease_until = $4,
         lease_holder = $5
     WHERE t.entry_id = ANY (ARRAY(SELECT entry_id FROM c)) AND t.route = $2
     RETURNING t.entry_id, t.lease_owner"
);

/// Lease up to `limit` due, pending deliveries through `route` of `source` until
/// `until` for gateway `holder` (`Store::claim`). One statement; the entries are
/// read after it.
pub(super) async fn claim(
    c: &impl GenericClient,
    (source, route, holder): (&str, &str, &str),
    now: i64,
    until: i64,
    limit: i64,
) -> Result<Vec<Claim>, StoreError> {
    let leased: Vec<(String, String)> = c
        .query_cached(CLAIM, &[&source, &route, &now, &limit, &until, &holder])
        .await?
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    claims(c, route, leased).await
}

/// Lease the delivery a half-open breaker's probe sends (`Store::claim_probe`).
pub(super) async fn claim_probe(
    c: &impl GenericClient,
    (source, route, holder): (&str, &str, &str),
    now: i64,
    until: i64,
) -> Result<Option<Claim>, StoreError> {
    let leased: Vec<(String, String)> = c
        .query_cached(CLAIM_RETRIED, &[&source, &route, &now, &until, &holder])
        .await?
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    if !leased.is_empty() {
        return Ok(claims(c, route, leased).await?.pop());
    }
    Ok(claim(c, (source, route, holder), now, until, 1)
        .await?
        .pop())
}

/// The claims of the leased deliveries (entry id, token), due first.
async fn claims(
    c: &impl GenericClient,
    route: &str,
    leased: Vec<(String, String)>,
) -> Result<Vec<Claim>, StoreError> {
    let ids: Vec<String> = leased.iter().map(|(id, _)| id.clone()).collect();
    let mut entries = load_entries(c, &ids).await?;
    let mut out = Vec::with_capacity(leased.len());
    for (id, token) in leased {
        let Some(entry) = entries.remove(&id) else {
            continue;
        };
        let Some(delivery) = entry.delivery(route).cloned() else {
            continue;
        };
        out.push(Claim {
            entry,
            delivery,
            token,
            stream_message: None,
        });
    }
    out.sort_by(|a, b| {
        (a.delivery.next_attempt_at, &a.entry.id).cmp(&(b.delivery.next_attempt_at, &b.entry.id))
    });
    Ok(out)
}

impl Finished {
    /// Whether completing it with `completion` needs more than its one statement:
    /// an entry with other deliveries (its status is derived from them all), or an
    /// ordered delivery that leaves its line.
    pub(super) fn needs_transaction(&self, completion: &Completion) -> bool {
        !self.sole
            || (self.order.is_some()
                && matches!(
                    completion,
                    Completion::Delivered { .. }
                        | Completion::Dead { .. }
                        | Completion::Filtered { .. }
                ))
    }
}

/// The entry's status as its deliveries give it ([`Status::of_entry`]), in SQL, for
/// entry `$1`.
const DERIVED_STATUS: &str = "SELECT CASE
         WHEN bool_or(status = 'pending') THEN 'pending'
         WHEN bool_or(status = 'dead') THEN 'dead'
         WHEN bool_or(status = 'discarded') THEN 'discarded'
         WHEN bool_or(status = 'delivered') THEN 'delivered'
         ELSE 'filtered' END
     FROM deliveries WHERE entry_id = $1";

/// Keep the entry's status in step with its deliveries, and `updated_at` when it
/// changes. The entry's row is locked first: two routes' completions of one entry
/// in two transactions would each read the other's delivery as it was before, and
/// both leave the entry pending; locked, the second reads once the first committed.
async fn refresh_entry(c: &impl GenericClient, id: &str, now: i64) -> Result<(), StoreError> {
    c.execute_cached("SELECT 1 FROM entries WHERE id = $1 FOR UPDATE", &[&id])
        .await?;
    c.execute_cached(
        &format!(
            "UPDATE entries SET status = s.st, updated_at = $2
             FROM ({DERIVED_STATUS}) AS s(st)
             WHERE id = $1 AND status <> s.st"
        ),
        &[&id, &now],
    )
    .await?;
    Ok(())
}

/// Record what happened to a claimed delivery (`Store::complete`), in one
/// statement: the delivery (if still pending under this claim's lease), or the
/// attempt of one discarded meanwhile, the attempt, the entry's status when the
/// delivery is its only one, and the counter. The rest (another delivery's entry,
/// an ordered line) is the caller's, in the same transaction, when
/// [`Finished::needs_transaction`]. The counter moves here unless `counted_here` is
/// false (a batch of completions counts them once: `finish`). (applied, recorded).
pub(super) async fn complete_row(
    c: &impl GenericClient,
    f: &Finished,
    completion: &Completion,
    now: i64,
    counted_here: bool,
) -> Result<(bool, bool), StoreError> {
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
    // Counted by this statement, or by the caller once for a whole batch.
    let (delivered, failed): (i64, i64) = match (counted_here, Counted::of(completion)) {
        (true, Some(Counted::Delivered)) => (1, 0),
        (true, Some(Counted::Failed)) => (0, 1),
        _ => (0, 0),
    };
    let tried = i32::from(attempt.is_some());
    let n = attempt.map(|a| i32::try_from(a.n).unwrap_or(i32::MAX));
    let at = attempt.map(|a| a.at);
    let code = attempt.and_then(|a| a.status_code.map(i32::from));
    let error = attempt.and_then(|a| a.error.clone());
    let failure = attempt.and_then(|a| a.failure).map(|f| f.name());
    let latency = attempt.map(|a| i64::try_from(a.latency_ms).unwrap_or(i64::MAX));
    let answer = attempt.and_then(|a| a.answer.clone());
    let row = c
        .query_one_cached(
            "WITH upd AS (
                 UPDATE deliveries SET status = $1, next_attempt_at = $2,
                     last_error = coalesce($3, last_error), attempts = attempts + $4,
                     lease_owner = NULL, lease_until = NULL, updated_at = $5,
                     behind = behind AND $1 = 'pending',
                     last_failure = coalesce($19, last_failure)
                 WHERE entry_id = $6 AND route = $7 AND lease_owner = $8 AND status = 'pending'
                 RETURNING 1),
             disc AS (
                 UPDATE deliveries SET attempts = attempts + $4, lease_owner = NULL,
                     lease_until = NULL, updated_at = $5
                 WHERE entry_id = $6 AND route = $7 AND lease_owner = $8
                   AND status = 'discarded'
                 RETURNING 1),
             att AS (
                 INSERT INTO attempts (entry_id, route, n, at, status_code, error, latency_ms,
                                       failure, answer)
                 SELECT $6, $7, $9, $10, $11, $12, $13, $19, $20
                 WHERE $9::int4 IS NOT NULL
                   AND (EXISTS (SELECT 1 FROM upd) OR EXISTS (SELECT 1 FROM disc))
                 ON CONFLICT DO NOTHING),
             ent AS (
                 UPDATE entries SET status = $1, updated_at = $5
                 WHERE id = $6 AND $14 AND status <> $1 AND EXISTS (SELECT 1 FROM upd)),
             cnt AS (
                 INSERT INTO counts (source, minute, delivered, failed)
                 SELECT $15, $16, $17, $18
                 WHERE $17::int8 + $18::int8 > 0 AND EXISTS (SELECT 1 FROM upd))
             SELECT EXISTS (SELECT 1 FROM upd), EXISTS (SELECT 1 FROM disc)",
            &[
                &status.as_str(),
                &next,
                &last_error,
                &tried,
                &now,
                &f.id,
                &f.route,
                &f.token,
                &n,
                &at,
                &code,
                &error,
                &latency,
                &f.sole,
                &f.source,
                &minute_of(now),
                &delivered,
                &failed,
                &failure,
                &answer,
            ],
        )
        .await?;
    Ok((row.get(0), row.get(1)))
}

/// Record what happened to a claimed delivery (`Store::complete`); `true` when
/// applied. Runs in a transaction when [`Finished::needs_transaction`] (the caller
/// took the line's lock first when the delivery is ordered).
pub(super) async fn complete(
    c: &impl GenericClient,
    f: &Finished,
    completion: &Completion,
    now: i64,
) -> Result<bool, StoreError> {
    let (applied, recorded) = complete_row(c, f, completion, now, true).await?;
    if (applied || recorded) && !f.sole {
        refresh_entry(c, &f.id, now).await?;
    }
    if applied
        && matches!(
            completion,
            Completion::Delivered { .. } | Completion::Dead { .. } | Completion::Filtered { .. }
        )
        && let Some(order) = &f.order
    {
        head_left(c, &f.source, &f.route, &order.key).await?;
        if !order.block && matches!(completion, Completion::Dead { .. }) {
            audit(
                c,
                &f.id,
                now,
                SKIP_ACTION,
                &Actor::from(SKIP_ACTOR),
                Some(SKIP_NOTE),
                Some(&f.route),
            )
            .await?;
        }
    }
    Ok(applied)
}

pub(super) async fn audit(
    c: &impl GenericClient,
    id: &str,
    now: i64,
    action: &str,
    by: &Actor,
    note: Option<&str>,
    route: Option<&str>,
) -> Result<(), StoreError> {
    c.execute_cached(
        "INSERT INTO audit (entry_id, at, action, actor, note, route, session, client)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        &[
            &id,
            &now,
            &action,
            &by.name,
            &note,
            &route,
            &by.session,
            &by.client,
        ],
    )
    .await?;
    Ok(())
}

/// An entry's deliveries as an operator's action sees them: (route, status, order
/// key), in route order, their rows locked; `None` when there is no such entry.
/// The lines of its ordered deliveries are locked first (order keys never change,
/// so reading them before the locks is safe).
async fn lock_entry(
    c: &impl GenericClient,
    schema: &str,
    id: &str,
) -> Result<Option<(Status, Vec<(String, Status, Option<String>)>)>, StoreError> {
    let keys: Vec<(String, String, String)> = c
        .query_cached(
            "SELECT source, route, order_key FROM deliveries
             WHERE entry_id = $1 AND order_key IS NOT NULL",
            &[&id],
        )
        .await?
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    lines::lock(
        c,
        keys.iter()
            .map(|(s, r, k)| lines::line_lock(schema, s, r, k))
            .collect(),
    )
    .await?;
    let deliveries = c
        .query_cached(
            "SELECT route, status, order_key FROM deliveries WHERE entry_id = $1
             ORDER BY route FOR UPDATE",
            &[&id],
        )
        .await?;
    let Some(entry) = c
        .query_opt_cached("SELECT status FROM entries WHERE id = $1", &[&id])
        .await?
    else {
        return Ok(None);
    };
    let entry = super::rows::parse_status(id, entry.get(0))?;
    let mut out = Vec::with_capacity(deliveries.len());
    for r in &deliveries {
        out.push((r.get(0), delivery_status(id, r.get(1))?, r.get(2)));
    }
    // Route order as the entry lists them (position) matters for no decision here.
    Ok(Some((entry, out)))
}

/// The deliveries an operator's action applies to (see
/// `store::sqlite::delivery::targets`).
fn targets(
    entry: Status,
    deliveries: &[(String, Status, Option<String>)],
    route: Option<&str>,
    qualifies: impl Fn(Status) -> bool,
    fallback: impl Fn(&[(String, Status, Option<String>)]) -> Vec<String>,
) -> Result<Vec<String>, Transition> {
    if let Some(route) = route {
        return match deliveries.iter().find(|(r, ..)| r == route) {
            None => Err(Transition::NoSuchRoute),
            Some((r, s, _)) if qualifies(*s) => Ok(vec![r.clone()]),
            Some((_, s, _)) => Err(Transition::Conflict(*s)),
        };
    }
    let mut chosen: Vec<String> = deliveries
        .iter()
        .filter(|(_, s, _)| qualifies(*s))
        .map(|(r, ..)| r.clone())
        .collect();
    if chosen.is_empty() {
        chosen = fallback(deliveries);
    }
    match chosen.is_empty() {
        true => Err(Transition::Conflict(entry)),
        false => Ok(chosen),
    }
}

/// Queue deliveries of an entry again at `at` (`Store::replay`), in the caller's
/// transaction.
pub(super) async fn replay(
    c: &impl GenericClient,
    schema: &str,
    id: &str,
    route: Option<&str>,
    at: i64,
    by: &Actor,
    now: i64,
) -> Result<Transition, StoreError> {
    let Some((entry, deliveries)) = lock_entry(c, schema, id).await? else {
        return Ok(Transition::NotFound);
    };
    let chosen = match route {
        Some(_) => targets(
            entry,
            &deliveries,
            route,
            |s| s != Status::Pending,
            |_| Vec::new(),
        ),
        None => targets(
            entry,
            &deliveries,
            None,
            |s| matches!(s, Status::Dead | Status::Discarded),
            |all| match all.iter().all(|(_, s, _)| *s == Status::Delivered) {
                true => all.iter().map(|(r, ..)| r.clone()).collect(),
                false => Vec::new(),
            },
        ),
    };
    let routes = match chosen {
        Ok(routes) => routes,
        Err(refused) => return Ok(refused),
    };
    for r in &routes {
        c.execute_cached(
            "UPDATE deliveries SET status = 'pending', next_attempt_at = $3,
                 budget_start = $4, budget_attempts = attempts,
                 lease_owner = NULL, lease_until = NULL, updated_at = $4
             WHERE entry_id = $1 AND route = $2",
            &[&id, r, &at, &now],
        )
        .await?;
        settle(c, &deliveries, id, r).await?;
    }
    audit(c, id, now, "replay", by, None, route).await?;
    refresh_entry(c, id, now).await?;
    Ok(Transition::Done)
}

/// Discard deliveries of an entry (`Store::discard`), in the caller's transaction;
/// the routes discarded come with `Done`.
pub(super) async fn discard(
    c: &impl GenericClient,
    schema: &str,
    id: &str,
    route: Option<&str>,
    by: &Actor,
    note: &str,
    now: i64,
) -> Result<(Transition, Vec<String>), StoreError> {
    let Some((entry, deliveries)) = lock_entry(c, schema, id).await? else {
        return Ok((Transition::NotFound, Vec::new()));
    };
    let routes = match targets(
        entry,
        &deliveries,
        route,
        |s| matches!(s, Status::Pending | Status::Dead),
        |_| Vec::new(),
    ) {
        Ok(routes) => routes,
        Err(refused) => return Ok((refused, Vec::new())),
    };
    for r in &routes {
        // The lease stays: a worker delivering it right now records its attempt.
        c.execute_cached(
            "UPDATE deliveries SET status = 'discarded', next_attempt_at = NULL,
                 updated_at = $3, behind = false
             WHERE entry_id = $1 AND route = $2",
            &[&id, r, &now],
        )
        .await?;
        settle(c, &deliveries, id, r).await?;
    }
    audit(c, id, now, "discard", by, Some(note), route).await?;
    refresh_entry(c, id, now).await?;
    Ok((Transition::Done, routes))
}

/// Settle the line of the delivery through `route` of entry `id`, when ordered.
async fn settle(
    c: &impl GenericClient,
    deliveries: &[(String, Status, Option<String>)],
    id: &str,
    route: &str,
) -> Result<(), StoreError> {
    if let Some((_, _, Some(key))) = deliveries.iter().find(|(r, ..)| r == route)
        && let Some((source, _)) = lines::ordering_of(c, id, route).await?
    {
        settle_line(c, &source, route, key, id).await?;
    }
    Ok(())
}
