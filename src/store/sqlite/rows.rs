//! How the embedded store's rows become entries and deliveries, and the per-minute
//! activity counter: what both `queries` (entries as a whole) and `delivery` (each
//! route's delivery) read and bump. A leaf of this folder, so that those two never
//! import each other.
//!
//! Like `queries`, every function takes the connection it runs on and none commits.

use bytes::Bytes;
use rusqlite::{Connection, params};

use crate::store::{Delivery, DeliveryOrder, Entry, Origin, Status, StoreError, decode_headers};

/// What an entry is read with: its headers and body from its payload, or from its
/// own row if it was stored before payloads (`schema::PAYLOADS`).
pub(super) const ENTRY_COLUMNS: &str = "e.id, e.source, e.event_id, e.event_type, e.dedupe_key, \
     e.received_at, e.status, coalesce(p.headers, e.headers), coalesce(p.body, e.body), e.origin";

/// What a delivery row holds, in route order: the columns [`row_to_delivery`] reads.
const DELIVERY_COLUMNS: &str = "route, status, attempts, next_attempt_at, last_error, \
     budget_start, budget_attempts, order_key, order_block, last_failure";

/// An entry's origin, as its `origin` column names it.
pub(super) fn parse_origin(id: &str, origin: &str) -> Result<Origin, StoreError> {
    Origin::parse(origin).ok_or_else(|| StoreError::Corrupt {
        id: id.to_string(),
        problem: format!("unknown origin {origin:?}"),
    })
}

/// A delivery's status (`filtered` when its route's transform skipped it).
pub(super) fn parse_status(id: &str, status: &str) -> Result<Status, StoreError> {
    Status::parse(status).ok_or_else(|| StoreError::Corrupt {
        id: id.to_string(),
        problem: format!("a delivery with status {status:?}"),
    })
}

fn row_to_delivery(id: &str, r: &rusqlite::Row<'_>) -> Result<Delivery, StoreError> {
    let status: String = r.get(1)?;
    Ok(Delivery {
        route: r.get(0)?,
        status: parse_status(id, &status)?,
        attempts: u32::try_from(r.get::<_, i64>(2)?).unwrap_or(u32::MAX),
        next_attempt_at: r.get(3)?,
        last_error: r.get(4)?,
        last_failure: crate::failure::stored(r.get::<_, Option<String>>(9)?.as_deref()),
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

fn row_to_entry(r: &rusqlite::Row<'_>) -> Result<Entry, StoreError> {
    let id: String = r.get(0)?;
    let status: String = r.get(6)?;
    let headers: String = r.get(7)?;
    let body: Vec<u8> = r.get(8)?;
    let origin: String = r.get(9)?;
    Ok(Entry {
        origin: parse_origin(&id, &origin)?,
        source: r.get(1)?,
        event_id: r.get(2)?,
        event_type: r.get(3)?,
        dedupe_key: r.get(4)?,
        received_at: r.get(5)?,
        status: Status::parse(&status).ok_or_else(|| StoreError::Corrupt {
            id: id.clone(),
            problem: format!("unknown status {status:?}"),
        })?,
        // Filled in by `load_entry`, from the deliveries.
        attempts: 0,
        next_attempt_at: None,
        last_error: None,
        deliveries: Vec::new(),
        headers: decode_headers(&id, &headers)?,
        body: Bytes::from(body),
        id,
    })
}

/// One entry by id (`Store::get`).
pub(super) fn load_entry(conn: &Connection, id: &str) -> Result<Option<Entry>, StoreError> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {ENTRY_COLUMNS} FROM entries e LEFT JOIN payloads p ON p.n = e.payload
         WHERE e.id = ?1"
    ))?;
    let mut rows = stmt.query(params![id])?;
    let Some(row) = rows.next()? else {
        return Ok(None);
    };
    let mut entry = row_to_entry(row)?;
    entry.deliveries = load_deliveries(conn, id)?;
    let (_, attempts, next, last_error) = Entry::summary(&entry.deliveries);
    entry.attempts = attempts;
    entry.next_attempt_at = next;
    entry.last_error = last_error;
    Ok(Some(entry))
}

/// Add one to `column` (`received`, `delivered` or `failed`) of `source`'s
/// activity in `minute`.
pub(super) fn bump_activity(
    conn: &Connection,
    source: &str,
    minute: i64,
    column: &'static str,
) -> Result<(), StoreError> {
    conn.prepare_cached(&format!(
        "INSERT INTO activity (source, minute, {column}) VALUES (?1, ?2, 1)
         ON CONFLICT(source, minute) DO UPDATE SET {column} = {column} + 1"
    ))?
    .execute(params![source, minute])?;
    Ok(())
}
