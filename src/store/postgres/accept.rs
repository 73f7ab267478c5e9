//! Accepts, group-committed: every accept waiting when a committer is free goes
//! into one transaction (up to `store.batch_max`), with a statement per table for
//! the whole batch, so a commit (an fsync, and a synchronous standby's
//! confirmation) is paid per batch, not per webhook. Several committers run at
//! once, each on a connection of the durable pool.
//!
//! Dedupe is the primary key of `dedupe`: `INSERT … ON CONFLICT` takes the key's row
//! lock, so two gateways accepting one webhook at once store it once (the second
//! waits for the first's commit, then sees its key). A key seen twice in one batch
//! is decided once, for the first. An ordered delivery joins its line under the
//! line's lock (`lines`).

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use deadpool_postgres::GenericClient;

use super::cached::Cached as _;
use tokio::sync::{mpsc, oneshot};

use super::PgShared;
use super::lines::{self, in_line};
use crate::store::activity::minute_of;
use crate::store::{Accepted, NewEntry, Status, StoreError, Wake};

/// An accept waiting for its batch.
pub(super) struct Waiting {
    pub(super) entry: NewEntry,
    /// The headers, encoded on the caller's task.
    pub(super) headers: String,
    pub(super) reply: oneshot::Sender<Result<Accepted, StoreError>>,
}

/// Start `committers` tasks taking batches from `rx`.
pub(super) fn start(
    shared: Arc<PgShared>,
    rx: mpsc::Receiver<Waiting>,
    committers: usize,
    batch_max: usize,
) {
    super::committers::start(shared, rx, committers, batch_max, commit);
}

/// Commit one batch and answer each of its accepts.
async fn commit(shared: Arc<PgShared>, batch: Vec<Waiting>) {
    // An accept whose caller gave up (ingest's timeout) is left out.
    let batch: Vec<Waiting> = batch.into_iter().filter(|w| !w.reply.is_closed()).collect();
    if batch.is_empty() {
        return;
    }
    let mut outcome = Err(StoreError::Unavailable("no attempt"));
    for _ in 0..super::committers::RETRIES {
        let now = shared.clock.now_ms();
        outcome = super::connect::with(&shared.durable, shared.timeout, async |conn| {
            let c = &*conn;
            // `BEGIN` goes out with the batch's first statement, not a round trip
            // ahead of it: statements on one connection run in the order sent.
            let begin = async { Ok::<_, StoreError>(c.batch_execute("BEGIN").await?) };
            let batch = apply(c, &shared.schema, &shared.channel, &batch, now);
            match futures_util::future::try_join(begin, batch).await {
                Ok(((), answers)) => {
                    c.batch_execute("COMMIT").await?;
                    Ok(answers)
                }
                Err(e) => {
                    let _ = c.batch_execute("ROLLBACK").await;
                    Err(e)
                }
            }
        })
        .await;
        match &outcome {
            Err(e) if super::connect::retryable(e) => continue,
            _ => break,
        }
    }
    match outcome {
        Ok(answers) => {
            for (w, answer) in batch.iter().zip(&answers) {
                if let (Accepted::New(_), false) = (answer, w.entry.routes.is_empty()) {
                    shared.work.wake(&Wake::Routes {
                        source: w.entry.source.clone(),
                        routes: w.entry.routes.clone(),
                    });
                }
            }
            for (w, answer) in batch.into_iter().zip(answers) {
                let _ = w.reply.send(Ok(answer));
            }
        }
        Err(e) => {
            for w in batch {
                let _ = w.reply.send(Err(super::fan_out(&e)));
            }
        }
    }
}

