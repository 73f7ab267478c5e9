//! The PostgreSQL store's shared records: the control audit (the newest
//! `CONTROL_AUDIT_KEEP` kept), revoked console sessions, and the send slots of
//! paced routes (GCRA, `store::pace`), which every gateway on the database shares:
//! a slot is taken under the pace row's lock, so two gateways never take one twice.

use deadpool_postgres::GenericClient;

use super::cached::Cached as _;

use crate::store::pace::{self, ceil_ms};
use crate::store::{
    Actor, CONTROL_AUDIT_KEEP, ControlAction, ControlEvent, Establish, EstablishedSecret,
    MAX_ESTABLISHED_SECRETS, StoreError, TokenHash,
};

/// The `console_settings` row holding the "sessions issued until then are revoked"
/// time.
const SESSIONS_REVOKED_UNTIL: &str = "sessions_revoked_until";

pub(super) async fn record_control(
    c: &impl GenericClient,
    e: &ControlEvent,
) -> Result<(), StoreError> {
    let seq: i64 = c
        .query_cached(
            "INSERT INTO control_audit (at, action, source, route, actor, session, client)
             VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING seq",
            &[
                &e.at,
                &e.action.as_str(),
                &e.source,
                &e.route,
                &e.by.name,
                &e.by.session,
                &e.by.client,
            ],
        )
        .await?
        .first()
        .map_or(0, |r| r.get(0));
    // The newest rows are kept. Trimming is done every TRIM_EVERY records, not on
    // each: concurrent trims delete the same old rows and wait on each other's
    // locks. Reads never answer more than the newest CONTROL_AUDIT_KEEP.
    if seq % TRIM_EVERY == 0 {
        let keep = i64::try_from(CONTROL_AUDIT_KEEP).unwrap_or(i64::MAX);
        c.execute_cached(
            "DELETE FROM control_audit WHERE seq <= (SELECT seq FROM control_audit
             ORDER BY seq DESC LIMIT 1 OFFSET $1)",
            &[&keep],
        )
        .await?;
    }
    Ok(())
}

/// How often (in records) the control audit is trimmed to its newest rows.
const TRIM_EVERY: i64 = 64;

pub(super) async fn control_audit(
    c: &impl GenericClient,
    limit: usize,
) -> Result<Vec<ControlEvent>, StoreError> {
    let limit = i64::try_from(limit.min(CONTROL_AUDIT_KEEP)).unwrap_or(0);
    Ok(c.query_cached(
        "SELECT at, action, source, route, actor, session, client FROM control_audit
             ORDER BY seq DESC LIMIT $1",
        &[&limit],
    )
    .await?
    .iter()
    .filter_map(|r| {
        Some(ControlEvent {
            at: r.get(0),
            action: ControlAction::parse(r.get(1))?,
            source: r.get(2),
            route: r.get(3),
            by: Actor {
                name: r.get(4),
                session: r.get(5),
                client: r.get(6),
            },
        })
    })
    .collect())
}

pub(super) async fn revoke_session(
    c: &impl GenericClient,
    id: &str,
    expires_at: i64,
) -> Result<(), StoreError> {
    c.execute_cached(
        "INSERT INTO revoked_sessions (id, expires_at) VALUES ($1, $2)
         ON CONFLICT (id) DO UPDATE
             SET expires_at = greatest(revoked_sessions.expires_at, excluded.expires_at)",
        &[&id, &expires_at],
    )
    .await?;
    Ok(())
}

pub(super) async fn revoke_sessions_until(
    c: &impl GenericClient,
    at: i64,
) -> Result<(), StoreError> {
    c.execute_cached(
        "INSERT INTO console_settings (name, value) VALUES ($1, $2)
         ON CONFLICT (name) DO UPDATE
             SET value = greatest(console_settings.value, excluded.value)",
        &[&SESSIONS_REVOKED_UNTIL, &at],
    )
    .await?;
    Ok(())
}

pub(super) async fn session_revoked(
    c: &impl GenericClient,
    id: &str,
    issued_at: i64,
) -> Result<bool, StoreError> {
    Ok(c.query_opt_cached(
        "SELECT 1 FROM revoked_sessions WHERE id = $1
             UNION ALL SELECT 1 FROM console_settings WHERE name = $2 AND value >= $3
             LIMIT 1",
        &[&id, &SESSIONS_REVOKED_UNTIL, &issued_at],
    )
    .await?
    .is_some())
}

