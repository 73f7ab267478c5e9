//! The PostgreSQL store's part of reconciliation (`store::Reconciling`): dedupe
//! lookups on the `dedupe` table's key, the origin of an entry with its audit event,
//! and each source's lease and state in `reconcile` (`schema::V10`).

use deadpool_postgres::GenericClient;

use super::cached::Cached as _;
use super::delivery;
use crate::store::reconcile::in_asked_order;
use crate::store::{Actor, Origin, RECOVERED_ACTION, RECOVERED_ACTOR, ReconcileLease, StoreError};

/// Which of `keys` of `source` the dedupe table holds at `now`, with the entry each
/// names, in the order asked (`Reconciling::dedupe_lookup`): one statement, the keys
/// joined as a set to the table's primary key (not `= ANY($2)`: see
/// `rows::load_entries`).
pub(super) async fn dedupe_lookup(
    c: &impl GenericClient,
    source: &str,
    keys: &[String],
    now: i64,
) -> Result<Vec<Option<String>>, StoreError> {
    if keys.is_empty() {
        return Ok(Vec::new());
    }
    let found = c
        .query_cached(
            "SELECT d.dkey, d.entry_id FROM unnest($2::text[]) AS k(want)
             JOIN dedupe d ON d.source = $1 AND d.dkey = k.want
             WHERE d.expires_at > $3",
            &[&source, &keys, &now],
        )
        .await?;
    Ok(in_asked_order(
        keys,
        found.iter().map(|r| (r.get(0), r.get(1))),
    ))
}

/// Set the origin of entry `id` and add its `recovered` audit event, in `tx`;
/// whether the entry is there.
pub(super) async fn mark_origin(
    tx: &impl GenericClient,
    id: &str,
    origin: Origin,
    note: &str,
    now: i64,
) -> Result<bool, StoreError> {
    let changed = tx
        .execute_cached(
            "UPDATE entries SET origin = $2 WHERE id = $1",
            &[&id, &origin.as_str()],
        )
        .await?;
    if changed == 0 {
        return Ok(false);
    }
    delivery::audit(
        tx,
        id,
        now,
        RECOVERED_ACTION,
        &Actor::from(RECOVERED_ACTOR),
        Some(note),
        None,
    )
    .await?;
    Ok(true)
}

/// Take `source`'s lease for `holder` until `until`, unless another holder's runs
/// past `now` (`Reconciling::lease_reconcile`), in `tx`: the upsert locks the
/// source's row whether or not it takes the lease, so the row read after it is the
/// one that refused it.
pub(super) async fn lease(
    tx: &impl GenericClient,
    source: &str,
    holder: &str,
    now: i64,
    until: i64,
) -> Result<ReconcileLease, StoreError> {
    let taken = tx
        .query_opt_cached(
            "INSERT INTO reconcile (source, holder, until) VALUES ($1, $2, $4)
             ON CONFLICT (source) DO UPDATE SET holder = excluded.holder, until = excluded.until
             WHERE reconcile.holder IS NULL OR reconcile.holder = excluded.holder
                OR reconcile.until <= $3
             RETURNING state",
            &[&source, &holder, &now, &until],
        )
        .await?;
    if let Some(row) = taken {
        return Ok(ReconcileLease::Taken { state: row.get(0) });
    }
    let row = tx
        .query_one_cached(
            "SELECT holder, until FROM reconcile WHERE source = $1",
            &[&source],
        )
        .await?;
    match (row.get(0), row.get(1)) {
        (Some(holder), Some(until)) => Ok(ReconcileLease::Held { holder, until }),
        // Not reachable: the upsert takes a lease nobody holds.
        _ => Err(StoreError::Unavailable(
            "a reconciliation lease refused without a holder",
        )),
    }
}

/// Keep `state` as `source`'s if `holder` holds its lease at `now`; whether it was
/// kept (`Reconciling::save_reconcile`).
pub(super) async fn save(
    c: &impl GenericClient,
    source: &str,
    holder: &str,
    state: &str,
    now: i64,
) -> Result<bool, StoreError> {
    let kept = c
        .execute_cached(
            "UPDATE reconcile SET state = $3 WHERE source = $1 AND holder = $2 AND until > $4",
            &[&source, &holder, &state, &now],
        )
        .await?;
    Ok(kept == 1)
}

/// End `holder`'s lease on `source`, if it holds it (`Reconciling::release_reconcile`).
pub(super) async fn release(
    c: &impl GenericClient,
    source: &str,
    holder: &str,
) -> Result<(), StoreError> {
    c.execute_cached(
        "UPDATE reconcile SET holder = NULL, until = NULL WHERE source = $1 AND holder = $2",
        &[&source, &holder],
    )
    .await?;
    Ok(())
}