/// The statements of one batch, in its transaction; the answers in batch order.
async fn apply(
    tx: &impl GenericClient,
    schema: &str,
    channel: &str,
    batch: &[Waiting],
    now: i64,
) -> Result<Vec<Accepted>, StoreError> {
    // Line locks first, in one order (see `lines`).
    let locks = batch
        .iter()
        .flat_map(|w| {
            w.entry
                .ordering
                .iter()
                .filter(|o| w.entry.routes.contains(&o.route))
                .map(|o| lines::line_lock(schema, &w.entry.source, &o.route, &o.key))
        })
        .collect::<Vec<_>>();
    lines::lock(tx, locks).await?;

    // The first accept of each key in the batch decides it; the others follow it.
    let mut first_of: HashMap<(&str, &str), usize> = HashMap::new();
    let mut firsts: Vec<usize> = Vec::new();
    for (i, w) in batch.iter().enumerate() {
        let key = (w.entry.source.as_str(), w.entry.dedupe_key.as_str());
        if let std::collections::hash_map::Entry::Vacant(v) = first_of.entry(key) {
            v.insert(i);
            firsts.push(i);
        }
    }
    // In key order: two batches lock the rows of the keys they share in one order.
    firsts.sort_by_key(|&i| (&batch[i].entry.source, &batch[i].entry.dedupe_key));
    let sources: Vec<&str> = firsts
        .iter()
        .map(|&i| batch[i].entry.source.as_str())
        .collect();
    let keys: Vec<&str> = firsts
        .iter()
        .map(|&i| batch[i].entry.dedupe_key.as_str())
        .collect();
    let ids: Vec<&str> = firsts.iter().map(|&i| batch[i].entry.id.as_str()).collect();
    let expiries: Vec<i64> = firsts
        .iter()
        .map(|&i| {
            let ttl = i64::try_from(batch[i].entry.dedupe_ttl.as_millis()).unwrap_or(i64::MAX / 2);
            now.saturating_add(ttl)
        })
        .collect();
    // A key whose row expired is taken over; a live one is a duplicate.
    let won: BTreeSet<(String, String)> = tx
        .query_cached(
            "INSERT INTO dedupe (source, dkey, entry_id, expires_at)
             SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::int8[])
             ON CONFLICT (source, dkey) DO UPDATE
                 SET entry_id = excluded.entry_id, expires_at = excluded.expires_at
                 WHERE dedupe.expires_at <= $5
             RETURNING source, dkey",
            &[&sources, &keys, &ids, &expiries, &now],
        )
        .await?
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    // Which accepts store a new entry: the first of each key that won it.
    let is_new: Vec<bool> = batch
        .iter()
        .enumerate()
        .map(|(i, w)| {
            let e = &w.entry;
            first_of[&(e.source.as_str(), e.dedupe_key.as_str())] == i
                && won.contains(&(e.source.clone(), e.dedupe_key.clone()))
        })
        .collect();
    let new: Vec<&Waiting> = batch
        .iter()
        .zip(&is_new)
        .filter(|(_, n)| **n)
        .map(|(w, _)| w)
        .collect();
    let lost: Vec<usize> = firsts
        .iter()
        .copied()
        .filter(|&i| {
            let e = &batch[i].entry;
            !won.contains(&(e.source.clone(), e.dedupe_key.clone()))
        })
        .collect();
    // Nothing below depends on another's result: the statements go out together,
    // and the batch waits for one round trip, not five.
    let (originals, (), (), (), ()) = futures_util::future::try_join5(
        originals(tx, batch, &lost),
        insert_entries(tx, &new, now),
        insert_deliveries(tx, &new, now),
        count(tx, batch, &is_new, now),
        notify(tx, channel, &new),
    )
    .await?;

    // The answers: a winner is new; every other accept is a duplicate of its key's
    // stored entry (or of the winner of its batch).
    let mut answers = Vec::with_capacity(batch.len());
    for (w, new) in batch.iter().zip(&is_new) {
        let e = &w.entry;
        let key = (e.source.clone(), e.dedupe_key.clone());
        let first = &batch[first_of[&(e.source.as_str(), e.dedupe_key.as_str())]].entry;
        answers.push(match (new, won.contains(&key)) {
            (true, _) => Accepted::New(e.id.clone()),
            (false, true) => Accepted::Duplicate(first.id.clone()),
            (false, false) => match originals.get(&key) {
                Some(id) => Accepted::Duplicate(id.clone()),
                // The insert's row lock keeps the key until the commit: it cannot
                // vanish in between, but say so rather than guess.
                None => return Err(StoreError::Unavailable("a dedupe key vanished")),
            },
        });
    }
    Ok(answers)
}

