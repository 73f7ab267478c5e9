//! The embedded store's part of payload search (`store::search`): the indexed
//! values of each entry in `entry_index` (created at open, `schema::TABLES`), keyed
//! by (source, index, value, entry id), so a lookup is a range of that key read
//! backwards; and whole entries read by the page on one connection.

use rusqlite::{Connection, params};

use super::rows;
use crate::store::{Entry, IndexLookup, NewEntry, StoreError};

/// Above every entry id (ids are lower-case hex and dashes): the bound of a lookup
/// with no cursor.
const ABOVE_EVERY_ID: &str = "~";

/// Keep the indexed values of `e` (in the transaction that stores it).
pub(super) fn index_entry(conn: &Connection, e: &NewEntry) -> Result<(), StoreError> {
    if e.index.is_empty() {
        return Ok(());
    }
    let mut insert = conn.prepare_cached(
        "INSERT OR IGNORE INTO entry_index (source, name, value, entry_id) VALUES (?1, ?2, ?3, ?4)",
    )?;
    for v in &e.index {
        insert.execute(params![e.source, v.name, v.value, e.id])?;
    }
    Ok(())
}

/// The ids `lookup` asks for (see `Search::indexed`): each value's range, newest
/// first, merged.
pub(super) fn indexed(conn: &Connection, lookup: &IndexLookup) -> Result<Vec<String>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT entry_id FROM entry_index
         WHERE source = ?1 AND name = ?2 AND value = ?3 AND entry_id < ?4 AND entry_id >= ?5
         ORDER BY entry_id DESC LIMIT ?6",
    )?;
    let below = lookup.below.as_deref().unwrap_or(ABOVE_EVERY_ID);
    let floor = lookup.floor.as_deref().unwrap_or("");
    let limit = i64::try_from(lookup.limit).unwrap_or(i64::MAX);
    let mut ids = Vec::new();
    for value in &lookup.values {
        let rows = stmt.query_map(
            params![lookup.source, lookup.name, value, below, floor, limit],
            |r| r.get::<_, String>(0),
        )?;
        for id in rows {
            ids.push(id?);
        }
    }
    ids.sort_unstable_by(|a, b| b.cmp(a));
    ids.dedup();
    ids.truncate(lookup.limit);
    Ok(ids)
}

/// The size of each entry `keys` names, 0 for one not there (see `Search::sizes`).
/// `length` of a column itself reads the size a row records, not the blob.
pub(super) fn sizes(conn: &Connection, keys: &[(String, String)]) -> Result<Vec<u64>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT CASE WHEN p.n IS NULL THEN length(e.headers) + length(e.body)
                     ELSE length(p.headers) + length(p.body) END
         FROM entries e LEFT JOIN payloads p ON p.n = e.payload
         WHERE e.id = ?1 AND e.source = ?2",
    )?;
    let mut out = Vec::with_capacity(keys.len());
    for (source, id) in keys {
        let mut rows = stmt.query(params![id, source])?;
        let size = match rows.next()? {
            Some(row) => row.get::<_, Option<i64>>(0)?.unwrap_or(0),
            None => 0,
        };
        out.push(u64::try_from(size).unwrap_or(0));
    }
    Ok(out)
}

/// The entries `keys` name, whole, in the order asked (see `Search::get_many`).
pub(super) fn get_many(
    conn: &Connection,
    keys: &[(String, String)],
) -> Result<Vec<Entry>, StoreError> {
    let mut out = Vec::with_capacity(keys.len());
    for (source, id) in keys {
        if let Some(e) = rows::load_entry(conn, id)?
            && e.source == *source
        {
            out.push(e);
        }
    }
    Ok(out)
}
