//! The PostgreSQL store's retention (`Store::purge`): ended entries past their
//! cutoff, in batches of at most `limit` per status group, so that a pass holds its
//! locks on a bounded number of rows for a short transaction, never the table;
//! expired dedupe keys likewise; and the counters folded (each past minute into one
//! row, minutes past the activity retention into the source's totals).

use deadpool_postgres::GenericClient;

use super::cached::Cached as _;

use super::lines;
use crate::store::activity::minute_of;
use crate::store::{ACTIVITY_RETENTION, Purged, StoreError};

/// One retention pass, in the caller's transaction.
///
/// A candidate is re-checked once its deliveries are locked (a replay may have
/// made it pending since it was picked: it stays). A dead delivery with `block`
/// holds its line until its entry goes: its line's lock is taken first, and the
/// next in line becomes the head.
pub(super) async fn purge(
    c: &impl GenericClient,
    schema: &str,
    now: i64,
    delivered_before: i64,
    dead_before: i64,
    limit: i64,
) -> Result<Purged, StoreError> {
    let candidates: Vec<String> = c
        .query_cached(
            "(SELECT id FROM entries WHERE status <> 'pending'
                AND status IN ('delivered', 'filtered') AND updated_at < $1 LIMIT $3)
             UNION ALL
             (SELECT id FROM entries WHERE status <> 'pending'
                AND status IN ('dead', 'discarded') AND updated_at < $2 LIMIT $3)",
            &[&delivered_before, &dead_before, &limit],
        )
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect();
    let mut purged = Purged::default();
    if !candidates.is_empty() {
        let held: Vec<(String, String, String)> = c
            .query_cached(
                "SELECT source, route, order_key FROM deliveries
                 WHERE entry_id = ANY($1) AND order_key IS NOT NULL AND status = 'dead'
                   AND order_block",
                &[&candidates],
            )
            .await?
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect();
        lines::lock(
            c,
            held.iter()
                .map(|(s, r, k)| lines::line_lock(schema, s, r, k))
                .collect(),
        )
        .await?;
        c.execute_cached(
            "SELECT 1 FROM deliveries WHERE entry_id = ANY($1) ORDER BY entry_id, route
             FOR UPDATE",
            &[&candidates],
        )
        .await?;
        let gone: Vec<String> = c
            .query_cached(
                "DELETE FROM entries WHERE id = ANY($1) AND (
                     (status IN ('delivered', 'filtered') AND updated_at < $2)
                  OR (status IN ('dead', 'discarded') AND updated_at < $3))
                 RETURNING id",
                &[&candidates, &delivered_before, &dead_before],
            )
            .await?
            .iter()
            .map(|r| r.get(0))
            .collect();
        for table in ["attempts", "audit", "deliveries", "entry_index"] {
            c.execute_cached(
                &format!("DELETE FROM {table} WHERE entry_id = ANY($1)"),
                &[&gone],
            )
            .await?;
        }
        for (source, route, key) in &held {
            lines::head_left(c, source, route, key).await?;
        }
        purged.entries = gone.len() as u64;
    }
    purged.dedupe_keys = c
        .execute_cached(
            "DELETE FROM dedupe WHERE (source, dkey) IN
               (SELECT source, dkey FROM dedupe WHERE expires_at <= $1 LIMIT $2
                FOR UPDATE SKIP LOCKED)",
            &[&now, &limit],
        )
        .await?;
    fold_counts(c, now).await?;
    Ok(purged)
}

/// Fold the counter rows: each past minute with several rows into one, and the
/// minutes past [`ACTIVITY_RETENTION`] into `totals`. Two gateways folding at once
/// fold each row once (a row one deleted is skipped by the other).
async fn fold_counts(c: &impl GenericClient, now: i64) -> Result<(), StoreError> {
    let this_minute = minute_of(now);
    let keep_from = this_minute - i64::try_from(ACTIVITY_RETENTION.as_millis()).unwrap_or(0);
    c.execute_cached(
        "WITH gone AS (
             DELETE FROM counts WHERE minute < $1 RETURNING *
         )
         INSERT INTO totals (source, received, duplicates, unverified)
         SELECT source, sum(received), sum(duplicates), sum(unverified) FROM gone
         GROUP BY source
         ON CONFLICT (source) DO UPDATE SET
             received = totals.received + excluded.received,
             duplicates = totals.duplicates + excluded.duplicates,
             unverified = totals.unverified + excluded.unverified",
        &[&keep_from],
    )
    .await?;
    c.execute_cached(
        "WITH gone AS (
             DELETE FROM counts WHERE (source, minute) IN (
                 SELECT source, minute FROM counts WHERE minute < $1
                 GROUP BY source, minute HAVING count(*) > 1)
             RETURNING *
         )
         INSERT INTO counts (source, minute, received, duplicates, unverified, delivered, failed)
         SELECT source, minute, sum(received), sum(duplicates), sum(unverified),
                sum(delivered), sum(failed)
         FROM gone GROUP BY source, minute",
        &[&this_minute],
    )
    .await?;
    Ok(())
}