/// Forget the revocations of sessions that have expired by `now`.
pub(super) async fn purge_revoked_sessions(
    c: &impl GenericClient,
    now: i64,
) -> Result<(), StoreError> {
    c.execute_cached(
        "DELETE FROM revoked_sessions WHERE expires_at <= $1",
        &[&now],
    )
    .await?;
    Ok(())
}

/// The arrival time (µs) of `route` of `source`, its row locked until the caller's
/// transaction ends (created at 0 when missing).
async fn locked_tat(c: &impl GenericClient, source: &str, route: &str) -> Result<i64, StoreError> {
    c.execute_cached(
        "INSERT INTO paces (source, route, tat) VALUES ($1, $2, 0) ON CONFLICT DO NOTHING",
        &[&source, &route],
    )
    .await?;
    Ok(c.query_one_cached(
        "SELECT tat FROM paces WHERE source = $1 AND route = $2 FOR UPDATE",
        &[&source, &route],
    )
    .await?
    .get(0))
}

async fn set_tat(
    c: &impl GenericClient,
    source: &str,
    route: &str,
    tat: i64,
) -> Result<(), StoreError> {
    c.execute_cached(
        "UPDATE paces SET tat = $3 WHERE source = $1 AND route = $2",
        &[&source, &route, &tat],
    )
    .await?;
    Ok(())
}

/// `Pacing::take_send_slot`, in the caller's transaction.
pub(super) async fn take_send_slot(
    c: &impl GenericClient,
    source: &str,
    route: &str,
    now: i64,
    spacing_us: i64,
    burst: u32,
) -> Result<Option<i64>, StoreError> {
    let tat = locked_tat(c, source, route).await?;
    match pace::gcra(tat, now.saturating_mul(1000), spacing_us, burst) {
        Ok(next) => {
            set_tat(c, source, route, next).await?;
            Ok(None)
        }
        Err(at_us) => Ok(Some(ceil_ms(at_us))),
    }
}

/// `Pacing::hold_send_slots`, in the caller's transaction.
pub(super) async fn hold_send_slots(
    c: &impl GenericClient,
    source: &str,
    route: &str,
    until: i64,
    spacing_us: i64,
    burst: u32,
) -> Result<(), StoreError> {
    let tat = locked_tat(c, source, route).await?;
    let held = pace::held(tat, until.saturating_mul(1000), spacing_us, burst);
    if held != tat {
        set_tat(c, source, route, held).await?;
    }
    Ok(())
}

pub(super) async fn save_ranges(
    c: &impl GenericClient,
    url: &str,
    ranges: &crate::store::SavedRanges,
) -> Result<(), StoreError> {
    c.execute_cached(
        "INSERT INTO provider_ranges (url, ranges, fetched_at) VALUES ($1, $2, $3)
         ON CONFLICT (url) DO UPDATE
             SET ranges = excluded.ranges, fetched_at = excluded.fetched_at",
        &[&url, &ranges.ranges, &ranges.fetched_at],
    )
    .await?;
    Ok(())
}

pub(super) async fn saved_ranges(
    c: &impl GenericClient,
    url: &str,
) -> Result<Option<crate::store::SavedRanges>, StoreError> {
    Ok(c.query_opt_cached(
        "SELECT ranges, fetched_at FROM provider_ranges WHERE url = $1",
        &[&url],
    )
    .await?
    .map(|row| crate::store::SavedRanges {
        ranges: row.get(0),
        fetched_at: row.get(1),
    }))
}

pub(super) async fn known_routes(
    c: &impl GenericClient,
) -> Result<Vec<crate::store::KnownRoute>, StoreError> {
    Ok(c.query_cached(
        "SELECT source, route, destination, retired_at FROM known_routes",
        &[],
    )
    .await?
    .into_iter()
    .map(|row| crate::store::KnownRoute {
        source: row.get(0),
        route: row.get(1),
        destination: row.get(2),
        retired_at: row.get(3),
    })
    .collect())
}

