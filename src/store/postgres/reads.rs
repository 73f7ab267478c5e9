//! The PostgreSQL store's read models (listings, counts, attempts, audit, dead
//! letters, activity) and pauses. A listing never reads a body, as on the other
//! stores.

use deadpool_postgres::GenericClient;

use super::cached::Cached as _;
use tokio_postgres::types::ToSql;

use super::lines;
use super::rows::{parse_origin, parse_status};
use crate::store::{
    Attempt, AuditEvent, DeadLetter, IdPage, ListQuery, ListedEntry, MinuteActivity, Page,
    PauseTarget, RouteStats, SourceStats, Status, StoreError, id_floor,
};

/// What a listing reads: no headers, no body; the summary derived from the
/// deliveries as `Entry::summary` derives it.
const LISTED_COLUMNS: &str = "e.id, e.source, e.event_id, e.event_type, e.received_at, e.status, \
     (SELECT coalesce(sum(x.attempts), 0)::int8 FROM deliveries x WHERE x.entry_id = e.id), \
     (SELECT min(x.next_attempt_at) FROM deliveries x \
        WHERE x.entry_id = e.id AND x.status = 'pending'), \
     (SELECT x.last_error FROM deliveries x \
        WHERE x.entry_id = e.id AND x.status <> 'delivered' AND x.last_error IS NOT NULL \
        ORDER BY x.position LIMIT 1), \
     e.origin";

/// A listing's query (`limit + 1` rows) and its arguments.
fn list_sql(
    q: &ListQuery,
    columns: &str,
    limit: usize,
) -> (String, Vec<Box<dyn ToSql + Sync + Send>>) {
    let mut args: Vec<Box<dyn ToSql + Sync + Send>> = Vec::new();
    let mut arg = |v: Box<dyn ToSql + Sync + Send>, cast: &str| {
        args.push(v);
        format!("${}::{cast}", args.len())
    };
    let mut sql;
    let id;
    match (&q.route, &q.source, q.status) {
        (Some(route), Some(source), Some(status)) => {
            let source = arg(Box::new(source.clone()), "text");
            let route = arg(Box::new(route.clone()), "text");
            let status = arg(Box::new(status.as_str().to_string()), "text");
            sql = format!(
                "SELECT {columns} FROM deliveries d JOIN entries e ON e.id = d.entry_id
                 WHERE d.source = {source} AND d.route = {route} AND d.status = {status}"
            );
            id = "d.entry_id";
        }
        (Some(route), source, status) => {
            let route = arg(Box::new(route.clone()), "text");
            let status = match status {
                Some(s) => format!(
                    " AND d.status = {}",
                    arg(Box::new(s.as_str().to_string()), "text")
                ),
                None => String::new(),
            };
            sql = format!(
                "SELECT {columns} FROM entries e WHERE EXISTS (SELECT 1 FROM deliveries d
                     WHERE d.entry_id = e.id AND d.route = {route}{status})"
            );
            if let Some(s) = source {
                sql.push_str(&format!(
                    " AND e.source = {}",
                    arg(Box::new(s.clone()), "text")
                ));
            }
            id = "e.id";
        }
        (None, source, status) => {
            sql = format!("SELECT {columns} FROM entries e WHERE true");
            if let Some(s) = source {
                sql.push_str(&format!(
                    " AND e.source = {}",
                    arg(Box::new(s.clone()), "text")
                ));
            }
            if let Some(status) = status {
                let status = arg(Box::new(status.as_str().to_string()), "text");
                sql.push_str(&format!(" AND e.status = {status}"));
            }
            id = "e.id";
        }
    }
    if let Some(t) = &q.event_type {
        sql.push_str(&format!(
            " AND e.event_type = {}",
            arg(Box::new(t.clone()), "text")
        ));
    }
    if let Some(t) = &q.event_id {
        sql.push_str(&format!(
            " AND e.event_id = {}",
            arg(Box::new(t.clone()), "text")
        ));
    }
    if let Some(since) = q.since {
        sql.push_str(&format!(
            " AND {id} >= {}",
            arg(Box::new(id_floor(since)), "text")
        ));
    }
    if let Some(below) = q.scan_below() {
        sql.push_str(&format!(" AND {id} < {}", arg(Box::new(below), "text")));
    }
    sql.push_str(&format!(" ORDER BY {id} DESC LIMIT {}", limit + 1));
    (sql, args)
}

