//! The embedded store's gateways (`store::gateways`). One serving process owns the
//! embedded store, so the list holds it (and the runs before it, for an hour), the
//! store's clock is that process's, and no lease is ever taken over: a restart takes
//! back a dead run's leases at `Start` (`housekeeping`).

use rusqlite::{Connection, OptionalExtension, params};

use crate::store::StoreError;
use crate::store::gateways::{
    ALIVE_WITHIN, FORGET_AFTER, GatewayInfo, Heartbeat, HeartbeatAck, ms, salt_from,
};

/// The name of the salt's row in `store_settings`.
const SALT: &str = "config_salt";

/// Record `beat` at `now`, forgetting the gateways not seen for `FORGET_AFTER`.
pub(super) fn heartbeat(
    conn: &Connection,
    beat: &Heartbeat,
    now: i64,
) -> Result<HeartbeatAck, StoreError> {
    conn.prepare_cached(
        "INSERT INTO gateways (id, host, version, started, last_seen) VALUES (?1, ?2, ?3, ?4, ?5)
         ON CONFLICT(id) DO UPDATE SET host = excluded.host, version = excluded.version,
             started = excluded.started, last_seen = excluded.last_seen",
    )?
    .execute(params![beat.id, beat.host, beat.version, beat.started, now])?;
    conn.prepare_cached("DELETE FROM gateways WHERE last_seen < ?1")?
        .execute(params![now - ms(FORGET_AFTER)])?;
    Ok(HeartbeatAck {
        at: now,
        taken_over: false,
    })
}

/// The gateways seen within `FORGET_AFTER` of `now`, by id.
pub(super) fn gateways(conn: &Connection, now: i64) -> Result<Vec<GatewayInfo>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT id, host, version, started, last_seen FROM gateways
         WHERE last_seen >= ?1 ORDER BY id",
    )?;
    let rows = stmt.query_map(params![now - ms(FORGET_AFTER)], |r| {
        let last_seen: i64 = r.get(4)?;
        Ok(GatewayInfo {
            id: r.get(0)?,
            host: r.get(1)?,
            version: r.get(2)?,
            started: r.get(3)?,
            last_seen,
            alive: now - last_seen < ms(ALIVE_WITHIN),
        })
    })?;
    Ok(rows.collect::<Result<Vec<_>, _>>()?)
}

/// Keep `fresh` as the store's salt unless it has one; answer the one kept.
pub(super) fn config_salt(conn: &Connection, fresh: &[u8; 32]) -> Result<[u8; 32], StoreError> {
    conn.prepare_cached(
        "INSERT INTO store_settings (name, value) VALUES (?1, ?2) ON CONFLICT(name) DO NOTHING",
    )?
    .execute(params![SALT, fresh.as_slice()])?;
    let kept: Option<Vec<u8>> = conn
        .prepare_cached("SELECT value FROM store_settings WHERE name = ?1")?
        .query_row(params![SALT], |r| r.get(0))
        .optional()?;
    salt_from(kept.as_deref().unwrap_or_default())
}
