//! The embedded store's ordered lines: the deliveries of one ordering key of a
//! route wait in one line, in arrival (entry id) order, and only its head may be
//! claimed (`Store::claim`). The rows of a line are the deliveries of the key that
//! are pending or dead with `block` (`deliveries_line`, see `schema::LINES`); each
//! pending one but the first is marked `behind`, which keeps it out of the range of
//! `deliveries_route` claims walk (see `schema::LEAN_LINES`). [`settle_line`] keeps
//! the marks in step at every change of a line, in the same transaction, reading the
//! line's first two members only: what a claim, an accept or a completion costs
//! does not grow with the line.
//!
//! Like `queries`, every function takes the connection it runs on and none commits.

use rusqlite::{Connection, OptionalExtension, params};

use crate::store::StoreError;

/// Whether a delivery is a member of its key's line (SQL): pending (due or not), or
/// dead with `block`. Spelled as `deliveries_line`'s condition is (see `schema`,
/// `LINES`), so that SQLite takes that partial index.
macro_rules! in_line {
    () => {
        "(status = 'pending' OR (status = 'dead' AND order_block = 1))"
    };
}

/// The line of an ordering key: the deliveries waiting in it, head first.
const LINE: &str = concat!(
    "SELECT entry_id FROM deliveries INDEXED BY deliveries_line
     WHERE source = ?1 AND route = ?2 AND order_key = ?3 AND ",
    in_line!(),
    " ORDER BY entry_id"
);

/// The first two members of a line, with whether each is pending.
const LINE_FRONT: &str = concat!(
    "SELECT entry_id, status = 'pending' FROM deliveries INDEXED BY deliveries_line
     WHERE source = ?1 AND route = ?2 AND order_key = ?3 AND ",
    in_line!(),
    " ORDER BY entry_id LIMIT 2"
);

/// The ids of the deliveries waiting in the line of `key` through `route` of
/// `source`, head first (`Store::order_line`).
pub(super) fn order_line(
    conn: &Connection,
    source: &str,
    route: &str,
    key: &str,
) -> Result<Vec<String>, StoreError> {
    Ok(conn
        .prepare_cached(LINE)?
        .query_map(params![source, route, key], |r| r.get(0))?
        .collect::<Result<_, _>>()?)
}

/// The id of the first member of the line of `key` through `route` of `source`
/// (its head, when pending), if the line has one.
pub(super) fn line_head(
    conn: &Connection,
    source: &str,
    route: &str,
    key: &str,
) -> Result<Option<String>, StoreError> {
    Ok(front(conn, source, route, key)?
        .into_iter()
        .next()
        .map(|(id, _)| id))
}