fn params(args: &[Box<dyn ToSql + Sync + Send>]) -> Vec<&(dyn ToSql + Sync)> {
    args.iter()
        .map(|a| a.as_ref() as &(dyn ToSql + Sync))
        .collect()
}

pub(super) async fn list(
    c: &impl GenericClient,
    q: &ListQuery,
    limit: usize,
) -> Result<Page, StoreError> {
    let (sql, args) = list_sql(q, LISTED_COLUMNS, limit);
    let rows = c.query_cached(&sql, &params(&args)).await?;
    let mut entries = Vec::with_capacity(rows.len());
    for r in &rows {
        let id: String = r.get(0);
        let status: String = r.get(5);
        let origin: String = r.get(9);
        entries.push(ListedEntry {
            origin: parse_origin(&id, &origin)?,
            source: r.get(1),
            event_id: r.get(2),
            event_type: r.get(3),
            received_at: r.get(4),
            status: parse_status(&id, &status)?,
            attempts: u32::try_from(r.get::<_, i64>(6)).unwrap_or(u32::MAX),
            next_attempt_at: r.get(7),
            last_error: r.get(8),
            id,
        });
    }
    Ok(Page::from_overfetched(entries, limit))
}

pub(super) async fn list_ids(
    c: &impl GenericClient,
    q: &ListQuery,
    limit: usize,
) -> Result<IdPage, StoreError> {
    let (sql, args) = list_sql(q, "e.id", limit);
    let ids = c
        .query_cached(&sql, &params(&args))
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect();
    Ok(IdPage::from_overfetched(ids, limit))
}

async fn scalar(
    c: &impl GenericClient,
    sql: &str,
    args: &[&(dyn ToSql + Sync)],
) -> Result<u64, StoreError> {
    let n: i64 = c.query_one_cached(sql, args).await?.get(0);
    Ok(u64::try_from(n).unwrap_or(0))
}

pub(super) async fn count(c: &impl GenericClient, source: &str) -> Result<u64, StoreError> {
    scalar(
        c,
        "SELECT count(*) FROM entries WHERE source = $1",
        &[&source],
    )
    .await
}

pub(super) async fn count_status(
    c: &impl GenericClient,
    source: &str,
    status: Status,
) -> Result<u64, StoreError> {
    scalar(
        c,
        "SELECT count(*) FROM entries WHERE source = $1 AND status = $2",
        &[&source, &status.as_str()],
    )
    .await
}

pub(super) async fn attempts(c: &impl GenericClient, id: &str) -> Result<Vec<Attempt>, StoreError> {
    Ok(c.query_cached(
        "SELECT route, n, at, status_code, error, latency_ms, failure, answer FROM attempts
             WHERE entry_id = $1 ORDER BY at, route, n",
        &[&id],
    )
    .await?
    .iter()
    .map(|r| Attempt {
        route: r.get(0),
        n: u32::try_from(r.get::<_, i32>(1)).unwrap_or(0),
        at: r.get(2),
        status_code: r
            .get::<_, Option<i32>>(3)
            .and_then(|c| u16::try_from(c).ok()),
        failure: crate::failure::stored(r.get::<_, Option<String>>(6).as_deref()),
        error: r.get(4),
        latency_ms: r
            .get::<_, Option<i64>>(5)
            .and_then(|l| u64::try_from(l).ok())
            .unwrap_or(0),
        answer: r.get(7),
    })
    .collect())
}

