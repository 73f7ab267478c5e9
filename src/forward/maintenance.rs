//! The forwarder's periodic maintenance pass: store housekeeping, retention (in
//! bounded steps, so a long purge never stalls ingest; rejected requests as long as
//! dead letters), and the per-source and per-route gauges (pending, dead, age of
//! the oldest pending entry; a source quiet, `quiet`).

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::Forwarder;
use crate::store::HousekeepingPass;

/// Entries purged per retention step (the step repeats while it fills up).
const PURGE_BATCH: usize = 500;

/// One pass. `routes` are (source, route) of every configured route.
pub(super) async fn run(
    fwd: &Forwarder,
    sources: &[String],
    routes: &[(String, String)],
    shutdown: &CancellationToken,
) {
    if let Err(e) = fwd
        .store
        .housekeeping(HousekeepingPass::Periodic, sources)
        .await
    {
        tracing::warn!(error = %e, "store housekeeping failed");
    }
    let now = fwd.clock.now_ms();
    let retention = fwd.plan().retention.clone();
    let ms = |d: Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
    let delivered_before = now.saturating_sub(ms(retention.delivered));
    let dead_before = now.saturating_sub(ms(retention.dead));
    // Bounded steps, yielding between them, so retention never stalls ingest.
    for _ in 0..20 {
        if shutdown.is_cancelled() {
            return;
        }
        match fwd
            .store
            .purge(now, delivered_before, dead_before, PURGE_BATCH)
            .await
        {
            Ok(p) => {
                if p.entries > 0 || p.dedupe_keys > 0 {
                    tracing::info!(
                        entries = p.entries,
                        dedupe_keys = p.dedupe_keys,
                        "retention purged"
                    );
                }
                if p.entries < PURGE_BATCH as u64 && p.dedupe_keys < PURGE_BATCH as u64 {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Err(e) => {
                tracing::warn!(error = %e, "retention pass failed");
                break;
            }
        }
    }
    // Rejected requests are kept as long as dead letters.
    match fwd.store.purge_rejections(dead_before).await {
        Ok(n) if n > 0 => tracing::info!(rejections = n, "retention purged rejected requests"),
        Ok(_) => {}
        Err(e) => tracing::warn!(error = %e, "retention of rejected requests failed"),
    }
    for s in sources {
        if let Ok(stats) = fwd.store.stats(s).await {
            metrics::gauge!("hookgate_dead_entries", "source" => s.clone()).set(stats.dead as f64);
            metrics::gauge!("hookgate_pending_entries", "source" => s.clone())
                .set(stats.pending as f64);
            let age = stats
                .oldest_pending_at
                .map(|t| ((now - t).max(0) as f64) / 1000.0)
                .unwrap_or(0.0);
            metrics::gauge!("hookgate_oldest_pending_age_seconds", "source" => s.clone()).set(age);
        }
    }
    retired_gauges(fwd, routes).await;
    super::quiet::gauges(fwd, &fwd.plan().expects).await;
    for (s, r) in routes {
        if let Ok(stats) = fwd.store.route_stats(s, r).await {
            metrics::gauge!("hookgate_route_dead_deliveries", "source" => s.clone(), "route" => r.clone())
                .set(stats.dead as f64);
            metrics::gauge!("hookgate_route_pending_deliveries", "source" => s.clone(), "route" => r.clone())
                .set(stats.pending as f64);
            metrics::gauge!("hookgate_route_blocked_keys", "source" => s.clone(), "route" => r.clone())
                .set(stats.blocked_keys as f64);
            let age = stats
                .oldest_pending_at
                .map(|t| ((now - t).max(0) as f64) / 1000.0)
                .unwrap_or(0.0);
            metrics::gauge!("hookgate_route_oldest_pending_age_seconds", "source" => s.clone(), "route" => r.clone())
                .set(age);
            if fwd.plan().routes.iter().any(|x| {
                x.source == *s
                    && x.name == *r
                    && x.config.target.kind() == crate::config::DestinationKind::Pull
            }) {
                super::pull::backlog_gauges(s, r, stats.pending, age);
            }
        }
    }
}

/// `hookgate_route_retired_pending` of every retired route (one the route registry
/// holds that the table in force lacks): the deliveries it keeps, unsent. A route
/// back in the table, or forgotten, has its series set to 0.
pub(super) async fn retired_gauges(fwd: &Forwarder, routes: &[(String, String)]) {
    let Ok(known) = fwd.store.known_routes().await else {
        return;
    };
    let mut now_retired = std::collections::HashSet::new();
    for k in known {
        if routes.iter().any(|(s, r)| *s == k.source && *r == k.route) {
            continue;
        }
        if let Ok(stats) = fwd.store.route_stats(&k.source, &k.route).await {
            metrics::gauge!("hookgate_route_retired_pending", "source" => k.source.clone(), "route" => k.route.clone())
                .set(stats.pending as f64);
            now_retired.insert((k.source, k.route));
        }
    }
    let Ok(mut reported) = fwd.retired.lock() else {
        return;
    };
    for (source, route) in reported.difference(&now_retired) {
        metrics::gauge!("hookgate_route_retired_pending", "source" => source.clone(), "route" => route.clone())
            .set(0.0);
    }
    *reported = now_retired;
}
