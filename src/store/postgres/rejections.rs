//! The PostgreSQL store's rejected requests (`store::rejection`), shaped like the
//! embedded store's: a row per sampled refusal, each group (source and reason)
//! trimmed to its newest [`REJECTIONS_KEEP`] rows in the transaction that adds to
//! it, and a count per group and hour, added to by every gateway (an upsert).

use deadpool_postgres::GenericClient;

use super::cached::Cached as _;
use crate::store::StoreError;
use crate::store::rejection::{
    REJECTIONS_KEEP, REJECTIONS_PAGE_MAX, Rejection, RejectionBatch, RejectionCount, RejectionPage,
    RejectionQuery, hour_of, sum_counts,
};

pub(super) async fn record(
    c: &impl GenericClient,
    batch: &RejectionBatch,
) -> Result<(), StoreError> {
    let mut groups = std::collections::BTreeSet::new();
    for r in &batch.rows {
        let (grp, _) = r.group();
        let headers = r.headers_text()?;
        let size = r.size.map(|s| i64::try_from(s).unwrap_or(i64::MAX));
        let status = i32::from(r.status);
        c.execute_cached(
            "INSERT INTO rejections
                 (id, at, grp, source, known, reason, status, client, size, digest, headers, body)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
             ON CONFLICT (id) DO NOTHING",
            &[
                &r.id, &r.at, &grp, &r.source, &r.known, &r.reason, &status, &r.client, &size,
                &r.digest, &headers, &r.body,
            ],
        )
        .await?;
        groups.insert((grp.to_string(), r.reason.clone()));
    }
    let keep = REJECTIONS_KEEP as i64;
    for (grp, reason) in &groups {
        c.execute_cached(
            "DELETE FROM rejections WHERE grp = $1 AND reason = $2 AND id <= (
                 SELECT id FROM rejections WHERE grp = $1 AND reason = $2
                 ORDER BY id DESC LIMIT 1 OFFSET $3)",
            &[grp, reason, &keep],
        )
        .await?;
    }
    for n in &batch.counts {
        let count = i64::try_from(n.count).unwrap_or(i64::MAX);
        c.execute_cached(
            "INSERT INTO rejection_counts (grp, reason, hour, count, last_at)
             VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT (grp, reason, hour) DO UPDATE SET
                 count = rejection_counts.count + excluded.count,
                 last_at = greatest(rejection_counts.last_at, excluded.last_at)",
            &[
                &n.source,
                &n.reason,
                &hour_of(n.last_at),
                &count,
                &n.last_at,
            ],
        )
        .await?;
    }
    Ok(())
}

pub(super) async fn list(
    c: &impl GenericClient,
    q: &RejectionQuery,
) -> Result<RejectionPage, StoreError> {
    let limit = q.limit.clamp(1, REJECTIONS_PAGE_MAX);
    let fetch = (limit + 1) as i64;
    let rows = c
        .query_cached(
            "SELECT id, at, source, known, reason, status, client, size, digest, headers, body
             FROM rejections
             WHERE ($1::text IS NULL OR source = $1) AND ($2::text IS NULL OR reason = $2)
               AND ($3::text IS NULL OR id < $3) AND ($4::bigint IS NULL OR at >= $4)
             ORDER BY id DESC LIMIT $5",
            &[&q.source, &q.reason, &q.before, &q.since, &fetch],
        )
        .await?;
    let rows = rows
        .iter()
        .map(|r| Rejection {
            id: r.get(0),
            at: r.get(1),
            source: r.get(2),
            known: r.get(3),
            reason: r.get(4),
            status: u16::try_from(r.get::<_, i32>(5)).unwrap_or(0),
            client: r.get(6),
            size: r.get::<_, Option<i64>>(7).map(|s| s.max(0) as u64),
            digest: r.get(8),
            // Headers that do not parse are shown as none: a row is only a clue.
            headers: serde_json::from_str(r.get::<_, &str>(9)).unwrap_or_default(),
            body: r.get(10),
        })
        .collect();
    Ok(RejectionPage::of(rows, limit))
}

pub(super) async fn counts(
    c: &impl GenericClient,
    since: i64,
) -> Result<Vec<RejectionCount>, StoreError> {
    let rows = c
        .query_cached(
            "SELECT grp, reason, count, last_at FROM rejection_counts WHERE hour >= $1",
            &[&hour_of(since)],
        )
        .await?;
    Ok(sum_counts(rows.iter().map(|r| RejectionCount {
        source: r.get(0),
        reason: r.get(1),
        count: r.get::<_, i64>(2).max(0) as u64,
        last_at: r.get(3),
    })))
}

pub(super) async fn purge(c: &impl GenericClient, before: i64) -> Result<u64, StoreError> {
    let rows = c
        .execute_cached("DELETE FROM rejections WHERE at < $1", &[&before])
        .await?;
    c.execute_cached(
        "DELETE FROM rejection_counts WHERE hour < $1",
        &[&hour_of(before)],
    )
    .await?;
    Ok(rows)
}