pub(super) async fn audit(c: &impl GenericClient, id: &str) -> Result<Vec<AuditEvent>, StoreError> {
    Ok(c.query_cached(
        "SELECT at, action, actor, note, route, session, client FROM audit
             WHERE entry_id = $1 ORDER BY at, seq",
        &[&id],
    )
    .await?
    .iter()
    .map(|r| AuditEvent {
        at: r.get(0),
        action: r.get(1),
        actor: r.get::<_, Option<String>>(2).unwrap_or_default(),
        note: r.get(3),
        route: r.get(4),
        session: r.get(5),
        client: r.get(6),
    })
    .collect())
}

pub(super) async fn dead_letters(
    c: &impl GenericClient,
    source: &str,
    route: &str,
    limit: usize,
) -> Result<Vec<DeadLetter>, StoreError> {
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    Ok(c.query_cached(
        "SELECT d.entry_id, e.event_id, e.event_type, e.received_at, d.updated_at,
                    d.attempts, d.last_error, d.last_failure
             FROM deliveries d JOIN entries e ON e.id = d.entry_id
             WHERE d.source = $1 AND d.route = $2 AND d.status = 'dead'
             ORDER BY d.entry_id DESC LIMIT $3",
        &[&source, &route, &limit],
    )
    .await?
    .iter()
    .map(|r| DeadLetter {
        id: r.get(0),
        event_id: r.get(1),
        event_type: r.get(2),
        received_at: r.get(3),
        dead_at: r.get(4),
        attempts: u32::try_from(r.get::<_, i32>(5)).unwrap_or(0),
        last_error: r.get(6),
        failure: crate::failure::stored(r.get::<_, Option<String>>(7).as_deref()),
    })
    .collect())
}

pub(super) async fn activity(
    c: &impl GenericClient,
    source: &str,
    since: i64,
    until: i64,
) -> Result<Vec<MinuteActivity>, StoreError> {
    let n = |v: i64| u64::try_from(v).unwrap_or(0);
    Ok(c.query_cached(
        "SELECT minute, sum(received)::int8, sum(delivered)::int8, sum(failed)::int8
             FROM counts WHERE source = $1 AND minute >= $2 AND minute < $3
             GROUP BY minute
             HAVING sum(received) + sum(delivered) + sum(failed) > 0
             ORDER BY minute",
        &[&source, &since, &until],
    )
    .await?
    .iter()
    .map(|r| MinuteActivity {
        minute: r.get(0),
        received: n(r.get(1)),
        delivered: n(r.get(2)),
        failed: n(r.get(3)),
    })
    .collect())
}

pub(super) async fn record_unverified(
    c: &impl GenericClient,
    source: &str,
    minute: i64,
    n: i64,
) -> Result<(), StoreError> {
    c.execute_cached(
        "INSERT INTO counts (source, minute, unverified) VALUES ($1, $2, $3)",
        &[&source, &minute, &n],
    )
    .await?;
    Ok(())
}

/// (status, count) rows of `sql` (`SELECT status, count(*) … GROUP BY status`).
async fn status_counts(
    c: &impl GenericClient,
    sql: &str,
    args: &[&(dyn ToSql + Sync)],
) -> Result<Vec<(Option<Status>, u64)>, StoreError> {
    Ok(c.query_cached(sql, args)
        .await?
        .iter()
        .map(|r| {
            (
                Status::parse(r.get(0)),
                u64::try_from(r.get::<_, i64>(1)).unwrap_or(0),
            )
        })
        .collect())
}