pub(super) async fn remember_routes(
    c: &impl GenericClient,
    routes: &[crate::store::KnownRoute],
) -> Result<(), StoreError> {
    for r in routes {
        c.execute_cached(
            "INSERT INTO known_routes (source, route, destination, retired_at)
             VALUES ($1, $2, $3, $4)
             ON CONFLICT (source, route) DO UPDATE
                 SET destination = excluded.destination, retired_at = excluded.retired_at",
            &[&r.source, &r.route, &r.destination, &r.retired_at],
        )
        .await?;
    }
    Ok(())
}

pub(super) async fn forget_route(
    c: &impl GenericClient,
    source: &str,
    route: &str,
) -> Result<(), StoreError> {
    c.execute_cached(
        "DELETE FROM known_routes WHERE source = $1 AND route = $2",
        &[&source, &route],
    )
    .await?;
    Ok(())
}

pub(super) async fn arm_handshake(
    c: &impl GenericClient,
    source: &str,
    until: i64,
    token: &TokenHash,
) -> Result<(), StoreError> {
    c.execute_cached(
        "INSERT INTO armed_handshakes (source, until, token_hash) VALUES ($1, $2, $3)
         ON CONFLICT (source) DO UPDATE
         SET until = excluded.until, token_hash = excluded.token_hash",
        &[&source, &until, &token.as_str()],
    )
    .await?;
    Ok(())
}

pub(super) async fn handshake_armed(
    c: &impl GenericClient,
    source: &str,
    now: i64,
) -> Result<Option<i64>, StoreError> {
    Ok(c.query_opt_cached(
        "SELECT until FROM armed_handshakes WHERE source = $1 AND until > $2",
        &[&source, &now],
    )
    .await?
    .map(|row| row.get(0)))
}

/// In a transaction: the armed row is locked (`FOR UPDATE`), so of two handshakes
/// at once on two gateways, the second finds it gone. A wrong token writes nothing.
pub(super) async fn establish_secret(
    c: &impl GenericClient,
    source: &str,
    secret: &EstablishedSecret,
    token: &TokenHash,
    now: i64,
) -> Result<Establish, StoreError> {
    let armed = c
        .query_opt_cached(
            "SELECT token_hash FROM armed_handshakes WHERE source = $1 AND until > $2
             FOR UPDATE",
            &[&source, &now],
        )
        .await?;
    match armed.map(|row| row.get::<_, String>(0)) {
        None => return Ok(Establish::NotArmed),
        Some(hash) if !token.matches(&hash) => return Ok(Establish::WrongToken),
        Some(_) => {}
    }
    let kept = established_secrets(c, source).await?;
    let outcome = match kept.iter().find(|s| s.id == secret.id) {
        Some(same) => Establish::Kept(same.clone()),
        None if kept.len() >= MAX_ESTABLISHED_SECRETS => return Ok(Establish::Full),
        None => {
            c.execute_cached(
                "INSERT INTO established_secrets (source, id, secret, established_at)
                 VALUES ($1, $2, $3, $4)",
                &[&source, &secret.id, &secret.secret, &secret.established_at],
            )
            .await?;
            Establish::Kept(secret.clone())
        }
    };
    c.execute_cached("DELETE FROM armed_handshakes WHERE source = $1", &[&source])
        .await?;
    Ok(outcome)
}

pub(super) async fn established_secrets(
    c: &impl GenericClient,
    source: &str,
) -> Result<Vec<EstablishedSecret>, StoreError> {
    Ok(c.query_cached(
        "SELECT id, secret, established_at FROM established_secrets
         WHERE source = $1 ORDER BY established_at, id",
        &[&source],
    )
    .await?
    .iter()
    .map(|row| EstablishedSecret {
        id: row.get(0),
        secret: row.get(1),
        established_at: row.get(2),
    })
    .collect())
}

pub(super) async fn forget_secret(
    c: &impl GenericClient,
    source: &str,
    id: &str,
) -> Result<bool, StoreError> {
    Ok(c.execute_cached(
        "DELETE FROM established_secrets WHERE source = $1 AND id = $2",
        &[&source, &id],
    )
    .await?
        > 0)
}
