//! How the PostgreSQL store's rows become entries and deliveries: what claims and
//! reads both load. A leaf of this folder.

use std::collections::HashMap;

use bytes::Bytes;
use deadpool_postgres::GenericClient;

use super::cached::Cached as _;
use tokio_postgres::Row;

use crate::store::{Delivery, DeliveryOrder, Entry, Origin, Status, StoreError, decode_headers};

/// The columns [`row_to_entry`] reads.
const ENTRY_COLUMNS: &str =
    "id, source, event_id, event_type, dedupe_key, received_at, status, headers, body, origin";

/// The columns [`row_to_delivery`] reads, after the entry id.
const DELIVERY_COLUMNS: &str = "entry_id, route, status, attempts, next_attempt_at, last_error, \
     budget_start, budget_attempts, order_key, order_block, last_failure";

pub(super) fn parse_status(id: &str, status: &str) -> Result<Status, StoreError> {
    Status::parse(status).ok_or_else(|| StoreError::Corrupt {
        id: id.to_string(),
        problem: format!("unknown status {status:?}"),
    })
}

/// An entry's origin, as its `origin` column names it.
pub(super) fn parse_origin(id: &str, origin: &str) -> Result<Origin, StoreError> {
    Origin::parse(origin).ok_or_else(|| StoreError::Corrupt {
        id: id.to_string(),
        problem: format!("unknown origin {origin:?}"),
    })
}

/// A delivery's status (`filtered` when its route's transform skipped it).
pub(super) fn delivery_status(id: &str, status: &str) -> Result<Status, StoreError> {
    parse_status(id, status)
}

fn row_to_delivery(r: &Row) -> Result<(String, Delivery), StoreError> {
    let id: String = r.get(0);
    let status: String = r.get(2);
    let delivery = Delivery {
        route: r.get(1),
        status: delivery_status(&id, &status)?,
        attempts: u32::try_from(r.get::<_, i32>(3)).unwrap_or(0),
        next_attempt_at: r.get(4),
        last_error: r.get(5),
        last_failure: crate::failure::stored(r.get::<_, Option<String>>(10).as_deref()),
        budget_start: r.get(6),
        budget_attempts: u32::try_from(r.get::<_, i32>(7)).unwrap_or(0),
        order: r.get::<_, Option<String>>(8).map(|key| DeliveryOrder {
            key,
            block: r.get(9),
        }),
    };
    Ok((id, delivery))
}

fn row_to_entry(r: &Row) -> Result<Entry, StoreError> {
    let id: String = r.get(0);
    let status: String = r.get(6);
    let headers: String = r.get(7);
    let body: Vec<u8> = r.get(8);
    let origin: String = r.get(9);
    Ok(Entry {
        origin: parse_origin(&id, &origin)?,
        source: r.get(1),
        event_id: r.get(2),
        event_type: r.get(3),
        dedupe_key: r.get(4),
        received_at: r.get(5),
        status: parse_status(&id, &status)?,
        attempts: 0,
        next_attempt_at: None,
        last_error: None,
        deliveries: Vec::new(),
        headers: decode_headers(&id, &headers)?,
        body: Bytes::from(body),
        id,
    })
}

/// The entries `ids` with their deliveries (in route order) and summaries, by id;
/// an id with no entry is left out. Two statements, pipelined.
pub(super) async fn load_entries(
    c: &impl GenericClient,
    ids: &[String],
) -> Result<HashMap<String, Entry>, StoreError> {
    if ids.is_empty() {
        return Ok(HashMap::new());
    }
    let mut ids = ids.to_vec();
    ids.sort_unstable();
    ids.dedup();
    // Joined to the ids as a set, not `= ANY($1)`: a prepared statement's generic plan
    // guesses an array matches thousands of rows and takes a parallel scan, whose
    // workers cost milliseconds to start; a set of ids is read by its primary key.
    let entries_sql = format!(
        "SELECT {ENTRY_COLUMNS} FROM unnest($1::text[]) AS k(want)
         JOIN entries ON entries.id = k.want COLLATE \"C\""
    );
    let deliveries_sql = format!(
        "SELECT {DELIVERY_COLUMNS} FROM unnest($1::text[]) AS k(want)
         JOIN deliveries ON deliveries.entry_id = k.want COLLATE \"C\"
         ORDER BY entry_id, position"
    );
    let (entries, deliveries) = futures_util::future::try_join(
        c.query_cached(&entries_sql, &[&ids]),
        c.query_cached(&deliveries_sql, &[&ids]),
    )
    .await?;
    let mut out = HashMap::with_capacity(entries.len());
    for r in &entries {
        let e = row_to_entry(r)?;
        out.insert(e.id.clone(), e);
    }
    for r in &deliveries {
        let (id, d) = row_to_delivery(r)?;
        if let Some(e) = out.get_mut(&id) {
            e.deliveries.push(d);
        }
    }
    for e in out.values_mut() {
        let (_, attempts, next, last_error) = Entry::summary(&e.deliveries);
        e.attempts = attempts;
        e.next_attempt_at = next;
        e.last_error = last_error;
    }
    Ok(out)
}

/// One entry by id.
pub(super) async fn load_entry(
    c: &impl GenericClient,
    id: &str,
) -> Result<Option<Entry>, StoreError> {
    Ok(load_entries(c, &[id.to_string()]).await?.remove(id))
}