pub(super) async fn stats(c: &impl GenericClient, source: &str) -> Result<SourceStats, StoreError> {
    let mut stats = SourceStats::default();
    let totals = c
        .query_one_cached(
            "SELECT coalesce(sum(received), 0)::int8, coalesce(sum(duplicates), 0)::int8,
                    coalesce(sum(unverified), 0)::int8
             FROM (SELECT received, duplicates, unverified FROM counts WHERE source = $1
                   UNION ALL
                   SELECT received, duplicates, unverified FROM totals WHERE source = $1) t",
            &[&source],
        )
        .await?;
    let n = |v: i64| u64::try_from(v).unwrap_or(0);
    stats.received = n(totals.get(0));
    stats.duplicates = n(totals.get(1));
    stats.unverified = n(totals.get(2));
    for (status, count) in status_counts(
        c,
        "SELECT status, count(*) FROM entries WHERE source = $1 GROUP BY status",
        &[&source],
    )
    .await?
    {
        match status {
            Some(Status::Pending) => stats.pending = count,
            Some(Status::Delivered) => stats.delivered = count,
            Some(Status::Dead) => stats.dead = count,
            Some(Status::Discarded) => stats.discarded = count,
            Some(Status::Filtered) => stats.filtered = count,
            None => {}
        }
    }
    stats.oldest_pending_at = c
        .query_opt_cached(
            "SELECT received_at FROM entries WHERE source = $1 AND status = 'pending'
             ORDER BY id LIMIT 1",
            &[&source],
        )
        .await?
        .map(|r| r.get(0));
    Ok(stats)
}

pub(super) async fn route_stats(
    c: &impl GenericClient,
    source: &str,
    route: &str,
) -> Result<RouteStats, StoreError> {
    let mut stats = RouteStats::default();
    for (status, n) in status_counts(
        c,
        "SELECT status, count(*) FROM deliveries WHERE source = $1 AND route = $2
         GROUP BY status",
        &[&source, &route],
    )
    .await?
    {
        match status {
            Some(Status::Pending) => stats.pending = n,
            Some(Status::Delivered) => stats.delivered = n,
            Some(Status::Dead) => stats.dead = n,
            Some(Status::Discarded) => stats.discarded = n,
            Some(Status::Filtered) | None => {}
        }
    }
    stats.oldest_pending_at = c
        .query_opt_cached(
            "SELECT e.received_at FROM entries e WHERE e.id = (
                 SELECT d.entry_id FROM deliveries d
                 WHERE d.source = $1 AND d.route = $2 AND d.status = 'pending'
                 ORDER BY d.entry_id LIMIT 1)",
            &[&source, &route],
        )
        .await?
        .map(|r| r.get(0));
    stats.blocked_keys = lines::blocked_keys(c, source, route).await?;
    Ok(stats)
}

pub(super) async fn set_paused(
    c: &impl GenericClient,
    source: &str,
    route: Option<&str>,
    paused: bool,
) -> Result<(), StoreError> {
    match (route, paused) {
        (None, true) => {
            c.execute_cached(
                "INSERT INTO paused_sources (name) VALUES ($1) ON CONFLICT DO NOTHING",
                &[&source],
            )
            .await?
        }
        (None, false) => {
            c.execute_cached("DELETE FROM paused_sources WHERE name = $1", &[&source])
                .await?
        }
        (Some(route), true) => {
            c.execute_cached(
                "INSERT INTO paused_routes (source, route) VALUES ($1, $2) ON CONFLICT DO NOTHING",
                &[&source, &route],
            )
            .await?
        }
        (Some(route), false) => {
            c.execute_cached(
                "DELETE FROM paused_routes WHERE source = $1 AND route = $2",
                &[&source, &route],
            )
            .await?
        }
    };
    Ok(())
}

pub(super) async fn paused(c: &impl GenericClient) -> Result<Vec<PauseTarget>, StoreError> {
    let mut targets: Vec<PauseTarget> = c
        .query_cached(
            "SELECT name, NULL::text FROM paused_sources
             UNION ALL SELECT source, route FROM paused_routes",
            &[],
        )
        .await?
        .iter()
        .map(|r| PauseTarget {
            source: r.get(0),
            route: r.get(1),
        })
        .collect();
    targets.sort();
    Ok(targets)
}
