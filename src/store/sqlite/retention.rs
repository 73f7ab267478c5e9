//! The embedded store's retention: which entries a pass removes (by their derived
//! status and since when they have it) and what goes with them (attempts, audit,
//! deliveries, payload, their places in ordered lines), the activity counters past
//! their time and the expired dedupe keys (`Store::purge`).
//!
//! Like `queries`, every function takes the connection it runs on and none commits.

use rusqlite::{Connection, params};

use super::lines;
use crate::store::activity::minute_of;
use crate::store::{ACTIVITY_RETENTION, Purged, StoreError};

/// The entries one retention pass deletes (see [`purge`]): `?1` the delivered cutoff,
/// `?2` the dead one, `?3` the most of each.
pub(super) const PURGE_CANDIDATES: &str =
    "SELECT id FROM (SELECT id FROM entries INDEXED BY entries_done
         WHERE status != 'pending' AND status IN ('delivered', 'filtered')
           AND updated_at < ?1 LIMIT ?3)
     UNION ALL
     SELECT id FROM (SELECT id FROM entries INDEXED BY entries_done
         WHERE status != 'pending' AND status IN ('dead', 'discarded')
           AND updated_at < ?2 LIMIT ?3)";

/// One retention pass (`Store::purge`), by each entry's derived status and since
/// when it has it (`updated_at`): delivered and filtered entries with the delivered
/// cutoff, dead and discarded ones with the dead cutoff; a pending entry (one with a
/// pending delivery) never.
///
/// The candidates come from `entries_done` (status, `updated_at`), named so that a
/// pass reads only the entries past their cutoff. Its condition (`status !=
/// 'pending'`) is repeated in the query because SQLite uses a partial index only for
/// a query whose terms imply it, and `status IN (…)` does not, to SQLite: the plan
/// then walked every delivered entry's row (bodies included) on the writer thread at
/// each pass, a stall of a fifth of a second at 200,000 delivered entries
/// (BENCHMARKS.md, the delivering gateway).
pub(super) fn purge(
    conn: &Connection,
    now: i64,
    delivered_before: i64,
    dead_before: i64,
    limit: i64,
) -> Result<Purged, StoreError> {
    let ids: Vec<String> = conn
        .prepare_cached(PURGE_CANDIDATES)?
        .query_map(params![delivered_before, dead_before, limit], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    for id in &ids {
        // A dead head with `block` holds its line until it goes: the next becomes
        // the head.
        let places = lines::held_places(conn, id)?;
        conn.prepare_cached("DELETE FROM attempts WHERE entry_id = ?1")?
            .execute(params![id])?;
        conn.prepare_cached("DELETE FROM audit WHERE entry_id = ?1")?
            .execute(params![id])?;
        conn.prepare_cached("DELETE FROM deliveries WHERE entry_id = ?1")?
            .execute(params![id])?;
        conn.prepare_cached(
            "DELETE FROM payloads WHERE n = (SELECT payload FROM entries WHERE id = ?1)",
        )?
        .execute(params![id])?;
        conn.prepare_cached("DELETE FROM entry_index WHERE entry_id = ?1")?
            .execute(params![id])?;
        conn.prepare_cached("DELETE FROM entries WHERE id = ?1")?
            .execute(params![id])?;
        for (source, route, key) in places {
            lines::settle_line(conn, &source, &route, &key, id)?;
        }
    }
    let keep_from =
        minute_of(now) - i64::try_from(ACTIVITY_RETENTION.as_millis()).unwrap_or(i64::MAX / 2);
    conn.prepare_cached("DELETE FROM activity WHERE minute < ?1")?
        .execute(params![keep_from])?;
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
