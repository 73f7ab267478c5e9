//! The PostgreSQL store's part of payload search (`store::search`): the indexed
//! values of each entry in `entry_index` (migration 3), written in the accept's
//! transaction, keyed by (source, index, value, entry id) so a lookup is a range of
//! the primary key read backwards; whole entries read by the page in one round trip.

use deadpool_postgres::GenericClient;

use super::accept::Waiting;
use super::cached::Cached as _;
use super::rows;
use crate::store::{Entry, IndexLookup, StoreError};

/// Above every entry id (ids are lower-case hex and dashes, compared bytewise).
const ABOVE_EVERY_ID: &str = "~";

/// Keep the indexed values of the new entries of a batch (in its transaction).
pub(super) async fn index_entries(
    tx: &impl GenericClient,
    new: &[&Waiting],
) -> Result<(), StoreError> {
    let (mut sources, mut names, mut values, mut ids) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for w in new {
        for v in &w.entry.index {
            sources.push(w.entry.source.as_str());
            names.push(v.name.as_str());
            values.push(v.value.as_str());
            ids.push(w.entry.id.as_str());
        }
    }
    if ids.is_empty() {
        return Ok(());
    }
    tx.execute_cached(
        "INSERT INTO entry_index (source, name, value, entry_id)
         SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[])
         ON CONFLICT DO NOTHING",
        &[&sources, &names, &values, &ids],
    )
    .await?;
    Ok(())
}

/// The ids `lookup` asks for (see `Search::indexed`): each value's range, newest
/// first, merged.
pub(super) async fn indexed(
    c: &impl GenericClient,
    lookup: &IndexLookup,
) -> Result<Vec<String>, StoreError> {
    let below = lookup.below.as_deref().unwrap_or(ABOVE_EVERY_ID);
    let floor = lookup.floor.as_deref().unwrap_or("");
    let limit = i64::try_from(lookup.limit).unwrap_or(i64::MAX);
    // One range per value (a lateral join), so each is read from the key's order
    // and stops at the limit.
    let rows = c
        .query_cached(
            "SELECT x.entry_id FROM unnest($3::text[]) AS v(value),
             LATERAL (SELECT entry_id FROM entry_index
                      WHERE source = $1 AND name = $2 AND value = v.value
                        AND entry_id < $4 AND entry_id >= $5
                      ORDER BY entry_id DESC LIMIT $6) AS x
             ORDER BY x.entry_id DESC LIMIT $6",
            &[
                &lookup.source,
                &lookup.name,
                &lookup.values,
                &below,
                &floor,
                &limit,
            ],
        )
        .await?;
    let mut ids: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
    ids.dedup();
    Ok(ids)
}

/// The size of each entry `keys` names, 0 for one not there (see `Search::sizes`):
/// `octet_length` of a stored value reads its recorded size, not the value.
pub(super) async fn sizes(
    c: &impl GenericClient,
    keys: &[(String, String)],
) -> Result<Vec<u64>, StoreError> {
    let ids: Vec<&str> = keys.iter().map(|(_, id)| id.as_str()).collect();
    let rows = c
        .query_cached(
            "SELECT id, source, octet_length(headers)::int8 + coalesce(octet_length(body), 0)::int8
             FROM unnest($1::text[]) AS k(want)
             JOIN entries ON entries.id = k.want COLLATE \"C\"",
            &[&ids],
        )
        .await?;
    let found: std::collections::HashMap<(String, String), i64> = rows
        .iter()
        .map(|r| ((r.get::<_, String>(1), r.get::<_, String>(0)), r.get(2)))
        .collect();
    Ok(keys
        .iter()
        .map(|k| found.get(k).map_or(0, |&n| u64::try_from(n).unwrap_or(0)))
        .collect())
}

/// The entries `keys` name, whole, in the order asked (see `Search::get_many`).
pub(super) async fn get_many(
    c: &impl GenericClient,
    keys: &[(String, String)],
) -> Result<Vec<Entry>, StoreError> {
    let ids: Vec<String> = keys.iter().map(|(_, id)| id.clone()).collect();
    let mut found = rows::load_entries(c, &ids).await?;
    Ok(keys
        .iter()
        .filter_map(|(source, id)| found.remove(id).filter(|e| e.source == *source))
        .collect())
}
