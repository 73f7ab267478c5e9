//! The PostgreSQL store's ordered lines, as the embedded store keeps them
//! (`store::sqlite::lines`): the deliveries of one ordering key of a route wait in
//! one line in entry id order, each pending one but the first marked `behind`, so
//! that claims (`deliveries_due`) see heads only.
//!
//! Several gateways change lines at once here, so every transaction that changes a
//! line first takes the line's advisory lock ([`lock`]): changes of one line are
//! serialized, and each reads the line as the one before it left it (every
//! statement of a `READ COMMITTED` transaction sees what committed before it
//! began). A transaction takes all its line locks first, in one order, so that two
//! never wait on each other.

use deadpool_postgres::GenericClient;

use super::cached::Cached as _;
use sha2::{Digest, Sha256};

use crate::store::StoreError;

/// Whether a delivery is a member of its key's line (SQL): pending (due or not), or
/// dead with `block`. Spelled as `deliveries_line`'s condition is (see `schema`), so
/// that the planner takes that partial index.
macro_rules! in_line {
    () => {
        "(status = 'pending' OR (status = 'dead' AND order_block))"
    };
}
pub(super) use in_line;

/// The id of an advisory lock named by `parts`: the first 8 bytes of their SHA-256.
/// Two names that collide only serialize what they guard.
pub(crate) fn lock_id(parts: &[&str]) -> i64 {
    let mut h = Sha256::new();
    for p in parts {
        h.update(p.as_bytes());
        h.update([0]);
    }
    let digest = h.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    i64::from_be_bytes(first)
}

/// The lock of the line of `key` through `route` of `source`, in `schema`.
pub(super) fn line_lock(schema: &str, source: &str, route: &str, key: &str) -> i64 {
    lock_id(&["hookgate-line", schema, source, route, key])
}

/// Take the advisory locks `ids` for the rest of the transaction, in ascending
/// order (every transaction takes its locks in that order: none waits for another
/// that waits for it).
pub(super) async fn lock(c: &impl GenericClient, mut ids: Vec<i64>) -> Result<(), StoreError> {
    if ids.is_empty() {
        return Ok(());
    }
    ids.sort_unstable();
    ids.dedup();
    c.execute_cached(
        "SELECT pg_advisory_xact_lock(k) FROM unnest($1::int8[]) AS t(k)",
        &[&ids],
    )
    .await?;
    Ok(())
}

/// The ids of the deliveries waiting in the line of `key` through `route` of
/// `source`, head first (`Store::order_line`).
pub(super) async fn order_line(
    c: &impl GenericClient,
    source: &str,
    route: &str,
    key: &str,
) -> Result<Vec<String>, StoreError> {
    Ok(c.query_cached(
        concat!(
            "SELECT entry_id FROM deliveries
             WHERE source = $1 AND route = $2 AND order_key = $3 AND order_key IS NOT NULL AND ",
            in_line!(),
            " ORDER BY entry_id"
        ),
        &[&source, &route, &key],
    )
    .await?
    .iter()
    .map(|r| r.get(0))
    .collect())
}

/// Keep `behind` in step after one change to the line of `key` through `route` of
/// `source` (the caller holds the line's lock): the delivery of entry `changed`
/// entered it, left it or changed within it. As on the embedded store, one change
/// moves at most the first place, so the first two members and the changed one are
/// all that may need setting: one statement, whatever the line's length.
pub(super) async fn settle_line(
    c: &impl GenericClient,
    source: &str,
    route: &str,
    key: &str,
    changed: &str,
) -> Result<(), StoreError> {
    c.execute_cached(
        concat!(
            "WITH front AS (
                 SELECT entry_id, row_number() OVER (ORDER BY entry_id) AS place
                 FROM (SELECT entry_id FROM deliveries
                       WHERE source = $1 AND route = $2 AND order_key = $3
                         AND order_key IS NOT NULL AND ",
            in_line!(),
            "      ORDER BY entry_id LIMIT 2) f
             ),
             wanted AS (
                 SELECT entry_id, place > 1 AS behind FROM front
                 UNION ALL
                 SELECT $4::text, true WHERE $4::text NOT IN (SELECT entry_id FROM front)
             )
             UPDATE deliveries d SET behind = w.behind
             FROM wanted w
             WHERE d.entry_id = w.entry_id AND d.route = $2 AND d.status = 'pending'
               AND d.behind <> w.behind"
        ),
        &[&source, &route, &key, &changed],
    )
    .await?;
    Ok(())
}

/// After a completion that ended a claimed delivery of the line of `key` (delivered,
/// or dead): the line's first member, if pending, is its head (see
/// `store::sqlite::lines::head_left`).
pub(super) async fn head_left(
    c: &impl GenericClient,
    source: &str,
    route: &str,
    key: &str,
) -> Result<(), StoreError> {
    c.execute_cached(
        concat!(
            "UPDATE deliveries SET behind = false
             WHERE route = $2 AND status = 'pending' AND behind AND entry_id = (
                 SELECT entry_id FROM deliveries
                 WHERE source = $1 AND route = $2 AND order_key = $3
                   AND order_key IS NOT NULL AND ",
            in_line!(),
            " ORDER BY entry_id LIMIT 1)"
        ),
        &[&source, &route, &key],
    )
    .await?;
    Ok(())
}

/// The ordering of the delivery through `route` of entry `id`, if ordered:
/// (source, key).
pub(super) async fn ordering_of(
    c: &impl GenericClient,
    id: &str,
    route: &str,
) -> Result<Option<(String, String)>, StoreError> {
    Ok(c.query_opt_cached(
        "SELECT source, order_key FROM deliveries
         WHERE entry_id = $1 AND route = $2 AND order_key IS NOT NULL",
        &[&id, &route],
    )
    .await?
    .map(|r| (r.get(0), r.get(1))))
}

/// The ordering keys of `route` of `source` held by a dead head with `block`: of
/// the keys with a dead member, those whose line's first member is dead (see
/// `store::sqlite::lines::blocked_keys`).
pub(super) async fn blocked_keys(
    c: &impl GenericClient,
    source: &str,
    route: &str,
) -> Result<u64, StoreError> {
    let n: i64 = c
        .query_one_cached(
            concat!(
                "SELECT count(*) FROM (
                     SELECT DISTINCT order_key FROM deliveries
                     WHERE source = $1 AND route = $2 AND order_key IS NOT NULL AND ",
                in_line!(),
                " AND status = 'dead') AS k
                 WHERE (SELECT status FROM deliveries
                        WHERE source = $1 AND route = $2 AND order_key = k.order_key
                          AND order_key IS NOT NULL AND ",
                in_line!(),
                " ORDER BY entry_id LIMIT 1) = 'dead'"
            ),
            &[&source, &route],
        )
        .await?
        .get(0);
    Ok(u64::try_from(n).unwrap_or(0))
}
