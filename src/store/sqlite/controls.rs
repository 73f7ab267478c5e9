//! The embedded store's console records: the control audit (pauses and resumes, the
//! newest [`CONTROL_AUDIT_KEEP`] kept) and revoked console sessions (each kept until
//! it would have expired; housekeeping removes the expired ones), the providers'
//! last good ranges, and the armed handshakes with the secrets they established
//! (`store::secrets`). Their tables are created at open (`schema::TABLES`).

use rusqlite::{Connection, OptionalExtension, params};

use crate::store::{
    Actor, CONTROL_AUDIT_KEEP, ControlAction, ControlEvent, Establish, EstablishedSecret,
    KnownRoute, MAX_ESTABLISHED_SECRETS, StoreError, TokenHash,
};

/// The `console_settings` row holding the "sessions issued until then are revoked"
/// time.
const SESSIONS_REVOKED_UNTIL: &str = "sessions_revoked_until";

pub(super) fn record_control(conn: &Connection, e: &ControlEvent) -> Result<(), StoreError> {
    conn.prepare_cached(
        "INSERT INTO control_audit (at, action, source, route, actor, session, client)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    )?
    .execute(params![
        e.at,
        e.action.as_str(),
        e.source,
        e.route,
        e.by.name,
        e.by.session,
        e.by.client
    ])?;
    // The newest rows are kept: everything below the KEEP-th newest goes.
    conn.prepare_cached(
        "DELETE FROM control_audit WHERE seq <= (SELECT seq FROM control_audit
         ORDER BY seq DESC LIMIT 1 OFFSET ?1)",
    )?
    .execute(params![CONTROL_AUDIT_KEEP as i64])?;
    Ok(())
}

pub(super) fn control_audit(
    conn: &Connection,
    limit: usize,
) -> Result<Vec<ControlEvent>, StoreError> {
    let limit = limit.min(CONTROL_AUDIT_KEEP) as i64;
    let mut stmt = conn.prepare_cached(
        "SELECT at, action, source, route, actor, session, client FROM control_audit
         ORDER BY seq DESC LIMIT ?1",
    )?;
    let rows = stmt
        .query_map(params![limit], |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, String>(1)?,
                ControlEvent {
                    at: 0,
                    action: ControlAction::Pause,
                    source: r.get(2)?,
                    route: r.get(3)?,
                    by: Actor {
                        name: r.get(4)?,
                        session: r.get(5)?,
                        client: r.get(6)?,
                    },
                },
            ))
        })?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(rows
        .into_iter()
        .filter_map(|(at, action, e)| {
            Some(ControlEvent {
                at,
                action: ControlAction::parse(&action)?,
                ..e
            })
        })
        .collect())
}

pub(super) fn revoke_session(
    conn: &Connection,
    id: &str,
    expires_at: i64,
) -> Result<(), StoreError> {
    conn.prepare_cached(
        "INSERT INTO revoked_sessions (id, expires_at) VALUES (?1, ?2)
         ON CONFLICT(id) DO UPDATE SET expires_at = max(expires_at, excluded.expires_at)",
    )?
    .execute(params![id, expires_at])?;
    Ok(())
}

pub(super) fn revoke_sessions_until(conn: &Connection, at: i64) -> Result<(), StoreError> {
    conn.prepare_cached(
        "INSERT INTO console_settings (name, value) VALUES (?1, ?2)
         ON CONFLICT(name) DO UPDATE SET value = max(value, excluded.value)",
    )?
    .execute(params![SESSIONS_REVOKED_UNTIL, at])?;
    Ok(())
}

pub(super) fn session_revoked(
    conn: &Connection,
    id: &str,
    issued_at: i64,
) -> Result<bool, StoreError> {
    let revoked: Option<i64> = conn
        .prepare_cached(
            "SELECT 1 FROM revoked_sessions WHERE id = ?1
             UNION ALL SELECT 1 FROM console_settings WHERE name = ?2 AND value >= ?3
             LIMIT 1",
        )?
        .query_row(params![id, SESSIONS_REVOKED_UNTIL, issued_at], |r| r.get(0))
        .optional()?;
    Ok(revoked.is_some())
}

/// Forget the revocations of sessions that have expired by `now`: they are refused
/// as expired anyway.
pub(super) fn purge_revoked_sessions(conn: &Connection, now: i64) -> Result<usize, StoreError> {
    Ok(conn
        .prepare_cached("DELETE FROM revoked_sessions WHERE expires_at <= ?1")?
        .execute(params![now])?)
}

pub(super) fn save_ranges(
    conn: &Connection,
    url: &str,
    ranges: &crate::store::SavedRanges,
) -> Result<(), StoreError> {
    conn.prepare_cached(
        "INSERT INTO provider_ranges (url, ranges, fetched_at) VALUES (?1, ?2, ?3)
         ON CONFLICT(url) DO UPDATE SET ranges = excluded.ranges, fetched_at = excluded.fetched_at",
    )?
    .execute(params![url, ranges.ranges, ranges.fetched_at])?;
    Ok(())
}