/// The entries that hold the keys of the accepts `lost` (a live key: a duplicate).
async fn originals(
    tx: &impl GenericClient,
    batch: &[Waiting],
    lost: &[usize],
) -> Result<HashMap<(String, String), String>, StoreError> {
    let mut originals = HashMap::new();
    if lost.is_empty() {
        return Ok(originals);
    }
    let s: Vec<&str> = lost
        .iter()
        .map(|&i| batch[i].entry.source.as_str())
        .collect();
    let k: Vec<&str> = lost
        .iter()
        .map(|&i| batch[i].entry.dedupe_key.as_str())
        .collect();
    for r in tx
        .query_cached(
            "SELECT d.source, d.dkey, d.entry_id FROM dedupe d
             JOIN unnest($1::text[], $2::text[]) AS k(source, dkey)
               ON d.source = k.source AND d.dkey = k.dkey",
            &[&s, &k],
        )
        .await?
    {
        originals.insert((r.get(0), r.get(1)), r.get(2));
    }
    Ok(originals)
}

async fn insert_entries(
    tx: &impl GenericClient,
    new: &[&Waiting],
    now: i64,
) -> Result<(), StoreError> {
    if new.is_empty() {
        return Ok(());
    }
    let ids: Vec<&str> = new.iter().map(|w| w.entry.id.as_str()).collect();
    let sources: Vec<&str> = new.iter().map(|w| w.entry.source.as_str()).collect();
    let event_ids: Vec<Option<&str>> = new.iter().map(|w| w.entry.event_id.as_deref()).collect();
    let types: Vec<Option<&str>> = new.iter().map(|w| w.entry.event_type.as_deref()).collect();
    let keys: Vec<&str> = new.iter().map(|w| w.entry.dedupe_key.as_str()).collect();
    let received: Vec<i64> = new.iter().map(|w| w.entry.received_at).collect();
    let statuses: Vec<&str> = new
        .iter()
        .map(|w| match w.entry.routes.is_empty() {
            true => Status::Filtered.as_str(),
            false => Status::Pending.as_str(),
        })
        .collect();
    let headers: Vec<&str> = new.iter().map(|w| w.headers.as_str()).collect();
    let bodies: Vec<&[u8]> = new.iter().map(|w| w.entry.body.as_ref()).collect();
    let origins: Vec<&str> = new.iter().map(|w| w.entry.origin.as_str()).collect();
    let params: [&(dyn tokio_postgres::types::ToSql + Sync); 11] = [
        &ids, &sources, &event_ids, &types, &keys, &received, &statuses, &headers, &now, &bodies,
        &origins,
    ];
    let entries = tx.execute_cached(
        "INSERT INTO entries (id, source, event_id, event_type, dedupe_key, received_at,
                              status, updated_at, headers, body, origin)
         SELECT i, s, ev, t, k, r, st, $9, h, b, o
         FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::int8[],
                     $7::text[], $8::text[], $10::bytea[], $11::text[])
             AS x(i, s, ev, t, k, r, st, h, b, o)",
        &params,
    );
    futures_util::future::try_join(entries, super::search::index_entries(tx, new)).await?;
    Ok(())
}

