//! The embedded store's rejected requests (`store::rejection`): a row per sampled
//! refusal, each group (source and reason) trimmed to its newest
//! [`REJECTIONS_KEEP`] rows in the transaction that adds to it, and a count per
//! group and hour. Both tables are created at open (`schema::TABLES`); neither is
//! large (the groups are few and bounded), so a listing's filters scan them.

use rusqlite::{Connection, params};

use crate::store::rejection::{
    REJECTIONS_KEEP, Rejection, RejectionBatch, RejectionCount, RejectionPage, RejectionQuery,
    hour_of, sum_counts,
};
use crate::store::{StoreError, rejection};

pub(super) fn record(conn: &Connection, batch: &RejectionBatch) -> Result<(), StoreError> {
    let mut insert = conn.prepare_cached(
        "INSERT OR IGNORE INTO rejections
             (id, at, grp, source, known, reason, status, client, size, digest, headers, body)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
    )?;
    let mut groups = std::collections::BTreeSet::new();
    for r in &batch.rows {
        let (grp, _) = r.group();
        let headers = r.headers_text()?;
        insert.execute(params![
            r.id,
            r.at,
            grp,
            r.source,
            r.known,
            r.reason,
            r.status,
            r.client,
            r.size.map(|s| i64::try_from(s).unwrap_or(i64::MAX)),
            r.digest,
            headers,
            r.body
        ])?;
        groups.insert((grp.to_string(), r.reason.clone()));
    }
    // Each group keeps its newest rows.
    let mut trim = conn.prepare_cached(
        "DELETE FROM rejections WHERE grp = ?1 AND reason = ?2 AND id <= (
             SELECT id FROM rejections WHERE grp = ?1 AND reason = ?2
             ORDER BY id DESC LIMIT 1 OFFSET ?3)",
    )?;
    for (grp, reason) in &groups {
        trim.execute(params![grp, reason, REJECTIONS_KEEP as i64])?;
    }
    let mut count = conn.prepare_cached(
        "INSERT INTO rejection_counts (grp, reason, hour, count, last_at)
         VALUES (?1, ?2, ?3, ?4, ?5)
         ON CONFLICT (grp, reason, hour) DO UPDATE SET
             count = count + excluded.count, last_at = max(last_at, excluded.last_at)",
    )?;
    for c in &batch.counts {
        count.execute(params![
            c.source,
            c.reason,
            hour_of(c.last_at),
            i64::try_from(c.count).unwrap_or(i64::MAX),
            c.last_at
        ])?;
    }
    Ok(())
}

pub(super) fn list(conn: &Connection, q: &RejectionQuery) -> Result<RejectionPage, StoreError> {
    let limit = q.limit.clamp(1, rejection::REJECTIONS_PAGE_MAX);
    let mut stmt = conn.prepare_cached(
        "SELECT id, at, source, known, reason, status, client, size, digest, headers, body
         FROM rejections
         WHERE (?1 IS NULL OR source = ?1) AND (?2 IS NULL OR reason = ?2)
           AND (?3 IS NULL OR id < ?3) AND (?4 IS NULL OR at >= ?4)
         ORDER BY id DESC LIMIT ?5",
    )?;
    let rows = stmt
        .query_map(
            params![q.source, q.reason, q.before, q.since, (limit + 1) as i64],
            |r| {
                Ok((
                    Rejection {
                        id: r.get(0)?,
                        at: r.get(1)?,
                        source: r.get(2)?,
                        known: r.get(3)?,
                        reason: r.get(4)?,
                        status: r.get(5)?,
                        client: r.get(6)?,
                        size: r.get::<_, Option<i64>>(7)?.map(|s| s.max(0) as u64),
                        digest: r.get(8)?,
                        headers: Vec::new(),
                        body: r.get(10)?,
                    },
                    r.get::<_, String>(9)?,
                ))
            },
        )?
        .collect::<Result<Vec<_>, _>>()?;
    let rows = rows
        .into_iter()
        .map(|(mut r, headers)| {
            // Headers that do not parse are shown as none, as a row is only a clue.
            r.headers = serde_json::from_str(&headers).unwrap_or_default();
            r
        })
        .collect();
    Ok(RejectionPage::of(rows, limit))
}

pub(super) fn counts(conn: &Connection, since: i64) -> Result<Vec<RejectionCount>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT grp, reason, count, last_at FROM rejection_counts WHERE hour >= ?1",
    )?;
    let rows = stmt
        .query_map(params![hour_of(since)], |r| {
            Ok(RejectionCount {
                source: r.get(0)?,
                reason: r.get(1)?,
                count: r.get::<_, i64>(2)?.max(0) as u64,
                last_at: r.get(3)?,
            })
        })?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(sum_counts(rows))
}

pub(super) fn purge(conn: &Connection, before: i64) -> Result<u64, StoreError> {
    let rows = conn
        .prepare_cached("DELETE FROM rejections WHERE at < ?1")?
        .execute(params![before])?;
    conn.prepare_cached("DELETE FROM rejection_counts WHERE hour < ?1")?
        .execute(params![hour_of(before)])?;
    Ok(rows as u64)
}