/// The first two members of a line: (entry id, pending).
fn front(
    conn: &Connection,
    source: &str,
    route: &str,
    key: &str,
) -> Result<Vec<(String, bool)>, StoreError> {
    Ok(conn
        .prepare_cached(LINE_FRONT)?
        .query_map(params![source, route, key], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<Result<_, _>>()?)
}

/// Set `behind` of the pending delivery through `route` of entry `id` (no change
/// when it is not pending, or already so).
fn set_behind(conn: &Connection, id: &str, route: &str, behind: bool) -> Result<(), StoreError> {
    conn.prepare_cached(
        "UPDATE deliveries SET behind = ?3
         WHERE entry_id = ?1 AND route = ?2 AND status = 'pending' AND behind != ?3",
    )?
    .execute(params![id, route, behind])?;
    Ok(())
}

/// Keep `behind` in step after one change to the line of `key` through `route` of
/// `source`: the delivery of entry `changed` entered it (an accept, a replay), left
/// it (delivered, dead with `skip`, discarded, purged) or changed within it. Before
/// the change, the line's first member was its head (`behind` 0 when pending) and
/// every other pending member was behind; one change moves at most the first place,
/// so the first two members and the changed one are all that may need setting: the
/// first is the head, the second (if it was the head, and one entered before it)
/// and the changed one (unless first) are behind. Two seeks and three writes at
/// most, however long the line.
pub(super) fn settle_line(
    conn: &Connection,
    source: &str,
    route: &str,
    key: &str,
    changed: &str,
) -> Result<(), StoreError> {
    let front = front(conn, source, route, key)?;
    let head = front.first().map(|(id, _)| id.as_str());
    for (place, (id, pending)) in front.iter().enumerate() {
        if *pending {
            set_behind(conn, id, route, place > 0)?;
        }
    }
    if head != Some(changed) {
        set_behind(conn, changed, route, true)?;
    }
    Ok(())
}

/// [`settle_line`] after a completion that ended a claimed delivery of the line of
/// `key` (delivered, or dead): the line's first member, if pending, is its head.
/// The delivery that ended was the head (or, claimed before a replay put an earlier
/// one in front of it, behind it); either way the others keep their marks, so one
/// statement, a seek and a write at most, does what [`settle_line`] would.
pub(super) fn head_left(
    conn: &Connection,
    source: &str,
    route: &str,
    key: &str,
) -> Result<(), StoreError> {
    conn.prepare_cached(concat!(
        "UPDATE deliveries SET behind = 0
         WHERE route = ?2 AND status = 'pending' AND behind = 1 AND entry_id = (
             SELECT entry_id FROM deliveries INDEXED BY deliveries_line
             WHERE source = ?1 AND route = ?2 AND order_key = ?3 AND ",
        in_line!(),
        " ORDER BY entry_id LIMIT 1)"
    ))?
    .execute(params![source, route, key])?;
    Ok(())
}

/// The ordering key of the delivery through `route` of entry `id`, if ordered:
/// (source, key).
fn ordering_of(
    conn: &Connection,
    id: &str,
    route: &str,
) -> Result<Option<(String, String)>, StoreError> {
    Ok(conn
        .prepare_cached(
            "SELECT source, order_key FROM deliveries
             WHERE entry_id = ?1 AND route = ?2 AND order_key IS NOT NULL",
        )?
        .query_row(params![id, route], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?)
}

/// [`settle_line`] for the delivery through `route` of entry `id`, when it is
/// ordered.
pub(super) fn settle_delivery(conn: &Connection, id: &str, route: &str) -> Result<(), StoreError> {
    if let Some((source, key)) = ordering_of(conn, id, route)? {
        settle_line(conn, &source, route, &key, id)?;
    }
    Ok(())
}

/// The ordered deliveries of entry `id` that hold a place in a line although the
/// entry may be purged (dead with `block`): (source, route, key), to settle once it
/// is gone.
pub(super) fn held_places(
    conn: &Connection,
    id: &str,
) -> Result<Vec<(String, String, String)>, StoreError> {
    Ok(conn
        .prepare_cached(
            "SELECT source, route, order_key FROM deliveries
             WHERE entry_id = ?1 AND order_key IS NOT NULL AND status = 'dead'
               AND order_block = 1",
        )?
        .query_map(params![id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
        .collect::<Result<_, _>>()?)
}

/// The ordering keys of `route` of `source` held by a dead head with `block`: of
/// the keys with a dead member (a few: each waits for an operator), those whose
/// line's first member is dead. A dead member behind a replayed one that arrived
/// before it holds nothing yet (`Store::claim`): its line is not blocked until it
/// is the head again.
pub(super) fn blocked_keys(
    conn: &Connection,
    source: &str,
    route: &str,
) -> Result<u64, StoreError> {
    let n: i64 = conn
        .prepare_cached(concat!(
            "SELECT count(*) FROM (
                 SELECT DISTINCT order_key FROM deliveries INDEXED BY deliveries_line
                 WHERE source = ?1 AND route = ?2 AND order_key IS NOT NULL AND ",
            in_line!(),
            " AND status = 'dead') AS k
             WHERE (SELECT status FROM deliveries INDEXED BY deliveries_line
                    WHERE source = ?1 AND route = ?2 AND order_key = k.order_key AND ",
            in_line!(),
            " ORDER BY entry_id LIMIT 1) = 'dead'"
        ))?
        .query_row(params![source, route], |r| r.get(0))?;
    Ok(u64::try_from(n).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::sqlite::schema;

    /// Finding a line's first members (at every accept of an ordered delivery and
    /// every change of a line) is one search of `deliveries_line` in entry id order:
    /// no sort, and no read of what the key delivered before.
    #[test]
    fn a_lines_front_is_one_index_search() {
        let dir = tempfile::tempdir().unwrap();
        let mut conn = schema::open_connection(&dir.path().join(schema::DB_FILE)).unwrap();
        schema::migrate(&mut conn).unwrap();
        let plan: Vec<String> = conn
            .prepare(&format!("EXPLAIN QUERY PLAN {LINE_FRONT}"))
            .unwrap()
            .query_map(params!["s", "r", "k"], |r| r.get::<_, String>(3))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(
            plan,
            [
                "SEARCH deliveries USING INDEX deliveries_line (source=? AND route=? AND order_key=?)"
            ]
        );
    }
}
