//! The embedded store's part of reconciliation (`store::Reconciling`): dedupe
//! lookups on the `dedupe` table's key, the origin of an entry with its audit event,
//! and each source's lease and state in `reconcile` (`schema::ORIGINS`).
//!
//! Like `queries`, every function takes the connection it runs on and none commits.

use rusqlite::{Connection, params};

use super::delivery;
use crate::store::reconcile::in_asked_order;
use crate::store::{Actor, Origin, RECOVERED_ACTION, RECOVERED_ACTOR, ReconcileLease, StoreError};

/// Which of `keys` of `source` the dedupe table holds at `now`, with the entry each
/// names, in the order asked (`Reconciling::dedupe_lookup`): one query, the keys a
/// bound list seeking the table's primary key. Its shape varies with the number of
/// keys, so it is compiled for each call rather than cached (reconciliation asks
/// seldom, and would evict the statements of the hot path).
pub(super) fn dedupe_lookup(
    conn: &Connection,
    source: &str,
    keys: &[String],
    now: i64,
) -> Result<Vec<Option<String>>, StoreError> {
    if keys.is_empty() {
        return Ok(Vec::new());
    }
    let list = (0..keys.len())
        .map(|i| format!("?{}", i + 3))
        .collect::<Vec<_>>()
        .join(", ");
    let mut stmt = conn.prepare(&format!(
        "SELECT dkey, entry_id FROM dedupe
         WHERE source = ?1 AND expires_at > ?2 AND dkey IN ({list})"
    ))?;
    let mut args: Vec<&dyn rusqlite::ToSql> = vec![&source, &now];
    args.extend(keys.iter().map(|k| k as &dyn rusqlite::ToSql));
    let found = stmt
        .query_map(args.as_slice(), |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<Result<Vec<(String, String)>, _>>()?;
    Ok(in_asked_order(keys, found))
}

/// Set the origin of entry `id` and add its `recovered` audit event, in the
/// writer's transaction; whether the entry is there.
pub(super) fn mark_origin(
    conn: &Connection,
    id: &str,
    origin: Origin,
    note: &str,
    now: i64,
) -> Result<bool, StoreError> {
    let changed = conn
        .prepare_cached("UPDATE entries SET origin = ?2 WHERE id = ?1")?
        .execute(params![id, origin.as_str()])?;
    if changed == 0 {
        return Ok(false);
    }
    delivery::audit(
        conn,
        id,
        now,
        RECOVERED_ACTION,
        &Actor::from(RECOVERED_ACTOR),
        Some(note),
        None,
    )?;
    Ok(true)
}

/// Take `source`'s lease for `holder` until `until`, unless another holder's runs
/// past `now` (`Reconciling::lease_reconcile`).
pub(super) fn lease(
    conn: &Connection,
    source: &str,
    holder: &str,
    now: i64,
    until: i64,
) -> Result<ReconcileLease, StoreError> {
    let taken = conn
        .prepare_cached(
            "INSERT INTO reconcile (source, holder, until) VALUES (?1, ?2, ?4)
             ON CONFLICT(source) DO UPDATE SET holder = excluded.holder, until = excluded.until
             WHERE reconcile.holder IS NULL OR reconcile.holder = excluded.holder
                OR reconcile.until <= ?3",
        )?
        .execute(params![source, holder, now, until])?;
    let (held_by, held_until, state): (Option<String>, Option<i64>, Option<String>) = conn
        .prepare_cached("SELECT holder, until, state FROM reconcile WHERE source = ?1")?
        .query_row(params![source], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
    Ok(match (taken, held_by, held_until) {
        (0, Some(holder), Some(until)) => ReconcileLease::Held { holder, until },
        _ => ReconcileLease::Taken { state },
    })
}

/// Keep `state` as `source`'s if `holder` holds its lease at `now`; whether it was
/// kept (`Reconciling::save_reconcile`).
pub(super) fn save(
    conn: &Connection,
    source: &str,
    holder: &str,
    state: &str,
    now: i64,
) -> Result<bool, StoreError> {
    let kept = conn
        .prepare_cached(
            "UPDATE reconcile SET state = ?3 WHERE source = ?1 AND holder = ?2 AND until > ?4",
        )?
        .execute(params![source, holder, state, now])?;
    Ok(kept == 1)
}

/// End `holder`'s lease on `source`, if it holds it (`Reconciling::release_reconcile`).
pub(super) fn release(conn: &Connection, source: &str, holder: &str) -> Result<(), StoreError> {
    conn.prepare_cached(
        "UPDATE reconcile SET holder = NULL, until = NULL WHERE source = ?1 AND holder = ?2",
    )?
    .execute(params![source, holder])?;
    Ok(())
}