/// A pending delivery per route, due at once; the ordered ones join their lines,
/// in entry id order, each behind the line's first member if it has one before it
/// (and each later pending member behind it otherwise: an entry stored after a
/// later one of its key goes in front of it).
async fn insert_deliveries(
    tx: &impl GenericClient,
    new: &[&Waiting],
    now: i64,
) -> Result<(), StoreError> {
    let (mut ids, mut routes, mut positions, mut sources, mut due) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut ordered = Vec::new();
    for w in new {
        let e = &w.entry;
        for (position, route) in e.routes.iter().enumerate() {
            let position = i32::try_from(position).unwrap_or(i32::MAX);
            match e.ordering.iter().find(|o| &o.route == route) {
                Some(o) => ordered.push((e, route, position, o)),
                None => {
                    ids.push(e.id.as_str());
                    routes.push(route.as_str());
                    positions.push(position);
                    sources.push(e.source.as_str());
                    due.push(e.received_at);
                }
            }
        }
    }
    if !ids.is_empty() {
        tx.execute_cached(
            // A route named twice is one delivery (routes come without repeats).
            "INSERT INTO deliveries (entry_id, route, position, source, status, attempts,
                                     next_attempt_at, budget_start, budget_attempts, updated_at)
             SELECT i, r, p, s, 'pending', 0, d, d, 0, $6
             FROM unnest($1::text[], $2::text[], $3::int4[], $4::text[], $5::int8[])
                 AS x(i, r, p, s, d)
             ON CONFLICT DO NOTHING",
            &[&ids, &routes, &positions, &sources, &due, &now],
        )
        .await?;
    }
    ordered.sort_by(|a, b| a.0.id.cmp(&b.0.id));
    for (e, route, position, o) in ordered {
        tx.execute_cached(
            concat!(
                "WITH ins AS (
                     INSERT INTO deliveries (entry_id, route, position, source, status, attempts,
                                             next_attempt_at, budget_start, budget_attempts,
                                             updated_at, order_key, order_block, behind)
                     SELECT $1, $2, $3, $4, 'pending', 0, $5, $5, 0, $6, $7, $8,
                            EXISTS (SELECT 1 FROM deliveries
                                    WHERE source = $4 AND route = $2 AND order_key = $7
                                      AND order_key IS NOT NULL AND entry_id < $1 AND ",
                in_line!(),
                ")
                     ON CONFLICT DO NOTHING
                     RETURNING behind
                 )
                 UPDATE deliveries SET behind = true
                 WHERE source = $4 AND route = $2 AND order_key = $7 AND order_key IS NOT NULL
                   AND entry_id > $1 AND status = 'pending' AND NOT behind
                   AND EXISTS (SELECT 1 FROM ins WHERE NOT ins.behind)"
            ),
            &[
                &e.id,
                route,
                &position,
                &e.source,
                &e.received_at,
                &now,
                &o.key,
                &o.block,
            ],
        )
        .await?;
    }
    Ok(())
}

/// The batch's counters: entries received (in the minute each was received) and
/// duplicates, one row per source and minute.
async fn count(
    tx: &impl GenericClient,
    batch: &[Waiting],
    is_new: &[bool],
    now: i64,
) -> Result<(), StoreError> {
    let mut counts: HashMap<(&str, i64), (i64, i64)> = HashMap::new();
    for (w, new) in batch.iter().zip(is_new) {
        match new {
            true => {
                counts
                    .entry((&w.entry.source, minute_of(w.entry.received_at)))
                    .or_default()
                    .0 += 1
            }
            _ => {
                counts
                    .entry((&w.entry.source, minute_of(now)))
                    .or_default()
                    .1 += 1
            }
        }
    }
    let (mut sources, mut minutes, mut received, mut duplicates) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for ((s, m), (r, d)) in counts {
        sources.push(s);
        minutes.push(m);
        received.push(r);
        duplicates.push(d);
    }
    tx.execute_cached(
        "INSERT INTO counts (source, minute, received, duplicates)
         SELECT * FROM unnest($1::text[], $2::int8[], $3::int8[], $4::int8[])",
        &[&sources, &minutes, &received, &duplicates],
    )
    .await?;
    Ok(())
}

/// Tell every gateway on the database (at the commit) which routes have new work.
async fn notify(
    tx: &impl GenericClient,
    channel: &str,
    new: &[&Waiting],
) -> Result<(), StoreError> {
    let routes: BTreeSet<String> = new
        .iter()
        .flat_map(|w| {
            w.entry
                .routes
                .iter()
                .map(|r| super::notify::payload(&w.entry.source, r))
        })
        .collect();
    if routes.is_empty() {
        return Ok(());
    }
    let routes: Vec<String> = routes.into_iter().collect();
    tx.execute_cached(
        "SELECT pg_notify($1, r) FROM unnest($2::text[]) AS t(r)",
        &[&channel, &routes],
    )
    .await?;
    Ok(())
}
