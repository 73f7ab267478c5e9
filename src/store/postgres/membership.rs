//! The PostgreSQL store's gateways (`store::gateways`): heartbeats stamped with the
//! server's clock (`clock_timestamp()`), the list, the takeover of a dead gateway's
//! leases, and the configuration salt.
//!
//! Heartbeats go out on the relaxed pool (no wait for a synchronous standby): a
//! standby that stops answering must not stop every gateway's heartbeat, and so
//! every delivery. After a failover the promoted standby may hold heartbeats a
//! little older than the primary had; `heartbeat_clock` sees the silence of every
//! heartbeat during the failover and counts each gateway's silence again from the
//! first heartbeat after it, so the failover hands no lease over by itself.
//!
//! A dead gateway's leases end in one statement (`lease_until = 0`, as if they had
//! run out), once per death: the gateway's row is marked `taken_over` in the same
//! transaction, and unmarked by its next heartbeat. The statement reads the
//! deliveries table without an index (naming `lease_holder` in one would cost
//! every claim its HOT update); it runs once per gateway that dies.

use deadpool_postgres::GenericClient;

use super::cached::Cached as _;
use crate::store::StoreError;
use crate::store::gateways::{
    ALIVE_WITHIN, DEAD_AFTER, FORGET_AFTER, GatewayInfo, Heartbeat, HeartbeatAck, RESUME_GAP,
    TakeOver, ms, new_salt, salt_from,
};

/// The server's time, in unix ms.
const STORE_NOW: &str = "SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint";

/// The name of the salt's row in `store_settings`.
const SALT: &str = "config_salt";

async fn store_now(c: &impl GenericClient) -> Result<i64, StoreError> {
    Ok(c.query_one_cached(STORE_NOW, &[]).await?.get(0))
}

/// Record `beat` (in the transaction `c`): the heartbeat clock, the gateway's row,
/// and the rows of gateways forgotten.
pub(super) async fn heartbeat(
    c: &impl GenericClient,
    beat: &Heartbeat,
) -> Result<HeartbeatAck, StoreError> {
    let now = store_now(c).await?;
    c.execute_cached(
        "INSERT INTO heartbeat_clock (id, last_beat, resumed_at) VALUES (1, $1, $1)
         ON CONFLICT (id) DO UPDATE SET
             resumed_at = CASE WHEN heartbeat_clock.last_beat < $1 - $2 THEN $1
                               ELSE heartbeat_clock.resumed_at END,
             last_beat = GREATEST(heartbeat_clock.last_beat, $1)",
        &[&now, &ms(RESUME_GAP)],
    )
    .await?;
    let taken_over = c
        .query_opt_cached(
            "SELECT taken_over FROM gateways WHERE id = $1 FOR UPDATE",
            &[&beat.id],
        )
        .await?
        .is_some_and(|r| r.get::<_, bool>(0));
    c.execute_cached(
        "INSERT INTO gateways (id, host, version, started, last_seen)
         VALUES ($1, $2, $3, $4, $5)
         ON CONFLICT (id) DO UPDATE SET host = EXCLUDED.host, version = EXCLUDED.version,
             started = EXCLUDED.started, last_seen = EXCLUDED.last_seen, taken_over = false",
        &[&beat.id, &beat.host, &beat.version, &beat.started, &now],
    )
    .await?;
    c.execute_cached(
        "DELETE FROM gateways WHERE last_seen < $1",
        &[&(now - ms(FORGET_AFTER))],
    )
    .await?;
    Ok(HeartbeatAck {
        at: now,
        taken_over,
    })
}

/// The gateways seen within `FORGET_AFTER`, by id.
pub(super) async fn gateways(c: &impl GenericClient) -> Result<Vec<GatewayInfo>, StoreError> {
    let now = store_now(c).await?;
    let rows = c
        .query_cached(
            "SELECT id, host, version, started, last_seen FROM gateways
             WHERE last_seen >= $1 ORDER BY id",
            &[&(now - ms(FORGET_AFTER))],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| {
            let last_seen: i64 = r.get(4);
            GatewayInfo {
                id: r.get(0),
                host: r.get(1),
                version: r.get(2),
                started: r.get(3),
                last_seen,
                alive: now - last_seen < ms(ALIVE_WITHIN),
            }
        })
        .collect())
}

/// End the leases of the gateways dead by the server's clock and not taken over yet
/// (in the transaction `c`), other than `by`.
pub(super) async fn take_over_dead(
    c: &impl GenericClient,
    by: &str,
) -> Result<TakeOver, StoreError> {
    let now = store_now(c).await?;
    let silent_since = now - ms(DEAD_AFTER);
    let gateways: Vec<String> = c
        .query_cached(
            "UPDATE gateways g SET taken_over = true FROM heartbeat_clock h
             WHERE h.id = 1 AND NOT g.taken_over AND g.id <> $3
               AND g.last_seen <= $1 AND h.resumed_at <= $1 AND g.last_seen >= $2
             RETURNING g.id",
            &[&silent_since, &(now - ms(FORGET_AFTER)), &by],
        )
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect();
    if gateways.is_empty() {
        return Ok(TakeOver::default());
    }
    let leases = c
        .execute_cached(
            "UPDATE deliveries SET lease_until = 0
             WHERE lease_holder = ANY($1) AND lease_until > 0",
            &[&gateways],
        )
        .await?;
    Ok(TakeOver { gateways, leases })
}

/// The store's salt, created by the first caller.
pub(super) async fn config_salt(c: &impl GenericClient) -> Result<[u8; 32], StoreError> {
    let fresh = new_salt()?;
    c.execute_cached(
        "INSERT INTO store_settings (name, value) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING",
        &[&SALT, &fresh.as_slice()],
    )
    .await?;
    let row = c
        .query_one_cached("SELECT value FROM store_settings WHERE name = $1", &[&SALT])
        .await?;
    salt_from(row.get::<_, &[u8]>(0))
}