pub(super) fn saved_ranges(
    conn: &Connection,
    url: &str,
) -> Result<Option<crate::store::SavedRanges>, StoreError> {
    Ok(conn
        .prepare_cached("SELECT ranges, fetched_at FROM provider_ranges WHERE url = ?1")?
        .query_row(params![url], |r| {
            Ok(crate::store::SavedRanges {
                ranges: r.get(0)?,
                fetched_at: r.get(1)?,
            })
        })
        .optional()?)
}

pub(super) fn known_routes(conn: &Connection) -> Result<Vec<KnownRoute>, StoreError> {
    let mut stmt =
        conn.prepare_cached("SELECT source, route, destination, retired_at FROM known_routes")?;
    let rows = stmt.query_map([], |r| {
        Ok(KnownRoute {
            source: r.get(0)?,
            route: r.get(1)?,
            destination: r.get(2)?,
            retired_at: r.get(3)?,
        })
    })?;
    Ok(rows.collect::<Result<Vec<_>, _>>()?)
}

pub(super) fn remember_routes(conn: &Connection, routes: &[KnownRoute]) -> Result<(), StoreError> {
    let mut stmt = conn.prepare_cached(
        "INSERT INTO known_routes (source, route, destination, retired_at) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT(source, route) DO UPDATE
             SET destination = excluded.destination, retired_at = excluded.retired_at",
    )?;
    for r in routes {
        stmt.execute(params![r.source, r.route, r.destination, r.retired_at])?;
    }
    Ok(())
}

pub(super) fn forget_route(conn: &Connection, source: &str, route: &str) -> Result<(), StoreError> {
    conn.prepare_cached("DELETE FROM known_routes WHERE source = ?1 AND route = ?2")?
        .execute(params![source, route])?;
    Ok(())
}

pub(super) fn arm_handshake(
    conn: &Connection,
    source: &str,
    until: i64,
    token: &TokenHash,
) -> Result<(), StoreError> {
    conn.prepare_cached(
        "INSERT INTO armed_handshakes (source, until, token_hash) VALUES (?1, ?2, ?3)
         ON CONFLICT(source) DO UPDATE SET until = excluded.until, token_hash = excluded.token_hash",
    )?
    .execute(params![source, until, token.as_str()])?;
    Ok(())
}

pub(super) fn handshake_armed(
    conn: &Connection,
    source: &str,
    now: i64,
) -> Result<Option<i64>, StoreError> {
    Ok(conn
        .prepare_cached("SELECT until FROM armed_handshakes WHERE source = ?1 AND until > ?2")?
        .query_row(params![source, now], |r| r.get(0))
        .optional()?)
}

/// Runs in the writer's transaction: the check, the disarming and the insert are
/// one atomic step. A wrong token writes nothing.
pub(super) fn establish_secret(
    conn: &Connection,
    source: &str,
    secret: &EstablishedSecret,
    token: &TokenHash,
    now: i64,
) -> Result<Establish, StoreError> {
    let armed: Option<String> = conn
        .prepare_cached("SELECT token_hash FROM armed_handshakes WHERE source = ?1 AND until > ?2")?
        .query_row(params![source, now], |r| r.get(0))
        .optional()?;
    match armed {
        None => return Ok(Establish::NotArmed),
        Some(hash) if !token.matches(&hash) => return Ok(Establish::WrongToken),
        Some(_) => {}
    }
    let kept = established_secrets(conn, source)?;
    if let Some(same) = kept.iter().find(|s| s.id == secret.id) {
        conn.prepare_cached("DELETE FROM armed_handshakes WHERE source = ?1")?
            .execute(params![source])?;
        return Ok(Establish::Kept(same.clone()));
    }
    if kept.len() >= MAX_ESTABLISHED_SECRETS {
        return Ok(Establish::Full);
    }
    conn.prepare_cached("DELETE FROM armed_handshakes WHERE source = ?1")?
        .execute(params![source])?;
    conn.prepare_cached(
        "INSERT INTO established_secrets (source, id, secret, established_at)
         VALUES (?1, ?2, ?3, ?4)",
    )?
    .execute(params![
        source,
        secret.id,
        secret.secret,
        secret.established_at
    ])?;
    Ok(Establish::Kept(secret.clone()))
}

pub(super) fn established_secrets(
    conn: &Connection,
    source: &str,
) -> Result<Vec<EstablishedSecret>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT id, secret, established_at FROM established_secrets
         WHERE source = ?1 ORDER BY established_at, id",
    )?;
    let rows = stmt.query_map(params![source], |r| {
        Ok(EstablishedSecret {
            id: r.get(0)?,
            secret: r.get(1)?,
            established_at: r.get(2)?,
        })
    })?;
    Ok(rows.collect::<Result<Vec<_>, _>>()?)
}

pub(super) fn forget_secret(conn: &Connection, source: &str, id: &str) -> Result<bool, StoreError> {
    Ok(conn
        .prepare_cached("DELETE FROM established_secrets WHERE source = ?1 AND id = ?2")?
        .execute(params![source, id])?
        > 0)
}
